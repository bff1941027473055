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
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "kb/buf.h"
#include "kb/lua_modules.h"
#include "kb/lua_util.h"
#include "kb/rt.h"

extern char **environ;

#define PROC_META "kb.process"
#define DEFAULT_MAX_OUTPUT ((lua_Integer)64 << 20)
#define KILL_GRACE_MS 2000          /* SIGTERM, then SIGKILL this much later */
#define READ_CHUNK ((size_t)65536)
#define PAUSE_AT ((size_t)1 << 20)  /* spawn: unread stdout bytes that stop reading */
#define CHECK_LINES 5               /* stderr lines quoted by check = true */
#define CHECK_BYTES 600

enum { H_PROC = 1, H_IN = 2, H_OUT = 4, H_ERR = 8, H_TIMER = 16 };
enum { MODE_RUN, MODE_SPAWN };
enum { FAIL_TIMEOUT = 1, FAIL_OUTPUT, FAIL_NOMEM };

typedef struct kproc kproc;

/* A task suspended in p:wait(). Freed by its delivery or its cancel. */
typedef struct waiter {
  kb_task *task;
  kproc *p;
  struct waiter *next;
} waiter;

/* One child. It is owned by whoever still needs it: the task awaiting run
 * (task), or the Lua object of spawn (owned). Once nobody does, it is
 * abandoned: a live child is terminated, and the struct frees itself when
 * the last of its handles has closed. It never touches Lua once abandoned,
 * so it can outlive the Lua state at shutdown. */
struct kproc {
  kb_rt *rt;
  kb_vclock *clock; /* counted busy on it while the child runs (kb/vclock.h) */
  int mode;
  uv_process_t proc;
  uv_pipe_t in, out, err;
  uv_timer_t timer;          /* run's deadline, then the SIGKILL grace */
  uv_write_t stdin_req;      /* run: the single write of opts.stdin */
  uv_shutdown_t shutdown;    /* spawn: close_stdin after pending writes */
  unsigned open;             /* H_* handles initialised and not closing */
  int live;                  /* handles whose close callback is pending */

  int pid;
  int started, exited, abandoned, killing;
  int64_t exit_status;
  int term_signal;
  int out_eof, err_eof;
  int piped_in, piped_out;   /* spawn: which of stdin/stdout are pipes */
  int in_closed;             /* spawn: close_stdin was called */
  size_t max_output;
  double t0, timeout;
  char *name;                /* argv[0], for messages (never args or env) */
  char *stdin_data;
  size_t stdin_len;
  kb_buf obuf, ebuf;

  kb_task *task;             /* run: the awaiting task */
  int check;
  int outcome;               /* run: 0 settled, else FAIL_*, once delivering */
  int pinned;                /* run: its outcome awaits delivery */

  int owned;                 /* spawn: the Lua object still exists */
  kb_task *reader;           /* spawn: the task in read_line */
  int reader_woken;          /* spawn: its line awaits delivery */
  waiter *waiters;
  size_t off, scanned;       /* spawn: obuf consumed / searched for '\n' */
  int paused;                /* spawn: reading stopped, too much unread */
};

typedef struct {
  kproc *p;
} lproc;

/* ---- signals ------------------------------------------------------------- */

static const struct {
  const char *name;
  int num;
} signals[] = {
  {"SIGHUP", SIGHUP},   {"SIGINT", SIGINT},   {"SIGQUIT", SIGQUIT},
  {"SIGILL", SIGILL},   {"SIGTRAP", SIGTRAP}, {"SIGABRT", SIGABRT},
  {"SIGBUS", SIGBUS},   {"SIGFPE", SIGFPE},   {"SIGKILL", SIGKILL},
  {"SIGUSR1", SIGUSR1}, {"SIGSEGV", SIGSEGV}, {"SIGUSR2", SIGUSR2},
  {"SIGPIPE", SIGPIPE}, {"SIGALRM", SIGALRM}, {"SIGTERM", SIGTERM},
  {"SIGCHLD", SIGCHLD}, {"SIGCONT", SIGCONT}, {"SIGSTOP", SIGSTOP},
  {"SIGTSTP", SIGTSTP}, {"SIGTTIN", SIGTTIN}, {"SIGTTOU", SIGTTOU},
  {"SIGURG", SIGURG},   {"SIGXCPU", SIGXCPU}, {"SIGXFSZ", SIGXFSZ},
  {"SIGVTALRM", SIGVTALRM}, {"SIGPROF", SIGPROF}, {"SIGWINCH", SIGWINCH},
  {"SIGIO", SIGIO},     {"SIGSYS", SIGSYS},
};

