/* argo-server's CronWorkflowService: /api/v1/cron-workflows/{ns} create and
 * list, .../{name} get and delete, .../{name}/suspend and /resume, and
 * .../lint, over the store's CronWorkflow objects; the cron controller
 * (ctl_cron.c) spawns their Workflows. Validation as argo's
 * ValidateCronWorkflow words it: the name's length, at least one schedule,
 * each a 5-field cron expression (or a descriptor such as @hourly), the
 * concurrencyPolicy, then the workflowSpec as a Workflow's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "argo_internal.h"
#include "k8s_internal.h"
#include "sim_cron.h"

#define MAX_CRON_NAME 52

/* robfig/cron's ParseStandard: 5 fields or a descriptor. */
static int schedule_error(const char *expr, char *out, size_t cap) {
  int fields = 0;
  char list[256] = "";
  size_t used = 0;
  for (const char *p = expr; *p;) {
    while (*p == ' ' || *p == '\t') p++;
    if (!*p) break;
    const char *s = p;
    while (*p && *p != ' ' && *p != '\t') p++;
    used += (size_t)snprintf(list + used, used < sizeof list ? sizeof list - used : 0, "%s%.*s",
                             fields ? " " : "", (int)(p - s), s);
    if (used >= sizeof list) used = sizeof list - 1;
    fields++;
  }
  if (*expr == '@') {
    if (kb_sim_cron_valid(expr)) return 0;
    snprintf(out, cap, "unrecognized descriptor: %s", expr);
    return -1;
  }
  if (fields != 5) {
    snprintf(out, cap, "expected exactly 5 fields, found %d: [%s]", fields, list);
    return -1;
  }
  if (!kb_sim_cron_valid(expr)) {
    snprintf(out, cap, "failed to parse %s", expr);
    return -1;
  }
  return 0;
}

static int validate_cron(const cJSON *cron, char *msg, size_t cap) {
  const char *name = kb_k8s_meta_str(cron, "name");
  if (name && strlen(name) > MAX_CRON_NAME) {
    snprintf(msg, cap, "cron workflow name \"%.100s\" must not be more than 52 characters long "
             "(currently %zu)", name, strlen(name));
    return -1;
  }
  const cJSON *spec = cJSON_GetObjectItemCaseSensitive(cron, "spec");
  const char *one = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "schedule"));
  const cJSON *many = cJSON_GetObjectItemCaseSensitive(spec, "schedules");
  if ((!one || !*one) && !cJSON_GetArraySize(many)) {
    snprintf(msg, cap, "cron workflow must have at least one schedule");
    return -1;
  }
  char why[400];
  if (one && *one && schedule_error(one, why, sizeof why)) {
    snprintf(msg, cap, "cron schedule %.200s is malformed: %s", one, why);
    return -1;
  }
  const cJSON *s;
  cJSON_ArrayForEach(s, many) {
    const char *e = cJSON_GetStringValue(s) ? s->valuestring : "";
    if (schedule_error(e, why, sizeof why)) {
      snprintf(msg, cap, "cron schedule %.200s is malformed: %s", e, why);
      return -1;
    }
  }
  const char *policy = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "concurrencyPolicy"));
  if (policy && *policy && strcmp(policy, "Allow") && strcmp(policy, "Forbid") && strcmp(policy, "Replace")) {
    snprintf(msg, cap, "'%.100s' is not a valid concurrencyPolicy", policy);
    return -1;
  }
  cJSON *wf = cJSON_CreateObject();
  const cJSON *ws = cJSON_GetObjectItemCaseSensitive(spec, "workflowSpec");
  cJSON_AddItemToObject(wf, "spec", cJSON_IsObject(ws) ? cJSON_Duplicate(ws, 1) : cJSON_CreateObject());
  int rc = kb_argo_validate_workflow(wf, 0, msg, cap);
  cJSON_Delete(wf);
  return rc;
}

/* The request body as an object holding `key` (an object), or NULL after
 * answering 400. *body is the parsed body to free. */
static cJSON *body_member(kb_httpd_req *req, const char *key, cJSON **body) {
  size_t len = 0;
  const char *text = kb_httpd_req_body(req, &len);
  *body = cJSON_ParseWithLength(text, len);
  cJSON *m = cJSON_GetObjectItemCaseSensitive(*body, key);
  if (cJSON_IsObject(m)) return m;
  int is_obj = cJSON_IsObject(*body);
  cJSON_Delete(*body);
  *body = NULL;
  kb_argo_send_error(req, 400, is_obj ? "cronWorkflow is required" : "the body must be a JSON object");
  return NULL;
}

