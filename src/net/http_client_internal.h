/* Private structures of the HTTP client, shared by http_client.c (the curl
 * multi <-> libuv glue), http_request.c (request objects), http_error.c
 * (error classification) and http_text.c. Nothing outside src/net/
 * includes this file (src/lua/lhttp_internal.h is kb.http's own). */
#ifndef KB_HTTP_CLIENT_INTERNAL_H
#define KB_HTTP_CLIENT_INTERNAL_H

#include <curl/curl.h>
#include <http_parser.h>

#include "kb/buf.h"
#include "kb/http_client.h"
#include "kb/vclock.h"

/* One socket curl uses. It lives from the moment the socket is opened (our
 * CURLOPT_OPENSOCKETFUNCTION) to the moment curl closes it (our
 * CURLOPT_CLOSESOCKETFUNCTION), so the poll handle is closed before the fd
 * number can be reused. Sockets curl opens behind our back (the threaded
 * resolver's wake-up pipe) get a context while curl watches them. */
typedef struct http_sock {
  uv_poll_t poll;
  kb_http_client *client;
  curl_socket_t fd;
  int want;   /* UV_READABLE | UV_WRITABLE: what curl asked for */
  int polled; /* what the poll handle is started with */
  int owned;  /* opened by us: CLOSESOCKETFUNCTION reports its end */
} http_sock;

struct kb_http_request {
  kb_http_client *client;
  CURL *easy;
  kb_http_request *prev, *next; /* active list, or free list (next only) */
  int started;   /* added to the multi handle, not finished */
  int dirty;     /* set options beyond the URL: reset the handle on release */

  kb_http_done_cb cb;
  void *ud;

  char method[32];
  kb_buf url;         /* NUL-terminated */
  CURLU *uh;          /* the parsed URL curl reads (CURLOPT_CURLU), kept */
  kb_buf uh_url;      /* the URL uh holds; empty: none */
  int uh_set;         /* uh is the handle's CURLOPT_CURLU */
  int url_has_query;
  kb_buf hdr_text;     /* "Name: value\0" lines */
  size_t nheaders;
  struct curl_slist *hdr_nodes; /* built from hdr_text at start */
  size_t hdr_nodes_cap;
  kb_buf body;
  int has_body;
  curl_mime *mime;
  char *tls_server_name;            /* owned; applied at start */
  struct curl_slist *connect_to;    /* owned; the real host for tls_server_name */

  kb_buf resp_body;    /* the body; for a stream, what awaits on_data */
  size_t max_body;   /* plain requests: most body bytes kept; 0 = no limit */
  int body_too_large; /* on_body refused a piece past max_body */
  kb_buf resp_headers;
  int follow;        /* follow_redirects: a 3xx with Location is not final */

  /* Streaming (kb_http_request_set_stream); all 0 for a plain request. */
  int stream;
  kb_http_head_cb on_head;
  kb_http_data_cb on_data;
  void *stream_ud;
  kb_buf spare;        /* the other half of resp_body while on_data runs */
  int head_state;    /* HEAD_NONE, HEAD_READY (not delivered), HEAD_SENT */
  long head_status;  /* of the response whose headers are arriving */
  int head_location; /* that response has a Location header */
  int hold;          /* the consumer asked for a pause */
  int paused;        /* our write callback paused the transfer */
  int was_paused;    /* the handle was paused once: destroyed, not reused */
  int queued;        /* on the client's list of streams to deliver */
  kb_http_request *qprev, *qnext;
  uint64_t t_start;  /* uv_hrtime() at start */
  uint64_t timeout_ms; /* the timeout option, for a deadline on the clock */
  int busy;          /* counted as real work on the client's clock */
  kb_vtimer deadline; /* the timeout on a fast-forwarding clock */
  double clock_start; /* fast-forwarding clock's time at start, or -1 */
  int sock_errno;    /* errno of a failed socket() in OPENSOCKETFUNCTION */
  kb_buf msg;          /* error message, redacted URL, hint */
  kb_http_response resp;
  char errbuf[CURL_ERROR_SIZE];

  /* What decides between libcurl and the native path (http_native.c). */
  kb_buf unix_path;    /* kb_http_request_set_unix_socket's path (the embedded
                          simulator); empty: TCP */
  uint64_t connect_timeout_ms; /* the option; 0: curl's default, 300 s */
  int curl_only;     /* an option only libcurl has (HTTP/2, compression, a proxy) */
  int proxy_off;     /* proxy = "": no proxy whatever the environment says */
  int clock_timeout; /* the timeout runs on the scenario clock (deadline) */

