/* Request objects of the HTTP client: building, starting, finishing and
 * recycling. A request owns one curl easy handle for its whole life; released
 * requests go to the client's free list so the hot path reuses the handle and
 * every buffer instead of allocating.
 *
 * A streamed request (kb_http_request_set_stream) has its own curl write
 * and header callbacks; a plain one never runs stream code. They store the
 * body in resp_body and mark when the final head is complete; drain() (in
 * http_client.c) then calls kb__http_stream_deliver from outside curl.
 * Flow control uses curl's own pause: the write callback refuses bytes
 * (CURL_WRITEFUNC_PAUSE) while the consumer holds the stream or too much
 * awaits delivery, and curl_easy_pause(CONT) runs only from deliver or from
 * kb_http_request_resume, never inside a curl callback. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_client_internal.h"
#include "kb/log.h"
#include "kb/version.h"

#define KEEP_SMALL (4 * 1024)  /* url, header and message buffers kept on reuse */
#define KEEP_LARGE (64 * 1024) /* request and response bodies kept on reuse */
#define MAX_FREE 512           /* idle requests kept per client */
#define STREAM_PENDING (256 * 1024) /* stream bytes awaiting on_data before curl pauses */

/* ---- curl callbacks ------------------------------------------------------------ */

static size_t on_body(char *p, size_t size, size_t n, void *ud) {
  kb_http_request *r = ud;
  size_t len = size * n;
  /* Refusing the piece ends the transfer (CURLE_WRITE_ERROR) before the
   * buffer passes the limit; fill_outcome says why. */
  if (r->max_body && len > r->max_body - r->resp_body.len) {
    r->body_too_large = 1;
    return 0;
  }
  return kb_buf_append(&r->resp_body, p, len) == 0 ? len : 0;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud) {
  kb_http_request *r = ud;
  size_t len = size * n;
  if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) {
    /* A new response (after a redirect or a 100 Continue): only the final
     * one's headers and body are kept. */
    r->resp_headers.len = 0;
    r->resp_body.len = 0;
    return len;
  }
  if (len <= 2) return len; /* the blank line closing the header block */
  return kb_buf_append(&r->resp_headers, p, len) == 0 ? len : 0;
}

/* A streamed body: stored until drain() hands it to on_data. Refusing a
 * piece (CURL_WRITEFUNC_PAUSE) pauses the transfer; curl keeps the piece
 * and offers it again once kb__http_stream_deliver unpauses it. */
static size_t on_stream_body(char *p, size_t size, size_t n, void *ud) {
  kb_http_request *r = ud;
  size_t len = size * n;
  if (r->hold || r->resp_body.len >= STREAM_PENDING) {
    r->paused = r->was_paused = 1;
    return CURL_WRITEFUNC_PAUSE;
  }
  if (kb_buf_append(&r->resp_body, p, len) != 0) return 0;
  if (r->head_state == HEAD_NONE) r->head_state = HEAD_READY; /* body bytes: the head was final */
  kb__http_stream_queue(r);
  return len;
}

/* Whether the header block that just ended is the final response's: not a
 * 1xx, and not a redirect curl is about to follow. (When in doubt, the
 * first body byte or the end of the transfer settles it.) */
static int head_is_final(const kb_http_request *r) {
  if (r->head_status < 200) return 0;
  return !(r->follow && r->head_status / 100 == 3 && r->head_location);
}

static size_t on_stream_header(char *p, size_t size, size_t n, void *ud) {
  kb_http_request *r = ud;
  size_t len = size * n;
  if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) {
    const char *sp = memchr(p, ' ', len);
    r->head_status = sp ? strtol(sp + 1, NULL, 10) : 0;
    r->head_location = 0;
  } else if (len > 9 && strncasecmp(p, "Location:", 9) == 0) {
    r->head_location = 1;
  } else if (len <= 2 && r->head_state == HEAD_NONE && head_is_final(r)) {
    r->head_state = HEAD_READY;
    kb__http_stream_queue(r);
  }
  return on_header(p, size, n, ud);
}

