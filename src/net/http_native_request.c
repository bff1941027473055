/* What goes on the wire on the native HTTP/1.1 path (http_native.c):
 * which requests it takes, and their bytes, which are the ones libcurl
 * would send for the same request (c.test_http_native compares them).
 * A request it does not take goes to libcurl unchanged. */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "http_client_internal.h"
#include "kb/version.h"

/* ---- which requests ---------------------------------------------------------------- */

/* The request target's bytes are sent as they are: curl would encode or
 * normalise anything else (blanks, non-ASCII, dot segments), so that goes
 * to libcurl. */
static int target_plain(const char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)p[i] <= 0x20 || (unsigned char)p[i] >= 0x7f) return 0;
  size_t q = strcspn(p, "?");
  for (size_t i = 0; i + 1 < q && i < n; i++)
    if (p[i] == '/' && p[i + 1] == '.' &&
        (i + 2 >= q || p[i + 2] == '/' || (p[i + 2] == '.' && (i + 3 >= q || p[i + 3] == '/'))))
      return 0;
  return 1;
}


/* A host name the native path looks up itself as libcurl would: lower-case
 * letters, digits, '-' and '.' (no IDN, which curl converts; no upper case,
 * which curl may rewrite), labels that do not start or end with '-', and a
 * last label that is not all digits (curl reads "10.1" or "1234" as an IPv4
 * address in shorthand). */
static int plain_name(const char *h) {
  size_t n = strlen(h);
  if (n == 0 || n > 253) return 0;
  int last_has_letter = 0;
  size_t label = 0;
  for (size_t i = 0; i < n; i++) {
    char ch = h[i];
    if (ch == '.') {
      if (label == 0 || h[i - 1] == '-') return 0;
      label = 0;
      last_has_letter = 0;
      continue;
    }
    int letter = ch >= 'a' && ch <= 'z';
    if (!letter && !(ch >= '0' && ch <= '9') && ch != '-') return 0;
    if (ch == '-' && label == 0) return 0;
    if (++label > 63) return 0;
    last_has_letter |= letter;
  }
  return label > 0 && h[n - 1] != '-' && last_has_letter;
}

/* "http://IPV4[:port][/...]", "http://[IPV6][:port][/...]" or
 * "http://NAME[:port][/...]" (plain_name); over a Unix socket any host name
 * (it only goes into Host:). 0 if the native path cannot send it as curl
 * would. */
static int parse_url(const kb_http_request *r, http_url *u) {
  const char *url = r->url.data;
  if (strncmp(url, "http://", 7) != 0) return 0;
  const char *a = url + 7;
  size_t alen = strcspn(a, "/?");
  if (alen == 0 || memchr(a, '@', alen)) return 0; /* userinfo: curl's basic auth */
  u->authority = a;
  u->authority_len = alen;
  u->target = a + alen;
  u->target_len = strlen(u->target);
  if (!target_plain(u->target, u->target_len)) return 0;
  const char *hend, *hstart = a;
  u->v6 = a[0] == '[';
  if (u->v6) {
    const char *close = memchr(a, ']', alen);
    if (!close) return 0;
    hstart = a + 1;
    hend = close;
  } else {
    hend = memchr(a, ':', alen);
    if (!hend) hend = a + alen;
  }
  const char *pend = a + alen;
  u->port = 80;
  if (hend < pend && *(hend + u->v6) == ':') {
    const char *p = hend + u->v6 + 1;
    if (p == pend || pend - p > 5) return 0;
    int port = 0;
    for (; p < pend; p++) {
      if (*p < '0' || *p > '9') return 0;
      port = port * 10 + (*p - '0');
    }
    if (port < 1 || port > 65535) return 0;
    u->port = port;
  } else if (hend + u->v6 != pend) {
    return 0;
  }
  size_t hlen = (size_t)(hend - hstart);
  if (hlen == 0 || hlen >= sizeof u->host) return 0;
  memcpy(u->host, hstart, hlen);
  u->host[hlen] = '\0';
  u->named = 0;
  if (r->unix_path.len) return 1;
  unsigned char bin[16];
  if (inet_pton(u->v6 ? AF_INET6 : AF_INET, u->host, bin) == 1) return 1;
  if (u->v6 || !plain_name(u->host)) return 0;
  u->named = 1;
  return 1;
}

