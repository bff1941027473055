/* An HTTP/1.1 server on a libuv loop (http_parser for requests).
 *
 *   static void handle(kb_httpd_req *req, void *ud) {
 *     kb_httpd_header h[] = {{"Content-Type", "text/plain"}};
 *     kb_httpd_respond(req, 200, h, 1, "hi\n", 3);
 *   }
 *   kb_httpd *s = kb_httpd_new(loop, NULL, handle, NULL);
 *   if (kb_httpd_listen(s, "127.0.0.1", 0) == 0) printf("%d\n", kb_httpd_port(s));
 *   ...
 *   kb_httpd_close(s, on_closed, ud);   // on_closed runs once all is released
 *
 * Connections are persistent (HTTP/1.1, or HTTP/1.0 with keep-alive), and
 * requests pipelined on one connection are handed to the handler one at a
 * time, in order: the next one is parsed only after the previous response
 * was finished. Request bodies may be sized or chunked; "Expect:
 * 100-continue" is answered. The server itself answers malformed requests
 * (400), oversized headers (431), oversized bodies (413) and unknown
 * expectations (417), then closes the connection.
 *
 * A request handle lives from the handler call until the owner finishes it
 * with exactly one of kb_httpd_respond, kb_httpd_stream_end or
 * kb_httpd_reset: synchronously inside the handler or any time later (a
 * simulated latency, a long watch stream). If the client goes away first,
 * the abort callback (kb_httpd_req_on_abort) tells the owner; the handle
 * stays valid and the owner still finishes it (the call then returns
 * KB_HTTPD_EGONE and only releases it).
 *
 * Callbacks (handler, abort, drain, closed) always run from loop callbacks,
 * never from inside a kb_httpd_* call, so an owner may call any function
 * from them. Not thread-safe: a server belongs to the thread of its loop. */
#ifndef KB_HTTP_SERVER_H
#define KB_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct kb_httpd kb_httpd;
typedef struct kb_httpd_req kb_httpd_req;

/* Errors besides libuv's (UV_E*, negative errno values). */
enum {
  KB_HTTPD_EGONE = -30001,  /* the client went away; the request is released */
  KB_HTTPD_ESTATE = -30002, /* not allowed in the request's state; nothing done */
  KB_HTTPD_EINVAL = -30003  /* bad status or header; nothing done */
};

/* A message for a KB_HTTPD_* or UV_* code. */
const char *kb_httpd_strerror(int code);

typedef struct kb_httpd_header {
  const char *name;
  const char *value;
} kb_httpd_header;

/* Zero fields take the default in brackets. */
typedef struct kb_httpd_config {
  size_t max_header_size;   /* request line + headers, bytes [64 KiB] -> 431;
                               http_parser caps it at 80 KiB anyway */
  size_t max_headers;       /* header lines per request [100] -> 431 */
  size_t max_body_size;     /* request body, bytes [64 MiB] -> 413 */
  uint64_t idle_timeout_ms; /* close a keep-alive connection with no request
                               and no response in progress this long after
                               its accept or its last response [60000] */
  /* Read deadlines (slowloris): a request's headers must all arrive within
   * header_timeout_ms of its first byte, and its body within
   * body_timeout_ms of the end of its headers; else 408 and close. A request
   * being answered (a long watch stream too) has no deadline. */
  uint64_t header_timeout_ms; /* [10000] */
  uint64_t body_timeout_ms;   /* [60000] */
  /* Open connections at most (lingering ones included); the next one gets
   * a 503 "too many connections" and is closed, with a WARN log line
   * (kb/log.h) when refusals start and at most every 10 s after. [4096] */
  uint64_t max_connections;
  uint64_t linger_ms;       /* after a final response or a reset request,
                               wait this long for the client [2000] */
  int backlog;              /* listen backlog [4096] */
  int no_date;              /* 1: do not add a Date header */
  /* Unix seconds for the Date header: a server on its own clock (the
   * simulator's) dates its answers as it dates its objects [time(NULL)] */
  double (*date_now)(void *ud);
  void *date_now_ud;
  const char *server_timing; /* metric name: add "Server-Timing: NAME;dur=MS",
                                the real time from handing the request to the
                                handler until the response head, or the one
                                set with kb_httpd_req_set_timing [none] */
  /* Called as each response head is sent (kb_httpd_respond or
   * kb_httpd_stream_begin) with its status and the Server-Timing duration
   * in ms (the one set with kb_httpd_req_set_timing, else measured): for
   * the owner's latency metrics. It runs inside that call: it may read the
   * request (path, headers) but must not finish it. [none] */
  void (*on_response)(kb_httpd_req *req, int status, double ms, void *ud);
  void *on_response_ud;
} kb_httpd_config;

