/* The Lua state's pool allocator (src/rt/lua_alloc.c), driven directly: a
 * deterministic pseudo-random run of allocs, reallocs (grow, shrink, across
 * classes, to and from malloc's blocks) and frees whose live blocks keep
 * their fill patterns and alignment; the edges of the classes; injected
 * failures answered by NULL with the old block intact; and real lua_States
 * on a pool (string and table churn, a full collection, a memory error)
 * that give everything back at lua_close. In the ASan build (KB_SANITIZE)
 * it also checks what the pool poisons. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

#include "../../src/rt/lua_alloc.h"
#include "kbtest.h"

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#ifdef TEST_ASAN
#include <sanitizer/asan_interface.h>
#endif

static uint64_t rng_state;

static uint64_t rng(void) { /* xorshift64: the same sequence every run */
  uint64_t x = rng_state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return rng_state = x;
}

static unsigned char pattern(uint32_t seed, size_t i) {
  return (unsigned char)((seed * 131u + i * 7u + (i >> 8)) & 0xff);
}

static void fill(unsigned char *p, size_t from, size_t n, uint32_t seed) {
  for (size_t i = from; i < n; i++) p[i] = pattern(seed, i);
}

static int intact(const unsigned char *p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != pattern(seed, i)) return 0;
  return 1;
}

static int aligned(const void *p) {
  return (uintptr_t)p % _Alignof(max_align_t) == 0 && (uintptr_t)p % 16 == 0;
}

/* Sizes that exercise every path: mostly small, the edges of the classes
 * and of the pool, and now and then a block for malloc. */
static size_t random_size(void) {
  uint64_t r = rng() % 100;
  if (r < 60) return 1 + rng() % KB_LUA_ALLOC_MAX;
  if (r < 80) { /* a class edge: 16k, 16k + 1 */
    size_t k = 1 + rng() % (KB_LUA_ALLOC_MAX / KB_LUA_ALLOC_QUANTUM);
    size_t s = k * KB_LUA_ALLOC_QUANTUM + (rng() % 2);
    return s;
  }
  if (r < 90) return KB_LUA_ALLOC_MAX - 2 + rng() % 5; /* around the pool's edge */
  return KB_LUA_ALLOC_MAX + 1 + rng() % 8192;
}

#define SLOTS 700

typedef struct {
  unsigned char *p;
  size_t n;
  uint32_t seed;
} slot;

static int all_intact(const slot *s) {
  for (int i = 0; i < SLOTS; i++)
    if (s[i].p && !intact(s[i].p, s[i].n, s[i].seed)) return 0;
  return 1;
}

/* Every block handed out came back: the pool holds nothing live. */
static void check_all_returned(kb_lua_alloc *a) {
  kb_lua_alloc_stats st;
  kb_lua_alloc_get_stats(a, &st);
  KB_CHECK(st.small_blocks == 0 && st.small_bytes == 0);
  KB_CHECK(st.large_blocks == 0 && st.large_bytes == 0);
}

static void test_random_sequence(void) {
  kb_lua_alloc *a = kb_lua_alloc_new();
  KB_CHECK(a != NULL);
  if (!a) return;
  static slot s[SLOTS];
  memset(s, 0, sizeof s);
  rng_state = 0x9e3779b97f4a7c15u;
  int bad_content = 0, bad_align = 0, null_result = 0, moved_in_class = 0;
  uint32_t next_seed = 1;
  for (int step = 0; step < 300000; step++) {
    slot *b = &s[rng() % SLOTS];
    if (!b->p) {
      size_t n = random_size();
      /* Lua passes the new object's type as osize; anything will do */
      unsigned char *p = kb_lua_alloc_fn(a, NULL, rng() % 10, n);
      if (!p) { null_result++; continue; }
      if (!aligned(p)) bad_align++;
      b->p = p, b->n = n, b->seed = next_seed++;
      fill(p, 0, n, b->seed);
      continue;
    }
    if (!intact(b->p, b->n, b->seed)) bad_content++;
    if (rng() % 3 == 0) {
      KB_CHECK(kb_lua_alloc_fn(a, b->p, b->n, 0) == NULL);
      b->p = NULL;
      continue;
    }
    size_t n = random_size();
    unsigned char *p = kb_lua_alloc_fn(a, b->p, b->n, n);
    if (!p) { null_result++; continue; }
    if (!aligned(p)) bad_align++;
    /* within one class of the pool a block stays where it is */
    if (b->n <= KB_LUA_ALLOC_MAX && n <= KB_LUA_ALLOC_MAX &&
        (b->n - 1) / KB_LUA_ALLOC_QUANTUM == (n - 1) / KB_LUA_ALLOC_QUANTUM &&
        p != b->p)
      moved_in_class++;
    size_t kept = b->n < n ? b->n : n;
    if (!intact(p, kept, b->seed)) bad_content++;
    fill(p, kept, n, b->seed);
    b->p = p, b->n = n;
    if (step % 5000 == 0 && !all_intact(s)) bad_content++;
  }
  KB_CHECK(bad_content == 0);
  KB_CHECK(bad_align == 0);
  KB_CHECK(null_result == 0);
  KB_CHECK(moved_in_class == 0);
  KB_CHECK(all_intact(s));

  kb_lua_alloc_stats st;
  kb_lua_alloc_get_stats(a, &st);
  size_t live_small = 0, live_large = 0, large_bytes = 0;
  for (int i = 0; i < SLOTS; i++) {
    if (!s[i].p) continue;
    if (s[i].n <= KB_LUA_ALLOC_MAX) live_small++;
    else live_large++, large_bytes += s[i].n;
  }
  KB_CHECK(st.small_blocks == live_small);
  KB_CHECK(st.large_blocks == live_large);
  KB_CHECK(st.large_bytes == large_bytes);
  KB_CHECK(st.slabs > 0);
  for (int i = 0; i < SLOTS; i++)
    if (s[i].p) kb_lua_alloc_fn(a, s[i].p, s[i].n, 0);
  check_all_returned(a);
  kb_lua_alloc_free(a);
}