/* The options every request has; curl_easy_reset clears them. */
static void easy_baseline(kb_http_request *r) {
  CURL *e = r->easy;
  curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)r);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, kb__http_open_socket);
  curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, r);
  /* Connections outlive requests: the close callback gets the client. */
  curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, kb__http_close_socket);
  curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, r->client);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_USERAGENT, "kbrun/" KB_VERSION);
  /* No proxy variable set: "*" tells libcurl there is no proxy for any
   * host, and it skips its five environment lookups per request (an empty
   * CURLOPT_PROXY does not). A request's proxy option undoes it. */
  if (!r->client->proxy_env) curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
}

/* ---- life cycle --------------------------------------------------------------------- */

static void server_name_clear(kb_http_request *r) {
  free(r->tls_server_name);
  r->tls_server_name = NULL;
  curl_slist_free_all(r->connect_to);
  r->connect_to = NULL;
}

void kb__http_request_destroy(kb_http_request *r) {
  server_name_clear(r);
  if (r->mime) curl_mime_free(r->mime);
  if (r->easy) curl_easy_cleanup(r->easy);
  curl_url_cleanup(r->uh);
  kb_buf_free(&r->uh_url);
  kb_buf_free(&r->url);
  kb_buf_free(&r->hdr_text);
  kb_buf_free(&r->body);
  kb_buf_free(&r->resp_body);
  kb_buf_free(&r->spare);
  kb_buf_free(&r->resp_headers);
  kb_buf_free(&r->msg);
  kb_buf_free(&r->unix_path);
  kb_buf_free(&r->wire);
  free(r->hdr_nodes);
  free(r);
}

static kb_http_request *request_alloc(kb_http_client *c) {
  kb_http_request *r = c->free_list;
  if (r) {
    c->free_list = r->next;
    c->nfree--;
    r->next = NULL;
    return r;
  }
  r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->client = c;
  if (!(r->easy = curl_easy_init())) {
    free(r);
    return NULL;
  }
  easy_baseline(r);
  return r;
}

static void stream_clear(kb_http_request *r) {
  kb_buf_reset(&r->spare, KEEP_LARGE);
  r->stream = 0;
  r->on_head = NULL;
  r->on_data = NULL;
  r->stream_ud = NULL;
  r->head_state = HEAD_NONE;
  r->head_status = 0;
  r->head_location = 0;
  r->hold = r->paused = 0;
}

static void request_release(kb_http_request *r) {
  kb_http_client *c = r->client;
  server_name_clear(r);
  if (r->mime) {
    curl_mime_free(r->mime);
    r->mime = NULL;
  }
  /* A handle that was paused may keep curl's paused-transfer state (and
   * the piece it holds for us) across curl_easy_reset: not worth reusing. */
  if (c->closing || c->nfree >= MAX_FREE || r->was_paused) {
    kb__http_request_destroy(r);
    return;
  }
  if (r->dirty) {
    curl_easy_reset(r->easy);
    r->uh_set = 0;
    easy_baseline(r);
    r->dirty = 0;
  }
  kb_buf_reset(&r->url, KEEP_SMALL);
  kb_buf_reset(&r->hdr_text, KEEP_SMALL);
  kb_buf_reset(&r->body, KEEP_LARGE);
  kb_buf_reset(&r->resp_body, KEEP_LARGE);
  kb_buf_reset(&r->resp_headers, KEEP_SMALL);
  kb_buf_reset(&r->msg, KEEP_SMALL);
  if (r->stream) stream_clear(r);
  r->max_body = 0;
  r->body_too_large = 0;
  r->follow = 0;
  r->timeout_ms = 0;
  kb_buf_clear(&r->unix_path);
  kb_buf_reset(&r->wire, KEEP_LARGE);
  r->connect_timeout_ms = 0;
  r->curl_only = r->proxy_off = r->clock_timeout = 0;
  r->native = 0;
  r->host = NULL;
  r->conn = NULL;
  r->nheaders = 0;
  r->has_body = 0;
  r->url_has_query = 0;
  r->cb = NULL;
  r->ud = NULL;
  r->next = c->free_list;
  c->free_list = r;
  c->nfree++;
}

