/* The HTTP server's request accessors and responses: status line and
 * headers, a whole body, or a streamed one (chunked, fixed or raw), with
 * Server-Timing and Date (http_server.c describes the connection). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "kb/log.h"
#include "http_server_internal.h"

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
  if (req_gone(r)) return kb_httpd_req_release_gone(r);
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
  rc = kb_httpd_conn_write(c, bufs, with_body && !r->head_only && len ? 2 : 1);
  kb_buf_free(&head);
  if (rc < 0) {
    c->srv->stats.aborted++;
    kb_httpd_conn_close(c);
    return kb_httpd_req_release_gone(r);
  }
  kb_httpd_req_finish(r);
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
  if (rc == 0) rc = kb_httpd_conn_write_str(r->conn, head.data, head.len) < 0 ? KB_HTTPD_EGONE : 0;
  kb_buf_free(&head);
  if (rc == UV_ENOMEM) return rc;
  r->state = REQ_STREAMING;
  r->mode = r->head_only ? BODY_NONE : mode;
  if (rc) kb_httpd_conn_close(r->conn); /* the abort callback follows */
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
  if (kb_httpd_conn_write(r->conn, bufs, nb) < 0) {
    kb_httpd_conn_close(r->conn);
    return KB_HTTPD_EGONE;
  }
  return 0;
}

int kb_httpd_stream_end(kb_httpd_req *r) {
  if (req_gone(r)) return kb_httpd_req_release_gone(r);
  if (r->state != REQ_STREAMING) return KB_HTTPD_ESTATE;
  conn *c = r->conn;
  if (r->mode == BODY_CHUNKED && kb_httpd_conn_write_str(c, "0\r\n\r\n", 5) < 0) {
    c->srv->stats.aborted++;
    kb_httpd_conn_close(c);
    return kb_httpd_req_release_gone(r);
  }
  kb_httpd_req_finish(r);
  return 0;
}

int kb_httpd_reset(kb_httpd_req *r, const void *partial, size_t len) {
  if (req_gone(r)) return kb_httpd_req_release_gone(r);
  conn *c = r->conn;
  c->req = NULL;
  kb_httpd_req_free(r);
  c->resetting = 1;
  c->in_len = 0;
  c->deadline = uv_now(c->srv->loop) + c->srv->cfg.linger_ms;
  link_remove(&c->ready);
  if (c->reading) {
    uv_read_stop(&c->io.stream);
    c->reading = 0;
  }
  if (len && partial && kb_httpd_conn_write_str(c, partial, len) < 0) kb_httpd_conn_close(c);
  else if (c->writes == 0) kb_httpd_conn_reset_now(c);
  return 0;
}