typedef struct kb_httpd_stats {
  uint64_t connections;      /* accepted so far */
  uint64_t open_connections; /* open now */
  uint64_t requests;         /* handed to the handler */
  uint64_t responses;        /* finished by the owner while the client was there */
  uint64_t aborted;          /* client gone before the response was finished */
  uint64_t rejected;         /* answered by the server itself (400, 413, ...) */
  uint64_t timed_out;        /* of those, 408: headers or body too slow */
  uint64_t idle_closed;      /* closed by the idle timeout */
  uint64_t refused;          /* over max_connections: 503 and closed */
} kb_httpd_stats;

typedef void (*kb_httpd_handler_fn)(kb_httpd_req *req, void *ud);
typedef void (*kb_httpd_req_fn)(kb_httpd_req *req, void *ud);
typedef void (*kb_httpd_closed_fn)(kb_httpd *srv, void *ud);

/* ---- the server ---------------------------------------------------------- */

/* config may be NULL (all defaults); it is copied. Returns NULL when out
 * of memory. */
kb_httpd *kb_httpd_new(uv_loop_t *loop, const kb_httpd_config *config,
                       kb_httpd_handler_fn handler, void *ud);

/* Binds and listens. host is an IPv4 or IPv6 literal ("[::1]" too),
 * "localhost", or NULL for 127.0.0.1; port 0 picks a free port. Returns 0
 * or a UV_* code (UV_EADDRINUSE, UV_EINVAL for a bad host or port or a
 * second call). After a failure the server cannot listen again; close it. */
int kb_httpd_listen(kb_httpd *srv, const char *host, int port);
/* Also (or only) listen on a Unix socket at path, which must not exist.
 * Same-loop clients reach the server through it with no TCP in between:
 * a write is in the server's queue when write() returns, which a
 * fast-forwarding clock relies on (kb/vclock.h). 0 or a libuv error. */
int kb_httpd_listen_unix(kb_httpd *srv, const char *path);

/* The bound port (0 before a successful listen). */
int kb_httpd_port(const kb_httpd *srv);

void kb_httpd_get_stats(const kb_httpd *srv, kb_httpd_stats *out);

/* Stops accepting and closes every connection (pending requests see their
 * abort callback). When every handle is closed, closed(srv, ud) runs (if
 * not NULL) and the server is freed: srv is invalid after that callback.
 * Calling it again while closing only replaces the callback. */
void kb_httpd_close(kb_httpd *srv, kb_httpd_closed_fn closed, void *ud);

/* ---- the request ----------------------------------------------------------- */