kb_http_request *kb_http_request_new(kb_http_client *c, const char *method, const char *url) {
  size_t mlen = strlen(method);
  if (c->closing || !kb_http_token_valid(method, mlen) || mlen >= sizeof ((kb_http_request *)0)->method)
    return NULL;
  kb_http_request *r = request_alloc(c);
  if (!r) return NULL;
  memcpy(r->method, method, mlen + 1);
  size_t ulen = strcspn(url, "#");
  if (kb_buf_append(&r->url, url, ulen) != 0) {
    request_release(r);
    return NULL;
  }
  r->url_has_query = memchr(url, '?', ulen) != NULL;
  return r;
}

/* ---- building -------------------------------------------------------------------- */

int kb_http_request_add_query(kb_http_request *r, const char *name, size_t name_len,
                              const char *value, size_t value_len) {
  kb_buf *u = &r->url;
  if (kb_buf_reserve(u, 3 * (name_len + value_len) + 3) != 0) return -ENOMEM;
  char last = u->len ? u->data[u->len - 1] : '\0';
  if (!r->url_has_query) u->data[u->len++] = '?';
  else if (last != '?' && last != '&') u->data[u->len++] = '&';
  r->url_has_query = 1;
  u->len += kb_http_percent_encode(u->data + u->len, name, name_len);
  u->data[u->len++] = '=';
  u->len += kb_http_percent_encode(u->data + u->len, value, value_len);
  return 0;
}

int kb_http_request_add_header(kb_http_request *r, const char *name, const char *value) {
  size_t nlen = strlen(name), vlen = value ? strlen(value) : 0;
  if (!kb_http_token_valid(name, nlen)) return -EINVAL;
  if (value && strpbrk(value, "\r\n")) return -EINVAL; /* no header injection */
  kb_buf *b = &r->hdr_text;
  if (kb_buf_reserve(b, nlen + vlen + 3) != 0) return -ENOMEM;
  memcpy(b->data + b->len, name, nlen);
  b->len += nlen;
  /* curl's syntax: "Name;" sends an empty header, "Name:" removes one. */
  if (!value) {
    b->data[b->len++] = ':';
  } else if (vlen == 0) {
    b->data[b->len++] = ';';
  } else {
    b->data[b->len++] = ':';
    b->data[b->len++] = ' ';
    memcpy(b->data + b->len, value, vlen);
    b->len += vlen;
  }
  b->data[b->len++] = '\0';
  b->data[b->len] = '\0'; /* kb_buf's terminator, past the line's own */
  r->nheaders++;
  return 0;
}

int kb_http_request_has_header(const kb_http_request *r, const char *name) {
  size_t nlen = strlen(name);
  for (size_t pos = 0; pos < r->hdr_text.len;) {
    const char *line = r->hdr_text.data + pos;
    size_t n = strlen(line);
    if (n > nlen && (line[nlen] == ':' || line[nlen] == ';') &&
        strncasecmp(line, name, nlen) == 0)
      return 1;
    pos += n + 1;
  }
  return 0;
}

int kb_http_request_set_body(kb_http_request *r, const void *data, size_t len) {
  kb_buf_clear(&r->body);
  if (kb_buf_append(&r->body, data, len) != 0) return -ENOMEM;
  r->has_body = 1;
  return 0;
}

int kb_http_request_add_part(kb_http_request *r, const kb_http_part *p) {
  if (!p->name || (!p->data) == (!p->file)) return -EINVAL;
  if (!r->mime && !(r->mime = curl_mime_init(r->easy))) return -ENOMEM;
  r->dirty = 1;
  curl_mimepart *part = curl_mime_addpart(r->mime);
  if (!part) return -ENOMEM;
  CURLcode rc = curl_mime_name(part, p->name);
  if (rc == CURLE_OK && p->data) rc = curl_mime_data(part, p->data, p->data_len);
  if (rc == CURLE_OK && p->file) rc = curl_mime_filedata(part, p->file);
  if (rc == CURLE_OK && p->filename) rc = curl_mime_filename(part, p->filename);
  if (rc == CURLE_OK && p->content_type) rc = curl_mime_type(part, p->content_type);
  if (rc == CURLE_READ_ERROR) return -ENOENT;
  return rc == CURLE_OK ? 0 : -ENOMEM;
}

static int set_blob(CURL *e, CURLoption opt, const char *pem, size_t len) {
  struct curl_blob blob = {(void *)pem, len, CURL_BLOB_COPY};
  return curl_easy_setopt(e, opt, &blob);
}

