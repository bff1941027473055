/* kb.fs: directories (mkdir, list, exists, stat, chmod), remove and the
 * path functions (join, dirname, basename, abspath, tmpdir). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>

#include "fs_internal.h"
#include "kb/lua_util.h"

/* ---- directories --------------------------------------------------------- */

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int kb__fs_mkdir(lua_State *L) {
  size_t len;
  const char *path = luaL_checklstring(L, 1, &len);
  if (len == 0) return kb__fs_fail(L, "mkdir", "cannot create directory", path, ENOENT);
  lua_settop(L, 1);
  if (mkdir(path, 0777) == 0 || (errno == EEXIST && is_dir(path))) return 1;
  if (errno != ENOENT) return kb__fs_fail(L, "mkdir", "cannot create directory", path, errno);
  /* create the missing parents, then path itself; an existing file in the
   * way makes the next mkdir fail with ENOTDIR */
  char *buf = lua_newuserdatauv(L, len + 1, 0);
  memcpy(buf, path, len + 1);
  for (size_t i = 1; i <= len; i++) {
    if ((buf[i] != '/' && buf[i] != '\0') || buf[i - 1] == '/') continue;
    char saved = buf[i];
    buf[i] = '\0';
    int err = mkdir(buf, 0777) == 0 ? 0 : errno;
    buf[i] = saved;
    if (err && err != EEXIST) return kb__fs_fail(L, "mkdir", "cannot create directory", path, err);
  }
  if (!is_dir(path)) return kb__fs_fail(L, "mkdir", "cannot create directory", path, EEXIST);
  lua_settop(L, 1);
  return 1;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int kb__fs_list(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  fs_guard *g = kb__fs_push_guard(L, 0);
  g->dir = opendir(path);
  if (!g->dir) return kb__fs_fail(L, "list", "cannot list", path, errno);
  lua_newtable(L); /* the names, unsorted, anchoring the strings */
  int names = lua_gettop(L);
  lua_Integer n = 0;
  struct dirent *de;
  for (;;) {
    errno = 0;
    if (!(de = readdir(g->dir))) break;
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    lua_pushstring(L, de->d_name);
    lua_rawseti(L, names, ++n);
  }
  if (errno) return kb__fs_fail(L, "list", "cannot list", path, errno);
  const char **sorted = lua_newuserdatauv(L, (size_t)n * sizeof *sorted + 1, 0);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, names, i);
    sorted[i - 1] = lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_names);
  lua_createtable(L, (int)n, 0);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_pushstring(L, sorted[i - 1]);
    lua_rawseti(L, -2, i);
  }
  kb_mark_array(L, -1);
  return 1;
}

static const char *type_name(mode_t mode) {
  return S_ISREG(mode) ? "file" : S_ISDIR(mode) ? "dir" : "other";
}

int kb__fs_exists(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  struct stat st;
  if (stat(path, &st) == 0) {
    lua_pushstring(L, type_name(st.st_mode));
  } else if (errno == ENOENT || errno == ENOTDIR) {
    lua_pushboolean(L, 0);
  } else {
    return kb__fs_fail(L, "exists", "cannot stat", path, errno);
  }
  return 1;
}

int kb__fs_stat(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  struct stat st;
  if (stat(path, &st) != 0) return kb__fs_fail(L, "stat", "cannot stat", path, errno);
  lua_createtable(L, 0, 4);
  lua_pushstring(L, type_name(st.st_mode));
  lua_setfield(L, -2, "type");
  lua_pushinteger(L, (lua_Integer)st.st_size);
  lua_setfield(L, -2, "size");
  lua_pushnumber(L, (lua_Number)st.st_mtim.tv_sec + (lua_Number)st.st_mtim.tv_nsec / 1e9);
  lua_setfield(L, -2, "mtime");
  lua_pushinteger(L, (lua_Integer)(st.st_mode & 07777));
  lua_setfield(L, -2, "mode");
  return 1;
}

