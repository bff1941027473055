/* The kbrun runtime: one libuv loop, one Lua state, many tasks.
 *
 * A task is a Lua coroutine scheduled by the runtime. Scenario code reads
 * sequentially; every asynchronous binding (an HTTP request, a sleep, a
 * watch event) suspends the running task and the C side wakes it when libuv
 * or libcurl completes.
 *
 * How a binding performs an asynchronous operation:
 *
 *   static int l_sleep(lua_State *L) {
 *     kb_task *t = kb_task_running(L);          // raises if not in a task
 *     my_op *op = ...;                          // start the operation
 *     return kb_task_await(L, t, my_op_cancel, op);
 *   }
 *
 *   static void my_op_done(my_op *op) {          // later, from a loop callback
 *     lua_State *co = kb_task_thread(op->task);
 *     lua_pushinteger(co, 42);                  // results go on the task's stack
 *     kb_task_wake(op->task, 1);                // l_sleep "returns" 42
 *   }
 *
 * Rules:
 *  - kb_task_wake / kb_task_fail are called from loop callbacks only, never
 *    synchronously inside the binding that awaits (complete synchronously by
 *    returning results instead).
 *  - If the task is cancelled while it awaits, the runtime calls cancel(op)
 *    exactly once; after that the operation must not wake the task. The
 *    operation still owns (and frees) its memory.
 *  - kb_task_fail raises the value on top of the task's stack as the error of
 *    the awaiting call.
 */
#ifndef KB_RT_H
#define KB_RT_H

#include <stdint.h>
#include <lua.h>
#include <uv.h>

typedef struct kb_rt kb_rt;
typedef struct kb_task kb_task;
typedef void (*kb_cancel_fn)(void *op);

/* ---- the scenario clock -------------------------------------------------
 * Everything time-based goes through the runtime's clock: kb.now, kb.sleep,
 * timeouts and recorded latencies. The real clock is monotonic time. A
 * virtual clock (the simulator's) runs `speed` times faster than real time:
 * scenario durations are divided by speed before they become uv timers. */
typedef struct kb_clock {
  double (*now)(struct kb_clock *self); /* scenario seconds */
  double speed;                         /* scenario seconds per real second */
  void *data;
} kb_clock;

/* A clock linear in monotonic time: base + elapsed * speed. The real clock
 * is one with speed 1. */
typedef struct kb_linear_clock {
  kb_clock clock; /* first: a kb_linear_clock is a kb_clock */
  double base;
  uint64_t origin_ns;
} kb_linear_clock;

void kb_linear_clock_init(kb_linear_clock *c, double base, double speed);

/* ---- runtime ------------------------------------------------------------ */
kb_rt *kb_rt_new(void);
void kb_rt_free(kb_rt *rt);
kb_rt *kb_rt_from_lua(lua_State *L);
lua_State *kb_rt_lua(kb_rt *rt);
uv_loop_t *kb_rt_loop(kb_rt *rt);

/* Replace the scenario clock (the simulator installs its virtual clock).
 * The clock must outlive the runtime or be reset before it is freed. */
void kb_rt_set_clock(kb_rt *rt, kb_clock *clock);
/* Switches the runtime's clock to `speed` scenario seconds per real second,
 * continuing from the current kb.now() (the embedded simulator sets its
 * speed; 1 is real time). */
void kb_rt_set_speed(kb_rt *rt, double speed);
kb_clock *kb_rt_clock(kb_rt *rt);
double kb_rt_now(kb_rt *rt);
/* A scenario-clock duration in seconds as real milliseconds for a uv timer
 * or a libcurl timeout (rounded up, at least 1 ms for positive values). */
uint64_t kb_rt_real_ms(kb_rt *rt, double scenario_seconds);
/* Real seconds elapsed, as scenario seconds. */
double kb_rt_scenario_seconds(kb_rt *rt, double real_seconds);

/* Run the loop until kb_rt_stop() or until nothing is left to do. Returns
 * the exit code given to kb_rt_stop (0 if the loop just ran dry). */
int kb_rt_run(kb_rt *rt);
void kb_rt_stop(kb_rt *rt, int exit_code);
int kb_rt_stopping(kb_rt *rt);

/* Signals: SIGINT/SIGTERM call the Lua function stored at registry key
 * "kb.on_signal" with the signal name, from the loop (not from the signal
 * handler). A busy Lua loop that never yields is interrupted with an error
 * so the handler gets to run. */
int kb_rt_signals_start(kb_rt *rt);

/* ---- tasks --------------------------------------------------------------- */
kb_task *kb_task_running(lua_State *L);   /* raises a Lua error outside a task */
kb_task *kb_task_of(lua_State *L);        /* NULL outside a task */
lua_State *kb_task_thread(kb_task *t);
kb_rt *kb_task_rt(kb_task *t);
int kb_task_await(lua_State *L, kb_task *t, kb_cancel_fn cancel, void *op);
void kb_task_wake(kb_task *t, int nresults);
void kb_task_fail(kb_task *t);
/* Suspends the running task behind every task that is ready now (use as
 * `return kb_task_yield(L);`). */
int kb_task_yield(lua_State *L);

/* Spawn the function at stack index `fn` with the `nargs` values above it
 * (all popped) as a new task; pushes the task userdata. Starts on the next
 * loop iteration. */
kb_task *kb_task_spawn(lua_State *L, int nargs);
/* Cancel a task: if it awaits, its operation is cancelled and the awaiting
 * call raises the kb.cancelled error inside the task. */
void kb_task_cancel(kb_task *t);
/* Cancels every unfinished task but `except` (may be NULL); returns how many. */
int kb_task_cancel_all(kb_rt *rt, kb_task *except);

/* Pushes the unique "cancelled" error value. */
void kb_task_push_cancelled(lua_State *L);
int kb_task_is_cancelled_error(lua_State *L, int idx);

/* Live tasks, for reports at exit. */
int kb_task_count_live(kb_rt *rt);

/* lua_pcall on the main Lua state (function and nargs arguments on its
 * stack) with a traceback handler. On error, prints the message and the
 * traceback to stderr and returns the Lua status. For main.c and the signal
 * path; tasks have their own error handling. */
int kb_rt_pcall(kb_rt *rt, int nargs, int nresults);

#endif