static void push_signal_name(lua_State *L, int sig) {
  for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
    if (signals[i].num == sig) {
      lua_pushstring(L, signals[i].name);
      return;
    }
  }
  lua_pushfstring(L, "SIG%d", sig);
}

/* "TERM", "SIGTERM" or a number; 0 when unknown. */
static int signal_number(lua_State *L, int idx) {
  if (lua_type(L, idx) == LUA_TNUMBER) return (int)luaL_checkinteger(L, idx);
  const char *s = luaL_checkstring(L, idx);
  for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
    const char *n = signals[i].name;
    if (strcmp(s, n) == 0 || strcmp(s, n + 3) == 0) return signals[i].num;
  }
  return 0;
}

/* ---- lifetime ------------------------------------------------------------ */

static void kproc_free(kproc *p) {
  kb_buf_free(&p->obuf);
  kb_buf_free(&p->ebuf);
  free(p->stdin_data);
  free(p->name);
  free(p);
}

static void maybe_free(kproc *p) {
  if (p->live == 0 && p->abandoned && !p->pinned) kproc_free(p);
}

static void on_closed(uv_handle_t *h) {
  kproc *p = h->data;
  p->live--;
  maybe_free(p);
}

static uv_handle_t *handle_of(kproc *p, unsigned which) {
  switch (which) {
  case H_PROC: return (uv_handle_t *)&p->proc;
  case H_IN: return (uv_handle_t *)&p->in;
  case H_OUT: return (uv_handle_t *)&p->out;
  case H_ERR: return (uv_handle_t *)&p->err;
  default: return (uv_handle_t *)&p->timer;
  }
}

/* Closes the handles in the mask that are still open. */
static void close_handles(kproc *p, unsigned mask) {
  for (unsigned h = H_PROC; h <= H_TIMER; h <<= 1) {
    if (!(mask & h & p->open)) continue;
    p->open &= ~h;
    uv_close(handle_of(p, h), on_closed);
  }
}

/* The child leads its own process group, so the signal reaches what it
 * started as well; the pid alone is the fallback when it left the group. */
static int send_signal(kproc *p, int sig) {
  if (p->pid <= 0) return -1; /* kill(0) would hit kbrun's own group */
  if (kill(-p->pid, sig) == 0) return 0;
  return p->exited ? -1 : kill(p->pid, sig);
}

static void on_grace_over(uv_timer_t *timer) {
  kproc *p = timer->data;
  if (!p->exited) send_signal(p, SIGKILL);
}

/* SIGTERM now, SIGKILL if it is still there after the grace period. */
static void terminate(kproc *p) {
  if (!p->started || p->exited || p->killing) return;
  p->killing = 1;
  send_signal(p, SIGTERM);
  uv_timer_stop(&p->timer);
  uv_timer_start(&p->timer, on_grace_over, KILL_GRACE_MS, 0);
}

/* Nobody needs the results any more: stop reading, end the child, and let
 * the struct go once the child is reaped and every handle is closed. */
static void abandon(kproc *p) {
  if (p->abandoned) { /* twice: once settled, once delivered or cancelled */
    maybe_free(p);
    return;
  }
  p->abandoned = 1;
  p->task = NULL;
  p->reader = NULL;
  close_handles(p, H_IN | H_OUT | H_ERR);
  if (p->started && !p->exited) {
    terminate(p);
    return; /* on_child_exit closes the rest */
  }
  if (p->exited && p->mode == MODE_RUN && (!p->out_eof || !p->err_eof))
    send_signal(p, SIGKILL); /* what it left behind still holds the pipes */
  close_handles(p, H_PROC | H_TIMER);
  maybe_free(p);
}

/* ---- results ------------------------------------------------------------- */

static void set_exit_fields(lua_State *L, kproc *p, int idx) {
  idx = lua_absindex(L, idx);
  if (p->term_signal) {
    lua_pushinteger(L, 128 + p->term_signal);
    lua_setfield(L, idx, "code");
    push_signal_name(L, p->term_signal);
    lua_setfield(L, idx, "signal");
  } else {
    lua_pushinteger(L, (lua_Integer)p->exit_status);
    lua_setfield(L, idx, "code");
  }
  lua_pushinteger(L, p->pid);
  lua_setfield(L, idx, "pid");
}

static void set_output_fields(lua_State *L, kproc *p, int idx) {
  idx = lua_absindex(L, idx);
  size_t on = p->obuf.len > p->max_output ? p->max_output : p->obuf.len;
  size_t en = p->ebuf.len > p->max_output ? p->max_output : p->ebuf.len;
  lua_pushlstring(L, on ? p->obuf.data : "", on);
  lua_setfield(L, idx, "stdout");
  lua_pushlstring(L, en ? p->ebuf.data : "", en);
  lua_setfield(L, idx, "stderr");
}

