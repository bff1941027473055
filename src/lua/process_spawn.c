/* kb.process: starting a child (options, argv, environment, stdio, uv_spawn),
 * signals, and the kproc's lifetime: who owns it, how it ends, when it is
 * freed. */
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

extern char **environ;

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

void kb__proc_push_signal_name(lua_State *L, int sig) {
  for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
    if (signals[i].num == sig) {
      lua_pushstring(L, signals[i].name);
      return;
    }
  }
  lua_pushfstring(L, "SIG%d", sig);
}

/* "TERM", "SIGTERM" or a number; 0 when unknown. */
int kb__proc_signal_number(lua_State *L, int idx) {
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
void kb__proc_close_handles(kproc *p, unsigned mask) {
  for (unsigned h = H_PROC; h <= H_TIMER; h <<= 1) {
    if (!(mask & h & p->open)) continue;
    p->open &= ~h;
    uv_close(handle_of(p, h), on_closed);
  }
}

/* The child leads its own process group, so the signal reaches what it
 * started as well; the pid alone is the fallback when it left the group. */
int kb__proc_send_signal(kproc *p, int sig) {
  if (p->pid <= 0) return -1; /* kill(0) would hit kbrun's own group */
  if (kill(-p->pid, sig) == 0) return 0;
  return p->exited ? -1 : kill(p->pid, sig);
}

static void on_grace_over(uv_timer_t *timer) {
  kproc *p = timer->data;
  if (!p->exited) kb__proc_send_signal(p, SIGKILL);
}

/* SIGTERM now, SIGKILL if it is still there after the grace period. */
void kb__proc_terminate(kproc *p) {
  if (!p->started || p->exited || p->killing) return;
  p->killing = 1;
  kb__proc_send_signal(p, SIGTERM);
  uv_timer_stop(&p->timer);
  uv_timer_start(&p->timer, on_grace_over, KILL_GRACE_MS, 0);
}

/* Nobody needs the results any more: stop reading, end the child, and let
 * the struct go once the child is reaped and every handle is closed. */
void kb__proc_abandon(kproc *p) {
  if (p->abandoned) { /* twice: once settled, once delivered or cancelled */
    maybe_free(p);
    return;
  }
  p->abandoned = 1;
  p->task = NULL;
  p->reader = NULL;
  kb__proc_close_handles(p, H_IN | H_OUT | H_ERR);
  if (p->started && !p->exited) {
    kb__proc_terminate(p);
    return; /* kb__proc_on_child_exit closes the rest */
  }
  if (p->exited && p->mode == MODE_RUN && (!p->out_eof || !p->err_eof))
    kb__proc_send_signal(p, SIGKILL); /* what it left behind still holds the pipes */
  kb__proc_close_handles(p, H_PROC | H_TIMER);
  maybe_free(p);
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
kproc *kb__proc_start(lua_State *L, int mode) {
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
  o.exit_cb = kb__proc_on_child_exit;
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
    kb__proc_abandon(p);
    lua_error(L);
    return NULL; /* not reached */
  }
  p->started = 1;
  p->pid = p->proc.pid;
  lua_settop(L, top); /* argv and envp are not needed after the fork */

  if (mode == MODE_RUN) {
    uv_read_start((uv_stream_t *)&p->out, kb__proc_run_alloc, kb__proc_run_read);
    uv_read_start((uv_stream_t *)&p->err, kb__proc_run_alloc, kb__proc_run_read);
    if (stdin_len) {
      uv_buf_t b = uv_buf_init(p->stdin_data, (unsigned)stdin_len);
      p->stdin_req.data = p;
      if (uv_write(&p->stdin_req, (uv_stream_t *)&p->in, &b, 1, kb__proc_on_stdin_written) != 0)
        kb__proc_close_handles(p, H_IN);
    }
    /* Real seconds: a child runs outside the scenario clock, which the
     * simulator speeds up 600-fold (60 s would be 0.1 s of the child's). */
    if (timeout > 0) { /* from now, not from the loop's last wakeup */
      uv_update_time(p->timer.loop);
      uv_timer_start(&p->timer, kb__proc_on_deadline, (uint64_t)ceil(timeout * 1000.0), 0);
    }
  } else {
    p->out_eof = !p->piped_out;
    if (p->piped_out)
      uv_read_start((uv_stream_t *)&p->out, kb__proc_spawn_alloc, kb__proc_spawn_read);
  }
  return p;
}

