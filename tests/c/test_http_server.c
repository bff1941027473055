/* Tests of the HTTP/1.1 server (src/net/http_server.c).
 *
 * The server runs on a libuv loop in the main thread; each test's client
 * runs on a second thread with plain blocking sockets (10 s receive timeout)
 * and a response parser, so it sees exactly the bytes the server sends.
 * Client threads do their own checks while the main thread only runs the
 * loop; the main thread checks the server side after joining. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <http_parser.h>
#include <uv.h>

#include "kb/buf.h"
#include "kb/http_server.h"
#include "kb/log.h"
#include "kbtest.h"

#include <fcntl.h>
#include <poll.h>

#define BIG_LEN (4 * 1024 * 1024)
#define DRAIN_LEN (8 * 1024 * 1024)

/* ---- the server side ------------------------------------------------------------ */

typedef struct env {
  uv_loop_t loop;
  kb_httpd *srv;
  uv_async_t done;
  int port;
  void (*client)(struct env *);
  kb_httpd_stats stats;  /* when the client finished */
  int closed;            /* the closed callback ran */
  int aborts;            /* abort callbacks (atomic: the client polls it) */
  int abort_release;     /* what finishing an aborted request returned */
  int drained;           /* the drain callback ran */
  int api[8];            /* return codes seen by the /api handler */
  char *big;             /* the /big and /drain body */
} env;

typedef struct job {
  uv_timer_t timer;
  kb_httpd_req *req;
  env *e;
  int step;
  int gone;
} job;

static void job_free(uv_handle_t *h) { free(h->data); }

static job *job_new(env *e, kb_httpd_req *req, uv_timer_cb cb, uint64_t ms, uint64_t repeat) {
  job *j = calloc(1, sizeof *j);
  j->req = req;
  j->e = e;
  uv_timer_init(&e->loop, &j->timer);
  j->timer.data = j;
  uv_timer_start(&j->timer, cb, ms, repeat);
  return j;
}

static void on_async_timer(uv_timer_t *t) {
  job *j = t->data;
  char body[128];
  snprintf(body, sizeof body, "async:%s", kb_httpd_req_query(j->req));
  kb_httpd_respond(j->req, 200, NULL, 0, body, strlen(body));
  uv_close((uv_handle_t *)t, job_free);
}

static void on_stream_abort(kb_httpd_req *req, void *ud) {
  job *j = ud;
  j->gone = 1;
}

static void on_stream_timer(uv_timer_t *t) {
  job *j = t->data;
  static const char *const parts[] = {"two", "three"};
  if (j->gone || j->step == 2) {
    kb_httpd_stream_end(j->req);
    uv_close((uv_handle_t *)t, job_free);
    return;
  }
  kb_httpd_stream_write(j->req, parts[j->step], strlen(parts[j->step]));
  j->step++;
}

static void on_watch_timer(uv_timer_t *t) {
  job *j = t->data;
  if (j->gone || j->step == 8) {
    kb_httpd_stream_end(j->req);
    uv_close((uv_handle_t *)t, job_free);
    return;
  }
  char part[16];
  snprintf(part, sizeof part, "event%d;", j->step++);
  kb_httpd_stream_write(j->req, part, strlen(part));
}

static void on_hang_abort(kb_httpd_req *req, void *ud) {
  env *e = ud;
  e->abort_release = kb_httpd_respond(req, 200, NULL, 0, "late", 4);
  __atomic_add_fetch(&e->aborts, 1, __ATOMIC_SEQ_CST);
}

static void on_drain(kb_httpd_req *req, void *ud) {
  env *e = ud;
  e->drained++;
  kb_httpd_stream_write(req, "end", 3);
  kb_httpd_stream_end(req);
}

/* Misuses of the API; the codes go to e->api, then a normal response. */
static void handle_api(env *e, kb_httpd_req *req) {
  kb_httpd_header crlf[] = {{"X-Bad", "a\r\nInjected: 1"}};
  kb_httpd_header colon[] = {{"X:Bad", "v"}};
  e->api[0] = kb_httpd_respond(req, 42, NULL, 0, "", 0);
  e->api[1] = kb_httpd_respond(req, 200, crlf, 1, "", 0);
  e->api[2] = kb_httpd_respond(req, 200, colon, 1, "", 0);
  e->api[3] = kb_httpd_stream_write(req, "x", 1);
  e->api[4] = kb_httpd_stream_end(req);
  e->api[5] = kb_httpd_stream_begin(req, 200, NULL, 0);
  e->api[6] = kb_httpd_respond(req, 200, NULL, 0, "x", 1);
  e->api[7] = kb_httpd_stream_end(req);
}

