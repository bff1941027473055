/* kb.http's responses and errors as Lua values: the response table (with
 * headers and time built when first read), header tables, the scenario
 * times of a response, the simulator's Server-Timing, and error objects.
 * Shared by http.c (requests) and http_stream.c (streams' heads). */
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "kb/http_client.h"
#include "kb/lua_util.h"
#include "kb/rt.h"
#include "lhttp_internal.h"

/* ---- headers and times --------------------------------------------------------------- */

void kb__lhttp_push_headers(lua_State *L, const kb_http_response *resp) {
  char small[64];
  lua_createtable(L, 0, 8);
  size_t pos = 0;
  kb_http_header h;
  while (kb_http_header_next(resp->headers, resp->headers_len, &pos, &h)) {
    luaL_Buffer big;
    char *name = h.name_len <= sizeof small ? small : luaL_buffinitsize(L, &big, h.name_len);
    for (size_t i = 0; i < h.name_len; i++) {
      char ch = h.name[i];
      name[i] = ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch;
    }
    if (name == small) lua_pushlstring(L, name, h.name_len);
    else luaL_pushresultsize(&big, h.name_len);
    int is_cookie = h.name_len == 10 && memcmp(name == small ? small : lua_tostring(L, -1),
                                               "set-cookie", 10) == 0;
    lua_pushvalue(L, -1);
    int t = lua_rawget(L, -3);
    if (is_cookie) {
      if (t == LUA_TNIL) {
        lua_pop(L, 1);
        lua_createtable(L, 2, 0);
        lua_pushvalue(L, -2);
        lua_pushvalue(L, -2);
        lua_rawset(L, -5);
      }
      lua_pushlstring(L, h.value, h.value_len);
      lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
      lua_pop(L, 2);
      continue;
    }
    if (t == LUA_TNIL) {
      lua_pop(L, 1);
      lua_pushlstring(L, h.value, h.value_len);
    } else {
      lua_pushliteral(L, ", ");
      lua_pushlstring(L, h.value, h.value_len);
      lua_concat(L, 3);
    }
    lua_rawset(L, -3);
  }
}

void kb__lhttp_set_number(lua_State *L, const char *k, double v) {
  lua_pushnumber(L, v);
  lua_setfield(L, -2, k);
}

/* ms of one "key=MS" parameter in a Server-Timing value, or -1. */
static double timing_param(const char *v, size_t len, const char *key) {
  size_t klen = strlen(key);
  for (size_t i = 0; i + klen < len; i++) {
    if (v[i] != ';' || strncmp(v + i + 1, key, klen) != 0) continue;
    char num[32];
    size_t from = i + 1 + klen, n = len - from < sizeof num - 1 ? len - from : sizeof num - 1;
    memcpy(num, v + from, n);
    num[n] = '\0';
    double ms = strtod(num, NULL);
    return ms > 0 ? ms : 0.0;
  }
  return -1;
}

kb__lhttp_sim_timing kb__lhttp_sim_timing_of(const kb_http_response *resp) {
  /* Most answers are not the simulator's: one memmem over the block
   * settles that before the headers are walked (a block without the
   * word has no Server-Timing value starting with it). */
  if (!resp->headers_len || !memmem(resp->headers, resp->headers_len, "kbrun-sim", 9))
    return KB__LHTTP_NOT_SIM;
  size_t len;
  const char *v = kb_http_response_header(resp, "Server-Timing", &len);
  if (!v || len < 9 || strncmp(v, "kbrun-sim", 9) != 0) return KB__LHTTP_NOT_SIM;
  double dur = timing_param(v, len, "dur="), sim = timing_param(v, len, "sim=");
  if (dur < 0) return KB__LHTTP_NOT_SIM;
  return (kb__lhttp_sim_timing){dur / 1e3, sim >= 0 ? sim / 1e3 : -1};
}

/* Real seconds as scenario seconds. From the simulator (embedded, or a
 * standalone `kbrun sim` on its own clock) the latency its model held the
 * response counts as the modelled latency in simulated time, whatever
 * this runtime's clock; the rest (this machine's loopback, parsing,
 * scheduling) is real overhead and counts as real seconds, like network
 * time to a real cluster. Scaling it too would inflate every latency by
 * overhead * speed. Other servers' answers take the runtime clock's rate. */
