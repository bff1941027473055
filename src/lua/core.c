/* kb.core: tasks, sleeping, clocks and semaphores for Lua. The friendlier
 * `kb` module (lua/kb/init.lua) is built on top of these. */
#include <math.h>
#include <stdlib.h>
#include <sys/time.h>

#include <lauxlib.h>

#include "kb/lua_modules.h"
#include "kb/lua_util.h"
#include "kb/rt.h"
#include "kb/version.h"

void kb_task_register(lua_State *L);
int kb_task_push_unobserved(lua_State *L);
int kb_rt_pending_signal(kb_rt *rt);

/* kb.spawn(fn, ...) -> task */
static int l_spawn(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  kb_task_spawn(L, lua_gettop(L) - 1);
  return 1;
}

/* ---- sleep ---------------------------------------------------------------- */

typedef struct {
  kb_vtimer timer; /* on the scenario clock: it never fires early */
  kb_task *task;
} sleep_op;

static void sleep_done(kb_vtimer *timer) {
  sleep_op *op = timer->data;
  kb_task *t = op->task;
  free(op);
  kb_task_wake(t);
}

static void sleep_cancel(void *p) {
  sleep_op *op = p;
  kb_vtimer_stop(&op->timer);
  free(op);
}

/* The seconds argument of both sleeps (raises on a bad one). */
static lua_Number check_seconds(lua_State *L) {
  lua_Number s = luaL_checknumber(L, 1);
  luaL_argcheck(L, s >= 0 && s == s, 1, "sleep time must be a non-negative number");
  return s;
}

/* kb.sleep(seconds): suspends the task for that long on the scenario clock.
 * kb.sleep(0) yields to every other ready task and to pending I/O. */
static int l_sleep(lua_State *L) {
  lua_Number s = check_seconds(L);
  kb_task *t = kb_task_running(L);
  if (s == 0) return kb_task_yield(L);
  sleep_op *op = malloc(sizeof *op);
  if (!op) return luaL_error(L, "kb.sleep: out of memory");
  kb_vtimer_init(kb_rt_clock(kb_task_rt(t)), &op->timer, sleep_done, op);
  op->task = t;
  if (kb_vtimer_start(&op->timer, s) != 0) {
    free(op);
    return luaL_error(L, "kb.sleep: out of memory");
  }
  return kb_task_await(L, t, sleep_cancel, op);
}

/* kb.core.sleep_real(seconds): real seconds, whatever the scenario clock
 * does (journal flushes, progress lines, bounds on a cleanup). A real wait
 * does not hold a fast-forwarding clock back. */
typedef struct {
  uv_timer_t timer;
  kb_task *task;
} real_sleep_op;

static void real_sleep_free(uv_handle_t *h) { free(h->data); }

static void real_sleep_done(uv_timer_t *timer) {
  real_sleep_op *op = timer->data;
  kb_task *t = op->task;
  uv_close((uv_handle_t *)timer, real_sleep_free);
  kb_task_wake(t);
}

static void real_sleep_cancel(void *p) {
  real_sleep_op *op = p;
  uv_timer_stop(&op->timer);
  uv_close((uv_handle_t *)&op->timer, real_sleep_free);
}

static int l_sleep_real(lua_State *L) {
  lua_Number s = check_seconds(L);
  kb_task *t = kb_task_running(L);
  if (s == 0) return kb_task_yield(L);
  real_sleep_op *op = malloc(sizeof *op);
  if (!op) return luaL_error(L, "kb.sleep_real: out of memory");
  uv_timer_init(kb_rt_loop(kb_task_rt(t)), &op->timer);
  op->timer.data = op;
  op->task = t;
  double ms = ceil(s * 1000.0);
  /* from now, not from the loop's last wakeup (the Lua since then counts) */
  uv_update_time(kb_rt_loop(kb_task_rt(t)));
  uv_timer_start(&op->timer, real_sleep_done, ms > 9.0e15 ? (uint64_t)9.0e15 : (uint64_t)ms, 0);
  return kb_task_await(L, t, real_sleep_cancel, op);
}

/* kb.core.clock_kind() -> "events" | "linear" */
static int l_clock_kind(lua_State *L) {
  kb_vclock *c = kb_rt_clock(kb_rt_from_lua(L));
  lua_pushstring(L, kb_vclock_mode_of(c) == KB_VCLOCK_EVENTS ? "events" : "linear");
  return 1;
}