/* The first lines of stderr, trimmed, for the check = true message. */
static void push_stderr_head(lua_State *L, kproc *p) {
  const char *s = p->ebuf.len ? p->ebuf.data : "";
  size_t n = p->ebuf.len, end = 0;
  int lines = 0;
  while (end < n && end < CHECK_BYTES) {
    if (s[end++] == '\n' && ++lines == CHECK_LINES) break;
  }
  while (end > 0 && (s[end - 1] == '\n' || s[end - 1] == '\r' || s[end - 1] == ' '))
    end--;
  lua_pushlstring(L, s, end);
}

/* Pushes run's outcome on L: the result table (returns 0) or an error
 * (returns 1). */
static int push_run_outcome(lua_State *L, kproc *p) {
  lua_checkstack(L, 6);
  int failed = p->check && (p->term_signal || p->exit_status != 0);
  if (failed) {
    push_stderr_head(L, p);
    const char *head = lua_tostring(L, -1);
    if (p->term_signal) {
      push_signal_name(L, p->term_signal);
      kb_error_new(L, "exit", "kb.process.run: '%s' was killed by %s%s%s", p->name,
                   lua_tostring(L, -1), *head ? ": " : "", head);
      lua_remove(L, -2);
    } else {
      kb_error_new(L, "exit", "kb.process.run: '%s' exited with code %d%s%s", p->name,
                   (int)p->exit_status, *head ? ": " : "", head);
    }
    lua_remove(L, -2);
  } else {
    lua_createtable(L, 0, 6);
  }
  set_exit_fields(L, p, -1);
  set_output_fields(L, p, -1);
  lua_pushnumber(L, kb_rt_now(p->rt) - p->t0);
  lua_setfield(L, -2, "time");
  return failed;
}

/* run's error for a child given up (deadline, too much output), on L. */
static void push_run_failure(lua_State *L, kproc *p, int why) {
  lua_State *co = L;
  lua_checkstack(co, 6);
  if (why == FAIL_TIMEOUT) {
    char secs[32];
    snprintf(secs, sizeof secs, "%g", p->timeout);
    kb_error_new(co, "timeout", "kb.process.run: '%s' did not finish within %s s "
                 "and was terminated", p->name, secs);
  } else if (why == FAIL_OUTPUT) {
    kb_error_new(co, "output_limit", "kb.process.run: '%s' wrote more than %I bytes "
                 "to %s (max_output) and was terminated", p->name,
                 (lua_Integer)p->max_output, p->obuf.len > p->max_output ? "stdout" : "stderr");
  } else {
    kb_error_new(co, "output_limit", "kb.process.run: out of memory while reading "
                 "the output of '%s'; it was terminated", p->name);
  }
  set_output_fields(co, p, -1);
  lua_pushinteger(co, p->pid);
  lua_setfield(co, -2, "pid");
}

/* run_outcome(p) -> value, failed: under lua_pcall in run_deliver. */
static int run_outcome(lua_State *L) {
  kproc *p = lua_touserdata(L, 1);
  int failed = 1;
  if (p->outcome) push_run_failure(L, p, p->outcome);
  else failed = push_run_outcome(L, p);
  lua_pushboolean(L, failed);
  return 2;
}

static void run_unpin(kproc *p) {
  p->pinned = 0;
  abandon(p); /* already abandoned: frees it once its handles are closed */
}

/* In the task of run, once it resumes: the result table or the error,
 * built protected so the kproc is released whatever happens. */
static int run_deliver(lua_State *L, void *op) {
  kproc *p = op;
  if (!lua_checkstack(L, 4)) {
    run_unpin(p);
    return luaL_error(L, "kb.process.run: out of memory");
  }
  lua_pushcfunction(L, run_outcome);
  lua_pushlightuserdata(L, p);
  int status = lua_pcall(L, 1, 2, 0);
  run_unpin(p);
  if (status != LUA_OK) return lua_error(L);
  int failed = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return failed ? lua_error(L) : 1;
}

/* Hands run's outcome (0, or FAIL_*) to its task: the child is ended and
 * its handles closed now; the kproc stays, pinned, for the delivery. */
static void run_finish(kproc *p, int outcome) {
  kb_task *t = p->task;
  if (!t) return;
  p->outcome = outcome;
  p->pinned = 1;
  abandon(p); /* clears p->task: nothing reports twice */
  kb_task_deliver(t, run_deliver);
}

/* run: the child exited and both pipes reached end of file. */
static void run_settle(kproc *p) {
  if (!p->task || !p->exited || !p->out_eof || !p->err_eof) return;
  run_finish(p, 0);
}