double kb__lhttp_to_scenario(kb_rt *rt, double real, kb__lhttp_sim_timing sim) {
  double speed = kb_vclock_speed(kb_rt_clock(rt));
  if (sim.hold < 0) return speed == 1.0 ? real : kb_rt_scenario_seconds(rt, real);
  double modelled = sim.modelled >= 0 ? sim.modelled : sim.hold * speed;
  /* The simulator answers holds below a timer tick at once, so real may be
   * shorter than hold: the modelled time still counts in full. */
  return modelled + (real > sim.hold ? real - sim.hold : 0);
}

/* A response's times in scenario seconds (dns, connect, tls, ttfb, total).
 * On a fast-forwarding clock every request's time is what the clock saw
 * pass (total_clock): the modelled latency for the embedded simulator,
 * real time for a real server. Else real seconds converted by
 * kb__lhttp_to_scenario. Worked out when the response arrives (the
 * clock's speed may change later), pushed as a table when read. */
static void scenario_times(kb_rt *rt, const kb_http_timings *t, kb__lhttp_sim_timing sim,
                           double out[5]) {
  if (t->clock >= 0) {
    out[0] = out[1] = out[2] = 0;
    out[3] = out[4] = t->clock;
    return;
  }
  kb__lhttp_sim_timing none = sim.hold >= 0 ? (kb__lhttp_sim_timing){0, 0} : sim;
  out[0] = kb__lhttp_to_scenario(rt, t->dns, none);
  out[1] = kb__lhttp_to_scenario(rt, t->connect, none);
  out[2] = kb__lhttp_to_scenario(rt, t->tls, none);
  out[3] = kb__lhttp_to_scenario(rt, t->ttfb, sim);
  out[4] = kb__lhttp_to_scenario(rt, t->total, sim);
}

static void push_time_table(lua_State *L, const double v[5], int with_total) {
  lua_createtable(L, 0, 5);
  kb__lhttp_set_number(L, "dns", v[0]);
  kb__lhttp_set_number(L, "connect", v[1]);
  kb__lhttp_set_number(L, "tls", v[2]);
  kb__lhttp_set_number(L, "ttfb", v[3]);
  if (with_total) kb__lhttp_set_number(L, "total", v[4]);
}

/* A response's time table (a stream's head has no total yet). */
void kb__lhttp_push_times(lua_State *L, kb_rt *rt, const kb_http_timings *t,
                          kb__lhttp_sim_timing sim, int with_total) {
  double v[5];
  scenario_times(rt, t, sim, v);
  push_time_table(L, v, with_total);
}

void kb__lhttp_push_version(lua_State *L, int version) {
  switch (version) {
  case 10: lua_pushliteral(L, "1.0"); break;
  case 20: lua_pushliteral(L, "2"); break;
  case 30: lua_pushliteral(L, "3"); break;
  default: lua_pushliteral(L, "1.1"); break;
  }
}

/* ---- responses -------------------------------------------------------------------
 * A response table holds status, body, version (and redirects, url) from
 * the start; headers and time are built the first time the script reads
 * them (most load loops never do), from what this userdata kept. It sits
 * in the table under a private light-userdata key until both are built;
 * pairs() builds them first and does not show it. */

#define RESPONSE_META "kb.http.response"
static const char LAZY_KEY = 'z';

typedef struct {
  double time[5];     /* dns, connect, tls, ttfb, total (scenario seconds) */
  int built[2];       /* headers, time: put in the table once */
  size_t headers_len;
  char headers[];     /* the header block */
} lazy_fields;

/* Puts field which (0 headers, 1 time) into response t (at idx) unless it
 * was put there before (the script may have changed or removed it since:
 * that stands, as it would for a plain field). Drops the userdata once
 * both were built. */
