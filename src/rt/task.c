/* Tasks: Lua coroutines scheduled on the runtime's loop.
 *
 * Life of a task:  READY --resume--> RUNNING --kb_task_await--> AWAITING
 *                    ^                  |  ^                        |
 *                    |                  |  +------- wake -----------+
 *                    |                  +--> DONE | FAILED | CANCELLED
 * The coroutine's stack keeps the results (or the error) after it finished,
 * so waiters copy them from there; nothing else stores them.
 *
 * The registry reference that keeps an unfinished task alive is dropped
 * when it finishes, unless it is still in the ready queue (a task
 * cancelled before it started): then the queue drops it when it gets
 * there, so the collector never frees a task the queue still links. */
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "kb/lua_util.h"
#include "rt_internal.h"

static const char CANCELLED_KEY = 'c';
static const char FAILED_KEY = 'f'; /* registry table: failed, not observed */

#define TASK_META "kb.task"

kb_task *kb_task_of(lua_State *L) {
  return *(kb_task **)lua_getextraspace(L);
}

kb_task *kb_task_running(lua_State *L) {
  kb_task *t = kb_task_of(L);
  if (t == NULL || t->co != L)
    luaL_error(L, "this call suspends and must run inside a kb task "
                  "(not in the main chunk of a module or a plain coroutine)");
  return t;
}

lua_State *kb_task_thread(kb_task *t) { return t->co; }
kb_rt *kb_task_rt(kb_task *t) { return t->rt; }
int kb_task_count_live(kb_rt *rt) { return rt->nlive; }

void kb_task_push_cancelled(lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &CANCELLED_KEY) != LUA_TNIL) return;
  lua_pop(L, 1);
  lua_createtable(L, 0, 2);
  lua_pushliteral(L, "cancelled");
  lua_setfield(L, -2, "class");
  lua_pushliteral(L, "the task was cancelled");
  lua_setfield(L, -2, "message");
  kb_error_push_meta(L);
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &CANCELLED_KEY);
}

int kb_task_is_cancelled_error(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  kb_task_push_cancelled(L);
  int same = lua_rawequal(L, idx, -1);
  lua_pop(L, 1);
  return same;
}

/* ---- live list ----------------------------------------------------------- */

static void live_add(kb_task *t) {
  kb_rt *rt = t->rt;
  t->next_live = rt->live;
  if (rt->live) rt->live->prev_live = t;
  rt->live = t;
  rt->nlive++;
}

static void live_remove(kb_task *t) {
  kb_rt *rt = t->rt;
  if (t->prev_live) t->prev_live->next_live = t->next_live;
  else rt->live = t->next_live;
  if (t->next_live) t->next_live->prev_live = t->prev_live;
  t->prev_live = t->next_live = NULL;
  rt->nlive--;
}

/* ---- spawning ------------------------------------------------------------ */

kb_task *kb_task_spawn(lua_State *L, int nargs) {
  kb_rt *rt = kb_rt_from_lua(L);
  int fn = lua_gettop(L) - nargs;
  luaL_checktype(L, fn, LUA_TFUNCTION);

  kb_task *t = lua_newuserdatauv(L, sizeof *t, 1);
  memset(t, 0, sizeof *t);
  luaL_setmetatable(L, TASK_META);
  t->rt = rt;
  t->id = ++rt->next_task_id;
  t->co = lua_newthread(L);
  lua_setiuservalue(L, -2, 1); /* the task owns its coroutine */
  *(kb_task **)lua_getextraspace(t->co) = t;

  lua_pushvalue(L, -1);
  t->ref = luaL_ref(L, LUA_REGISTRYINDEX);

  /* Move the function and its arguments onto the coroutine, which starts
   * with room for LUA_MINSTACK values only. */
  if (!lua_checkstack(t->co, nargs + 1))
    luaL_error(L, "kb.spawn: too many arguments (%d)", nargs);
  lua_insert(L, fn);             /* task, fn, args... */
  lua_xmove(L, t->co, nargs + 1);
  t->state = TASK_READY;
  t->resume_nargs = nargs;
  live_add(t);
  kb__task_queue(t);
  return t; /* the userdata is left on L's stack */
}

/* ---- finishing ------------------------------------------------------------ */

/* Results are copied through the finished coroutine's own stack this many
 * at a time: it already holds all of them and may have no room for as many
 * again (a task may return as many values as a Lua stack takes). */
#define COPY_CHUNK 64

