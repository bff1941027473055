/* kb.fs: local files for results, journals and reports.
 *
 * Small files are plain blocking system calls (microseconds on a local
 * disk). What can take long runs on libuv's thread pool while the calling
 * task awaits, so the loop keeps serving every other task: inside a task,
 * read() of a file of 64 KiB or more, and write() of 64 KiB or more or
 * with sync (the default; an fsync can wait for a disk's whole queue).
 * Outside a task, or where the caller cannot yield (a metamethod, the
 * function of with_lock), they block as before. The other calls are short:
 * append and the appender's :write are one write(2) to the page cache;
 * :sync() and :close() of an appender fsync on the loop (once, at the end
 * of a journal), its __gc never does.
 *
 * Failures raise kb error objects of class "fs":
 *   { class = "fs", message = "kb.fs.read: cannot open 'x': No such file or
 *     directory", path = "x", errno = 2, code = "ENOENT", reason = "No such
 *     file or directory" }
 *
 *   read(path) -> string
 *   write(path, data [, {sync = true}])
 *       Atomic replace: writes "<dir>/.<name>.kbtmp-<pid>-<n>", fsyncs it,
 *       renames it over path and fsyncs the directory, so readers see the
 *       old or the new content, never a mix. An existing file keeps its
 *       permissions; a symlink at path is replaced, not written through.
 *       {sync = false} skips both fsyncs (still atomic, not durable).
 *   append(path, data)      open O_APPEND|O_CREAT, one write(2), close;
 *                           whole or not at all, like an appender's write
 *   open_append(path) -> appender with :write(...) (one write(2) of all
 *       its arguments, whole or not at all: see "appender" below), :sync(),
 *       :close() (fsync + close; also __close); __gc closes without fsync
 *   mkdir(path) -> path     like mkdir -p; fine if the directory exists
 *   list(dir) -> names      sorted bytewise, without "." and ".."; marked as
 *                           an array (kb.json encodes an empty one as [])
 *   exists(path) -> "file" | "dir" | "other" | false   (follows symlinks)
 *   stat(path) -> { type = "file"|"dir"|"other", size, mtime (s, float),
 *                   mode (permission bits) }
 *   chmod(path, mode)       sets the permission bits (tonumber("600", 8))
 *   remove(path [, {recursive = true}]) -> true, or false if path was absent
 *       A file or an empty directory; with recursive, a whole tree (symlinks
 *       inside are removed, never followed). Refuses "", "/" however spelt,
 *       and paths ending in "." or "..".
 *   with_lock(path, fn, ...) -> fn(...)
 *       Exclusive flock(2) on path .. ".lock" around fn, released however
 *       fn ends. fn must not yield (see fs_lock.c).
 *   set_write_hook(fn | nil) -> previous
 *       fn(path, err) after every failed write / append / open_append /
 *       appender call, fn(path, nil) after every completed write and append
 *       (kb.outputs: which result files are not saved). fn must not yield.
 *   join(...), dirname(p), basename(p), abspath(p), tmpdir([prefix])
 */
/* This file: errors and the write hook, guards, read / write / append,
 * appenders and the module's opener. The I/O beneath and the thread pool
 * are in fs_io.c, directories, remove and paths in fs_dir.c, with_lock in
 * fs_lock.c; fs_internal.h is what they share. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>

#include "fs_internal.h"
#include "kb/lua_modules.h"
#include "kb/lua_util.h"

#define GUARD_CLASS "kb.fs.guard"
#define APPENDER_CLASS "kb.fs.appender"
#define HOOK_KEY "kb.fs.write_hook" /* registry: set_write_hook's function */

/* ---- errors -------------------------------------------------------------- */

/* Pushes the error object of a failed call (the table described on top). */
void kb__fs_push_error(lua_State *L, const char *fn, const char *what, const char *path,
                       int err) {
  const char *reason = strerror(err);
  kb_error_new(L, "fs", "kb.fs.%s: %s '%s': %s", fn, what, path, reason);
  lua_pushstring(L, path);
  lua_setfield(L, -2, "path");
  lua_pushinteger(L, err);
  lua_setfield(L, -2, "errno");
  const char *code = strerrorname_np(err);
  if (code) {
    lua_pushstring(L, code);
    lua_setfield(L, -2, "code");
  }
  lua_pushstring(L, reason);
  lua_setfield(L, -2, "reason");
}

/* The write hook (set_write_hook): hook(path, err) after every failed
 * write, append, open_append and appender call, hook(path, nil) after every
 * completed write and append. kb.outputs uses it to know which result
 * files are not saved (the exit code says so). L must be able to call Lua
 * (a running thread); the hook must not yield and its errors are dropped:
 * a broken hook never turns a write into a failure. err_idx: absolute index
 * of the error object, or 0. */
