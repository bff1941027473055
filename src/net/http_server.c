/* The HTTP/1.1 server (see include/kb/http_server.h).
 *
 * One conn per accepted TCP connection. Its bytes go through http_parser;
 * on_message_complete pauses the parser, the request goes to the handler,
 * and the parser stays paused until the owner finishes the response, so
 * pipelined requests wait in the connection's input buffer and responses
 * leave in request order. Reading goes on meanwhile, to notice a client
 * that goes away, until that buffer holds MAX_BUFFERED bytes.
 *
 * Input is read into one server-wide buffer and parsed from there; only
 * bytes that must wait are copied into the connection, so ten thousand idle
 * connections cost a few hundred bytes each.
 *
 * Writes go out with uv_try_write when nothing is queued; what the kernel
 * does not take is copied into a uv_write request that owns it.
 *
 * A connection ends in one of three ways: conn_close (immediately: a read
 * error, EOF, idle timeout, server close), conn_shutdown (after a final
 * response: FIN once the writes are out, then wait up to linger_ms for the
 * client's FIN so a late request byte cannot turn our close into a RST that
 * destroys the response), or conn_reset_now (RST, on the owner's demand).
 * The conn is freed in its close callback, which is also where a pending
 * request learns that its client is gone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <http_parser.h>

#include "kb/buf.h"
#include "kb/http_server.h"
#include "kb/log.h"

#define READ_BUF_SIZE (64 * 1024)
#define MAX_BUFFERED (256 * 1024)        /* waiting input before reads pause */
#define WRITE_HIGH_WATER (1024 * 1024)   /* queued output before parsing pauses */

#define DEFAULT_MAX_HEADER_SIZE (64 * 1024)
#define DEFAULT_MAX_HEADERS 100
#define DEFAULT_MAX_BODY_SIZE ((size_t)64 * 1024 * 1024)
#define DEFAULT_IDLE_TIMEOUT_MS 60000
#define DEFAULT_HEADER_TIMEOUT_MS 10000
#define DEFAULT_BODY_TIMEOUT_MS 60000
#define DEFAULT_MAX_CONNECTIONS 4096
#define REFUSAL_LOG_EVERY_MS 10000 /* one log line per this long while refusing */
#define DEFAULT_LINGER_MS 2000
#define DEFAULT_BACKLOG 4096

#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* ---- intrusive lists ---------------------------------------------------------- */

typedef struct qlink {
  struct qlink *prev, *next;
} qlink;

static void link_init(qlink *l) { l->prev = l->next = l; }
static int link_empty(const qlink *l) { return l->next == l; }

static void link_append(qlink *head, qlink *l) {
  l->next = head;
  l->prev = head->prev;
  head->prev->next = l;
  head->prev = l;
}

static void link_remove(qlink *l) {
  l->prev->next = l->next;
  l->next->prev = l->prev;
  link_init(l);
}

/* ---- structures ---------------------------------------------------------------- */

typedef struct conn conn;

typedef enum { REQ_PARSING, REQ_HANDLER, REQ_STREAMING } req_state;
typedef enum { BODY_FIXED, BODY_CHUNKED, BODY_RAW, BODY_NONE } body_mode;

struct kb_httpd_req {
  conn *conn;            /* NULL once the connection is closed */
  req_state state;
  kb_buf head;           /* target, header names and values, path, query;
                            NUL-separated, pointers made at headers_complete */
  size_t *hoff;          /* name and value offsets into head, per header */
  size_t nheaders, hoff_cap;
  kb_httpd_header *headers;
  const char *target, *path, *query, *method;
  kb_buf body;
  int version;           /* 10, 11 */
  int in_field;          /* the last header piece parsed was a name */
  int headers_done;
  int keep_alive, head_only, close_after;
  body_mode mode;        /* of the response being streamed */
  kb_httpd_req_fn on_abort, on_drain;
  void *abort_ud, *drain_ud;
  uint64_t handed_ns;    /* when the handler got it, for Server-Timing */
  double timing_ms;      /* Server-Timing value set by the owner, or < 0 */
  double modelled_ms;    /* its ";sim=" value, or < 0 for none */
  char remote[72];
};

struct conn {
  union {             /* a TCP or a Unix-socket connection: both are streams */
    uv_tcp_t tcp;
    uv_pipe_t pipe;
    uv_stream_t stream;
    uv_handle_t handle;
  } io;
  int is_unix;
  uv_shutdown_t shutdown;
  http_parser parser;
  kb_httpd *srv;
  qlink all;              /* in srv->conns */
  qlink ready;            /* in srv->ready while it should resume parsing */
  kb_httpd_req *req;     /* being parsed, or being answered */
  char *in;              /* input that waits for the current request */
  size_t in_len, in_cap;
  size_t header_bytes;
  uint64_t last_active;  /* uv_now of the accept, the last response or the
                            last write drained: the idle timeout's start */
  uint64_t req_begun;    /* uv_now of the current request's first byte */
  uint64_t headers_at;   /* uv_now of its end of headers (body deadline) */
  uint64_t deadline;     /* lingering or resetting: give up then */
  int writes;            /* uv_write requests in flight */
  int reject_status;     /* why a parser callback refused the request */
  int reading, closing, lingering, resetting;
  char remote[72];
};

struct kb_httpd {
  uv_loop_t *loop;
  kb_httpd_config cfg;
  kb_httpd_handler_fn handler;
  void *ud;
  uv_tcp_t listener;
  uv_pipe_t unix_listener;
  int unix_init;
  uv_timer_t sweep;      /* idle timeouts and linger deadlines */
  uv_idle_t idle;        /* resumes connections listed in ready */
  int listener_init;
  int port;
  int closing;
  int handles;           /* open libuv handles; freed at zero when closing */
  qlink conns, ready;
  kb_httpd_closed_fn closed;
  void *closed_ud;
  kb_httpd_stats stats;
  uint64_t refused_logged_at; /* uv_now of the last "refusing" log line */
  uint64_t refused_unlogged;  /* refusals since that line */
  int refused_logged;
  time_t date_sec;
  char date[64];
  char rbuf[READ_BUF_SIZE];
};

