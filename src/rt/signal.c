/* SIGINT/SIGTERM: the handler only records the signal and wakes the event
 * loop; the orderly work (cancel tasks, flush results, cleanup) happens in
 * the Lua function at registry["kb.on_signal"], called from the loop, and
 * tasks are cancelled where they wait. Only a coroutine that keeps the loop
 * from that for INTERRUPT_GRACE_S (a busy loop that never yields) is
 * interrupted where it stands, by a Lua hook the SIGALRM handler arms: an
 * error raised at any instruction could leave a library's state half
 * changed (a storm's run list, a journal's buffer), so it is the last
 * resort, not the first. A second signal exits at once. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>

#include "rt_internal.h"

static kb_rt *volatile signal_rt; /* one runtime per process handles signals */

#define INTERRUPT_GRACE_S 1

static void interrupt_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  kb_task_push_cancelled(L);
  lua_error(L);
}

/* Arms the interrupt on L (the profiler re-arms it when its own hook took
 * the place of one). */
void kb__signal_arm(lua_State *L) {
  lua_sethook(L, interrupt_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

static void on_signal(int sig) {
  kb_rt *rt = signal_rt;
  if (!rt) return;
  if (rt->pending_signal) {
    static const char msg[] = "\nkbrun: interrupted again, exiting now\n";
    ssize_t r = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)r;
    _exit(128 + sig);
  }
  rt->pending_signal = sig;
  alarm(INTERRUPT_GRACE_S); /* async-signal-safe: on_grace_over, unless dispatched */
  uv_async_send(&rt->signal_async);
}

/* SIGALRM, INTERRUPT_GRACE_S after the signal: the loop has not got to it. */
static void on_grace_over(int sig) {
  (void)sig;
  kb_rt *rt = signal_rt;
  if (!rt || !rt->pending_signal || rt->signal_dispatched) return;
  lua_State *running = rt->running;
  /* lua_sethook is safe to call from a signal handler (lua.c does it). */
  if (running && running != rt->L) {
    rt->interrupt_armed = 1;
    kb__signal_arm(running);
  }
}

static void signal_dispatch(uv_async_t *async) {
  kb_rt *rt = async->data;
  int sig = rt->pending_signal;
  if (!sig) return;
  rt->signal_dispatched = 1;
  alarm(0);
  lua_State *L = rt->L;
  if (lua_getfield(L, LUA_REGISTRYINDEX, "kb.on_signal") != LUA_TFUNCTION) {
    lua_pop(L, 1);
    kb_rt_stop(rt, 128 + sig);
    return;
  }
  lua_pushstring(L, sig == SIGINT ? "SIGINT" : "SIGTERM");
  if (kb_rt_pcall(rt, 1, 0) != LUA_OK) kb_rt_stop(rt, 128 + sig);
}

int kb_rt_signals_start(kb_rt *rt) {
  int r = uv_async_init(&rt->loop, &rt->signal_async, signal_dispatch);
  if (r) return r;
  rt->signal_async.data = rt;
  uv_unref((uv_handle_t *)&rt->signal_async); /* never keeps the loop alive */
  rt->signals_started = 1;
  signal_rt = rt;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sa.sa_handler = on_grace_over;
  sigaction(SIGALRM, &sa, NULL);
  return 0;
}

void kb__signals_stop(kb_rt *rt) {
  if (!rt->signals_started) return;
  alarm(0);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGALRM, SIG_DFL);
  signal_rt = NULL;
  rt->signals_started = 0;
  uv_close((uv_handle_t *)&rt->signal_async, NULL);
}

/* Lua: the pending signal's name, or nil. */
int kb_rt_pending_signal(kb_rt *rt) { return rt->pending_signal; }