void kb__fs_notify_write(lua_State *L, const char *path, int err_idx) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, HOOK_KEY) != LUA_TFUNCTION) {
    lua_pop(L, 1);
    return;
  }
  lua_pushstring(L, path);
  if (err_idx) lua_pushvalue(L, err_idx);
  else lua_pushnil(L);
  if (lua_pcall(L, 2, 0, 0) != LUA_OK) lua_pop(L, 1);
}

int kb__fs_fail(lua_State *L, const char *fn, const char *what, const char *path, int err) {
  kb__fs_push_error(L, fn, what, path, err);
  if (strcmp(fn, "write") == 0 || strcmp(fn, "append") == 0 || strcmp(fn, "open_append") == 0)
    kb__fs_notify_write(L, path, lua_gettop(L));
  return lua_error(L);
}

/* set_write_hook(fn | nil) -> the previous hook */
static int l_set_write_hook(lua_State *L) {
  if (!lua_isnoneornil(L, 1)) luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_settop(L, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, HOOK_KEY);
  lua_pushvalue(L, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, HOOK_KEY);
  return 1;
}

/* ---- guards: descriptors, memory and temp files released on any exit -------
 * A guard is a to-be-closed userdata: whether the binding returns or raises
 * (out of memory included), its __close closes the descriptor / directory,
 * frees a buffer and unlinks a temp file that was not renamed into place. */

static int guard_close(lua_State *L) {
  fs_guard *g = luaL_checkudata(L, 1, GUARD_CLASS);
  if (g->dir) closedir(g->dir);
  else if (g->fd >= 0) close(g->fd);
  if (g->tmp[0]) unlink(g->tmp);
  free(g->mem);
  g->dir = NULL;
  g->fd = -1;
  g->mem = NULL;
  g->tmp[0] = '\0';
  return 0;
}

fs_guard *kb__fs_push_guard(lua_State *L, size_t tmpcap) {
  fs_guard *g = lua_newuserdatauv(L, sizeof *g + tmpcap + 1, 0);
  g->fd = -1;
  g->dir = NULL;
  g->mem = NULL;
  g->tmp[0] = '\0';
  luaL_setmetatable(L, GUARD_CLASS);
  lua_toclose(L, -1);
  return g;
}

/* ---- read / write / append ----------------------------------------------- */

static int l_read(lua_State *L) {
  size_t plen;
  const char *path = luaL_checklstring(L, 1, &plen);
  struct stat st;
  if (kb__fs_can_await(L) && stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= ASYNC_MIN)
    return kb__fs_job_start(L, JOB_READ, path, plen, 0, 0);
  fs_guard *g = kb__fs_push_guard(L, 0);
  size_t len;
  const char *what;
  int err = kb__fs_read_file(path, &g->mem, &len, &what);
  if (err) return kb__fs_fail(L, "read", what, path, err);
  lua_pushlstring(L, g->mem, len);
  return 1;
}

static int l_write(lua_State *L) {
  size_t len, dlen;
  const char *path = luaL_checklstring(L, 1, &len);
  luaL_checklstring(L, 2, &dlen);
  int sync = kb_opt_boolean(L, 3, "sync", 1);
  if (len == 0 || path[len - 1] == '/')
    return kb__fs_fail(L, "write", "cannot write", path, len ? EISDIR : ENOENT);
  if (kb__fs_can_await(L) && (sync || dlen >= ASYNC_MIN))
    return kb__fs_job_start(L, JOB_WRITE, path, len, 2, sync);
  const char *data = lua_tostring(L, 2);
  char *tmp = lua_newuserdatauv(L, len + 41, 0);
  const char *what;
  int err = kb__fs_write_file(path, len, data, dlen, sync, tmp, &what);
  if (err) return kb__fs_fail(L, "write", what, path, err);
  kb__fs_notify_write(L, path, 0);
  return 0;
}

static int l_append(lua_State *L) {
  size_t dlen;
  const char *path = luaL_checkstring(L, 1);
  const char *data = luaL_checklstring(L, 2, &dlen);
  fs_guard *g = kb__fs_push_guard(L, 0);
  g->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  if (g->fd < 0) return kb__fs_fail(L, "append", "cannot open", path, errno);
  int err = kb__fs_append_whole(g->fd, data, dlen);
  if (err) return kb__fs_fail(L, "append", "cannot write", path, err);
  int fd = g->fd;
  g->fd = -1;
  if (close(fd) != 0) return kb__fs_fail(L, "append", "cannot write", path, errno);
  kb__fs_notify_write(L, path, 0);
  return 0;
}