/* chmod(path, mode): sets the permission bits (e.g. tonumber("600", 8)). */
int kb__fs_chmod(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  lua_Integer mode = luaL_checkinteger(L, 2);
  luaL_argcheck(L, mode >= 0 && mode <= 07777, 2, "permission bits from 0 to 07777");
  if (chmod(path, (mode_t)mode) != 0) return kb__fs_fail(L, "chmod", "cannot chmod", path, errno);
  return 0;
}

/* ---- remove -------------------------------------------------------------- */

/* The path being removed, for error messages (truncated if very deep). */
typedef struct {
  char buf[PATH_MAX];
  size_t len;
} where;

static size_t where_push(where *w, const char *name) {
  size_t mark = w->len, n = strlen(name);
  if (w->len + n + 2 <= sizeof w->buf) {
    if (w->len && w->buf[w->len - 1] != '/') w->buf[w->len++] = '/';
    memcpy(w->buf + w->len, name, n + 1);
    w->len += n;
  }
  return mark;
}

/* Removes name (relative to the directory fd parent) and, for a directory,
 * everything in it.
 * Symlinks are removed, never followed. Returns 0 or an errno; on error
 * w holds the path that failed. */
static int remove_tree(int parent, const char *name, where *w) {
  size_t mark = where_push(w, name);
  struct stat st;
  if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno;
  if (S_ISDIR(st.st_mode)) {
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return errno;
    DIR *d = fdopendir(fd);
    if (!d) {
      int err = errno;
      close(fd);
      return err;
    }
    int err = 0;
    struct dirent *de;
    while (!err) {
      errno = 0;
      if (!(de = readdir(d))) {
        err = errno;
        break;
      }
      if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
        err = remove_tree(dirfd(d), de->d_name, w);
    }
    closedir(d);
    if (err) return err;
    if (unlinkat(parent, name, AT_REMOVEDIR) != 0) return errno;
  } else if (unlinkat(parent, name, 0) != 0) {
    return errno;
  }
  w->len = mark;
  w->buf[mark] = '\0';
  return 0;
}

/* Refuses "", "/" (however spelled) and paths ending in "." or "..": a
 * recursive remove of those is never what a scenario meant. */
static void check_removable(lua_State *L, const char *path) {
  size_t len = strlen(path);
  while (len > 1 && path[len - 1] == '/') len--;
  size_t base = kb__fs_dir_prefix_len(path, len);
  int dots = (len - base == 1 && path[base] == '.') ||
             (len - base == 2 && path[base] == '.' && path[base + 1] == '.');
  char real[PATH_MAX];
  int root = len == 0 || (len == 1 && path[0] == '/') ||
             (realpath(path, real) && strcmp(real, "/") == 0);
  if (root || dots) luaL_error(L, "kb.fs.remove: refusing to remove '%s'", path);
}

int kb__fs_remove(lua_State *L) {
  size_t len;
  const char *path = luaL_checklstring(L, 1, &len);
  int recursive = kb_opt_boolean(L, 2, "recursive", 0);
  check_removable(L, path);
  /* "link/" would resolve a symlink to its target directory */
  while (len > 1 && path[len - 1] == '/') len--;
  path = lua_pushlstring(L, path, len);
  int err = 0;
  where w = {.len = 0};
  w.buf[0] = '\0';
  if (recursive) {
    err = remove_tree(AT_FDCWD, path, &w);
  } else {
    struct stat st;
    if (lstat(path, &st) != 0) err = errno;
    else if (S_ISDIR(st.st_mode) ? rmdir(path) : unlink(path)) err = errno;
  }
  if (err == ENOENT && (w.len == 0 || strcmp(w.buf, path) == 0)) {
    lua_pushboolean(L, 0);
    return 1;
  }
  if (err) return kb__fs_fail(L, "remove", "cannot remove", w.len ? w.buf : path, err);
  lua_pushboolean(L, 1);
  return 1;
}

/* ---- paths (pure string functions, no system calls but abspath's getcwd) --- */