static long clamp_ms(uint64_t ms) { return ms > LONG_MAX ? LONG_MAX : (long)ms; }

int kb_http_request_set_options(kb_http_request *r, const kb_http_options *o) {
  CURL *e = r->easy;
  CURLcode rc = CURLE_OK;
  r->dirty = 1;
#define SET(opt, val) \
  do { if (rc == CURLE_OK) rc = curl_easy_setopt(e, opt, val); } while (0)
  r->timeout_ms = o->timeout_ms;
  r->connect_timeout_ms = o->connect_timeout_ms;
  /* what only libcurl does keeps the request there (http_native.c) */
  r->curl_only = o->version != KB_HTTP_V1 || o->compressed || (o->proxy && *o->proxy);
  r->proxy_off = o->proxy && !*o->proxy;
  if (o->timeout_ms) SET(CURLOPT_TIMEOUT_MS, clamp_ms(o->timeout_ms));
  if (o->connect_timeout_ms) SET(CURLOPT_CONNECTTIMEOUT_MS, clamp_ms(o->connect_timeout_ms));
  r->follow = o->follow_redirects;
  if (o->follow_redirects) {
    SET(CURLOPT_FOLLOWLOCATION, 1L);
    SET(CURLOPT_MAXREDIRS, o->max_redirects < 0 ? 10L : o->max_redirects);
  }
  if (o->version == KB_HTTP_V2_TLS) SET(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
  if (o->version == KB_HTTP_V2_PRIOR_KNOWLEDGE)
    SET(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
  /* Concurrent HTTP/2 requests wait for one connection and multiplex on it
   * instead of each opening its own. */
  if (o->version != KB_HTTP_V1) SET(CURLOPT_PIPEWAIT, 1L);
  if (o->compressed) SET(CURLOPT_ACCEPT_ENCODING, "");
  if (o->ca_file) SET(CURLOPT_CAINFO, o->ca_file);
  if (o->cert_file) SET(CURLOPT_SSLCERT, o->cert_file);
  if (o->key_file) SET(CURLOPT_SSLKEY, o->key_file);
  if (rc == CURLE_OK && o->ca_pem) rc = set_blob(e, CURLOPT_CAINFO_BLOB, o->ca_pem, o->ca_pem_len);
  if (rc == CURLE_OK && o->cert_pem) {
    rc = set_blob(e, CURLOPT_SSLCERT_BLOB, o->cert_pem, o->cert_pem_len);
    SET(CURLOPT_SSLCERTTYPE, "PEM");
  }
  if (rc == CURLE_OK && o->key_pem) {
    rc = set_blob(e, CURLOPT_SSLKEY_BLOB, o->key_pem, o->key_pem_len);
    SET(CURLOPT_SSLKEYTYPE, "PEM");
  }
  if (o->proxy) {
    SET(CURLOPT_PROXY, o->proxy);
    SET(CURLOPT_NOPROXY, (char *)NULL); /* the environment's no_proxy applies again */
  }
  if (o->tls_server_name && rc == CURLE_OK) {
    free(r->tls_server_name);
    if (!(r->tls_server_name = strdup(o->tls_server_name))) return -ENOMEM;
  }
  if (o->insecure) {
    SET(CURLOPT_SSL_VERIFYPEER, 0L);
    SET(CURLOPT_SSL_VERIFYHOST, 0L);
    if (!r->client->warned_insecure) {
      r->client->warned_insecure = 1;
      kb_log(KB_LOG_WARN, "TLS certificate verification is OFF (insecure=true): anyone "
             "on the network path can impersonate the server; use ca_file/ca_pem outside "
             "of tests");
    }
  }
#undef SET
  if (rc == CURLE_OK) return 0;
  if (rc == CURLE_OUT_OF_MEMORY) return -ENOMEM;
  return rc == CURLE_NOT_BUILT_IN || rc == CURLE_UNKNOWN_OPTION ? -ENOTSUP : -EINVAL;
}

/* ---- starting -------------------------------------------------------------------- */

/* Header nodes point into hdr_text, which no longer moves once started. */
static int build_header_list(kb_http_request *r) {
  /* No "Expect: 100-continue" round trip before large bodies. */
  if ((r->has_body || r->mime) && kb_http_request_add_header(r, "Expect", NULL) != 0)
    return -ENOMEM;
  /* A string body goes out without curl's default form Content-Type. */
  if (r->has_body && !kb_http_request_has_header(r, "Content-Type") &&
      kb_http_request_add_header(r, "Content-Type", NULL) != 0)
    return -ENOMEM;
  size_t n = r->nheaders;
  if (n == 0) return 0;
  if (n > r->hdr_nodes_cap) {
    struct curl_slist *nodes = realloc(r->hdr_nodes, n * sizeof *nodes);
    if (!nodes) return -ENOMEM;
    r->hdr_nodes = nodes;
    r->hdr_nodes_cap = n;
  }
  char *line = r->hdr_text.data;
  for (size_t i = 0; i < n; i++) {
    r->hdr_nodes[i].data = line;
    r->hdr_nodes[i].next = i + 1 < n ? &r->hdr_nodes[i + 1] : NULL;
    line += strlen(line) + 1;
  }
  r->dirty = 1;
  return curl_easy_setopt(r->easy, CURLOPT_HTTPHEADER, r->hdr_nodes) == CURLE_OK ? 0 : -ENOMEM;
}

static int set_method(kb_http_request *r) {
  CURL *e = r->easy;
  const char *m = r->method;
  int is_get = strcmp(m, "GET") == 0, is_post = strcmp(m, "POST") == 0;
  /* These verbs always carry a body so that Content-Length: 0 goes out. */
  int wants_body = is_post || strcmp(m, "PUT") == 0 || strcmp(m, "PATCH") == 0;
  CURLcode rc = CURLE_OK;
  if (is_get && !r->has_body && !r->mime) return 0; /* the handle's default */
  r->dirty = 1;
  if (strcmp(m, "HEAD") == 0) return curl_easy_setopt(e, CURLOPT_NOBODY, 1L) == CURLE_OK ? 0 : -EINVAL;
  if (r->mime) {
    rc = curl_easy_setopt(e, CURLOPT_MIMEPOST, r->mime);
  } else if (r->has_body || wants_body) {
    rc = curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body.len);
    if (rc == CURLE_OK) rc = curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body.data ? r->body.data : "");
  }
  if (rc == CURLE_OK && !is_post) rc = curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, m);
  return rc == CURLE_OK ? 0 : -ENOMEM;
}