/* Copies a finished task's outcome onto `to`: its results, or its error.
 * Returns the number of values pushed, or -1 when an error was pushed.
 * Raises (on `to`) when they do not fit: call it only where that is
 * protected, from a Lua call or a task's continuation. */
static int push_outcome(kb_task *t, lua_State *to) {
  lua_State *co = t->co;
  if (t->state == TASK_DONE) {
    int n = t->nresults;
    luaL_checkstack(to, n + 1, "too many task results");
    for (int i = 1; i <= n; i += COPY_CHUNK) {
      int k = n - i + 1 < COPY_CHUNK ? n - i + 1 : COPY_CHUNK;
      if (!lua_checkstack(co, k)) luaL_error(to, "kb task: out of memory copying results");
      for (int j = 0; j < k; j++) lua_pushvalue(co, i + j);
      lua_xmove(co, to, k);
    }
    t->observed = 1;
    return n;
  }
  if (t->state == TASK_CANCELLED) {
    kb_task_push_cancelled(to);
    t->observed = 1;
    return -1;
  }
  luaL_checkstack(to, 2, "kb task: no room for an error");
  if (!lua_checkstack(co, 1)) luaL_error(to, "kb task: out of memory copying an error");
  lua_pushvalue(co, -1);
  lua_xmove(co, to, 1);
  t->observed = 1;
  return -1;
}

static void forget_failed(kb_task *t) {
  lua_State *L = t->rt->L;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &FAILED_KEY) == LUA_TTABLE) {
    lua_pushnil(L);
    lua_rawsetp(L, -2, t);
  }
  lua_pop(L, 1);
}

/* task:wait()'s delivery, in the waiter (op) once it resumes: the outcome
 * of the task it waited on, which its own stack keeps alive (argument 1). */
static int deliver_outcome(lua_State *L, void *op) {
  kb_task *w = op, *t = w->waiting_on;
  w->waiting_on = NULL;
  int n = push_outcome(t, L);
  if (t->state == TASK_FAILED) forget_failed(t);
  return n < 0 ? lua_error(L) : n;
}

/* Runs from finish(), outside any protected call: nothing is pushed here.
 * Each waiter is queued (never resumed from inside another task's resume)
 * and copies the outcome itself when it runs. A waiter cancelled before
 * then never takes it, and a failure nobody took stays unobserved. */
static void wake_waiters(kb_task *t) {
  kb_task *w = t->waiters;
  t->waiters = NULL;
  while (w) {
    kb_task *next = w->next_waiter;
    w->next_waiter = NULL; /* w->waiting_on stays: deliver_outcome reads it */
    if (w->state == TASK_AWAITING && !w->queued) {
      w->deliver = deliver_outcome;
      w->wake = WAKE_OK;
      w->resume_nargs = 0;
      kb__task_queue(w);
    }
    w = next;
  }
}

/* Adds the traceback to an error once: appended to a string message, or as
 * the `traceback` field of an error table. */
static void annotate_error(kb_task *t) {
  lua_State *L = t->rt->L, *co = t->co;
  int err = lua_gettop(co);
  if (!lua_checkstack(co, 3)) return; /* out of memory: the error stays as it is */
  if (lua_type(co, err) == LUA_TSTRING) {
    luaL_traceback(L, co, lua_tostring(co, err), 0);
    kb_chunkid_expand(L, co, lua_tostring(L, -1));
    lua_remove(L, -2);
    lua_xmove(L, co, 1);
    lua_replace(co, err);
  } else if (lua_type(co, err) == LUA_TTABLE) {
    if (lua_getfield(co, err, "traceback") == LUA_TNIL) {
      luaL_traceback(L, co, NULL, 0);
      kb_chunkid_expand(L, co, lua_tostring(L, -1));
      lua_remove(L, -2);
      lua_xmove(L, co, 1);
      lua_setfield(co, err, "traceback");
    }
    lua_pop(co, 1);
  }
}

/* A coroutine that stopped on an error does not unwind: its to-be-closed
 * variables (`local x <close>`) are closed here, as coroutine.close would,
 * keeping the original error on top of its stack. */
static void close_pending(kb_task *t) {
  int err_idx = lua_gettop(t->co);
  if (!lua_checkstack(t->co, 1) || !lua_checkstack(t->rt->L, 1)) return; /* out of memory */
  lua_pushvalue(t->co, err_idx); /* keep the error: a reset may replace it */
  lua_xmove(t->co, t->rt->L, 1);
  t->rt->in_lua++; /* __close code runs: wakes it causes are deferred */
#if LUA_VERSION_RELEASE_NUM >= 50406
  int status = lua_closethread(t->co, t->rt->L);
#else
  int status = lua_resetthread(t->co);
#endif
  t->rt->in_lua--;
  if (status == LUA_OK || status == LUA_YIELD) {
    lua_settop(t->co, 0);
    lua_xmove(t->rt->L, t->co, 1);
  } else {
    lua_pop(t->rt->L, 1); /* a __close failed: its error replaces ours */
  }
}

