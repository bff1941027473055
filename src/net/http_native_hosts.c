/* The hosts of the native HTTP/1.1 path's pool (http_native.c): where a
 * request's connections go. An IP literal's address is known at once; a
 * host name is looked up with getaddrinfo on libuv's thread pool
 * (uv_getaddrinfo), as libcurl's threaded resolver does, never on the
 * loop. Its answer is kept 60 s (curl's DNS cache timeout); a stale one is
 * looked up again in the background while connections still use it. A
 * name can have several addresses ("localhost": ::1 and 127.0.0.1): a
 * connect that fails goes on to the next one (http_native.c), and new
 * connections start at the one that connected last. */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_client_internal.h"

#define DNS_CACHE_MS 60000 /* curl's CURLOPT_DNS_CACHE_TIMEOUT default */

/* A lookup in flight. It owns itself: the host may be freed before it ends
 * (the client closed), then `host` is NULL. */
typedef struct http_lookup {
  uv_getaddrinfo_t req;
  kb_http_client *client;
  http_host *host;
} http_lookup;

static void host_free(http_host *h) {
  free(h->key);
  free(h->path);
  free(h->name);
  free(h->addrs);
  free(h);
}

http_host *kb__http_host_get(kb_http_client *c, const http_url *u, const char *path) {
  char key[600];
  if (path) snprintf(key, sizeof key, "u:%s", path);
  else snprintf(key, sizeof key, "%c:%s:%d", u->named ? 'n' : 't', u->host, u->port);
  for (http_host *h = c->native.hosts; h; h = h->next)
    if (strcmp(h->key, key) == 0) return h;
  http_host *h = calloc(1, sizeof *h);
  if (!h || !(h->key = strdup(key)) || (path && !(h->path = strdup(path)))) goto fail;
  h->port = u->port;
  if (!path && u->named && !(h->name = strdup(u->host))) goto fail;
  if (!path && !u->named) {
    if (!(h->addrs = calloc(1, sizeof *h->addrs))) goto fail;
    int rc = u->v6 ? uv_ip6_addr(u->host, u->port, (struct sockaddr_in6 *)&h->addrs[0])
                   : uv_ip4_addr(u->host, u->port, (struct sockaddr_in *)&h->addrs[0]);
    if (rc != 0) goto fail;
    h->naddrs = 1;
  }
  h->next = c->native.hosts;
  c->native.hosts = h;
  return h;
fail:
  if (h) host_free(h);
  return NULL;
}

int kb__http_host_stale(kb_http_client *c, const http_host *h) {
  return h->name && h->naddrs > 0 && uv_now(c->loop) - h->resolved_ms >= DNS_CACHE_MS;
}

/* The TCP addresses of a getaddrinfo answer into h (the old ones go);
 * 0 when it held none (or memory ran out: h keeps what it had). */
static int keep_addresses(http_host *h, const struct addrinfo *res) {
  size_t n = 0;
  for (const struct addrinfo *a = res; a; a = a->ai_next)
    if (a->ai_family == AF_INET || a->ai_family == AF_INET6) n++;
  if (n == 0) return 0;
  struct sockaddr_storage *addrs = calloc(n, sizeof *addrs);
  if (!addrs) return 0;
  size_t i = 0;
  for (const struct addrinfo *a = res; a; a = a->ai_next)
    if (a->ai_family == AF_INET || a->ai_family == AF_INET6)
      memcpy(&addrs[i++], a->ai_addr, a->ai_addrlen);
  free(h->addrs);
  h->addrs = addrs;
  h->naddrs = n;
  h->preferred = 0;
  return 1;
}

static void on_lookup(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
  http_lookup *l = req->data;
  kb_http_client *c = l->client;
  http_host *h = l->host;
  if (!h) { /* the client closed meanwhile */
    uv_freeaddrinfo(res);
    free(l);
    kb__http_handle_closed(c);
    return;
  }
  h->lookup = NULL;
  int ok = status == 0 && keep_addresses(h, res);
  if (ok) h->resolved_ms = uv_now(c->loop);
  uv_freeaddrinfo(res);
  free(l);
  /* a failed refresh keeps the addresses it had */
  kb__http_native_resolved(c, h, ok || h->naddrs > 0);
  kb__http_handle_closed(c);
}

int kb__http_host_resolve(kb_http_client *c, http_host *h) {
  if (!h->name || h->lookup || (h->naddrs > 0 && !kb__http_host_stale(c, h))) return 0;
  http_lookup *l = calloc(1, sizeof *l);
  if (!l) return UV_ENOMEM;
  l->client = c;
  l->host = h;
  l->req.data = l;
  char port[8];
  snprintf(port, sizeof port, "%d", h->port);
  /* no AI_ADDRCONFIG: with only a loopback interface (a sandbox, a pod
   * without a network yet) it would hide localhost's addresses */
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICSERV};
  int rc = uv_getaddrinfo(c->loop, &l->req, on_lookup, h->name, port, &hints);
  if (rc != 0) {
    free(l);
    return rc;
  }
  h->lookup = l;
  c->open_handles++; /* the client lives until on_lookup */
  return 0;
}

void kb__http_host_peer(const http_host *h, char *out, size_t outsz) {
  if (h->path) {
    snprintf(out, outsz, "%s", h->path);
    return;
  }
  if (h->name) {
    snprintf(out, outsz, "%s port %d", h->name, h->port);
    return;
  }
  char ip[INET6_ADDRSTRLEN] = "";
  const struct sockaddr_storage *a = &h->addrs[0];
  if (a->ss_family == AF_INET6)
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)a)->sin6_addr, ip, sizeof ip);
  else
    inet_ntop(AF_INET, &((const struct sockaddr_in *)a)->sin_addr, ip, sizeof ip);
  snprintf(out, outsz, "%s port %d", ip, h->port);
}

void kb__http_hosts_free(kb_http_client *c) {
  for (http_host *h = c->native.hosts, *next; h; h = next) {
    next = h->next;
    if (h->lookup) { /* it ends by itself (cancelled if it has not started) */
      h->lookup->host = NULL;
      uv_cancel((uv_req_t *)&h->lookup->req);
    }
    host_free(h);
  }
  c->native.hosts = NULL;
}
