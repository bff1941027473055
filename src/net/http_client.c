/* The curl multi <-> libuv glue of the HTTP client.
 *
 * curl tells us, per socket, what it waits for (CURLMOPT_SOCKETFUNCTION) and
 * when it next needs a timeout (CURLMOPT_TIMERFUNCTION); libuv tells curl
 * when a socket is ready (curl_multi_socket_action). The costs that matter at
 * tens of thousands of requests per second are system calls, so:
 *
 *  - each socket has one uv_poll for its whole life, created when the socket
 *    is opened and closed right before curl closes the fd (our open/close
 *    socket callbacks), so a reused fd number never meets a stale watcher;
 *  - uv_poll_start runs only when curl's wanted mask changes: every start
 *    is an epoll_ctl. When curl stops watching a kept-alive connection
 *    (CURL_POLL_REMOVE) the poll stays armed but unreferenced; the next
 *    request on that connection usually wants the same mask, costing
 *    nothing. An idle socket that fires anyway (the server closed it) is
 *    stopped then;
 *  - finished transfers are collected once per loop iteration (uv_check),
 *    after every ready socket has been handled, and after each timer-driven
 *    curl_multi_socket_action.
 *
 * Streamed responses (kb_http_request_set_stream) follow the same rule:
 * curl's callbacks only store what arrived and put the request on a
 * delivery list; the stream callbacks run from drain(), outside curl, so
 * they may cancel requests or resume paused ones (curl forbids re-entering
 * the multi handle from its own callbacks).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_client_internal.h"

static void client_destroy(kb_http_client *c);


/* ---- handle bookkeeping ----------------------------------------------------- */

void kb__http_handle_closed(kb_http_client *c) {
  if (--c->open_handles == 0) free(c);
}

static void on_client_handle_closed(uv_handle_t *h) { kb__http_handle_closed(h->data); }

/* ---- sockets ---------------------------------------------------------------- */

static http_sock *sock_get(kb_http_client *c, curl_socket_t fd) {
  return fd >= 0 && (size_t)fd < c->nsocks ? c->socks[fd] : NULL;
}

static int sock_table_fit(kb_http_client *c, curl_socket_t fd) {
  if ((size_t)fd < c->nsocks) return 0;
  size_t n = c->nsocks ? c->nsocks : 256;
  while (n <= (size_t)fd) n *= 2;
  http_sock **t = realloc(c->socks, n * sizeof *t);
  if (!t) return -1;
  memset(t + c->nsocks, 0, (n - c->nsocks) * sizeof *t);
  c->socks = t;
  c->nsocks = n;
  return 0;
}

static void on_sock_closed(uv_handle_t *h) {
  http_sock *s = h->data;
  kb_http_client *c = s->client;
  free(s);
  kb__http_handle_closed(c);
}

/* uv_close unregisters the fd from epoll at once; only the memory waits for
 * the close callback. */
static void sock_close(kb_http_client *c, http_sock *s) {
  c->socks[s->fd] = NULL;
  uv_close((uv_handle_t *)&s->poll, on_sock_closed);
}

static http_sock *sock_new(kb_http_client *c, curl_socket_t fd, int owned) {
  if (fd < 0 || sock_table_fit(c, fd) != 0) return NULL;
  if (c->socks[fd]) sock_close(c, c->socks[fd]); /* its fd was closed behind our back */
  http_sock *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  if (uv_poll_init_socket(c->loop, &s->poll, fd) != 0) {
    free(s);
    return NULL;
  }
  s->poll.data = s;
  s->client = c;
  s->fd = fd;
  s->owned = owned;
  c->socks[fd] = s;
  c->open_handles++;
  return s;
}

static void on_poll(uv_poll_t *h, int status, int events);

static void sock_arm(http_sock *s) {
  if (s->polled != s->want) {
    uv_poll_start(&s->poll, s->want, on_poll);
    s->polled = s->want;
  }
  uv_ref((uv_handle_t *)&s->poll);
}

static void on_poll(uv_poll_t *h, int status, int events) {
  http_sock *s = h->data;
  kb_http_client *c = s->client;
  curl_socket_t fd = s->fd;
  int flags = 0;
  if (!s->want) {
    /* An idle kept-alive connection became readable: the server closed it
     * or sent garbage. curl finds out when it next uses it; stop watching
     * so level-triggered epoll does not spin on it. */
    uv_poll_stop(h);
    s->polled = 0;
    return;
  }
  if (status < 0) {
    /* POLLERR (libuv stopped the handle). Rather than CURL_CSELECT_ERR,
     * whose message is a bare "select/poll returned error", let curl read
     * or write and report the socket's own error ("Connection reset by
     * peer", "Connection refused"). */
    s->polled = 0;
    events = s->want;
  }
  if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
  if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
  int running;
  curl_multi_socket_action(c->multi, fd, flags, &running);
  /* After an error stop, re-arm if curl still waits on the same socket
   * (its mask did not change, so it will not tell us again). */
  if (status < 0 && sock_get(c, fd) == s && s->want) sock_arm(s);
}

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
  kb_http_client *c = userp;
  http_sock *s = sock_get(c, fd);
  if (what == CURL_POLL_REMOVE) {
    if (!s) return 0;
    s->want = 0;
    if (!s->owned) sock_close(c, s); /* curl closes it without telling us */
    else uv_unref((uv_handle_t *)&s->poll);
    return 0;
  }
  if (!s && !(s = sock_new(c, fd, 0))) return -1;
  s->want = (what & CURL_POLL_IN ? UV_READABLE : 0) | (what & CURL_POLL_OUT ? UV_WRITABLE : 0);
  sock_arm(s);
  return 0;
}