/* Remember a failed task until someone looks, so exit can report it. */
static void remember_failed(kb_task *t) {
  lua_State *L = t->rt->L;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &FAILED_KEY) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &FAILED_KEY);
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, t->ref);
  lua_rawsetp(L, -2, t);
  lua_pop(L, 1);
}

static int annotate_lua(lua_State *L) {
  annotate_error(lua_touserdata(L, 1));
  return 0;
}

static int remember_lua(lua_State *L) {
  remember_failed(lua_touserdata(L, 1));
  return 0;
}

/* finish() runs from loop callbacks, outside any protected call: what in
 * it allocates runs under lua_pcall on the main state, so running out of
 * memory there is reported instead of aborting kbrun. */
static void finish_protected(kb_task *t, lua_CFunction fn, const char *what) {
  lua_State *L = t->rt->L;
  if (!lua_checkstack(L, 3)) {
    fprintf(stderr, "kbrun: task %d failed, and %s: not enough memory\n", (int)t->id, what);
    return;
  }
  lua_pushcfunction(L, fn);
  lua_pushlightuserdata(L, t);
  if (lua_pcall(L, 1, 0, 0) == LUA_OK) return;
  const char *msg = lua_tostring(L, -1);
  fprintf(stderr, "kbrun: task %d failed, and %s: %s\n", (int)t->id, what, msg ? msg : "?");
  lua_pop(L, 1);
}

static void finish(kb_task *t, task_state state) {
  t->state = state;
  t->cancel = NULL;
  t->op = NULL;
  t->deliver = NULL;
  live_remove(t);
  if (state == TASK_FAILED || state == TASK_CANCELLED) {
    if (state == TASK_FAILED)
      finish_protected(t, annotate_lua, "its traceback could not be added");
    if (lua_status(t->co) != LUA_OK || lua_gettop(t->co) > 0) close_pending(t);
  }
  if (state == TASK_FAILED)
    finish_protected(t, remember_lua, "it could not be recorded for the report at exit");
  if (!t->queued) kb__task_release(t); /* else the ready queue does */
  wake_waiters(t);
}

/* Drops the reference of a finished task: the collector may free it. */
void kb__task_release(kb_task *t) {
  if (t->ref == LUA_NOREF) return;
  luaL_unref(t->rt->L, LUA_REGISTRYINDEX, t->ref);
  t->ref = LUA_NOREF;
}

/* ---- resuming ---------------------------------------------------------------- */

void kb__task_resume(kb_task *t, int nargs) {
  kb_rt *rt = t->rt;
  if (t->state != TASK_READY && t->state != TASK_AWAITING) {
    kb__task_release(t); /* finished while queued (cancelled before it started) */
    return;
  }
  t->state = TASK_RUNNING;
  rt->in_lua++;
  lua_State *outer = rt->running; /* a task resumed from inside another's Lua */
  rt->running = t->co;
  int nres = 0;
  int status = lua_resume(t->co, rt->L, nargs, &nres);
  rt->running = outer;
  rt->in_lua--;

  if (status == LUA_YIELD) {
    if (t->state == TASK_AWAITING) return;
    /* A bare coroutine.yield() inside a task: nothing would ever resume it. */
    lua_pop(t->co, nres);
    lua_pushliteral(t->co, "coroutine.yield() called directly inside a kb task; "
                           "use kb.sleep() or another kb call to wait");
    luaL_traceback(rt->L, t->co, lua_tostring(t->co, -1), 0);
    lua_pop(t->co, 1);
    lua_xmove(rt->L, t->co, 1);
    /* The coroutine is suspended for good; the task has failed. */
    finish(t, TASK_FAILED);
    return;
  }
  if (status == LUA_OK) {
    t->nresults = nres;
    finish(t, TASK_DONE);
    return;
  }
  if (kb_task_is_cancelled_error(t->co, -1)) finish(t, TASK_CANCELLED);
  else finish(t, TASK_FAILED);
}

/* ---- awaiting ----------------------------------------------------------------- */

/* The awaiting call's continuation, inside lua_resume: what it pushes or
 * raises is protected. */
