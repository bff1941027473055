/* The native HTTP/1.1 path of the HTTP client: plain http:// requests on
 * libuv streams, parsed with http_parser, beside libcurl.
 *
 * libcurl's path costs ~64k instructions a request before any Lua (printf
 * request assembly, URL rebuilding, two poll() calls, per-transfer
 * malloc); a keep-alive loop that writes the request curl would send and
 * parses the answer costs ~10k (docs/design-notes.md "HTTP"). So a
 * request takes this path when it needs nothing only libcurl does: the URL
 * is http:// to an IP literal or a host name (looked up off the loop,
 * http_native_hosts.c) or goes over a Unix socket (the embedded simulator),
 * no proxy, no redirects to follow, no HTTP/2, no compression, no
 * multipart, not a stream. Everything else, and every request when
 * KBRUN_HTTP=curl, stays on libcurl behind the same kb_http_request, and
 * the errors keep curl's texts, so a scenario cannot tell the paths apart.
 *
 * The pool: one http_host per address (a short list: a scenario talks to a
 * handful of servers), each with its idle kept-alive connections, most
 * recently used first. A request takes an idle connection, or opens one
 * while the client's limits allow (max_connections in all,
 * max_host_connections per host), or waits in the client's queue, oldest
 * first, for the next connection to come free or close. A connection that
 * was reused and dies before the first byte of its answer (the server
 * closed it while idle) sends the request again once on a fresh one, as
 * curl does.
 *
 * A connection is a uv stream (TCP or pipe) and a uv timer (the request's
 * timeout and connect timeout, or a failure found while starting, which
 * must not call back from inside kb_http_request_start). Its host
 * bookkeeping ends when it is closed; its memory when libuv has closed
 * both handles, each of which counts in the client's open handles. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_client_internal.h"

#define DEFAULT_CONNECT_TIMEOUT_MS 300000 /* curl's */
#define QUEUE_TICK_MS 50   /* how often waiting requests' timeouts are checked */

typedef enum { CONN_CONNECTING, CONN_BUSY, CONN_IDLE } conn_state;

typedef struct http_conn {
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } io;
  uv_timer_t timer;
  uv_connect_t connect_req;
  uv_write_t write_req;
  kb_http_client *client;
  http_host *host;           /* NULL once closed */
  struct http_conn *next_idle;
  struct http_conn *prev, *next; /* the pool's list of every connection */
  kb_http_request *req;      /* the request on it, or NULL */
  conn_state state;
  int closing;
  int reused;                /* served a request before this one */
  int writing;               /* a uv_write of out is in flight */
  int complete;              /* the answer to req ended (parser paused there) */
  int head_done;             /* its header block has ended */
  int in_value;              /* the parser's last header piece was a value */
  int handles;               /* uv handles not closed yet */
  size_t addr;               /* which of its host's addresses it connects to */
  CURLcode fail_code;        /* a failure found while starting, for the timer */
  http_parser parser;
} http_conn;

static const http_parser_settings parser_settings;
static int dispatch(kb_http_request *r);
static void conn_close(http_conn *k);
static void queue_kick(kb_http_client *c);

/* ---- the pool --------------------------------------------------------------------- */

static void queue_push(http_native_pool *p, kb_http_request *r) {
  r->pnext = NULL;
  if (p->qtail) p->qtail->pnext = r;
  else p->qhead = r;
  p->qtail = r;
}

/* Takes r off the queue; 1 if it was on it. */
static int queue_remove(http_native_pool *p, kb_http_request *r) {
  kb_http_request *prev = NULL;
  for (kb_http_request *q = p->qhead; q; prev = q, q = q->pnext) {
    if (q != r) continue;
    if (prev) prev->pnext = q->pnext;
    else p->qhead = q->pnext;
    if (p->qtail == q) p->qtail = prev;
    q->pnext = NULL;
    if (!p->qhead) uv_timer_stop(&p->queue_timer);
    return 1;
  }
  return 0;
}

static int host_full(const http_native_pool *p, const http_host *h) {
  return p->max_host_conns > 0 && h->nconns >= (size_t)p->max_host_conns;
}

/* The oldest waiting request that can go now: its host has an idle
 * connection, or an address and room for a new one within both limits. */
