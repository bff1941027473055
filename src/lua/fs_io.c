/* kb.fs beneath the bindings: the plain C I/O (whole writes, the atomic
 * replace, whole-file reads) and the thread-pool jobs that run big reads
 * and writes off the loop (see fs.c for when). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>
#include <uv.h>

#include "fs_internal.h"
#include "kb/rt.h"

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

int kb__fs_fsync_retry(int fd) {
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
int kb__fs_append_whole(int fd, const char *p, size_t len) {
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
size_t kb__fs_dir_prefix_len(const char *path, size_t len) {
  while (len > 0 && path[len - 1] != '/') len--;
  return len;
}

/* Reads the whole file into *out (malloc'd, owned by the caller on success
 * and on failure alike: free(*out)). st_size is a hint only (0 for /proc
 * files, or the file grows): it reads to end of file. */
int kb__fs_read_file(const char *path, char **out, size_t *outlen, const char **what) {
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
  size_t dlen = kb__fs_dir_prefix_len(path, len);
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
  size_t dlen = kb__fs_dir_prefix_len(path, len);
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
int kb__fs_write_file(const char *path, size_t len, const char *data, size_t dlen, int sync,
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
  if (!err && sync && (err = kb__fs_fsync_retry(fd)) != 0) *what = "cannot sync";
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

int kb__fs_can_await(lua_State *L) {
  kb_task *t = kb_task_of(L);
  return t && kb_task_thread(t) == L && lua_isyieldable(L) && !kb_rt_stopping(kb_task_rt(t));
}

static void job_work(uv_work_t *req) {
  fs_job *job = req->data;
  if (job->kind == JOB_READ)
    job->err = kb__fs_read_file(job->path, &job->buf, &job->len, &job->what);
  else
    job->err = kb__fs_write_file(job->path, job->plen, job->data, job->dlen, job->sync, job->tmp,
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
    kb__fs_push_error(L, job->kind == JOB_READ ? "read" : "write", job->what, job->path, job->err);
    if (job->kind == JOB_WRITE) kb__fs_notify_write(L, job->path, lua_gettop(L));
    job_free(job);
    return lua_error(L);
  }
  if (job->kind == JOB_WRITE) {
    kb__fs_notify_write(L, job->path, 0);
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
      kb__fs_push_error(L, "write", job->what, job->path, job->err);
      kb__fs_notify_write(L, job->path, lua_gettop(L));
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
int kb__fs_job_start(lua_State *L, int kind, const char *path, size_t plen, int data_idx,
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

