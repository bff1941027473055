/* kb.fs.with_lock: an exclusive flock(2) around a function. */
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <lauxlib.h>

#include "fs_internal.h"

#define LOCKS_KEY "kb.fs.locks" /* registry: "dev:ino" of the lock files held */

/* ---- with_lock ----------------------------------------------------------- */

/* with_lock(path, fn, ...): runs fn(...) holding an exclusive flock(2) on
 * path .. ".lock" (created if needed, never deleted: deleting lock files
 * races). Blocks the whole loop while another process holds the lock. fn
 * must not yield (no async calls): the lock would be held across the wait
 * and a second task locking the same file would deadlock the loop. */
int kb__fs_with_lock(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  int nargs = lua_gettop(L) - 2;
  const char *lock = lua_pushfstring(L, "%s.lock", path);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LOCKS_KEY);
  int held = lua_gettop(L);

  fs_guard *g = kb__fs_push_guard(L, 0);
  g->fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (g->fd < 0) return kb__fs_fail(L, "with_lock", "cannot open", lock, errno);
  /* flock on a second descriptor of a file this process has locked would
   * wait forever: recognise the file however its path is spelled */
  struct stat st;
  if (fstat(g->fd, &st) != 0) return kb__fs_fail(L, "with_lock", "cannot stat", lock, errno);
  const char *id = lua_pushfstring(L, "%I:%I", (lua_Integer)st.st_dev, (lua_Integer)st.st_ino);
  int base = lua_gettop(L);
  if (lua_getfield(L, held, id) != LUA_TNIL)
    return luaL_error(L, "kb.fs.with_lock: '%s' is already held by this process", lock);
  lua_pop(L, 1);
  while (flock(g->fd, LOCK_EX) != 0) {
    if (errno != EINTR) return kb__fs_fail(L, "with_lock", "cannot lock", lock, errno);
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