static kb_http_request *queue_take(http_native_pool *p) {
  for (kb_http_request *q = p->qhead; q; q = q->pnext) {
    int fits = (q->host->idle && !q->native_fresh) ||
               (q->host->naddrs > 0 && !host_full(p, q->host) && p->nconns < (size_t)p->max_conns);
    if (!fits) continue;
    queue_remove(p, q);
    return q;
  }
  return NULL;
}

static void idle_remove(http_conn *k) {
  http_conn **pp = &k->host->idle;
  while (*pp && *pp != k) pp = &(*pp)->next_idle;
  if (*pp) *pp = k->next_idle;
  k->next_idle = NULL;
}

/* Room for one more connection: the least useful idle one of another
 * host goes (curl closes its oldest cached connection). */
static int make_room(kb_http_client *c, const http_host *for_host) {
  for (http_host *h = c->native.hosts; h; h = h->next) {
    if (h == for_host || !h->idle) continue;
    http_conn *k = h->idle;
    while (k->next_idle) k = k->next_idle; /* the oldest */
    conn_close(k);
    return 1;
  }
  return 0;
}

/* ---- finishing -------------------------------------------------------------------- */

/* Only a connection with a request keeps the loop running: an idle one
 * (or one still connecting for a cancelled request) does not, as curl's
 * cached connections do not. */
static void conn_keeps_loop(http_conn *k, int yes) {
  if (yes) {
    uv_ref(&k->io.handle);
    uv_ref((uv_handle_t *)&k->timer);
  } else {
    uv_unref(&k->io.handle);
    uv_unref((uv_handle_t *)&k->timer);
  }
}

static double ms_since(uint64_t t0) { return (double)(uv_hrtime() - t0) / 1e6; }

/* r->native stays set until the request is released: the response is
 * filled from the native fields. */
static void finish(kb_http_request *r, CURLcode rc) { kb__http_finish_guarded(r, rc); }

/* Takes r off its connection, which goes back to the pool (keep) or is
 * closed. */
static void detach(http_conn *k, int keep) {
  kb_http_request *r = k->req;
  kb_http_client *c = k->client;
  if (r) r->conn = NULL;
  k->req = NULL;
  k->fail_code = CURLE_OK;
  uv_timer_stop(&k->timer);
  if (!keep || k->closing || c->closing || !k->host) {
    conn_close(k);
    return;
  }
  k->state = CONN_IDLE;
  k->next_idle = k->host->idle;
  k->host->idle = k;
  conn_keeps_loop(k, 0);
  if (c->native.qhead) queue_kick(c); /* a waiting request may take it */
}

static void fail(http_conn *k, CURLcode rc) {
  kb_http_request *r = k->req;
  if (!r) {
    conn_close(k);
    return;
  }
  /* A kept-alive connection the server had closed: once more, afresh. */
  int dead_on_reuse = k->reused && !r->t_first &&
                      (rc == CURLE_RECV_ERROR || rc == CURLE_SEND_ERROR || rc == CURLE_GOT_NOTHING);
  detach(k, 0);
  if (dead_on_reuse && !r->native_retried) {
    r->native_retried = r->native_fresh = 1;
    r->errbuf[0] = '\0';
    if (dispatch(r) == 0) return;
    rc = CURLE_OUT_OF_MEMORY;
  }
  finish(r, rc);
}

static void fail_errno(http_conn *k, CURLcode rc, const char *what, int uverr) {
  kb_http_request *r = k->req;
  if (r) snprintf(r->errbuf, sizeof r->errbuf, "%s: %s", what, uv_strerror(uverr));
  fail(k, rc);
}

static void on_conn_timer(uv_timer_t *t);

/* A failure found where no callback may run (inside
 * kb_http_request_start, or while another request finishes): reported
 * from the connection's timer on the next loop turn. */
static void fail_later(http_conn *k, CURLcode rc) {
  k->fail_code = rc;
  uv_timer_start(&k->timer, on_conn_timer, 0, 0);
}

/* ---- connections ------------------------------------------------------------------ */

static void on_conn_closed(uv_handle_t *h) {
  http_conn *k = h->data;
  if (--k->handles > 0) return;
  kb_http_client *c = k->client;
  free(k);
  kb__http_handle_closed(c);
  kb__http_handle_closed(c);
}

