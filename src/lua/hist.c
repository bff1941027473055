/* kb.hist: HDR histograms of durations for Lua.
 *
 *   local hist = require "kb.hist"
 *   local h = hist.new{lowest = 1e-6, highest = 3600, digits = 3}  -- the defaults
 *   h:record(0.0123)              -- seconds
 *   print(h:percentile(99), h:summary().p50)
 *   local copy = hist.decode(h:encode())
 *
 * Values are seconds (floats). Internally a histogram counts integer units of
 * `lowest` (microseconds by default) in a kb_hdr (include/kb/hdr.h):
 *  - a value is rounded to the nearest unit; a value in (0, lowest) counts as
 *    lowest, 0 as 0;
 *  - a value above `highest` (after rounding) is counted as `highest` and in
 *    h:saturated(), so a report can tell that its tail was cut;
 *  - negative values and NaN raise an error;
 *  - percentiles use HdrHistogram's rule: the value where the cumulative
 *    count first reaches ceil(p / 100 * count), reported as the highest value
 *    of that bucket, capped at the exact maximum (p100 == max);
 *  - statistics of an empty histogram (min, max, mean, stddev, percentiles)
 *    are nil.
 * The counters live inside the userdata, so the Lua GC sees their size. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "kb/hdr.h"
#include "kb/ranks.h"
#include "kb/lua_modules.h"
#include "kb/lua_util.h"

#define HIST_MT "kb.hist"

typedef struct lhist {
  kb_hdr h;
  int64_t counts[]; /* kb_hdr_counts_size(&h.cfg) bytes */
} lhist;

/* Methods and metamethods carry the metatable as upvalue 1: comparing with
 * it is cheaper than luaL_checkudata's registry lookup, which matters for
 * h:record. luaL_checkudata still gives the error message. */
static lhist *check_hist(lua_State *L, int idx) {
  void *p = lua_touserdata(L, idx);
  if (p && lua_getmetatable(L, idx)) {
    int same = lua_rawequal(L, -1, lua_upvalueindex(1));
    lua_pop(L, 1);
    if (same) return p;
  }
  return (lhist *)luaL_checkudata(L, idx, HIST_MT);
}

static lhist *push_hist(lua_State *L, const kb_hdr_config *cfg) {
  size_t size = kb_hdr_counts_size(cfg);
  lhist *lh = lua_newuserdatauv(L, sizeof(lhist) + size, 0);
  kb_hdr_init_in(&lh->h, cfg, lh->counts);
  luaL_setmetatable(L, HIST_MT);
  return lh;
}

/* ---- units ---------------------------------------------------------------- */

static double seconds(const kb_hdr *h, int64_t units) { return (double)units * h->cfg.unit; }

/* A duration in seconds as units: rounded, (0, lowest) -> 1 unit, anything
 * beyond highest -> highest + 1 so that kb_hdr_record saturates it. */
static int64_t to_units(lua_State *L, const kb_hdr *h, int arg, const char *what) {
  lua_Number v = luaL_checknumber(L, arg);
  if (!(v >= 0)) {
    if (v != v) luaL_argerror(L, arg, lua_pushfstring(L, "%s is NaN", what));
    luaL_argerror(L, arg, lua_pushfstring(L, "%s must be >= 0, got %f", what, v));
  }
  if (v == 0) return 0;
  double u = v / h->cfg.unit;
  if (u > (double)h->cfg.highest) return h->cfg.highest + 1;
  int64_t n = (int64_t)(u + 0.5); /* round half up; u >= 0 */
  return n < 1 ? 1 : n;
}

static void push_seconds_or_nil(lua_State *L, const kb_hdr *h, int64_t units) {
  if (h->total) lua_pushnumber(L, seconds(h, units));
  else lua_pushnil(L);
}

static double check_percentile(lua_State *L, int arg, lua_Number p) {
  if (!(p >= 0 && p <= 100))
    luaL_argerror(L, arg, lua_pushfstring(L, "percentile must be between 0 and 100, got %f", p));
  return p;
}

/* ---- construction --------------------------------------------------------- */