curl_socket_t kb__http_open_socket(void *clientp, curlsocktype purpose,
                                   struct curl_sockaddr *addr) {
  kb_http_request *r = clientp;
  int fd = socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
  if (fd < 0) {
    r->sock_errno = errno;
    return CURL_SOCKET_BAD;
  }
  if (!sock_new(r->client, fd, 1)) {
    r->sock_errno = ENOMEM;
    close(fd);
    return CURL_SOCKET_BAD;
  }
  return fd;
}

int kb__http_close_socket(void *clientp, curl_socket_t fd) {
  kb_http_client *c = clientp;
  http_sock *s = sock_get(c, fd);
  if (s) sock_close(c, s);
  return close(fd);
}

/* ---- timer and completions --------------------------------------------------- */

static void drain(kb_http_client *c);

static void on_timeout(uv_timer_t *t) {
  kb_http_client *c = t->data;
  int running;
  curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
  /* Transfers often finish right here (a reused connection answers before
   * curl is done sending the other requests). The check phase comes only
   * after the loop polls, which may block: collect them now. */
  drain(c);
}

static int on_curl_timer(CURLM *multi, long ms, void *userp) {
  kb_http_client *c = userp;
  if (ms < 0) uv_timer_stop(&c->timer);
  else uv_timer_start(&c->timer, on_timeout, (uint64_t)ms, 0);
  return 0;
}

/* ---- stream delivery ------------------------------------------------------------ */

static void on_deliver(uv_idle_t *h) { drain(h->data); }

void kb__http_stream_queue(kb_http_request *r) {
  kb_http_client *c = r->client;
  if (r->queued) return;
  r->queued = 1;
  r->qnext = NULL;
  r->qprev = c->qtail;
  if (c->qtail) c->qtail->qnext = r;
  else c->qhead = r;
  c->qtail = r;
  /* Queued from inside curl or from a task: make sure a drain comes
   * before the loop blocks. */
  uv_idle_start(&c->deliver, on_deliver);
}

void kb__http_stream_unqueue(kb_http_request *r) {
  kb_http_client *c = r->client;
  if (!r->queued) return;
  if (r->qprev) r->qprev->qnext = r->qnext;
  else c->qhead = r->qnext;
  if (r->qnext) r->qnext->qprev = r->qprev;
  else c->qtail = r->qprev;
  r->qprev = r->qnext = NULL;
  r->queued = 0;
  if (!c->qhead) uv_idle_stop(&c->deliver); /* else the loop would spin */
}

/* Until the list is empty: a callback may resume a paused stream, whose
 * data then arrives (and is queued) before curl_easy_pause returns. */
static void deliver_streams(kb_http_client *c) {
  kb_http_request *r;
  while (!c->closing && (r = c->qhead)) {
    kb__http_stream_unqueue(r);
    kb__http_stream_deliver(r);
  }
}

/* ---- completions ---------------------------------------------------------------- */

static void drain(kb_http_client *c) {
  CURLMsg *m;
  int left;
  c->depth++;
  if (c->qhead) deliver_streams(c);
  while (!c->closing && (m = curl_multi_info_read(c->multi, &left))) {
    if (m->msg != CURLMSG_DONE) continue;
    CURL *easy = m->easy_handle;
    CURLcode rc = m->data.result;
    char *priv = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
    curl_multi_remove_handle(c->multi, easy);
    kb__http_request_finish((kb_http_request *)priv, rc);
  }
  if (--c->depth == 0 && c->closing) client_destroy(c);
}

static void on_check(uv_check_t *h) { drain(h->data); }

void kb__http_finish_guarded(kb_http_request *r, CURLcode rc) {
  kb_http_client *c = r->client;
  c->depth++;
  kb__http_request_finish(r, rc);
  if (--c->depth == 0 && c->closing) client_destroy(c);
}

/* A request over a Unix socket to a server on this loop (the embedded
 * simulator) times out on the fast-forwarding clock: curl's own timer
 * counts real time, which the clock skips. */
static void on_deadline(kb_vtimer *t) {
  kb_http_request *r = t->data;
  kb_http_client *c = r->client;
  if (!r->started) return;
  snprintf(r->errbuf, sizeof r->errbuf, "Operation timed out after %llu milliseconds "
           "(on the scenario clock)", (unsigned long long)r->timeout_ms);
  if (r->native) {
    kb__http_native_abort(r, CURLE_OPERATION_TIMEDOUT);
    return;
  }
  curl_multi_remove_handle(c->multi, r->easy);
  kb__http_finish_guarded(r, CURLE_OPERATION_TIMEDOUT);
}