const char *kb_httpd_req_method(const kb_httpd_req *req); /* "GET" */
const char *kb_httpd_req_target(const kb_httpd_req *req); /* "/a/b?x=1", as sent */
const char *kb_httpd_req_path(const kb_httpd_req *req);   /* "/a/b", not decoded */
const char *kb_httpd_req_query(const kb_httpd_req *req);  /* "x=1" or "" */
/* HTTP version as 10 or 11. */
int kb_httpd_req_version(const kb_httpd_req *req);
/* The first header of that name (case-insensitive), or NULL. */
const char *kb_httpd_req_header(const kb_httpd_req *req, const char *name);
size_t kb_httpd_req_header_count(const kb_httpd_req *req);
/* The i-th header as sent (name case kept), or NULL past the end. */
const kb_httpd_header *kb_httpd_req_header_at(const kb_httpd_req *req, size_t i);
/* The body (dechunked); never NULL, NUL-terminated for convenience. */
const char *kb_httpd_req_body(const kb_httpd_req *req, size_t *len);
/* "127.0.0.1:53211" or "[::1]:53211". */
const char *kb_httpd_req_remote(const kb_httpd_req *req);
/* 1 once the client went away. */
int kb_httpd_req_gone(const kb_httpd_req *req);
/* The Server-Timing duration (ms) to report instead of the measured one:
 * the simulator reports the real time its latency model holds the
 * response, exact even where a uv timer cannot hold it for less than a
 * millisecond. `modelled_ms` >= 0 adds ";sim=MS": the same latency in the
 * simulator's own (virtual) time, so a client on any clock can report it. */
void kb_httpd_req_set_timing(kb_httpd_req *req, double ms, double modelled_ms);

/* cb(req, ud) runs once if the client goes away (or the server closes)
 * before the request is finished. Returns 0, or KB_HTTPD_EGONE if the
 * client is already gone (cb is then not registered). cb NULL clears. */
int kb_httpd_req_on_abort(kb_httpd_req *req, kb_httpd_req_fn cb, void *ud);

/* Close the connection after this response even if the client wanted to
 * keep it. */
void kb_httpd_req_close_after(kb_httpd_req *req);

/* ---- responding --------------------------------------------------------------- */

/* A complete response. The server adds Content-Length (Content-Length,
 * Transfer-Encoding and Connection in `headers` are ignored, except that
 * "Connection: close" closes after the response), Connection when needed,
 * and Date unless the config or the headers say otherwise. No body is sent
 * for HEAD requests and 1xx/204/304 statuses. Headers and body are copied.
 * Finishes the request: 0, or KB_HTTPD_EGONE (released). KB_HTTPD_EINVAL
 * (status outside 100..999, CR/LF in a header) and KB_HTTPD_ESTATE (a stream
 * was begun) leave the request unfinished. */
int kb_httpd_respond(kb_httpd_req *req, int status, const kb_httpd_header *headers,
                     size_t n, const void *body, size_t len);

/* A streamed response: Transfer-Encoding: chunked (for an HTTP/1.0 client,
 * the raw body and a close at the end). Begin once, write any number of
 * times, possibly long after the handler returned, and end. Writes are
 * copied and queued: watch kb_httpd_req_write_queue or use on_drain to
 * avoid buffering without bound for a slow client. begin and write never
 * release the request; end does. Zero-length writes are ignored. */
int kb_httpd_stream_begin(kb_httpd_req *req, int status, const kb_httpd_header *headers,
                          size_t n);
int kb_httpd_stream_write(kb_httpd_req *req, const void *data, size_t len);
int kb_httpd_stream_end(kb_httpd_req *req);

/* Bytes queued for the connection and not yet taken by the kernel. */
size_t kb_httpd_req_write_queue(const kb_httpd_req *req);
/* One-shot: cb(req, ud) runs when the write queue is empty again. Returns
 * 1 if registered, 0 if the queue is already empty (nothing registered),
 * KB_HTTPD_EGONE if the client is gone. */
int kb_httpd_req_on_drain(kb_httpd_req *req, kb_httpd_req_fn cb, void *ud);

/* Fault injection: writes `partial` (raw bytes, e.g. a status line and half
 * a body; may be NULL) after anything already queued, then closes the
 * connection with a TCP RST. Allowed in any state; finishes the request:
 * 0, or KB_HTTPD_EGONE. */
int kb_httpd_reset(kb_httpd_req *req, const void *partial, size_t len);

#endif