static void check_options(lua_State *L, int idx) {
  if (lua_isnoneornil(L, idx)) return;
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
    if (strcmp(k, "lowest") && strcmp(k, "highest") && strcmp(k, "digits"))
      luaL_argerror(L, idx, lua_pushfstring(L, "unknown option '%s' (lowest, highest, digits)",
                                            lua_type(L, -2) == LUA_TSTRING ? k : luaL_typename(L, -2)));
    lua_pop(L, 1);
  }
}

static void layout_from_options(lua_State *L, int idx, kb_hdr_config *cfg) {
  check_options(L, idx);
  lua_Number lowest = kb_opt_number(L, idx, "lowest", 1e-6);
  lua_Number highest = kb_opt_number(L, idx, "highest", 3600);
  lua_Integer digits = kb_opt_integer(L, idx, "digits", 3);
  if (!(lowest > 0) || !isfinite(lowest))
    luaL_argerror(L, idx, "lowest must be a finite number > 0");
  if (!(highest >= 2 * lowest) || !isfinite(highest))
    luaL_argerror(L, idx, "highest must be finite and at least 2 * lowest");
  if (highest / lowest > (double)KB_HDR_MAX_HIGHEST)
    luaL_argerror(L, idx, "highest / lowest must be at most 2^62");
  if (digits < 1 || digits > KB_HDR_MAX_DIGITS)
    luaL_argerror(L, idx, "digits must be an integer from 1 to 5");
  cfg->unit = lowest;
  cfg->highest = llround(highest / lowest);
  cfg->digits = (int)digits;
  const char *problem = kb_hdr_config_problem(cfg);
  if (problem) luaL_argerror(L, idx, problem);
}

/** kb.hist.new([opts]) -> histogram. opts: lowest (1e-6), highest (3600), digits (3). */
static int hist_new(lua_State *L) {
  kb_hdr_config cfg;
  layout_from_options(L, 1, &cfg);
  push_hist(L, &cfg);
  return 1;
}

/** kb.hist.decode(s) -> histogram; raises a "hist" error on corrupt input. */
static int hist_decode(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  char err[160];
  kb_hdr_config cfg;
  if (kb_hdr_decode_config(s, len, &cfg, err, sizeof err) != KB_HDR_OK)
    return kb_error_raise(L, "hist", "corrupt histogram encoding: %s", err);
  lhist *lh = push_hist(L, &cfg);
  if (kb_hdr_decode_into(&lh->h, s, len, err, sizeof err) != KB_HDR_OK)
    return kb_error_raise(L, "hist", "corrupt histogram encoding: %s", err);
  return 1;
}

/** kb.hist.is(v) -> true if v is a histogram. */
static int hist_is(lua_State *L) {
  lua_pushboolean(L, luaL_testudata(L, 1, HIST_MT) != NULL);
  return 1;
}

/* ---- recording ------------------------------------------------------------ */

static void check_rc(lua_State *L, int rc) {
  if (rc != KB_HDR_OK) kb_error_raise(L, "hist", "%s", kb_hdr_strerror(rc));
}

static int64_t check_count(lua_State *L, int arg) {
  lua_Integer n = luaL_optinteger(L, arg, 1);
  if (n < 0) luaL_argerror(L, arg, "count must be >= 0");
  return n;
}

/** h:record(v [, count]): adds count (1) occurrences of v seconds. */
static int hist_record(lua_State *L) {
  lhist *lh = check_hist(L, 1);
  int64_t v = to_units(L, &lh->h, 2, "value");
  check_rc(L, kb_hdr_record(&lh->h, v, check_count(L, 3)));
  return 0;
}

/** h:record_corrected(v, expected_interval [, count]): records v, then
 * back-fills v - interval, v - 2 interval, ... while >= interval
 * (HdrHistogram's recordValueWithExpectedInterval). interval 0: no correction. */
static int hist_record_corrected(lua_State *L) {
  lhist *lh = check_hist(L, 1);
  int64_t v = to_units(L, &lh->h, 2, "value");
  int64_t interval = to_units(L, &lh->h, 3, "expected interval");
  check_rc(L, kb_hdr_record_corrected(&lh->h, v, check_count(L, 4), interval));
  return 0;
}

