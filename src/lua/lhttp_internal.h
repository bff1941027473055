/* Shared by the files of kb.http: http.c (clients, requests, the module),
 * http_build.c (a request from a call's arguments, Unix-socket routes),
 * http_response.c (responses) and http_stream.c (streams), and by kb.sim
 * (sim.c) for its Unix-socket routes. Not a public header (src/net/http_client_internal.h
 * is the C client's own). */
#ifndef KB_LHTTP_INTERNAL_H
#define KB_LHTTP_INTERNAL_H

#include <lua.h>

#include "kb/http_client.h"
#include "kb/rt.h"

/* The default max_body of kb.http requests: a body larger than this fails
 * with class "body_too_large" instead of filling memory. */
#define KB_LHTTP_MAX_BODY ((lua_Integer)64 << 20)

/* A call's checked arguments (kb__lhttp_read_call). */
typedef struct {
  const char *method;
  const char *url;
  int slot;          /* stack index of SLOT_HEADERS */
  int json_body;     /* the body slot holds JSON text encoded from a table */
  int has_options;
  double timeout, connect_timeout;
  lua_Integer max_body; /* bytes; KB_LHTTP_MAX_BODY unless given */
  int max_body_given;
  kb_http_options o;
} kb_lhttp_spec;

/* What an error object says, apart from its class: for a response's
 * error, or for one a stream kept until read() raises it. */
typedef struct kb_lhttp_err_text {
  const char *message, *url, *detail, *hint, *method;
  int curl_code;
} kb_lhttp_err_text;

/* http_build.c: reads the arguments of a call into s (raises on a bad
 * one); the options come last, their slots go above them. */
void kb__lhttp_read_call(lua_State *L, kb_lhttp_spec *s, int url, int body, int opts);
/* The request s describes, not started; raises when it cannot be built. */
kb_http_request *kb__lhttp_new_request(lua_State *L, kb_http_client *c, const kb_lhttp_spec *s);
/* Requests to origin ("http://host:port") go through the Unix socket at
 * path from now on (NULL: no longer). */
void kb__lhttp_route(lua_State *L, const char *origin, const char *path);
/* http.c: raises the error of a request that could not start. */
int kb__lhttp_raise_start_error(lua_State *L, int err, const char *method);

/* http_response.c: response fields and errors, as kb.http.request pushes
 * them. The response table builds headers and time when first read. */
void kb__lhttp_push_response(lua_State *L, kb_rt *rt, const kb_http_response *resp);
/* The response tables' metatable (luaopen_kb_http). */
void kb__lhttp_response_register(lua_State *L);
void kb__lhttp_push_headers(lua_State *L, const kb_http_response *resp);
void kb__lhttp_push_version(lua_State *L, int version);
void kb__lhttp_set_number(lua_State *L, const char *k, double v);
void kb__lhttp_push_error(lua_State *L, const kb_http_response *resp);
void kb__lhttp_push_error_text(lua_State *L, const char *cls, const kb_lhttp_err_text *e);
/* What the simulator's "Server-Timing: kbrun-sim;dur=MS;sim=MS" says of a
 * response: the real seconds its latency model held it, and the same
 * latency in simulated seconds. hold < 0: not the simulator's answer. */
typedef struct kb__lhttp_sim_timing {
  double hold, modelled;
} kb__lhttp_sim_timing;
#define KB__LHTTP_NOT_SIM ((kb__lhttp_sim_timing){-1, -1})
kb__lhttp_sim_timing kb__lhttp_sim_timing_of(const kb_http_response *resp);
/* Real seconds of a response as scenario seconds: the modelled part in
 * simulated time, the rest (this machine's overhead) as real seconds. */
double kb__lhttp_to_scenario(kb_rt *rt, double real, kb__lhttp_sim_timing sim);
/* Pushes a response's `time` table (with total unless with_total is 0). */
void kb__lhttp_push_times(lua_State *L, kb_rt *rt, const kb_http_timings *t,
                          kb__lhttp_sim_timing sim, int with_total);

/* http_stream.c: the stream type, and kb.http.stream / client:stream with
 * the client's userdata at index `client` and the options at `opts`. */
void kb__lhttp_stream_register(lua_State *L);
int kb__lhttp_stream_open(lua_State *L, kb_http_client *c, int client, int opts);

#endif