/* uv_buf_init takes an unsigned int; bodies may be larger. */
static uv_buf_t mkbuf(const void *p, size_t len) {
  uv_buf_t b;
  b.base = (char *)p;
  b.len = len;
  return b;
}

typedef struct write_req {
  uv_write_t req;
  conn *conn;
  char data[];
} write_req;

static void conn_close(conn *c);
static void conn_shutdown(conn *c);
static void conn_reset_now(conn *c);
static void conn_schedule(conn *c);
static void conn_on_close(uv_handle_t *h);

/* ---- errors ---------------------------------------------------------------------- */

const char *kb_httpd_strerror(int code) {
  switch (code) {
  case 0: return "success";
  case KB_HTTPD_EGONE: return "the client closed the connection";
  case KB_HTTPD_ESTATE: return "not allowed in the current state of the response";
  case KB_HTTPD_EINVAL: return "invalid status code or header";
  default: return uv_strerror(code);
  }
}

/* ---- requests --------------------------------------------------------------------- */

static kb_httpd_req *req_new(conn *c) {
  kb_httpd_req *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->conn = c;
  r->state = REQ_PARSING;
  memcpy(r->remote, c->remote, sizeof r->remote);
  return r;
}

static void req_free(kb_httpd_req *r) {
  kb_buf_free(&r->head);
  kb_buf_free(&r->body);
  free(r->hoff);
  free(r->headers);
  free(r);
}

static int req_gone(const kb_httpd_req *r) { return r->conn == NULL || r->conn->closing; }

/* Finishing a request whose client is gone only releases it. */
static int req_release_gone(kb_httpd_req *r) {
  if (r->conn) r->conn->req = NULL; /* its close callback must not abort it */
  req_free(r);
  return KB_HTTPD_EGONE;
}

/* The owner finished the response and it is queued: the connection moves
 * on to the next request, or closes. */
static void req_finish(kb_httpd_req *r) {
  conn *c = r->conn;
  kb_httpd *s = c->srv;
  int keep = r->keep_alive && !r->close_after && !s->closing;
  c->req = NULL;
  s->stats.responses++;
  req_free(r);
  c->last_active = uv_now(s->loop);
  if (!keep) conn_shutdown(c);
  else if (c->in_len || !c->reading) conn_schedule(c);
}

/* ---- writing ------------------------------------------------------------------------ */

static void conn_on_write(uv_write_t *w, int status) {
  write_req *wr = container_of(w, write_req, req);
  conn *c = wr->conn;
  free(wr);
  c->writes--;
  if (status < 0) {
    conn_close(c);
    return;
  }
  if (c->closing) return;
  if (c->resetting) {
    if (c->writes == 0) conn_reset_now(c);
    return;
  }
  size_t queued = uv_stream_get_write_queue_size(&c->io.stream);
  if (queued == 0 && c->writes == 0) c->last_active = uv_now(c->srv->loop);
  kb_httpd_req *r = c->req;
  if (r && r->on_drain && queued == 0) {
    kb_httpd_req_fn cb = r->on_drain;
    r->on_drain = NULL;
    cb(r, r->drain_ud);
  }
  if (c->in_len && !c->req && queued < WRITE_HIGH_WATER) conn_schedule(c);
}

/* Sends bufs in order after anything queued. Returns 0 or a UV_* error (the
 * caller closes the connection). */
static int conn_write(conn *c, const uv_buf_t *bufs, unsigned n) {
  size_t total = 0, done = 0;
  for (unsigned i = 0; i < n; i++) total += bufs[i].len;
  if (total == 0) return 0;
  /* uv_try_write refuses (UV_EAGAIN) while anything is queued, so order holds. */
  int r = uv_try_write(&c->io.stream, bufs, n);
  if (r >= 0) done = (size_t)r;
  else if (r != UV_EAGAIN) return r;
  if (done == total) return 0;

  write_req *wr = malloc(sizeof *wr + (total - done));
  if (!wr) return UV_ENOMEM;
  size_t off = 0, skip = done;
  for (unsigned i = 0; i < n; i++) {
    size_t len = bufs[i].len;
    if (skip >= len) {
      skip -= len;
      continue;
    }
    memcpy(wr->data + off, bufs[i].base + skip, len - skip);
    off += len - skip;
    skip = 0;
  }
  wr->conn = c;
  uv_buf_t b = mkbuf(wr->data, off);
  r = uv_write(&wr->req, &c->io.stream, &b, 1, conn_on_write);
  if (r < 0) {
    free(wr);
    return r;
  }
  c->writes++;
  return 0;
}

static int conn_write_str(conn *c, const char *s, size_t len) {
  uv_buf_t b = mkbuf(s, len);
  return conn_write(c, &b, 1);
}

/* ---- closing a connection --------------------------------------------------------------- */

static void conn_close(conn *c) {
  if (c->closing) return;
  c->closing = 1;
  link_remove(&c->ready);
  uv_close(&c->io.handle, conn_on_close);
}

static void conn_reset_now(conn *c) {
  if (c->closing) return;
  c->closing = 1;
  link_remove(&c->ready);
  if (c->is_unix || uv_tcp_close_reset(&c->io.tcp, conn_on_close) != 0)
    uv_close(&c->io.handle, conn_on_close);
}

static void conn_on_shutdown(uv_shutdown_t *sh, int status) {
  conn *c = sh->data;
  if (status < 0) conn_close(c);
}

static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void conn_on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

