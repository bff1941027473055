/* The asynchronous HTTP client: libcurl multi driven by a libuv loop.
 *
 * One kb_http_client owns one curl multi handle, so every request started on
 * it shares the connection cache (keep-alive, HTTP/2 multiplexing), the DNS
 * cache and the TLS session cache. Nothing blocks and no thread is started per
 * request: curl's sockets are watched with one uv_poll each and its timeouts
 * with one uv_timer.
 *
 *   kb_http_client *c = kb_http_client_new(loop, NULL);
 *   kb_http_request *r = kb_http_request_new(c, "GET", "http://127.0.0.1:8080/x");
 *   kb_http_request_add_header(r, "Accept", "application/json");
 *   kb_http_request_start(r, on_done, ud);      // on_done(r, resp, ud) later
 *   ...
 *   static void on_done(kb_http_request *r, const kb_http_response *resp,
 *                       void *ud) {
 *     if (resp->error) fprintf(stderr, "%s\n", resp->message);
 *     else use(resp->status, resp->body, resp->body_len);
 *     kb_http_request_free(r);                  // resp points into r
 *   }
 *
 * HTTP error statuses (4xx, 5xx) are responses, not errors: only transport
 * failures set resp->error. All times are real (wall-clock) seconds; the Lua
 * layer converts them to the scenario clock.
 *
 * Not thread-safe: a client and its requests belong to the thread running
 * its loop. */
#ifndef KB_HTTP_CLIENT_H
#define KB_HTTP_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "kb/vclock.h"

typedef struct kb_http_client kb_http_client;
typedef struct kb_http_request kb_http_request;

/* ---- errors ---------------------------------------------------------------- */

typedef enum {
  KB_HTTP_OK = 0,
  KB_HTTP_ERR_CONNECT,   /* refused, unreachable */
  KB_HTTP_ERR_TIMEOUT,   /* timeout or connect_timeout expired */
  KB_HTTP_ERR_TLS,       /* handshake, certificate, key */
  KB_HTTP_ERR_DNS,       /* host name did not resolve */
  KB_HTTP_ERR_RESET,     /* reset, empty reply, body cut short */
  KB_HTTP_ERR_PROTOCOL,  /* not valid HTTP, HTTP/2 framing errors */
  KB_HTTP_ERR_TOO_MANY_REDIRECTS,
  KB_HTTP_ERR_CANCELLED,
  KB_HTTP_ERR_RESOURCE,  /* out of file descriptors or memory */
  KB_HTTP_ERR_OTHER,
  KB_HTTP_ERR_BODY_TOO_LARGE /* the body passed kb_http_request_set_max_body */
} kb_http_error;

/* "connect", "timeout", "tls", "dns", "reset", "protocol",
 * "too_many_redirects", "cancelled", "resource", "other", "body_too_large"
 * ("ok" for 0). */
const char *kb_http_error_name(kb_http_error e);

/* ---- client ---------------------------------------------------------------- */

typedef struct kb_http_client_opts {
  /* Open connections at most, across all hosts; also the size of the idle
   * connection cache. 0 means KB_HTTP_DEFAULT_MAX_CONNECTIONS. Requests
   * beyond the limit wait inside the client for a free connection. */
  long max_connections;
  /* Connections to one host:port at most; 0 means max_connections. */
  long max_host_connections;
} kb_http_client_opts;

#define KB_HTTP_DEFAULT_MAX_CONNECTIONS 1024

/* NULL opts means the defaults. Returns NULL if curl or libuv fail. */
kb_http_client *kb_http_client_new(uv_loop_t *loop, const kb_http_client_opts *opts);

/* Aborts every request still running (their callbacks are not called and
 * their kb_http_request objects are released), closes the cached
 * connections and releases the client. The memory of the libuv handles is
 * released by their close callbacks, so the loop must run once more
 * (uv_run) before uv_loop_close. Safe to call from inside a done callback. */