/** h:reset() -> h: forgets every value. */
static int hist_reset(lua_State *L) {
  kb_hdr_reset(&check_hist(L, 1)->h);
  lua_settop(L, 1);
  return 1;
}

static void push_layout_string(lua_State *L, const kb_hdr *h) {
  char buf[96];
  snprintf(buf, sizeof buf, "lowest=%.6g highest=%.6g digits=%d", h->cfg.unit,
           seconds(h, h->cfg.highest), h->cfg.digits);
  lua_pushstring(L, buf);
}

/** h:merge(other) -> h: adds every value of other (same layout required). */
static int hist_merge(lua_State *L) {
  lhist *a = check_hist(L, 1), *b = check_hist(L, 2);
  int rc = kb_hdr_merge(&a->h, &b->h);
  if (rc == KB_HDR_ELAYOUT) {
    push_layout_string(L, &a->h);
    push_layout_string(L, &b->h);
    return kb_error_raise(L, "hist", "cannot merge histograms with different layouts (%s vs %s)",
                          lua_tostring(L, -2), lua_tostring(L, -1));
  }
  check_rc(L, rc);
  lua_settop(L, 1);
  return 1;
}

/** h:copy() -> a new histogram with the same layout and values. */
static int hist_copy(lua_State *L) {
  lhist *src = check_hist(L, 1);
  lhist *dst = push_hist(L, &src->h.cfg);
  kb_hdr_merge(&dst->h, &src->h);
  return 1;
}

/* ---- statistics ----------------------------------------------------------- */

/** h:count() -> number of values recorded (also #h). */
static int hist_count(lua_State *L) {
  lua_pushinteger(L, check_hist(L, 1)->h.total);
  return 1;
}

/** h:saturated() -> how many values were above highest (counted as highest). */
static int hist_saturated(lua_State *L) {
  lua_pushinteger(L, check_hist(L, 1)->h.saturated);
  return 1;
}

static int hist_min(lua_State *L) {
  const kb_hdr *h = &check_hist(L, 1)->h;
  push_seconds_or_nil(L, h, kb_hdr_min(h));
  return 1;
}

static int hist_max(lua_State *L) {
  const kb_hdr *h = &check_hist(L, 1)->h;
  push_seconds_or_nil(L, h, kb_hdr_max(h));
  return 1;
}

static void push_stat_or_nil(lua_State *L, const kb_hdr *h, double units) {
  if (h->total) lua_pushnumber(L, units * h->cfg.unit);
  else lua_pushnil(L);
}

/** h:mean(), h:stddev(): from the buckets (exact below 2048 units). */
static int hist_mean(lua_State *L) {
  const kb_hdr *h = &check_hist(L, 1)->h;
  push_stat_or_nil(L, h, kb_hdr_mean(h));
  return 1;
}

static int hist_stddev(lua_State *L) {
  const kb_hdr *h = &check_hist(L, 1)->h;
  push_stat_or_nil(L, h, kb_hdr_stddev(h));
  return 1;
}

/** h:percentile(p) -> seconds, p in 0..100. */
static int hist_percentile(lua_State *L) {
  const kb_hdr *h = &check_hist(L, 1)->h;
  double p = check_percentile(L, 2, luaL_checknumber(L, 2));
  push_seconds_or_nil(L, h, kb_hdr_value_at_percentile(h, p));
  return 1;
}

/** h:percentiles{50, 90, 99} -> {[50] = s, [90] = s, [99] = s}. */
static int hist_percentiles(lua_State *L) {
  const kb_hdr *h = &check_hist(L, 1)->h;
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_Integer n = luaL_len(L, 2);
  lua_createtable(L, 0, (int)(n > 64 ? 64 : n));
  for (lua_Integer i = 1; i <= n; i++) {
    if (lua_geti(L, 2, i) != LUA_TNUMBER)
      luaL_argerror(L, 2, lua_pushfstring(L, "percentile #%d is a %s, not a number", (int)i,
                                          luaL_typename(L, -1)));
    double p = check_percentile(L, 2, lua_tonumber(L, -1));
    push_seconds_or_nil(L, h, kb_hdr_value_at_percentile(h, p));
    lua_settable(L, -3);
  }
  return 1;
}

