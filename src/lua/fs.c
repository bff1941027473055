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
 *       fn ends. fn must not yield (see l_with_lock).
 *   set_write_hook(fn | nil) -> previous
 *       fn(path, err) after every failed write / append / open_append /
 *       appender call, fn(path, nil) after every completed write and append
 *       (kb.outputs: which result files are not saved). fn must not yield.
 *   join(...), dirname(p), basename(p), abspath(p), tmpdir([prefix])
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>
#include <uv.h>

#include "kb/lua_modules.h"
#include "kb/lua_util.h"
#include "kb/rt.h"

#define GUARD_CLASS "kb.fs.guard"
#define APPENDER_CLASS "kb.fs.appender"
#define LOCKS_KEY "kb.fs.locks" /* registry: "dev:ino" of the lock files held */
#define HOOK_KEY "kb.fs.write_hook" /* registry: set_write_hook's function */

/* ---- errors -------------------------------------------------------------- */

/* Pushes the error object of a failed call (the table described on top). */
static void fs_push_error(lua_State *L, const char *fn, const char *what, const char *path,
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
static void notify_write(lua_State *L, const char *path, int err_idx) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, HOOK_KEY) != LUA_TFUNCTION) {
    lua_pop(L, 1);
    return;
  }
  lua_pushstring(L, path);
  if (err_idx) lua_pushvalue(L, err_idx);
  else lua_pushnil(L);
  if (lua_pcall(L, 2, 0, 0) != LUA_OK) lua_pop(L, 1);
}

