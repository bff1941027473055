/* The Lua state's allocator (lua_alloc.c): a size-class pool for the small
 * blocks Lua makes by the million (strings, tables, closures), malloc for
 * the rest. Private to src/rt/ (and its unit test, tests/c/test_lua_alloc.c).
 *
 * The runtime uses kb_lua_state_new / kb_lua_state_close; the kb_lua_alloc_*
 * functions are the allocator itself, for a lua_State made by hand or for
 * driving it directly. */
#ifndef KB_RT_LUA_ALLOC_H
#define KB_RT_LUA_ALLOC_H

#include <stddef.h>

#include <lua.h>

/* Blocks up to this size (bytes) come from the pool, in classes of
 * KB_LUA_ALLOC_QUANTUM bytes; larger ones from malloc. */
#ifndef KB_LUA_ALLOC_MAX
#define KB_LUA_ALLOC_MAX 512
#endif
#define KB_LUA_ALLOC_QUANTUM 16
/* The pool takes memory from malloc in slabs of this size. */
#define KB_LUA_ALLOC_SLAB (64 * 1024)

typedef struct kb_lua_alloc kb_lua_alloc;

typedef struct kb_lua_alloc_stats {
  size_t small_blocks; /* live pool blocks */
  size_t small_bytes;  /* their sizes, rounded up to their class */
  size_t large_blocks; /* live blocks from malloc */
  size_t large_bytes;  /* their sizes as Lua asked */
  size_t slabs;        /* slabs taken from malloc, all kept until the end */
} kb_lua_alloc_stats;

/* A pool with no slab yet; NULL when out of memory. */
kb_lua_alloc *kb_lua_alloc_new(void);
/* Returns every slab to malloc. Only after lua_close of the state that used
 * it (or once the caller has freed all its blocks): large blocks still live
 * are not the pool's to free. NULL is a no-op. */
void kb_lua_alloc_free(kb_lua_alloc *a);
/* The lua_Alloc: ud is the kb_lua_alloc. */
void *kb_lua_alloc_fn(void *ud, void *ptr, size_t osize, size_t nsize);
void kb_lua_alloc_get_stats(const kb_lua_alloc *a, kb_lua_alloc_stats *out);
/* For tests: after n more requests that need memory (a new block, or a
 * block grown), every such request fails (returns NULL, the old block left
 * as it was) until the next call; n < 0 turns failures off. Frees and
 * shrinks are never failed. */
void kb_lua_alloc_fail_after(kb_lua_alloc *a, long n);

/* A new Lua state on its own pool, set up like luaL_newstate's (the same
 * panic message, warnings off until "@on"). With KBRUN_LUA_ALLOC=system in
 * the environment it is luaL_newstate's, on realloc/free, for valgrind and
 * massif, which see pool blocks only as whole slabs. NULL when out of memory. */
lua_State *kb_lua_state_new(void);
/* lua_close, then the state's pool (if it has one) goes too. */
void kb_lua_state_close(lua_State *L);

#endif
