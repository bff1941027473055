/* kb.sim: start the embedded cluster simulator in-process and switch the
 * scenario clock to its virtual time.
 *
 *   local sim = kb.sim.start{profile = "default", speed = 600, seed = 1,
 *                            config = "yaml text" | {table},
 *                            clock = "events" | "linear" | false}
 *
 * clock = "events" (the default, unless a speed is given): the simulator runs on the scenario's
 * loop, reached over a Unix socket, and the scenario clock fast-forwards
 * over every wait (kb/vclock.h); speed does not apply. "linear": its own
 * thread and loop, and the scenario clock runs `speed` times real time.
 * false: its own thread, and the scenario clock stays real. Several
 * simulators at once share the clock: the first one sets the kind. 
 *   sim.url, sim.port, sim.speed, sim.epoch
 *   sim:now()                 -- the simulator's virtual time (seconds)
 *   sim:write_kubeconfig(path)
 *   sim:stop()                -- also on garbage collection / exit */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <lauxlib.h>

#include "kb/lua_cjson.h"
#include "kb/lua_modules.h"
#include "kb/lua_util.h"
#include "kb/rt.h"
#include "kb/sim_server.h"
#include "lhttp_internal.h"

#define SIM_META "kb.sim.server"

typedef struct {
  kb_sim_server *server;
  int owns_clock;
  char origin[64];     /* in-loop: "http://127.0.0.1:PORT", routed to sock */
  char dir[64], sock[96];
} lsim;

static const char OWNERS_KEY = 'o'; /* registry: simulators driving the clock */

static int clock_owners(lua_State *L, int delta) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &OWNERS_KEY);
  lua_Integer n = lua_tointeger(L, -1) + delta;
  lua_pop(L, 1);
  lua_pushinteger(L, n);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &OWNERS_KEY);
  return (int)n;
}

/* The kind of clock asked for: 'e'vents, 'l'inear or 0 (none). */
static int clock_kind(lua_State *L, int opts) {
  /* a speed only means something to the linear clock: asking for one
   * without naming a clock asks for that */
  int has_speed = lua_getfield(L, opts, "speed") != LUA_TNIL;
  lua_pop(L, 1);
  int t = lua_getfield(L, opts, "clock");
  int kind = has_speed ? 'l' : 'e';
  if (t == LUA_TBOOLEAN) kind = lua_toboolean(L, -1) ? kind : 0;
  else if (t == LUA_TSTRING && !strcmp(lua_tostring(L, -1), "linear")) kind = 'l';
  else if (t == LUA_TSTRING && strcmp(lua_tostring(L, -1), "events") != 0)
    kind = -1;
  else if (t != LUA_TNIL && t != LUA_TSTRING) kind = -1;
  lua_pop(L, 1);
  if (kind < 0) luaL_error(L, "kb.sim.start: clock must be \"events\", \"linear\" or false");
  return kind;
}

static lsim *check_sim(lua_State *L) {
  lsim *s = luaL_checkudata(L, 1, SIM_META);
  if (!s->server) luaL_error(L, "kb.sim: the simulator was stopped");
  return s;
}

/* The config option: YAML text, or a table (sent as JSON, which is YAML). */
static char *config_text(lua_State *L, int opts) {
  int t = lua_getfield(L, opts, "config");
  char *text = NULL;
  if (t == LUA_TSTRING) {
    text = strdup(lua_tostring(L, -1));
  } else if (t == LUA_TTABLE) {
    char err[256];
    cJSON *tree = kb_lua_to_cjson(L, lua_gettop(L), err, sizeof err);
    if (!tree) {
      lua_pop(L, 1);
      kb_error_raise(L, "sim", "kb.sim.start: config: %s", err);
    }
    text = cJSON_PrintUnformatted(tree);
    cJSON_Delete(tree);
  } else if (t != LUA_TNIL) {
    luaL_error(L, "kb.sim.start: config must be YAML text or a table");
  }
  lua_pop(L, 1);
  return text;
}

