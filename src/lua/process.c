/* kb.process: child processes on the runtime's loop (uv_spawn + pipes).
 *
 *   local process = require "kb.process"
 *   local r = process.run{cmd = {"kubectl", "get", "pods"}, timeout = 30}
 *   if r.code == 0 then print(r.stdout) end
 *
 *   local p <close> = process.spawn{cmd = {"kbrun", "sim"}}
 *   local url = p:read_line()
 *
 * kb.process.run{cmd =, env =, clear_env =, cwd =, stdin =, timeout =,
 *   max_output =, check =} -> {code, signal, stdout, stderr, time, pid}
 * suspends the calling task until the child has exited and both of its
 * output pipes are closed. Raises class "spawn" (cannot start), "timeout",
 * "output_limit" or, with check = true, "exit" (non-zero exit).
 *
 * kb.process.spawn{cmd =, env =, clear_env =, cwd =, stdin =, stdout =,
 *   stderr =, max_output =} -> a process object: p:read_line(), p:write(s),
 * p:close_stdin(), p:kill([sig]), p:wait(), p.pid. Garbage collection or
 * a to-be-closed variable kills a child still running.
 *
 * docs/process.md has the details. Every child leads its own process group
 * (UV_PROCESS_DETACHED -> setsid), so terminating it also reaches what it
 * started (a shell's children), and a Ctrl-C meant for kbrun reaches the
 * children only through kbrun's own orderly shutdown.
 *
 * The loop callbacks push nothing into the suspended tasks (which have no
 * error handler): they record the outcome and wake the task with
 * kb_task_deliver; the *_deliver functions build the values in the task's
 * continuation. A kproc waiting to deliver run's outcome is pinned (it is
 * not freed, even abandoned) until it is delivered or the task cancelled. */
/* This file: the Lua binding (run, spawn, the process object's methods and
 * the module). Starting a child and its lifetime are in process_spawn.c,
 * the pipes and the exit in process_io.c; process_internal.h is what they
 * share. */
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "kb/lua_modules.h"
#include "kb/lua_util.h"
#include "kb/rt.h"
#include "process_internal.h"

#define PROC_META "kb.process"

typedef struct {
  kproc *p;
} lproc;

/* ---- kb.process.run ------------------------------------------------------ */

static void run_cancel(void *op) {
  kproc *p = op;
  p->pinned = 0; /* an outcome not delivered is dropped */
  kb__proc_abandon(p);    /* the task is gone: end the child and clean up */
}

/* kb.process.run{cmd = {...}, ...} -> {code, signal, stdout, stderr, time, pid} */
static int l_run(lua_State *L) {
  kb_task *t = kb_task_running(L);
  luaL_checktype(L, 1, LUA_TTABLE);
  kproc *p = kb__proc_start(L, MODE_RUN);
  p->task = t;
  return kb_task_await(L, t, run_cancel, p);
}

/* ---- kb.process.spawn ---------------------------------------------------- */

static kproc *check_proc(lua_State *L) {
  lproc *u = luaL_checkudata(L, 1, PROC_META);
  if (!u->p) luaL_error(L, "kb.process: the process object was already collected");
  return u->p;
}

/* kb.process.spawn{cmd = {...}, ...} -> process object */
static int l_spawn(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  lproc *u = lua_newuserdatauv(L, sizeof *u, 0); /* before the child exists */
  u->p = NULL;
  luaL_setmetatable(L, PROC_META);
  kproc *p = kb__proc_start(L, MODE_SPAWN);
  p->owned = 1;
  u->p = p;
  return 1;
}

void kb__proc_reader_cancel(void *op) {
  kproc *p = op;
  p->reader = NULL;
  p->reader_woken = 0; /* a line not delivered stays for the next read */
}

/* p:read_line() -> the next line of stdout without its newline, or nil at
 * end of file. Suspends while no full line is there. */