/* run: gives up on the child (deadline, too much output) and raises. */
static void run_fail(kproc *p, int why) { run_finish(p, why); }

/* ---- run: I/O callbacks -------------------------------------------------- */

static void on_deadline(uv_timer_t *timer) { run_fail(timer->data, FAIL_TIMEOUT); }

static void run_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  (void)hint;
  kproc *p = h->data;
  kb_buf *b = h == (uv_handle_t *)&p->out ? &p->obuf : &p->ebuf;
  /* Room for one byte past the limit, which is how the excess shows. */
  size_t room = p->max_output - b->len + 1;
  if (room > READ_CHUNK) room = READ_CHUNK;
  if (kb_buf_reserve(b, room)) {
    *buf = uv_buf_init(NULL, 0); /* read_cb gets UV_ENOBUFS */
    return;
  }
  *buf = uv_buf_init(b->data + b->len, (unsigned)room);
}

static void run_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  (void)buf;
  kproc *p = s->data;
  int is_out = s == (uv_stream_t *)&p->out;
  kb_buf *b = is_out ? &p->obuf : &p->ebuf;
  if (n == 0) return;
  if (n > 0) {
    kb_buf_commit(b, (size_t)n);
    if (b->len > p->max_output) run_fail(p, FAIL_OUTPUT);
    return;
  }
  if (n == UV_ENOBUFS) {
    run_fail(p, FAIL_NOMEM);
    return;
  }
  /* End of file, or an error that ends the stream the same way (a reset
   * when the child exited with input unread). */
  uv_read_stop(s);
  if (is_out) p->out_eof = 1;
  else p->err_eof = 1;
  run_settle(p);
}

static void on_stdin_written(uv_write_t *req, int status) {
  (void)status; /* a child that exits without reading its input is its business */
  kproc *p = req->data;
  close_handles(p, H_IN); /* the child sees end of file */
}

/* ---- spawn: reading lines ------------------------------------------------ */

static void spawn_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  (void)hint;
  kproc *p = h->data;
  kb_buf *b = &p->obuf;
  if (p->off > 0 && p->off >= b->len / 2) { /* drop what was read */
    memmove(b->data, b->data + p->off, b->len - p->off);
    b->len -= p->off;
    b->data[b->len] = '\0';
    p->scanned -= p->off;
    p->off = 0;
  }
  if (kb_buf_reserve(b, READ_CHUNK)) {
    *buf = uv_buf_init(NULL, 0);
    return;
  }
  *buf = uv_buf_init(b->data + b->len, (unsigned)READ_CHUNK);
}

/* Pushes the next line of stdout on L (without "\n" or "\r\n"; at end of
 * file the unterminated rest, then nil) and returns 1; returns 0 when more
 * must be read first, -1 with an error pushed when a line is too long. */
static int take_line(kproc *p, lua_State *L) {
  size_t avail = p->obuf.len - p->off;
  char *start = p->obuf.data ? p->obuf.data + p->off : NULL;
  char *nl = NULL;
  if (p->obuf.len > p->scanned)
    nl = memchr(p->obuf.data + p->scanned, '\n', p->obuf.len - p->scanned);
  if (nl) {
    size_t n = (size_t)(nl - start), k = n;
    if (k > 0 && start[k - 1] == '\r') k--;
    lua_pushlstring(L, start, k);
    p->off += n + 1;
    p->scanned = p->off;
    return 1;
  }
  p->scanned = p->obuf.len;
  if (p->out_eof) {
    if (avail) lua_pushlstring(L, start, avail);
    else lua_pushnil(L);
    p->off = p->scanned = p->obuf.len;
    return 1;
  }
  if (avail >= p->max_output) {
    kb_error_new(L, "output_limit", "kb.process: a line from '%s' is longer than %I "
                 "bytes (max_output)", p->name, (lua_Integer)p->max_output);
    return -1;
  }
  return 0;
}

static void spawn_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

static void resume_reading(kproc *p) {
  if (!p->paused || p->out_eof || !(p->open & H_OUT)) return;
  p->paused = 0;
  uv_read_start((uv_stream_t *)&p->out, spawn_alloc, spawn_read);
}

/* Whether take_line has something to give (a line, the end, or the error
 * of a line too long), without taking it. */
static int line_ready(kproc *p) {
  if (p->obuf.len > p->scanned &&
      memchr(p->obuf.data + p->scanned, '\n', p->obuf.len - p->scanned))
    return 1;
  p->scanned = p->obuf.len;
  return p->out_eof || p->obuf.len - p->off >= p->max_output;
}

static void reader_cancel(void *op);

/* In the reader, once it resumes: its line (or nil, or the error). The
 * process object is on its stack, so p is alive. */