/* One block walked across every edge: in place within a class, moved
 * across classes, out to malloc and back, contents kept each time. */
static void test_class_edges(void) {
  kb_lua_alloc *a = kb_lua_alloc_new();
  const size_t sizes[] = {1, 8, 16, 17, 32, 31, 1, 255, 256, 257,
                          KB_LUA_ALLOC_MAX, KB_LUA_ALLOC_MAX + 1, 4096, 100000,
                          KB_LUA_ALLOC_MAX + 1, KB_LUA_ALLOC_MAX, 40, 3};
  size_t n = 0;
  unsigned char *p = NULL;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t m = sizes[i];
    unsigned char *q = kb_lua_alloc_fn(a, p, p ? n : LUA_TTABLE, m);
    KB_CHECK(q != NULL);
    if (!q) break;
    KB_CHECK(aligned(q));
    size_t kept = n < m ? n : m;
    KB_CHECK(intact(q, kept, 7));
    if (p && n <= KB_LUA_ALLOC_MAX && m <= KB_LUA_ALLOC_MAX &&
        (n - 1) / KB_LUA_ALLOC_QUANTUM == (m - 1) / KB_LUA_ALLOC_QUANTUM)
      KB_CHECK(q == p);
    fill(q, kept, m, 7);
    p = q, n = m;
  }
  kb_lua_alloc_stats st;
  kb_lua_alloc_get_stats(a, &st);
  KB_CHECK(st.small_blocks == 1 && st.small_bytes == 16 && st.large_blocks == 0);
  kb_lua_alloc_fn(a, p, n, 0);
  /* every class, many blocks of each: aligned and disjoint (the patterns) */
  enum { PER = 40 };
  static unsigned char *blk[KB_LUA_ALLOC_MAX / KB_LUA_ALLOC_QUANTUM][PER];
  for (size_t c = 0; c < KB_LUA_ALLOC_MAX / KB_LUA_ALLOC_QUANTUM; c++)
    for (int j = 0; j < PER; j++) {
      size_t sz = (c + 1) * KB_LUA_ALLOC_QUANTUM;
      blk[c][j] = kb_lua_alloc_fn(a, NULL, 0, sz);
      KB_CHECK(blk[c][j] && aligned(blk[c][j]));
      if (blk[c][j]) fill(blk[c][j], 0, sz, (uint32_t)(c * PER + j));
    }
  int bad = 0;
  for (size_t c = 0; c < KB_LUA_ALLOC_MAX / KB_LUA_ALLOC_QUANTUM; c++)
    for (int j = 0; j < PER; j++) {
      size_t sz = (c + 1) * KB_LUA_ALLOC_QUANTUM;
      if (!blk[c][j]) continue;
      if (!intact(blk[c][j], sz, (uint32_t)(c * PER + j))) bad++;
      kb_lua_alloc_fn(a, blk[c][j], sz, 0);
    }
  KB_CHECK(bad == 0);
  kb_lua_alloc_get_stats(a, &st);
  KB_CHECK(st.small_blocks == 0 && st.large_blocks == 0);
  KB_CHECK(st.slabs >= 2); /* 40 of each class need more than one slab */
  kb_lua_alloc_free(a);
}

/* An injected failure is a NULL, with the old block as it was; frees and
 * shrinks still work; lifting it makes everything work again. */