/* kb.core.clock_skipped() -> seconds skipped by fast-forwarding, jumps */
static int l_clock_skipped(lua_State *L) {
  uint64_t jumps;
  lua_pushnumber(L, kb_vclock_skipped(kb_rt_clock(kb_rt_from_lua(L)), &jumps));
  lua_pushinteger(L, (lua_Integer)jumps);
  return 2;
}

/* ---- clocks ------------------------------------------------------------------ */

static int l_now(lua_State *L) {
  lua_pushnumber(L, kb_rt_now(kb_rt_from_lua(L)));
  return 1;
}

static int l_time(lua_State *L) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  lua_pushnumber(L, (lua_Number)tv.tv_sec + (lua_Number)tv.tv_usec / 1e6);
  return 1;
}

/* kb.core.loop_idle() -> idle, now: the seconds the event loop has spent
 * waiting for events since it started, and the monotonic real time in
 * seconds (uv_hrtime): busy share over an interval = 1 - d(idle) / d(now). */
static int l_loop_idle(lua_State *L) {
  uv_loop_t *loop = kb_rt_loop(kb_rt_from_lua(L));
  lua_pushnumber(L, (lua_Number)uv_metrics_idle_time(loop) / 1e9);
  lua_pushnumber(L, (lua_Number)uv_hrtime() / 1e9);
  return 2;
}

static int l_clock_speed(lua_State *L) {
  lua_pushnumber(L, kb_vclock_speed(kb_rt_clock(kb_rt_from_lua(L))));
  return 1;
}

/* ---- semaphores ------------------------------------------------------------------ */

/* A task in sem:acquire(). Owned by the wait: freed when the unit is
 * delivered (sem_deliver) or the wait is cancelled (waiter_cancel). */
typedef struct sem_waiter {
  kb_task *task;
  struct sem_waiter *next;
  struct semaphore *sem;
  int granted; /* release() handed it a unit it has not taken yet */
} sem_waiter;

typedef struct semaphore {
  lua_Integer count;
  sem_waiter *head, *tail;
} semaphore;

#define SEM_META "kb.semaphore"

static void waiter_unlink(semaphore *s, sem_waiter *w) {
  sem_waiter **p = &s->head, *prev = NULL;
  while (*p && *p != w) {
    prev = *p;
    p = &(*p)->next;
  }
  if (!*p) return;
  *p = w->next;
  if (s->tail == w) s->tail = prev;
}

static int sem_deliver(lua_State *L, void *p) {
  (void)L;
  free(p); /* the unit is the caller's now */
  return 0;
}

/* One unit comes free: to the oldest waiter, else back to the count. */
static void sem_give(semaphore *s) {
  sem_waiter *w = s->head;
  if (!w) {
    s->count++;
    return;
  }
  waiter_unlink(s, w);
  w->granted = 1;
  kb_task_deliver(w->task, sem_deliver); /* w belongs to the task now */
}

/* A waiter cancelled before it resumed with its unit passes the unit on:
 * otherwise it would be lost for good (and a kb.pool with it a slot). The
 * semaphore is alive: the waiter's acquire() holds it on its stack. */
static void waiter_cancel(void *p) {
  sem_waiter *w = p;
  if (w->granted) sem_give(w->sem);
  else waiter_unlink(w->sem, w);
  free(w);
}

/* kb.semaphore(n) -> sem with :acquire() (suspends while none is free),
 * :release(), :available(). */
static int l_semaphore(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  luaL_argcheck(L, n >= 0, 1, "count must be >= 0");
  semaphore *s = lua_newuserdatauv(L, sizeof *s, 0);
  s->count = n;
  s->head = s->tail = NULL;
  luaL_setmetatable(L, SEM_META);
  return 1;
}

static int sem_acquire(lua_State *L) {
  semaphore *s = luaL_checkudata(L, 1, SEM_META);
  if (s->count > 0 && !s->head) {
    s->count--;
    return 0;
  }
  kb_task *t = kb_task_running(L);
  sem_waiter *w = malloc(sizeof *w);
  if (!w) return luaL_error(L, "semaphore: out of memory");
  w->task = t;
  w->next = NULL;
  w->sem = s;
  w->granted = 0;
  if (s->tail) s->tail->next = w;
  else s->head = w;
  s->tail = w;
  return kb_task_await(L, t, waiter_cancel, w);
}