static int reader_deliver(lua_State *L, void *op) {
  kproc *p = op;
  p->reader = NULL;
  p->reader_woken = 0;
  luaL_checkstack(L, 4, "kb.process: reading a line");
  int r = take_line(p, L);
  if (r < 0) return lua_error(L);
  if (r == 0) { /* not expected (line_ready said there was one): wait on */
    p->reader = kb_task_running(L);
    return kb_task_await(L, p->reader, reader_cancel, p);
  }
  if (p->obuf.len - p->off < PAUSE_AT) resume_reading(p);
  return 1;
}

/* Wakes the reader when its line is there; it takes it itself. */
static void reader_try(kproc *p) {
  if (!p->reader || p->reader_woken || !line_ready(p)) return;
  p->reader_woken = 1;
  kb_task_deliver(p->reader, reader_deliver);
}

static void spawn_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  (void)buf;
  kproc *p = s->data;
  if (n == 0) return;
  if (n > 0) {
    kb_buf_commit(&p->obuf, (size_t)n);
    /* Backpressure: nobody reads, so let the child block on its pipe. */
    if (!p->reader && p->obuf.len - p->off >= PAUSE_AT) {
      uv_read_stop(s);
      p->paused = 1;
    }
  } else { /* end of file, or an error that ends it (ENOBUFS included) */
    p->out_eof = 1;
    close_handles(p, H_OUT);
  }
  reader_try(p);
}

/* ---- spawn: exit --------------------------------------------------------- */

static void push_exit_table(lua_State *L, kproc *p) {
  lua_checkstack(L, 4);
  lua_createtable(L, 0, 3);
  set_exit_fields(L, p, -1);
}

/* In a task of p:wait(), once it resumes. Its stack holds the process
 * object, so w->p is alive. */
static int exit_deliver(lua_State *L, void *op) {
  waiter *w = op;
  kproc *p = w->p;
  free(w);
  push_exit_table(L, p);
  return 1;
}

static void spawn_exited(kproc *p) {
  close_handles(p, H_IN);
  waiter *w = p->waiters;
  p->waiters = NULL;
  while (w) { /* a woken task may run at once: nothing of w is used after */
    waiter *next = w->next;
    w->next = NULL; /* off the list: waiter_cancel just frees it */
    kb_task_deliver(w->task, exit_deliver);
    w = next;
  }
}

static void on_child_exit(uv_process_t *h, int64_t status, int sig) {
  kproc *p = h->data;
  kb_vclock_busy(p->clock, -1); /* real work over: the clock may skip again */
  p->clock = NULL;
  p->exited = 1;
  p->exit_status = status;
  p->term_signal = sig;
  if (p->killing) {
    uv_timer_stop(&p->timer);
    send_signal(p, SIGKILL); /* the rest of its group, if any ignored SIGTERM */
  }
  if (p->abandoned) {
    close_handles(p, H_PROC | H_TIMER);
    return;
  }
  if (p->mode == MODE_RUN) run_settle(p);
  else spawn_exited(p);
}

/* ---- starting a child ---------------------------------------------------- */

typedef struct {
  const char *fn;   /* "kb.process.run", for messages */
  const char **argv;
  char **envp;      /* NULL: inherit the environment unchanged */
  const char *cwd;
} start_args;

/* A string or number at the top of the stack as a C string kept alive by
 * the table at `keep` (numbers are converted). Pops it. */
static const char *keep_string(lua_State *L, int keep) {
  const char *s = lua_tostring(L, -1);
  lua_rawseti(L, keep, (lua_Integer)lua_rawlen(L, keep) + 1);
  return s;
}

/* The argument vector from opts.cmd, or from opts[1..n] when cmd is nil. */
static void collect_cmd(lua_State *L, int opts, int keep, start_args *a) {
  if (lua_getfield(L, opts, "cmd") == LUA_TNIL) {
    lua_pop(L, 1);
    lua_pushvalue(L, opts);
  }
  int list = lua_gettop(L);
  lua_Integer n = lua_istable(L, list) ? (lua_Integer)lua_rawlen(L, list) : 0;
  if (n < 1)
    luaL_error(L, "%s: option 'cmd' must be a non-empty list of strings "
               "(the program, then its arguments)", a->fn);
  a->argv = lua_newuserdatauv(L, (size_t)(n + 1) * sizeof(char *), 0);
  lua_rawseti(L, keep, (lua_Integer)lua_rawlen(L, keep) + 1);
  for (lua_Integer i = 1; i <= n; i++) {
    int t = lua_rawgeti(L, list, i);
    if (t != LUA_TSTRING && t != LUA_TNUMBER)
      luaL_error(L, "%s: cmd[%I] must be a string, got %s", a->fn, i, luaL_typename(L, -1));
    a->argv[i - 1] = keep_string(L, keep);
  }
  a->argv[n] = NULL;
  lua_pop(L, 1);
}

