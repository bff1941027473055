/* kb.http streams: response bodies delivered to Lua as they arrive.
 *
 * kb.http.stream(opts) takes kb.http.request's options (src/lua/http.c),
 * suspends until the head of the final response has arrived (or raises
 * as kb.http.request does) and returns
 * a userdata: s.status, s.headers, s.version, s.redirects, s.url, s.state
 * ("open", "ended", "failed", "closed"), s.time (as a response's, with
 * total only once the body ended; the body's duration counts as scenario
 * time, being paced by the server's clock), s:read() (the bytes received
 * since the last read, suspending until some arrive; nil at the end; the
 * transfer's error once the bytes before it were read), s:lines() (lines
 * without "\n", the last unterminated one too), s:close() (aborts;
 * idempotent; also __close and __gc). Up to STREAM_BUFFER_MAX bytes wait
 * unread, then the transfer pauses until a read. A task cancelled in
 * stream() aborts the request; one cancelled in read()/lines() only stops
 * waiting (kb.timeout around read() polls). The callbacks of the C stream
 * run from loop callbacks and may resume the reading task at once, which
 * may close or drop the stream: they touch nothing after waking it.
 *
 * Nothing is pushed from those callbacks (a suspended coroutine has no
 * error handler): they buffer what arrived, keep the head's fields in C,
 * and wake the reader with kb_task_deliver; stream_deliver, running in the
 * reader's continuation, builds the values. Until it has run the reader
 * stays the stream's (st->waiter, with st->pending set), so no other task
 * reads in between and nothing is handed out twice. */
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "kb/buf.h"
#include "kb/http_client.h"
#include "kb/lua_util.h"
#include "kb/rt.h"
#include "lhttp_internal.h"

#define STREAM_META "kb.http.stream"
/* Body bytes buffered for read()/lines() before the transfer pauses: the
 * server then waits on TCP flow control instead of our memory growing. */
#define STREAM_BUFFER_MAX (1024 * 1024)

enum { WAIT_NONE, WAIT_HEAD, WAIT_CHUNK, WAIT_LINE };
enum { ST_OPENING, ST_OPEN, ST_ENDED, ST_FAILED, ST_CLOSED };

/* A full userdata; user value 1 is the table of the head's fields
 * (headers, url, redirects), 2 the client's userdata, so the client
 * outlives a stream that uses it. */
typedef struct lstream {
  kb_http_request *r; /* while the transfer runs */
  kb_rt *rt;
  kb_task *waiter;    /* suspended in stream(), read() or lines() */
  int wait;           /* WAIT_* of the waiter */
  int state;          /* ST_* */
  int held;           /* the transfer is paused for our buffer */
  kb_buf buf;         /* received, not read yet: buf.data[off..buf.len) */
  size_t off;
  long status;
  int version;
  kb__lhttp_sim_timing sim; /* the simulator's modelled hold, or not the simulator */
  kb_http_timings head_time;
  double total_clock;        /* on a fast-forwarding clock, else -1 */
  double total;       /* real seconds of the whole transfer, once ended */
  kb_http_error error; /* of a failed transfer, raised by read() */
  kb_lhttp_err_text err;       /* its texts, in err_buf; err_buf NULL: out of memory */
  char *err_buf;
  int pending;        /* the waiter was woken and has not taken its values */
  int open_failed;    /* failed before the head: stream() raises err */
  char *head_buf;     /* the head's header block, then its URL (until delivered) */
  size_t head_len;    /* of the header block */
  long redirects;
} lstream;

static size_t buffered(const lstream *st) { return st->buf.len - st->off; }

/* Appends to the unread bytes, first moving them to the front when the
 * buffer would have to grow otherwise. */
static int buf_append(lstream *st, const char *p, size_t n) {
  kb_buf *b = &st->buf;
  if (st->off > 0 && b->len + n >= b->cap) {
    memmove(b->data, b->data + st->off, b->len - st->off);
    b->len -= st->off;
    st->off = 0;
  }
  return kb_buf_append(b, p, n);
}