static void test_injected_failure(void) {
  kb_lua_alloc *a = kb_lua_alloc_new();
  unsigned char *small = kb_lua_alloc_fn(a, NULL, 0, 40);
  unsigned char *large = kb_lua_alloc_fn(a, NULL, 0, 2000);
  KB_CHECK(small && large);
  if (!small || !large) return;
  fill(small, 0, 40, 1);
  fill(large, 0, 2000, 2);
  kb_lua_alloc_fail_after(a, 1);
  unsigned char *one = kb_lua_alloc_fn(a, NULL, 0, 24); /* the one allowed */
  KB_CHECK(one != NULL);
  KB_CHECK(kb_lua_alloc_fn(a, NULL, 0, 24) == NULL);
  KB_CHECK(kb_lua_alloc_fn(a, NULL, 0, 5000) == NULL);
  KB_CHECK(kb_lua_alloc_fn(a, small, 40, 300) == NULL);  /* across classes */
  KB_CHECK(kb_lua_alloc_fn(a, small, 40, 1000) == NULL); /* into malloc */
  KB_CHECK(kb_lua_alloc_fn(a, small, 40, 41) == NULL);   /* even in place */
  KB_CHECK(kb_lua_alloc_fn(a, large, 2000, 9000) == NULL);
  KB_CHECK(intact(small, 40, 1) && intact(large, 2000, 2));
  /* shrinks are never failed */
  unsigned char *s2 = kb_lua_alloc_fn(a, small, 40, 20);
  KB_CHECK(s2 && intact(s2, 20, 1));
  unsigned char *l2 = kb_lua_alloc_fn(a, large, 2000, 100); /* back into the pool */
  KB_CHECK(l2 && intact(l2, 100, 2));
  kb_lua_alloc_fail_after(a, -1);
  unsigned char *l3 = kb_lua_alloc_fn(a, l2, 100, 3000);
  KB_CHECK(l3 && intact(l3, 100, 2));
  kb_lua_alloc_fn(a, s2, 20, 0);
  kb_lua_alloc_fn(a, l3, 3000, 0);
  kb_lua_alloc_fn(a, one, 24, 0);
  kb_lua_alloc_stats st;
  kb_lua_alloc_get_stats(a, &st);
  KB_CHECK(st.small_blocks == 0 && st.large_blocks == 0 && st.large_bytes == 0);
  kb_lua_alloc_free(a);
}

static const char *churn =
    "local keep = {}\n"
    "for i = 1, 20000 do\n"
    "  local t = {id = i, name = 'run-' .. i, tags = {'a', 'b', i % 7}}\n"
    "  t.text = string.rep('x', i % 700) .. tostring(i)\n"
    "  for j = 1, i % 40 do t[j] = j * 1.5 end\n"
    "  if i % 50 == 0 then keep[#keep + 1] = t end\n"
    "  if #keep > 100 then table.remove(keep, 1) end\n"
    "end\n"
    "local parts = {}\n"
    "for i = 1, 3000 do parts[i] = string.format('%d:%s', i, ('y'):rep(i % 300)) end\n"
    "local s = table.concat(parts, ',')\n"
    "collectgarbage('collect')\n"
    "return #s, #keep, keep[1].name\n";

/* A real state on the pool: churn, a full collection, and lua_close gives
 * every block back. */
static void test_lua_state(void) {
  kb_lua_alloc *a = kb_lua_alloc_new();
  lua_State *L = lua_newstate(kb_lua_alloc_fn, a);
  KB_CHECK(L != NULL);
  if (!L) return;
  luaL_openlibs(L);
  int rc = luaL_loadstring(L, churn) || lua_pcall(L, 0, 3, 0);
  KB_CHECK(rc == LUA_OK);
  if (rc != LUA_OK) fprintf(stderr, "lua: %s\n", lua_tostring(L, -1));
  KB_CHECK(lua_tointeger(L, -2) == 100);
  KB_CHECK_STR(lua_tostring(L, -1), "run-15050");
  kb_lua_alloc_stats st;
  kb_lua_alloc_get_stats(a, &st);
  KB_CHECK(st.small_blocks > 100 && st.large_blocks > 0);
  /* Lua's own count of its heap is what the pool was asked for (the pool
   * rounds small blocks up to their class) */
  size_t lua_bytes = (size_t)lua_gc(L, LUA_GCCOUNT, 0) * 1024 + (size_t)lua_gc(L, LUA_GCCOUNTB, 0);
  KB_CHECK(lua_bytes <= st.small_bytes + st.large_bytes);
  KB_CHECK(lua_bytes + st.small_blocks * KB_LUA_ALLOC_QUANTUM >= st.small_bytes + st.large_bytes);
  lua_close(L);
  check_all_returned(a);
  kb_lua_alloc_free(a);
}

/* Out of memory inside Lua code is Lua's memory error, not a crash; the
 * state works again once memory is back, and closes clean. */
