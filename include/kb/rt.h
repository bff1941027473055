/* The kbrun runtime: one libuv loop, one Lua state, many tasks.
 *
 * A task is a Lua coroutine scheduled by the runtime. Scenario code reads
 * sequentially; every asynchronous binding (an HTTP request, a sleep, a
 * watch event) suspends the running task and the C side wakes it when libuv
 * or libcurl completes.
 *
 * How a binding performs an asynchronous operation:
 *
 *   static int l_op(lua_State *L) {
 *     kb_task *t = kb_task_running(L);          // raises if not in a task
 *     my_op *op = ...;                          // start the operation
 *     return kb_task_await(L, t, my_op_cancel, op);
 *   }
 *
 *   static void my_op_done(my_op *op) {          // later, from a loop callback
 *     op->answer = 42;                          // record what to deliver
 *     kb_task_deliver(op->task, my_op_deliver); // op now belongs to the task
 *   }
 *
 *   static int my_op_deliver(lua_State *L, void *p) { // runs inside the task
 *     my_op *op = p;
 *     lua_Integer answer = op->answer;
 *     my_op_free(op);                           // take what is needed first
 *     lua_pushinteger(L, answer);               // may raise: it is protected
 *     return 1;                                 // l_op "returns" 42
 *   }
 *
 * Why the values are pushed by the task and not by the loop callback: a
 * suspended coroutine has no error handler, so a push that fails there
 * (out of memory, a stack that cannot grow) would abort the process. The
 * deliver function runs as the awaiting call's continuation, inside
 * lua_resume, where such an error just fails the task.
 *
 * Rules:
 *  - kb_task_deliver / kb_task_wake are called from loop
 *    callbacks (or from Lua code for another task), never synchronously
 *    inside the binding that awaits (complete synchronously by returning
 *    results instead). The task may run inside the call: the caller touches
 *    nothing that the task may free afterwards.
 *  - Ownership: from kb_task_await until the task is woken, the operation
 *    owns op. After kb_task_deliver the task owns it: exactly one of
 *    deliver(L, op) (when the task resumes) or cancel(op) (when it is
 *    cancelled first, or at shutdown) is called, once. deliver must release
 *    what it needs to before anything in it can raise.
 *  - If the task is cancelled while it awaits, the runtime calls cancel(op)
 *    exactly once; after that the operation must not wake the task. The
 *    operation still owns (and frees) its memory. A cancel that comes after
 *    kb_task_deliver means "the result was not taken": give back what was
 *    handed over (a semaphore unit) and free op.
 *  - kb_task_wake resumes the awaiting call with no results (a timer, a
 *    close that completed): nothing is pushed, so nothing can fail.
 *    Anything with values or an error goes through kb_task_deliver.
 */
#ifndef KB_RT_H
#define KB_RT_H

#include <stdint.h>
#include <lua.h>
#include <uv.h>

#include "kb/vclock.h"

typedef struct kb_rt kb_rt;
typedef struct kb_task kb_task;
typedef void (*kb_cancel_fn)(void *op);
/* Pushes an awaiting call's results on L (the task's own thread) and
 * returns their number, or raises the call's error. */
typedef int (*kb_deliver_fn)(lua_State *L, void *op);

/* ---- the scenario clock -------------------------------------------------
 * Everything time-based goes through the runtime's clock (kb/vclock.h):
 * kb.now, kb.sleep, timeouts and recorded latencies. It starts as the real
 * clock (linear, speed 1). The embedded simulator either speeds it up
 * (linear, speed 600) or makes it fast-forward over waits (events). */
/* ---- runtime ------------------------------------------------------------ */
kb_rt *kb_rt_new(void);
void kb_rt_free(kb_rt *rt);
kb_rt *kb_rt_from_lua(lua_State *L);
lua_State *kb_rt_lua(kb_rt *rt);
uv_loop_t *kb_rt_loop(kb_rt *rt);

/* Switches the runtime's clock to `speed` scenario seconds per real second,
 * continuing from the current kb.now() (1 is real time). */
void kb_rt_set_speed(kb_rt *rt, double speed);
/* The clock itself, for timers (kb_vtimer_init) and for the simulator. */
kb_vclock *kb_rt_clock(kb_rt *rt);
double kb_rt_now(kb_rt *rt);
/* A scenario-clock duration in seconds as real milliseconds for a uv timer
 * or a libcurl timeout (rounded up, at least 1 ms for positive values). */
uint64_t kb_rt_real_ms(kb_rt *rt, double scenario_seconds);
/* Real seconds elapsed, as scenario seconds. */
double kb_rt_scenario_seconds(kb_rt *rt, double real_seconds);

/* A job on libuv's thread pool (kb.fs): host work the clock neither skips
 * over nor counts (kb_vclock_hold), and one kb_rt_free waits for before
 * Lua goes (its completion still touches the Lua state). */
void kb_rt_work_begin(kb_rt *rt);
void kb_rt_work_end(kb_rt *rt);

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

/* A sampling profiler of the Lua code (src/rt/profile.c; KBRUN_LUA_PROFILE):
 * start counts the main thread's stacks on its CPU time (every > 0: every
 * `every` Lua VM instructions instead); stop writes them, folded, to path.
 * Both return 0 or -1 (errno set). */
int kb_rt_profile_start(kb_rt *rt, const char *path, int every);
int kb_rt_profile_stop(void);

/* ---- tasks --------------------------------------------------------------- */
kb_task *kb_task_running(lua_State *L);   /* raises a Lua error outside a task */
kb_task *kb_task_of(lua_State *L);        /* NULL outside a task */
lua_State *kb_task_thread(kb_task *t);
kb_rt *kb_task_rt(kb_task *t);
int kb_task_await(lua_State *L, kb_task *t, kb_cancel_fn cancel, void *op);
/* Wakes t, which awaits with (cancel, op): when it resumes, deliver(L, op)
 * gives the awaiting call's results (see the rules above). */
void kb_task_deliver(kb_task *t, kb_deliver_fn deliver);
void kb_task_wake(kb_task *t);
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