static void do_create(argo_env *e, kb_httpd_req *req, const char *ns, int lint) {
  cJSON *body = NULL;
  cJSON *cron = body_member(req, "cronWorkflow", &body);
  if (!cron) return;
  char msg[1024];
  if (validate_cron(cron, msg, sizeof msg) < 0) {
    cJSON_Delete(body);
    kb_argo_send_error(req, 400, msg);
    return;
  }
  if (lint) {
    kb_argo_send_json(req, 200, cJSON_Duplicate(cron, 1));
    cJSON_Delete(body);
    return;
  }
  if (!cJSON_GetObjectItemCaseSensitive(cron, "apiVersion"))
    cJSON_AddStringToObject(cron, "apiVersion", "argoproj.io/v1alpha1");
  if (!cJSON_GetObjectItemCaseSensitive(cron, "kind")) cJSON_AddStringToObject(cron, "kind", "CronWorkflow");
  cJSON *out = NULL;
  kb_k8s_error err = {0};
  int rc = kb_k8s_create(e->st, e->crons, ns, cron, 0, &out, &err);
  cJSON_Delete(body);
  if (rc < 0) {
    kb_argo_send_k8s_error(req, &err);
    return;
  }
  const cJSON *now = kb_k8s_peek(e->st, e->crons, ns, kb_k8s_meta_str(out, "name"));
  if (now) {
    cJSON_Delete(out);
    out = cJSON_Duplicate(now, 1);
  }
  kb_argo_send_json(req, 200, out);
}

static void do_suspend(argo_env *e, kb_httpd_req *req, const char *ns, const char *name, int on) {
  const cJSON *cur = kb_k8s_peek(e->st, e->crons, ns, name);
  if (!cur) {
    char msg[400];
    snprintf(msg, sizeof msg, "cronworkflows.argoproj.io \"%.200s\" not found", name);
    kb_argo_send_error(req, 404, msg);
    return;
  }
  cJSON *o = cJSON_Duplicate(cur, 1);
  cJSON *spec = cJSON_GetObjectItemCaseSensitive(o, "spec");
  if (!cJSON_IsObject(spec)) {
    cJSON_DeleteItemFromObjectCaseSensitive(o, "spec");
    spec = cJSON_AddObjectToObject(o, "spec");
  }
  cJSON_DeleteItemFromObjectCaseSensitive(spec, "suspend");
  cJSON_AddBoolToObject(spec, "suspend", on);
  cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "metadata"), "resourceVersion");
  kb_k8s_error err = {0};
  int rc = kb_k8s_update(e->st, e->crons, ns, name, o, 0, NULL, &err);
  cJSON_Delete(o);
  if (rc < 0) {
    kb_argo_send_k8s_error(req, &err);
    return;
  }
  const cJSON *now = kb_k8s_peek(e->st, e->crons, ns, name);
  kb_argo_send_json(req, 200, now ? cJSON_Duplicate(now, 1) : cJSON_CreateObject());
}

void kb_argo_cron_route(argo_env *e, kb_httpd_req *req, const char *m, int n, char seg[][256]) {
  const char *ns = n > 1 ? seg[1] : NULL;
  if (n == 2 && !strcmp(m, "POST")) do_create(e, req, ns, 0);
  else if (n == 2 && !strcmp(m, "GET")) kb_argo_list(e, e->crons, req, ns);
  else if (n == 3 && !strcmp(m, "POST") && !strcmp(seg[2], "lint")) do_create(e, req, ns, 1);
  else if (n == 3 && !strcmp(m, "GET")) kb_argo_get(e, e->crons, req, ns, seg[2]);
  else if (n == 3 && !strcmp(m, "DELETE")) kb_argo_delete(e, e->crons, req, ns, seg[2]);
  else if (n == 3 && !strcmp(m, "PUT")) kb_argo_send_error(req, 501, "not supported by the simulator");
  else if (n == 4 && !strcmp(m, "PUT") && !strcmp(seg[3], "suspend")) do_suspend(e, req, ns, seg[2], 1);
  else if (n == 4 && !strcmp(m, "PUT") && !strcmp(seg[3], "resume")) do_suspend(e, req, ns, seg[2], 0);
  else kb_argo_send_error(req, 404, "Not Found");
}