  /* The native path; all 0 on libcurl. */
  int native;        /* started on the native path, not finished */
  int native_retried;  /* resent once after a reused connection died */
  int native_fresh;  /* must have a connection of its own (the retry) */
  struct http_conn *conn;       /* the connection it is on, or NULL */
  struct http_host *host;       /* where it goes (the pool's entry) */
  kb_buf wire;                  /* the request as it goes out, built at start */
  kb_http_request *pnext;       /* waiting for a connection: the queue */
  long native_status;
  int native_version;           /* 10 or 11 */
  uint64_t t_first;             /* uv_hrtime() at the first byte of the answer */
  uint64_t connect_ns;          /* the connect's own duration (0 on reuse) */
  uint64_t dns_ns;              /* how long it waited for its host's lookup */
  int native_lookup;            /* queued until its host's lookup ends */
  size_t native_addr;           /* the host address its connect uses */
  size_t native_tries;          /* addresses its connect tried before it */
  uint64_t connect_t0;          /* uv_hrtime() at its first address's connect */
};

/* ---- the native HTTP/1.1 path (http_native.c) ---------------------------------
 *
 * Plain http:// to an IP literal, a host name or a Unix socket, nothing only libcurl
 * does: the request goes out in one write on a pooled keep-alive
 * connection and its answer is parsed by http_parser, for a tenth of
 * libcurl's instructions per request (docs/design-notes.md "HTTP"). */
typedef struct http_host {
  struct http_host *next;
  char *key;                 /* "t:ADDR:PORT", "n:NAME:PORT" or "u:PATH"; owned */
  char *path;                /* a Unix socket's, owned; NULL: TCP to addrs */
  char *name;                /* a host name (owned), looked up with getaddrinfo on
                                libuv's threads; NULL: an IP literal */
  int port;
  struct sockaddr_storage *addrs; /* TCP: where to connect, in the resolver's
                                     order (a literal's one); owned */
  size_t naddrs;             /* 0: a name not resolved yet */
  size_t preferred;          /* the address that connected last */
  uint64_t resolved_ms;      /* uv_now() of the last lookup's answer */
  struct http_lookup *lookup; /* the lookup in flight, or NULL */
  size_t nconns;             /* open, connecting included */
  struct http_conn *idle;    /* kept-alive connections, most recent first */
} http_host;

typedef struct http_native_pool {
  int off;                   /* KBRUN_HTTP=curl: everything goes to libcurl */
  long max_conns, max_host_conns;
  size_t nconns;
  struct http_conn *conns;   /* every open connection (idle, busy, connecting) */
  http_host *hosts;
  kb_http_request *qhead, *qtail; /* waiting for a connection, oldest first */
  uv_timer_t queue_timer;    /* serves them from the loop and checks their timeouts */
  char rbuf[64 * 1024];      /* every read lands here and is parsed at once */
} http_native_pool;

struct kb_http_client {
  uv_loop_t *loop;
  CURLM *multi;
  uv_timer_t timer;
  uv_check_t check;  /* drains finished transfers once per loop iteration */
  int open_handles;  /* uv handles not closed yet; the client dies at 0 */

  http_sock **socks; /* indexed by fd */
  size_t nsocks;

  kb_http_request *free_list;
  size_t nfree;
  kb_http_request *active; /* started requests */
  size_t nactive;

  /* Streams with a head or body to deliver, oldest first. The idle handle
   * runs while the list is not empty so the loop does not block in poll
   * before the check phase delivers them. */
  kb_http_request *qhead, *qtail;
  uv_idle_t deliver;
  kb_http_request *delivering; /* whose stream callback runs; NULL if it
                                  was cancelled from inside it */

  kb_vclock *clock;  /* the scenario clock, or NULL (kb_http_client_set_clock) */
  int depth;         /* > 0 while finishing transfers (callbacks run) */
  int closing;       /* kb_http_client_free was called */
  int warned_insecure;
  /* a proxy variable (http_proxy, HTTPS_PROXY, ALL_PROXY, ...) was set when
   * the client was made; without one, requests tell libcurl there is none
   * and it skips looking the variables up per request */
  int proxy_env;
  http_native_pool native;
};

/* http_client.c */
curl_socket_t kb__http_open_socket(void *clientp, curlsocktype purpose,
                                   struct curl_sockaddr *addr);
int kb__http_close_socket(void *clientp, curl_socket_t fd);
void kb__http_request_activate(kb_http_request *r);
/* The request's part in the scenario clock: before curl gets the handle,
 * and when it is done (kb__http_request_deactivate calls the latter). */