static void handler(kb_httpd_req *req, void *ud) {
  env *e = ud;
  const char *path = kb_httpd_req_path(req);
  if (strcmp(path, "/echo") == 0) {
    char ver[8], count[16];
    snprintf(ver, sizeof ver, "%d", kb_httpd_req_version(req));
    snprintf(count, sizeof count, "%zu", kb_httpd_req_header_count(req));
    const char *test = kb_httpd_req_header(req, "x-TEST");
    const char *empty = kb_httpd_req_header(req, "X-Empty");
    char emptyv[32];
    snprintf(emptyv, sizeof emptyv, "[%s]", empty ? empty : "(none)");
    const kb_httpd_header *first = kb_httpd_req_header_at(req, 0);
    kb_httpd_header h[] = {
      {"X-Method", kb_httpd_req_method(req)},
      {"X-Target", kb_httpd_req_target(req)},
      {"X-Query", kb_httpd_req_query(req)},
      {"X-Version", ver},
      {"X-Count", count},
      {"X-Test", test ? test : "(none)"},
      {"X-First", first ? first->name : "(none)"},
      {"X-Empty", emptyv},
      {"X-Remote", kb_httpd_req_remote(req)},
      {"Content-Length", "999"}, /* the server's own wins */
    };
    size_t len;
    const char *body = kb_httpd_req_body(req, &len);
    kb_httpd_respond(req, 200, h, sizeof h / sizeof h[0], body, len);
  } else if (strcmp(path, "/fixed") == 0) {
    kb_httpd_header h[] = {{"Content-Type", "text/plain"},
                           {"Date", "Thu, 01 Jan 1970 00:00:00 GMT"}};
    kb_httpd_respond(req, 200, h, 2, "0123456789", 10);
  } else if (strcmp(path, "/nocontent") == 0) {
    kb_httpd_respond(req, 204, NULL, 0, "ignored", 7);
  } else if (strcmp(path, "/async") == 0) {
    job_new(e, req, on_async_timer, 30, 0);
  } else if (strcmp(path, "/stream") == 0) {
    kb_httpd_header h[] = {{"Content-Type", "text/plain"}};
    kb_httpd_stream_begin(req, 200, h, 1);
    kb_httpd_stream_write(req, "one", 3);
    kb_httpd_stream_write(req, "", 0); /* must not end the stream */
    job *j = job_new(e, req, on_stream_timer, 10, 10);
    kb_httpd_req_on_abort(req, on_stream_abort, j);
  } else if (strcmp(path, "/reset") == 0) {
    static const char partial[] = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc";
    kb_httpd_reset(req, partial, sizeof partial - 1);
  } else if (strcmp(path, "/hang") == 0) {
    kb_httpd_req_on_abort(req, on_hang_abort, e);
  } else if (strcmp(path, "/close") == 0) {
    kb_httpd_header h[] = {{"Connection", "Close"}};
    kb_httpd_respond(req, 200, h, 1, "bye", 3);
  } else if (strcmp(path, "/big") == 0) {
    kb_httpd_respond(req, 200, NULL, 0, e->big, BIG_LEN);
  } else if (strcmp(path, "/drain") == 0) {
    kb_httpd_stream_begin(req, 200, NULL, 0);
    kb_httpd_stream_write(req, e->big, DRAIN_LEN);
    if (kb_httpd_req_write_queue(req) == 0 || kb_httpd_req_on_drain(req, on_drain, e) != 1)
      on_drain(req, e); /* the kernel took it all: nothing to wait for */
  } else if (strcmp(path, "/watch") == 0) { /* a chunk every 100 ms, 8 of them */
    kb_httpd_stream_begin(req, 200, NULL, 0);
    job *j = job_new(e, req, on_watch_timer, 100, 100);
    kb_httpd_req_on_abort(req, on_stream_abort, j);
  } else if (strcmp(path, "/api") == 0) {
    handle_api(e, req);
  } else {
    kb_httpd_respond(req, 404, NULL, 0, "not found\n", 10);
  }
}

static void on_closed(kb_httpd *srv, void *ud) {
  env *e = ud;
  e->closed++;
}

static void on_done(uv_async_t *a) {
  env *e = a->data;
  kb_httpd_get_stats(e->srv, &e->stats);
  kb_httpd_close(e->srv, on_closed, e);
  uv_close((uv_handle_t *)a, NULL);
}

static void *client_main(void *arg) {
  env *e = arg;
  e->client(e);
  uv_async_send(&e->done);
  return NULL;
}

/* Runs a server with cfg and the client on its thread until the client is
 * done, then closes the server and checks that everything was released. */
static void run(env *e, const kb_httpd_config *cfg, void (*client)(env *)) {
  KB_CHECK(uv_loop_init(&e->loop) == 0);
  e->srv = kb_httpd_new(&e->loop, cfg, handler, e);
  KB_CHECK(e->srv != NULL);
  KB_CHECK(kb_httpd_listen(e->srv, "127.0.0.1", 0) == 0);
  e->port = kb_httpd_port(e->srv);
  KB_CHECK(e->port > 0);
  e->client = client;
  uv_async_init(&e->loop, &e->done, on_done);
  e->done.data = e;
  pthread_t th;
  pthread_create(&th, NULL, client_main, e);
  uv_run(&e->loop, UV_RUN_DEFAULT);
  pthread_join(th, NULL);
  KB_CHECK(e->closed == 1);
  KB_CHECK(uv_loop_close(&e->loop) == 0);
}

/* ---- the client side ---------------------------------------------------------------- */

typedef struct resp {
  int status;
  kb_buf headers; /* "name: value\n", names lower-cased */
  kb_buf body;
} resp;

#define MAX_RESP 8

typedef struct client {
  int fd;
  http_parser p;
  resp r[MAX_RESP];
  int n;         /* complete responses */
  int head;      /* the next response answers a HEAD request */
  int in_value;
  int eof;       /* 1: clean EOF seen; < 0: -errno of a failed read */
} client;

static int c_on_field(http_parser *p, const char *at, size_t len) {
  client *c = p->data;
  kb_buf *h = &c->r[c->n].headers;
  if (c->in_value) kb_buf_putc(h, '\n');
  c->in_value = 0;
  for (size_t i = 0; i < len; i++)
    kb_buf_putc(h, (char)(at[i] >= 'A' && at[i] <= 'Z' ? at[i] + 32 : at[i]));
  return 0;
}

static int c_on_value(http_parser *p, const char *at, size_t len) {
  client *c = p->data;
  kb_buf *h = &c->r[c->n].headers;
  if (!c->in_value) kb_buf_append(h, ": ", 2);
  c->in_value = 1;
  kb_buf_append(h, at, len);
  return 0;
}