static void conn_start_reading(conn *c) {
  if (c->reading || c->closing) return;
  if (uv_read_start(&c->io.stream, conn_alloc, conn_on_read) == 0) c->reading = 1;
  else conn_close(c);
}

/* After a final response: FIN once the queued writes are out, then keep
 * reading (and discarding) until the client closes or the linger time is up. */
static void conn_shutdown(conn *c) {
  if (c->closing || c->lingering || c->resetting) return;
  c->lingering = 1;
  c->in_len = 0;
  c->deadline = uv_now(c->srv->loop) + c->srv->cfg.linger_ms;
  link_remove(&c->ready);
  c->shutdown.data = c;
  if (uv_shutdown(&c->shutdown, &c->io.stream, conn_on_shutdown) != 0) {
    conn_close(c);
    return;
  }
  conn_start_reading(c);
}

static void server_release_handle(kb_httpd *s) {
  if (--s->handles > 0 || !s->closing) return;
  if (s->closed) s->closed(s, s->closed_ud);
  free(s);
}

static void conn_on_close(uv_handle_t *h) {
  conn *c = h->data;
  kb_httpd *s = c->srv;
  kb_httpd_req *r = c->req;
  c->req = NULL;
  link_remove(&c->all);
  s->stats.open_connections--;
  free(c->in);
  free(c);
  if (r) {
    if (r->state == REQ_PARSING) {
      req_free(r);
    } else {
      r->conn = NULL;
      s->stats.aborted++;
      if (r->on_abort) r->on_abort(r, r->abort_ud); /* may release r */
    }
  }
  server_release_handle(s);
}

/* ---- parsing ---------------------------------------------------------------------------- */

static int reject(conn *c, int status) {
  c->reject_status = status;
  return -1;
}

static int count_header_bytes(conn *c, size_t len) {
  c->header_bytes += len;
  return c->header_bytes > c->srv->cfg.max_header_size ? reject(c, 431) : 0;
}

static int on_message_begin(http_parser *p) {
  conn *c = p->data;
  c->req = req_new(c);
  c->header_bytes = 0;
  c->req_begun = uv_now(c->srv->loop);
  return c->req ? 0 : reject(c, 503);
}

static int on_url(http_parser *p, const char *at, size_t len) {
  conn *c = p->data;
  if (count_header_bytes(c, len)) return -1;
  return kb_buf_append(&c->req->head, at, len) ? reject(c, 503) : 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len) {
  conn *c = p->data;
  kb_httpd_req *r = c->req;
  if (r->headers_done) return 0; /* trailer fields of a chunked body: ignored */
  if (count_header_bytes(c, len)) return -1;
  if (!r->in_field) { /* a new header: end the target or the previous value */
    if (r->nheaders == c->srv->cfg.max_headers) return reject(c, 431);
    if (r->nheaders == r->hoff_cap) {
      size_t cap = r->hoff_cap ? r->hoff_cap * 2 : 16;
      size_t *n = realloc(r->hoff, cap * 2 * sizeof *n);
      if (!n) return reject(c, 503);
      r->hoff = n;
      r->hoff_cap = cap;
    }
    if (kb_buf_putc(&r->head, '\0')) return reject(c, 503);
    r->hoff[2 * r->nheaders] = r->head.len;
    r->hoff[2 * r->nheaders + 1] = r->head.len - 1; /* "" until a value arrives */
    r->nheaders++;
    r->in_field = 1;
  }
  return kb_buf_append(&r->head, at, len) ? reject(c, 503) : 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len) {
  conn *c = p->data;
  kb_httpd_req *r = c->req;
  if (r->headers_done) return 0;
  if (count_header_bytes(c, len)) return -1;
  if (r->in_field) {
    if (kb_buf_putc(&r->head, '\0')) return reject(c, 503);
    r->hoff[2 * (r->nheaders - 1) + 1] = r->head.len;
    r->in_field = 0;
  }
  return kb_buf_append(&r->head, at, len) ? reject(c, 503) : 0;
}

const char *kb_httpd_req_header(const kb_httpd_req *r, const char *name) {
  for (size_t i = 0; i < r->nheaders; i++)
    if (strcasecmp(r->headers[i].name, name) == 0) return r->headers[i].value;
  return NULL;
}

/* Splits the target into path and query (copies, each NUL-terminated), and
 * turns the offsets into pointers now that head stops growing. */
static int req_index(kb_httpd_req *r) {
  if (kb_buf_putc(&r->head, '\0')) return -1; /* ends the target or last value */
  const char *t = r->head.data;
  size_t tlen = strlen(t), ps = 0;
  if (strncasecmp(t, "http://", 7) == 0 || strncasecmp(t, "https://", 8) == 0) {
    const char *slash = strchr(strstr(t, "//") + 2, '/');
    ps = slash ? (size_t)(slash - t) : tlen; /* absolute-form */
  }
  size_t pe = ps;
  while (pe < tlen && t[pe] != '?' && t[pe] != '#') pe++;
  size_t qs = pe < tlen && t[pe] == '?' ? pe + 1 : pe, qe = qs;
  while (qe < tlen && t[qe] != '#') qe++;

  /* Reserve first: the copies come from the buffer itself. */
  if (kb_buf_reserve(&r->head, (pe - ps) + (qe - qs) + 3)) return -1;
  size_t path_off = r->head.len;
  if (ps == pe) kb_buf_putc(&r->head, '/');
  else kb_buf_append(&r->head, r->head.data + ps, pe - ps);
  kb_buf_putc(&r->head, '\0');
  size_t query_off = r->head.len;
  kb_buf_append(&r->head, r->head.data + qs, qe - qs);

  if (r->nheaders) {
    r->headers = malloc(r->nheaders * sizeof *r->headers);
    if (!r->headers) return -1;
  }
  char *base = r->head.data;
  for (size_t i = 0; i < r->nheaders; i++) {
    r->headers[i].name = base + r->hoff[2 * i];
    r->headers[i].value = base + r->hoff[2 * i + 1];
  }
  r->target = base;
  r->path = base + path_off;
  r->query = base + query_off;
  return 0;
}