static void set_number(lua_State *L, const char *k, double v) {
  lua_pushnumber(L, v);
  lua_setfield(L, -2, k);
}

/** h:summary() -> {count, saturated, min, max, mean, stddev, p50, p90, p95,
 * p99, p999}; only count and saturated when empty. */
static int hist_summary(lua_State *L) {
  static const struct { const char *name; double p; } ps[] = {
      {"p50", 50}, {"p90", 90}, {"p95", 95}, {"p99", 99}, {"p999", 99.9}};
  const kb_hdr *h = &check_hist(L, 1)->h;
  lua_createtable(L, 0, 11);
  lua_pushinteger(L, h->total);
  lua_setfield(L, -2, "count");
  lua_pushinteger(L, h->saturated);
  lua_setfield(L, -2, "saturated");
  if (h->total == 0) return 1;
  set_number(L, "min", seconds(h, kb_hdr_min(h)));
  set_number(L, "max", seconds(h, kb_hdr_max(h)));
  set_number(L, "mean", kb_hdr_mean(h) * h->cfg.unit);
  set_number(L, "stddev", kb_hdr_stddev(h) * h->cfg.unit);
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
    set_number(L, ps[i].name, seconds(h, kb_hdr_value_at_percentile(h, ps[i].p)));
  return 1;
}

/** h:layout() -> {lowest, highest, digits}: pass it to kb.hist.new for a twin. */
static int hist_layout(lua_State *L) {
  const kb_hdr *h = &check_hist(L, 1)->h;
  lua_createtable(L, 0, 3);
  set_number(L, "lowest", h->cfg.unit);
  set_number(L, "highest", seconds(h, h->cfg.highest));
  lua_pushinteger(L, h->cfg.digits);
  lua_setfield(L, -2, "digits");
  return 1;
}

/* ---- buckets -------------------------------------------------------------- */

/* Appends {low, high, count} to the array at index t. */
static void push_bin(lua_State *L, int t, double low, double high, int64_t count) {
  lua_createtable(L, 0, 3);
  set_number(L, "low", low);
  set_number(L, "high", high);
  lua_pushinteger(L, count);
  lua_setfield(L, -2, "count");
  lua_rawseti(L, t, (lua_Integer)lua_rawlen(L, t) + 1);
}

/** h:buckets() -> array of {low, high, count} for the non-empty buckets, in
 * seconds; a bucket holds the units low/lowest .. high/lowest - 1, so
 * adjacent buckets share an edge. */
static int hist_buckets(lua_State *L) {
  const kb_hdr *h = &check_hist(L, 1)->h;
  lua_settop(L, 1);
  lua_newtable(L);
  kb_hdr_iter it;
  kb_hdr_iter_init(&it, h);
  while (kb_hdr_iter_next(&it))
    push_bin(L, 2, seconds(h, it.low), seconds(h, it.high + 1), it.count);
  return 1;
}

/** h:bins{n = 40} -> array of n {low, high, count}, log-spaced from the
 * lowest non-zero bucket to the top of the highest, empty bins included;
 * each bucket goes whole to the bin holding its middle. Zeros, if any, come
 * first as an extra bin {low = 0, high = 0}. Empty histogram: {}. */