static int await_continue(lua_State *L, int status, lua_KContext base) {
  kb_task *t = kb_task_of(L);
  wake_mode mode = t->wake;
  kb_deliver_fn deliver = t->deliver;
  void *op = t->op;
  t->wake = WAKE_OK;
  t->deliver = NULL;
  t->cancel = NULL;
  t->op = NULL;
  if (t->cancel_pending) {
    t->cancel_pending = 0;
    mode = WAKE_CANCEL;
  }
  if (mode == WAKE_CANCEL) {
    kb_task_push_cancelled(L);
    return lua_error(L);
  }
  if (deliver) return deliver(L, op);
  return lua_gettop(L) - (int)base;
}

int kb_task_await(lua_State *L, kb_task *t, kb_cancel_fn cancel, void *op) {
  if (t->co != L) return luaL_error(L, "kb_task_await: not the task's own thread");
  if (t->cancel_pending) {
    t->cancel_pending = 0;
    if (cancel) cancel(op);
    kb_task_push_cancelled(L);
    return lua_error(L);
  }
  t->state = TASK_AWAITING;
  t->cancel = cancel;
  t->op = op;
  t->deliver = NULL;
  t->wake = WAKE_OK;
  return lua_yieldk(L, 0, (lua_KContext)lua_gettop(L), await_continue);
}

int kb_task_yield(lua_State *L) {
  kb_task *t = kb_task_running(L);
  if (!t->cancel_pending) { /* else kb_task_await raises the cancellation */
    t->resume_nargs = 0;
    kb__task_queue(t); /* lua_yieldk never returns: queue first */
  }
  return kb_task_await(L, t, NULL, NULL);
}

static void wake(kb_task *t, kb_deliver_fn deliver) {
  /* At shutdown nothing runs again; a delivery's op is then cancelled by
   * kb__tasks_abandon, which still finds it in t->op. */
  if (t->state != TASK_AWAITING || t->queued || t->rt->abandoning) return;
  if (deliver) {
    t->deliver = deliver; /* cancel and op stay until delivered */
  } else {
    t->cancel = NULL;
    t->op = NULL;
  }
  t->wake = WAKE_OK;
  t->resume_nargs = 0;
  /* Resume right away from a loop callback; defer when Lua is running. */
  if (t->rt->in_lua > 0) kb__task_queue(t);
  else kb__task_resume(t, 0);
}

void kb_task_deliver(kb_task *t, kb_deliver_fn deliver) { wake(t, deliver); }
void kb_task_wake(kb_task *t) { wake(t, NULL); }

void kb_task_cancel(kb_task *t) {
  if (t->state == TASK_READY || t->state == TASK_AWAITING) t->cancel_requested = 1;
  switch (t->state) {
  case TASK_READY:
    lua_settop(t->co, 0);
    finish(t, TASK_CANCELLED);
    break;
  case TASK_AWAITING:
    if (t->queued && t->deliver) {
      /* Woken with a delivery it has not taken: the operation gets it
       * back (a semaphore's unit goes to the next waiter) and frees op. */
      kb_cancel_fn cancel = t->cancel;
      void *op = t->op;
      t->deliver = NULL;
      t->cancel = NULL;
      t->op = NULL;
      t->wake = WAKE_CANCEL;
      t->resume_nargs = 0;
      if (cancel) cancel(op);
      break;
    }
    if (t->queued) { /* already woken: the continuation raises instead */
      t->cancel_pending = 1;
      break;
    }
    if (t->cancel) t->cancel(t->op);
    t->cancel = NULL;
    t->op = NULL;
    t->wake = WAKE_CANCEL;
    t->resume_nargs = 0;
    kb__task_queue(t);
    break;
  default: /* running (it cancels itself) or already finished */
    break;
  }
}

int kb_task_cancel_all(kb_rt *rt, kb_task *except) {
  int n = 0;
  kb_task *t = rt->live;
  while (t) {
    kb_task *next = t->next_live; /* cancelling a READY task unlinks it */
    if (t != except && t->state != TASK_RUNNING) {
      kb_task_cancel(t);
      n++;
    }
    t = next;
  }
  return n;
}

/* At shutdown: cancel every pending operation without running Lua again. */
void kb__tasks_abandon(kb_rt *rt) {
  rt->abandoning = 1;
  rt->ready_head = rt->ready_tail = NULL;
  uv_idle_stop(&rt->ready_idle);
  while (rt->live) {
    kb_task *t = rt->live;
    /* Pending deliveries too: their ops are released by cancel. */
    if (t->state == TASK_AWAITING && t->cancel) t->cancel(t->op);
    t->cancel = NULL;
    t->op = NULL;
    t->deliver = NULL;
    live_remove(t);
    t->state = TASK_CANCELLED;
  }
}