/* libcurl has no option for the TLS name alone (https URLs only: plain
 * http has no TLS name). The URL gets the TLS name
 * as its host, CURLOPT_CONNECT_TO sends the connection to the real host
 * and port, and a Host header keeps what the server sees unchanged. */
static int apply_server_name(kb_http_request *r) {
  CURLU *u = curl_url();
  char *host = NULL, *port = NULL, *given_port = NULL, *url = NULL;
  char line[1024], hostport[600];
  struct curl_slist *ct;
  int err = -EINVAL;
  if (!u || curl_url_set(u, CURLUPART_URL, r->url.data, 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK ||
      curl_url_set(u, CURLUPART_HOST, r->tls_server_name, 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_URL, &url, 0) != CURLUE_OK)
    goto out;
  curl_url_get(u, CURLUPART_PORT, &given_port, 0); /* NULL: the scheme's default */
  snprintf(hostport, sizeof hostport, "%s%s%s", host, given_port ? ":" : "",
           given_port ? given_port : "");
  if ((size_t)snprintf(line, sizeof line, "%s:%s:%s:%s", r->tls_server_name, port, host, port) >=
      sizeof line)
    goto out;
  err = -ENOMEM;
  if (!(ct = curl_slist_append(NULL, line))) goto out;
  curl_slist_free_all(r->connect_to);
  r->connect_to = ct;
  r->dirty = 1;
  if (curl_easy_setopt(r->easy, CURLOPT_CONNECT_TO, r->connect_to) != CURLE_OK ||
      curl_easy_setopt(r->easy, CURLOPT_URL, url) != CURLE_OK)
    goto out;
  if (!kb_http_request_has_header(r, "Host") && kb_http_request_add_header(r, "Host", hostport))
    goto out;
  err = 0;
out:
  curl_free(host), curl_free(port), curl_free(given_port), curl_free(url);
  curl_url_cleanup(u);
  return err;
}

/* The URL as curl gets it. A recycled handle usually asks for the URL it
 * asked for last time (a load loop): curl then reads the URL handle it
 * parsed then (CURLOPT_CURLU) instead of parsing the string again per
 * transfer. With the flags curl uses for CURLOPT_URL; a URL it refuses,
 * and requests that rewrite their URL (redirects, tls_server_name), take
 * the string path, so curl's own errors and behaviour are unchanged. */
static int set_url(kb_http_request *r) {
  CURL *e = r->easy;
  if (!r->follow && !r->tls_server_name) {
    int same = r->uh_url.len == r->url.len && memcmp(r->uh_url.data, r->url.data, r->url.len) == 0;
    if (!same) {
      /* A fresh handle: one that holds a URL takes the next as relative
       * to it (a URL without a scheme would land on the old host's path). */
      kb_buf_clear(&r->uh_url);
      if (r->uh_set) curl_easy_setopt(e, CURLOPT_CURLU, (CURLU *)NULL);
      r->uh_set = 0;
      curl_url_cleanup(r->uh);
      if (!(r->uh = curl_url())) return -ENOMEM;
      same = curl_url_set(r->uh, CURLUPART_URL, r->url.data,
                          CURLU_GUESS_SCHEME | CURLU_NON_SUPPORT_SCHEME) == CURLUE_OK &&
             kb_buf_append(&r->uh_url, r->url.data, r->url.len) == 0;
    }
    if (same) {
      if (!r->uh_set && curl_easy_setopt(e, CURLOPT_CURLU, r->uh) != CURLE_OK) return -ENOMEM;
      r->uh_set = 1;
      return 0;
    }
  }
  if (r->uh_set) curl_easy_setopt(e, CURLOPT_CURLU, (CURLU *)NULL);
  r->uh_set = 0;
  return curl_easy_setopt(e, CURLOPT_URL, r->url.data) == CURLE_OK ? 0 : -ENOMEM;
}

static int curl_start(kb_http_request *r) {
  int err;
  if ((err = set_url(r)) != 0) return err;
  if (r->tls_server_name && strncasecmp(r->url.data, "https:", 6) == 0 &&
      (err = apply_server_name(r)) != 0)
    return err;
  if ((err = set_method(r)) != 0 || (err = build_header_list(r)) != 0) return err;
  return curl_multi_add_handle(r->client->multi, r->easy) == CURLM_OK ? 0 : -ENOMEM;
}

int kb_http_request_start(kb_http_request *r, kb_http_done_cb cb, void *ud) {
  kb_http_client *c = r->client;
  if (r->started || c->closing) return -EINVAL;
  r->cb = cb;
  r->ud = ud;
  r->errbuf[0] = '\0';
  r->sock_errno = 0;
  r->body_too_large = 0;
  r->resp_body.len = 0;
  r->resp_headers.len = 0;
  r->t_start = uv_hrtime();
  kb__http_clock_start(r);
  int native = kb__http_native_start(r); /* 1: on its way there; 0: libcurl's */
  int err = native < 0 ? native : native == 0 ? curl_start(r) : 0;
  if (err != 0) {
    kb__http_clock_stop(r);
    return err;
  }
  r->started = 1;
  kb__http_request_activate(r);
  return 0;
}

int kb_http_request_set_unix_socket(kb_http_request *r, const char *path) {
  if (r->started) return -EINVAL;
  r->dirty = 1;
  if (curl_easy_setopt(r->easy, CURLOPT_UNIX_SOCKET_PATH, path) != CURLE_OK) return -ENOMEM;
  kb_buf_clear(&r->unix_path);
  if (path && kb_buf_append(&r->unix_path, path, strlen(path)) != 0) return -ENOMEM;
  return 0;
}

int kb_http_request_set_max_body(kb_http_request *r, size_t max) {
  if (r->started) return -EINVAL;
  r->max_body = max;
  return 0;
}

const kb_http_response *kb_http_request_response(const kb_http_request *r) { return &r->resp; }

int kb_http_request_set_stream(kb_http_request *r, kb_http_head_cb on_head,
                               kb_http_data_cb on_data, void *ud) {
  if (r->started || !on_head || !on_data) return -EINVAL;
  r->stream = 1;
  r->on_head = on_head;
  r->on_data = on_data;
  r->stream_ud = ud;
  r->dirty = 1;
  curl_easy_setopt(r->easy, CURLOPT_WRITEFUNCTION, on_stream_body);
  curl_easy_setopt(r->easy, CURLOPT_HEADERFUNCTION, on_stream_header);
  /* A proxy's "200 Connection established" would pass for the final head. */
  curl_easy_setopt(r->easy, CURLOPT_SUPPRESS_CONNECT_HEADERS, 1L);
  return 0;
}

static void stream_unpause(kb_http_request *r) {
  r->paused = 0;
  /* May run on_stream_body at once with the piece curl kept. */
  curl_easy_pause(r->easy, CURLPAUSE_CONT);
}

void kb_http_request_resume(kb_http_request *r) {
  r->hold = 0;
  /* Pending bytes first: deliver() unpauses once they are handed over. */
  if (r->started && r->paused && r->resp_body.len == 0) stream_unpause(r);
}

void kb_http_request_cancel(kb_http_request *r) {
  if (r->client->delivering == r) r->client->delivering = NULL;
  if (r->queued) kb__http_stream_unqueue(r);
  if (r->started) {
    if (r->native) kb__http_native_cancel(r);
    else curl_multi_remove_handle(r->client->multi, r->easy);
    r->started = 0;
    kb__http_request_deactivate(r);
  }
  request_release(r);
}

void kb_http_request_free(kb_http_request *r) { kb_http_request_cancel(r); }

/* ---- finishing -------------------------------------------------------------------- */

static double usec(curl_off_t us) { return us > 0 ? (double)us / 1e6 : 0.0; }

static void fill_timings(kb_http_request *r, kb_http_timings *t) {
  kb_vclock *clock = r->client->clock;
  t->clock = r->clock_start >= 0 && clock ? kb_vclock_now(clock) - r->clock_start : -1;
  if (r->native) {
    kb__http_native_timings(r, t);
    return;
  }
  curl_off_t dns = 0, conn = 0, app = 0, first = 0, total = 0;
  CURL *e = r->easy;
  curl_easy_getinfo(e, CURLINFO_NAMELOOKUP_TIME_T, &dns);
  curl_easy_getinfo(e, CURLINFO_CONNECT_TIME_T, &conn);
  curl_easy_getinfo(e, CURLINFO_APPCONNECT_TIME_T, &app);
  curl_easy_getinfo(e, CURLINFO_STARTTRANSFER_TIME_T, &first);
  curl_easy_getinfo(e, CURLINFO_TOTAL_TIME_T, &total);
  /* curl's clock starts when the multi handle first runs the transfer; ours
   * at kb_http_request_start, which is what the caller waited. */
  t->total = (double)(uv_hrtime() - r->t_start) / 1e9;
  double queued = t->total - usec(total);
  if (queued < 0) queued = 0;
  t->dns = usec(dns);
  t->connect = conn > dns ? usec(conn - dns) : 0.0;
  t->tls = app > conn ? usec(app - conn) : 0.0;
  t->ttfb = first > 0 ? usec(first) + queued : 0.0;
}

static int version_number(long v) {
  switch (v) {
  case CURL_HTTP_VERSION_1_0: return 10;
  case CURL_HTTP_VERSION_1_1: return 11;
  case CURL_HTTP_VERSION_2_0: return 20;
  case CURL_HTTP_VERSION_3: return 30;
  default: return 0;
  }
}

/* The response's particulars but its body and outcome: what on_head gets,
 * and the start of what done gets. */
static void fill_head(kb_http_request *r) {
  kb_http_response *resp = &r->resp;
  CURL *e = r->easy;
  long v = 0;
  char *url = NULL;
  resp->headers = r->resp_headers.data ? r->resp_headers.data : "";
  resp->headers_len = r->resp_headers.len;
  resp->method = r->method;
  fill_timings(r, &resp->time);
  if (r->native) {
    resp->status = r->native_status;
    resp->http_version = r->native_version;
    resp->redirects = 0;
    resp->url = r->url.data;
    return;
  }
  resp->status = 0;
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &resp->status);
  curl_easy_getinfo(e, CURLINFO_HTTP_VERSION, &v);
  resp->http_version = version_number(v);
  resp->redirects = 0;
  curl_easy_getinfo(e, CURLINFO_REDIRECT_COUNT, &resp->redirects);
  curl_easy_getinfo(e, CURLINFO_EFFECTIVE_URL, &url);
  resp->url = url ? url : r->url.data;
}