static void conn_close(http_conn *k) {
  if (k->closing) return;
  k->closing = 1;
  kb_http_client *c = k->client;
  if (k->host) {
    if (k->state == CONN_IDLE) idle_remove(k);
    k->host->nconns--;
    c->native.nconns--;
    k->host = NULL;
  }
  if (k->prev) k->prev->next = k->next;
  else c->native.conns = k->next;
  if (k->next) k->next->prev = k->prev;
  k->prev = k->next = NULL;
  if (k->req) k->req->conn = NULL;
  k->req = NULL;
  uv_close(&k->io.handle, on_conn_closed);
  uv_close((uv_handle_t *)&k->timer, on_conn_closed);
  if (!c->closing && c->native.qhead) queue_kick(c); /* its place is free */
}

/* The milliseconds left of r's own timeout on the real clock: 0 once it
 * has passed, UINT64_MAX when it has none. */
static uint64_t request_left_ms(const kb_http_request *r, uint64_t now) {
  if (!r->timeout_ms || r->clock_timeout) return UINT64_MAX;
  uint64_t spent = (now - r->t_start) / 1000000;
  return spent >= r->timeout_ms ? 0 : r->timeout_ms - spent;
}

/* The request's remaining time on the real clock (0: none), or while
 * connecting the connect timeout's if that comes first. The connect
 * timeout counts from the first address's connect; an address with others
 * after it gets half of what is left, as curl gives it, so a name whose
 * first address never answers still reaches the next. */
static uint64_t timer_ms(const http_conn *k) {
  const kb_http_request *r = k->req;
  uint64_t now = uv_hrtime(), left = request_left_ms(r, now);
  if (left == 0) left = 1; /* passed: fire at once */
  if (k->state == CONN_CONNECTING) {
    uint64_t ct = r->connect_timeout_ms ? r->connect_timeout_ms : DEFAULT_CONNECT_TIMEOUT_MS;
    uint64_t spent = (now - r->connect_t0) / 1000000;
    ct = spent >= ct ? 1 : ct - spent;
    if (r->native_tries + 1 < k->host->naddrs && ct > 1) ct /= 2;
    if (ct < left) left = ct;
  }
  return left == UINT64_MAX ? 0 : left;
}

/* The timer counts from the loop's time, which is the time of its last
 * wakeup: after a long callback (a scenario's Lua between two waits) it is
 * behind, and a timeout would end that much early. It is brought up to now
 * first (a clock read); libcurl measures its own timeouts the same way. */
static void arm_timer(http_conn *k) {
  uint64_t ms = timer_ms(k);
  if (ms) {
    uv_update_time(k->client->loop);
    uv_timer_start(&k->timer, on_conn_timer, ms, 0);
  } else {
    uv_timer_stop(&k->timer);
  }
}

static void on_write(uv_write_t *w, int status) {
  http_conn *k = w->data;
  k->writing = 0;
  if (status == UV_ECANCELED || k->closing) return;
  if (status < 0) fail_errno(k, CURLE_SEND_ERROR, "Send failure", status);
}

/* The whole request in one write: uv_try_write first (no request object,
 * no wait for the next loop turn), the rest, if the socket is full, by
 * uv_write from the request's wire buffer, which stays put until the
 * request is released, and a released request's connection is closed
 * first (libuv then writes nothing more of it). Failures are reported
 * later: this runs inside kb_http_request_start too. */
static void send_request(http_conn *k) {
  kb_http_request *r = k->req;
  http_parser_init(&k->parser, HTTP_RESPONSE);
  k->parser.data = k;
  k->complete = k->head_done = k->in_value = 0;
  r->native_status = 0;
  r->resp_headers.len = 0;
  r->resp_body.len = 0;
  arm_timer(k);
  uv_buf_t buf = uv_buf_init(r->wire.data, (unsigned)r->wire.len);
  int n = uv_try_write(&k->io.stream, &buf, 1);
  if (n == (int)r->wire.len) return;
  if (n < 0 && n != UV_EAGAIN) {
    snprintf(r->errbuf, sizeof r->errbuf, "Send failure: %s", uv_strerror(n));
    fail_later(k, CURLE_SEND_ERROR);
    return;
  }
  if (n > 0) buf = uv_buf_init(r->wire.data + n, (unsigned)(r->wire.len - (size_t)n));
  k->write_req.data = k;
  int rc = uv_write(&k->write_req, &k->io.stream, &buf, 1, on_write);
  if (rc != 0) {
    snprintf(r->errbuf, sizeof r->errbuf, "Send failure: %s", uv_strerror(rc));
    fail_later(k, CURLE_SEND_ERROR);
    return;
  }
  k->writing = 1;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  http_conn *k = h->data;
  (void)suggested;
  buf->base = k->client->native.rbuf;
  buf->len = sizeof k->client->native.rbuf;
}

