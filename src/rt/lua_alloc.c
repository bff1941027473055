/* The Lua state's allocator: a size-class pool for small blocks.
 *
 * Why. A scenario's Lua code makes and drops many small objects per HTTP
 * response (the decoded JSON's tables, its strings, closures); with
 * luaL_newstate's realloc/free, glibc's malloc/free (_int_malloc,
 * unlink_chunk, malloc_consolidate, _int_free) took ~16% of the client's CPU
 * in the KFP storm, and preloading jemalloc cut the storm's CPU by 12-20%.
 * Lua's allocator contract makes a simpler allocator possible than a
 * general-purpose malloc: whenever ptr != NULL, Lua passes the block's size
 * (osize), so a block needs no header saying how big it is, and nothing has
 * to be coalesced.
 *
 * The structure. Blocks of up to KB_LUA_ALLOC_MAX bytes are small: a
 * request of n bytes takes a block of its class, n rounded up to a multiple
 * of KB_LUA_ALLOC_QUANTUM (16: classes 16, 32, ..., 512). Each class has a
 * singly linked free list threaded through the free blocks themselves (the
 * first word of a free block points to the next one). A request whose list
 * is empty is carved from the unused tail of the newest slab (bump..
 * bump_end), a KB_LUA_ALLOC_SLAB (64 KiB) piece of malloc shared by all
 * classes, so objects made together lie together whatever their sizes; when
 * the tail is too short for the request, the rest of it (a multiple of 16,
 * smaller than 512, so exactly one class's size) goes onto that class's free
 * list and a new slab is taken. The slabs form a list through their first
 * word, only so they can all be freed at the end. Larger blocks go to
 * malloc/realloc/free. Which kind a block is follows from its size alone
 * (osize <= KB_LUA_ALLOC_MAX: the pool's), so a realloc that crosses the
 * line, or a class boundary, moves the block and copies min(osize, nsize)
 * bytes; within its class a block is resized in place.
 *
 * Alignment: slabs come from malloc (aligned for max_align_t), the slab
 * header and every class size are multiples of 16, so every block is
 * aligned to 16 (static_asserts below check 16 is enough for max_align_t).
 *
 * Footprint: freed small blocks go back to their class's list, never to
 * malloc: the pool keeps every slab until kb_lua_alloc_free, after
 * lua_close. Its footprint is the peak of the live small blocks (plus
 * what is free in a class nobody asks for any more), not what is live now.
 * A benchmark's Lua heap keeps a fairly steady working set, so the peak is
 * near what malloc holds anyway; but a free block serves only its own
 * class, never another class or a large block, so the footprint is the sum
 * of the classes' peaks: in the KFP storm the client's peak RSS went from
 * 77 to 83 MB (its CPU per call from 334 to 293 us).
 *
 * Out of memory: a request that cannot be met returns NULL and leaves the
 * old block as it was; Lua then collects garbage and tries again, and
 * raises its memory error if that fails too. Nothing here aborts. A shrink
 * within the pool that finds no memory for the smaller class keeps the
 * block where it is (it is big enough; its spare bytes are lost until the
 * state closes).
 *
 * AddressSanitizer: ASan sees a slab as one live malloc block, so in an
 * ASan build (CI's KB_SANITIZE) the pool tells it what is live itself. A
 * fresh slab's unused part is poisoned, a block is unpoisoned for exactly
 * the bytes Lua asked for when it is handed out (the rest of its class size
 * stays poisoned, so overflows are caught as malloc's would be), and
 * poisoned again when it goes on a free list. Free lists there are FIFO
 * instead of LIFO: a freed block is reused only after every other free
 * block of its class, a quarantine of sorts, so a use after free stays
 * poisoned (and caught) for as long as possible.
 *
 * KBRUN_LUA_ALLOC=system makes kb_lua_state_new use luaL_newstate instead
 * (realloc/free): valgrind and massif see the pool's blocks only as whole
 * slabs. docs/design-notes.md documents it with the other KBRUN_ variables.
 *
 * Not thread-safe, like the lua_State it serves: only the thread running
 * the state calls it. */
#include "lua_alloc.h"

#include <assert.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "kb/log.h"

#if defined(__SANITIZE_ADDRESS__)
#define LA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LA_ASAN 1
#endif
#endif

#ifdef LA_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define NCLASS (KB_LUA_ALLOC_MAX / KB_LUA_ALLOC_QUANTUM)
#define CLASS_OF(n) (((n) - 1) / KB_LUA_ALLOC_QUANTUM) /* n >= 1 */
#define CLASS_SIZE(c) (((size_t)(c) + 1) * KB_LUA_ALLOC_QUANTUM)

static_assert(KB_LUA_ALLOC_QUANTUM % _Alignof(max_align_t) == 0,
              "every block must be aligned for max_align_t");
static_assert(KB_LUA_ALLOC_MAX % KB_LUA_ALLOC_QUANTUM == 0,
              "the largest class is a multiple of the quantum");