static int p_read_line(lua_State *L) {
  kproc *p = check_proc(L);
  if (!p->piped_out)
    return luaL_error(L, "kb.process: read_line needs stdout = \"pipe\"");
  /* Before taking a line: one may be there for a reader not resumed yet. */
  if (p->reader) return luaL_error(L, "kb.process: another task is already reading this process");
  int r = kb__proc_take_line(p, L);
  if (r > 0) {
    if (p->obuf.len - p->off < PAUSE_AT) kb__proc_resume_reading(p);
    return 1;
  }
  if (r < 0) return lua_error(L);
  kb_task *t = kb_task_running(L);
  p->reader = t;
  kb__proc_resume_reading(p);
  return kb_task_await(L, t, kb__proc_reader_cancel, p);
}

/* Owned by libuv until on_written, then by the writer's delivery (or its
 * cancel); freed by on_written itself when the writer was cancelled. */
typedef struct {
  uv_write_t req;
  kb_task *task; /* NULL once the writer was cancelled */
  kproc *p;
  int written;   /* on_written ran: status holds its outcome */
  int status;
  size_t len;
  char data[];
} write_op;

/* In the writer, once it resumes; its stack holds the process object. */
static int write_deliver(lua_State *L, void *op) {
  write_op *w = op;
  int status = w->status;
  const char *name = w->p->name;
  free(w);
  if (status == 0) return 0;
  kb_error_new(L, "io", "kb.process: cannot write to the stdin of '%s': %s (%s)", name,
               uv_strerror(status), uv_err_name(status));
  return lua_error(L);
}

static void on_written(uv_write_t *req, int status) {
  write_op *w = req->data;
  if (!w->task) {
    free(w);
    return;
  }
  w->written = 1;
  w->status = status;
  kb_task_deliver(w->task, write_deliver);
}

static void write_cancel(void *op) {
  write_op *w = op;
  if (w->written) free(w); /* written, not delivered: nobody else has it */
  else w->task = NULL;     /* libuv still owns the request until on_written */
}

/* p:write(s): suspends until s was handed to the child's stdin. */
static int p_write(lua_State *L) {
  kproc *p = check_proc(L);
  size_t len;
  const char *s = luaL_checklstring(L, 2, &len);
  if (!p->piped_in) return luaL_error(L, "kb.process: write needs stdin = \"pipe\"");
  if (p->in_closed) return luaL_error(L, "kb.process: write after close_stdin");
  if (!(p->open & H_IN))
    return kb_error_raise(L, "io", "kb.process: cannot write to the stdin of '%s': "
                          "the process has exited", p->name);
  kb_task *t = kb_task_running(L);
  if (len == 0) return 0;
  write_op *w = malloc(sizeof *w + len);
  if (!w) return luaL_error(L, "kb.process: out of memory");
  memcpy(w->data, s, len);
  w->len = len;
  w->written = 0;
  w->status = 0;
  w->task = t;
  w->p = p;
  w->req.data = w;
  uv_buf_t b = uv_buf_init(w->data, (unsigned)len);
  int r = uv_write(&w->req, (uv_stream_t *)&p->in, &b, 1, on_written);
  if (r != 0) {
    free(w);
    return kb_error_raise(L, "io", "kb.process: cannot write to the stdin of '%s': %s (%s)",
                          p->name, uv_strerror(r), uv_err_name(r));
  }
  return kb_task_await(L, t, write_cancel, w);
}

static void on_stdin_shut(uv_shutdown_t *req, int status) {
  (void)status;
  kb__proc_close_handles(req->data, H_IN);
}

/* p:close_stdin(): the child sees end of file once pending writes are done. */
static int p_close_stdin(lua_State *L) {
  kproc *p = check_proc(L);
  if (p->in_closed || !p->piped_in) return 0;
  p->in_closed = 1;
  if (!(p->open & H_IN)) return 0;
  p->shutdown.data = p;
  if (uv_shutdown(&p->shutdown, (uv_stream_t *)&p->in, on_stdin_shut) != 0)
    kb__proc_close_handles(p, H_IN);
  return 0;
}

/* p:kill([signal]) -> true, or false when the child had already exited.
 * The signal (default "SIGTERM") goes to the child's process group. */
