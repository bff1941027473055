/* Private structures of the runtime, shared by runtime.c, task.c and
 * signal.c. Nothing outside src/rt/ includes this file. */
#ifndef KB_RT_INTERNAL_H
#define KB_RT_INTERNAL_H

#include <signal.h>

#include "kb/rt.h"

typedef enum {
  TASK_READY,    /* spawned, not started yet */
  TASK_RUNNING,  /* its coroutine is executing */
  TASK_AWAITING, /* suspended in kb_task_await */
  TASK_DONE,     /* returned; results are on its thread's stack */
  TASK_FAILED,   /* raised; the error is on its thread's stack */
  TASK_CANCELLED /* cancelled before or while running */
} task_state;

typedef enum { WAKE_OK, WAKE_CANCEL } wake_mode;

/* A task is a full userdata ("kb.task") whose first user value is its
 * coroutine. While it is alive (not finished) the registry holds a
 * reference to it, so a suspended task is never collected under an
 * operation that will wake it. */
struct kb_task {
  kb_rt *rt;
  lua_State *co;
  int ref;              /* registry ref while alive, LUA_NOREF after */
  task_state state;
  uint64_t id;

  kb_cancel_fn cancel;  /* set while awaiting, and until a delivery is made */
  void *op;
  kb_deliver_fn deliver; /* set by kb_task_deliver: the continuation pushes */
  wake_mode wake;       /* how the pending resume continues */
  int resume_nargs;     /* values waiting on co's stack for the resume */
  int queued;           /* in the ready queue */
  int observed;         /* its outcome was delivered to someone */
  int cancel_pending;   /* cancelled while a wake was already queued */
  int cancel_requested; /* task:cancel() or cancel_all reached it once */
  int nresults;         /* results on co's stack once DONE */

  kb_task *next_ready;  /* ready queue */
  kb_task *prev_live, *next_live; /* all unfinished tasks */
  kb_task *waiters;     /* tasks blocked in task:wait() on this one */
  kb_task *next_waiter;
  kb_task *waiting_on;
};

struct kb_rt {
  uv_loop_t loop;
  lua_State *L;
  kb_vclock *clock;      /* the scenario clock; its timers live on loop */
  int pool_jobs;         /* thread-pool jobs not completed (kb_rt_work_begin) */

  uv_idle_t ready_idle; /* drains the ready queue */
  kb_task *ready_head, *ready_tail;
  kb_task *live;        /* doubly linked list of unfinished tasks */
  int nlive;
  uint64_t next_task_id;
  int in_lua;           /* > 0 while Lua code runs on this runtime */
  int abandoning;       /* kb__tasks_abandon runs: nothing is resumed */
  lua_State *volatile running; /* the coroutine executing now, for signals */

  int stopping;
  int exit_code;

  uv_async_t signal_async;
  volatile sig_atomic_t pending_signal;
  volatile sig_atomic_t signal_dispatched; /* the loop ran kb.on_signal for it */
  volatile sig_atomic_t interrupt_armed;   /* a busy coroutine is to be interrupted */
  int signals_started;
};

void kb__task_queue(kb_task *t);
void kb__task_resume(kb_task *t, int nargs);
void kb__task_release(kb_task *t);
void kb__tasks_abandon(kb_rt *rt);
void kb__signals_stop(kb_rt *rt);
void kb__signal_arm(lua_State *L);
void kb_task_register(lua_State *L);
int kb_task_push_unobserved(lua_State *L);

#endif
