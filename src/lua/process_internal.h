/* Shared by the files of kb.process: process.c (the Lua binding: run,
 * spawn, the process object and the module), process_spawn.c (starting a
 * child, signals, the kproc's lifetime) and process_io.c (the pipes: run's
 * output and outcome, spawn's lines, the exit). Not a public header. */
#ifndef KB_PROCESS_INTERNAL_H
#define KB_PROCESS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <lua.h>
#include <uv.h>

#include "kb/buf.h"
#include "kb/rt.h"

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

/* process_spawn.c: signals */
void kb__proc_push_signal_name(lua_State *L, int sig);
/* "TERM", "SIGTERM" or a number; 0 when unknown. */
int kb__proc_signal_number(lua_State *L, int idx);

/* process_spawn.c: lifetime */
/* Closes the handles in the mask that are still open. */
void kb__proc_close_handles(kproc *p, unsigned mask);
/* kill(2) of the child's process group; 0 or -1. */
int kb__proc_send_signal(kproc *p, int sig);
/* SIGTERM now, SIGKILL if it is still there after the grace period. */
void kb__proc_terminate(kproc *p);
/* Nobody needs the results any more: stop reading, end the child, and let
 * the kproc free itself. */
void kb__proc_abandon(kproc *p);
/* Parses the options at index 1, starts the child and returns it, or
 * raises. */
kproc *kb__proc_start(lua_State *L, int mode);

/* process_io.c: the libuv callbacks start installs */
void kb__proc_on_deadline(uv_timer_t *timer);
void kb__proc_run_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf);
void kb__proc_run_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);
void kb__proc_on_stdin_written(uv_write_t *req, int status);
void kb__proc_spawn_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf);
void kb__proc_spawn_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);
void kb__proc_on_child_exit(uv_process_t *h, int64_t status, int sig);
/* process_io.c: what the process object's methods take */
/* The next line of stdout on L: 1 (a line, or nil at the end), 0 (read
 * more first) or -1 (an error pushed). */
int kb__proc_take_line(kproc *p, lua_State *L);
void kb__proc_resume_reading(kproc *p);
void kb__proc_push_exit_table(lua_State *L, kproc *p);

/* process.c: the cancels of p:read_line() and p:wait() */
void kb__proc_reader_cancel(void *op);
void kb__proc_waiter_cancel(void *op);

#endif
