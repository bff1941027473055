/* Shared by the argo-server files (argo_server.c: routes, streams, logs;
 * argo_validate.c; argo_actions.c; argo_fields.c). Not a public header. */
#ifndef KB_SIM_ARGO_INTERNAL_H
#define KB_SIM_ARGO_INTERNAL_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "kb/http_server.h"
#include "kb/k8s_store.h"

/* The store and the resources every handler reads. */
typedef struct argo_env {
  kb_k8s_store *st;
  const kb_k8s_res *wfs, *templates, *pods, *crons;
} argo_env;

/* Responses (argo_server.c): JSON (body is consumed), grpc-gateway's error
 * body {code, message, details} with the gRPC code of the HTTP status. */
void kb_argo_send_json(kb_httpd_req *req, int status, cJSON *body);
void kb_argo_send_error(kb_httpd_req *req, int http, const char *msg);
void kb_argo_send_k8s_error(kb_httpd_req *req, const kb_k8s_error *err);
/* Validates (as argo does) and stores wf, answers the Workflow as the
 * controller has already seen it. wf stays the caller's. */
void kb_argo_create_workflow(argo_env *e, kb_httpd_req *req, const char *ns, cJSON *wf, int dry);

/* List (listOptions.*, fields=), get (fields=) and delete of any of the
 * argo types, answered. */
void kb_argo_list(argo_env *e, const kb_k8s_res *res, kb_httpd_req *req, const char *ns);
void kb_argo_get(argo_env *e, const kb_k8s_res *res, kb_httpd_req *req, const char *ns,
              const char *name);
void kb_argo_delete(argo_env *e, const kb_k8s_res *res, kb_httpd_req *req, const char *ns,
                 const char *name);

/* /api/v1/cron-workflows/... split in n segments (argo_cron.c). */
void kb_argo_cron_route(argo_env *e, kb_httpd_req *req, const char *m, int n, char seg[][256]);

/* argo's validation of a Workflow, or with `template` of a
 * WorkflowTemplate (its entrypoint may be empty) (argo_validate.c): 0, or
 * -1 with its message (argo's words) in msg. */
int kb_argo_validate_workflow(const cJSON *wf, int template, char *msg, size_t cap);

/* PUT .../workflows/{ns}/{name}/{action} (argo_actions.c). */
void kb_argo_workflow_action(argo_env *e, kb_httpd_req *req, const char *ns, const char *name,
                          const char *action);
/* A new Workflow from wf (consumed), as argo's resubmit makes it; answered. */
void kb_argo_resubmit(argo_env *e, kb_httpd_req *req, const char *ns, const char *name, cJSON *wf);

/* The url-decoded value of key in the query string; 0 when absent. */
int kb_argo_query(const char *q, const char *key, char *out, size_t cap);

/* The workflow archive (argo_archive.c): a watch copying completed
 * Workflows; /api/v1/archived-workflows... split in n segments. */
typedef struct argo_archive argo_archive;
argo_archive *kb_argo_archive_new(argo_env *env);
void kb_argo_archive_free(argo_archive *ar);
void kb_argo_archive_route(argo_archive *ar, kb_httpd_req *req, const char *m, int n, char seg[][256]);

/* argo-server's fields= (argo_fields.c): keeps only the listed paths
 * ("items.metadata.name,items.status.phase") or, with a leading '-',
 * removes them. */
void kb_argo_fields_prune(cJSON *doc, const char *fields);
/* The same list with `prefix` taken off each path (the watch's
 * "result.object."), malloc'd; NULL when out of memory. */
char *kb_argo_fields_without_prefix(const char *fields, const char *prefix);

#endif