static_assert(KB_LUA_ALLOC_SLAB >= 8 * KB_LUA_ALLOC_MAX,
              "a slab holds many blocks of the largest class");

typedef struct free_block {
  struct free_block *next;
} free_block;

typedef struct slab {
  struct slab *next;
} slab;

/* Blocks start this far into a slab: the header rounded up to the quantum,
 * so blocks keep malloc's alignment and the rest is whole quanta. */
#define SLAB_HDR                                                           \
  ((sizeof(slab) + KB_LUA_ALLOC_QUANTUM - 1) / KB_LUA_ALLOC_QUANTUM *      \
   KB_LUA_ALLOC_QUANTUM)

struct kb_lua_alloc {
  free_block *head[NCLASS]; /* free blocks of each class, next out first */
#ifdef LA_ASAN
  free_block *tail[NCLASS]; /* last of each list: frees join at the end */
#endif
  char *bump, *bump_end;    /* the newest slab's part never handed out */
  slab *slabs;              /* every slab, newest first */
  kb_lua_alloc_stats st;
  long fail_after;          /* kb_lua_alloc_fail_after; < 0: never fail */
  /* The state's warning switch (what luaL_newstate's warning function
   * keeps): on after "@on", and inside a message of several pieces. */
  int warn_on, warn_cont;
};

kb_lua_alloc *kb_lua_alloc_new(void) {
  kb_lua_alloc *a = calloc(1, sizeof *a);
  if (a) a->fail_after = -1;
  return a;
}

void kb_lua_alloc_free(kb_lua_alloc *a) {
  if (!a) return;
  slab *s = a->slabs;
  while (s) {
    slab *next = s->next;
    UNPOISON(s, KB_LUA_ALLOC_SLAB); /* free() must see its block whole */
    free(s);
    s = next;
  }
  free(a);
}

void kb_lua_alloc_get_stats(const kb_lua_alloc *a, kb_lua_alloc_stats *out) {
  *out = a->st;
}

void kb_lua_alloc_fail_after(kb_lua_alloc *a, long n) { a->fail_after = n; }

/* A free block goes onto its class's list (given the class, not the block's
 * size: a block kept in place by a shrink is bigger than its class). */
static void list_push(kb_lua_alloc *a, free_block *b, unsigned c) {
  UNPOISON(b, sizeof *b); /* the link word may be poisoned (a short block) */
#ifdef LA_ASAN
  b->next = NULL;
  if (a->tail[c]) {
    UNPOISON(a->tail[c], sizeof *b);
    a->tail[c]->next = b;
    POISON(a->tail[c], sizeof *b);
  } else {
    a->head[c] = b;
  }
  a->tail[c] = b;
#else
  b->next = a->head[c];
  a->head[c] = b;
#endif
  POISON(b, CLASS_SIZE(c));
}

/* Takes a new slab; the old one's tail, too short for the request that
 * found it so, is one block of a smaller class: it joins that class's list.
 * 0 when malloc has no slab to give (the old tail then stays as it was). */
static int slab_new(kb_lua_alloc *a) {
  slab *s = malloc(KB_LUA_ALLOC_SLAB);
  if (!s) return 0;
  size_t rest = (size_t)(a->bump_end - a->bump);
  if (rest >= KB_LUA_ALLOC_QUANTUM)
    list_push(a, (free_block *)a->bump, CLASS_OF(rest));
  s->next = a->slabs;
  a->slabs = s;
  a->bump = (char *)s + SLAB_HDR;
  a->bump_end = (char *)s + KB_LUA_ALLOC_SLAB;
  POISON(a->bump, KB_LUA_ALLOC_SLAB - SLAB_HDR);
  a->st.slabs++;
  return 1;
}

/* A block of class c for n bytes (CLASS_OF(n) == c); NULL when out of memory. */
static void *small_get(kb_lua_alloc *a, unsigned c, size_t n) {
  free_block *b = a->head[c];
  if (b) {
    UNPOISON(b, sizeof *b);
    a->head[c] = b->next;
    POISON(b, sizeof *b);
    /* The next block of the list is likely cold (freed by a sweep long
     * ago): its line loads while Lua fills this one, instead of stalling
     * the next request on it. Prefetching NULL does nothing. */
    __builtin_prefetch(a->head[c], 1);
#ifdef LA_ASAN
    if (!a->head[c]) a->tail[c] = NULL;
#endif
  } else {
    if ((size_t)(a->bump_end - a->bump) < CLASS_SIZE(c) && !slab_new(a))
      return NULL;
    b = (free_block *)a->bump;
    a->bump += CLASS_SIZE(c);
  }
  UNPOISON(b, n);
  a->st.small_blocks++;
  a->st.small_bytes += CLASS_SIZE(c);
  return b;
}

