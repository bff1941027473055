/* http_native_bench: what a native HTTP/1.1 keep-alive client on libuv and
 * http_parser (both linked already) would cost per request, for the
 * libcurl-or-native decision in docs/design-notes.md. Not a client kbrun
 * uses: plain http://host:port/path GETs only, no redirects, TLS, proxies,
 * timeouts or error reporting beyond counting. It does the work such a
 * path must do per request: format the request (the headers curl sends:
 * Host, User-Agent, Accept), one write, reads into a per-connection buffer,
 * parse the response, keep its header block and body in kb_bufs as the
 * client does, and start the next request on the same connection.
 *
 * Same command line and summary line as build/bench/http_bench, so
 * bench/http/run.sh runs it beside wrk and the libcurl path ("native"):
 *
 *   build/bench/http_native_bench http://127.0.0.1:8080/small.json connections=64 duration=10
 *   http_bench requests=1234567 errors=0 seconds=10.00 rps=123456 p50_ms=0.50 p99_ms=1.10
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <http_parser.h>
#include <uv.h>

#include "kb/buf.h"
#include "kb/hdr.h"
#include "kb/version.h"

typedef struct probe probe;

typedef struct {
  uv_tcp_t tcp;
  uv_connect_t connect;
  uv_write_t write;
  http_parser parser;
  probe *p;
  char rbuf[16384];
  kb_buf headers, body;
  int in_value;  /* the last header callback was a value */
  uint64_t t0;
} conn;

struct probe {
  uv_loop_t loop;
  struct sockaddr_in addr;
  char request[512];
  size_t request_len;
  uint64_t stop_ns;
  uint64_t requests, errors;
  kb_hdr *lat;
  http_parser_settings settings;
};

static void send_request(conn *c);

static void on_closed(uv_handle_t *h) {
  conn *c = h->data;
  kb_buf_free(&c->headers);
  kb_buf_free(&c->body);
}

static void fail(conn *c) {
  c->p->errors++;
  if (!uv_is_closing((uv_handle_t *)&c->tcp)) uv_close((uv_handle_t *)&c->tcp, on_closed);
}

static int on_header_field(http_parser *hp, const char *at, size_t n) {
  conn *c = hp->data;
  if (c->in_value && kb_buf_append(&c->headers, "\r\n", 2)) return -1;
  c->in_value = 0;
  return kb_buf_append(&c->headers, at, n);
}

static int on_header_value(http_parser *hp, const char *at, size_t n) {
  conn *c = hp->data;
  if (!c->in_value && kb_buf_append(&c->headers, ": ", 2)) return -1;
  c->in_value = 1;
  return kb_buf_append(&c->headers, at, n);
}

static int on_body(http_parser *hp, const char *at, size_t n) {
  return kb_buf_append(&((conn *)hp->data)->body, at, n);
}

static int on_message_complete(http_parser *hp) {
  conn *c = hp->data;
  probe *p = c->p;
  uint64_t t1 = uv_hrtime();
  if (hp->status_code == 200) {
    p->requests++;
    kb_hdr_record(p->lat, (int64_t)((t1 - c->t0) / 1000), 1);
  } else {
    p->errors++;
  }
  if (t1 >= p->stop_ns || !http_should_keep_alive(hp)) {
    uv_close((uv_handle_t *)&c->tcp, on_closed);
    return 0;
  }
  send_request(c);
  return 0;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  conn *c = h->data;
  (void)suggested;
  *buf = uv_buf_init(c->rbuf, sizeof c->rbuf);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  conn *c = s->data;
  if (n < 0) {
    fail(c);
    return;
  }
  size_t done = http_parser_execute(&c->parser, &c->p->settings, buf->base, (size_t)n);
  if (done != (size_t)n && !uv_is_closing((uv_handle_t *)&c->tcp)) fail(c);
}

static void on_written(uv_write_t *w, int status) {
  if (status < 0) fail(w->data);
}