/* In-loop: a private folder for the Unix socket (the path is short enough
 * for sun_path and no one else can bind it first). */
static int make_socket_dir(lsim *s) {
  const char *tmp = getenv("TMPDIR");
  if (!tmp || !*tmp || strlen(tmp) > 40) tmp = "/tmp";
  snprintf(s->dir, sizeof s->dir, "%s/kbrun-XXXXXX", tmp);
  if (!mkdtemp(s->dir)) return -1;
  snprintf(s->sock, sizeof s->sock, "%s/sim.sock", s->dir);
  return 0;
}

static int l_start(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  kb_rt *rt = kb_rt_from_lua(L);
  kb_sim_server_opts o = {0};
  o.host = kb_opt_string(L, 1, "host", NULL);
  o.port = (int)kb_opt_integer(L, 1, "port", 0);
  o.profile = kb_opt_string(L, 1, "profile", NULL);
  o.config_name = kb_opt_string(L, 1, "config_name", NULL);
  o.speed = kb_opt_number(L, 1, "speed", 600);
  o.seed = (uint64_t)kb_opt_integer(L, 1, "seed", 1);
  o.admin_token = kb_opt_string(L, 1, "admin_token", NULL);
  o.pipeline_dir = kb_opt_string(L, 1, "pipeline_dir", NULL);
  int kind = clock_kind(L, 1);
  /* A clock already driven by a simulator keeps its kind. */
  kb_vclock *clock = kb_rt_clock(rt);
  int driven = clock_owners(L, 0) > 0;
  if (kind && driven)
    kind = kb_vclock_mode_of(clock) == KB_VCLOCK_EVENTS ? 'e' : 'l';

  lsim *s = lua_newuserdatauv(L, sizeof *s, 0);
  memset(s, 0, sizeof *s);
  luaL_setmetatable(L, SIM_META);
  if (kind == 'e') {
    if (make_socket_dir(s) < 0)
      return kb_error_raise(L, "fs", "kb.sim.start: cannot make a folder for the simulator's "
                            "socket: %s", strerror(errno));
    if (!driven) kb_vclock_set(clock, KB_VCLOCK_EVENTS, 1);
    o.loop = kb_rt_loop(rt);
    o.clock = clock;
    o.unix_path = s->sock;
  }
  char *config = config_text(L, 1);
  o.config_yaml = config;
  kb_sim_error err = {0};
  s->server = kb_sim_server_start(&o, &err);
  free(config);
  if (!s->server) {
    if (s->dir[0]) rmdir(s->dir);
    s->dir[0] = '\0';
    if (kind == 'e' && !driven) kb_rt_set_speed(rt, 1.0);
    return kb_error_raise(L, "sim", "kb.sim.start: %s", err.message);
  }
  if (kind == 'e') {
    snprintf(s->origin, sizeof s->origin, "http://%s:%d", kb_sim_server_host(s->server),
             kb_sim_server_port(s->server));
    kb__lhttp_route(L, s->origin, s->sock);
  }
  if (kind) {
    uint64_t origin;
    double speed, epoch;
    kb_sim_server_clock(s->server, &origin, &speed, &epoch);
    if (kind == 'l') kb_rt_set_speed(rt, speed);
    clock_owners(L, +1);
    s->owns_clock = 1;
    /* reports say which clock they measured in */
    if (kind == 'e') lua_pushliteral(L, "events");
    else lua_pushnumber(L, speed);
    lua_setfield(L, LUA_REGISTRYINDEX, "kb.sim.speed_used");
  }
  return 1;
}

