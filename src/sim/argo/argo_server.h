/* argo-server's REST API over the Kubernetes store's Workflow objects:
 * the server (server.c) routes argo-server paths here. Not a public header. */
#ifndef KB_SIM_ARGO_SERVER_H
#define KB_SIM_ARGO_SERVER_H

#include <uv.h>

#include "kb/http_server.h"
#include "kb/k8s_store.h"

/* /api/v1/workflows/{ns}[/{name}] (create and lint, validated as argo
 * does; list, get with fields=; delete), /api/v1/workflows/{ns}/submit
 * (from a WorkflowTemplate), .../{name}/log, .../{name}/{suspend|resume|
 * stop|terminate|retry|resubmit|set} (argo_actions.c),
 * /api/v1/workflow-templates/{ns}[/{name}] (create, list, get, delete),
 * /api/v1/cron-workflows/... (argo_cron.c), /api/v1/archived-workflows/...
 * (argo_archive.c), /api/v1/workflow-events/{ns}
 * (newline-delimited {"result":...} or SSE with Accept: text/event-stream,
 * ended after listOptions.timeoutSeconds), /api/v1/version, /info,
 * /userinfo, over the store's objects; errors in grpc-gateway's shape. */
typedef struct kb_argo_server kb_argo_server;
kb_argo_server *kb_argo_server_new(kb_k8s_store *st, uv_loop_t *loop);
/* Stream timeouts wait on clock from now on. */
struct kb_vclock;
void kb_argo_server_set_clock(kb_argo_server *a, struct kb_vclock *clock);
/* 1 when the path is argo-server's (the request is answered), else 0. */
int kb_argo_server_handle(kb_argo_server *a, kb_httpd_req *req);
/* 1 for argo-server paths. */
int kb_argo_server_path(const char *path);
/* Ends open event streams; call before the store is freed. */
void kb_argo_server_free(kb_argo_server *a);

#endif