static void buf_consume(lstream *st, size_t n) {
  st->off += n;
  if (st->off < st->buf.len) return;
  st->off = 0;
  kb_buf_reset(&st->buf, 2 * STREAM_BUFFER_MAX); /* freed after an unusually long line */
}

/* Pushes everything buffered as one string. */
static void push_all(lua_State *L, lstream *st) {
  lua_pushlstring(L, st->buf.data + st->off, buffered(st));
  buf_consume(st, buffered(st));
}

/* Pushes the next complete line (without its "\n") if there is one; the
 * search starts at `from` (bytes before it hold no "\n"). */
static int push_line(lua_State *L, lstream *st, size_t from) {
  const char *nl = from < st->buf.len ? memchr(st->buf.data + from, '\n', st->buf.len - from) : NULL;
  if (!nl) return 0;
  size_t n = (size_t)(nl - (st->buf.data + st->off));
  lua_pushlstring(L, st->buf.data + st->off, n);
  buf_consume(st, n + 1);
  return 1;
}

/* Reading made room: let the transfer go on. */
static void maybe_resume(lstream *st) {
  if (st->held && st->r && buffered(st) < STREAM_BUFFER_MAX) {
    st->held = 0;
    kb_http_request_resume(st->r);
  }
}

/* Keeps a failed transfer's error for read(); without memory for its
 * texts, read() raises an out-of-memory error instead. */
static void err_save(lstream *st, kb_http_error error, const kb_lhttp_err_text *e) {
  const char *parts[5] = {e->message, e->url, e->detail, e->hint, e->method};
  size_t len[5], total = 0;
  for (int i = 0; i < 5; i++) total += (len[i] = strlen(parts[i])) + 1;
  st->error = error;
  st->err.curl_code = e->curl_code;
  if (!(st->err_buf = malloc(total))) return;
  const char **out[5] = {&st->err.message, &st->err.url, &st->err.detail, &st->err.hint,
                         &st->err.method};
  char *w = st->err_buf;
  for (int i = 0; i < 5; i++) {
    memcpy(w, parts[i], len[i] + 1);
    *out[i] = w;
    w += len[i] + 1;
  }
}

static void push_saved_error(lua_State *L, const lstream *st) {
  if (st->err_buf) kb__lhttp_push_error_text(L, kb_http_error_name(st->error), &st->err);
  else kb_error_new(L, "resource", "kb.http: out of memory in a streamed response");
}

/* In the reader, once it resumes: what it waited for, taken from the
 * stream's state now (more may have arrived since the wake). */
static int stream_deliver(lua_State *L, void *op) {
  lstream *st = op;
  int mode = st->wait;
  st->waiter = NULL;
  st->wait = WAIT_NONE;
  st->pending = 0;
  luaL_checkstack(L, 8, "kb.http: delivering a stream");
  if (mode == WAIT_HEAD) {
    if (st->open_failed) {
      push_saved_error(L, st);
      return lua_error(L);
    }
    /* stream() pushed the userdata last before it suspended: it is the
     * top of the stack, and becomes stream()'s result. */
    kb_http_response head = {0};
    head.headers = st->head_buf ? st->head_buf : "";
    head.headers_len = st->head_buf ? st->head_len : 0;
    lua_createtable(L, 0, 3);
    kb__lhttp_push_headers(L, &head);
    lua_setfield(L, -2, "headers");
    if (st->redirects > 0) {
      lua_pushinteger(L, st->redirects);
      lua_setfield(L, -2, "redirects");
      lua_pushstring(L, st->head_buf ? st->head_buf + st->head_len + 1 : "");
      lua_setfield(L, -2, "url");
    }
    lua_setiuservalue(L, -2, 1);
    free(st->head_buf);
    st->head_buf = NULL;
    lua_pushvalue(L, -1);
    return 1;
  }
  if (mode == WAIT_LINE && push_line(L, st, st->off)) {
    maybe_resume(st);
    return 1;
  }
  if (mode == WAIT_CHUNK && buffered(st) > 0) {
    push_all(L, st);
    maybe_resume(st);
    return 1;
  }
  if (st->state == ST_FAILED) {
    push_saved_error(L, st);
    return lua_error(L);
  }
  /* The end: the last unterminated line, then nil. */
  if (buffered(st) > 0) push_all(L, st);
  else lua_pushnil(L);
  return 1;
}