void kb__http_clock_start(kb_http_request *r);
void kb__http_clock_stop(kb_http_request *r);
void kb__http_request_deactivate(kb_http_request *r);
/* Puts a stream on the delivery list (no-op if on it) / takes it off. */
void kb__http_stream_queue(kb_http_request *r);
void kb__http_stream_unqueue(kb_http_request *r);

enum { HEAD_NONE, HEAD_READY, HEAD_SENT };
/* kb__http_stream_deliver results */
enum { DELIVER_OK = 0, DELIVER_GONE = -1, DELIVER_CLOSING = -2 };

/* http_request.c */
/* Fills r->resp from the finished transfer and runs the callback. */
void kb__http_request_finish(kb_http_request *r, CURLcode rc);
void kb__http_request_destroy(kb_http_request *r);
/* Runs the stream callbacks for what r has waiting (head, then body).
 * DELIVER_GONE: a callback cancelled r; DELIVER_CLOSING: a callback freed
 * the client (r still exists). */
int kb__http_stream_deliver(kb_http_request *r);

/* http_native_request.c */
/* The parts of a request URL the native path sends. */
typedef struct http_url {
  const char *authority; /* host[:port], for Host: */
  size_t authority_len;
  const char *target;    /* path?query, or "" for "/" */
  size_t target_len;
  char host[256];        /* the IP literal (brackets off) or host name */
  int port;
  int v6;
  int named;             /* host is a name to resolve, not a literal */
} http_url;
/* 1 and u filled if the native path can send r exactly as libcurl would
 * (plain http:// to an IP literal or a plain host name, or over a Unix socket, nothing only
 * libcurl does); 0: libcurl takes it. */
int kb__http_native_route(const kb_http_request *r, http_url *u);
/* The request's bytes (head and body) into b: 0 or -ENOMEM. */
int kb__http_native_build(const kb_http_request *r, const http_url *u, kb_buf *b);

/* http_native_hosts.c: the native pool's hosts, their addresses */
/* The pool's entry for u (or the Unix socket path), made on first use;
 * NULL when out of memory. A literal has its address at once, a name
 * after kb__http_host_resolve's lookup. */
http_host *kb__http_host_get(kb_http_client *c, const http_url *u, const char *path);
/* Starts a lookup of h's name unless one runs or its answer is fresh
 * (curl's DNS cache: 60 s); kb__http_native_resolved runs at its end.
 * 0, or a negative uv error (nothing started). */
int kb__http_host_resolve(kb_http_client *c, http_host *h);
/* Whether h's addresses are due to be looked up again. */
int kb__http_host_stale(kb_http_client *c, const http_host *h);
/* "NAME port P", "127.0.0.1 port P" or the socket's path: how curl names
 * the peer in its messages. */
void kb__http_host_peer(const http_host *h, char *out, size_t outsz);
/* Frees every host of the pool; one with a lookup in flight is freed when
 * it ends (the client stays alive until then: the lookup counts among its
 * open handles). */
void kb__http_hosts_free(kb_http_client *c);
/* http_native.c: a lookup of h ended (ok: h has addresses now, or still
 * has the old ones); serves or fails what waits for h. */
void kb__http_native_resolved(kb_http_client *c, http_host *h, int ok);

/* http_native.c */
/* Whether r can go on the native path, and if so starts it there:
 * 1 started (the done callback runs later, from the loop), 0 not eligible
 * (libcurl takes it), < 0 a start error. */
int kb__http_native_start(kb_http_request *r);
/* Stops r wherever it is on the native path (queue, connection). */
void kb__http_native_cancel(kb_http_request *r);
/* Ends r now with rc and r->errbuf (a deadline on the scenario clock). */
void kb__http_native_abort(kb_http_request *r, CURLcode rc);
void kb__http_native_init(kb_http_client *c, long max_conns, long max_host_conns);
/* Closes every connection; the requests are gone already. */
void kb__http_native_close(kb_http_client *c);
void kb__http_native_timings(const kb_http_request *r, kb_http_timings *t);

/* http_client.c: a uv handle of the client was closed (its memory goes
 * with the client once every handle is closed) */
void kb__http_handle_closed(kb_http_client *c);
/* Runs the done callback of r from a loop callback, the client kept alive
 * meanwhile (the callback may free it). */
void kb__http_finish_guarded(kb_http_request *r, CURLcode rc);

/* http_error.c */
kb_http_error kb__http_classify(CURLcode rc, int sock_errno);
/* Formats resp->message/detail/hint/safe_url into r->msg. */
void kb__http_describe_error(kb_http_request *r, CURLcode rc);

#endif
