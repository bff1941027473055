/* Shared by the files of kb.fs: fs.c (errors, the write hook, guards,
 * read / write / append, appenders and the module), fs_io.c (the plain C
 * I/O beneath them and the thread-pool jobs), fs_dir.c (directories,
 * remove, paths) and fs_lock.c (with_lock). Not a public header. */
#ifndef KB_FS_INTERNAL_H
#define KB_FS_INTERNAL_H

#include <dirent.h>
#include <stddef.h>

#include <lua.h>

/* fs.c: errors and the write hook (see there). */
void kb__fs_push_error(lua_State *L, const char *fn, const char *what, const char *path,
                       int err);
void kb__fs_notify_write(lua_State *L, const char *path, int err_idx);
/* Raises the error object of a failed call (notifying the write hook for
 * write, append and open_append). */
int kb__fs_fail(lua_State *L, const char *fn, const char *what, const char *path, int err);

/* fs.c: a guard is a to-be-closed userdata: whether the binding returns or
 * raises (out of memory included), its __close closes the descriptor /
 * directory, frees a buffer and unlinks a temp file that was not renamed
 * into place. */
typedef struct {
  int fd;
  DIR *dir;
  char *mem; /* malloc'd, freed by the guard */
  char tmp[]; /* temp file to unlink, "" once renamed or none */
} fs_guard;

/* Pushes a guard with room for a temp file name of tmpcap bytes. */
fs_guard *kb__fs_push_guard(lua_State *L, size_t tmpcap);

/* fs_io.c: small I/O helpers (plain C, no Lua: they run on the loop thread
 * or on a thread of libuv's pool); they return 0 or an errno. */
int kb__fs_fsync_retry(int fd);
int kb__fs_append_whole(int fd, const char *p, size_t len);
size_t kb__fs_dir_prefix_len(const char *path, size_t len);
int kb__fs_read_file(const char *path, char **out, size_t *outlen, const char **what);
int kb__fs_write_file(const char *path, size_t len, const char *data, size_t dlen, int sync,
                      char *tmp, const char **what);

/* fs_io.c: the thread pool. Reads and writes of ASYNC_MIN bytes or more
 * (and synced writes) go there when the caller can await. */
#define ASYNC_MIN (64 * 1024)

enum { JOB_READ, JOB_WRITE };

int kb__fs_can_await(lua_State *L);
/* Starts the job and suspends the task; the data to write (if any) is the
 * string at data_idx. */
int kb__fs_job_start(lua_State *L, int kind, const char *path, size_t plen, int data_idx,
                     int sync);

/* The module's functions defined outside fs.c, for luaopen_kb_fs. */
int kb__fs_mkdir(lua_State *L);    /* fs_dir.c */
int kb__fs_list(lua_State *L);
int kb__fs_exists(lua_State *L);
int kb__fs_stat(lua_State *L);
int kb__fs_chmod(lua_State *L);
int kb__fs_remove(lua_State *L);
int kb__fs_join(lua_State *L);
int kb__fs_dirname(lua_State *L);
int kb__fs_basename(lua_State *L);
int kb__fs_abspath(lua_State *L);
int kb__fs_tmpdir(lua_State *L);
int kb__fs_with_lock(lua_State *L); /* fs_lock.c */

#endif