/* Wakes the waiter; stream_deliver gives it its values. The task may run
 * at once, inside this call, and close or drop the stream: callers touch
 * nothing of st afterwards. */
static void stream_wake(lstream *st) {
  if (!st->waiter || st->pending) return;
  st->pending = 1;
  kb_task_deliver(st->waiter, stream_deliver);
}

static void on_stream_head(kb_http_request *r, const kb_http_response *head, void *ud) {
  lstream *st = ud;
  st->state = ST_OPEN;
  st->status = head->status;
  st->version = head->http_version;
  st->head_time = head->time;
  st->sim = kb__lhttp_sim_timing_of(head);
  st->redirects = head->redirects;
  /* The head is valid during this call only: its header block and URL are
   * kept for stream_deliver. Without memory for them the stream still
   * opens, with no headers, and fails on read. */
  size_t ulen = head->url ? strlen(head->url) : 0;
  st->head_buf = malloc(head->headers_len + ulen + 2);
  if (st->head_buf) {
    memcpy(st->head_buf, head->headers, head->headers_len);
    st->head_buf[head->headers_len] = '\0';
    memcpy(st->head_buf + head->headers_len + 1, head->url ? head->url : "", ulen + 1);
    st->head_len = head->headers_len;
  } else {
    kb_http_request_cancel(r); /* allowed from inside on_head */
    st->r = NULL;
    st->state = ST_FAILED;
    st->error = KB_HTTP_ERR_RESOURCE;
  }
  stream_wake(st);
}

/* The transfer's memory error: it stops, read() raises. */
static void stream_oom(lstream *st) {
  kb_http_request_cancel(st->r); /* allowed from inside on_data */
  st->r = NULL;
  st->state = ST_FAILED;
  st->error = KB_HTTP_ERR_RESOURCE;
  stream_wake(st);
}

static int on_stream_data(kb_http_request *r, const char *data, size_t len, void *ud) {
  lstream *st = ud;
  if (buf_append(st, data, len) != 0) {
    stream_oom(st);
    return 0;
  }
  /* A line waiter found no complete line before: only the new bytes (the
   * last len of the buffer) can end one. */
  if (st->waiter && !st->pending &&
      (st->wait == WAIT_CHUNK ||
       (st->wait == WAIT_LINE && memchr(st->buf.data + st->buf.len - len, '\n', len)))) {
    stream_wake(st);
    return 0;
  }
  /* A waiter for a line keeps reading however long the line gets; one
   * whose values are being delivered reads soon. */
  if ((!st->waiter || st->pending) && buffered(st) >= STREAM_BUFFER_MAX) {
    st->held = 1;
    return KB_HTTP_STREAM_PAUSE;
  }
  return 0;
}

static void on_stream_done(kb_http_request *r, const kb_http_response *resp, void *ud) {
  lstream *st = ud;
  if (st->state == ST_OPENING) { /* failed before the head: stream() raises */
    kb_lhttp_err_text e = {resp->message, resp->safe_url, resp->detail, resp->hint, resp->method,
                  resp->curl_code};
    err_save(st, resp->error, &e);
    kb_http_request_free(r);
    st->r = NULL;
    st->state = ST_CLOSED;
    st->open_failed = 1;
    stream_wake(st);
    return;
  }
  st->total = resp->time.total;
  st->total_clock = resp->time.clock;
  if (resp->error) {
    kb_lhttp_err_text e = {resp->message, resp->safe_url, resp->detail, resp->hint, resp->method,
                  resp->curl_code};
    err_save(st, resp->error, &e);
    st->state = ST_FAILED;
  } else {
    st->state = ST_ENDED;
  }
  kb_http_request_free(r);
  st->r = NULL;
  st->held = 0;
  stream_wake(st); /* a reader waiting for more gets the end */
}