static int on_headers_complete(http_parser *p) {
  conn *c = p->data;
  kb_httpd_req *r = c->req;
  kb_httpd *s = c->srv;
  r->headers_done = 1;
  c->headers_at = uv_now(s->loop);
  if (req_index(r)) return reject(c, 503);
  r->method = http_method_str((enum http_method)p->method);
  r->version = p->http_major * 10 + p->http_minor;
  r->keep_alive = http_should_keep_alive(p);
  r->head_only = p->method == HTTP_HEAD;
  if (p->http_major != 1) return reject(c, 505);

  int chunked = (p->flags & F_CHUNKED) != 0;
  int sized = !chunked && p->content_length != UINT64_MAX && p->content_length > 0;
  if (sized && p->content_length > s->cfg.max_body_size) return reject(c, 413);

  const char *expect = kb_httpd_req_header(r, "Expect");
  if (expect) {
    if (strcasecmp(expect, "100-continue") != 0) return reject(c, 417);
    if (r->version >= 11 && (chunked || sized)) {
      static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
      if (conn_write_str(c, cont, sizeof cont - 1)) return reject(c, 503);
    }
  }
  if (sized && kb_buf_reserve(&r->body, (size_t)p->content_length)) return reject(c, 503);
  return 0;
}

static int on_body(http_parser *p, const char *at, size_t len) {
  conn *c = p->data;
  kb_httpd_req *r = c->req;
  if (len > c->srv->cfg.max_body_size - r->body.len) return reject(c, 413);
  return kb_buf_append(&r->body, at, len) ? reject(c, 503) : 0;
}

static int on_message_complete(http_parser *p) {
  http_parser_pause(p, 1); /* conn_parse dispatches, parsing waits for the response */
  return 0;
}

static const http_parser_settings parser_settings = {
  .on_message_begin = on_message_begin,
  .on_url = on_url,
  .on_header_field = on_header_field,
  .on_header_value = on_header_value,
  .on_headers_complete = on_headers_complete,
  .on_body = on_body,
  .on_message_complete = on_message_complete,
};

/* The server's own answer to a request it refuses; the connection closes. */
static void conn_reject(conn *c, enum http_errno e) {
  kb_httpd *s = c->srv;
  int status = c->reject_status ? c->reject_status : e == HPE_HEADER_OVERFLOW ? 431 : 400;
  char why[160];
  switch (status) {
  case 413:
    snprintf(why, sizeof why, "request body larger than %zu bytes", s->cfg.max_body_size);
    break;
  case 431:
    snprintf(why, sizeof why, "request headers larger than %zu bytes or %zu lines",
             s->cfg.max_header_size, s->cfg.max_headers);
    break;
  case 408:
    snprintf(why, sizeof why, "request %s not received within %llu ms",
             c->req && c->req->headers_done ? "body" : "headers",
             (unsigned long long)(c->req && c->req->headers_done ? s->cfg.body_timeout_ms
                                                                 : s->cfg.header_timeout_ms));
    break;
  case 417: snprintf(why, sizeof why, "only \"Expect: 100-continue\" is supported"); break;
  case 505: snprintf(why, sizeof why, "only HTTP/1.0 and HTTP/1.1 are supported"); break;
  case 503: snprintf(why, sizeof why, "out of memory"); break;
  default:
    snprintf(why, sizeof why, "malformed request: %s", http_errno_description(e));
    break;
  }
  if (c->req && c->req->state == REQ_PARSING) {
    req_free(c->req);
    c->req = NULL;
  }
  s->stats.rejected++;
  char msg[384];
  int n = snprintf(msg, sizeof msg,
                   "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
                   "Content-Length: %zu\r\nConnection: close\r\n\r\n%s\n",
                   status, http_status_str((enum http_status)status), strlen(why) + 1, why);
  if (conn_write_str(c, msg, (size_t)n) < 0) conn_close(c);
  else conn_shutdown(c);
}

static int conn_can_parse(conn *c) {
  if (c->closing || c->lingering || c->resetting) return 0;
  if (c->req && c->req->state != REQ_PARSING) return 0;
  return uv_stream_get_write_queue_size(&c->io.stream) < WRITE_HIGH_WATER;
}

static void conn_dispatch(conn *c) {
  kb_httpd_req *r = c->req;
  kb_httpd *s = c->srv;
  r->state = REQ_HANDLER;
  if (c->parser.upgrade) r->keep_alive = 0; /* we speak no other protocol */
  s->stats.requests++;
  r->handed_ns = uv_hrtime();
  r->timing_ms = r->modelled_ms = -1;
  s->handler(r, s->ud);
}

/* Feeds bytes to the parser while requests can be taken, dispatching each
 * complete one. Returns the bytes consumed; all of them when the
 * connection is done with input. */
static size_t conn_parse(conn *c, const char *data, size_t len) {
  size_t off = 0;
  while (off < len && conn_can_parse(c)) {
    size_t n = http_parser_execute(&c->parser, &parser_settings, data + off, len - off);
    off += n;
    enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
    if (e == HPE_PAUSED) {
      http_parser_pause(&c->parser, 0);
      conn_dispatch(c);
    } else if (e != HPE_OK) {
      conn_reject(c, e);
      return len;
    } else if (n == 0) {
      return len; /* after an upgrade: bytes of another protocol */
    }
  }
  return c->closing || c->lingering || c->resetting ? len : off;
}

static int conn_buffer(conn *c, const char *data, size_t len) {
  if (c->in_len + len > c->in_cap) {
    size_t cap = c->in_cap ? c->in_cap : 4096;
    while (cap < c->in_len + len) cap *= 2;
    char *p = realloc(c->in, cap);
    if (!p) return -1;
    c->in = p;
    c->in_cap = cap;
  }
  memcpy(c->in + c->in_len, data, len);
  c->in_len += len;
  return 0;
}