/* The child's environment: ours (unless clear_env) with opts.env over it;
 * a value of false removes a variable. */
static void collect_env(lua_State *L, int opts, int keep, start_args *a) {
  int clear = kb_opt_boolean(L, opts, "clear_env", 0);
  int t = lua_getfield(L, opts, "env");
  if (t != LUA_TNIL && t != LUA_TTABLE)
    luaL_error(L, "%s: option 'env' must be a table {NAME = value}, got %s", a->fn,
               luaL_typename(L, -1));
  if (t == LUA_TNIL && !clear) {
    lua_pop(L, 1);
    a->envp = NULL;
    return;
  }
  int env = lua_gettop(L);
  size_t n = 0, cap = 1;
  for (char **e = environ; !clear && *e; e++) cap++;
  if (t == LUA_TTABLE) {
    for (lua_pushnil(L); lua_next(L, env); lua_pop(L, 1)) cap++;
  }
  a->envp = lua_newuserdatauv(L, cap * sizeof(char *), 0);
  lua_rawseti(L, keep, (lua_Integer)lua_rawlen(L, keep) + 1);
  for (char **e = environ; !clear && *e; e++) {
    const char *eq = strchr(*e, '=');
    if (!eq) continue;
    if (t == LUA_TTABLE) {
      lua_pushlstring(L, *e, (size_t)(eq - *e));
      int overridden = lua_rawget(L, env) != LUA_TNIL;
      lua_pop(L, 1);
      if (overridden) continue;
    }
    a->envp[n++] = *e;
  }
  if (t == LUA_TTABLE) {
    for (lua_pushnil(L); lua_next(L, env); lua_pop(L, 1)) {
      if (lua_type(L, -2) != LUA_TSTRING)
        luaL_error(L, "%s: env names must be strings", a->fn);
      const char *k = lua_tostring(L, -2);
      if (!*k || strchr(k, '='))
        luaL_error(L, "%s: env name '%s' is empty or contains '='", a->fn, k);
      int vt = lua_type(L, -1);
      if (vt == LUA_TBOOLEAN && !lua_toboolean(L, -1)) continue;
      if (vt != LUA_TSTRING && vt != LUA_TNUMBER) /* the value is never shown */
        luaL_error(L, "%s: env value of '%s' must be a string, a number or false, got %s",
                   a->fn, k, luaL_typename(L, -1));
      lua_pushfstring(L, "%s=%s", k, lua_tostring(L, -1));
      a->envp[n++] = (char *)keep_string(L, keep);
    }
  }
  a->envp[n] = NULL;
  lua_pop(L, 1);
}

/* stdin/stdout/stderr of spawn: "pipe", "inherit" or "null". */
static int stdio_mode(lua_State *L, int opts, const char *key, const char *def,
                      const char *fn) {
  const char *m = kb_opt_string(L, opts, key, def);
  if (strcmp(m, "pipe") == 0) return 0;
  if (strcmp(m, "inherit") == 0) return 1;
  if (strcmp(m, "null") == 0) return 2;
  return luaL_error(L, "%s: option '%s' must be \"pipe\", \"inherit\" or \"null\", got '%s'",
                    fn, key, m);
}

static void set_stdio(uv_stdio_container_t *c, int mode, int fd, uv_pipe_t *pipe,
                      int child_reads) {
  if (mode == 0) {
    c->flags = UV_CREATE_PIPE | (child_reads ? UV_READABLE_PIPE : UV_WRITABLE_PIPE);
    c->data.stream = (uv_stream_t *)pipe;
  } else if (mode == 1) {
    c->flags = UV_INHERIT_FD;
    c->data.fd = fd;
  } else {
    c->flags = UV_IGNORE; /* libuv gives the child /dev/null */
  }
}

static kproc *kproc_alloc(kb_rt *rt, int mode) {
  kproc *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->rt = rt;
  p->mode = mode;
  kb_buf_init(&p->obuf);
  kb_buf_init(&p->ebuf);
  return p;
}

static void init_pipe(kproc *p, uv_pipe_t *pipe, unsigned which) {
  uv_pipe_init(kb_rt_loop(p->rt), pipe, 0);
  pipe->data = p;
  p->open |= which;
  p->live++;
}

/* Parses the options at index 1, starts the child and returns it, or
 * raises (class "spawn" when the child cannot be started). Leaves the
 * stack as it found it. */