static int c_on_headers(http_parser *p) {
  client *c = p->data;
  if (c->in_value) kb_buf_putc(&c->r[c->n].headers, '\n');
  c->in_value = 0;
  c->r[c->n].status = p->status_code;
  return c->head && p->status_code >= 200 ? 1 : 0; /* 1: no body follows */
}

static int c_on_body(http_parser *p, const char *at, size_t len) {
  client *c = p->data;
  kb_buf_append(&c->r[c->n].body, at, len);
  return 0;
}

static int c_on_complete(http_parser *p) {
  client *c = p->data;
  if (c->r[c->n].status >= 200) c->head = 0;
  if (c->n < MAX_RESP - 1) c->n++;
  return 0;
}

static const http_parser_settings client_settings = {
  .on_header_field = c_on_field,
  .on_header_value = c_on_value,
  .on_headers_complete = c_on_headers,
  .on_body = c_on_body,
  .on_message_complete = c_on_complete,
};

static int cl_socket(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct timeval tv = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    perror("connect");
    close(fd);
    return -1;
  }
  return fd;
}

static void cl_open(client *c, int port) {
  memset(c, 0, sizeof *c);
  c->fd = cl_socket(port);
  KB_CHECK(c->fd >= 0);
  http_parser_init(&c->p, HTTP_RESPONSE);
  c->p.data = c;
}

static void cl_close(client *c) {
  if (c->fd >= 0) close(c->fd);
  for (int i = 0; i < MAX_RESP; i++) {
    kb_buf_free(&c->r[i].headers);
    kb_buf_free(&c->r[i].body);
  }
}

static void cl_send_n(client *c, const char *s, size_t len) {
  while (len > 0) {
    ssize_t n = send(c->fd, s, len, MSG_NOSIGNAL);
    if (n <= 0) {
      perror("send");
      KB_CHECK(!"send failed");
      return;
    }
    s += n;
    len -= (size_t)n;
  }
}

static void cl_send(client *c, const char *s) { cl_send_n(c, s, strlen(s)); }

/* Reads until `want` responses are complete, or EOF, or an error. Returns
 * 1 if they arrived. */
static int cl_read(client *c, int want) {
  char buf[65536];
  while (c->n < want && c->eof == 0) {
    ssize_t n = recv(c->fd, buf, sizeof buf, 0);
    if (n == 0) {
      c->eof = 1;
      http_parser_execute(&c->p, &client_settings, NULL, 0);
      break;
    }
    if (n < 0) {
      c->eof = -errno;
      break;
    }
    size_t used = http_parser_execute(&c->p, &client_settings, buf, (size_t)n);
    if (used != (size_t)n) {
      fprintf(stderr, "client parser: %s\n", http_errno_description(HTTP_PARSER_ERRNO(&c->p)));
      c->eof = -EPROTO;
    }
  }
  return c->n >= want;
}

/* Expects the server to close: 0 for a clean EOF, -errno for an error, 1
 * if more bytes came instead. */
static int cl_expect_eof(client *c) {
  if (c->eof) return c->eof == 1 ? 0 : c->eof;
  char b[256];
  ssize_t n = recv(c->fd, b, sizeof b, 0);
  return n == 0 ? 0 : n < 0 ? -errno : 1;
}

static int has_header(const resp *r, const char *line) {
  return r->headers.data && strstr(r->headers.data, line) != NULL;
}

static int body_is(const resp *r, const char *s) {
  size_t n = strlen(s);
  return r->body.len == n && (n == 0 || memcmp(r->body.data, s, n) == 0);
}

/* ---- tests ---------------------------------------------------------------------- */