/* A task cancelled in stream(): nobody will get the stream, abort it. */
static void cancel_open(void *op) {
  lstream *st = op;
  st->waiter = NULL;
  st->wait = WAIT_NONE;
  st->pending = 0;
  if (st->r) kb_http_request_cancel(st->r); /* NULL: it failed, not delivered */
  st->r = NULL;
  st->state = ST_CLOSED;
}

/* A task cancelled in read()/lines() stops waiting; the stream and what
 * it buffers stay for the next read (kb.timeout around read() polls). */
static void cancel_read(void *op) {
  lstream *st = op;
  st->waiter = NULL;
  st->wait = WAIT_NONE;
  st->pending = 0;
}

static void stream_close(lstream *st) {
  if (st->r) kb_http_request_cancel(st->r);
  st->r = NULL;
  kb_buf_free(&st->buf);
  st->off = 0;
  free(st->err_buf);
  st->err_buf = NULL;
  free(st->head_buf);
  st->head_buf = NULL;
  st->state = ST_CLOSED;
}

static lstream *check_stream(lua_State *L, int idx) {
  return luaL_checkudata(L, idx, STREAM_META);
}

/* Suspends until there is something for `mode`, or returns what the end
 * of the stream gives at once. */
static int stream_wait(lua_State *L, lstream *st, int mode) {
  if (st->state == ST_FAILED) {
    push_saved_error(L, st);
    return lua_error(L);
  }
  if (st->state != ST_OPEN) {
    if (mode == WAIT_LINE && buffered(st) > 0) push_all(L, st); /* the last line */
    else lua_pushnil(L);
    return 1;
  }
  if (st->waiter) return luaL_error(L, "kb.http: another task is reading this stream");
  kb_task *t = kb_task_running(L);
  st->waiter = t;
  st->wait = mode;
  if (st->held) { /* a waiter wants more than the full buffer holds */
    st->held = 0;
    kb_http_request_resume(st->r);
  }
  return kb_task_await(L, t, cancel_read, st);
}

/* s:read() -> the bytes received since the last read, or nil at the end */
static int stream_read(lua_State *L) {
  lstream *st = check_stream(L, 1);
  /* First: what is buffered may be a woken reader's, not taken yet. */
  if (st->waiter) return luaL_error(L, "kb.http: another task is reading this stream");
  if (buffered(st) > 0) {
    push_all(L, st);
    maybe_resume(st);
    return 1;
  }
  return stream_wait(L, st, WAIT_CHUNK);
}

static int lines_next(lua_State *L) {
  lstream *st = check_stream(L, 1);
  if (st->waiter) return luaL_error(L, "kb.http: another task is reading this stream");
  if (push_line(L, st, st->off)) {
    maybe_resume(st);
    return 1;
  }
  return stream_wait(L, st, WAIT_LINE);
}

/* s:lines() -> iterator for `for line in s:lines() do ... end` */
static int stream_lines(lua_State *L) {
  check_stream(L, 1);
  lua_pushcfunction(L, lines_next);
  lua_pushvalue(L, 1);
  return 2;
}

/* s:close(): aborts the transfer; a task waiting in read() gets nil. */
static int stream_close_m(lua_State *L) {
  lstream *st = check_stream(L, 1);
  stream_close(st);
  stream_wake(st); /* deferred (Lua is running): the reader gets nil */
  return 0;
}

static int stream_gc(lua_State *L) {
  stream_close(check_stream(L, 1));
  return 0;
}

/* Times as in a response; total only once the body has ended. The body of
 * a stream is paced by the server's clock (a watch's events, a log's
 * lines), which for the simulator is the virtual clock: that part is
 * scaled like scenario time, the head like a normal response. */