/* Parses buffered input, keeping what must still wait. */
static void conn_drain_input(conn *c) {
  size_t n = conn_parse(c, c->in, c->in_len);
  if (n >= c->in_len) {
    c->in_len = 0;
  } else if (n > 0) {
    memmove(c->in, c->in + n, c->in_len - n);
    c->in_len -= n;
  }
  if (c->in_len == 0 && c->in_cap > MAX_BUFFERED) { /* give back a burst's memory */
    free(c->in);
    c->in = NULL;
    c->in_cap = 0;
  }
}

static void conn_resume(conn *c) {
  if (c->closing || c->lingering || c->resetting) return;
  if (c->in_len && conn_can_parse(c)) conn_drain_input(c);
  if (c->in_len < MAX_BUFFERED) conn_start_reading(c);
}

static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  conn *c = h->data;
  *buf = uv_buf_init(c->srv->rbuf, sizeof c->srv->rbuf);
}

static void conn_on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  conn *c = st->data;
  if (nread == 0) return;
  if (nread < 0) { /* EOF or error: the client is gone */
    conn_close(c);
    return;
  }
  if (c->lingering || c->resetting) return;
  const char *data = buf->base;
  size_t len = (size_t)nread;
  if (c->in_len == 0 && conn_can_parse(c)) {
    size_t n = conn_parse(c, data, len);
    data += n;
    len -= n;
  }
  if (len == 0 || c->closing || c->lingering || c->resetting) return;
  if (conn_buffer(c, data, len)) {
    conn_close(c);
    return;
  }
  if (conn_can_parse(c)) conn_drain_input(c);
  if (c->in_len >= MAX_BUFFERED && c->reading && !c->closing) {
    uv_read_stop(st);
    c->reading = 0;
  }
}

/* ---- scheduling and timeouts ----------------------------------------------------------- */

/* Resumes the connection from the idle callback, never from inside an API
 * call, so a handler never runs nested in an owner's kb_httpd_* call. */
static void on_idle(uv_idle_t *h);

static void conn_schedule(conn *c) {
  kb_httpd *s = c->srv;
  if (c->closing || s->closing) return;
  if (link_empty(&c->ready)) link_append(&s->ready, &c->ready);
  uv_idle_start(&s->idle, on_idle);
}

static void on_idle(uv_idle_t *h) {
  kb_httpd *s = h->data;
  uv_idle_stop(h);
  if (link_empty(&s->ready)) return;
  qlink batch = {s->ready.prev, s->ready.next}; /* resumes may queue again */
  batch.next->prev = &batch;
  batch.prev->next = &batch;
  link_init(&s->ready);
  while (!link_empty(&batch)) {
    conn *c = container_of(batch.next, conn, ready);
    link_remove(&c->ready);
    conn_resume(c);
  }
}

static void on_sweep(uv_timer_t *t) {
  kb_httpd *s = t->data;
  uint64_t now = uv_now(s->loop);
  for (qlink *l = s->conns.next; l != &s->conns; l = l->next) {
    conn *c = container_of(l, conn, all); /* closing does not unlink yet */
    if (c->closing) continue;
    if (c->resetting) {
      if (now >= c->deadline) conn_reset_now(c);
    } else if (c->lingering) {
      if (now >= c->deadline) conn_close(c);
    } else if (c->req && c->req->state != REQ_PARSING) {
      continue; /* the owner is answering: no timeout, watches are long */
    } else if (c->req) { /* a request arriving: its headers, then its body, have deadlines */
      int late = c->req->headers_done ? now - c->headers_at >= s->cfg.body_timeout_ms
                                      : now - c->req_begun >= s->cfg.header_timeout_ms;
      if (late) {
        s->stats.timed_out++;
        c->reject_status = 408;
        conn_reject(c, HPE_OK);
      }
    } else if (c->writes) {
      continue; /* a response still leaving: not idle */
    } else if (now - c->last_active >= s->cfg.idle_timeout_ms) {
      s->stats.idle_closed++;
      conn_close(c);
    }
  }
}

/* ---- the server ---------------------------------------------------------------------------- */

kb_httpd *kb_httpd_new(uv_loop_t *loop, const kb_httpd_config *config,
                       kb_httpd_handler_fn handler, void *ud) {
  if (!loop || !handler) return NULL;
  kb_httpd *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->loop = loop;
  if (config) s->cfg = *config;
  kb_httpd_config *cfg = &s->cfg;
  if (!cfg->max_header_size) cfg->max_header_size = DEFAULT_MAX_HEADER_SIZE;
  if (!cfg->max_headers) cfg->max_headers = DEFAULT_MAX_HEADERS;
  if (!cfg->max_body_size) cfg->max_body_size = DEFAULT_MAX_BODY_SIZE;
  if (!cfg->idle_timeout_ms) cfg->idle_timeout_ms = DEFAULT_IDLE_TIMEOUT_MS;
  if (!cfg->header_timeout_ms) cfg->header_timeout_ms = DEFAULT_HEADER_TIMEOUT_MS;
  if (!cfg->body_timeout_ms) cfg->body_timeout_ms = DEFAULT_BODY_TIMEOUT_MS;
  if (!cfg->max_connections) cfg->max_connections = DEFAULT_MAX_CONNECTIONS;
  if (!cfg->linger_ms) cfg->linger_ms = DEFAULT_LINGER_MS;
  if (cfg->backlog <= 0) cfg->backlog = DEFAULT_BACKLOG;
  s->handler = handler;
  s->ud = ud;
  link_init(&s->conns);
  link_init(&s->ready);

  uv_timer_init(loop, &s->sweep);
  uv_idle_init(loop, &s->idle);
  s->sweep.data = s->idle.data = s;
  s->handles = 2;
  uint64_t every = cfg->idle_timeout_ms < cfg->linger_ms ? cfg->idle_timeout_ms : cfg->linger_ms;
  if (cfg->header_timeout_ms < every) every = cfg->header_timeout_ms;
  if (cfg->body_timeout_ms < every) every = cfg->body_timeout_ms;
  every /= 4;
  if (every < 10) every = 10;
  if (every > 1000) every = 1000;
  uv_timer_start(&s->sweep, on_sweep, every, every);
  uv_unref((uv_handle_t *)&s->sweep); /* connections keep the loop alive, not it */
  return s;
}