static void build_field(lua_State *L, int idx, lazy_fields *z, int which) {
  if (z->built[which]) return;
  const char *name = which == 0 ? "headers" : "time";
  lua_pushstring(L, name);
  int assigned = lua_rawget(L, idx) != LUA_TNIL; /* set by the script before */
  lua_pop(L, 1);
  if (assigned) {
    /* nothing to build */
  } else if (which == 0) {
    kb_http_response r = {.headers = z->headers, .headers_len = z->headers_len};
    kb__lhttp_push_headers(L, &r);
  } else {
    push_time_table(L, z->time, 1);
  }
  if (!assigned) lua_setfield(L, idx, name); /* no __newindex: a raw set */
  z->built[which] = 1;
  if (z->built[!which]) {
    lua_pushnil(L);
    lua_rawsetp(L, idx, &LAZY_KEY);
  }
}

static lazy_fields *lazy_of(lua_State *L, int idx) {
  lua_rawgetp(L, idx, &LAZY_KEY);
  lazy_fields *z = lua_touserdata(L, -1);
  lua_pop(L, 1); /* still anchored by the table while the caller runs */
  return z;
}

/* __index(t, k): only a missing key gets here. */
static int response_index(lua_State *L) {
  lazy_fields *z = lazy_of(L, 1);
  const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";
  int which = strcmp(k, "headers") == 0 ? 0 : strcmp(k, "time") == 0 ? 1 : -1;
  if (z && which >= 0 && !z->built[which]) {
    build_field(L, 1, z, which);
    lua_rawget(L, 1); /* k, at index 2, is the top */
    return 1;
  }
  lua_pushnil(L);
  return 1;
}

static int response_next(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 2);
  if (lua_next(L, 1)) return 2;
  lua_pushnil(L);
  return 1;
}

/* __pairs(t): every field, as if they had been built at once. */
static int response_pairs(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  lazy_fields *z = lazy_of(L, 1);
  if (z) {
    build_field(L, 1, z, 0);
    build_field(L, 1, z, 1);
  }
  lua_pushcfunction(L, response_next);
  lua_pushvalue(L, 1);
  lua_pushnil(L);
  return 3;
}

void kb__lhttp_push_response(lua_State *L, kb_rt *rt, const kb_http_response *resp) {
  lua_createtable(L, 0, 6);
  lua_pushinteger(L, resp->status);
  lua_setfield(L, -2, "status");
  lua_pushlstring(L, resp->body, resp->body_len);
  lua_setfield(L, -2, "body");
  kb__lhttp_push_version(L, resp->http_version);
  lua_setfield(L, -2, "version");
  if (resp->redirects > 0) {
    lua_pushinteger(L, resp->redirects);
    lua_setfield(L, -2, "redirects");
    lua_pushstring(L, resp->url);
    lua_setfield(L, -2, "url");
  }
  lazy_fields *z = lua_newuserdatauv(L, sizeof *z + resp->headers_len, 0);
  z->built[0] = z->built[1] = 0;
  scenario_times(rt, &resp->time, kb__lhttp_sim_timing_of(resp), z->time);
  z->headers_len = resp->headers_len;
  if (resp->headers_len) memcpy(z->headers, resp->headers, resp->headers_len);
  lua_rawsetp(L, -2, &LAZY_KEY);
  luaL_setmetatable(L, RESPONSE_META);
}

void kb__lhttp_response_register(lua_State *L) {
  luaL_newmetatable(L, RESPONSE_META);
  lua_pushcfunction(L, response_index);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, response_pairs);
  lua_setfield(L, -2, "__pairs");
  lua_pop(L, 1);
}

void kb__lhttp_push_error_text(lua_State *L, const char *cls, const kb_lhttp_err_text *e) {
  kb_error_new(L, cls, "%s", e->message);
  lua_pushstring(L, e->url);
  lua_setfield(L, -2, "url");
  lua_pushinteger(L, e->curl_code);
  lua_setfield(L, -2, "curl_code");
  lua_pushstring(L, e->detail);
  lua_setfield(L, -2, "detail");
  lua_pushstring(L, e->hint);
  lua_setfield(L, -2, "hint");
  lua_pushstring(L, e->method);
  lua_setfield(L, -2, "method");
}

void kb__lhttp_push_error(lua_State *L, const kb_http_response *resp) {
  kb_lhttp_err_text e = {resp->message, resp->safe_url, resp->detail, resp->hint, resp->method,
                resp->curl_code};
  kb__lhttp_push_error_text(L, kb_http_error_name(resp->error), &e);
}
