/* The runtime object: the libuv loop, the Lua state, the scenario clock and
 * the ready queue of tasks. */
#include <stdio.h>
#include <stdlib.h>

#include <lauxlib.h>
#include <lualib.h>

#include "kb/lua_util.h"
#include "lua_alloc.h"
#include "rt_internal.h"

static const char RT_KEY = 'r'; /* registry key: the address is unique */

static void ready_drain(uv_idle_t *idle) {
  kb_rt *rt = idle->data;
  /* Run only what is queued now: tasks woken by these resumes wait for the
   * next iteration, so I/O callbacks are never starved. */
  kb_task *t = rt->ready_head;
  rt->ready_head = rt->ready_tail = NULL;
  while (t) {
    kb_task *next = t->next_ready;
    t->next_ready = NULL;
    t->queued = 0;
    kb__task_resume(t, t->resume_nargs);
    t = next;
  }
  if (!rt->ready_head) uv_idle_stop(&rt->ready_idle);
}

void kb__task_queue(kb_task *t) {
  kb_rt *rt = t->rt;
  if (t->queued) return;
  t->queued = 1;
  if (rt->ready_tail) rt->ready_tail->next_ready = t;
  else rt->ready_head = t;
  rt->ready_tail = t;
  uv_idle_start(&rt->ready_idle, ready_drain);
}

kb_rt *kb_rt_new(void) {
  kb_rt *rt = calloc(1, sizeof *rt);
  if (!rt) return NULL;
  if (uv_loop_init(&rt->loop) != 0) {
    free(rt);
    return NULL;
  }
  rt->loop.data = rt;
  /* how long the loop waits for events: kb.core.loop_idle, the share of
   * the run kbrun itself was busy (the runner's `client` figures) */
  uv_loop_configure(&rt->loop, UV_METRICS_IDLE_TIME);
  uv_idle_init(&rt->loop, &rt->ready_idle);
  rt->ready_idle.data = rt;
  rt->clock = kb_vclock_new(&rt->loop, KB_VCLOCK_LINEAR, 1.0);
  rt->L = rt->clock ? kb_lua_state_new() : NULL; /* on its own pool: lua_alloc.c */
  if (!rt->L) {
    kb_vclock_free(rt->clock);
    uv_close((uv_handle_t *)&rt->ready_idle, NULL);
    uv_run(&rt->loop, UV_RUN_DEFAULT);
    uv_loop_close(&rt->loop);
    free(rt);
    return NULL;
  }
  /* Lua leaves the main thread's extra space uninitialised, and every new
   * thread copies it: zero it so only task threads carry a task. */
  *(kb_task **)lua_getextraspace(rt->L) = NULL;
  luaL_openlibs(rt->L);
  kb_chunkid_install(rt->L);
  lua_pushlightuserdata(rt->L, rt);
  lua_rawsetp(rt->L, LUA_REGISTRYINDEX, &RT_KEY);
  return rt;
}

static void close_any(uv_handle_t *h, void *arg) {
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

void kb_rt_free(kb_rt *rt) {
  if (!rt) return;
  /* Operations of tasks still suspended are cancelled first (they free
   * their own memory); then Lua's collector closes what Lua owns; whatever
   * handle is left is closed before the loop goes. */
  kb__tasks_abandon(rt);
  kb__signals_stop(rt);
  /* A job a pool thread runs cannot be cancelled; its completion unrefs
   * what it kept in the Lua registry: let it complete first. */
  while (rt->pool_jobs > 0 && uv_run(&rt->loop, UV_RUN_ONCE)) {
  }
  kb_lua_state_close(rt->L); /* and its pool */
  rt->L = NULL;
  /* Timers nobody can wait for any more must not hold the loop; the clock
   * itself goes only after the children and handles that may still count
   * on it (a child exiting here declares its real work over). */
  kb_vclock_stop_all(rt->clock);
  uv_close((uv_handle_t *)&rt->ready_idle, NULL);
  uv_run(&rt->loop, UV_RUN_DEFAULT);
  kb_vclock_free(rt->clock);
  rt->clock = NULL;
  uv_walk(&rt->loop, close_any, NULL);
  uv_run(&rt->loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&rt->loop) != 0)
    fprintf(stderr, "kbrun: warning: event loop closed with handles still open\n");
  free(rt);
}

kb_rt *kb_rt_from_lua(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &RT_KEY);
  kb_rt *rt = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return rt;
}

lua_State *kb_rt_lua(kb_rt *rt) { return rt->L; }
uv_loop_t *kb_rt_loop(kb_rt *rt) { return &rt->loop; }

kb_vclock *kb_rt_clock(kb_rt *rt) { return rt->clock; }

void kb_rt_work_begin(kb_rt *rt) {
  rt->pool_jobs++;
  kb_vclock_hold(rt->clock, +1);
}

void kb_rt_work_end(kb_rt *rt) {
  rt->pool_jobs--;
  kb_vclock_hold(rt->clock, -1);
}
double kb_rt_now(kb_rt *rt) { return kb_vclock_now(rt->clock); }

void kb_rt_set_speed(kb_rt *rt, double speed) {
  kb_vclock_set(rt->clock, KB_VCLOCK_LINEAR, speed > 0 ? speed : 1.0);
}

uint64_t kb_rt_real_ms(kb_rt *rt, double scenario_seconds) {
  if (!(scenario_seconds > 0)) return 0;
  double ms = scenario_seconds * 1000.0 / kb_vclock_speed(rt->clock);
  if (ms > 9.0e15) return (uint64_t)9.0e15; /* "forever", without overflow */
  uint64_t whole = (uint64_t)ms;
  if ((double)whole < ms) whole++;
  return whole ? whole : 1;
}

double kb_rt_scenario_seconds(kb_rt *rt, double real_seconds) {
  return real_seconds * kb_vclock_speed(rt->clock);
}

int kb_rt_run(kb_rt *rt) {
  uv_run(&rt->loop, UV_RUN_DEFAULT);
  return rt->exit_code;
}

void kb_rt_stop(kb_rt *rt, int exit_code) {
  rt->stopping = 1;
  rt->exit_code = exit_code;
  uv_stop(&rt->loop);
}

int kb_rt_stopping(kb_rt *rt) { return rt->stopping; }

static int traceback_handler(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (msg == NULL) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
      msg = lua_tostring(L, -1);
    else
      msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  kb_chunkid_expand(L, L, lua_tostring(L, -1));
  return 1;
}

int kb_rt_pcall(kb_rt *rt, int nargs, int nresults) {
  lua_State *L = rt->L;
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, traceback_handler);
  lua_insert(L, base);
  rt->in_lua++;
  rt->running = L;
  int status = lua_pcall(L, nargs, nresults, base);
  rt->running = NULL;
  rt->in_lua--;
  lua_remove(L, base);
  if (status != LUA_OK) {
    fprintf(stderr, "kbrun: %s\n", lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  return status;
}