static void format_peer(conn *c) {
  struct sockaddr_storage ss;
  int len = sizeof ss;
  char ip[INET6_ADDRSTRLEN] = "?"; /* "[ip]:port" fits in remote[72] */
  int port = 0;
  if (c->is_unix) {
    snprintf(c->remote, sizeof c->remote, "unix");
    return;
  }
  if (uv_tcp_getpeername(&c->io.tcp, (struct sockaddr *)&ss, &len) == 0) {
    if (ss.ss_family == AF_INET6) {
      struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
      uv_ip6_name(a, ip, sizeof ip);
      port = ntohs(a->sin6_port);
      snprintf(c->remote, sizeof c->remote, "[%s]:%d", ip, port);
      return;
    }
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    uv_ip4_name(a, ip, sizeof ip);
    port = ntohs(a->sin_port);
  }
  snprintf(c->remote, sizeof c->remote, "%s:%d", ip, port);
}

/* Over max_connections: a 503 if the socket takes it at once, and closed.
 * One log line when refusals start, then at most one per
 * REFUSAL_LOG_EVERY_MS with the count since the last. */
static void refuse(conn *c) {
  kb_httpd *s = c->srv;
  uint64_t now = uv_now(s->loop);
  s->stats.refused++;
  s->refused_unlogged++;
  if (!s->refused_logged || now - s->refused_logged_at >= REFUSAL_LOG_EVERY_MS) {
    kb_log(KB_LOG_WARN,
           "http server%s%.0d: refused %llu connection(s) (the latest from %s): %llu open, "
           "the limit is %llu (max_connections; kbrun sim --max-connections)",
           s->port ? " on port " : "", s->port, (unsigned long long)s->refused_unlogged,
           c->remote, (unsigned long long)(s->stats.open_connections - 1),
           (unsigned long long)s->cfg.max_connections);
    s->refused_logged = 1;
    s->refused_logged_at = now;
    s->refused_unlogged = 0;
  }
  static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\n"
                             "Content-Type: text/plain; charset=utf-8\r\n"
                             "Content-Length: 21\r\nConnection: close\r\n\r\n"
                             "too many connections\n";
  uv_buf_t b = mkbuf(busy, sizeof busy - 1);
  uv_try_write(&c->io.stream, &b, 1);
  conn_close(c);
}

static void on_connection(uv_stream_t *ls, int status) {
  kb_httpd *s = ls->data;
  if (status < 0 || s->closing) return;
  conn *c = calloc(1, sizeof *c);
  if (!c) return; /* the pending connection waits in the backlog */
  c->is_unix = ls->type == UV_NAMED_PIPE;
  if (c->is_unix) uv_pipe_init(s->loop, &c->io.pipe, 0);
  else uv_tcp_init(s->loop, &c->io.tcp);
  c->io.handle.data = c;
  c->srv = s;
  link_init(&c->ready);
  link_append(&s->conns, &c->all);
  s->handles++;
  s->stats.open_connections++;
  if (uv_accept(ls, &c->io.stream) != 0) {
    conn_close(c);
    return;
  }
  s->stats.connections++;
  if (!c->is_unix) uv_tcp_nodelay(&c->io.tcp, 1);
  format_peer(c);
  if (s->stats.open_connections > s->cfg.max_connections) {
    refuse(c);
    return;
  }
  http_parser_init(&c->parser, HTTP_REQUEST);
  c->parser.data = c;
  c->last_active = uv_now(s->loop);
  conn_start_reading(c);
}

int kb_httpd_listen(kb_httpd *s, const char *host, int port) {
  if (s->closing || s->listener_init || port < 0 || port > 65535) return UV_EINVAL;
  if (!host || !*host || strcmp(host, "localhost") == 0) host = "127.0.0.1";
  char inner[64];
  size_t hl = strlen(host);
  if (host[0] == '[' && hl > 2 && hl < sizeof inner + 2 && host[hl - 1] == ']') {
    memcpy(inner, host + 1, hl - 2);
    inner[hl - 2] = '\0';
    host = inner;
  }
  struct sockaddr_storage ss;
  int r = strchr(host, ':') ? uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss)
                            : uv_ip4_addr(host, port, (struct sockaddr_in *)&ss);
  if (r) return UV_EINVAL;
  r = uv_tcp_init(s->loop, &s->listener);
  if (r) return r;
  s->listener.data = s;
  s->listener_init = 1;
  s->handles++;
  r = uv_tcp_bind(&s->listener, (struct sockaddr *)&ss, 0);
  if (!r) r = uv_listen((uv_stream_t *)&s->listener, s->cfg.backlog, on_connection);
  if (r) return r;
  int len = sizeof ss;
  if (uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &len) == 0)
    s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
  return 0;
}

int kb_httpd_listen_unix(kb_httpd *s, const char *path) {
  if (s->closing || s->unix_init || !path || !*path) return UV_EINVAL;
  int r = uv_pipe_init(s->loop, &s->unix_listener, 0);
  if (r) return r;
  s->unix_listener.data = s;
  s->unix_init = 1;
  s->handles++;
  r = uv_pipe_bind(&s->unix_listener, path);
  if (!r) r = uv_listen((uv_stream_t *)&s->unix_listener, s->cfg.backlog, on_connection);
  return r;
}