static void client_keep_alive(env *e) {
  client c;
  cl_open(&c, e->port);
  cl_send(&c, "GET /echo?a=1&b=2 HTTP/1.1\r\nHost: x\r\nX-Test: yes\r\nX-Empty:\r\n\r\n");
  KB_CHECK(cl_read(&c, 1));
  resp *r = &c.r[0];
  KB_CHECK(r->status == 200);
  KB_CHECK(has_header(r, "x-method: GET\n"));
  KB_CHECK(has_header(r, "x-target: /echo?a=1&b=2\n"));
  KB_CHECK(has_header(r, "x-query: a=1&b=2\n"));
  KB_CHECK(has_header(r, "x-version: 11\n"));
  KB_CHECK(has_header(r, "x-count: 3\n"));
  KB_CHECK(has_header(r, "x-test: yes\n"));
  KB_CHECK(has_header(r, "x-first: Host\n"));
  KB_CHECK(has_header(r, "x-empty: []\n"));
  KB_CHECK(has_header(r, "x-remote: 127.0.0.1:"));
  KB_CHECK(has_header(r, "content-length: 0\n"));
  KB_CHECK(!has_header(r, "999"));
  KB_CHECK(has_header(r, "date: "));
  KB_CHECK(!has_header(r, "connection:"));
  cl_send(&c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
  KB_CHECK(cl_read(&c, 2));
  KB_CHECK(c.r[1].status == 200);
  KB_CHECK(body_is(&c.r[1], "hello"));
  KB_CHECK(has_header(&c.r[1], "x-query: \n"));
  /* A user Date header replaces the server's. */
  cl_send(&c, "GET /fixed HTTP/1.1\r\n\r\n");
  KB_CHECK(cl_read(&c, 3));
  KB_CHECK(has_header(&c.r[2], "date: Thu, 01 Jan 1970 00:00:00 GMT\n"));
  KB_CHECK(body_is(&c.r[2], "0123456789"));
  cl_close(&c);
}

static void test_keep_alive(void) {
  env e = {0};
  run(&e, NULL, client_keep_alive);
  KB_CHECK(e.stats.connections == 1);
  KB_CHECK(e.stats.requests == 3);
  KB_CHECK(e.stats.responses == 3);
}

static void client_pipeline(env *e) {
  client c;
  cl_open(&c, e->port);
  /* Three requests in one write; the first is answered last by its handler. */
  cl_send(&c,
          "GET /async?first HTTP/1.1\r\nHost: x\r\n\r\n"
          "POST /echo?second HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
          "GET /echo?third HTTP/1.1\r\nHost: x\r\n\r\n");
  KB_CHECK(cl_read(&c, 3));
  KB_CHECK(body_is(&c.r[0], "async:first"));
  KB_CHECK(body_is(&c.r[1], "abc"));
  KB_CHECK(has_header(&c.r[1], "x-query: second\n"));
  KB_CHECK(has_header(&c.r[2], "x-query: third\n"));
  cl_close(&c);
}

static void test_pipeline(void) {
  env e = {0};
  run(&e, NULL, client_pipeline);
  KB_CHECK(e.stats.connections == 1);
  KB_CHECK(e.stats.requests == 3);
}

static void client_chunked_request(env *e) {
  client c;
  cl_open(&c, e->port);
  const char *req =
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n";
  /* Byte by byte: every parser state must survive a split. */
  for (const char *p = req; *p; p++) cl_send_n(&c, p, 1);
  KB_CHECK(cl_read(&c, 1));
  KB_CHECK(c.r[0].status == 200);
  KB_CHECK(body_is(&c.r[0], "hello world"));
  cl_close(&c);
}

static void test_chunked_request(void) {
  env e = {0};
  run(&e, NULL, client_chunked_request);
}

static void client_continue(env *e) {
  client c;
  cl_open(&c, e->port);
  cl_send(&c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
              "Expect: 100-continue\r\n\r\n");
  KB_CHECK(cl_read(&c, 1));
  KB_CHECK(c.r[0].status == 100);
  cl_send(&c, "hello");
  KB_CHECK(cl_read(&c, 2));
  KB_CHECK(c.r[1].status == 200);
  KB_CHECK(body_is(&c.r[1], "hello"));
  /* No body, no 100. */
  cl_send(&c, "GET /fixed HTTP/1.1\r\nExpect: 100-continue\r\n\r\n");
  KB_CHECK(cl_read(&c, 3));
  KB_CHECK(c.r[2].status == 200);
  cl_close(&c);
}

static void test_continue(void) {
  env e = {0};
  run(&e, NULL, client_continue);
}

/* Sends req on a new connection; expects one response with `status`, a
 * body containing `text`, "Connection: close", then the server's FIN. */
static void expect_rejection(env *e, const char *req, int status, const char *text) {
  client c;
  cl_open(&c, e->port);
  cl_send(&c, req);
  KB_CHECK(cl_read(&c, 1));
  KB_CHECK(c.r[0].status == status);
  if (!c.r[0].body.data || !strstr(c.r[0].body.data, text)) {
    fprintf(stderr, "  body \"%s\" lacks \"%s\"\n", c.r[0].body.data ? c.r[0].body.data : "",
            text);
    KB_CHECK(!"rejection text");
  }
  KB_CHECK(has_header(&c.r[0], "connection: close\n"));
  KB_CHECK(cl_expect_eof(&c) == 0);
  cl_close(&c);
}

static void client_limits(env *e) {
  expect_rejection(e, "POST /echo HTTP/1.1\r\nContent-Length: 17\r\n\r\n0123456789abcdefg", 413,
                   "request body larger than 16 bytes");
  expect_rejection(e,
                   "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                   "a\r\n0123456789\r\na\r\n0123456789\r\n0\r\n\r\n",
                   413, "request body larger than 16 bytes");
  /* Too large with Expect: 413 right away, and no 100 Continue first. */
  expect_rejection(e, "PUT /echo HTTP/1.1\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n",
                   413, "request body larger than 16 bytes");
  char big[600];
  snprintf(big, sizeof big, "GET /echo HTTP/1.1\r\nX-Big: %0300d\r\n\r\n", 0);
  expect_rejection(e, big, 431, "request headers larger than 256 bytes or 4 lines");
  expect_rejection(e, "GET /echo HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n\r\n", 431,
                   "request headers larger than 256 bytes or 4 lines");
  expect_rejection(e, "GET /echo HTTP/1.1\r\nExpect: the-unexpected\r\n\r\n", 417,
                   "only \"Expect: 100-continue\" is supported");
  /* At the limit is fine. */
  client c;
  cl_open(&c, e->port);
  cl_send(&c, "POST /echo HTTP/1.1\r\nContent-Length: 16\r\n\r\n0123456789abcdef");
  KB_CHECK(cl_read(&c, 1));
  KB_CHECK(c.r[0].status == 200);
  cl_close(&c);
}

static void test_limits(void) {
  env e = {0};
  kb_httpd_config cfg = {.max_body_size = 16, .max_header_size = 256, .max_headers = 4};
  run(&e, &cfg, client_limits);
  KB_CHECK(e.stats.rejected == 6);
  KB_CHECK(e.stats.requests == 1);
}

static void client_garbage(env *e) {
  expect_rejection(e, "BLAH / HTTP/1.1\r\n\r\n", 400, "malformed request: invalid HTTP method");
  expect_rejection(e, "GET / HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400,
                   "malformed request: invalid character in content-length header");
  expect_rejection(e, "GET / HTTP/1.1\r\nBad Header\r\n\r\n", 400,
                   "malformed request: invalid character in header");
  expect_rejection(e, "GET /x HTTP/3.7\r\n\r\n", 505, "only HTTP/1.0 and HTTP/1.1 are supported");
  /* Garbage after a good request: the good one is answered first. */
  client c;
  cl_open(&c, e->port);
  cl_send(&c, "GET /fixed HTTP/1.1\r\n\r\n\x01\x02garbage\r\n\r\n");
  KB_CHECK(cl_read(&c, 2));
  KB_CHECK(c.r[0].status == 200);
  KB_CHECK(c.r[1].status == 400);
  KB_CHECK(cl_expect_eof(&c) == 0);
  cl_close(&c);
}

static void test_garbage(void) {
  env e = {0};
  run(&e, NULL, client_garbage);
  KB_CHECK(e.stats.rejected == 5);
}

static void client_async_and_stream(env *e) {
  client c;
  cl_open(&c, e->port);
  cl_send(&c, "GET /async?q=7 HTTP/1.1\r\n\r\n");
  KB_CHECK(cl_read(&c, 1));
  KB_CHECK(body_is(&c.r[0], "async:q=7"));
  cl_send(&c, "GET /stream HTTP/1.1\r\n\r\n");
  KB_CHECK(cl_read(&c, 2));
  KB_CHECK(c.r[1].status == 200);
  KB_CHECK(has_header(&c.r[1], "transfer-encoding: chunked\n"));
  KB_CHECK(!has_header(&c.r[1], "content-length"));
  KB_CHECK(body_is(&c.r[1], "onetwothree"));
  /* The connection is still usable after a stream. */
  cl_send(&c, "GET /fixed HTTP/1.1\r\n\r\n");
  KB_CHECK(cl_read(&c, 3));
  KB_CHECK(body_is(&c.r[2], "0123456789"));
  cl_close(&c);

  /* HTTP/1.0: no chunking; the end of the body is the end of the connection. */
  cl_open(&c, e->port);
  cl_send(&c, "GET /stream HTTP/1.0\r\n\r\n");
  KB_CHECK(cl_read(&c, 1));
  KB_CHECK(c.eof == 1);
  KB_CHECK(body_is(&c.r[0], "onetwothree"));
  KB_CHECK(has_header(&c.r[0], "connection: close\n"));
  KB_CHECK(!has_header(&c.r[0], "transfer-encoding"));
  cl_close(&c);
}

static void test_async_and_stream(void) {
  env e = {0};
  run(&e, NULL, client_async_and_stream);
  KB_CHECK(e.stats.responses == 4);
  KB_CHECK(e.stats.aborted == 0);
}

static void client_reset(env *e) {
  client c;
  cl_open(&c, e->port);
  cl_send(&c, "GET /reset HTTP/1.1\r\n\r\n");
  char buf[512];
  size_t got = 0;
  int err = 0;
  for (;;) {
    ssize_t n = recv(c.fd, buf + got, sizeof buf - got, 0);
    if (n <= 0) {
      err = n == 0 ? 0 : errno;
      break;
    }
    got += (size_t)n;
  }
  static const char partial[] = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc";
  if (err != ECONNRESET) fprintf(stderr, "  reset: errno %d after %zu bytes\n", err, got);
  KB_CHECK(err == ECONNRESET);
  KB_CHECK(got == sizeof partial - 1 && memcmp(buf, partial, got) == 0);
  cl_close(&c);
}

static void test_reset(void) {
  env e = {0};
  run(&e, NULL, client_reset);
}

static void client_connection_close(env *e) {
  client c;
  /* HTTP/1.0 without keep-alive closes after the response. */
  cl_open(&c, e->port);
  cl_send(&c, "GET /fixed HTTP/1.0\r\n\r\n");
  KB_CHECK(cl_read(&c, 1));
  KB_CHECK(has_header(&c.r[0], "connection: close\n"));
  KB_CHECK(cl_expect_eof(&c) == 0);
  cl_close(&c);
  /* HTTP/1.0 with keep-alive stays open. */
  cl_open(&c, e->port);
  cl_send(&c, "GET /fixed HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  KB_CHECK(cl_read(&c, 1));
  KB_CHECK(has_header(&c.r[0], "connection: keep-alive\n"));
  cl_send(&c, "GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  KB_CHECK(cl_read(&c, 2));
  KB_CHECK(has_header(&c.r[1], "x-version: 10\n"));
  cl_close(&c);
  /* The client asks to close. */
  cl_open(&c, e->port);
  cl_send(&c, "GET /fixed HTTP/1.1\r\nConnection: close\r\n\r\n");
  KB_CHECK(cl_read(&c, 1));
  KB_CHECK(has_header(&c.r[0], "connection: close\n"));
  KB_CHECK(cl_expect_eof(&c) == 0);
  cl_close(&c);
  /* The handler asks to close. */
  cl_open(&c, e->port);
  cl_send(&c, "GET /close HTTP/1.1\r\n\r\n");
  KB_CHECK(cl_read(&c, 1));
  KB_CHECK(body_is(&c.r[0], "bye"));
  KB_CHECK(has_header(&c.r[0], "connection: close\n"));
  KB_CHECK(cl_expect_eof(&c) == 0);
  cl_close(&c);
  /* HEAD: the length of the body, not the body; 204: neither. */
  cl_open(&c, e->port);
  c.head = 1;
  cl_send(&c, "HEAD /fixed HTTP/1.1\r\n\r\n");
  KB_CHECK(cl_read(&c, 1));
  KB_CHECK(has_header(&c.r[0], "content-length: 10\n"));
  KB_CHECK(c.r[0].body.len == 0);
  cl_send(&c, "GET /nocontent HTTP/1.1\r\n\r\nGET /fixed HTTP/1.1\r\n\r\n");
  KB_CHECK(cl_read(&c, 3));
  KB_CHECK(c.r[1].status == 204 && c.r[1].body.len == 0);
  KB_CHECK(!has_header(&c.r[1], "content-length"));
  KB_CHECK(body_is(&c.r[2], "0123456789")); /* framing intact after HEAD and 204 */
  cl_close(&c);
}

static void test_connection_close(void) {
  env e = {0};
  run(&e, NULL, client_connection_close);
}

static void client_abort(env *e) {
  client c;
  cl_open(&c, e->port);
  cl_send(&c, "GET /hang HTTP/1.1\r\n\r\n");
  /* Make sure the request reached the handler before leaving. */
  client probe;
  cl_open(&probe, e->port);
  cl_send(&probe, "GET /fixed HTTP/1.1\r\n\r\n");
  KB_CHECK(cl_read(&probe, 1));
  cl_close(&probe);
  close(c.fd);
  c.fd = -1;
  for (int i = 0; i < 5000 && __atomic_load_n(&e->aborts, __ATOMIC_SEQ_CST) == 0; i++)
    usleep(1000);
  KB_CHECK(__atomic_load_n(&e->aborts, __ATOMIC_SEQ_CST) == 1);
  cl_close(&c);
}

static void test_abort(void) {
  env e = {0};
  run(&e, NULL, client_abort);
  KB_CHECK(e.aborts == 1);
  KB_CHECK(e.abort_release == KB_HTTPD_EGONE);
  KB_CHECK(e.stats.aborted == 1);
}

static void client_idle(env *e) {
  client c;
  cl_open(&c, e->port);
  KB_CHECK(cl_expect_eof(&c) == 0); /* closed by the idle timeout */
  cl_close(&c);
  /* A request half sent is no protection either (the header deadline). */
  cl_open(&c, e->port);
  cl_send(&c, "GET /fixed HTTP/1.1\r\nHost");
  KB_CHECK(cl_read(&c, 1) && c.r[0].status == 408);
  KB_CHECK(cl_expect_eof(&c) == 0);
  cl_close(&c);
  /* But a request being answered is never timed out. */
  cl_open(&c, e->port);
  cl_send(&c, "GET /async?slow HTTP/1.1\r\n\r\n");
  KB_CHECK(cl_read(&c, 1));
  KB_CHECK(body_is(&c.r[0], "async:slow"));
  cl_close(&c);
}

static void test_idle_timeout(void) {
  env e = {0};
  kb_httpd_config cfg = {.idle_timeout_ms = 20, .header_timeout_ms = 20};
  run(&e, &cfg, client_idle);
}

/* 1 once the server closed or answered: polls for 50 ms. */
static int cl_server_spoke(client *c) {
  struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
  return poll(&pfd, 1, 50) > 0;
}

/* Sends `first`, then one byte of `rest` every 50 ms, as a slowloris does,
 * until the server answers or 60 bytes went out (3 s, 15 times the 200 ms
 * deadline). Returns the bytes of `rest` sent. */
static int cl_trickle(client *c, const char *first, const char *rest) {
  cl_send(c, first);
  int sent = 0;
  while (sent < 60 && rest[sent] && !cl_server_spoke(c)) {
    if (send(c->fd, rest + sent, 1, MSG_NOSIGNAL) != 1) break;
    sent++;
  }
  return sent;
}

static const char trickle[] = "X-Slow-Header-Name-That-Goes-On: and on and on and on and on\r\n";

static void client_slowloris(env *e) {
  client c;
  /* Headers one byte at a time: cut at the header deadline with a 408. */
  cl_open(&c, e->port);
  int sent = cl_trickle(&c, "GET /fixed HTTP/1.1\r\nHost: x\r\n", trickle);
  KB_CHECK(sent < 60);
  KB_CHECK(cl_read(&c, 1));
  KB_CHECK(c.r[0].status == 408);
  KB_CHECK(body_is(&c.r[0], "request headers not received within 200 ms\n"));
  KB_CHECK(has_header(&c.r[0], "connection: close\n"));
  KB_CHECK(cl_expect_eof(&c) == 0);
  cl_close(&c);
  /* A body one byte at a time: cut at the body deadline. */
  cl_open(&c, e->port);
  sent = cl_trickle(&c, "POST /echo HTTP/1.1\r\nContent-Length: 100\r\n\r\n", trickle);
  KB_CHECK(sent < 60);
  KB_CHECK(cl_read(&c, 1));
  KB_CHECK(c.r[0].status == 408);
  KB_CHECK(body_is(&c.r[0], "request body not received within 300 ms\n"));
  KB_CHECK(cl_expect_eof(&c) == 0);
  cl_close(&c);
  /* A keep-alive connection left idle after its response is closed. */
  cl_open(&c, e->port);
  cl_send(&c, "GET /fixed HTTP/1.1\r\n\r\n");
  KB_CHECK(cl_read(&c, 1));
  KB_CHECK(c.r[0].status == 200);
  KB_CHECK(cl_expect_eof(&c) == 0);
  cl_close(&c);
  /* A watch-like stream (8 chunks 100 ms apart) outlives the 200 ms idle
   * timeout and the deadlines: a response in progress is not idle. */
  cl_open(&c, e->port);
  cl_send(&c, "GET /watch HTTP/1.1\r\n\r\n");
  KB_CHECK(cl_read(&c, 1));
  KB_CHECK(c.r[0].status == 200);
  KB_CHECK(body_is(&c.r[0], "event0;event1;event2;event3;event4;event5;event6;event7;"));
  cl_close(&c);
}

static void test_slowloris(void) {
  env e = {0};
  kb_httpd_config cfg = {.header_timeout_ms = 200, .body_timeout_ms = 300,
                         .idle_timeout_ms = 200};
  run(&e, &cfg, client_slowloris);
  KB_CHECK(e.stats.timed_out == 2);
  KB_CHECK(e.stats.rejected == 2);
  KB_CHECK(e.stats.idle_closed == 1);
  KB_CHECK(e.stats.requests == 2); /* /fixed and /watch; the slow two never reached it */
  KB_CHECK(e.stats.responses == 2);
}

static void client_cap(env *e) {
  client a, b, c;
  cl_open(&a, e->port);
  cl_send(&a, "GET /fixed HTTP/1.1\r\n\r\n");
  KB_CHECK(cl_read(&a, 1) && a.r[0].status == 200);
  cl_open(&b, e->port);
  cl_send(&b, "GET /fixed HTTP/1.1\r\n\r\n");
  KB_CHECK(cl_read(&b, 1) && b.r[0].status == 200);
  /* The third, with two open and a cap of 2: a 503 and closed. */
  cl_open(&c, e->port);
  KB_CHECK(cl_read(&c, 1));
  KB_CHECK(c.r[0].status == 503);
  KB_CHECK(body_is(&c.r[0], "too many connections\n"));
  KB_CHECK(cl_expect_eof(&c) == 0);
  cl_close(&c);
  /* The two served ones still work. */
  cl_send(&a, "GET /fixed HTTP/1.1\r\n\r\n");
  KB_CHECK(cl_read(&a, 2) && a.r[1].status == 200);
  cl_close(&a);
  cl_close(&b);
}

static void test_connection_cap(void) {
  char path[] = "/tmp/kb_httpd_log_XXXXXX";
  int fd = mkstemp(path);
  KB_CHECK(fd >= 0);
  int old = kb_log_set_fd(fd);
  env e = {0};
  kb_httpd_config cfg = {.max_connections = 2};
  run(&e, &cfg, client_cap);
  kb_log_set_fd(old);
  KB_CHECK(e.stats.refused == 1);
  KB_CHECK(e.stats.connections == 3);
  KB_CHECK(e.stats.requests == 3);
  char log[2048] = {0};
  ssize_t n = pread(fd, log, sizeof log - 1, 0);
  KB_CHECK(n > 0);
  char want[160];
  snprintf(want, sizeof want, "WARN http server on port %d: refused 1 connection(s) (the latest from 127.0.0.1:", e.port);
  KB_CHECK(strstr(log, want) != NULL);
  KB_CHECK(strstr(log, "): 2 open, the limit is 2 (max_connections; kbrun sim --max-connections)") != NULL);
  close(fd);
  unlink(path);
}

static int *close_fds; /* sockets left open for test_server_close */

static void client_leave_open(env *e) {
  client a, b;
  cl_open(&a, e->port);
  cl_send(&a, "GET /fixed HTTP/1.1\r\n\r\n");
  KB_CHECK(cl_read(&a, 1));
  cl_open(&b, e->port);
  cl_send(&b, "GET /hang HTTP/1.1\r\n\r\n");
  client probe; /* requests are answered in order of arrival on the loop */
  cl_open(&probe, e->port);
  cl_send(&probe, "GET /fixed HTTP/1.1\r\n\r\n");
  KB_CHECK(cl_read(&probe, 1));
  cl_close(&probe);
  close_fds[0] = a.fd;
  close_fds[1] = b.fd;
  a.fd = b.fd = -1;
  cl_close(&a);
  cl_close(&b);
}

static void test_server_close(void) {
  env e = {0};
  int fds[2] = {-1, -1};
  close_fds = fds;
  run(&e, NULL, client_leave_open);
  KB_CHECK(e.aborts == 1); /* the pending /hang, told by the server's close */
  KB_CHECK(e.abort_release == KB_HTTPD_EGONE);
  KB_CHECK(e.stats.open_connections >= 2);
  for (int i = 0; i < 2; i++) {
    char b[16];
    KB_CHECK(fds[i] >= 0 && recv(fds[i], b, sizeof b, 0) == 0);
    close(fds[i]);
  }
}

static void client_big(env *e) {
  client c;
  cl_open(&c, e->port);
  cl_send(&c, "GET /big HTTP/1.1\r\n\r\n");
  usleep(20000); /* let the server's socket buffer fill: part of it is queued */
  KB_CHECK(cl_read(&c, 1));
  KB_CHECK(c.r[0].body.len == BIG_LEN && memcmp(c.r[0].body.data, e->big, BIG_LEN) == 0);
  cl_send(&c, "GET /drain HTTP/1.1\r\n\r\n");
  usleep(20000);
  KB_CHECK(cl_read(&c, 2));
  KB_CHECK(c.r[1].body.len == DRAIN_LEN + 3);
  KB_CHECK(c.r[1].body.len == DRAIN_LEN + 3 &&
           memcmp(c.r[1].body.data, e->big, DRAIN_LEN) == 0 &&
           memcmp(c.r[1].body.data + DRAIN_LEN, "end", 3) == 0);
  cl_close(&c);
}

static void test_big_and_drain(void) {
  env e = {0};
  e.big = malloc(DRAIN_LEN);
  for (size_t i = 0; i < DRAIN_LEN; i++) e.big[i] = (char)('a' + (i * 7) % 26);
  run(&e, NULL, client_big);
  KB_CHECK(e.drained == 1);
  free(e.big);
}

static void client_api(env *e) {
  client c;
  cl_open(&c, e->port);
  cl_send(&c, "GET /api HTTP/1.1\r\n\r\n");
  KB_CHECK(cl_read(&c, 1));
  KB_CHECK(c.r[0].status == 200);
  KB_CHECK(has_header(&c.r[0], "transfer-encoding: chunked\n"));
  KB_CHECK(!has_header(&c.r[0], "injected"));
  cl_close(&c);
}

static void test_api_misuse(void) {
  env e = {0};
  run(&e, NULL, client_api);
  KB_CHECK(e.api[0] == KB_HTTPD_EINVAL); /* status 42 */
  KB_CHECK(e.api[1] == KB_HTTPD_EINVAL); /* CRLF in a value */
  KB_CHECK(e.api[2] == KB_HTTPD_EINVAL); /* ':' in a name */
  KB_CHECK(e.api[3] == KB_HTTPD_ESTATE); /* write before begin */
  KB_CHECK(e.api[4] == KB_HTTPD_ESTATE); /* end before begin */
  KB_CHECK(e.api[5] == 0);
  KB_CHECK(e.api[6] == KB_HTTPD_ESTATE); /* respond after begin */
  KB_CHECK(e.api[7] == 0);
  KB_CHECK_STR(kb_httpd_strerror(KB_HTTPD_EGONE), "the client closed the connection");
  KB_CHECK_STR(kb_httpd_strerror(KB_HTTPD_ESTATE),
               "not allowed in the current state of the response");
  KB_CHECK_STR(kb_httpd_strerror(KB_HTTPD_EINVAL), "invalid status code or header");
  KB_CHECK_STR(kb_httpd_strerror(UV_EADDRINUSE), uv_strerror(UV_EADDRINUSE));
}

static int nconns;

static void client_many(env *e) {
  int *fds = calloc((size_t)nconns, sizeof *fds);
  int ok = 0;
  for (int i = 0; i < nconns; i++) {
    fds[i] = cl_socket(e->port);
    if (fds[i] < 0) break;
    char req[64];
    int n = snprintf(req, sizeof req, "GET /echo?%d HTTP/1.1\r\n\r\n", i);
    send(fds[i], req, (size_t)n, MSG_NOSIGNAL);
  }
  /* Every connection is open at once; now collect the answers. */
  for (int i = 0; i < nconns && fds[i] >= 0; i++) {
    client c;
    memset(&c, 0, sizeof c);
    c.fd = fds[i];
    http_parser_init(&c.p, HTTP_RESPONSE);
    c.p.data = &c;
    char want[32];
    snprintf(want, sizeof want, "x-query: %d\n", i);
    if (cl_read(&c, 1) && c.r[0].status == 200 && has_header(&c.r[0], want)) ok++;
    cl_close(&c);
  }
  KB_CHECK(ok == nconns);
  free(fds);
}

static void test_many_connections(void) {
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  getrlimit(RLIMIT_NOFILE, &rl);
  nconns = rl.rlim_cur > 2100 ? 1000 : (int)(rl.rlim_cur - 100) / 2;
  env e = {0};
  run(&e, NULL, client_many);
  KB_CHECK(e.stats.connections == (uint64_t)nconns);
  KB_CHECK(e.stats.requests == (uint64_t)nconns);
}

static void noop_handler(kb_httpd_req *req, void *ud) {
  kb_httpd_respond(req, 200, NULL, 0, NULL, 0);
}

static void count_closed(kb_httpd *s, void *ud) { (*(int *)ud)++; }

static void test_listen_errors(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  KB_CHECK(kb_httpd_new(&loop, NULL, NULL, NULL) == NULL);
  kb_httpd *a = kb_httpd_new(&loop, NULL, noop_handler, NULL);
  kb_httpd *b = kb_httpd_new(&loop, NULL, noop_handler, NULL);
  kb_httpd *c = kb_httpd_new(&loop, NULL, noop_handler, NULL);
  kb_httpd *d = kb_httpd_new(&loop, NULL, noop_handler, NULL);
  KB_CHECK(kb_httpd_port(a) == 0);
  KB_CHECK(kb_httpd_listen(a, "not-an-address", 0) == UV_EINVAL);
  KB_CHECK(kb_httpd_listen(a, "127.0.0.1", 70000) == UV_EINVAL);
  KB_CHECK(kb_httpd_listen(a, "localhost", 0) == 0);
  KB_CHECK(kb_httpd_listen(a, "127.0.0.1", 0) == UV_EINVAL); /* twice */
  KB_CHECK(kb_httpd_listen(b, NULL, kb_httpd_port(a)) == UV_EADDRINUSE);
  KB_CHECK(kb_httpd_port(b) == 0);
  int v6 = kb_httpd_listen(c, "[::1]", 0);
  KB_CHECK(v6 == 0 || v6 == UV_EADDRNOTAVAIL || v6 == UV_EAFNOSUPPORT);
  KB_CHECK(v6 != 0 || kb_httpd_port(c) > 0);
  int closed = 0;
  kb_httpd_close(a, count_closed, &closed);
  kb_httpd_close(a, count_closed, &closed); /* again: only the callback changes */
  kb_httpd_close(b, count_closed, &closed);
  kb_httpd_close(c, count_closed, &closed);
  kb_httpd_close(d, NULL, NULL); /* never listened */
  uv_run(&loop, UV_RUN_DEFAULT);
  KB_CHECK(closed == 3);
  KB_CHECK(uv_loop_close(&loop) == 0);
}

int main(void) {
  KB_RUN(test_keep_alive);
  KB_RUN(test_pipeline);
  KB_RUN(test_chunked_request);
  KB_RUN(test_continue);
  KB_RUN(test_limits);
  KB_RUN(test_garbage);
  KB_RUN(test_async_and_stream);
  KB_RUN(test_reset);
  KB_RUN(test_connection_close);
  KB_RUN(test_abort);
  KB_RUN(test_idle_timeout);
  KB_RUN(test_slowloris);
  KB_RUN(test_connection_cap);
  KB_RUN(test_server_close);
  KB_RUN(test_big_and_drain);
  KB_RUN(test_api_misuse);
  KB_RUN(test_many_connections);
  KB_RUN(test_listen_errors);
  return kb_test_report();
}
