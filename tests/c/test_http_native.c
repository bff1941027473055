/* Tests of the HTTP client's native HTTP/1.1 path (src/net/http_native.c)
 * against a raw server that answers each request with exact bytes: the
 * framings libcurl handled for us (chunked, close-delimited, 1xx, 204,
 * HEAD), servers that close or cut connections, garbage, the pool's
 * limits and queue, a Unix socket, and the request bytes themselves,
 * compared with what the libcurl path sends for the same request.
 * (test_http_client runs the client's whole behaviour on both paths.) */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "kb/http_client.h"
#include "kbtest.h"
#include "../../src/net/http_client_internal.h"
#include "uv_test_util.h"

/* ---- the raw server ---------------------------------------------------------------- */

typedef struct raw_conn {
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } io;
  uv_timer_t drip; /* /slow: one byte at a time */
  char in[16384];
  size_t in_len;
  const char *dripping;
  size_t drip_left;
  int die_next; /* /die-next: the next request on this connection gets EOF */
  int handles;
  struct raw_conn *prev, *next; /* every connection not closed yet */
} raw_conn;

static struct {
  uv_loop_t loop;
  uv_tcp_t tcp;
  uv_tcp_t tcp6; /* [::1], when this machine has IPv6 loopback */
  uv_pipe_t pipe;
  int port;
  char base[64];
  char sock_path[108];
  int connections;     /* accepted so far */
  int open;            /* open now */
  int most_open;       /* the most open at once */
  char last_head[4096]; /* the last request's head as it arrived */
  raw_conn *conns;
} S;

static void on_raw_closed(uv_handle_t *h) {
  raw_conn *k = h->data;
  if (--k->handles == 0) free(k);
}

static void raw_close(raw_conn *k) {
  if (uv_is_closing(&k->io.handle)) return;
  S.open--;
  if (k->prev) k->prev->next = k->next;
  else S.conns = k->next;
  if (k->next) k->next->prev = k->prev;
  uv_close(&k->io.handle, on_raw_closed);
  uv_close((uv_handle_t *)&k->drip, on_raw_closed);
}

static void on_written(uv_write_t *w, int status) {
  (void)status;
  free(w);
}

/* Writes a copy of text (which may hold NULs: len). */
static void raw_write(raw_conn *k, const char *text, size_t len) {
  uv_write_t *w = malloc(sizeof *w + len);
  char *copy = (char *)(w + 1);
  memcpy(copy, text, len);
  uv_buf_t b = uv_buf_init(copy, (unsigned)len);
  if (uv_write(w, &k->io.stream, &b, 1, on_written) != 0) free(w);
}

#define RAW(k, lit) raw_write((k), (lit), sizeof(lit) - 1)

static void on_drip(uv_timer_t *t) {
  raw_conn *k = t->data;
  raw_write(k, k->dripping, 1);
  k->dripping++;
  if (--k->drip_left == 0) uv_timer_stop(t);
}