static void send_request(conn *c) {
  probe *p = c->p;
  kb_buf_clear(&c->headers);
  kb_buf_clear(&c->body);
  c->in_value = 0;
  http_parser_init(&c->parser, HTTP_RESPONSE);
  c->parser.data = c;
  c->t0 = uv_hrtime();
  uv_buf_t b = uv_buf_init(p->request, (unsigned)p->request_len);
  int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
  if (n == (int)b.len) return;
  if (n > 0) b = uv_buf_init(p->request + n, (unsigned)(p->request_len - (size_t)n));
  c->write.data = c;
  if (uv_write(&c->write, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0) fail(c);
}

static void on_connected(uv_connect_t *req, int status) {
  conn *c = req->data;
  if (status < 0 || uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
    fail(c);
    return;
  }
  send_request(c);
}

static long arg_long(int argc, char **argv, const char *key, long def) {
  size_t n = strlen(key);
  for (int i = 2; i < argc; i++)
    if (strncmp(argv[i], key, n) == 0 && argv[i][n] == '=') return strtol(argv[i] + n + 1, NULL, 10);
  return def;
}

int main(int argc, char **argv) {
  char host[64];
  int port = 0, off = 0;
  if (argc < 2 || sscanf(argv[1], "http://%63[0-9.]:%d%n", host, &port, &off) < 2 ||
      argv[1][off] != '/') {
    fprintf(stderr, "usage: http_native_bench http://IPV4:PORT/PATH [connections=64] [duration=10]\n");
    return 2;
  }
  long conns = arg_long(argc, argv, "connections", 64);
  long duration = arg_long(argc, argv, "duration", 10);
  if (conns < 1 || duration < 1) return 2;
  static probe p;
  kb_hdr_config cfg = {.highest = 60 * 1000 * 1000, .digits = 3, .unit = 1e-6};
  int err = 0;
  if (!(p.lat = kb_hdr_new(&cfg, &err))) return 1;
  uv_loop_init(&p.loop);
  uv_ip4_addr(host, port, &p.addr);
  int len = snprintf(p.request, sizeof p.request,
                     "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: kbrun/" KB_VERSION
                     "\r\nAccept: */*\r\n\r\n", argv[1] + off, host, port);
  if (len <= 0 || (size_t)len >= sizeof p.request) return 2;
  p.request_len = (size_t)len;
  http_parser_settings_init(&p.settings);
  p.settings.on_header_field = on_header_field;
  p.settings.on_header_value = on_header_value;
  p.settings.on_body = on_body;
  p.settings.on_message_complete = on_message_complete;
  conn *cs = calloc((size_t)conns, sizeof *cs);
  if (!cs) return 1;
  uint64_t started = uv_hrtime();
  p.stop_ns = started + (uint64_t)duration * 1000000000u;
  for (long i = 0; i < conns; i++) {
    conn *c = &cs[i];
    c->p = &p;
    uv_tcp_init(&p.loop, &c->tcp);
    uv_tcp_nodelay(&c->tcp, 1);
    c->tcp.data = c;
    c->connect.data = c;
    if (uv_tcp_connect(&c->connect, &c->tcp, (const struct sockaddr *)&p.addr, on_connected) != 0)
      fail(c);
  }
  uv_run(&p.loop, UV_RUN_DEFAULT);
  double seconds = (double)(uv_hrtime() - started) / 1e9;
  uv_loop_close(&p.loop);
  printf("http_bench requests=%llu errors=%llu seconds=%.2f rps=%.0f p50_ms=%.3f p99_ms=%.3f\n",
         (unsigned long long)p.requests, (unsigned long long)p.errors, seconds,
         (double)p.requests / seconds, (double)kb_hdr_value_at_percentile(p.lat, 50) / 1e3,
         (double)kb_hdr_value_at_percentile(p.lat, 99) / 1e3);
  kb_hdr_free(p.lat);
  free(cs);
  return p.requests ? 0 : 1;
}