/* The stream ended (EOF or an error) while an answer was awaited. */
static void on_stream_end(http_conn *k, ssize_t nread) {
  kb_http_request *r = k->req;
  if (nread != UV_EOF) {
    fail_errno(k, CURLE_RECV_ERROR, "Recv failure", (int)nread);
    return;
  }
  /* A body that ends with the connection ends now. */
  if (r->t_first) http_parser_execute(&k->parser, &parser_settings, NULL, 0);
  if (k->complete) {
    detach(k, 0);
    finish(r, CURLE_OK);
    return;
  }
  if (!r->t_first) {
    snprintf(r->errbuf, sizeof r->errbuf, "Empty reply from server");
    fail(k, CURLE_GOT_NOTHING);
  } else if (k->head_done && !(k->parser.flags & F_CHUNKED) &&
             k->parser.content_length != ULLONG_MAX) {
    snprintf(r->errbuf, sizeof r->errbuf, "transfer closed with %llu bytes remaining to read",
             (unsigned long long)k->parser.content_length);
    fail(k, CURLE_PARTIAL_FILE);
  } else {
    snprintf(r->errbuf, sizeof r->errbuf, "transfer closed with outstanding read data remaining");
    fail(k, CURLE_PARTIAL_FILE);
  }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  http_conn *k = s->data;
  if (nread == 0 || k->closing) return;
  kb_http_request *r = k->req;
  if (!r || k->fail_code != CURLE_OK) {
    /* Idle: the server closed it, or sent what nobody asked for. (Or a
     * failure is already on its way.) */
    if (!r) conn_close(k);
    return;
  }
  if (nread < 0) {
    on_stream_end(k, nread);
    return;
  }
  if (!r->t_first) r->t_first = uv_hrtime();
  size_t n = http_parser_execute(&k->parser, &parser_settings, buf->base, (size_t)nread);
  if (k->complete) {
    /* Bytes past the answer were not asked for: the connection goes. */
    int keep = n == (size_t)nread && !k->writing && http_should_keep_alive(&k->parser);
    detach(k, keep);
    finish(r, CURLE_OK);
    return;
  }
  enum http_errno e = HTTP_PARSER_ERRNO(&k->parser);
  if (e == HPE_OK) return;
  if (r->body_too_large) {
    fail(k, CURLE_WRITE_ERROR);
    return;
  }
  snprintf(r->errbuf, sizeof r->errbuf, "Invalid HTTP response: %s", http_errno_description(e));
  fail(k, CURLE_WEIRD_SERVER_REPLY);
}

/* libcurl 7.88's words for a connect that failed (rc says why). */
static void connect_failed(http_conn *k, kb_http_request *r, CURLcode rc) {
  char where[300];
  kb__http_host_peer(k->host, where, sizeof where);
  snprintf(r->errbuf, sizeof r->errbuf, "Failed to connect to %.180s after %.0f ms: %s", where,
           ms_since(r->t_start), curl_easy_strerror(rc));
}

static int conn_open(kb_http_client *c, http_host *h, kb_http_request *r);

/* A connect to one of several addresses failed: r goes on to the next on
 * a new connection, as curl tries each address of a name. 1 if it did. */
static int next_address(http_conn *k, kb_http_request *r) {
  http_host *h = k->host;
  if (r->native_tries + 1 >= h->naddrs) return 0;
  r->native_tries++;
  r->native_addr = k->addr + 1;
  k->req = NULL;
  r->conn = NULL;
  conn_close(k);
  if (conn_open(r->client, h, r) == 0) return 1;
  snprintf(r->errbuf, sizeof r->errbuf, "Out of memory");
  finish(r, CURLE_OUT_OF_MEMORY);
  return 1;
}