/* On a fast-forwarding clock: a request to a real server is real work the
 * clock must not skip over; one to the embedded simulator gets its
 * timeout on the clock instead of curl's. */
void kb__http_clock_start(kb_http_request *r) {
  kb_http_client *c = r->client;
  r->busy = 0;
  r->clock_start = -1;
  r->clock_timeout = 0;
  if (!c->clock || kb_vclock_mode_of(c->clock) != KB_VCLOCK_EVENTS) return;
  r->clock_start = kb_vclock_now(c->clock);
  if (!r->unix_path.len) {
    r->busy = 1;
    kb_vclock_busy(c->clock, +1);
    return;
  }
  kb_vtimer_init(c->clock, &r->deadline, on_deadline, r);
  if (r->timeout_ms) {
    r->clock_timeout = 1;
    curl_easy_setopt(r->easy, CURLOPT_TIMEOUT_MS, 0L);
    kb_vtimer_start(&r->deadline, (double)r->timeout_ms / 1e3);
  }
}

void kb__http_clock_stop(kb_http_request *r) {
  kb_http_client *c = r->client;
  if (r->busy) kb_vclock_busy(c->clock, -1);
  r->busy = 0;
  if (r->deadline.clock) kb_vtimer_stop(&r->deadline);
}

void kb_http_client_set_clock(kb_http_client *c, kb_vclock *clock) { c->clock = clock; }

void kb__http_request_activate(kb_http_request *r) {
  kb_http_client *c = r->client;
  r->prev = NULL;
  r->next = c->active;
  if (c->active) c->active->prev = r;
  c->active = r;
  /* Keep the loop alive while requests run, whatever curl polls. */
  if (c->nactive++ == 0) uv_ref((uv_handle_t *)&c->check);
}

void kb__http_request_deactivate(kb_http_request *r) {
  kb_http_client *c = r->client;
  kb__http_clock_stop(r);
  if (r->prev) r->prev->next = r->next;
  else c->active = r->next;
  if (r->next) r->next->prev = r->prev;
  r->prev = r->next = NULL;
  if (--c->nactive == 0) uv_unref((uv_handle_t *)&c->check);
}

/* ---- the client ---------------------------------------------------------------- */

kb_http_client *kb_http_client_new(uv_loop_t *loop, const kb_http_client_opts *opts) {
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return NULL;
  kb_http_client *c = calloc(1, sizeof *c);
  if (!c || !(c->multi = curl_multi_init())) {
    free(c);
    curl_global_cleanup();
    return NULL;
  }
  c->loop = loop;
  static const char *proxy_vars[] = {"http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY",
                                     "all_proxy", "ALL_PROXY"};
  for (size_t i = 0; i < sizeof proxy_vars / sizeof proxy_vars[0]; i++)
    if (getenv(proxy_vars[i]) && *getenv(proxy_vars[i])) c->proxy_env = 1;
  long max = opts && opts->max_connections > 0 ? opts->max_connections
                                               : KB_HTTP_DEFAULT_MAX_CONNECTIONS;
  long per_host = opts && opts->max_host_connections > 0 ? opts->max_host_connections : 0;
  curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
  curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
  curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
  curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
  curl_multi_setopt(c->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, max);
  curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, max);
  if (per_host) curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, per_host);

  uv_timer_init(loop, &c->timer);
  c->timer.data = c;
  uv_check_init(loop, &c->check);
  c->check.data = c;
  uv_check_start(&c->check, on_check);
  uv_unref((uv_handle_t *)&c->check);
  uv_idle_init(loop, &c->deliver);
  c->deliver.data = c;
  c->open_handles = 3;
  kb__http_native_init(c, max, per_host);
  return c;
}

size_t kb_http_client_active(const kb_http_client *c) { return c->nactive; }

static void client_destroy(kb_http_client *c) {
  while (c->active) kb_http_request_cancel(c->active);
  while (c->free_list) {
    kb_http_request *r = c->free_list;
    c->free_list = r->next;
    kb__http_request_destroy(r);
  }
  c->nfree = 0;
  kb__http_native_close(c);
  curl_multi_cleanup(c->multi); /* closes cached connections: sockets close */
  c->multi = NULL;
  for (size_t fd = 0; fd < c->nsocks; fd++)
    if (c->socks[fd]) sock_close(c, c->socks[fd]);
  free(c->socks);
  c->socks = NULL;
  c->nsocks = 0;
  uv_close((uv_handle_t *)&c->timer, on_client_handle_closed);
  uv_close((uv_handle_t *)&c->check, on_client_handle_closed);
  uv_close((uv_handle_t *)&c->deliver, on_client_handle_closed);
  curl_global_cleanup();
}

void kb_http_client_free(kb_http_client *c) {
  if (!c || c->closing) return;
  c->closing = 1;
  if (c->depth == 0) client_destroy(c);
}