int kb_httpd_port(const kb_httpd *s) { return s->port; }

void kb_httpd_get_stats(const kb_httpd *s, kb_httpd_stats *out) { *out = s->stats; }

static void on_handle_closed(uv_handle_t *h) { server_release_handle(h->data); }

void kb_httpd_close(kb_httpd *s, kb_httpd_closed_fn closed, void *ud) {
  s->closed = closed;
  s->closed_ud = ud;
  if (s->closing) return;
  s->closing = 1;
  if (s->listener_init) uv_close((uv_handle_t *)&s->listener, on_handle_closed);
  if (s->unix_init) uv_close((uv_handle_t *)&s->unix_listener, on_handle_closed);
  uv_close((uv_handle_t *)&s->sweep, on_handle_closed);
  uv_close((uv_handle_t *)&s->idle, on_handle_closed);
  for (qlink *l = s->conns.next; l != &s->conns; l = l->next)
    conn_close(container_of(l, conn, all));
}

/* ---- request accessors ---------------------------------------------------------- */

const char *kb_httpd_req_method(const kb_httpd_req *r) { return r->method; }
const char *kb_httpd_req_target(const kb_httpd_req *r) { return r->target; }
const char *kb_httpd_req_path(const kb_httpd_req *r) { return r->path; }
const char *kb_httpd_req_query(const kb_httpd_req *r) { return r->query; }
int kb_httpd_req_version(const kb_httpd_req *r) { return r->version; }
size_t kb_httpd_req_header_count(const kb_httpd_req *r) { return r->nheaders; }
const char *kb_httpd_req_remote(const kb_httpd_req *r) { return r->remote; }
int kb_httpd_req_gone(const kb_httpd_req *r) { return req_gone(r); }

void kb_httpd_req_set_timing(kb_httpd_req *r, double ms, double modelled_ms) {
  r->timing_ms = ms;
  r->modelled_ms = modelled_ms;
}

const kb_httpd_header *kb_httpd_req_header_at(const kb_httpd_req *r, size_t i) {
  return i < r->nheaders ? &r->headers[i] : NULL;
}

const char *kb_httpd_req_body(const kb_httpd_req *r, size_t *len) {
  if (len) *len = r->body.len;
  return r->body.data ? r->body.data : "";
}

int kb_httpd_req_on_abort(kb_httpd_req *r, kb_httpd_req_fn cb, void *ud) {
  if (req_gone(r)) return KB_HTTPD_EGONE;
  r->on_abort = cb;
  r->abort_ud = ud;
  return 0;
}

void kb_httpd_req_close_after(kb_httpd_req *r) { r->close_after = 1; }

size_t kb_httpd_req_write_queue(const kb_httpd_req *r) {
  if (req_gone(r)) return 0;
  return uv_stream_get_write_queue_size(&r->conn->io.stream);
}

int kb_httpd_req_on_drain(kb_httpd_req *r, kb_httpd_req_fn cb, void *ud) {
  if (req_gone(r)) return KB_HTTPD_EGONE;
  if (kb_httpd_req_write_queue(r) == 0) return 0;
  r->on_drain = cb;
  r->drain_ud = ud;
  return 1;
}

/* ---- responding ----------------------------------------------------------------------------- */

static int valid_response(int status, const kb_httpd_header *h, size_t n) {
  if (status < 100 || status > 999) return 0;
  for (size_t i = 0; i < n; i++) {
    if (!h[i].name || !h[i].value || !h[i].name[0]) return 0;
    if (strpbrk(h[i].name, "\r\n: \t") || strpbrk(h[i].value, "\r\n")) return 0;
  }
  return 1;
}

static int has_token(const char *value, const char *token) {
  size_t tl = strlen(token);
  for (const char *p = value; *p;) {
    while (*p == ' ' || *p == '\t' || *p == ',') p++;
    const char *e = p;
    while (*e && *e != ',') e++;
    const char *te = e;
    while (te > p && (te[-1] == ' ' || te[-1] == '\t')) te--;
    if ((size_t)(te - p) == tl && strncasecmp(p, token, tl) == 0) return 1;
    p = e;
  }
  return 0;
}

static const char *http_date(kb_httpd *s) {
  static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                     "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  time_t now = s->cfg.date_now ? (time_t)s->cfg.date_now(s->cfg.date_now_ud) : time(NULL);
  if (now != s->date_sec) {
    struct tm tm;
    gmtime_r(&now, &tm);
    snprintf(s->date, sizeof s->date, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday % 7],
             tm.tm_mday, months[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
             tm.tm_sec);
    s->date_sec = now;
  }
  return s->date;
}

/* Status line and headers for r. Decides whether the connection closes
 * after this response (r->close_after). */