/* The answer to one request, chosen by its path. */
static void answer(raw_conn *k, const char *method, const char *path) {
  if (k->die_next) {
    raw_close(k);
    return;
  }
  if (!strcmp(path, "/cl")) {
    RAW(k, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello");
  } else if (!strcmp(path, "/chunked")) {
    RAW(k, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
  } else if (!strcmp(path, "/eof")) {
    RAW(k, "HTTP/1.1 200 OK\r\nX-B: 2\r\n\r\nuntil the end");
    raw_close(k);
  } else if (!strcmp(path, "/continue")) {
    RAW(k, "HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\n"
           "HTTP/1.1 201 Created\r\nContent-Length: 2\r\nX-Final: yes\r\n\r\nok");
  } else if (!strcmp(path, "/204")) {
    RAW(k, "HTTP/1.1 204 No Content\r\nX-C: 3\r\n\r\n");
  } else if (!strcmp(path, "/head")) {
    RAW(k, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n");
  } else if (!strcmp(path, "/close")) {
    RAW(k, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
    raw_close(k);
  } else if (!strcmp(path, "/http10")) {
    RAW(k, "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok");
  } else if (!strcmp(path, "/garbage")) {
    RAW(k, "garbage\r\n\r\n");
  } else if (!strcmp(path, "/extra")) {
    RAW(k, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokJUNK");
  } else if (!strcmp(path, "/die-next")) {
    RAW(k, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    k->die_next = 1;
  } else if (!strcmp(path, "/partial")) {
    RAW(k, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc");
    raw_close(k);
  } else if (!strcmp(path, "/chunk-partial")) {
    RAW(k, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab");
    raw_close(k);
  } else if (!strcmp(path, "/empty")) {
    raw_close(k);
  } else if (!strcmp(path, "/hang")) {
    /* no answer */
  } else if (!strcmp(path, "/slow")) {
    static const char slow[] = "HTTP/1.1 200 OK\r\nX-Long-Name: a value\r\nContent-Length: 4\r\n\r\nslow";
    k->dripping = slow;
    k->drip_left = sizeof slow - 1;
    uv_timer_start(&k->drip, on_drip, 1, 1);
  } else if (!strcmp(path, "/big")) {
    static char big[300000];
    char head[96];
    int n = snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", sizeof big);
    for (size_t i = 0; i < sizeof big; i++) big[i] = (char)('a' + i % 26);
    raw_write(k, head, (size_t)n);
    raw_write(k, big, sizeof big);
  } else {
    RAW(k, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
  }
  (void)method;
}

/* Takes every complete request (head and Content-Length body) off in. */
static void serve(raw_conn *k) {
  for (;;) {
    char *end = memmem(k->in, k->in_len, "\r\n\r\n", 4);
    if (!end) return;
    size_t head_len = (size_t)(end - k->in) + 4, body = 0;
    char *cl = memmem(k->in, head_len, "Content-Length: ", 16);
    if (cl) body = strtoul(cl + 16, NULL, 10);
    if (k->in_len < head_len + body) return;
    snprintf(S.last_head, sizeof S.last_head, "%.*s", (int)head_len, k->in);
    char method[16] = "", path[256] = "";
    sscanf(k->in, "%15s %255s", method, path);
    path[strcspn(path, "?")] = '\0';
    memmove(k->in, k->in + head_len + body, k->in_len - head_len - body);
    k->in_len -= head_len + body;
    answer(k, method, path);
    if (uv_is_closing(&k->io.handle)) return;
  }
}

static void on_raw_alloc(uv_handle_t *h, size_t n, uv_buf_t *b) {
  raw_conn *k = h->data;
  (void)n;
  b->base = k->in + k->in_len;
  b->len = sizeof k->in - k->in_len;
}

static void on_raw_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  raw_conn *k = s->data;
  (void)b;
  if (n < 0) {
    raw_close(k);
    return;
  }
  k->in_len += (size_t)n;
  serve(k);
}

static void on_raw_connection(uv_stream_t *server, int status) {
  if (status < 0) return;
  raw_conn *k = calloc(1, sizeof *k);
  if (server == (uv_stream_t *)&S.tcp) uv_tcp_init(&S.loop, &k->io.tcp);
  else uv_pipe_init(&S.loop, &k->io.pipe, 0);
  uv_timer_init(&S.loop, &k->drip);
  k->io.handle.data = k->drip.data = k;
  k->handles = 2;
  k->next = S.conns;
  if (k->next) k->next->prev = k;
  S.conns = k;
  uv_accept(server, &k->io.stream);
  S.connections++;
  if (++S.open > S.most_open) S.most_open = S.open;
  uv_read_start(&k->io.stream, on_raw_alloc, on_raw_read);
}

/* ---- running requests -------------------------------------------------------------------- */

static void run_until(int *flag, int want) { kb_test_run_until(&S.loop, flag, want); }

typedef struct result {
  int done;
  long status;
  int version;
  kb_http_error error;
  char message[512];
  char body[512];
  size_t body_len;
  char headers[512];
  kb_http_timings time;
} result;

static void on_done(kb_http_request *r, const kb_http_response *resp, void *ud) {
  result *res = ud;
  res->done++;
  res->status = resp->status;
  res->version = resp->http_version;
  res->error = resp->error;
  res->time = resp->time;
  snprintf(res->message, sizeof res->message, "%s", resp->message);
  res->body_len = resp->body_len;
  snprintf(res->body, sizeof res->body, "%.*s", (int)resp->body_len, resp->body);
  snprintf(res->headers, sizeof res->headers, "%.*s", (int)resp->headers_len, resp->headers);
  kb_http_request_free(r);
}

static kb_http_request *request(kb_http_client *c, const char *method, const char *path) {
  char url[256];
  snprintf(url, sizeof url, "%s%s", S.base, path);
  kb_http_request *r = kb_http_request_new(c, method, url);
  KB_CHECK(r != NULL);
  return r;
}

static void perform(kb_http_request *r, result *res) {
  KB_CHECK(kb_http_request_start(r, on_done, res) == 0);
  run_until(&res->done, 1);
}

static result get(kb_http_client *c, const char *method, const char *path) {
  result res = {0};
  perform(request(c, method, path), &res);
  return res;
}

static kb_http_client *C;

/* A client on libcurl (curl = 1: KBRUN_HTTP=curl while it is made) or on
 * the path kbrun chooses. */
static kb_http_client *client_on(int curl) {
  if (curl) setenv("KBRUN_HTTP", "curl", 1);
  kb_http_client *c = kb_http_client_new(&S.loop, NULL);
  unsetenv("KBRUN_HTTP");
  return c;
}

static result get_url(kb_http_client *c, const char *url) {
  result res = {0};
  kb_http_request *r = kb_http_request_new(c, "GET", url);
  KB_CHECK(r != NULL);
  perform(r, &res);
  return res;
}

/* ---- tests ------------------------------------------------------------------------------------ */

static void test_framings(void) {
  int before = S.connections;
  result r = get(C, "GET", "/cl");
  KB_CHECK(r.error == KB_HTTP_OK && r.status == 200 && r.version == 11);
  KB_CHECK_STR(r.body, "hello");
  KB_CHECK_STR(r.headers, "Content-Length: 5\r\nX-A: 1\r\n");
  KB_CHECK(r.time.ttfb > 0 && r.time.ttfb <= r.time.total && r.time.connect > 0);

  r = get(C, "GET", "/chunked");
  KB_CHECK(r.error == KB_HTTP_OK && r.status == 200);
  KB_CHECK_STR(r.body, "hello world");
  KB_CHECK(r.time.connect == 0); /* the same kept-alive connection */

  r = get(C, "GET", "/continue"); /* the 1xx is skipped, its headers too */
  KB_CHECK(r.status == 201);
  KB_CHECK_STR(r.body, "ok");
  KB_CHECK_STR(r.headers, "Content-Length: 2\r\nX-Final: yes\r\n");

  r = get(C, "GET", "/204");
  KB_CHECK(r.error == KB_HTTP_OK && r.status == 204 && r.body_len == 0);

  r = get(C, "HEAD", "/head"); /* Content-Length: 10 and no body */
  KB_CHECK(r.error == KB_HTTP_OK && r.status == 200 && r.body_len == 0);
  r = get(C, "GET", "/cl"); /* ... and the connection still in step */
  KB_CHECK_STR(r.body, "hello");
  KB_CHECK(S.connections - before == 1);

  r = get(C, "GET", "/http10");
  KB_CHECK(r.status == 200 && r.version == 10);

  r = get(C, "GET", "/eof"); /* the body ends with the connection */
  KB_CHECK(r.error == KB_HTTP_OK && r.status == 200);
  KB_CHECK_STR(r.body, "until the end");

  r = get(C, "GET", "/slow"); /* one byte per read: names and values in pieces */
  KB_CHECK(r.error == KB_HTTP_OK);
  KB_CHECK_STR(r.headers, "X-Long-Name: a value\r\nContent-Length: 4\r\n");
  KB_CHECK_STR(r.body, "slow");

  result big = {0};
  kb_http_request *q = request(C, "GET", "/big");
  perform(q, &big);
  KB_CHECK(big.error == KB_HTTP_OK && big.body_len == 300000);
  KB_CHECK(!strncmp(big.body, "abcdefghijklmnopqrstuvwxyzabc", 29));
}

/* Connections that end: after "Connection: close", after bytes nobody
 * asked for, and one the server closed while it was idle (the request is
 * sent again once, on a fresh connection). */
static void test_connection_fates(void) {
  kb_http_client *c = kb_http_client_new(&S.loop, NULL);
  int before = S.connections;
  result r = get(c, "GET", "/close");
  KB_CHECK(r.error == KB_HTTP_OK);
  KB_CHECK_STR(r.body, "ok");
  r = get(c, "GET", "/cl");
  KB_CHECK_STR(r.body, "hello");
  KB_CHECK(S.connections - before == 2);

  r = get(c, "GET", "/extra");
  KB_CHECK(r.error == KB_HTTP_OK);
  KB_CHECK_STR(r.body, "ok");
  r = get(c, "GET", "/cl");
  KB_CHECK_STR(r.body, "hello");
  KB_CHECK(S.connections - before == 3); /* the junk's connection was not reused */

  r = get(c, "GET", "/die-next");
  KB_CHECK_STR(r.body, "ok");
  r = get(c, "GET", "/cl"); /* EOF on the reused one, then a fresh one */
  KB_CHECK(r.error == KB_HTTP_OK);
  KB_CHECK_STR(r.body, "hello");
  KB_CHECK(S.connections - before == 4);
  kb_http_client_free(c);
  uv_run(&S.loop, UV_RUN_NOWAIT);
}

static void test_errors(void) {
  result r = get(C, "GET", "/partial");
  KB_CHECK(r.error == KB_HTTP_ERR_RESET);
  KB_CHECK(strstr(r.message, "transfer closed with 97 bytes remaining to read") != NULL);

  r = get(C, "GET", "/chunk-partial");
  KB_CHECK(r.error == KB_HTTP_ERR_RESET);
  KB_CHECK(strstr(r.message, "transfer closed with outstanding read data remaining") != NULL);

  /* A fresh connection that closes without a byte: no retry, curl's words. */
  kb_http_client *fresh = kb_http_client_new(&S.loop, NULL);
  r = get(fresh, "GET", "/empty");
  KB_CHECK(r.error == KB_HTTP_ERR_RESET);
  KB_CHECK(strstr(r.message, "Empty reply from server") != NULL);
  kb_http_client_free(fresh);

  r = get(C, "GET", "/garbage");
  KB_CHECK(r.error == KB_HTTP_ERR_PROTOCOL);
  KB_CHECK(strstr(r.message, "Invalid HTTP response") != NULL);
  KB_CHECK(strstr(r.message, "did not answer valid HTTP") != NULL);

  kb_http_options o = KB_HTTP_OPTIONS_INIT;
  o.timeout_ms = 100;
  kb_http_request *q = request(C, "GET", "/hang");
  KB_CHECK(kb_http_request_set_options(q, &o) == 0);
  result t = {0};
  perform(q, &t);
  KB_CHECK(t.error == KB_HTTP_ERR_TIMEOUT);
  KB_CHECK(strstr(t.message, "Operation timed out after") != NULL);
  KB_CHECK(strstr(t.message, "milliseconds with 0 bytes received") != NULL);
  KB_CHECK(t.time.total >= 0.09);

  q = request(C, "GET", "/big");
  KB_CHECK(kb_http_request_set_max_body(q, 1000) == 0);
  result over = {0};
  perform(q, &over);
  KB_CHECK(over.error == KB_HTTP_ERR_BODY_TOO_LARGE);
  KB_CHECK(over.body_len <= 1000);
  KB_CHECK(strstr(over.message, "larger than max_body (1000 bytes)") != NULL);

  r = get(C, "GET", "/cl"); /* the client goes on after all of them */
  KB_CHECK(r.error == KB_HTTP_OK);
}

#define MANY 40
static int many_done, many_ok;
static void on_many(kb_http_request *r, const kb_http_response *resp, void *ud) {
  (void)ud;
  many_done++;
  if (resp->status == 200 && resp->body_len == 5) many_ok++;
  kb_http_request_free(r);
}

/* Beyond max_connections requests wait, oldest first, and are served as
 * connections come free; a waiting request's timeout counts. */
static void test_limits(void) {
  kb_http_client_opts opts = {.max_connections = 3};
  kb_http_client *c = kb_http_client_new(&S.loop, &opts);
  int before = S.connections;
  S.most_open = S.open;
  int base_open = S.open;
  many_done = many_ok = 0;
  for (int i = 0; i < MANY; i++) KB_CHECK(kb_http_request_start(request(c, "GET", "/cl"), on_many, NULL) == 0);
  KB_CHECK(kb_http_client_active(c) == MANY);
  run_until(&many_done, MANY);
  KB_CHECK(many_ok == MANY);
  KB_CHECK(S.connections - before == 3);
  KB_CHECK(S.most_open - base_open <= 3);
  kb_http_client_free(c);
  uv_run(&S.loop, UV_RUN_NOWAIT);

  opts.max_connections = 1;
  c = kb_http_client_new(&S.loop, &opts);
  result hung = {0}, waited = {0};
  kb_http_request *h = request(c, "GET", "/hang");
  KB_CHECK(kb_http_request_start(h, on_done, &hung) == 0);
  kb_http_options o = KB_HTTP_OPTIONS_INIT;
  o.timeout_ms = 120;
  kb_http_request *w = request(c, "GET", "/cl");
  KB_CHECK(kb_http_request_set_options(w, &o) == 0);
  KB_CHECK(kb_http_request_start(w, on_done, &waited) == 0);
  run_until(&waited.done, 1);
  KB_CHECK(waited.error == KB_HTTP_ERR_TIMEOUT);
  KB_CHECK(strstr(waited.message, "with 0 bytes received") != NULL);
  kb_http_request_cancel(h); /* its connection goes; the next request opens one */
  KB_CHECK(hung.done == 0);
  result next = {0};
  perform(request(c, "GET", "/cl"), &next);
  KB_CHECK(next.error == KB_HTTP_OK);
  kb_http_client_free(c);
  uv_run(&S.loop, UV_RUN_NOWAIT);
}

static void test_unix_socket(void) {
  int before = S.connections;
  for (int i = 0; i < 3; i++) {
    kb_http_request *r = kb_http_request_new(C, "GET", "http://localhost/chunked");
    KB_CHECK(kb_http_request_set_unix_socket(r, S.sock_path) == 0);
    result res = {0};
    perform(r, &res);
    KB_CHECK(res.error == KB_HTTP_OK);
    KB_CHECK_STR(res.body, "hello world");
  }
  KB_CHECK(S.connections - before == 1);
  KB_CHECK(strstr(S.last_head, "Host: localhost\r\n") != NULL);
  kb_http_request *r = kb_http_request_new(C, "GET", "http://localhost/x");
  KB_CHECK(kb_http_request_set_unix_socket(r, "/nonexistent/kbrun.sock") == 0);
  result res = {0};
  perform(r, &res);
  KB_CHECK(res.error == KB_HTTP_ERR_CONNECT);
  KB_CHECK(strstr(res.message, "Failed to connect to /nonexistent/kbrun.sock") != NULL);
}

/* The bytes on the wire are the ones libcurl sends for the same request. */
static void head_of(kb_http_client *c, const char *method, const char *path, const char *body,
                    char *out, size_t outsz) {
  kb_http_request *r = request(c, method, path);
  KB_CHECK(kb_http_request_add_header(r, "X-Custom", "v") == 0);
  KB_CHECK(kb_http_request_add_header(r, "X-Empty", "") == 0);
  KB_CHECK(kb_http_request_add_header(r, "Accept", "application/json") == 0);
  KB_CHECK(kb_http_request_add_header(r, "Authorization", "Bearer t0k") == 0);
  if (body) {
    KB_CHECK(kb_http_request_add_header(r, "Content-Type", "application/json") == 0);
    KB_CHECK(kb_http_request_set_body(r, body, strlen(body)) == 0);
  }
  result res = {0};
  perform(r, &res);
  KB_CHECK(res.status == 200);
  if (res.status != 200) fprintf(stderr, "%s %s: %s\n", method, path, res.message);
  snprintf(out, outsz, "%s", S.last_head);
}

static void test_same_bytes_as_curl(void) {
  kb_http_client *curl = client_on(1);
  static const struct { const char *method, *path, *body; } cases[] = {
    {"GET", "/cl?a=1&b=%20", NULL},
    {"POST", "/cl", "{\"x\":1}"},
    {"PUT", "/cl", "{}"},
    {"DELETE", "/cl", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char native[4096], viacurl[4096];
    head_of(C, cases[i].method, cases[i].path, cases[i].body, native, sizeof native);
    head_of(curl, cases[i].method, cases[i].path, cases[i].body, viacurl, sizeof viacurl);
    KB_CHECK_STR(native, viacurl);
  }
  kb_http_client_free(curl);
  uv_run(&S.loop, UV_RUN_NOWAIT);
}

/* Cancelled and freed with requests on connections, waiting and done. */
static void test_cancel_and_free(void) {
  kb_http_client_opts opts = {.max_connections = 1};
  kb_http_client *c = kb_http_client_new(&S.loop, &opts);
  result a = {0}, b = {0};
  KB_CHECK(kb_http_request_start(request(c, "GET", "/hang"), on_done, &a) == 0);
  kb_http_request *queued = request(c, "GET", "/cl");
  KB_CHECK(kb_http_request_start(queued, on_done, &b) == 0);
  kb_http_request_cancel(queued); /* off the queue */
  KB_CHECK(kb_http_client_active(c) == 1);
  for (int i = 0; i < 5; i++) uv_run(&S.loop, UV_RUN_NOWAIT);
  kb_http_client_free(c); /* the hanging one goes with it: no callback */
  uv_run(&S.loop, UV_RUN_NOWAIT);
  KB_CHECK(a.done == 0 && b.done == 0);
}

static void count_ref(uv_handle_t *h, void *ud) {
  if (uv_is_active(h) && uv_has_ref(h)) (*(int *)ud)++;
}

/* What keeps the loop running after requests are done: the server's two
 * listeners and its open connections, nothing of the client's (an idle
 * kept-alive connection does not, as curl's do not). */
static void test_idle_keeps_no_loop(void) {
  result r = get(C, "GET", "/cl");
  KB_CHECK(r.error == KB_HTTP_OK);
  uv_run(&S.loop, UV_RUN_NOWAIT);
  int refs = 0;
  uv_walk(&S.loop, count_ref, &refs);
  KB_CHECK(S.open >= 1); /* the kept-alive connection, seen from the server */
  KB_CHECK(refs == 2 + S.open);
}

/* An IPv6 literal (http://[::1]:port) goes on the native path, to the
 * right address, with the Host header curl sends ("[::1]:port"). */
static void test_ipv6_literal(void) {
  struct sockaddr_in6 a6;
  uv_ip6_addr("::1", 0, &a6);
  uv_tcp_init(&S.loop, &S.tcp6);
  int rc = uv_tcp_bind(&S.tcp6, (const struct sockaddr *)&a6, 0);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&S.tcp6, 128, on_raw_connection);
  if (rc != 0) {
    fprintf(stderr, "test_ipv6_literal: this machine has no IPv6 loopback (%s): not run\n",
            uv_strerror(rc));
    return;
  }
  struct sockaddr_in6 got;
  int len = sizeof got;
  uv_tcp_getsockname(&S.tcp6, (struct sockaddr *)&got, &len);
  int port = ntohs(got.sin6_port);
  char url[96], host[64];
  snprintf(url, sizeof url, "http://[::1]:%d/cl", port);
  snprintf(host, sizeof host, "Host: [::1]:%d\r\n", port);
  kb_http_request *r = kb_http_request_new(C, "GET", url);
  KB_CHECK(r != NULL);
  http_url u;
  KB_CHECK(kb__http_native_route(r, &u) == 1);
  KB_CHECK(u.v6 && strcmp(u.host, "::1") == 0 && u.port == port);
  int before = S.connections;
  result res = {0};
  perform(r, &res);
  KB_CHECK(res.error == KB_HTTP_OK && res.status == 200);
  KB_CHECK(S.connections == before + 1);
  KB_CHECK(strstr(S.last_head, host) != NULL);
}

/* A listener that never accepts, its queue full: a connect there is never
 * answered, so the connect timeout ends it, in libcurl's words. */
static int filled_listener(int *fill, int nfill, int *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  KB_CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 0) == 0);
  KB_CHECK(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
  *port = ntohs(a.sin_port);
  for (int i = 0; i < nfill; i++) {
    fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    KB_CHECK(fill[i] >= 0);
    int c = connect(fill[i], (struct sockaddr *)&a, sizeof a);
    KB_CHECK(c == 0 || errno == EINPROGRESS);
  }
  usleep(20000); /* the kernel completes the fillers' handshakes */
  return fd;
}

static result connect_timing_out(int use_curl, int port) {
  kb_http_client *c = client_on(use_curl);
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
  kb_http_request *r = kb_http_request_new(c, "GET", url);
  http_url u;
  KB_CHECK(use_curl || kb__http_native_route(r, &u) == 1); /* the native path takes it */
  kb_http_options o = KB_HTTP_OPTIONS_INIT;
  o.connect_timeout_ms = 150;
  KB_CHECK(kb_http_request_set_options(r, &o) == 0);
  result res = {0};
  perform(r, &res);
  kb_http_client_free(c);
  return res;
}

/* Do two messages say the same but for their "after N ms" figure? (The
 * native path's must be libcurl's, word for word.) */
static void without_ms(const char *msg, char *out, size_t n) {
  const char *a = strstr(msg, " after ");
  const char *b = a ? strstr(a, " ms") : NULL;
  if (!a || !b) {
    snprintf(out, n, "%s", msg);
    return;
  }
  snprintf(out, n, "%.*s%s", (int)(a - msg), msg, b + 3);
}

static int same_words(const char *native, const char *curl) {
  char a[512], b[512];
  without_ms(native, a, sizeof a);
  without_ms(curl, b, sizeof b);
  return strcmp(a, b) == 0;
}

static void test_connect_timeout(void) {
  int fill[4], port;
  int lfd = filled_listener(fill, 4, &port);
  usleep(30000); /* the loop's time falls behind: the timeout must not end early by it */
  result native = connect_timing_out(0, port), curl = connect_timing_out(1, port);
  KB_CHECK(native.error == KB_HTTP_ERR_TIMEOUT);
  KB_CHECK(curl.error == KB_HTTP_ERR_TIMEOUT);
  KB_CHECK(same_words(native.message, curl.message));
  KB_CHECK(strstr(native.message, "Failed to connect to 127.0.0.1 port") != NULL);
  KB_CHECK(strstr(native.message, "Timeout was reached") != NULL);
  KB_CHECK(native.time.total >= 0.149 && native.time.total < 5);
  for (int i = 0; i < 4; i++) close(fill[i]);
  close(lfd);
}

/* Nothing listens: refused at once, in libcurl's words. */
static void test_connect_refused(void) {
  int port;
  close(filled_listener(NULL, 0, &port)); /* a port that was just free */
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
  result native = get_url(C, url);
  kb_http_client *c = client_on(1);
  result curl = get_url(c, url);
  kb_http_client_free(c);
  KB_CHECK(native.error == KB_HTTP_ERR_CONNECT && curl.error == KB_HTTP_ERR_CONNECT);
  KB_CHECK(same_words(native.message, curl.message));
  KB_CHECK(strstr(native.message, "Failed to connect to 127.0.0.1 port") != NULL);
}


/* ---- host names ------------------------------------------------------------------------ */

/* http://localhost:port goes on the native path (looked up off the loop),
 * sends the bytes libcurl sends for it (Host: localhost:port), reports the
 * lookup's time, and the next request reuses the connection. Names only
 * libcurl can send as it would (upper case, IDN, a numeric shorthand, a
 * trailing dot) stay on libcurl. */
static void test_host_name(void) {
  char url[96];
  snprintf(url, sizeof url, "http://localhost:%d/cl", S.port);
  kb_http_request *r = kb_http_request_new(C, "GET", url);
  http_url u;
  KB_CHECK(kb__http_native_route(r, &u) == 1);
  KB_CHECK(u.named && strcmp(u.host, "localhost") == 0 && u.port == S.port);
  int before = S.connections;
  result first = {0};
  perform(r, &first);
  KB_CHECK(first.error == KB_HTTP_OK && first.status == 200);
  KB_CHECK(first.time.dns > 0 && first.time.dns <= first.time.total);
  char native[4096], viacurl[4096];
  snprintf(native, sizeof native, "%s", S.last_head);
  result again = get_url(C, url);
  KB_CHECK(again.error == KB_HTTP_OK && again.time.dns == 0); /* the answer is kept */
  KB_CHECK(S.connections == before + 1);                       /* and the connection */
  kb_http_client *curl = client_on(1);
  result viac = get_url(curl, url);
  KB_CHECK(viac.status == 200);
  snprintf(viacurl, sizeof viacurl, "%s", S.last_head);
  kb_http_client_free(curl);
  KB_CHECK_STR(native, viacurl);
  static const char *const curl_only[] = {"http://LOCALHOST:1/", "http://1234:1/",
                                          "http://10.1:1/", "http://localhost.:1/",
                                          "http://-a.example:1/", "http://a_b.example:1/",
                                          "http://xn--bcher-kva.example:1/x y"};
  for (size_t i = 0; i < sizeof curl_only / sizeof *curl_only; i++) {
    kb_http_request *q = kb_http_request_new(C, "GET", curl_only[i]);
    KB_CHECK(kb__http_native_route(q, &u) == 0);
    kb_http_request_free(q);
  }
  kb_http_request_free(kb_http_request_new(C, "GET", "http://kfp.example-1.test:8/"));
  r = kb_http_request_new(C, "GET", "http://ml-pipeline.kubeflow.svc.cluster.local:8888/apis");
  KB_CHECK(kb__http_native_route(r, &u) == 1 && u.named && u.port == 8888);
  kb_http_request_free(r);
}

/* A name that does not resolve: libcurl's words (or, where no resolver
 * answers in time, both paths time out resolving). */
static void test_host_unresolvable(void) {
  const char *url = "http://kbrun-no-such-host.invalid:81/";
  result res[2];
  for (int curl = 0; curl < 2; curl++) {
    kb_http_client *c = client_on(curl);
    kb_http_request *r = kb_http_request_new(c, "GET", url);
    kb_http_options o = KB_HTTP_OPTIONS_INIT;
    o.timeout_ms = 3000;
    KB_CHECK(kb_http_request_set_options(r, &o) == 0);
    memset(&res[curl], 0, sizeof res[curl]);
    perform(r, &res[curl]);
    kb_http_client_free(c);
  }
  KB_CHECK(res[0].error == res[1].error);
  KB_CHECK(res[0].error == KB_HTTP_ERR_DNS || res[0].error == KB_HTTP_ERR_TIMEOUT);
  if (res[0].error == KB_HTTP_ERR_DNS) {
    KB_CHECK_STR(res[0].message, res[1].message);
    KB_CHECK(strstr(res[0].message, "Could not resolve host: kbrun-no-such-host.invalid"));
  } else { /* "Resolving timed out after N milliseconds", N a millisecond apart */
    KB_CHECK(strncmp(res[0].message, "Resolving timed out after ", 26) == 0);
    KB_CHECK(strncmp(res[1].message, "Resolving timed out after ", 26) == 0);
  }
}

/* A name with two addresses, the first refusing: the connect goes on to
 * the second, as curl's does, and new connections then start there. The
 * addresses are put in the pool's entry as a lookup would leave them. */
static void test_host_next_address(void) {
  int refused;
  close(filled_listener(NULL, 0, &refused));
  kb_http_client *c = kb_http_client_new(&S.loop, NULL);
  http_url u = {.port = 1, .named = 1};
  snprintf(u.host, sizeof u.host, "two.example");
  http_host *h = kb__http_host_get(c, &u, NULL);
  KB_CHECK(h != NULL && h->naddrs == 0 && h->name != NULL);
  h->addrs = calloc(2, sizeof *h->addrs);
  uv_ip4_addr("127.0.0.1", refused, (struct sockaddr_in *)&h->addrs[0]);
  uv_ip4_addr("127.0.0.1", S.port, (struct sockaddr_in *)&h->addrs[1]);
  h->naddrs = 2;
  h->resolved_ms = uv_now(&S.loop);
  int before = S.connections;
  result res = get_url(c, "http://two.example:1/cl");
  KB_CHECK(res.error == KB_HTTP_OK && res.status == 200);
  KB_CHECK(S.connections == before + 1);
  KB_CHECK(h->preferred == 1);
  KB_CHECK(strstr(S.last_head, "Host: two.example:1\r\n") != NULL);
  /* both refusing: curl's words, naming the host */
  uv_ip4_addr("127.0.0.1", refused, (struct sockaddr_in *)&h->addrs[1]);
  h->preferred = 0;
  kb_http_client_free(c);
  c = kb_http_client_new(&S.loop, NULL);
  h = kb__http_host_get(c, &u, NULL);
  h->addrs = calloc(2, sizeof *h->addrs);
  uv_ip4_addr("127.0.0.1", refused, (struct sockaddr_in *)&h->addrs[0]);
  uv_ip4_addr("127.0.0.1", refused, (struct sockaddr_in *)&h->addrs[1]);
  h->naddrs = 2;
  h->resolved_ms = uv_now(&S.loop);
  res = get_url(c, "http://two.example:1/cl");
  KB_CHECK(res.error == KB_HTTP_ERR_CONNECT);
  KB_CHECK(strstr(res.message, "Failed to connect to two.example port 1 after ") != NULL);
  KB_CHECK(strstr(res.message, "Couldn't connect to server") != NULL);
  kb_http_client_free(c);
  uv_run(&S.loop, UV_RUN_NOWAIT);
}

/* A client whose host "two.example:1" has the two addresses given
 * (127.0.0.1 ports), looked up just now. */
static kb_http_client *two_address_client(int port0, int port1, http_host **hp) {
  kb_http_client *c = kb_http_client_new(&S.loop, NULL);
  http_url u = {.port = 1, .named = 1};
  snprintf(u.host, sizeof u.host, "two.example");
  http_host *h = kb__http_host_get(c, &u, NULL);
  KB_CHECK(h != NULL && h->naddrs == 0);
  h->addrs = calloc(2, sizeof *h->addrs);
  uv_ip4_addr("127.0.0.1", port0, (struct sockaddr_in *)&h->addrs[0]);
  uv_ip4_addr("127.0.0.1", port1, (struct sockaddr_in *)&h->addrs[1]);
  h->naddrs = 2;
  h->resolved_ms = uv_now(&S.loop);
  *hp = h;
  return c;
}

static result get_with_connect_timeout(kb_http_client *c, const char *url, uint64_t ms) {
  kb_http_request *r = kb_http_request_new(c, "GET", url);
  kb_http_options o = KB_HTTP_OPTIONS_INIT;
  o.connect_timeout_ms = ms;
  KB_CHECK(r != NULL && kb_http_request_set_options(r, &o) == 0);
  result res = {0};
  perform(r, &res);
  return res;
}

/* A first address that never answers (a full listen queue) does not end
 * the request: as curl, it gets half of the connect timeout and the next
 * address the rest. Both silent: one timeout in all, in curl's words. */
static void test_host_next_address_after_timeout(void) {
  int fill[4], silent;
  int lfd = filled_listener(fill, 4, &silent);
  http_host *h;
  kb_http_client *c = two_address_client(silent, S.port, &h);
  result res = get_with_connect_timeout(c, "http://two.example:1/cl", 400);
  KB_CHECK(res.error == KB_HTTP_OK && res.status == 200);
  KB_CHECK(h->preferred == 1);
  KB_CHECK(res.time.total >= 0.195 && res.time.total < 5); /* it waited its half first */
  kb_http_client_free(c);
  c = two_address_client(silent, silent, &h);
  res = get_with_connect_timeout(c, "http://two.example:1/cl", 300);
  KB_CHECK(res.error == KB_HTTP_ERR_TIMEOUT);
  KB_CHECK(strstr(res.message, "Failed to connect to two.example port 1 after ") != NULL);
  KB_CHECK(strstr(res.message, "Timeout was reached") != NULL);
  KB_CHECK(res.time.total >= 0.295 && res.time.total < 5); /* the whole timeout, once */
  kb_http_client_free(c);
  for (int i = 0; i < 4; i++) close(fill[i]);
  close(lfd);
  uv_run(&S.loop, UV_RUN_NOWAIT);
}

/* An answer older than curl's DNS cache (60 s) is looked up again in the
 * background: the request goes at once to the address it had. A client
 * freed while a lookup runs lives until the lookup ends. */
static void test_host_refresh_and_free(void) {
  char url[96], closing[96];
  snprintf(url, sizeof url, "http://localhost:%d/cl", S.port);
  snprintf(closing, sizeof closing, "http://localhost:%d/close", S.port);
  kb_http_client *c = kb_http_client_new(&S.loop, NULL);
  result res = get_url(c, closing); /* no connection stays: the next one is new */
  KB_CHECK(res.error == KB_HTTP_OK);
  http_host *h = c->native.hosts;
  KB_CHECK(h != NULL && h->name != NULL && h->naddrs >= 1 && h->idle == NULL);
  h->resolved_ms -= 61000;
  kb_http_request *r = kb_http_request_new(c, "GET", url);
  result again = {0};
  KB_CHECK(kb_http_request_start(r, on_done, &again) == 0);
  KB_CHECK(h->lookup != NULL); /* looking up again */
  run_until(&again.done, 1);
  KB_CHECK(again.error == KB_HTTP_OK && again.time.dns == 0);
  for (int i = 0; i < 200 && h->lookup; i++) uv_run(&S.loop, UV_RUN_ONCE);
  KB_CHECK(h->lookup == NULL && uv_now(&S.loop) - h->resolved_ms < 60000);
  /* freed while its lookup runs: the lookup ends on its own */
  kb_http_request *w = kb_http_request_new(c, "GET", "http://kbrun-lookup-in-flight.invalid:1/");
  result never = {0};
  KB_CHECK(kb_http_request_start(w, on_done, &never) == 0);
  kb_http_client_free(c);
  for (int i = 0; i < 500; i++) uv_run(&S.loop, UV_RUN_NOWAIT), usleep(1000);
  KB_CHECK(never.done == 0);
}

int main(void) {
  uv_loop_init(&S.loop);
  struct sockaddr_in addr;
  uv_ip4_addr("127.0.0.1", 0, &addr);
  uv_tcp_init(&S.loop, &S.tcp);
  if (uv_tcp_bind(&S.tcp, (const struct sockaddr *)&addr, 0) != 0 ||
      uv_listen((uv_stream_t *)&S.tcp, 128, on_raw_connection) != 0) {
    fprintf(stderr, "cannot listen\n");
    return 1;
  }
  struct sockaddr_in got;
  int len = sizeof got;
  uv_tcp_getsockname(&S.tcp, (struct sockaddr *)&got, &len);
  S.port = ntohs(got.sin_port);
  snprintf(S.base, sizeof S.base, "http://127.0.0.1:%d", S.port);
  snprintf(S.sock_path, sizeof S.sock_path, "/tmp/kbrun-native-test-%d.sock", (int)getpid());
  unlink(S.sock_path);
  uv_pipe_init(&S.loop, &S.pipe, 0);
  if (uv_pipe_bind(&S.pipe, S.sock_path) != 0 ||
      uv_listen((uv_stream_t *)&S.pipe, 128, on_raw_connection) != 0) {
    fprintf(stderr, "cannot listen on %s\n", S.sock_path);
    return 1;
  }
  unsetenv("KBRUN_HTTP");
  C = kb_http_client_new(&S.loop, NULL);

  KB_RUN(test_framings);
  KB_RUN(test_connection_fates);
  KB_RUN(test_errors);
  KB_RUN(test_limits);
  KB_RUN(test_unix_socket);
  KB_RUN(test_same_bytes_as_curl);
  KB_RUN(test_cancel_and_free);
  KB_RUN(test_idle_keeps_no_loop);
  KB_RUN(test_ipv6_literal);
  KB_RUN(test_connect_timeout);
  KB_RUN(test_connect_refused);
  KB_RUN(test_host_name);
  KB_RUN(test_host_unresolvable);
  KB_RUN(test_host_next_address);
  KB_RUN(test_host_next_address_after_timeout);
  KB_RUN(test_host_refresh_and_free);

  kb_http_client_free(C);
  uv_close((uv_handle_t *)&S.tcp, NULL);
  uv_close((uv_handle_t *)&S.tcp6, NULL);
  uv_close((uv_handle_t *)&S.pipe, NULL);
  while (S.conns) raw_close(S.conns); /* the hanging ones */
  uv_run(&S.loop, UV_RUN_DEFAULT);
  KB_CHECK(uv_loop_close(&S.loop) == 0);
  unlink(S.sock_path);
  return kb_test_report();
}