static kproc *start(lua_State *L, int mode) {
  start_args a = {mode == MODE_RUN ? "kb.process.run" : "kb.process.spawn", NULL, NULL, NULL};
  int top = lua_gettop(L);
  lua_newtable(L); /* keeps the strings argv and envp point to */
  int keep = lua_gettop(L);
  collect_cmd(L, 1, keep, &a);
  collect_env(L, 1, keep, &a);
  a.cwd = kb_opt_string(L, 1, "cwd", NULL);
  lua_Integer max_output = kb_opt_integer(L, 1, "max_output", DEFAULT_MAX_OUTPUT);
  if (max_output < 1) luaL_error(L, "%s: option 'max_output' must be positive", a.fn);
  double timeout = 0;
  size_t stdin_len = 0;
  const char *stdin_text = NULL;
  int check = 0, io[3] = {0, 0, 0};
  if (mode == MODE_RUN) {
    int has_timeout = lua_getfield(L, 1, "timeout") != LUA_TNIL;
    lua_pop(L, 1);
    timeout = kb_opt_number(L, 1, "timeout", 0);
    if (has_timeout && !(timeout > 0))
      luaL_error(L, "%s: option 'timeout' must be a positive number of seconds", a.fn);
    int t = lua_getfield(L, 1, "stdin"); /* anchored by the options table */
    if (t == LUA_TSTRING) stdin_text = lua_tolstring(L, -1, &stdin_len);
    else if (t != LUA_TNIL)
      luaL_error(L, "%s: option 'stdin' must be a string (the child's input), got %s", a.fn,
                 luaL_typename(L, -1));
    lua_pop(L, 1);
    check = kb_opt_boolean(L, 1, "check", 0);
    io[0] = stdin_len ? 0 : 2;
  } else {
    io[0] = stdio_mode(L, 1, "stdin", "pipe", a.fn);
    io[1] = stdio_mode(L, 1, "stdout", "pipe", a.fn);
    io[2] = stdio_mode(L, 1, "stderr", "inherit", a.fn);
    if (io[2] == 0) /* nothing would read it: the child would block on a full pipe */
      luaL_error(L, "%s: option 'stderr' must be \"inherit\" or \"null\", got 'pipe'", a.fn);
  }

  /* Nothing below raises before the child is started or given up. */
  kb_rt *rt = kb_rt_from_lua(L);
  kproc *p = kproc_alloc(rt, mode);
  if (p) p->name = strdup(a.argv[0]);
  if (p && stdin_len) p->stdin_data = malloc(stdin_len);
  if (!p || !p->name || (stdin_len && !p->stdin_data)) {
    if (p) kproc_free(p);
    luaL_error(L, "%s: out of memory", a.fn);
    return NULL; /* not reached */
  }
  if (stdin_len) memcpy(p->stdin_data, stdin_text, stdin_len);
  p->stdin_len = stdin_len;
  p->max_output = (size_t)max_output;
  p->timeout = timeout;
  p->check = check;

  uv_stdio_container_t stdio[3];
  if (io[0] == 0) init_pipe(p, &p->in, H_IN);
  if (io[1] == 0) init_pipe(p, &p->out, H_OUT);
  if (mode == MODE_RUN) init_pipe(p, &p->err, H_ERR);
  set_stdio(&stdio[0], io[0], 0, &p->in, 1);
  set_stdio(&stdio[1], io[1], 1, &p->out, 0);
  set_stdio(&stdio[2], io[2], 2, &p->err, 0);
  p->piped_in = io[0] == 0;
  p->piped_out = io[1] == 0;
  uv_timer_init(kb_rt_loop(rt), &p->timer);
  p->timer.data = p;
  p->open |= H_TIMER;
  p->live++;

  uv_process_options_t o;
  memset(&o, 0, sizeof o);
  o.exit_cb = on_child_exit;
  o.file = a.argv[0];
  o.args = (char **)a.argv;
  o.env = a.envp;
  o.cwd = a.cwd;
  o.flags = UV_PROCESS_DETACHED;
  o.stdio_count = 3;
  o.stdio = stdio;
  p->t0 = kb_rt_now(rt);
  /* a child's time is real: no skipping over it, from before the fork (the
   * child may be running its program before uv_spawn returns) */
  p->clock = kb_rt_clock(rt);
  kb_vclock_busy(p->clock, +1);
  int r = uv_spawn(kb_rt_loop(rt), &p->proc, &o);
  p->proc.data = p;
  p->open |= H_PROC; /* closed even when the spawn failed */
  p->live++;
  if (r != 0) {
    kb_vclock_busy(p->clock, -1);
    p->clock = NULL;
    if (a.cwd)
      kb_error_new(L, "spawn", "%s: cannot start '%s' in '%s': %s (%s)", a.fn, a.argv[0],
                   a.cwd, uv_strerror(r), uv_err_name(r));
    else
      kb_error_new(L, "spawn", "%s: cannot start '%s': %s (%s)", a.fn, a.argv[0],
                   uv_strerror(r), uv_err_name(r));
    abandon(p);
    lua_error(L);
    return NULL; /* not reached */
  }
  p->started = 1;
  p->pid = p->proc.pid;
  lua_settop(L, top); /* argv and envp are not needed after the fork */

  if (mode == MODE_RUN) {
    uv_read_start((uv_stream_t *)&p->out, run_alloc, run_read);
    uv_read_start((uv_stream_t *)&p->err, run_alloc, run_read);
    if (stdin_len) {
      uv_buf_t b = uv_buf_init(p->stdin_data, (unsigned)stdin_len);
      p->stdin_req.data = p;
      if (uv_write(&p->stdin_req, (uv_stream_t *)&p->in, &b, 1, on_stdin_written) != 0)
        close_handles(p, H_IN);
    }
    /* Real seconds: a child runs outside the scenario clock, which the
     * simulator speeds up 600-fold (60 s would be 0.1 s of the child's). */
    if (timeout > 0) uv_timer_start(&p->timer, on_deadline, (uint64_t)ceil(timeout * 1000.0), 0);
  } else {
    p->out_eof = !p->piped_out;
    if (p->piped_out) uv_read_start((uv_stream_t *)&p->out, spawn_alloc, spawn_read);
  }
  return p;
}