/* ---- the Lua face of a task ---------------------------------------------------- */

static kb_task *check_task(lua_State *L, int idx) {
  return luaL_checkudata(L, idx, TASK_META);
}

/* Also after the target finished (the waiter was queued with the outcome
 * and is cancelled before it took it): it is no longer on the list then. */
static void cancel_wait(void *op) {
  kb_task *w = op, *target = w->waiting_on, **p;
  if (!target) return;
  for (p = &target->waiters; *p; p = &(*p)->next_waiter) {
    if (*p == w) {
      *p = w->next_waiter;
      break;
    }
  }
  w->next_waiter = NULL;
  w->waiting_on = NULL;
}

/* task:wait() -> the task's results, or raises its error. */
static int task_wait(lua_State *L) {
  kb_task *t = check_task(L, 1);
  if (t->state == TASK_DONE || t->state == TASK_FAILED || t->state == TASK_CANCELLED) {
    int n = push_outcome(t, L);
    if (t->state == TASK_FAILED) forget_failed(t);
    return n < 0 ? lua_error(L) : n;
  }
  kb_task *self = kb_task_running(L);
  if (self == t) return luaL_error(L, "a task cannot wait for itself");
  self->waiting_on = t;
  self->next_waiter = t->waiters;
  t->waiters = self;
  return kb_task_await(L, self, cancel_wait, self);
}

static int task_cancel(lua_State *L) {
  kb_task *t = check_task(L, 1);
  if (t->state == TASK_RUNNING) {
    kb_task_push_cancelled(L); /* a task cancelling itself stops here */
    return lua_error(L);
  }
  kb_task_cancel(t);
  return 0;
}

/* task:cancel_requested() -> true once the task was asked to stop (by
 * task:cancel() or the runner's Ctrl-C), whether or not it has stopped:
 * who waits for a task unwinding need not cancel it again, which would
 * cut that unwinding short. */
static int task_cancel_requested(lua_State *L) {
  lua_pushboolean(L, check_task(L, 1)->cancel_requested);
  return 1;
}

static const char *state_name(task_state s) {
  static const char *names[] = {"ready", "running", "awaiting", "done", "failed", "cancelled"};
  return names[s];
}

static int task_status(lua_State *L) {
  lua_pushstring(L, state_name(check_task(L, 1)->state));
  return 1;
}

static int task_done(lua_State *L) {
  task_state s = check_task(L, 1)->state;
  lua_pushboolean(L, s == TASK_DONE || s == TASK_FAILED || s == TASK_CANCELLED);
  return 1;
}

static int task_id(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)check_task(L, 1)->id);
  return 1;
}

static int task_tostring(lua_State *L) {
  kb_task *t = check_task(L, 1);
  lua_pushfstring(L, "kb.task %d (%s)", (int)t->id, state_name(t->state));
  return 1;
}

static const luaL_Reg task_methods[] = {
  {"wait", task_wait},
  {"cancel", task_cancel},
  {"cancel_requested", task_cancel_requested},
  {"status", task_status},
  {"done", task_done},
  {"id", task_id},
  {NULL, NULL}
};

/* Registers the kb.task class; called by luaopen_kb_core. */
void kb_task_register(lua_State *L) {
  if (!luaL_newmetatable(L, TASK_META)) {
    lua_pop(L, 1);
    return;
  }
  lua_pushcfunction(L, task_tostring);
  lua_setfield(L, -2, "__tostring");
  luaL_newlib(L, task_methods);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
}

/* Pushes a list of {id=, error=} for tasks that failed and were never
 * waited on, and marks them reported. */
int kb_task_push_unobserved(lua_State *L) {
  lua_newtable(L);
  int list = lua_gettop(L), n = 0;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &FAILED_KEY) == LUA_TTABLE) {
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      kb_task *t = lua_touserdata(L, -1);
      lua_createtable(L, 0, 2);
      lua_pushinteger(L, (lua_Integer)t->id);
      lua_setfield(L, -2, "id");
      if (!lua_checkstack(t->co, 1)) luaL_error(L, "kb task: out of memory reporting a failure");
      lua_pushvalue(t->co, -1);
      lua_xmove(t->co, L, 1);
      lua_setfield(L, -2, "error");
      lua_rawseti(L, list, ++n);
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  lua_pushnil(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &FAILED_KEY);
  return 1;
}
