/* Text helpers of the HTTP client: header tokens, percent-encoding,
 * response header parsing and URL redaction. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_client_internal.h"
#include "kb/redact.h"

/* ---- tokens ------------------------------------------------------------------ */

int kb_http_token_valid(const char *s, size_t n) {
  if (n == 0) return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch <= ' ' || ch >= 127 || strchr("\"(),/:;<=>?@[\\]{}", ch)) return 0;
  }
  return 1;
}

/* ---- percent-encoding --------------------------------------------------------- */

static int unreserved(unsigned char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '-' || ch == '.' || ch == '_' || ch == '~';
}

size_t kb_http_percent_encode(char *out, const char *s, size_t len) {
  static const char hex[] = "0123456789ABCDEF";
  char *o = out;
  for (size_t i = 0; i < len; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (unreserved(ch)) {
      *o++ = (char)ch;
    } else {
      *o++ = '%';
      *o++ = hex[ch >> 4];
      *o++ = hex[ch & 15];
    }
  }
  *o = '\0';
  return (size_t)(o - out);
}

/* ---- headers ------------------------------------------------------------------- */

static int blank(char ch) { return ch == ' ' || ch == '\t'; }

int kb_http_header_next(const char *block, size_t len, size_t *pos, kb_http_header *h) {
  while (*pos < len) {
    const char *line = block + *pos;
    const char *nl = memchr(line, '\n', len - *pos);
    size_t n = nl ? (size_t)(nl - line) : len - *pos;
    *pos += nl ? n + 1 : n;
    if (n && line[n - 1] == '\r') n--;
    const char *colon = memchr(line, ':', n);
    if (!colon || colon == line) continue; /* not a header (folded line, junk) */
    const char *v = colon + 1, *end = line + n;
    while (v < end && blank(*v)) v++;
    while (end > v && blank(end[-1])) end--;
    h->name = line;
    h->name_len = (size_t)(colon - line);
    h->value = v;
    h->value_len = (size_t)(end - v);
    return 1;
  }
  return 0;
}

const char *kb_http_response_header(const kb_http_response *resp, const char *name,
                                    size_t *value_len) {
  size_t pos = 0, nlen = strlen(name);
  kb_http_header h;
  while (kb_http_header_next(resp->headers, resp->headers_len, &pos, &h)) {
    if (h.name_len == nlen && strncasecmp(h.name, name, nlen) == 0) {
      if (value_len) *value_len = h.value_len;
      return h.value;
    }
  }
  return NULL;
}

/* ---- redaction ------------------------------------------------------------------- */

typedef struct {
  char *out;
  size_t cap, len;
} writer;

static void put(writer *w, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++, w->len++)
    if (w->len + 1 < w->cap) w->out[w->len] = s[i];
}

static int looks_secret(const char *name, size_t n) {
  static const char *const words[] = {"token", "key", "secret", "pass", "pwd", "sig",
                                      "auth", "cred", "session", "code", NULL};
  for (const char *const *w = words; *w; w++) {
    size_t wl = strlen(*w);
    for (size_t i = 0; i + wl <= n; i++)
      if (strncasecmp(name + i, *w, wl) == 0) return 1;
  }
  return 0;
}

static void put_query(writer *w, const char *q, size_t n) {
  const char *end = q + n;
  while (q < end) {
    const char *amp = memchr(q, '&', (size_t)(end - q));
    const char *pe = amp ? amp : end;
    const char *eq = memchr(q, '=', (size_t)(pe - q));
    if (eq && looks_secret(q, (size_t)(eq - q))) {
      put(w, q, (size_t)(eq - q) + 1);
      put(w, KB_REDACTED, strlen(KB_REDACTED));
    } else {
      put(w, q, (size_t)(pe - q));
    }
    if (amp) put(w, "&", 1);
    q = amp ? amp + 1 : end;
  }
}

size_t kb_http_url_redact(const char *url, char *out, size_t outsz) {
  writer w = {out, outsz, 0};
  const char *end = url + strcspn(url, "#");
  const char *p = url;
  const char *scheme = strstr(url, "://");
  if (scheme && scheme < end) {
    p = scheme + 3;
    put(&w, url, (size_t)(p - url));
    size_t alen = strcspn(p, "/?#");
    const char *at = NULL;
    for (const char *a = p; a < p + alen; a++)
      if (*a == '@') at = a;
    if (at) { /* a token used as the user name is as secret as a password */
      put(&w, KB_REDACTED "@", strlen(KB_REDACTED) + 1);
      p = at + 1;
    }
  }
  const char *q = memchr(p, '?', (size_t)(end - p));
  put(&w, p, (size_t)((q ? q : end) - p));
  if (q) {
    put(&w, "?", 1);
    put_query(&w, q + 1, (size_t)(end - q - 1));
  }
  if (outsz) out[w.len < outsz ? w.len : outsz - 1] = '\0';
  return w.len;
}