static void test_lua_memory_error(void) {
  kb_lua_alloc *a = kb_lua_alloc_new();
  lua_State *L = lua_newstate(kb_lua_alloc_fn, a);
  KB_CHECK(L != NULL);
  if (!L) return;
  luaL_openlibs(L);
  int errmem = 0;
  for (long n = 0; n < 4000; n += 97) { /* failures at many different points */
    KB_CHECK(luaL_loadstring(L, churn) == LUA_OK);
    kb_lua_alloc_fail_after(a, n);
    int rc = lua_pcall(L, 0, 3, 0);
    kb_lua_alloc_fail_after(a, -1);
    if (rc == LUA_ERRMEM) errmem++;
    KB_CHECK(rc == LUA_ERRMEM || rc == LUA_OK);
    lua_settop(L, 0);
  }
  KB_CHECK(errmem > 0);
  KB_CHECK(luaL_loadstring(L, churn) == LUA_OK && lua_pcall(L, 0, 3, 0) == LUA_OK);
  lua_close(L);
  check_all_returned(a);
  kb_lua_alloc_free(a);
}

/* kb_lua_state_new: on the pool by default, luaL_newstate's with
 * KBRUN_LUA_ALLOC=system. */
static void test_state_new(void) {
  unsetenv("KBRUN_LUA_ALLOC");
  lua_State *L = kb_lua_state_new();
  KB_CHECK(L != NULL);
  void *ud = NULL;
  KB_CHECK(L && lua_getallocf(L, &ud) == kb_lua_alloc_fn && ud != NULL);
  if (L) {
    luaL_openlibs(L);
    /* warnings are off as with luaL_newstate; "@on" is taken */
    KB_CHECK(luaL_dostring(L, "warn('@on'); warn('@off'); warn('not shown'); return 1") == LUA_OK);
  }
  kb_lua_state_close(L);

  setenv("KBRUN_LUA_ALLOC", "system", 1);
  L = kb_lua_state_new();
  KB_CHECK(L != NULL);
  KB_CHECK(L && lua_getallocf(L, &ud) != kb_lua_alloc_fn);
  if (L) {
    luaL_openlibs(L);
    KB_CHECK(luaL_dostring(L, "return ('z'):rep(100000)") == LUA_OK);
  }
  kb_lua_state_close(L);
  unsetenv("KBRUN_LUA_ALLOC");
}

#ifdef TEST_ASAN
/* What ASan knows: a block's bytes past its size, a freed block, and the
 * slab's part not handed out yet are poisoned. */
static void test_asan_poison(void) {
  kb_lua_alloc *a = kb_lua_alloc_new();
  unsigned char *p = kb_lua_alloc_fn(a, NULL, 0, 20);
  KB_CHECK(p && !__asan_region_is_poisoned(p, 20));
  KB_CHECK(__asan_address_is_poisoned(p + 20));
  KB_CHECK(__asan_address_is_poisoned(p + 31));
  KB_CHECK(__asan_address_is_poisoned(p + 32)); /* not carved yet */
  unsigned char *q = kb_lua_alloc_fn(a, p, 20, 30); /* same class: in place */
  KB_CHECK(q == p && !__asan_region_is_poisoned(p, 30) && __asan_address_is_poisoned(p + 30));
  q = kb_lua_alloc_fn(a, p, 30, 17); /* still the same class */
  KB_CHECK(q == p && __asan_address_is_poisoned(p + 17));
  kb_lua_alloc_fn(a, p, 17, 0);
  KB_CHECK(__asan_address_is_poisoned(p) && __asan_address_is_poisoned(p + 8));
  /* a freed block is reused only after the others of its class */
  unsigned char *b1 = kb_lua_alloc_fn(a, NULL, 0, 16);
  unsigned char *b2 = kb_lua_alloc_fn(a, NULL, 0, 16);
  kb_lua_alloc_fn(a, b1, 16, 0);
  kb_lua_alloc_fn(a, b2, 16, 0);
  unsigned char *c1 = kb_lua_alloc_fn(a, NULL, 0, 16);
  KB_CHECK(c1 == b1); /* the oldest free one first */
  KB_CHECK(__asan_address_is_poisoned(b2));
  kb_lua_alloc_fn(a, c1, 16, 0);
  kb_lua_alloc_free(a);
}
#endif

int main(void) {
  KB_RUN(test_random_sequence);
  KB_RUN(test_class_edges);
  KB_RUN(test_injected_failure);
  KB_RUN(test_lua_state);
  KB_RUN(test_lua_memory_error);
  KB_RUN(test_state_new);
#ifdef TEST_ASAN
  KB_RUN(test_asan_poison);
#endif
  return kb_test_report();
}
