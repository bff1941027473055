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

#include "kb/log.h"
#include "http_server_internal.h"

static void conn_shutdown(conn *c);
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

void kb_httpd_req_free(kb_httpd_req *r) {
  kb_buf_free(&r->head);
  kb_buf_free(&r->body);
  free(r->hoff);
  free(r->headers);
  free(r);
}


/* Finishing a request whose client is gone only releases it. */
int kb_httpd_req_release_gone(kb_httpd_req *r) {
  if (r->conn) r->conn->req = NULL; /* its close callback must not abort it */
  kb_httpd_req_free(r);
  return KB_HTTPD_EGONE;
}

/* The owner finished the response and it is queued: the connection moves
 * on to the next request, or closes. */
void kb_httpd_req_finish(kb_httpd_req *r) {
  conn *c = r->conn;
  kb_httpd *s = c->srv;
  int keep = r->keep_alive && !r->close_after && !s->closing;
  c->req = NULL;
  s->stats.responses++;
  kb_httpd_req_free(r);
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
    kb_httpd_conn_close(c);
    return;
  }
  if (c->closing) return;
  if (c->resetting) {
    if (c->writes == 0) kb_httpd_conn_reset_now(c);
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
int kb_httpd_conn_write(conn *c, const uv_buf_t *bufs, unsigned n) {
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

int kb_httpd_conn_write_str(conn *c, const char *s, size_t len) {
  uv_buf_t b = mkbuf(s, len);
  return kb_httpd_conn_write(c, &b, 1);
}

/* ---- closing a connection --------------------------------------------------------------- */

void kb_httpd_conn_close(conn *c) {
  if (c->closing) return;
  c->closing = 1;
  link_remove(&c->ready);
  uv_close(&c->io.handle, conn_on_close);
}

void kb_httpd_conn_reset_now(conn *c) {
  if (c->closing) return;
  c->closing = 1;
  link_remove(&c->ready);
  if (c->is_unix || uv_tcp_close_reset(&c->io.tcp, conn_on_close) != 0)
    uv_close(&c->io.handle, conn_on_close);
}

static void conn_on_shutdown(uv_shutdown_t *sh, int status) {
  conn *c = sh->data;
  if (status < 0) kb_httpd_conn_close(c);
}

static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void conn_on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

static void conn_start_reading(conn *c) {
  if (c->reading || c->closing) return;
  if (uv_read_start(&c->io.stream, conn_alloc, conn_on_read) == 0) c->reading = 1;
  else kb_httpd_conn_close(c);
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
    kb_httpd_conn_close(c);
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
      kb_httpd_req_free(r);
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
      if (kb_httpd_conn_write_str(c, cont, sizeof cont - 1)) return reject(c, 503);
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
    kb_httpd_req_free(c->req);
    c->req = NULL;
  }
  s->stats.rejected++;
  char msg[384];
  int n = snprintf(msg, sizeof msg,
                   "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
                   "Content-Length: %zu\r\nConnection: close\r\n\r\n%s\n",
                   status, http_status_str((enum http_status)status), strlen(why) + 1, why);
  if (kb_httpd_conn_write_str(c, msg, (size_t)n) < 0) kb_httpd_conn_close(c);
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
    kb_httpd_conn_close(c);
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
    kb_httpd_conn_close(c);
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
      if (now >= c->deadline) kb_httpd_conn_reset_now(c);
    } else if (c->lingering) {
      if (now >= c->deadline) kb_httpd_conn_close(c);
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
      kb_httpd_conn_close(c);
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
  kb_httpd_conn_close(c);
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
    kb_httpd_conn_close(c);
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
    kb_httpd_conn_close(container_of(l, conn, all));
}
