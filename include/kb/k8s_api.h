/* The Kubernetes REST API over a kb_k8s_store, on the HTTP server of
 * include/kb/http_server.h: what `kubectl` and client libraries need from
 * an apiserver (see /work/shared/notes/apis.md §3-§6).
 *
 *   kb_k8s_store *st = kb_k8s_store_new(NULL);
 *   kb_k8s_store_add_builtins(st);
 *   kb_k8s_api *api = kb_k8s_api_new(loop, st);
 *   kb_httpd *srv = kb_httpd_new(loop, NULL, kb_k8s_api_handler, api);
 *   kb_httpd_listen(srv, "127.0.0.1", 0);
 *
 * Or, to share one server with other APIs, call kb_k8s_api_handle from
 * your handler: it returns 0 for paths that are not Kubernetes ones.
 *
 * Served: /version (minor "32"), /healthz /readyz /livez, discovery (/api,
 * /apis, /api/v1, /apis/<g>, /apis/<g>/<v>), /openapi/v3 (+ per group;
 * /openapi/v2 is 404), and for every store type: get, list (also across
 * namespaces), watch (?watch=true, chunked JSON lines, timeoutSeconds,
 * allowWatchBookmarks, sendInitialEvents), create (201; dryRun,
 * fieldValidation), update (PUT), patch (merge, JSON, strategic; apply
 * patches are 415), delete (DeleteOptions, propagationPolicy),
 * deletecollection, the status subresource, and pods/log (container,
 * tailLines, timestamps, limitBytes, sinceSeconds, follow=true streaming).
 * Lists, gets and watches answer in the Table format when the Accept header
 * asks for as=Table. Errors are Status objects.
 *
 * The store's log listener (kb_k8s_log_set_listener) is taken by the API
 * object, for `logs -f`. Not thread-safe: everything on the loop's thread. */
#ifndef KB_K8S_API_H
#define KB_K8S_API_H

#include <stddef.h>
#include <uv.h>

#include "kb/http_server.h"
#include "kb/k8s_store.h"

typedef struct kb_k8s_api kb_k8s_api;

/* What a request is, for the hooks. Strings are valid during the call. */
typedef struct kb_k8s_req_info {
  const char *method;      /* "GET" */
  const char *verb;        /* get list watch create update patch delete
                              deletecollection, or "discovery" / "other" */
  const kb_k8s_res *res;   /* NULL for non-resource paths */
  const char *ns;          /* "" when none */
  const char *name;        /* "" when none */
  const char *subresource; /* "", "status", "log" */
  size_t stored;           /* objects of that type in that namespace (all
                              namespaces when ns is ""), e.g. for list cost */
} kb_k8s_req_info;

/* Seconds on the latency clock to wait before the request is executed
 * and answered (the simulator's API latency model); <= 0: none. */
typedef double (*kb_k8s_latency_fn)(void *ud, const kb_k8s_req_info *info);

typedef enum kb_k8s_fault_kind {
  KB_K8S_FAULT_NONE,
  KB_K8S_FAULT_STATUS, /* answer `status` with a Status body (+ Retry-After) */
  KB_K8S_FAULT_RESET   /* reset the connection (TCP RST) */
} kb_k8s_fault_kind;

typedef struct kb_k8s_fault {
  kb_k8s_fault_kind kind;
  int status;          /* 429, 500, 503, 504, ... */
  double retry_after;  /* seconds; > 0 adds Retry-After and details.retryAfterSeconds */
  char message[256];   /* "" : a default per status */
} kb_k8s_fault;

/* Fills *out (zeroed beforehand) to inject a fault; runs before the
 * latency hook, once per request. */
typedef void (*kb_k8s_fault_fn)(void *ud, const kb_k8s_req_info *info, kb_k8s_fault *out);

/* The store must outlive the API object. NULL when out of memory. */
kb_k8s_api *kb_k8s_api_new(uv_loop_t *loop, kb_k8s_store *st);
/* Ends open watches and log streams, answers delayed requests with 503,
 * and frees the object once its timers are closed (run the loop). */
void kb_k8s_api_free(kb_k8s_api *api);

/* The hook's delays wait on clock (which must outlive the API object). */
struct kb_vclock;
void kb_k8s_api_set_latency(kb_k8s_api *api, struct kb_vclock *clock, kb_k8s_latency_fn fn,
                            void *ud);
void kb_k8s_api_set_fault(kb_k8s_api *api, kb_k8s_fault_fn fn, void *ud);
/* What SelfSubjectAccessReviews answer (`kubectl auth can-i`): allowed
 * (AlwaysAllow, the default) or, with deny_all, denied (AlwaysDeny).
 * Requests themselves are not refused: the simulator has no RBAC. */
void kb_k8s_api_set_authorization(kb_k8s_api *api, int deny_all);

/* Takes the request (returns 1) when its path is a Kubernetes one, else
 * returns 0 and leaves it to the caller. */
int kb_k8s_api_handle(kb_k8s_api *api, kb_httpd_req *req);
/* A kb_httpd handler (ud = the kb_k8s_api): unknown paths get a 404 Status. */
void kb_k8s_api_handler(kb_httpd_req *req, void *ud);

/* Open watch and log streams (for tests and stats). */
size_t kb_k8s_api_streams(const kb_k8s_api *api);
/* Loop turns that lists written in slices have taken so far: a list of
 * 100,000 objects takes hundreds, each short, and other requests are
 * answered between them. */
uint64_t kb_k8s_api_list_slices(const kb_k8s_api *api);
/* CPU seconds of the longest of those turns. */
double kb_k8s_api_longest_slice(const kb_k8s_api *api);

#endif