static int build_head(kb_buf *b, kb_httpd_req *r, int status, const kb_httpd_header *h,
                      size_t n, body_mode mode, size_t len) {
  kb_httpd *s = r->conn->srv;
  int close = !r->keep_alive || r->close_after || s->closing || mode == BODY_RAW;
  int has_date = s->cfg.no_date;
  const char *reason = http_status_str((enum http_status)status);
  if (reason[0] == '<') reason = "Unknown";
  int e = kb_buf_appendf(b, "HTTP/1.1 %d %s\r\n", status, reason);
  for (size_t i = 0; i < n && !e; i++) {
    const char *name = h[i].name;
    if (strcasecmp(name, "Connection") == 0) {
      if (has_token(h[i].value, "close")) close = 1;
      continue;
    }
    if (strcasecmp(name, "Content-Length") == 0 || strcasecmp(name, "Transfer-Encoding") == 0)
      continue;
    if (strcasecmp(name, "Date") == 0) has_date = 1;
    e = kb_buf_appendf(b, "%s: %s\r\n", name, h[i].value);
  }
  if (!e && !has_date) e = kb_buf_appendf(b, "Date: %s\r\n", http_date(s));
  double ms = r->timing_ms >= 0 ? r->timing_ms : (double)(uv_hrtime() - r->handed_ns) / 1e6;
  if (!e && s->cfg.server_timing && r->modelled_ms >= 0)
    e = kb_buf_appendf(b, "Server-Timing: %s;dur=%.6f;sim=%.6f\r\n", s->cfg.server_timing, ms,
                       r->modelled_ms);
  else if (!e && s->cfg.server_timing)
    e = kb_buf_appendf(b, "Server-Timing: %s;dur=%.6f\r\n", s->cfg.server_timing, ms);
  if (!e && s->cfg.on_response) s->cfg.on_response(r, status, ms, s->cfg.on_response_ud);
  if (!e && mode == BODY_FIXED) e = kb_buf_appendf(b, "Content-Length: %zu\r\n", len);
  if (!e && mode == BODY_CHUNKED) e = kb_buf_appendf(b, "Transfer-Encoding: chunked\r\n");
  if (!e && close) e = kb_buf_appendf(b, "Connection: close\r\n");
  else if (!e && r->version == 10) e = kb_buf_appendf(b, "Connection: keep-alive\r\n");
  if (!e) e = kb_buf_append(b, "\r\n", 2);
  r->close_after = close;
  return e ? UV_ENOMEM : 0;
}

static int status_has_body(int status) { return status >= 200 && status != 204 && status != 304; }

int kb_httpd_respond(kb_httpd_req *r, int status, const kb_httpd_header *headers, size_t n,
                     const void *body, size_t len) {
  if (req_gone(r)) return req_release_gone(r);
  if (r->state != REQ_HANDLER) return KB_HTTPD_ESTATE;
  if (!valid_response(status, headers, n) || (len && !body)) return KB_HTTPD_EINVAL;
  conn *c = r->conn;
  int with_body = status_has_body(status);
  kb_buf head = KB_BUF_INIT;
  int rc = build_head(&head, r, status, headers, n, with_body ? BODY_FIXED : BODY_NONE, len);
  if (rc) {
    kb_buf_free(&head);
    return rc;
  }
  uv_buf_t bufs[2] = {mkbuf(head.data, head.len), mkbuf(body, len)};
  rc = conn_write(c, bufs, with_body && !r->head_only && len ? 2 : 1);
  kb_buf_free(&head);
  if (rc < 0) {
    c->srv->stats.aborted++;
    conn_close(c);
    return req_release_gone(r);
  }
  req_finish(r);
  return 0;
}

int kb_httpd_stream_begin(kb_httpd_req *r, int status, const kb_httpd_header *headers,
                          size_t n) {
  if (req_gone(r)) {
    if (r->state == REQ_HANDLER) r->state = REQ_STREAMING;
    return KB_HTTPD_EGONE;
  }
  if (r->state != REQ_HANDLER) return KB_HTTPD_ESTATE;
  if (!valid_response(status, headers, n)) return KB_HTTPD_EINVAL;
  body_mode mode = !status_has_body(status) ? BODY_NONE
                   : r->version >= 11      ? BODY_CHUNKED
                                           : BODY_RAW;
  kb_buf head = KB_BUF_INIT;
  int rc = build_head(&head, r, status, headers, n, mode, 0);
  if (rc == 0) rc = conn_write_str(r->conn, head.data, head.len) < 0 ? KB_HTTPD_EGONE : 0;
  kb_buf_free(&head);
  if (rc == UV_ENOMEM) return rc;
  r->state = REQ_STREAMING;
  r->mode = r->head_only ? BODY_NONE : mode;
  if (rc) conn_close(r->conn); /* the abort callback follows */
  return rc;
}

int kb_httpd_stream_write(kb_httpd_req *r, const void *data, size_t len) {
  if (req_gone(r)) return KB_HTTPD_EGONE;
  if (r->state != REQ_STREAMING) return KB_HTTPD_ESTATE;
  if (len == 0 || r->mode == BODY_NONE) return 0;
  char size[24];
  uv_buf_t bufs[3];
  unsigned nb = 0;
  if (r->mode == BODY_CHUNKED) {
    int sl = snprintf(size, sizeof size, "%zx\r\n", len);
    bufs[nb++] = mkbuf(size, (size_t)sl);
  }
  bufs[nb++] = mkbuf(data, len);
  if (r->mode == BODY_CHUNKED) bufs[nb++] = mkbuf("\r\n", 2);
  if (conn_write(r->conn, bufs, nb) < 0) {
    conn_close(r->conn);
    return KB_HTTPD_EGONE;
  }
  return 0;
}

int kb_httpd_stream_end(kb_httpd_req *r) {
  if (req_gone(r)) return req_release_gone(r);
  if (r->state != REQ_STREAMING) return KB_HTTPD_ESTATE;
  conn *c = r->conn;
  if (r->mode == BODY_CHUNKED && conn_write_str(c, "0\r\n\r\n", 5) < 0) {
    c->srv->stats.aborted++;
    conn_close(c);
    return req_release_gone(r);
  }
  req_finish(r);
  return 0;
}

int kb_httpd_reset(kb_httpd_req *r, const void *partial, size_t len) {
  if (req_gone(r)) return req_release_gone(r);
  conn *c = r->conn;
  c->req = NULL;
  req_free(r);
  c->resetting = 1;
  c->in_len = 0;
  c->deadline = uv_now(c->srv->loop) + c->srv->cfg.linger_ms;
  link_remove(&c->ready);
  if (c->reading) {
    uv_read_stop(&c->io.stream);
    c->reading = 0;
  }
  if (len && partial && conn_write_str(c, partial, len) < 0) conn_close(c);
  else if (c->writes == 0) conn_reset_now(c);
  return 0;
}