/* ---- appender: an open O_APPEND descriptor for journals ---------------------
 * Each :write is one write(2) of all its arguments, so a record reaches the
 * kernel whole before :write returns and survives a SIGKILL of kbrun. :sync
 * and :close also fsync, for a machine crash; collecting an appender that
 * was never closed only closes it (an fsync there would stall the loop in
 * the middle of a GC step).
 *
 * A :write is whole or nothing (kb__fs_append_whole): the caller may retry
 * the same data later (kb.csv and kb.journal keep it in memory and do). */

typedef struct {
  int fd;
  char path[];
} appender;

static appender *check_appender(lua_State *L) { return luaL_checkudata(L, 1, APPENDER_CLASS); }

static appender *check_open_appender(lua_State *L) {
  appender *a = check_appender(L);
  if (a->fd < 0) luaL_error(L, "kb.fs appender for '%s' is closed", a->path);
  return a;
}

static int l_open_append(lua_State *L) {
  size_t len;
  const char *path = luaL_checklstring(L, 1, &len);
  appender *a = lua_newuserdatauv(L, sizeof *a + len + 1, 0);
  a->fd = -1;
  memcpy(a->path, path, len + 1);
  luaL_setmetatable(L, APPENDER_CLASS);
  a->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  if (a->fd < 0) return kb__fs_fail(L, "open_append", "cannot open", path, errno);
  return 1;
}

static int appender_write(lua_State *L) {
  appender *a = check_open_appender(L);
  int n = lua_gettop(L);
  size_t len;
  const char *data;
  if (n == 2) {
    data = luaL_checklstring(L, 2, &len);
  } else {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 2; i <= n; i++) {
      luaL_checkstring(L, i);
      lua_pushvalue(L, i);
      luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    data = lua_tolstring(L, -1, &len);
  }
  int err = kb__fs_append_whole(a->fd, data, len);
  if (err) return kb__fs_fail(L, "append", "cannot write", a->path, err);
  lua_settop(L, 1);
  return 1;
}

static int appender_sync(lua_State *L) {
  appender *a = check_open_appender(L);
  int err = kb__fs_fsync_retry(a->fd);
  if (err && err != EINVAL) return kb__fs_fail(L, "append", "cannot sync", a->path, err);
  return 0;
}

static int appender_close(lua_State *L) {
  appender *a = check_appender(L);
  if (a->fd < 0) return 0;
  int fd = a->fd;
  a->fd = -1;
  int err = kb__fs_fsync_retry(fd);
  if (close(fd) != 0 && !err) err = errno;
  if (err && err != EINVAL) return kb__fs_fail(L, "append", "cannot close", a->path, err);
  return 0;
}

static int appender_gc(lua_State *L) {
  appender *a = check_appender(L);
  if (a->fd >= 0) {
    close(a->fd); /* no fsync: see above */
    a->fd = -1;
  }
  return 0;
}

static int appender_tostring(lua_State *L) {
  appender *a = check_appender(L);
  lua_pushfstring(L, "kb.fs.appender: %s (%s)", a->path, a->fd >= 0 ? "open" : "closed");
  return 1;
}

int luaopen_kb_fs(lua_State *L) {
  static const luaL_Reg guard_meta[] = {
    {"__close", guard_close}, {"__gc", guard_close}, {NULL, NULL}};
  static const luaL_Reg appender_methods[] = {
    {"write", appender_write}, {"sync", appender_sync}, {"close", appender_close}, {NULL, NULL}};
  static const luaL_Reg appender_meta[] = {
    {"__close", appender_close}, {"__gc", appender_gc}, {"__tostring", appender_tostring},
    {NULL, NULL}};
  static const luaL_Reg funcs[] = {
    {"read", l_read}, {"write", l_write}, {"append", l_append},
    {"open_append", l_open_append}, {"mkdir", kb__fs_mkdir}, {"list", kb__fs_list},
    {"exists", kb__fs_exists}, {"stat", kb__fs_stat}, {"chmod", kb__fs_chmod},
    {"remove", kb__fs_remove}, {"with_lock", kb__fs_with_lock},
    {"set_write_hook", l_set_write_hook}, {"join", kb__fs_join},
    {"dirname", kb__fs_dirname}, {"basename", kb__fs_basename},
    {"abspath", kb__fs_abspath}, {"tmpdir", kb__fs_tmpdir},
    {NULL, NULL}};
  kb_new_class(L, GUARD_CLASS, NULL, guard_meta);
  kb_new_class(L, APPENDER_CLASS, appender_methods, appender_meta);
  luaL_newlib(L, funcs);
  return 1;
}
