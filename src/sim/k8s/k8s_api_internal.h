/* Internals shared by the Kubernetes REST layer's files: k8s_api.c
 * (routing, responses, streams, hooks) and k8s_api_objects.c (reads and
 * writes of objects and their subresources). */
#ifndef KB_K8S_API_INTERNAL_H
#define KB_K8S_API_INTERNAL_H

#include "k8s_table.h"
#include "kb/http_server.h"
#include "kb/k8s_api.h"
#include "kb/vclock.h"

#define MAX_STREAM_QUEUE (8u << 20) /* bytes queued for a slow watcher before we end it */
#define DEFAULT_WATCH_TIMEOUT 1800   /* seconds, the apiserver's minRequestTimeout */

typedef struct kstream kstream;
typedef struct kdelay kdelay;
typedef struct klist klist; /* a list written in slices (k8s_api_list.c) */

struct kb_k8s_api {
  uv_loop_t *loop;
  kb_k8s_store *st;
  kb_k8s_latency_fn latency;
  void *latency_ud;
  kb_vclock *latency_clock;
  kb_k8s_fault_fn fault;
  void *fault_ud;
  kstream *streams;
  kdelay *delays;
  klist *lists;
  uint64_t list_slices; /* loop turns lists took (kb_k8s_api_list_slices) */
  double longest_slice; /* CPU seconds of the longest */
  size_t n_streams;
  int handles; /* open uv handles; freed at 0 once closing */
  int closing;
  int deny_all; /* authorization AlwaysDeny (SelfSubjectAccessReview says no) */
};

/* A watch or a followed log. */
struct kstream {
  kb_k8s_api *api;
  kb_httpd_req *req;
  kb_k8s_watch *w;
  uv_timer_t timer;   /* the timeout without a clock; always: its close frees ks */
  kb_vtimer vtimer;   /* the timeout on the API's clock */
  const kb_k8s_res *res;
  int table, cols_sent, ended, want_end;
  k8s_table_include inc;
  /* logs -f */
  int follow, timestamps;
  char *ns, *pod, *container;
  size_t offset;
  kstream *prev, *next;
};

struct kdelay {
  kb_k8s_api *api;
  kb_httpd_req *req;
  kb_vtimer timer;
  int fresh_wait; /* the wait for a resourceVersion the store has not reached */
  kdelay *prev, *next;
};

typedef struct route {
  enum { R_NONE, R_VERSION, R_HEALTH, R_API, R_APIS, R_GROUP, R_RESOURCES, R_OPENAPI_INDEX,
         R_OPENAPI_DOC, R_OPENAPI_V2, R_OBJECT, R_UNKNOWN_RES } kind;
  char group[128], version[64], resource[128], ns[256], name[256], sub[32];
  char gvpath[256];
  const kb_k8s_res *res;
} route;

/* ---- k8s_api.c ---- */

/* The query value of key, URL-decoded into out; 1 if present. */
int kb_k8s_qget(const char *query, const char *key, char *out, size_t cap);
int kb_k8s_qbool(const char *query, const char *key);
/* JSON (or protobuf when the client asks for it), consuming body. */
int kb_k8s_send_json(kb_httpd_req *req, int status, cJSON *body, const char *warning);
int kb_k8s_send_error(kb_httpd_req *req, const kb_k8s_error *err, const kb_k8s_res *res);
int kb_k8s_fail(kb_httpd_req *req, const kb_k8s_res *res, int code, const char *reason,
             const char *msg);
int kb_k8s_wants_table(kb_httpd_req *req);
k8s_table_include kb_k8s_table_include_of(const char *query);
/* A resourceVersion that is not a number: 400 answered, -1. */
int kb_k8s_refuse_bad_rv(kb_httpd_req *req, const kb_k8s_res *res, const char *rv);
void kb_k8s_do_watch(kb_k8s_api *api, kb_httpd_req *req, const route *r, const char *query);
void kb_k8s_do_log(kb_k8s_api *api, kb_httpd_req *req, const route *r, const char *query);

/* Frees the api once it is closing and its last handle closed. */
void kb_k8s_api_maybe_free(kb_k8s_api *api);

/* ---- k8s_api_list.c ---- */

/* Answers a JSON list (no Table, no protobuf) from a snapshot: at once
 * when it is short, else in slices over loop turns. */
void kb_k8s_list_sliced(kb_k8s_api *api, kb_httpd_req *req, const kb_k8s_res *res,
                        const kb_k8s_list_opts *opts);
/* Cuts every list still being written (the api is closing). */
void kb_k8s_lists_end(kb_k8s_api *api);

/* ---- k8s_api_objects.c ---- */

/* GET, LIST, POST, PUT, PATCH (apply included), DELETE of a resource and
 * its subresources (status, scale, eviction, the reviews). */
void kb_k8s_do_object(kb_k8s_api *api, kb_httpd_req *req, const route *r, const char *query);

#endif