static int p_kill(lua_State *L) {
  kproc *p = check_proc(L);
  int sig = SIGTERM;
  if (!lua_isnoneornil(L, 2)) {
    sig = kb__proc_signal_number(L, 2);
    if (sig <= 0) return luaL_argerror(L, 2, "unknown signal name");
  }
  lua_pushboolean(L, !p->exited && kb__proc_send_signal(p, sig) == 0);
  return 1;
}

void kb__proc_waiter_cancel(void *op) {
  waiter *w = op;
  for (waiter **pp = &w->p->waiters; *pp; pp = &(*pp)->next) {
    if (*pp == w) {
      *pp = w->next;
      break;
    }
  }
  free(w);
}

/* p:wait() -> {code =, signal =, pid =}: suspends until the child exits. */
static int p_wait(lua_State *L) {
  kproc *p = check_proc(L);
  if (p->exited) {
    kb__proc_push_exit_table(L, p);
    return 1;
  }
  kb_task *t = kb_task_running(L);
  waiter *w = malloc(sizeof *w);
  if (!w) return luaL_error(L, "kb.process: out of memory");
  w->task = t;
  w->p = p;
  w->next = p->waiters;
  p->waiters = w;
  return kb_task_await(L, t, kb__proc_waiter_cancel, w);
}

static int p_close(lua_State *L) {
  lproc *u = luaL_checkudata(L, 1, PROC_META);
  if (u->p) kb__proc_terminate(u->p);
  return 0;
}

static int p_gc(lua_State *L) {
  lproc *u = luaL_checkudata(L, 1, PROC_META);
  kproc *p = u->p;
  if (!p) return 0;
  u->p = NULL;
  p->owned = 0;
  while (p->waiters) { /* only at shutdown: their tasks are abandoned */
    waiter *w = p->waiters;
    p->waiters = w->next;
    free(w);
  }
  kb__proc_abandon(p);
  return 0;
}

static int p_tostring(lua_State *L) {
  lproc *u = luaL_checkudata(L, 1, PROC_META);
  kproc *p = u->p;
  if (!p) lua_pushliteral(L, "kb.process (collected)");
  else if (!p->exited) lua_pushfstring(L, "kb.process %d '%s' (running)", p->pid, p->name);
  else if (p->term_signal) {
    kb__proc_push_signal_name(L, p->term_signal);
    lua_pushfstring(L, "kb.process %d '%s' (killed by %s)", p->pid, p->name,
                    lua_tostring(L, -1));
  } else {
    lua_pushfstring(L, "kb.process %d '%s' (exited with code %d)", p->pid, p->name,
                    (int)p->exit_status);
  }
  return 1;
}

/* p.pid, then the methods (upvalue 1). */
static int p_index(lua_State *L) {
  lproc *u = luaL_checkudata(L, 1, PROC_META);
  const char *k = lua_tostring(L, 2);
  if (k && strcmp(k, "pid") == 0) {
    if (u->p) lua_pushinteger(L, u->p->pid);
    else lua_pushnil(L);
    return 1;
  }
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(1));
  return 1;
}

static const luaL_Reg proc_methods[] = {
  {"read_line", p_read_line},
  {"write", p_write},
  {"close_stdin", p_close_stdin},
  {"kill", p_kill},
  {"wait", p_wait},
  {NULL, NULL}
};

static const luaL_Reg proc_meta[] = {
  {"__gc", p_gc},
  {"__close", p_close},
  {"__tostring", p_tostring},
  {NULL, NULL}
};

static const luaL_Reg process_functions[] = {
  {"run", l_run},
  {"spawn", l_spawn},
  {NULL, NULL}
};

int luaopen_kb_process(lua_State *L) {
  if (luaL_newmetatable(L, PROC_META)) {
    luaL_setfuncs(L, proc_meta, 0);
    luaL_newlib(L, proc_methods);
    lua_pushcclosure(L, p_index, 1);
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  luaL_newlib(L, process_functions);
  return 1;
}