void kb_http_client_free(kb_http_client *c);

/* Requests started and not yet done or cancelled. */
/* The scenario clock. On a fast-forwarding one, a request to a real server
 * counts as real work (the clock does not skip while it runs) and one over
 * a Unix socket (kb_http_request_set_unix_socket: a server on this loop)
 * times out on the clock. NULL (the default): curl's real-time timeouts. */
void kb_http_client_set_clock(kb_http_client *c, kb_vclock *clock);

size_t kb_http_client_active(const kb_http_client *c);

/* ---- requests -------------------------------------------------------------- */

typedef struct kb_http_timings {
  double dns;     /* name resolution (0 when cached or numeric) */
  double connect; /* TCP connect (0 on a reused connection) */
  double tls;     /* TLS handshake (0 for plain HTTP or reuse) */
  double ttfb;    /* from kb_http_request_start to the first response byte */
  double total;   /* from kb_http_request_start to completion */
  double clock;   /* the same on a fast-forwarding client clock (the time
                     the scenario saw pass), else -1 */
} kb_http_timings;

typedef struct kb_http_response {
  long status;          /* 0 when no response arrived */
  int http_version;     /* 10, 11, 20 (0 if unknown) */
  const char *body;     /* NUL-terminated for convenience; may hold NULs */
  size_t body_len;
  /* Header lines of the final response ("Name: value\r\n" each; no status
   * line, no blank line); walk them with kb_http_header_next. */
  const char *headers;
  size_t headers_len;
  long redirects;       /* redirects followed */
  const char *url;      /* effective URL (after redirects); credentials in it
                           are not redacted */
  kb_http_timings time;

  kb_http_error error;  /* KB_HTTP_OK when a response arrived */
  int curl_code;        /* CURLcode */
  const char *message;  /* "GET <url>: <what happened> (<hint>)", URL
                           redacted; "" when ok */
  const char *detail;   /* curl's own error text; "" when ok */
  const char *hint;     /* what to try; "" when ok or none */
  const char *safe_url; /* the request URL with credentials redacted */
  const char *method;   /* the request's method */
} kb_http_response;

typedef void (*kb_http_done_cb)(kb_http_request *r, const kb_http_response *resp,
                                void *ud);

/* A request object from the client's free list (its curl easy handle is
 * reused). The method is any HTTP token up to 31 characters ("GET",
 * "PATCH", ...); HEAD asks for no body. The URL is copied; a #fragment is
 * dropped. Returns NULL for an invalid method, a client being freed, or
 * when out of memory. Until it is started, the caller owns the request and
 * releases it with kb_http_request_free.
 *
 * The builders below return 0, -EINVAL for an argument they refuse (nothing
 * added) or -ENOMEM. */
kb_http_request *kb_http_request_new(kb_http_client *c, const char *method, const char *url);

/* Appends name=value to the query string, percent-encoding both (RFC 3986
 * unreserved characters are kept; a space becomes %20). */
int kb_http_request_add_query(kb_http_request *r, const char *name, size_t name_len,
                              const char *value, size_t value_len);

/* Adds a request header. The name must be an HTTP token and the value
 * free of CR and LF (-EINVAL otherwise). An empty value sends the header
 * with no value; a NULL value removes a header curl would add by itself
 * (e.g. Accept). A request with a body is sent without
 * "Expect: 100-continue". */
int kb_http_request_add_header(kb_http_request *r, const char *name, const char *value);
/* True if a header of that name (case-insensitive) was added. */
int kb_http_request_has_header(const kb_http_request *r, const char *name);

/* The request body, copied. A body without a Content-Type header is sent
 * without one. */
int kb_http_request_set_body(kb_http_request *r, const void *data, size_t len);

/* One part of a multipart/form-data body (sent with the request's method,
 * normally POST). Exactly one of data (copied) and file (a path, read while
 * sending) is set, and name always (-EINVAL otherwise); an unreadable file
 * gives -ENOENT. */