/* The unit goes straight to the oldest waiter, if any. */
static int sem_release(lua_State *L) {
  sem_give(luaL_checkudata(L, 1, SEM_META));
  return 0;
}

static int sem_available(lua_State *L) {
  semaphore *s = luaL_checkudata(L, 1, SEM_META);
  lua_pushinteger(L, s->count);
  return 1;
}

static int sem_gc(lua_State *L) {
  semaphore *s = luaL_checkudata(L, 1, SEM_META);
  /* Waiters hold the semaphore on their stacks, so none can be left here
   * except at shutdown, when their tasks are already abandoned. */
  while (s->head) {
    sem_waiter *w = s->head;
    s->head = w->next;
    free(w);
  }
  return 0;
}

static const luaL_Reg sem_methods[] = {
  {"acquire", sem_acquire},
  {"release", sem_release},
  {"available", sem_available},
  {NULL, NULL}
};

static const luaL_Reg sem_meta[] = {
  {"__gc", sem_gc},
  {NULL, NULL}
};

/* ---- runtime control ------------------------------------------------------------- */

/* kb.core.exit(code): stops the loop; kbrun exits with `code`. */
static int l_exit(lua_State *L) {
  kb_rt_stop(kb_rt_from_lua(L), (int)luaL_optinteger(L, 1, 0));
  return 0;
}

static int l_unobserved_failures(lua_State *L) { return kb_task_push_unobserved(L); }

static int l_live_tasks(lua_State *L) {
  lua_pushinteger(L, kb_task_count_live(kb_rt_from_lua(L)));
  return 1;
}

/* kb.core.in_task() -> true when the caller may suspend. */
static int l_in_task(lua_State *L) {
  kb_task *t = kb_task_of(L);
  lua_pushboolean(L, t && kb_task_thread(t) == L);
  return 1;
}

/* kb.core.on_signal(fn): fn(signame) runs from the loop on SIGINT/SIGTERM. */
/* kb.core.cancel_all() -> n: cancels every task but the caller. */
static int l_cancel_all(lua_State *L) {
  kb_task *self = kb_task_of(L);
  if (self && kb_task_thread(self) != L) self = NULL;
  lua_pushinteger(L, kb_task_cancel_all(kb_rt_from_lua(L), self));
  return 1;
}

static int l_on_signal(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_pushvalue(L, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, "kb.on_signal");
  return 0;
}

static int l_pending_signal(lua_State *L) {
  int sig = kb_rt_pending_signal(kb_rt_from_lua(L));
  if (!sig) return 0;
  lua_pushstring(L, sig == 2 ? "SIGINT" : "SIGTERM");
  return 1;
}

static int l_cancelled(lua_State *L) {
  kb_task_push_cancelled(L);
  return 1;
}

static int l_is_cancelled(lua_State *L) {
  lua_pushboolean(L, kb_task_is_cancelled_error(L, 1));
  return 1;
}

static const luaL_Reg core_functions[] = {
  {"spawn", l_spawn},
  {"sleep", l_sleep},
  {"now", l_now},
  {"time", l_time},
  {"clock_speed", l_clock_speed},
  {"clock_kind", l_clock_kind},
  {"clock_skipped", l_clock_skipped},
  {"loop_idle", l_loop_idle},
  {"sleep_real", l_sleep_real},
  {"semaphore", l_semaphore},
  {"exit", l_exit},
  {"unobserved_failures", l_unobserved_failures},
  {"live_tasks", l_live_tasks},
  {"in_task", l_in_task},
  {"on_signal", l_on_signal},
  {"cancel_all", l_cancel_all},
  {"pending_signal", l_pending_signal},
  {"cancelled", l_cancelled},
  {"is_cancelled", l_is_cancelled},
  {NULL, NULL}
};

int luaopen_kb_core(lua_State *L) {
  kb_task_register(L);
  kb_new_class(L, SEM_META, sem_methods, sem_meta);
  luaL_newlib(L, core_functions);
  lua_pushliteral(L, KB_VERSION);
  lua_setfield(L, -2, "version");
  return 1;
}