static int hist_bins(lua_State *L) {
  const kb_hdr *h = &check_hist(L, 1)->h;
  lua_Integer n = 40;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    n = kb_opt_integer(L, 2, "n", 40);
  }
  if (n < 1 || n > 100000) luaL_argerror(L, 2, "n must be an integer from 1 to 100000");
  lua_settop(L, 2);
  lua_newtable(L); /* 3: the result */
  kb_hdr_iter it;
  kb_hdr_iter_init(&it, h);
  int64_t zeros = 0;
  double lo = 0;
  while (kb_hdr_iter_next(&it)) {
    if (it.low > 0) {
      lo = (double)it.low;
      break;
    }
    zeros += it.count;
  }
  if (zeros) push_bin(L, 3, 0, 0, zeros);
  if (lo == 0) return 1;
  double hi = (double)kb_hdr_highest_equivalent(h, h->max) + 1, span = log(hi / lo);
  int64_t *counts = lua_newuserdatauv(L, (size_t)n * sizeof(int64_t), 0); /* 4: scratch */
  memset(counts, 0, (size_t)n * sizeof(int64_t));
  do {
    double mid = ((double)it.low + (double)it.high + 1) / 2;
    lua_Integer j = (lua_Integer)floor((double)n * log(mid / lo) / span);
    counts[j < 0 ? 0 : j >= n ? n - 1 : j] += it.count;
  } while (kb_hdr_iter_next(&it));
  for (lua_Integer j = 0; j < n; j++) {
    double a = lo * exp(span * (double)j / (double)n);
    double b = j + 1 == n ? hi : lo * exp(span * (double)(j + 1) / (double)n);
    push_bin(L, 3, a * h->cfg.unit, b * h->cfg.unit, counts[j]);
  }
  lua_settop(L, 3);
  return 1;
}

/* ---- encoding and metamethods --------------------------------------------- */

/* The encoding is malloc'd by kb_hdr_encode; a boxed pointer with __gc owns
 * it while lua_pushlstring may raise. */
#define BOX_MT "kb.hist.encoding"

static int box_gc(lua_State *L) {
  char **box = luaL_checkudata(L, 1, BOX_MT);
  free(*box);
  *box = NULL;
  return 0;
}

/** h:encode() -> base64 string (see kb_hdr_encode), fits in JSON. */
static int hist_encode(lua_State *L) {
  const kb_hdr *h = &check_hist(L, 1)->h;
  char **box = lua_newuserdatauv(L, sizeof *box, 0);
  *box = NULL;
  luaL_setmetatable(L, BOX_MT);
  size_t len;
  check_rc(L, kb_hdr_encode(h, box, &len));
  lua_pushlstring(L, *box, len);
  free(*box);
  *box = NULL;
  return 1;
}

static int hist_tostring(lua_State *L) {
  const kb_hdr *h = &check_hist(L, 1)->h;
  if (h->total == 0) {
    push_layout_string(L, h);
    lua_pushfstring(L, "kb.hist: empty (%s)", lua_tostring(L, -1));
    return 1;
  }
  char buf[200];
  snprintf(buf, sizeof buf, "kb.hist: count=%lld min=%.6g p50=%.6g p99=%.6g max=%.6g s",
           (long long)h->total, seconds(h, kb_hdr_min(h)),
           seconds(h, kb_hdr_value_at_percentile(h, 50)),
           seconds(h, kb_hdr_value_at_percentile(h, 99)), seconds(h, kb_hdr_max(h)));
  lua_pushstring(L, buf);
  return 1;
}

static const luaL_Reg hist_methods[] = {
  {"record", hist_record},
  {"record_corrected", hist_record_corrected},
  {"count", hist_count},
  {"saturated", hist_saturated},
  {"min", hist_min},
  {"max", hist_max},
  {"mean", hist_mean},
  {"stddev", hist_stddev},
  {"percentile", hist_percentile},
  {"percentiles", hist_percentiles},
  {"summary", hist_summary},
  {"merge", hist_merge},
  {"copy", hist_copy},
  {"reset", hist_reset},
  {"encode", hist_encode},
  {"buckets", hist_buckets},
  {"bins", hist_bins},
  {"layout", hist_layout},
  {NULL, NULL}
};

static const luaL_Reg hist_meta[] = {
  {"__tostring", hist_tostring},
  {"__len", hist_count},
  {NULL, NULL}
};

/* hist.ranks(values, weights, q1, ..., qk) -> count, v1, ..., vk, max:
 * the nearest-rank quantiles of the raw values (a sequence of numbers; not
 * modified), weights nil or a table whose [i] counts values[i] that many
 * times (absent: 1). count is #values, or the total weight; an empty
 * sequence gives 0 and nothing else. For kb.timeseries' interval rows. */