typedef struct kb_http_part {
  const char *name;
  const char *filename;     /* optional; defaults to file's base name */
  const char *content_type; /* optional */
  const char *data;
  size_t data_len;
  const char *file;
} kb_http_part;
int kb_http_request_add_part(kb_http_request *r, const kb_http_part *part);

typedef enum {
  KB_HTTP_V1 = 0,            /* HTTP/1.1 (the default) */
  KB_HTTP_V2_TLS,            /* HTTP/2 when TLS negotiates it, else 1.1 */
  KB_HTTP_V2_PRIOR_KNOWLEDGE /* HTTP/2 from the first byte, also cleartext */
} kb_http_version;

typedef struct kb_http_options {
  uint64_t timeout_ms;         /* whole request; 0 = none */
  uint64_t connect_timeout_ms; /* 0 = curl's default (300 s) */
  int follow_redirects;
  long max_redirects;          /* with follow_redirects; < 0 = 10 */
  kb_http_version version;
  int compressed;              /* ask for and decode gzip/br/zstd bodies */
  /* TLS. *_pem are in-memory PEM blocks (copied); *_file are paths. */
  const char *ca_file;
  const char *ca_pem;
  size_t ca_pem_len;
  const char *cert_file;
  const char *cert_pem;
  size_t cert_pem_len;
  const char *key_file;
  const char *key_pem;
  size_t key_pem_len;
  int insecure;                /* no peer/host verification (warned once) */
  /* The name TLS sends (SNI) and verifies the certificate against, when it
   * is not the URL's host (kubeconfig tls-server-name). The connection
   * still goes to the URL's host and port, and Host: names it. */
  const char *tls_server_name;
  /* A proxy URL (http://, https://, socks5://...), as curl's
   * CURLOPT_PROXY; "" turns off the *_PROXY environment variables. */
  const char *proxy;
} kb_http_options;

/* Everything off, curl's defaults: kb_http_options o = KB_HTTP_OPTIONS_INIT; */
#define KB_HTTP_OPTIONS_INIT {.max_redirects = -1, .version = KB_HTTP_V1}

/* Applies transfer options. Returns 0, -ENOTSUP if this libcurl lacks one
 * (e.g. in-memory PEM with a TLS backend other than OpenSSL), -EINVAL or
 * -ENOMEM. TLS settings take part in connection reuse as curl defines it
 * (CA, verification, client certificate; not the private key). */
int kb_http_request_set_options(kb_http_request *r, const kb_http_options *o);

/* The most body bytes the response may have (after decoding, with
 * compressed); 0, the default, is no limit. A longer body stops the
 * transfer as soon as it passes the limit, so no more than max bytes are
 * ever held, and fails with KB_HTTP_ERR_BODY_TOO_LARGE (the message names
 * the limit and the redacted URL). Streams (set_stream) hold no body and
 * ignore it. Returns 0, or -EINVAL once started. */
int kb_http_request_set_max_body(kb_http_request *r, size_t max);
/* Connect through the Unix socket at path (the URL still names the host
 * for the Host header); NULL: TCP. Before start. 0 or -errno. */
int kb_http_request_set_unix_socket(kb_http_request *r, const char *path);

/* The response a finished request delivered to its done callback (valid
 * until the request is freed), for a caller that reads it later. */
const kb_http_response *kb_http_request_response(const kb_http_request *r);

/* Starts the transfer; cb runs later from a loop callback (never from
 * inside this call) with the response or the error. Returns 0, or a
 * negative code if the request could not be queued (then the caller still
 * owns r and frees it). */
int kb_http_request_start(kb_http_request *r, kb_http_done_cb cb, void *ud);

/* Stops a started request without calling its callback, and releases it.
 * Also releases a request that was never started. */
void kb_http_request_cancel(kb_http_request *r);