/* ---- kb.process.run ------------------------------------------------------ */

static void run_cancel(void *op) {
  kproc *p = op;
  p->pinned = 0; /* an outcome not delivered is dropped */
  abandon(p);    /* the task is gone: end the child and clean up */
}

/* kb.process.run{cmd = {...}, ...} -> {code, signal, stdout, stderr, time, pid} */
static int l_run(lua_State *L) {
  kb_task *t = kb_task_running(L);
  luaL_checktype(L, 1, LUA_TTABLE);
  kproc *p = start(L, MODE_RUN);
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
  kproc *p = start(L, MODE_SPAWN);
  p->owned = 1;
  u->p = p;
  return 1;
}

static void reader_cancel(void *op) {
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
  int r = take_line(p, L);
  if (r > 0) {
    if (p->obuf.len - p->off < PAUSE_AT) resume_reading(p);
    return 1;
  }
  if (r < 0) return lua_error(L);
  kb_task *t = kb_task_running(L);
  p->reader = t;
  resume_reading(p);
  return kb_task_await(L, t, reader_cancel, p);
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
  close_handles(req->data, H_IN);
}

/* p:close_stdin(): the child sees end of file once pending writes are done. */
static int p_close_stdin(lua_State *L) {
  kproc *p = check_proc(L);
  if (p->in_closed || !p->piped_in) return 0;
  p->in_closed = 1;
  if (!(p->open & H_IN)) return 0;
  p->shutdown.data = p;
  if (uv_shutdown(&p->shutdown, (uv_stream_t *)&p->in, on_stdin_shut) != 0)
    close_handles(p, H_IN);
  return 0;
}

/* p:kill([signal]) -> true, or false when the child had already exited.
 * The signal (default "SIGTERM") goes to the child's process group. */
static int p_kill(lua_State *L) {
  kproc *p = check_proc(L);
  int sig = SIGTERM;
  if (!lua_isnoneornil(L, 2)) {
    sig = signal_number(L, 2);
    if (sig <= 0) return luaL_argerror(L, 2, "unknown signal name");
  }
  lua_pushboolean(L, !p->exited && send_signal(p, sig) == 0);
  return 1;
}

static void waiter_cancel(void *op) {
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
    push_exit_table(L, p);
    return 1;
  }
  kb_task *t = kb_task_running(L);
  waiter *w = malloc(sizeof *w);
  if (!w) return luaL_error(L, "kb.process: out of memory");
  w->task = t;
  w->p = p;
  w->next = p->waiters;
  p->waiters = w;
  return kb_task_await(L, t, waiter_cancel, w);
}

static int p_close(lua_State *L) {
  lproc *u = luaL_checkudata(L, 1, PROC_META);
  if (u->p) terminate(u->p);
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
  abandon(p);
  return 0;
}

static int p_tostring(lua_State *L) {
  lproc *u = luaL_checkudata(L, 1, PROC_META);
  kproc *p = u->p;
  if (!p) lua_pushliteral(L, "kb.process (collected)");
  else if (!p->exited) lua_pushfstring(L, "kb.process %d '%s' (running)", p->pid, p->name);
  else if (p->term_signal) {
    push_signal_name(L, p->term_signal);
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
