/* hist_bench: cost of the HDR histogram, from C and through kb.hist in Lua.
 *
 *   hist_bench [values_per_run [runs]]      (defaults 1048576 and 9)
 *
 * Prints the median over the runs of: ns per kb_hdr_record of log-uniform
 * random values (1 us .. 1 h in microsecond units, the kb.hist default
 * layout), the same from Lua (h:record in a loop, and the loop alone), plus
 * percentile, merge and encode/decode costs. See bench/README.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>

#include <lauxlib.h>
#include <lualib.h>

#include "kb/hdr.h"
#include "kb/lua_modules.h"

static const kb_hdr_config layout = {.highest = INT64_C(3600000000), .digits = 3, .unit = 1e-6};

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static uint64_t rng_state = 88172645463325252u;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* Log-uniform microseconds over 1 us .. 1 h. */
static int64_t *random_values(int n) {
  int64_t *v = malloc((size_t)n * sizeof *v);
  for (int i = 0; i < n; i++) {
    double u = (double)(rng() >> 11) / 9007199254740992.0;
    v[i] = (int64_t)pow(10.0, u * log10(3.6e9));
  }
  return v;
}

static double bench_record(const int64_t *vals, int n) {
  kb_hdr *h = kb_hdr_new(&layout, NULL);
  double t0 = now_ns();
  for (int i = 0; i < n; i++) kb_hdr_record(h, vals[i], 1);
  double ns = (now_ns() - t0) / n;
  if (h->total != n) fprintf(stderr, "lost values\n");
  kb_hdr_free(h);
  return ns;
}

/* Runs `code` (with `vals` a global array of n seconds) and returns ns per
 * iteration, or -1 on error. */
static double bench_lua(lua_State *L, const char *code, int n) {
  if (luaL_loadstring(L, code) != LUA_OK) {
    fprintf(stderr, "%s\n", lua_tostring(L, -1));
    return -1;
  }
  double t0 = now_ns();
  if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
    fprintf(stderr, "%s\n", lua_tostring(L, -1));
    return -1;
  }
  return (now_ns() - t0) / n;
}

static lua_State *lua_with_values(const int64_t *vals, int n) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  luaL_requiref(L, "kb.hist", luaopen_kb_hist, 0);
  lua_setglobal(L, "hist");
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushnumber(L, (double)vals[i] * 1e-6);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setglobal(L, "vals");
  return L;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 1 << 20;
  int runs = argc > 2 ? atoi(argv[2]) : 9;
  if (n < 1 || runs < 1 || runs > 1000) {
    fprintf(stderr, "usage: hist_bench [values_per_run [runs]]\n");
    return 2;
  }
  int64_t *vals = random_values(n);
  double *t = malloc((size_t)runs * sizeof *t);
  printf("hist_bench: %d log-uniform values (1 us .. 1 h), %d runs, medians\n", n, runs);

  for (int r = 0; r < runs; r++) t[r] = bench_record(vals, n);
  printf("  C   kb_hdr_record            %8.2f ns/value\n", median(t, runs));

  lua_State *L = lua_with_values(vals, n);
  const char *record =
      "local h, v = hist.new(), vals\n"
      "for i = 1, #v do h:record(v[i]) end\n"
      "assert(h:count() == #v)";
  const char *loop =
      "local s, v = 0, vals\n"
      "for i = 1, #v do s = s + v[i] end\n"
      "sink = s";
  double lrec[1000], lloop[1000];
  for (int r = 0; r < runs; r++) {
    lrec[r] = bench_lua(L, record, n);
    lloop[r] = bench_lua(L, loop, n);
    lua_gc(L, LUA_GCCOLLECT);
  }
  double mrec = median(lrec, runs), mloop = median(lloop, runs);
  printf("  Lua h:record(v) loop         %8.2f ns/value\n", mrec);
  printf("  Lua loop alone               %8.2f ns/value\n", mloop);
  printf("  Lua h:record call cost       %8.2f ns/value\n", mrec - mloop);
  lua_close(L);

  /* Reading and moving a full histogram. */
  kb_hdr *h = kb_hdr_new(&layout, NULL), *g = kb_hdr_new(&layout, NULL);
  for (int i = 0; i < n; i++) kb_hdr_record(h, vals[i], 1);
  volatile int64_t sink = 0;
  for (int r = 0; r < runs; r++) {
    double t0 = now_ns();
    for (int k = 0; k < 100; k++) sink += kb_hdr_value_at_percentile(h, 99.9);
    t[r] = (now_ns() - t0) / 100 / 1e3;
  }
  printf("  C   value_at_percentile      %8.2f us (full histogram)\n", median(t, runs));
  for (int r = 0; r < runs; r++) {
    double t0 = now_ns();
    for (int k = 0; k < 100; k++) kb_hdr_merge(g, h);
    t[r] = (now_ns() - t0) / 100 / 1e3;
  }
  printf("  C   merge                    %8.2f us\n", median(t, runs));
  char *s = NULL;
  size_t len = 0;
  for (int r = 0; r < runs; r++) {
    free(s);
    double t0 = now_ns();
    kb_hdr_encode(h, &s, &len);
    t[r] = (now_ns() - t0) / 1e3;
  }
  int used = 0;
  kb_hdr_iter it;
  kb_hdr_iter_init(&it, h);
  while (kb_hdr_iter_next(&it)) used++;
  printf("  C   encode                   %8.2f us, %zu bytes (%d of %d buckets in use)\n",
         median(t, runs), len, used, (int)h->counts_len);
  for (int r = 0; r < runs; r++) {
    double t0 = now_ns();
    kb_hdr *d = kb_hdr_decode(s, len, NULL, 0);
    t[r] = (now_ns() - t0) / 1e3;
    sink += d ? d->total : -1;
    kb_hdr_free(d);
  }
  printf("  C   decode                   %8.2f us\n", median(t, runs));
  free(s);
  kb_hdr_free(h);
  kb_hdr_free(g);
  free(vals);
  free(t);
  (void)sink;
  return 0;
}