/* join(...): the non-empty parts joined with single slashes at the seams. */
int kb__fs_join(lua_State *L) {
  int n = lua_gettop(L);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  int first = 1;
  for (int i = 1; i <= n; i++) {
    size_t len;
    const char *p = luaL_checklstring(L, i, &len);
    if (len == 0) continue;
    if (!first) {
      while (len > 0 && *p == '/') p++, len--;
      if (luaL_bufflen(&b) == 0 || luaL_buffaddr(&b)[luaL_bufflen(&b) - 1] != '/')
        luaL_addchar(&b, '/');
    }
    size_t keep = len;
    while (keep > 1 && p[keep - 1] == '/') keep--;
    luaL_addlstring(&b, p, i < n ? keep : len); /* the last part keeps its slash */
    first = 0;
  }
  luaL_pushresult(&b);
  return 1;
}

/* POSIX dirname(1): "a/b" -> "a", "a" -> ".", "/a" -> "/", "a/b/" -> "a". */
int kb__fs_dirname(lua_State *L) {
  size_t len;
  const char *p = luaL_checklstring(L, 1, &len);
  while (len > 1 && p[len - 1] == '/') len--;
  size_t d = kb__fs_dir_prefix_len(p, len);
  if (d == 0) {
    lua_pushstring(L, len == 1 && p[0] == '/' ? "/" : ".");
    return 1;
  }
  while (d > 1 && p[d - 1] == '/') d--;
  lua_pushlstring(L, p, d);
  return 1;
}

/* POSIX basename(1): "a/b" -> "b", "a/b/" -> "b", "/" -> "/", "" -> "". */
int kb__fs_basename(lua_State *L) {
  size_t len;
  const char *p = luaL_checklstring(L, 1, &len);
  while (len > 1 && p[len - 1] == '/') len--;
  if (len == 1 && p[0] == '/') {
    lua_pushliteral(L, "/");
    return 1;
  }
  size_t d = kb__fs_dir_prefix_len(p, len);
  lua_pushlstring(L, p + d, len - d);
  return 1;
}

/* abspath(p): absolute and normalised ("." and ".." resolved lexically,
 * duplicate slashes removed); symlinks are not resolved. */
int kb__fs_abspath(lua_State *L) {
  size_t len;
  const char *p = luaL_checklstring(L, 1, &len);
  luaL_Buffer b;
  char *out = luaL_buffinitsize(L, &b, PATH_MAX + len + 2);
  size_t n = 0;
  if (p[0] != '/') {
    if (!getcwd(out, PATH_MAX)) return kb__fs_fail(L, "abspath", "cannot resolve", p, errno);
    n = strlen(out);
    if (n == 1) n = 0; /* cwd is "/" */
  }
  size_t i = 0;
  while (i < len) {
    while (i < len && p[i] == '/') i++;
    size_t start = i;
    while (i < len && p[i] != '/') i++;
    size_t clen = i - start;
    if (clen == 0 || (clen == 1 && p[start] == '.')) continue;
    if (clen == 2 && p[start] == '.' && p[start + 1] == '.') {
      while (n > 0 && out[n - 1] != '/') n--;
      if (n > 0) n--;
      continue;
    }
    out[n++] = '/';
    memcpy(out + n, p + start, clen);
    n += clen;
  }
  if (n == 0) out[n++] = '/';
  luaL_pushresultsize(&b, n);
  return 1;
}

/* tmpdir([prefix]): a new private directory under $TMPDIR (or /tmp). The
 * caller removes it (remove(dir, {recursive = true})). */
int kb__fs_tmpdir(lua_State *L) {
  const char *prefix = luaL_optstring(L, 1, "kbrun");
  if (strchr(prefix, '/')) return luaL_argerror(L, 1, "prefix must not contain '/'");
  const char *base = getenv("TMPDIR");
  if (!base || !*base) base = "/tmp";
  char tmpl[PATH_MAX];
  int n = snprintf(tmpl, sizeof tmpl, "%s/%s-XXXXXX", base, prefix);
  if (n < 0 || (size_t)n >= sizeof tmpl)
    return kb__fs_fail(L, "tmpdir", "cannot create directory in", base, ENAMETOOLONG);
  if (!mkdtemp(tmpl)) return kb__fs_fail(L, "tmpdir", "cannot create directory in", base, errno);
  lua_pushstring(L, tmpl);
  return 1;
}