static void sim_stop(lua_State *L, lsim *s) {
  if (!s->server) return;
  if (s->origin[0]) kb__lhttp_route(L, s->origin, NULL);
  kb_sim_server_stop(s->server);
  s->server = NULL;
  if (s->dir[0]) rmdir(s->dir); /* the server removed its socket */
  s->dir[0] = '\0';
  if (s->owns_clock) {
    s->owns_clock = 0;
    kb_rt *rt = kb_rt_from_lua(L);
    if (clock_owners(L, -1) == 0 && rt) kb_rt_set_speed(rt, 1.0);
  }
}

static int l_stop(lua_State *L) {
  sim_stop(L, luaL_checkudata(L, 1, SIM_META));
  return 0;
}

static int l_now(lua_State *L) {
  lua_pushnumber(L, kb_sim_server_now(check_sim(L)->server));
  return 1;
}

static int l_write_kubeconfig(lua_State *L) {
  lsim *s = check_sim(L);
  const char *path = luaL_checkstring(L, 2);
  int r = kb_sim_server_write_kubeconfig(s->server, path);
  if (r < 0) return kb_error_raise(L, "fs", "kb.sim: cannot write kubeconfig '%s': %s", path, strerror(-r));
  lua_pushstring(L, path);
  return 1;
}

static int l_index(lua_State *L) {
  lsim *s = luaL_checkudata(L, 1, SIM_META);
  const char *key = luaL_checkstring(L, 2);
  if (s->server) {
    uint64_t origin;
    double speed, epoch;
    kb_sim_server_clock(s->server, &origin, &speed, &epoch);
    if (strcmp(key, "port") == 0) {
      lua_pushinteger(L, kb_sim_server_port(s->server));
      return 1;
    }
    if (strcmp(key, "host") == 0) {
      lua_pushstring(L, kb_sim_server_host(s->server));
      return 1;
    }
    if (strcmp(key, "url") == 0) {
      const char *host = kb_sim_server_host(s->server);
      int v6 = strchr(host, ':') && host[0] != '[';
      lua_pushfstring(L, "http://%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "",
                      kb_sim_server_port(s->server));
      return 1;
    }
    if (strcmp(key, "speed") == 0) {
      lua_pushnumber(L, speed);
      return 1;
    }
    if (strcmp(key, "epoch") == 0) {
      lua_pushnumber(L, epoch);
      return 1;
    }
  }
  luaL_getmetatable(L, SIM_META);
  lua_getfield(L, -1, "methods");
  lua_getfield(L, -1, key);
  return 1;
}

static int l_gc(lua_State *L) {
  sim_stop(L, luaL_checkudata(L, 1, SIM_META));
  return 0;
}

static int l_tostring(lua_State *L) {
  lsim *s = luaL_checkudata(L, 1, SIM_META);
  if (!s->server) lua_pushliteral(L, "kb.sim (stopped)");
  else lua_pushfstring(L, "kb.sim http://%s:%d", kb_sim_server_host(s->server),
                       kb_sim_server_port(s->server));
  return 1;
}

static const luaL_Reg sim_methods[] = {
  {"stop", l_stop},
  {"now", l_now},
  {"write_kubeconfig", l_write_kubeconfig},
  {NULL, NULL}
};

static const luaL_Reg sim_meta[] = {
  {"__index", l_index},
  {"__gc", l_gc},
  {"__close", l_gc},
  {"__tostring", l_tostring},
  {NULL, NULL}
};

/* kb.sim.speed_used() -> the speed of the last simulator clock installed
 * during this run, or nil if the scenario clock was always real. */
static int l_speed_used(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, "kb.sim.speed_used");
  return 1;
}

static const luaL_Reg sim_functions[] = {
  {"start", l_start},
  {"speed_used", l_speed_used},
  {NULL, NULL}
};

int luaopen_kb_sim(lua_State *L) {
  if (luaL_newmetatable(L, SIM_META)) {
    luaL_setfuncs(L, sim_meta, 0);
    luaL_newlib(L, sim_methods);
    lua_setfield(L, -2, "methods");
  }
  lua_pop(L, 1);
  luaL_newlib(L, sim_functions);
  return 1;
}