/* The header lines a request was given ("Name: value", "Name;" for an
 * empty value, "Name:" to drop one curl would add), one at a time. */
static const char *header_line(const kb_http_request *r, size_t *pos, size_t *len) {
  if (*pos >= r->hdr_text.len) return NULL;
  const char *line = r->hdr_text.data + *pos;
  *len = strlen(line);
  *pos += *len + 1;
  return line;
}

static int line_names(const char *line, size_t len, const char *name) {
  size_t n = strlen(name);
  return len >= n + 1 && (line[n] == ':' || line[n] == ';') && strncasecmp(line, name, n) == 0;
}

/* Headers whose meaning the native path does not implement (the framing,
 * the connection's fate, a 100-continue round trip) leave it to libcurl. */
static int headers_plain(const kb_http_request *r) {
  static const char *const framing[] = {"Content-Length", "Transfer-Encoding", "Connection",
                                        "Upgrade", "TE"};
  size_t pos = 0, len;
  const char *line;
  while ((line = header_line(r, &pos, &len))) {
    for (size_t i = 0; i < sizeof framing / sizeof *framing; i++)
      if (line_names(line, len, framing[i])) return 0;
    if (line_names(line, len, "Expect") && len > 7) return 0; /* "Expect:" drops it: fine */
  }
  return 1;
}

int kb__http_native_route(const kb_http_request *r, http_url *u) {
  const kb_http_client *c = r->client;
  if (c->native.off || r->curl_only || r->stream || r->mime || r->follow) return 0;
  if (c->proxy_env && !r->proxy_off && !r->unix_path.len) return 0;
  if (strcmp(r->method, "CONNECT") == 0) return 0;
  return parse_url(r, u) && headers_plain(r);
}

/* ---- their bytes ------------------------------------------------------------------- */

#define OUT_LIT(b, s) kb_buf_append((b), (s), sizeof(s) - 1)

/* The request as curl writes it: request line, Host, User-Agent, Accept
 * (each unless the caller gave or dropped it), the caller's headers,
 * Content-Length when there is a body or the method always has one. */
int kb__http_native_build(const kb_http_request *r, const http_url *u, kb_buf *b) {
  int err = 0;
  b->len = 0;
  const char *m = r->method;
  err |= kb_buf_append(b, m, strlen(m));
  err |= OUT_LIT(b, " ");
  if (u->target_len == 0 || u->target[0] == '?') err |= OUT_LIT(b, "/");
  err |= kb_buf_append(b, u->target, u->target_len);
  err |= OUT_LIT(b, " HTTP/1.1\r\n");
  if (!kb_http_request_has_header(r, "Host")) {
    err |= OUT_LIT(b, "Host: ");
    err |= kb_buf_append(b, u->authority, u->authority_len);
    err |= OUT_LIT(b, "\r\n");
  }
  if (!kb_http_request_has_header(r, "User-Agent"))
    err |= OUT_LIT(b, "User-Agent: kbrun/" KB_VERSION "\r\n");
  if (!kb_http_request_has_header(r, "Accept")) err |= OUT_LIT(b, "Accept: */*\r\n");
  size_t pos = 0, len;
  const char *line;
  while ((line = header_line(r, &pos, &len))) {
    if (line[len - 1] == ':') continue; /* dropped */
    if (line[len - 1] == ';') {        /* sent empty */
      err |= kb_buf_append(b, line, len - 1);
      err |= OUT_LIT(b, ":\r\n");
      continue;
    }
    err |= kb_buf_append(b, line, len);
    err |= OUT_LIT(b, "\r\n");
  }
  int always = !strcmp(m, "POST") || !strcmp(m, "PUT") || !strcmp(m, "PATCH");
  if (r->has_body || always) {
    char cl[40];
    int n = snprintf(cl, sizeof cl, "Content-Length: %zu\r\n", r->body.len);
    err |= kb_buf_append(b, cl, (size_t)n);
  }
  err |= OUT_LIT(b, "\r\n");
  if (r->body.len) err |= kb_buf_append(b, r->body.data, r->body.len);
  return err ? -ENOMEM : 0;
}