static void on_connect(uv_connect_t *creq, int status) {
  http_conn *k = creq->data;
  if (status == UV_ECANCELED || k->closing) return;
  kb_http_request *r = k->req;
  if (status < 0) {
    if (r && next_address(k, r)) return;
    if (r) {
      connect_failed(k, r, CURLE_COULDNT_CONNECT);
      r->sock_errno = -status;
    }
    fail(k, CURLE_COULDNT_CONNECT);
    return;
  }
  k->host->preferred = k->addr; /* new connections start here */
  int rc = uv_read_start(&k->io.stream, on_alloc, on_read);
  if (!r) { /* its request is gone (cancelled): the connection waits for the next */
    if (rc == 0) detach(k, 1);
    else conn_close(k);
    return;
  }
  if (rc != 0) {
    fail_errno(k, CURLE_RECV_ERROR, "Recv failure", rc);
    return;
  }
  r->connect_ns = uv_hrtime() - r->t_start;
  k->state = CONN_BUSY;
  send_request(k);
}

static void on_conn_timer(uv_timer_t *t) {
  http_conn *k = t->data;
  kb_http_request *r = k->req;
  if (k->closing) return;
  if (!r) {
    conn_close(k);
    return;
  }
  if (k->fail_code != CURLE_OK) {
    CURLcode rc = k->fail_code;
    k->fail_code = CURLE_OK;
    fail(k, rc);
    return;
  }
  if (k->state == CONN_CONNECTING) {
    /* its address's share of the connect timeout: on to the next one,
     * unless the request's own timeout is what ended */
    if (request_left_ms(r, uv_hrtime()) > 0 && next_address(k, r)) return;
    connect_failed(k, r, CURLE_OPERATION_TIMEDOUT);
  } else {
    snprintf(r->errbuf, sizeof r->errbuf, "Operation timed out after %.0f milliseconds with "
             "%zu bytes received", ms_since(r->t_start), r->resp_body.len);
  }
  fail(k, CURLE_OPERATION_TIMEDOUT);
}

/* A new connection for r, within the limits. 0, or -ENOMEM (r untouched). */
static int conn_open(kb_http_client *c, http_host *h, kb_http_request *r) {
  http_conn *k = calloc(1, sizeof *k);
  if (!k) return -ENOMEM;
  int rc = h->path ? uv_pipe_init(c->loop, &k->io.pipe, 0) : uv_tcp_init(c->loop, &k->io.tcp);
  if (rc != 0) {
    free(k);
    return -ENOMEM;
  }
  uv_timer_init(c->loop, &k->timer);
  k->io.handle.data = k->timer.data = k;
  k->handles = 2;
  c->open_handles += 2;
  k->client = c;
  k->host = h;
  k->state = CONN_CONNECTING;
  h->nconns++;
  c->native.nconns++;
  k->next = c->native.conns;
  if (k->next) k->next->prev = k;
  c->native.conns = k;
  k->req = r;
  r->conn = k;
  k->addr = h->naddrs ? r->native_addr % h->naddrs : 0;
  if (r->native_tries == 0) r->connect_t0 = uv_hrtime();
  k->connect_req.data = k;
  if (h->path) {
    uv_pipe_connect(&k->connect_req, &k->io.pipe, h->path, on_connect); /* errors: on_connect */
  } else if ((rc = uv_tcp_connect(&k->connect_req, &k->io.tcp,
                                  (const struct sockaddr *)&h->addrs[k->addr], on_connect)) != 0) {
    r->sock_errno = -rc; /* socket() failed: EMFILE, ENOBUFS... */
    snprintf(r->errbuf, sizeof r->errbuf, "Failed to open a socket: %s", uv_strerror(rc));
    fail_later(k, CURLE_COULDNT_CONNECT);
    return 0;
  } else {
    uv_tcp_nodelay(&k->io.tcp, 1);
  }
  arm_timer(k);
  return 0;
}

/* Puts r on an idle connection, a new one, or in the queue. Never calls
 * back. 0, or -ENOMEM (r untouched). */