static int fs_fail(lua_State *L, const char *fn, const char *what, const char *path, int err) {
  fs_push_error(L, fn, what, path, err);
  if (strcmp(fn, "write") == 0 || strcmp(fn, "append") == 0 || strcmp(fn, "open_append") == 0)
    notify_write(L, path, lua_gettop(L));
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

typedef struct {
  int fd;
  DIR *dir;
  char *mem; /* malloc'd, freed by the guard */
  char tmp[]; /* temp file to unlink, "" once renamed or none */
} fs_guard;

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

static fs_guard *push_guard(lua_State *L, size_t tmpcap) {
  fs_guard *g = lua_newuserdatauv(L, sizeof *g + tmpcap + 1, 0);
  g->fd = -1;
  g->dir = NULL;
  g->mem = NULL;
  g->tmp[0] = '\0';
  luaL_setmetatable(L, GUARD_CLASS);
  lua_toclose(L, -1);
  return g;
}

/* ---- small I/O helpers (plain C: they run on the loop thread or on a
 * thread of libuv's pool, so no Lua in here) ------------------------------- */

/* Writes every byte; *done (if not NULL) counts the bytes that made it. */
static int write_all(int fd, const char *p, size_t len, size_t *done) {
  size_t start = len;
  int err = 0;
  while (len > 0) {
    ssize_t w = write(fd, p, len);
    if (w < 0) {
      if (errno == EINTR) continue;
      err = errno;
      break;
    }
    p += w;
    len -= (size_t)w;
  }
  if (done) *done = start - len;
  return err;
}

static int fsync_retry(int fd) {
  while (fsync(fd) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

/* Appends all of data or none of it: when the disk fills in the middle,
 * the bytes that made it are cut off again (ftruncate), so a file never
 * ends in half a record and the caller may retry the same data. Meant for
 * one writer (or writers under with_lock): another process appending at
 * that very moment could lose its bytes to the cut. */
static int append_whole(int fd, const char *p, size_t len) {
  size_t done = 0;
  int err = write_all(fd, p, len, &done);
  struct stat st;
  if (err && done > 0 && fstat(fd, &st) == 0 && (size_t)st.st_size >= done) {
    while (ftruncate(fd, st.st_size - (off_t)done) != 0 && errno == EINTR) {
    }
  }
  return err;
}

/* Length of the directory part of path including its final '/', or 0. */
static size_t dir_prefix_len(const char *path, size_t len) {
  while (len > 0 && path[len - 1] != '/') len--;
  return len;
}

/* Reads the whole file into *out (malloc'd, owned by the caller on success
 * and on failure alike: free(*out)). st_size is a hint only (0 for /proc
 * files, or the file grows): it reads to end of file. */
static int read_file(const char *path, char **out, size_t *outlen, const char **what) {
  *out = NULL;
  *outlen = 0;
  *what = "cannot open";
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = 0;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    *what = "cannot stat";
    err = errno;
  } else if (S_ISDIR(st.st_mode)) {
    *what = "cannot read";
    err = EISDIR;
  }
  size_t cap = (!err && S_ISREG(st.st_mode) && st.st_size > 0 ? (size_t)st.st_size : 0) + 4096;
  size_t len = 0;
  char *buf = err ? NULL : malloc(cap);
  if (!err && !buf) {
    *what = "cannot read";
    err = ENOMEM;
  }
  while (!err) {
    if (len == cap) {
      size_t ncap = cap < ((size_t)1 << 24) ? cap * 2 : cap + cap / 2;
      char *nbuf = ncap > cap ? realloc(buf, ncap) : NULL;
      if (!nbuf) {
        *what = "cannot read";
        err = ENOMEM;
        break;
      }
      buf = nbuf;
      cap = ncap;
    }
    ssize_t n = read(fd, buf + len, cap - len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *what = "cannot read";
      err = errno;
    }
    if (n <= 0) break;
    len += (size_t)n;
  }
  close(fd);
  *out = buf;
  *outlen = len;
  return err;
}

/* Creates a fresh temp file next to path: "<dir>/.<base>.kbtmp-<pid>-<n>"
 * in tmp (room for len + 40). Returns 0 with *fd open, or an errno. */
static int open_temp(char *tmp, const char *path, size_t len, int *fd) {
  static atomic_uint counter; /* thread-pool writes run concurrently */
  size_t dlen = dir_prefix_len(path, len);
  for (int attempt = 0; attempt < 100; attempt++) {
    snprintf(tmp, len + 40, "%.*s.%s.kbtmp-%ld-%u", (int)dlen, path, path + dlen,
             (long)getpid(), atomic_fetch_add(&counter, 1));
    *fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (*fd >= 0) return 0;
    if (errno != EEXIST) {
      tmp[0] = '\0';
      return errno;
    }
  }
  tmp[0] = '\0';
  return EEXIST;
}

static void sync_dir(const char *path, size_t len) {
  size_t dlen = dir_prefix_len(path, len);
  char dir[PATH_MAX];
  if (dlen >= sizeof dir) return;
  if (dlen == 0) strcpy(dir, ".");
  else {
    memcpy(dir, path, dlen);
    dir[dlen] = '\0';
  }
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return; /* best effort: the rename itself already happened */
  fsync(fd);
  close(fd);
}

/* The atomic replace of write(): temp file, data, fsync, rename over path,
 * fsync of the directory. tmp: room for len + 40. Leaves no temp file
 * behind on failure. */
static int write_file(const char *path, size_t len, const char *data, size_t dlen, int sync,
                      char *tmp, const char **what) {
  int fd;
  *what = "cannot create";
  int err = open_temp(tmp, path, len, &fd);
  if (err) return err;
  struct stat st;
  if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
    fchmod(fd, st.st_mode & 07777); /* replacing keeps the permissions */
  *what = "cannot write";
  err = write_all(fd, data, dlen, NULL);
  if (!err && sync && (err = fsync_retry(fd)) != 0) *what = "cannot sync";
  if (close(fd) != 0 && !err) err = errno;
  if (!err && rename(tmp, path) != 0) {
    *what = "cannot replace";
    err = errno;
  }
  if (err) {
    unlink(tmp);
    return err;
  }
  if (sync) sync_dir(path, len);
  return 0;
}

/* ---- the thread pool: big reads and writes off the loop ------------------
 * Inside a task, read() of a file of ASYNC_MIN bytes or more, and write()
 * of that much data or with sync (an fsync can take a disk's whole queue),
 * run on libuv's thread pool while the task awaits: the loop keeps serving
 * every other task. Elsewhere (the main chunk, a metamethod, the function
 * of with_lock: anything that cannot yield) they block as before. */

#define ASYNC_MIN (64 * 1024)

enum { JOB_READ, JOB_WRITE };

typedef struct {
  uv_work_t req;
  kb_rt *rt;
  kb_task *task; /* NULL once cancelled: the job then only cleans up */
  lua_State *L;  /* the main state: the write hook runs there */
  int kind, sync, err;
  int delivered; /* handed to the task: it frees the job (deliver or cancel) */
  const char *what;
  const char *data; /* write: the string anchored by ref */
  size_t dlen, plen;
  int ref;
  char *buf; /* read: the content (malloc'd) */
  size_t len;
  char *tmp;    /* write: temp file name, inside this allocation */
  char path[]; /* path, then room for tmp */
} fs_job;

static int can_await(lua_State *L) {
  kb_task *t = kb_task_of(L);
  return t && kb_task_thread(t) == L && lua_isyieldable(L) && !kb_rt_stopping(kb_task_rt(t));
}

static void job_work(uv_work_t *req) {
  fs_job *job = req->data;
  if (job->kind == JOB_READ)
    job->err = read_file(job->path, &job->buf, &job->len, &job->what);
  else
    job->err = write_file(job->path, job->plen, job->data, job->dlen, job->sync, job->tmp,
                          &job->what);
}

/* Pushes the content of a finished read (protected: a 200 MB string may
 * not fit). */
static int push_content(lua_State *L) {
  fs_job *job = lua_touserdata(L, 1);
  lua_pushlstring(L, job->buf, job->len);
  return 1;
}

static void job_free(fs_job *job) {
  free(job->buf);
  free(job);
}

/* In the task, once it resumes: the outcome, built where an error (out of
 * memory) just fails the call, with the job freed whatever happens. */
static int job_deliver(lua_State *L, void *op) {
  fs_job *job = op;
  if (job->err) {
    fs_push_error(L, job->kind == JOB_READ ? "read" : "write", job->what, job->path, job->err);
    if (job->kind == JOB_WRITE) notify_write(L, job->path, lua_gettop(L));
    job_free(job);
    return lua_error(L);
  }
  if (job->kind == JOB_WRITE) {
    notify_write(L, job->path, 0);
    job_free(job);
    return 0;
  }
  if (!lua_checkstack(L, 3)) {
    job_free(job);
    return luaL_error(L, "kb.fs.read: out of memory");
  }
  lua_pushcfunction(L, push_content);
  lua_pushlightuserdata(L, job);
  int status = lua_pcall(L, 1, 1, 0);
  job_free(job);
  return status == LUA_OK ? 1 : lua_error(L);
}

/* From the loop, once a pool thread is done (or the job was cancelled
 * before one took it). The results are built by the task (job_deliver). */
static void job_done(uv_work_t *req, int status) {
  fs_job *job = req->data;
  lua_State *L = job->L;
  kb_rt_work_end(job->rt);
  if (job->ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, job->ref);
  job->ref = LUA_NOREF;
  if (status == UV_ECANCELED || !job->task) {
    /* nobody waits any more; a write that failed is still an unsaved file */
    if (status != UV_ECANCELED && job->err && job->kind == JOB_WRITE) {
      fs_push_error(L, "write", job->what, job->path, job->err);
      notify_write(L, job->path, lua_gettop(L));
      lua_pop(L, 1);
    }
    job_free(job);
    return;
  }
  job->delivered = 1;
  kb_task_deliver(job->task, job_deliver);
}

/* Before delivery: a cancelled task stops waiting at once. A write still
 * happens, whole, even when no thread had taken it yet: a task that writes
 * what it measured as it is interrupted (an interrupted sweep cell's
 * result.json) must not lose it to its own cancellation; a queued read is
 * dropped. job_done frees the job. After delivery (the task was cancelled
 * before it resumed): the result is not taken, free it. */
static void job_cancel(void *op) {
  fs_job *job = op;
  if (job->delivered) {
    job_free(job);
    return;
  }
  job->task = NULL;
  if (job->kind != JOB_WRITE) uv_cancel((uv_req_t *)&job->req);
}

/* Starts the job; the data to write (if any) is the string at data_idx. */
static int job_start(lua_State *L, int kind, const char *path, size_t plen, int data_idx,
                     int sync) {
  kb_task *t = kb_task_running(L);
  kb_rt *rt = kb_task_rt(t);
  fs_job *job = malloc(sizeof *job + 2 * plen + 42);
  if (!job) return luaL_error(L, "kb.fs: out of memory");
  memset(job, 0, sizeof *job);
  job->req.data = job;
  job->task = t;
  job->L = kb_rt_lua(rt);
  job->rt = rt;
  job->kind = kind;
  job->sync = sync;
  job->plen = plen;
  job->ref = LUA_NOREF;
  memcpy(job->path, path, plen + 1);
  job->tmp = job->path + plen + 1;
  if (data_idx) {
    job->data = lua_tolstring(L, data_idx, &job->dlen);
    lua_pushvalue(L, data_idx); /* keeps the bytes alive even if the task dies */
    job->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  int r = uv_queue_work(kb_rt_loop(rt), &job->req, job_work, job_done);
  if (r == 0) kb_rt_work_begin(rt);
  if (r != 0) {
    if (job->ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, job->ref);
    free(job);
    return luaL_error(L, "kb.fs: cannot queue the %s of '%s': %s",
                      kind == JOB_READ ? "read" : "write", path, uv_strerror(r));
  }
  return kb_task_await(L, t, job_cancel, job);
}

/* ---- read / write / append ----------------------------------------------- */

static int l_read(lua_State *L) {
  size_t plen;
  const char *path = luaL_checklstring(L, 1, &plen);
  struct stat st;
  if (can_await(L) && stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= ASYNC_MIN)
    return job_start(L, JOB_READ, path, plen, 0, 0);
  fs_guard *g = push_guard(L, 0);
  size_t len;
  const char *what;
  int err = read_file(path, &g->mem, &len, &what);
  if (err) return fs_fail(L, "read", what, path, err);
  lua_pushlstring(L, g->mem, len);
  return 1;
}

static int l_write(lua_State *L) {
  size_t len, dlen;
  const char *path = luaL_checklstring(L, 1, &len);
  luaL_checklstring(L, 2, &dlen);
  int sync = kb_opt_boolean(L, 3, "sync", 1);
  if (len == 0 || path[len - 1] == '/')
    return fs_fail(L, "write", "cannot write", path, len ? EISDIR : ENOENT);
  if (can_await(L) && (sync || dlen >= ASYNC_MIN)) return job_start(L, JOB_WRITE, path, len, 2, sync);
  const char *data = lua_tostring(L, 2);
  char *tmp = lua_newuserdatauv(L, len + 41, 0);
  const char *what;
  int err = write_file(path, len, data, dlen, sync, tmp, &what);
  if (err) return fs_fail(L, "write", what, path, err);
  notify_write(L, path, 0);
  return 0;
}

static int l_append(lua_State *L) {
  size_t dlen;
  const char *path = luaL_checkstring(L, 1);
  const char *data = luaL_checklstring(L, 2, &dlen);
  fs_guard *g = push_guard(L, 0);
  g->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  if (g->fd < 0) return fs_fail(L, "append", "cannot open", path, errno);
  int err = append_whole(g->fd, data, dlen);
  if (err) return fs_fail(L, "append", "cannot write", path, err);
  int fd = g->fd;
  g->fd = -1;
  if (close(fd) != 0) return fs_fail(L, "append", "cannot write", path, errno);
  notify_write(L, path, 0);
  return 0;
}

/* ---- appender: an open O_APPEND descriptor for journals ---------------------
 * Each :write is one write(2) of all its arguments, so a record reaches the
 * kernel whole before :write returns and survives a SIGKILL of kbrun. :sync
 * and :close also fsync, for a machine crash; collecting an appender that
 * was never closed only closes it (an fsync there would stall the loop in
 * the middle of a GC step).
 *
 * A :write is whole or nothing (append_whole): the caller may retry the
 * same data later (kb.csv and kb.journal keep it in memory and do). */

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
  if (a->fd < 0) return fs_fail(L, "open_append", "cannot open", path, errno);
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
  int err = append_whole(a->fd, data, len);
  if (err) return fs_fail(L, "append", "cannot write", a->path, err);
  lua_settop(L, 1);
  return 1;
}

static int appender_sync(lua_State *L) {
  appender *a = check_open_appender(L);
  int err = fsync_retry(a->fd);
  if (err && err != EINVAL) return fs_fail(L, "append", "cannot sync", a->path, err);
  return 0;
}

static int appender_close(lua_State *L) {
  appender *a = check_appender(L);
  if (a->fd < 0) return 0;
  int fd = a->fd;
  a->fd = -1;
  int err = fsync_retry(fd);
  if (close(fd) != 0 && !err) err = errno;
  if (err && err != EINVAL) return fs_fail(L, "append", "cannot close", a->path, err);
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

/* ---- directories --------------------------------------------------------- */

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int l_mkdir(lua_State *L) {
  size_t len;
  const char *path = luaL_checklstring(L, 1, &len);
  if (len == 0) return fs_fail(L, "mkdir", "cannot create directory", path, ENOENT);
  lua_settop(L, 1);
  if (mkdir(path, 0777) == 0 || (errno == EEXIST && is_dir(path))) return 1;
  if (errno != ENOENT) return fs_fail(L, "mkdir", "cannot create directory", path, errno);
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
    if (err && err != EEXIST) return fs_fail(L, "mkdir", "cannot create directory", path, err);
  }
  if (!is_dir(path)) return fs_fail(L, "mkdir", "cannot create directory", path, EEXIST);
  lua_settop(L, 1);
  return 1;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int l_list(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  fs_guard *g = push_guard(L, 0);
  g->dir = opendir(path);
  if (!g->dir) return fs_fail(L, "list", "cannot list", path, errno);
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
  if (errno) return fs_fail(L, "list", "cannot list", path, errno);
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

static int l_exists(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  struct stat st;
  if (stat(path, &st) == 0) {
    lua_pushstring(L, type_name(st.st_mode));
  } else if (errno == ENOENT || errno == ENOTDIR) {
    lua_pushboolean(L, 0);
  } else {
    return fs_fail(L, "exists", "cannot stat", path, errno);
  }
  return 1;
}

static int l_stat(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  struct stat st;
  if (stat(path, &st) != 0) return fs_fail(L, "stat", "cannot stat", path, errno);
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
static int l_chmod(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  lua_Integer mode = luaL_checkinteger(L, 2);
  luaL_argcheck(L, mode >= 0 && mode <= 07777, 2, "permission bits from 0 to 07777");
  if (chmod(path, (mode_t)mode) != 0) return fs_fail(L, "chmod", "cannot chmod", path, errno);
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
  size_t base = dir_prefix_len(path, len);
  int dots = (len - base == 1 && path[base] == '.') ||
             (len - base == 2 && path[base] == '.' && path[base + 1] == '.');
  char real[PATH_MAX];
  int root = len == 0 || (len == 1 && path[0] == '/') ||
             (realpath(path, real) && strcmp(real, "/") == 0);
  if (root || dots) luaL_error(L, "kb.fs.remove: refusing to remove '%s'", path);
}

static int l_remove(lua_State *L) {
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
  if (err) return fs_fail(L, "remove", "cannot remove", w.len ? w.buf : path, err);
  lua_pushboolean(L, 1);
  return 1;
}

/* ---- with_lock ----------------------------------------------------------- */

/* with_lock(path, fn, ...): runs fn(...) holding an exclusive flock(2) on
 * path .. ".lock" (created if needed, never deleted: deleting lock files
 * races). Blocks the whole loop while another process holds the lock. fn
 * must not yield (no async calls): the lock would be held across the wait
 * and a second task locking the same file would deadlock the loop. */
static int l_with_lock(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  int nargs = lua_gettop(L) - 2;
  const char *lock = lua_pushfstring(L, "%s.lock", path);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LOCKS_KEY);
  int held = lua_gettop(L);

  fs_guard *g = push_guard(L, 0);
  g->fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (g->fd < 0) return fs_fail(L, "with_lock", "cannot open", lock, errno);
  /* flock on a second descriptor of a file this process has locked would
   * wait forever: recognise the file however its path is spelled */
  struct stat st;
  if (fstat(g->fd, &st) != 0) return fs_fail(L, "with_lock", "cannot stat", lock, errno);
  const char *id = lua_pushfstring(L, "%I:%I", (lua_Integer)st.st_dev, (lua_Integer)st.st_ino);
  int base = lua_gettop(L);
  if (lua_getfield(L, held, id) != LUA_TNIL)
    return luaL_error(L, "kb.fs.with_lock: '%s' is already held by this process", lock);
  lua_pop(L, 1);
  while (flock(g->fd, LOCK_EX) != 0) {
    if (errno != EINTR) return fs_fail(L, "with_lock", "cannot lock", lock, errno);
  }
  lua_pushboolean(L, 1);
  lua_setfield(L, held, id);

  lua_pushvalue(L, 2);
  for (int i = 0; i < nargs; i++) lua_pushvalue(L, 3 + i);
  int status = lua_pcall(L, nargs, LUA_MULTRET, 0);

  lua_pushnil(L);
  lua_setfield(L, held, lua_tostring(L, base));
  flock(g->fd, LOCK_UN);
  if (status != LUA_OK) return lua_error(L);
  return lua_gettop(L) - base;
}

/* ---- paths (pure string functions, no system calls but abspath's getcwd) --- */

/* join(...): the non-empty parts joined with single slashes at the seams. */
static int l_join(lua_State *L) {
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
static int l_dirname(lua_State *L) {
  size_t len;
  const char *p = luaL_checklstring(L, 1, &len);
  while (len > 1 && p[len - 1] == '/') len--;
  size_t d = dir_prefix_len(p, len);
  if (d == 0) {
    lua_pushstring(L, len == 1 && p[0] == '/' ? "/" : ".");
    return 1;
  }
  while (d > 1 && p[d - 1] == '/') d--;
  lua_pushlstring(L, p, d);
  return 1;
}

/* POSIX basename(1): "a/b" -> "b", "a/b/" -> "b", "/" -> "/", "" -> "". */
static int l_basename(lua_State *L) {
  size_t len;
  const char *p = luaL_checklstring(L, 1, &len);
  while (len > 1 && p[len - 1] == '/') len--;
  if (len == 1 && p[0] == '/') {
    lua_pushliteral(L, "/");
    return 1;
  }
  size_t d = dir_prefix_len(p, len);
  lua_pushlstring(L, p + d, len - d);
  return 1;
}

/* abspath(p): absolute and normalised ("." and ".." resolved lexically,
 * duplicate slashes removed); symlinks are not resolved. */
static int l_abspath(lua_State *L) {
  size_t len;
  const char *p = luaL_checklstring(L, 1, &len);
  luaL_Buffer b;
  char *out = luaL_buffinitsize(L, &b, PATH_MAX + len + 2);
  size_t n = 0;
  if (p[0] != '/') {
    if (!getcwd(out, PATH_MAX)) return fs_fail(L, "abspath", "cannot resolve", p, errno);
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
static int l_tmpdir(lua_State *L) {
  const char *prefix = luaL_optstring(L, 1, "kbrun");
  if (strchr(prefix, '/')) return luaL_argerror(L, 1, "prefix must not contain '/'");
  const char *base = getenv("TMPDIR");
  if (!base || !*base) base = "/tmp";
  char tmpl[PATH_MAX];
  int n = snprintf(tmpl, sizeof tmpl, "%s/%s-XXXXXX", base, prefix);
  if (n < 0 || (size_t)n >= sizeof tmpl)
    return fs_fail(L, "tmpdir", "cannot create directory in", base, ENAMETOOLONG);
  if (!mkdtemp(tmpl)) return fs_fail(L, "tmpdir", "cannot create directory in", base, errno);
  lua_pushstring(L, tmpl);
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
    {"open_append", l_open_append}, {"mkdir", l_mkdir}, {"list", l_list},
    {"exists", l_exists}, {"stat", l_stat}, {"chmod", l_chmod}, {"remove", l_remove},
    {"with_lock", l_with_lock}, {"set_write_hook", l_set_write_hook}, {"join", l_join}, {"dirname", l_dirname},
    {"basename", l_basename}, {"abspath", l_abspath}, {"tmpdir", l_tmpdir},
    {NULL, NULL}};
  kb_new_class(L, GUARD_CLASS, NULL, guard_meta);
  kb_new_class(L, APPENDER_CLASS, appender_methods, appender_meta);
  luaL_newlib(L, funcs);
  return 1;
}