static void fill_outcome(kb_http_request *r, CURLcode rc) {
  kb_http_response *resp = &r->resp;
  resp->curl_code = (int)rc;
  resp->error = kb__http_classify(rc, r->sock_errno);
  if (rc == CURLE_WRITE_ERROR && r->body_too_large) {
    resp->error = KB_HTTP_ERR_BODY_TOO_LARGE;
    snprintf(r->errbuf, sizeof r->errbuf, "the response body is larger than max_body "
             "(%zu bytes)", r->max_body);
  }
  if (resp->error) {
    kb__http_describe_error(r, rc);
  } else {
    resp->message = resp->detail = resp->hint = resp->safe_url = "";
  }
}

static int deliver_head(kb_http_request *r) {
  kb_http_client *c = r->client;
  r->head_state = HEAD_SENT;
  fill_head(r);
  r->resp.body = "";
  r->resp.body_len = 0;
  fill_outcome(r, CURLE_OK);
  c->delivering = r;
  r->on_head(r, &r->resp, r->stream_ud);
  if (c->delivering != r) return DELIVER_GONE;
  c->delivering = NULL;
  return c->closing ? DELIVER_CLOSING : DELIVER_OK;
}

/* The pending bytes go out in their own buffer: on_data may resume r,
 * and curl then appends to resp_body before curl_easy_pause returns. */