static int dispatch(kb_http_request *r) {
  kb_http_client *c = r->client;
  http_native_pool *p = &c->native;
  http_host *h = r->host;
  if (!r->native_fresh && h->idle) {
    http_conn *k = h->idle;
    h->idle = k->next_idle;
    k->next_idle = NULL;
    k->reused = 1;
    k->req = r;
    r->conn = k;
    k->state = CONN_BUSY;
    conn_keeps_loop(k, 1);
    send_request(k);
    return 0;
  }
  if (h->name && (h->naddrs == 0 || kb__http_host_stale(c, h))) {
    /* a lookup that cannot start leaves h without one: the queue's timer
     * then fails what waits for it */
    kb__http_host_resolve(c, h);
    if (h->naddrs == 0) { /* it waits for the answer (kb__http_native_resolved) */
      r->native_lookup = 1;
      queue_push(p, r);
      queue_kick(c);
      return 0;
    }
  }
  r->native_addr = h->preferred;
  r->native_tries = 0;
  if (!host_full(p, h) && p->nconns >= (size_t)p->max_conns) make_room(c, h);
  if (!host_full(p, h) && p->nconns < (size_t)p->max_conns) return conn_open(c, h, r);
  queue_push(p, r);
  queue_kick(c);
  return 0;
}

/* Ends q, which waited for its host's lookup, in libcurl's words. */
static void resolve_failed(kb_http_request *q) {
  snprintf(q->errbuf, sizeof q->errbuf, "Could not resolve host: %.200s", q->host->name);
  finish(q, CURLE_COULDNT_RESOLVE_HOST);
}

void kb__http_native_resolved(kb_http_client *c, http_host *h, int ok) {
  http_native_pool *p = &c->native;
  uint64_t now = uv_hrtime();
  for (kb_http_request *q = p->qhead, *next; q; q = next) {
    next = q->pnext;
    if (q->host != h || !q->native_lookup) continue;
    q->native_lookup = 0;
    q->dns_ns = now - q->t_start;
    if (ok) continue;
    queue_remove(p, q);
    resolve_failed(q);
    if (c->closing) return;
    next = p->qhead; /* the callback may have cancelled any of them */
  }
  if (ok && p->qhead) queue_kick(c);
}

/* ---- the queue --------------------------------------------------------------------- */

/* Serves what waits, as far as the limits allow, and fails what waited
 * past its timeout; again in QUEUE_TICK_MS while anything waits. */
static void on_queue_timer(uv_timer_t *t) {
  kb_http_client *c = t->data;
  http_native_pool *p = &c->native;
  uint64_t now = uv_hrtime();
  for (kb_http_request *q = p->qhead, *next; q; q = next) {
    next = q->pnext;
    http_host *h = q->host;
    int unresolvable = h->naddrs == 0 && !h->lookup;
    if (!unresolvable &&
        (!q->timeout_ms || q->clock_timeout || (now - q->t_start) / 1000000 < q->timeout_ms))
      continue;
    queue_remove(p, q);
    if (unresolvable) { /* its lookup could not start */
      resolve_failed(q);
      if (c->closing) return;
      next = p->qhead;
      continue;
    }
    if (h->naddrs == 0) /* still waiting for its host's lookup */
      snprintf(q->errbuf, sizeof q->errbuf, "Resolving timed out after %.0f milliseconds",
               ms_since(q->t_start));
    else
      snprintf(q->errbuf, sizeof q->errbuf, "Operation timed out after %.0f milliseconds with 0 "
               "bytes received", ms_since(q->t_start));
    finish(q, CURLE_OPERATION_TIMEDOUT);
    if (c->closing) return;
    next = p->qhead; /* the callback may have cancelled any of them */
  }
  kb_http_request *q;
  while ((q = queue_take(p)) && dispatch(q) == 0) {}
  if (q) queue_push(p, q); /* out of memory: it waits on */
  if (p->qhead) uv_timer_start(&p->queue_timer, on_queue_timer, QUEUE_TICK_MS, 0);
}

static void queue_kick(kb_http_client *c) {
  uv_timer_start(&c->native.queue_timer, on_queue_timer, 0, 0);
}

/* ---- the parser's callbacks ---------------------------------------------------------- */

static int on_message_begin(http_parser *p) {
  http_conn *k = p->data;
  kb_http_request *r = k->req;
  /* A new answer (after a 1xx): only the final one's headers count. */
  r->resp_headers.len = 0;
  r->resp_body.len = 0;
  k->head_done = k->in_value = 0;
  return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len) {
  http_conn *k = p->data;
  kb_buf *b = &k->req->resp_headers;
  if (k->in_value && kb_buf_append(b, "\r\n", 2) != 0) return 1;
  k->in_value = 0;
  return kb_buf_append(b, at, len) != 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len) {
  http_conn *k = p->data;
  kb_buf *b = &k->req->resp_headers;
  if (!k->in_value && kb_buf_append(b, ": ", 2) != 0) return 1;
  k->in_value = 1;
  return kb_buf_append(b, at, len) != 0;
}

