/* The HTTP server's connection and request records, shared by
 * http_server.c (connections, parsing, the server) and
 * http_server_respond.c (request accessors and responses). Not a public
 * header. */
#ifndef KB_HTTP_SERVER_INTERNAL_H
#define KB_HTTP_SERVER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <http_parser.h>
#include <uv.h>

#include "kb/buf.h"
#include "kb/http_server.h"

#define READ_BUF_SIZE (64 * 1024)
#define MAX_BUFFERED (256 * 1024)        /* waiting input before reads pause */
#define WRITE_HIGH_WATER (1024 * 1024)   /* queued output before parsing pauses */

#define DEFAULT_MAX_HEADER_SIZE (64 * 1024)
#define DEFAULT_MAX_HEADERS 100
#define DEFAULT_MAX_BODY_SIZE ((size_t)64 * 1024 * 1024)
#define DEFAULT_IDLE_TIMEOUT_MS 60000
#define DEFAULT_HEADER_TIMEOUT_MS 10000
#define DEFAULT_BODY_TIMEOUT_MS 60000
#define DEFAULT_MAX_CONNECTIONS 4096
#define REFUSAL_LOG_EVERY_MS 10000 /* one log line per this long while refusing */
#define DEFAULT_LINGER_MS 2000
#define DEFAULT_BACKLOG 4096

#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* ---- intrusive lists ---------------------------------------------------------- */

typedef struct qlink {
  struct qlink *prev, *next;
} qlink;

static inline void link_init(qlink *l) { l->prev = l->next = l; }
static inline int link_empty(const qlink *l) { return l->next == l; }

static inline void link_append(qlink *head, qlink *l) {
  l->next = head;
  l->prev = head->prev;
  head->prev->next = l;
  head->prev = l;
}

static inline void link_remove(qlink *l) {
  l->prev->next = l->next;
  l->next->prev = l->prev;
  link_init(l);
}

/* ---- structures ---------------------------------------------------------------- */

typedef struct conn conn;

typedef enum { REQ_PARSING, REQ_HANDLER, REQ_STREAMING } req_state;
typedef enum { BODY_FIXED, BODY_CHUNKED, BODY_RAW, BODY_NONE } body_mode;

struct kb_httpd_req {
  conn *conn;            /* NULL once the connection is closed */
  req_state state;
  kb_buf head;           /* target, header names and values, path, query;
                            NUL-separated, pointers made at headers_complete */
  size_t *hoff;          /* name and value offsets into head, per header */
  size_t nheaders, hoff_cap;
  kb_httpd_header *headers;
  const char *target, *path, *query, *method;
  kb_buf body;
  int version;           /* 10, 11 */
  int in_field;          /* the last header piece parsed was a name */
  int headers_done;
  int keep_alive, head_only, close_after;
  body_mode mode;        /* of the response being streamed */
  kb_httpd_req_fn on_abort, on_drain;
  void *abort_ud, *drain_ud;
  uint64_t handed_ns;    /* when the handler got it, for Server-Timing */
  double timing_ms;      /* Server-Timing value set by the owner, or < 0 */
  double modelled_ms;    /* its ";sim=" value, or < 0 for none */
  char remote[72];
};

struct conn {
  union {             /* a TCP or a Unix-socket connection: both are streams */
    uv_tcp_t tcp;
    uv_pipe_t pipe;
    uv_stream_t stream;
    uv_handle_t handle;
  } io;
  int is_unix;
  uv_shutdown_t shutdown;
  http_parser parser;
  kb_httpd *srv;
  qlink all;              /* in srv->conns */
  qlink ready;            /* in srv->ready while it should resume parsing */
  kb_httpd_req *req;     /* being parsed, or being answered */
  char *in;              /* input that waits for the current request */
  size_t in_len, in_cap;
  size_t header_bytes;
  uint64_t last_active;  /* uv_now of the accept, the last response or the
                            last write drained: the idle timeout's start */
  uint64_t req_begun;    /* uv_now of the current request's first byte */
  uint64_t headers_at;   /* uv_now of its end of headers (body deadline) */
  uint64_t deadline;     /* lingering or resetting: give up then */
  int writes;            /* uv_write requests in flight */
  int reject_status;     /* why a parser callback refused the request */
  int reading, closing, lingering, resetting;
  char remote[72];
};

struct kb_httpd {
  uv_loop_t *loop;
  kb_httpd_config cfg;
  kb_httpd_handler_fn handler;
  void *ud;
  uv_tcp_t listener;
  uv_pipe_t unix_listener;
  int unix_init;
  uv_timer_t sweep;      /* idle timeouts and linger deadlines */
  uv_idle_t idle;        /* resumes connections listed in ready */
  int listener_init;
  int port;
  int closing;
  int handles;           /* open libuv handles; freed at zero when closing */
  qlink conns, ready;
  kb_httpd_closed_fn closed;
  void *closed_ud;
  kb_httpd_stats stats;
  uint64_t refused_logged_at; /* uv_now of the last "refusing" log line */
  uint64_t refused_unlogged;  /* refusals since that line */
  int refused_logged;
  time_t date_sec;
  char date[64];
  char rbuf[READ_BUF_SIZE];
};

/* uv_buf_init takes an unsigned int; bodies may be larger. */
static inline uv_buf_t mkbuf(const void *p, size_t len) {
  uv_buf_t b;
  b.base = (char *)p;
  b.len = len;
  return b;
}

typedef struct write_req {
  uv_write_t req;
  conn *conn;
  char data[];
} write_req;

static inline int req_gone(const kb_httpd_req *r) { return r->conn == NULL || r->conn->closing; }

/* http_server.c */
void kb_httpd_conn_close(conn *c);    /* at once (no linger) */
void kb_httpd_conn_reset_now(conn *c); /* RST */
/* Writes bufs (uv_try_write, the rest copied into a write request); 0 or a uv error. */
int kb_httpd_conn_write(conn *c, const uv_buf_t *bufs, unsigned n);
int kb_httpd_conn_write_str(conn *c, const char *s, size_t len);
/* The response is complete: the connection goes on with the next request
 * (or shuts down), and the request is freed. */
void kb_httpd_req_finish(kb_httpd_req *r);
void kb_httpd_req_free(kb_httpd_req *r);
/* Frees r when its connection is gone (1), else 0. */
int kb_httpd_req_release_gone(kb_httpd_req *r);

#endif