#define RANKS_MAX_Q 16

static double check_quantile(lua_State *L, int idx) {
  double q = luaL_checknumber(L, idx);
  luaL_argcheck(L, q >= 0 && q <= 1, idx, "a quantile is within [0, 1]");
  return q;
}

static double value_at(lua_State *L, lua_Integer i) {
  int isnum;
  double v = (lua_rawgeti(L, 1, i), lua_tonumberx(L, -1, &isnum));
  lua_pop(L, 1);
  if (!isnum) luaL_error(L, "kb.hist.ranks: values[%I] is not a number", i);
  return v;
}

static int hist_ranks(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  int weighted = !lua_isnoneornil(L, 2);
  if (weighted) luaL_checktype(L, 2, LUA_TTABLE);
  int nq = lua_gettop(L) - 2;
  luaL_argcheck(L, nq >= 1 && nq <= RANKS_MAX_Q, 3, "1 to 16 quantiles");
  double qs[RANKS_MAX_Q], out[RANKS_MAX_Q], max, total;
  for (int i = 0; i < nq; i++) qs[i] = check_quantile(L, 3 + i);
  lua_Integer n = luaL_len(L, 1);
  if (n <= 0) {
    lua_pushinteger(L, 0);
    return 1;
  }
  luaL_checkstack(L, nq + 3, "kb.hist.ranks"); /* the scratch copy, count, the nq values, max */
  /* the scratch copy is a userdata: the collector owns it if we raise */
  if (!weighted) {
    double *v = lua_newuserdatauv(L, (size_t)n * sizeof *v, 0);
    for (lua_Integer i = 1; i <= n; i++) v[i - 1] = value_at(L, i);
    kb_ranks(v, (size_t)n, qs, (size_t)nq, out, &max);
    lua_pushinteger(L, n);
  } else {
    kb_weighted *v = lua_newuserdatauv(L, (size_t)n * sizeof *v, 0);
    int integral = 1;
    lua_Integer count = 0;
    for (lua_Integer i = 1; i <= n; i++) {
      v[i - 1].value = value_at(L, i);
      lua_Integer w = 1;
      double wd = 1;
      if (lua_rawgeti(L, 2, i) != LUA_TNIL) {
        int isnum;
        wd = lua_tonumberx(L, -1, &isnum);
        if (!isnum || !(wd > 0)) luaL_error(L, "kb.hist.ranks: weights[%I] is not a positive number", i);
        if (!lua_isinteger(L, -1)) integral = 0;
        else w = lua_tointeger(L, -1);
      }
      lua_pop(L, 1);
      v[i - 1].weight = wd;
      count += w; /* a count of calls: far below overflow */
    }
    kb_ranks_weighted(v, (size_t)n, qs, (size_t)nq, out, &max, &total);
    /* as Lua's own sum would be: an integer while every weight is one */
    if (integral) lua_pushinteger(L, count);
    else lua_pushnumber(L, total);
  }
  for (int i = 0; i < nq; i++) lua_pushnumber(L, out[i]);
  lua_pushnumber(L, max);
  return nq + 2;
}

static const luaL_Reg hist_functions[] = {
  {"new", hist_new},
  {"ranks", hist_ranks},
  {"decode", hist_decode},
  {"is", hist_is},
  {NULL, NULL}
};

int luaopen_kb_hist(lua_State *L) {
  static const luaL_Reg box_meta[] = {{"__gc", box_gc}, {NULL, NULL}};
  if (luaL_newmetatable(L, HIST_MT)) {
    lua_pushvalue(L, -1);
    luaL_setfuncs(L, hist_meta, 1);
    lua_newtable(L);
    lua_pushvalue(L, -2);
    luaL_setfuncs(L, hist_methods, 1);
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  kb_new_class(L, BOX_MT, NULL, box_meta);
  luaL_newlib(L, hist_functions);
  return 1;
}