static int on_headers_complete(http_parser *p) {
  http_conn *k = p->data;
  kb_http_request *r = k->req;
  if (k->in_value && kb_buf_append(&r->resp_headers, "\r\n", 2) != 0) return -1;
  k->in_value = 0;
  k->head_done = 1;
  r->native_status = p->status_code;
  r->native_version = p->http_major * 10 + p->http_minor;
  /* 1: the answer to a HEAD has no body, whatever Content-Length says */
  return strcmp(r->method, "HEAD") == 0 && p->status_code >= 200;
}

static int on_body(http_parser *p, const char *at, size_t len) {
  http_conn *k = p->data;
  kb_http_request *r = k->req;
  if (r->max_body && len > r->max_body - r->resp_body.len) {
    r->body_too_large = 1;
    return 1;
  }
  return kb_buf_append(&r->resp_body, at, len) != 0;
}

static int on_message_complete(http_parser *p) {
  http_conn *k = p->data;
  if (p->status_code < 200) return 0; /* 100 Continue and friends: the answer follows */
  k->complete = 1;
  http_parser_pause(p, 1); /* what follows is not this answer's */
  return 0;
}

static const http_parser_settings parser_settings = {
  .on_message_begin = on_message_begin,
  .on_header_field = on_header_field,
  .on_header_value = on_header_value,
  .on_headers_complete = on_headers_complete,
  .on_body = on_body,
  .on_message_complete = on_message_complete,
};

/* ---- the client's entry points -------------------------------------------------------- */

int kb__http_native_start(kb_http_request *r) {
  http_url u;
  if (!kb__http_native_route(r, &u)) return 0;
  http_host *h = kb__http_host_get(r->client, &u, r->unix_path.len ? r->unix_path.data : NULL);
  if (!h || kb__http_native_build(r, &u, &r->wire) != 0) return -ENOMEM;
  r->host = h;
  r->conn = NULL;
  r->native_retried = r->native_fresh = 0;
  r->t_first = r->connect_ns = r->dns_ns = 0;
  r->native_lookup = 0;
  int rc = dispatch(r);
  if (rc != 0) return rc;
  r->native = 1;
  return 1;
}

void kb__http_native_cancel(kb_http_request *r) {
  http_native_pool *p = &r->client->native;
  if (queue_remove(p, r)) return;
  http_conn *k = r->conn;
  if (!k) return;
  if (k->state == CONN_CONNECTING && k->fail_code == CURLE_OK) {
    /* The connect goes on (its timer too): the connection serves the
     * next request. */
    k->req = NULL;
    r->conn = NULL;
    conn_keeps_loop(k, 0);
    return;
  }
  conn_close(k); /* mid-answer: the connection cannot be reused */
}

void kb__http_native_abort(kb_http_request *r, CURLcode rc) {
  kb__http_native_cancel(r);
  finish(r, rc);
}

void kb__http_native_timings(const kb_http_request *r, kb_http_timings *t) {
  uint64_t now = uv_hrtime();
  t->total = (double)(now - r->t_start) / 1e9;
  t->dns = (double)r->dns_ns / 1e9;
  t->tls = 0;
  t->connect = (double)r->connect_ns / 1e9;
  t->ttfb = r->t_first ? (double)(r->t_first - r->t_start) / 1e9 : 0.0;
}

static void on_queue_timer_closed(uv_handle_t *h) { kb__http_handle_closed(h->data); }

void kb__http_native_init(kb_http_client *c, long max_conns, long max_host_conns) {
  http_native_pool *p = &c->native;
  const char *mode = getenv("KBRUN_HTTP");
  p->off = mode && strcmp(mode, "curl") == 0;
  p->max_conns = max_conns;
  p->max_host_conns = max_host_conns;
  uv_timer_init(c->loop, &p->queue_timer);
  p->queue_timer.data = c;
  uv_unref((uv_handle_t *)&p->queue_timer); /* waiting requests keep the loop alive already */
  c->open_handles++;
}

void kb__http_native_close(kb_http_client *c) {
  http_native_pool *p = &c->native;
  while (p->conns) conn_close(p->conns);
  kb__http_hosts_free(c);
  uv_close((uv_handle_t *)&p->queue_timer, on_queue_timer_closed);
}