static void push_stream_time(lua_State *L, const lstream *st) {
  kb_rt *rt = st->rt;
  const kb_http_timings *h = &st->head_time;
  kb__lhttp_push_times(L, rt, h, st->sim, 0);
  if (st->state == ST_ENDED || (st->state == ST_FAILED && st->total > 0)) {
    if (st->total_clock >= 0) {
      kb__lhttp_set_number(L, "total", st->total_clock);
      return;
    }
    double body = st->total - h->ttfb;
    double ttfb = kb__lhttp_to_scenario(rt, h->ttfb, st->sim);
    kb__lhttp_set_number(L, "total", ttfb + kb_rt_scenario_seconds(rt, body > 0 ? body : 0));
  }
}

static const char *const STATE_NAMES[] = {"opening", "open", "ended", "failed", "closed"};

/* Fields (status, version, time, state, then the head's table), methods
 * (upvalue 1). */
static int stream_index(lua_State *L) {
  lstream *st = check_stream(L, 1);
  const char *k = luaL_checkstring(L, 2);
  if (!strcmp(k, "status")) lua_pushinteger(L, st->status);
  else if (!strcmp(k, "version")) kb__lhttp_push_version(L, st->version);
  else if (!strcmp(k, "time")) push_stream_time(L, st);
  else if (!strcmp(k, "state")) lua_pushstring(L, STATE_NAMES[st->state]);
  else if (lua_getfield(L, lua_upvalueindex(1), k) == LUA_TNIL) {
    if (lua_getiuservalue(L, 1, 1) != LUA_TTABLE) return 1;
    lua_getfield(L, -1, k);
  }
  return 1;
}

static int stream_tostring(lua_State *L) {
  lstream *st = check_stream(L, 1);
  lua_pushfstring(L, "kb.http.stream %d (%s)", (int)st->status, STATE_NAMES[st->state]);
  return 1;
}

static const luaL_Reg stream_methods[] = {
  {"read", stream_read},
  {"lines", stream_lines},
  {"close", stream_close_m},
  {NULL, NULL}
};

static const luaL_Reg stream_meta[] = {
  {"__gc", stream_gc},
  {"__close", stream_close_m}, /* wakes a reader in another task */
  {"__tostring", stream_tostring},
  {NULL, NULL}
};

void kb__lhttp_stream_register(lua_State *L) {
  luaL_newmetatable(L, STREAM_META);
  luaL_setfuncs(L, stream_meta, 0);
  luaL_newlib(L, stream_methods);
  lua_pushcclosure(L, stream_index, 1);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
}

/* Pushes a new stream userdata holding the client at index `client`. */
static lstream *push_stream(lua_State *L, int client) {
  lstream *st = lua_newuserdatauv(L, sizeof *st, 2);
  memset(st, 0, sizeof *st);
  st->rt = kb_rt_from_lua(L);
  st->sim = KB__LHTTP_NOT_SIM;
  st->total_clock = -1;
  luaL_setmetatable(L, STREAM_META);
  lua_pushvalue(L, client);
  lua_setiuservalue(L, -2, 2);
  return st;
}

int kb__lhttp_stream_open(lua_State *L, kb_http_client *c, int client, int opts) {
  kb_task *t = kb_task_running(L);
  kb_lhttp_spec s = {.method = "GET", .o = KB_HTTP_OPTIONS_INIT};
  luaL_checktype(L, opts, LUA_TTABLE);
  kb__lhttp_read_call(L, &s, 0, 0, opts);
  if (s.max_body_given)
    luaL_error(L, "kb.http.stream: option 'max_body' is for whole bodies; a stream holds at "
               "most %d bytes unread", STREAM_BUFFER_MAX);
  lstream *st = push_stream(L, client);
  kb_http_request *r = kb__lhttp_new_request(L, c, &s);
  int err = kb_http_request_set_stream(r, on_stream_head, on_stream_data, st);
  if (err == 0) err = kb_http_request_start(r, on_stream_done, st);
  if (err != 0) {
    kb_http_request_free(r);
    return kb__lhttp_raise_start_error(L, err, s.method);
  }
  st->r = r;
  st->waiter = t;
  st->wait = WAIT_HEAD;
  return kb_task_await(L, t, cancel_open, st); /* the userdata is on top */
}