static void small_put(kb_lua_alloc *a, void *p, size_t osize) {
  unsigned c = CLASS_OF(osize);
  list_push(a, p, c);
  a->st.small_blocks--;
  a->st.small_bytes -= CLASS_SIZE(c);
}

static void large_free(kb_lua_alloc *a, void *p, size_t osize) {
  free(p);
  a->st.large_blocks--;
  a->st.large_bytes -= osize;
}

/* The injected failure (kb_lua_alloc_fail_after) due now? */
static int fail_now(kb_lua_alloc *a) {
  if (a->fail_after == 0) return 1;
  a->fail_after--;
  return 0;
}

void *kb_lua_alloc_fn(void *ud, void *ptr, size_t osize, size_t nsize) {
  kb_lua_alloc *a = ud;
  if (!ptr) osize = 0; /* for a new block Lua passes the object's type */
  if (nsize == 0) {
    if (ptr) {
      if (osize <= KB_LUA_ALLOC_MAX) small_put(a, ptr, osize);
      else large_free(a, ptr, osize);
    }
    return NULL;
  }
  if (a->fail_after >= 0 && nsize > osize && fail_now(a)) return NULL;

  if (nsize <= KB_LUA_ALLOC_MAX) {
    unsigned nc = CLASS_OF(nsize);
    if (!ptr) return small_get(a, nc, nsize);
    if (osize <= KB_LUA_ALLOC_MAX) {
      unsigned oc = CLASS_OF(osize);
      if (oc != nc) {
        void *p = small_get(a, nc, nsize);
        if (p) {
          memcpy(p, ptr, osize < nsize ? osize : nsize);
          small_put(a, ptr, osize);
          return p;
        }
        if (nsize > osize) return NULL;
        /* A shrink with no memory for the smaller class: the block stays
         * and counts in its new class from now on. */
        a->st.small_bytes -= CLASS_SIZE(oc) - CLASS_SIZE(nc);
      }
      POISON(ptr, CLASS_SIZE(oc));
      UNPOISON(ptr, nsize);
      return ptr;
    }
    /* From malloc into the pool. */
    void *p = small_get(a, nc, nsize);
    if (!p) return NULL;
    memcpy(p, ptr, nsize);
    large_free(a, ptr, osize);
    return p;
  }

  if (ptr && osize > KB_LUA_ALLOC_MAX) {
    void *p = realloc(ptr, nsize);
    if (p) a->st.large_bytes += nsize - osize; /* unsigned: wraps right */
    return p;
  }
  /* New, or out of the pool into malloc. */
  void *p = malloc(nsize);
  if (!p) return NULL;
  a->st.large_blocks++;
  a->st.large_bytes += nsize;
  if (ptr) {
    memcpy(p, ptr, osize);
    small_put(a, ptr, osize);
  }
  return p;
}

/* What luaL_newstate's panic function does: say why, then Lua aborts. */
static int state_panic(lua_State *L) {
  const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1)
                                                   : "error object is not a string";
  fprintf(stderr, "PANIC: unprotected error in call to Lua API (%s)\n", msg);
  fflush(stderr);
  return 0;
}

/* Lua's warn(): off until a message "@on", off again after "@off" (control
 * messages are single pieces); a message on is "Lua warning: " and its
 * pieces on stderr, ended by a newline. As luaL_newstate's behaves. */
static void state_warn(void *ud, const char *msg, int tocont) {
  kb_lua_alloc *a = ud;
  int first = !a->warn_cont;
  a->warn_cont = tocont;
  if (first && !tocont && msg[0] == '@') {
    if (strcmp(msg + 1, "on") == 0) a->warn_on = 1;
    else if (strcmp(msg + 1, "off") == 0) a->warn_on = 0;
    return;
  }
  if (!a->warn_on) return;
  if (first) fputs("Lua warning: ", stderr);
  fputs(msg, stderr);
  if (!tocont) {
    fputc('\n', stderr);
    fflush(stderr);
  }
}

lua_State *kb_lua_state_new(void) {
  const char *mode = getenv("KBRUN_LUA_ALLOC");
  if (mode && strcmp(mode, "system") == 0) return luaL_newstate();
  if (mode && *mode && strcmp(mode, "pool") != 0)
    kb_log(KB_LOG_WARN, "KBRUN_LUA_ALLOC=%s is neither pool nor system: using the pool",
           mode);
  kb_lua_alloc *a = kb_lua_alloc_new();
  if (!a) return NULL;
  lua_State *L = lua_newstate(kb_lua_alloc_fn, a);
  if (!L) {
    kb_lua_alloc_free(a);
    return NULL;
  }
  lua_atpanic(L, state_panic);
  lua_setwarnf(L, state_warn, a);
  return L;
}

void kb_lua_state_close(lua_State *L) {
  if (!L) return;
  void *ud = NULL;
  lua_Alloc f = lua_getallocf(L, &ud);
  lua_close(L);
  if (f == kb_lua_alloc_fn) kb_lua_alloc_free(ud);
}