/* Releases a request (and the response it delivered) back to its client. */
void kb_http_request_free(kb_http_request *r);

/* ---- streamed responses ------------------------------------------------------
 *
 * A streamed request hands its response over piece by piece instead of
 * collecting the body (a watch, a followed log):
 *
 *   on_head(r, head, ud)       once, when the head of the final response
 *                              has arrived (after redirects and 1xx
 *                              answers): status, http_version, headers,
 *                              url, redirects, and the timings so far
 *                              (time.total is the time to the head); body
 *                              is empty and error KB_HTTP_OK.
 *   on_data(r, data, len, ud)  each piece of the body, in order. The piece
 *                              is taken; return 0 to go on, or
 *                              KB_HTTP_STREAM_PAUSE when the caller's own
 *                              buffer is full: the client stops reading
 *                              from the connection (the server's sends then
 *                              block on TCP flow control) until
 *                              kb_http_request_resume(r).
 *   done(r, resp, ud)          the start's callback, at the end, as for any
 *                              request: resp->body is empty (it went to
 *                              on_data); resp->error tells a complete body
 *                              from one cut short (reset, timeout). A
 *                              request that fails before its head arrives
 *                              reports only through done.
 *
 * All three run from loop callbacks, never from inside libcurl or a
 * kb_http_* call, so they may cancel r (nothing follows then), start or
 * cancel other requests, resume r, or free the client. `head` and `data`
 * are valid during the call only. The timeout option covers the whole
 * transfer, paused time included. Each on_data gets what arrived since the
 * last one (up to about 256 KiB): the pieces follow the network, not the
 * server's HTTP chunks.
 *
 * Set before kb_http_request_start; returns 0, or -EINVAL once started.
 * `ud` is given to on_head and on_data (done gets the start's). */
typedef void (*kb_http_head_cb)(kb_http_request *r, const kb_http_response *head, void *ud);
typedef int (*kb_http_data_cb)(kb_http_request *r, const char *data, size_t len, void *ud);
#define KB_HTTP_STREAM_PAUSE 1
int kb_http_request_set_stream(kb_http_request *r, kb_http_head_cb on_head,
                               kb_http_data_cb on_data, void *ud);

/* Reading again after on_data returned KB_HTTP_STREAM_PAUSE. Harmless when
 * not paused, not streamed, or finished. */
void kb_http_request_resume(kb_http_request *r);

/* ---- headers and URLs ------------------------------------------------------ */

typedef struct kb_http_header {
  const char *name;
  size_t name_len;
  const char *value; /* leading and trailing blanks trimmed */
  size_t value_len;
} kb_http_header;

/* Iterates over the header block of a response: start with *pos = 0; returns
 * 1 and fills h while headers remain, 0 at the end. */
int kb_http_header_next(const char *block, size_t len, size_t *pos, kb_http_header *h);

/* The value of the first header `name` (case-insensitive), or NULL. */
const char *kb_http_response_header(const kb_http_response *resp, const char *name,
                                    size_t *value_len);

/* Copies url into out (size outsz, always NUL-terminated, truncated if
 * needed) with "user:password@" replaced by "[REDACTED]@", the values of
 * query parameters whose names look like credentials (containing token,
 * key, secret, pass, pwd, sig, auth, cred, session or code) replaced by
 * "[REDACTED]" (KB_REDACTED), and no #fragment. Returns the length it
 * wanted to write (snprintf-style). */
size_t kb_http_url_redact(const char *url, char *out, size_t outsz);

/* True if s[0..n) is an HTTP token (RFC 9110 tchar: a method or a header
 * name): not empty, printable ASCII without blanks and separators. */
int kb_http_token_valid(const char *s, size_t n);

/* Appends s percent-encoded (RFC 3986 unreserved kept) to out, which must
 * have room for 3 * len + 1 bytes. Returns the number of bytes written. */
size_t kb_http_percent_encode(char *out, const char *s, size_t len);

#endif