static int deliver_data(kb_http_request *r) {
  kb_http_client *c = r->client;
  kb_buf out = r->resp_body;
  r->resp_body = r->spare;
  r->spare = (kb_buf){0};
  c->delivering = r;
  int rc = r->on_data(r, out.data, out.len, r->stream_ud);
  if (c->delivering != r) {
    kb_buf_free(&out); /* r is gone or recycled: the buffer is ours alone */
    return DELIVER_GONE;
  }
  c->delivering = NULL;
  out.len = 0;
  r->spare = out;
  if (rc == KB_HTTP_STREAM_PAUSE) r->hold = 1;
  return c->closing ? DELIVER_CLOSING : DELIVER_OK;
}

int kb__http_stream_deliver(kb_http_request *r) {
  int rc;
  if (r->head_state == HEAD_READY && (rc = deliver_head(r)) != DELIVER_OK) return rc;
  if (r->head_state == HEAD_SENT && r->resp_body.len && (rc = deliver_data(r)) != DELIVER_OK)
    return rc;
  if (r->started && r->paused && !r->hold) stream_unpause(r);
  return DELIVER_OK;
}

/* What a finished stream still has for on_head and on_data comes before
 * done. Returns 0 to go on to done, -1 when r is gone. */
static int stream_flush(kb_http_request *r, CURLcode rc) {
  kb__http_stream_unqueue(r);
  /* A body-less final response (204, 304...) never said it was final. */
  if (rc == CURLE_OK && r->head_state == HEAD_NONE) r->head_state = HEAD_READY;
  int d = kb__http_stream_deliver(r);
  if (d == DELIVER_CLOSING) kb_http_request_cancel(r); /* no longer on the active list */
  return d == DELIVER_OK ? 0 : -1;
}

void kb__http_request_finish(kb_http_request *r, CURLcode rc) {
  kb__http_request_deactivate(r);
  r->started = 0;
  if (r->stream && stream_flush(r, rc) != 0) return;
  kb_http_response *resp = &r->resp;
  fill_head(r);
  if (kb_buf_reserve(&r->resp_body, 0) == 0) r->resp_body.data[r->resp_body.len] = '\0';
  resp->body = r->resp_body.data ? r->resp_body.data : "";
  resp->body_len = r->resp_body.data ? r->resp_body.len : 0;
  fill_outcome(r, rc);
  r->cb(r, resp, r->ud);
}
