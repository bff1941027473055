/* kb.process: what comes back from a child through its pipes and its exit:
 * run's output, outcome and errors; spawn's lines and p:wait()'s exit. The
 * libuv callbacks here only record and wake (see process.c). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "kb/buf.h"
#include "kb/lua_util.h"
#include "kb/rt.h"
#include "process_internal.h"

/* ---- results ------------------------------------------------------------- */

static void set_exit_fields(lua_State *L, kproc *p, int idx) {
  idx = lua_absindex(L, idx);
  if (p->term_signal) {
    lua_pushinteger(L, 128 + p->term_signal);
    lua_setfield(L, idx, "code");
    kb__proc_push_signal_name(L, p->term_signal);
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
      kb__proc_push_signal_name(L, p->term_signal);
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
  kb__proc_abandon(p); /* already abandoned: frees it once its handles are closed */
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
  kb__proc_abandon(p); /* clears p->task: nothing reports twice */
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

void kb__proc_on_deadline(uv_timer_t *timer) { run_fail(timer->data, FAIL_TIMEOUT); }

void kb__proc_run_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
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

void kb__proc_run_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
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

void kb__proc_on_stdin_written(uv_write_t *req, int status) {
  (void)status; /* a child that exits without reading its input is its business */
  kproc *p = req->data;
  kb__proc_close_handles(p, H_IN); /* the child sees end of file */
}

/* ---- spawn: reading lines ------------------------------------------------ */

void kb__proc_spawn_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
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
int kb__proc_take_line(kproc *p, lua_State *L) {
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

void kb__proc_resume_reading(kproc *p) {
  if (!p->paused || p->out_eof || !(p->open & H_OUT)) return;
  p->paused = 0;
  uv_read_start((uv_stream_t *)&p->out, kb__proc_spawn_alloc, kb__proc_spawn_read);
}

/* Whether kb__proc_take_line has something to give (a line, the end, or
 * the error of a line too long), without taking it. */
static int line_ready(kproc *p) {
  if (p->obuf.len > p->scanned &&
      memchr(p->obuf.data + p->scanned, '\n', p->obuf.len - p->scanned))
    return 1;
  p->scanned = p->obuf.len;
  return p->out_eof || p->obuf.len - p->off >= p->max_output;
}

/* In the reader, once it resumes: its line (or nil, or the error). The
 * process object is on its stack, so p is alive. */
static int reader_deliver(lua_State *L, void *op) {
  kproc *p = op;
  p->reader = NULL;
  p->reader_woken = 0;
  luaL_checkstack(L, 4, "kb.process: reading a line");
  int r = kb__proc_take_line(p, L);
  if (r < 0) return lua_error(L);
  if (r == 0) { /* not expected (line_ready said there was one): wait on */
    p->reader = kb_task_running(L);
    return kb_task_await(L, p->reader, kb__proc_reader_cancel, p);
  }
  if (p->obuf.len - p->off < PAUSE_AT) kb__proc_resume_reading(p);
  return 1;
}

/* Wakes the reader when its line is there; it takes it itself. */
static void reader_try(kproc *p) {
  if (!p->reader || p->reader_woken || !line_ready(p)) return;
  p->reader_woken = 1;
  kb_task_deliver(p->reader, reader_deliver);
}

void kb__proc_spawn_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
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
    kb__proc_close_handles(p, H_OUT);
  }
  reader_try(p);
}

/* ---- spawn: exit --------------------------------------------------------- */

void kb__proc_push_exit_table(lua_State *L, kproc *p) {
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
  kb__proc_push_exit_table(L, p);
  return 1;
}

static void spawn_exited(kproc *p) {
  kb__proc_close_handles(p, H_IN);
  waiter *w = p->waiters;
  p->waiters = NULL;
  while (w) { /* a woken task may run at once: nothing of w is used after */
    waiter *next = w->next;
    w->next = NULL; /* off the list: kb__proc_waiter_cancel just frees it */
    kb_task_deliver(w->task, exit_deliver);
    w = next;
  }
}

void kb__proc_on_child_exit(uv_process_t *h, int64_t status, int sig) {
  kproc *p = h->data;
  kb_vclock_busy(p->clock, -1); /* real work over: the clock may skip again */
  p->clock = NULL;
  p->exited = 1;
  p->exit_status = status;
  p->term_signal = sig;
  if (p->killing) {
    uv_timer_stop(&p->timer);
    kb__proc_send_signal(p, SIGKILL); /* the rest of its group, if any ignored SIGTERM */
  }
  if (p->abandoned) {
    kb__proc_close_handles(p, H_PROC | H_TIMER);
    return;
  }
  if (p->mode == MODE_RUN) run_settle(p);
  else spawn_exited(p);
}

