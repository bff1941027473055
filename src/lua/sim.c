/* kb.sim: start the embedded cluster simulator in-process (its own thread
 * and loop) and switch the scenario clock to its virtual time.
 *
 *   local sim = kb.sim.start{profile = "default", speed = 600, seed = 1,
 *                            config = "yaml text" | {table}, clock = true}
 *   sim.url, sim.port, sim.speed, sim.epoch
 *   sim:now()                 -- the simulator's virtual time (seconds)
 *   sim:write_kubeconfig(path)
 *   sim:stop()                -- also on garbage collection / exit */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <lauxlib.h>

#include "kb/lua_cjson.h"
#include "kb/lua_modules.h"
#include "kb/lua_util.h"
#include "kb/rt.h"
#include "kb/sim_server.h"

#define SIM_META "kb.sim.server"

typedef struct {
  kb_sim_server *server;
  int owns_clock;
} lsim;

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

static int l_start(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  kb_sim_server_opts o = {0};
  o.host = kb_opt_string(L, 1, "host", NULL);
  o.port = (int)kb_opt_integer(L, 1, "port", 0);
  o.profile = kb_opt_string(L, 1, "profile", NULL);
  o.config_name = kb_opt_string(L, 1, "config_name", NULL);
  o.speed = kb_opt_number(L, 1, "speed", 600);
  o.seed = (uint64_t)kb_opt_integer(L, 1, "seed", 1);
  o.admin_token = kb_opt_string(L, 1, "admin_token", NULL);
  int clock = kb_opt_boolean(L, 1, "clock", 1);
  char *config = config_text(L, 1);
  o.config_yaml = config;

  lsim *s = lua_newuserdatauv(L, sizeof *s, 0);
  s->server = NULL;
  s->owns_clock = 0;
  luaL_setmetatable(L, SIM_META);

  kb_sim_error err = {0};
  s->server = kb_sim_server_start(&o, &err);
  free(config);
  if (!s->server) return kb_error_raise(L, "sim", "kb.sim.start: %s", err.message);
  if (clock) {
    uint64_t origin;
    double speed, epoch;
    kb_sim_server_clock(s->server, &origin, &speed, &epoch);
    kb_rt_set_speed(kb_rt_from_lua(L), speed);
    s->owns_clock = 1;
    lua_pushnumber(L, speed); /* reports say which clock they measured in */
    lua_setfield(L, LUA_REGISTRYINDEX, "kb.sim.speed_used");
  }
  return 1;
}

static void sim_stop(lua_State *L, lsim *s) {
  if (!s->server) return;
  kb_sim_server_stop(s->server);
  s->server = NULL;
  if (s->owns_clock) {
    kb_rt *rt = kb_rt_from_lua(L);
    if (rt) kb_rt_set_speed(rt, 1.0);
    s->owns_clock = 0;
  }
}

static int l_stop(lua_State *L) {
  sim_stop(L, luaL_checkudata(L, 1, SIM_META));
  return 0;
}

static int l_now(lua_State *L) {
  lsim *s = check_sim(L);
  uint64_t origin;
  double speed, epoch;
  kb_sim_server_clock(s->server, &origin, &speed, &epoch);
  lua_pushnumber(L, (double)(uv_hrtime() - origin) / 1e9 * speed);
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
