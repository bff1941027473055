/* argo-server's workflow actions, PUT /api/v1/workflows/{ns}/{name}/{action}:
 * suspend, resume, terminate, stop, retry, resubmit, set. As the real
 * server does, each changes the stored Workflow (spec.suspend,
 * spec.shutdown, a status set back to Running, a new Workflow) and the
 * workflow controller (ctl_workflow.c) makes the model follow; the answer
 * is the Workflow as stored afterwards. Errors carry argo's words and
 * codes (workflow/util, server/workflow). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "argo_internal.h"
#include "k8s_internal.h"
#include "argo_server.h"

#define COMPLETED_LABEL "workflows.argoproj.io/completed"
#define PHASE_LABEL "workflows.argoproj.io/phase"
#define RESUBMITTED_LABEL "workflows.argoproj.io/resubmitted-from-workflow"

static const char *phase_of(const cJSON *wf) {
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(wf, "status");
  const char *p = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(st, "phase"));
  return p ? p : "";
}

static int completed(const cJSON *wf) {
  const char *p = phase_of(wf);
  return !strcmp(p, "Succeeded") || !strcmp(p, "Failed") || !strcmp(p, "Error");
}

static cJSON *obj_at(cJSON *parent, const char *key) {
  cJSON *o = cJSON_GetObjectItemCaseSensitive(parent, key);
  if (cJSON_IsObject(o)) return o;
  cJSON_DeleteItemFromObjectCaseSensitive(parent, key);
  return cJSON_AddObjectToObject(parent, key);
}

/* Stores the changed copy (the controller acts on it) and answers what is
 * stored then. */
static void store_and_answer(argo_env *e, kb_httpd_req *req, const char *ns, const char *name,
                             cJSON *wf) {
  kb_k8s_error err = {0};
  cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(wf, "metadata"),
                                          "resourceVersion");
  int rc = kb_k8s_update(e->st, e->wfs, ns, name, wf, 0, NULL, &err);
  cJSON_Delete(wf);
  if (rc < 0) {
    kb_argo_send_k8s_error(req, &err);
    return;
  }
  const cJSON *now = kb_k8s_peek(e->st, e->wfs, ns, name);
  kb_argo_send_json(req, 200, now ? cJSON_Duplicate(now, 1) : cJSON_CreateObject());
}

static void set_spec(cJSON *wf, const char *key, cJSON *value) {
  cJSON *spec = obj_at(wf, "spec");
  cJSON_DeleteItemFromObjectCaseSensitive(spec, key);
  if (value) cJSON_AddItemToObject(spec, key, value);
}

/* argo's nodeFieldSelector: "k=v", "k==v" or "k!=v" terms, comma-joined,
 * over a node's displayName, templateName, phase, name and id. */
static int node_matches(const cJSON *node, const char *sel) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", sel);
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    char *op = strpbrk(t, "!=");
    if (!op || op == t) return 0;
    int neg = *op == '!';
    char *val = op + (neg || op[1] == '=' ? 2 : 1);
    *op = 0;
    const char *have = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(node, t));
    int eq = have && !strcmp(have, val);
    if (eq == neg) return 0;
  }
  return 1;
}

/* Sets the phase (and message) of the waiting suspend nodes the selector
 * picks (every one when sel is NULL), as argo's updateSuspendedNode; the
 * controller hands them to the model. Returns how many. */
static int set_suspend_nodes(cJSON *wf, const char *sel, const char *phase, const char *msg) {
  int n = 0;
  cJSON *node;
  cJSON_ArrayForEach(node, cJSON_GetObjectItemCaseSensitive(obj_at(wf, "status"), "nodes")) {
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(node, "type"));
    const char *ph = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(node, "phase"));
    if (!type || strcmp(type, "Suspend") || !ph || strcmp(ph, "Running")) continue;
    if (sel && !node_matches(node, sel)) continue;
    n++;
    if (phase && *phase) {
      cJSON_DeleteItemFromObjectCaseSensitive(node, "phase");
      cJSON_AddStringToObject(node, "phase", phase);
    }
    if (msg && *msg) {
      cJSON_DeleteItemFromObjectCaseSensitive(node, "message");
      cJSON_AddStringToObject(node, "message", msg);
    }
  }
  return n;
}

static void no_match(kb_httpd_req *req, cJSON *wf, const char *sel) {
  char msg[600];
  snprintf(msg, sizeof msg, "currently, set only targets suspend nodes: no suspend nodes "
           "matching nodeFieldSelector: %.300s", sel);
  cJSON_Delete(wf);
  kb_argo_send_error(req, 500, msg);
}

static void do_suspend(argo_env *e, kb_httpd_req *req, const char *ns, const char *name,
                       cJSON *wf, int on) {
  if (on && completed(wf)) {
    cJSON_Delete(wf);
    kb_argo_send_error(req, 400, "cannot suspend completed workflows");
    return;
  }
  set_spec(wf, "suspend", on ? cJSON_CreateTrue() : NULL);
  if (!on) set_suspend_nodes(wf, NULL, "Succeeded", NULL); /* resume ends suspend nodes too */
  store_and_answer(e, req, ns, name, wf);
}

/* resume / stop with a nodeFieldSelector: only those suspend nodes. */
static void do_node_action(argo_env *e, kb_httpd_req *req, const char *ns, const char *name,
                           cJSON *wf, const char *sel, const char *phase, const char *msg) {
  if (!set_suspend_nodes(wf, sel, phase, msg)) {
    no_match(req, wf, sel);
    return;
  }
  store_and_answer(e, req, ns, name, wf);
}

static void do_shutdown(argo_env *e, kb_httpd_req *req, const char *ns, const char *name,
                        cJSON *wf, const char *strategy) {
  if (completed(wf)) {
    char msg[600];
    snprintf(msg, sizeof msg,
             "cannot shutdown a completed workflow: workflow: \"%.200s\", namespace: \"%.200s\"",
             name, ns);
    cJSON_Delete(wf);
    kb_argo_send_error(req, 500, msg);
    return;
  }
  set_spec(wf, "shutdown", cJSON_CreateString(strategy));
  store_and_answer(e, req, ns, name, wf);
}

/* Whether the pod (its node-name annotation) runs the workflow's exit
 * handler, "<wf>.onExit..." */
static int exit_handler_pod(const cJSON *pod, const char *wf) {
  const cJSON *ann = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(pod, "metadata"),
                                                      "annotations");
  const char *node = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ann, "workflows.argoproj.io/node-name"));
  size_t n = strlen(wf);
  return node && !strncmp(node, wf, n) && !strncmp(node + n, ".onExit", 7);
}

/* Deletes the pods of the nodes a retry resets: the failed ones and the
 * exit handler's. */
static void delete_retried_pods(argo_env *e, const char *ns, const char *name) {
  char labels[400];
  snprintf(labels, sizeof labels, "workflows.argoproj.io/workflow=%s", name);
  kb_k8s_list_opts lo = {.ns = ns, .label_selector = labels};
  cJSON *pods = NULL;
  if (kb_k8s_list(e->st, e->pods, &lo, &pods, NULL) < 0) return;
  const cJSON *p;
  cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(pods, "items")) {
    const char *phase = phase_of(p);
    if (!strcmp(phase, "Succeeded") && !exit_handler_pod(p, name)) continue;
    kb_k8s_delete(e->st, e->pods, ns, kb_k8s_meta_str(p, "name"), NULL, NULL, NULL);
  }
  cJSON_Delete(pods);
}

static void do_retry(argo_env *e, kb_httpd_req *req, const char *ns, const char *name, cJSON *wf,
                     const cJSON *body) {
  const char *phase = phase_of(wf);
  char msg[300];
  if (!strcmp(phase, "Succeeded") || (strcmp(phase, "Failed") && strcmp(phase, "Error"))) {
    if (!strcmp(phase, "Succeeded"))
      snprintf(msg, sizeof msg, "To retry a succeeded workflow, set the options restartSuccessful "
               "and nodeFieldSelector");
    else
      snprintf(msg, sizeof msg, "Cannot retry a workflow in phase %s", *phase ? phase : "Pending");
    cJSON_Delete(wf);
    kb_argo_send_error(req, 400, msg);
    return;
  }
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "restartSuccessful"))) {
    cJSON_Delete(wf);
    kb_argo_send_error(req, 501, "retry with restartSuccessful is not supported by the simulator");
    return;
  }
  delete_retried_pods(e, ns, name);
  /* what argo-server writes: Running again, not finished, no shutdown;
   * the controller sees it and re-runs the reset nodes */
  set_spec(wf, "shutdown", NULL);
  cJSON *st = obj_at(wf, "status");
  cJSON_DeleteItemFromObjectCaseSensitive(st, "phase");
  cJSON_AddStringToObject(st, "phase", "Running");
  cJSON_DeleteItemFromObjectCaseSensitive(st, "finishedAt");
  cJSON_AddNullToObject(st, "finishedAt");
  cJSON_DeleteItemFromObjectCaseSensitive(st, "message");
  cJSON *md = obj_at(wf, "metadata");
  kb_k8s_set_meta(md, "labels", COMPLETED_LABEL, "false");
  kb_k8s_set_meta(md, "labels", PHASE_LABEL, "Running");
  store_and_answer(e, req, ns, name, wf);
}

/* A new Workflow from this one's spec (argo's FormulateResubmitWorkflow):
 * generateName "<name>-" (or the original's generateName), the user's
 * labels and annotations kept, the resubmitted-from label added. */
void kb_argo_resubmit(argo_env *e, kb_httpd_req *req, const char *ns, const char *name, cJSON *wf) {
  const cJSON *md = cJSON_GetObjectItemCaseSensitive(wf, "metadata");
  cJSON *nw = cJSON_CreateObject();
  cJSON_AddStringToObject(nw, "apiVersion", "argoproj.io/v1alpha1");
  cJSON_AddStringToObject(nw, "kind", "Workflow");
  cJSON *nmd = cJSON_AddObjectToObject(nw, "metadata");
  const char *gen = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(md, "generateName"));
  char prefix[300];
  snprintf(prefix, sizeof prefix, "%s-", name);
  cJSON_AddStringToObject(nmd, "generateName", gen && *gen ? gen : prefix);
  cJSON *labels = cJSON_AddObjectToObject(nmd, "labels");
  const cJSON *l;
  cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(md, "labels")) {
    if (!strcmp(l->string, COMPLETED_LABEL) || !strcmp(l->string, PHASE_LABEL) ||
        !strncmp(l->string, "workflows.argoproj.io/creator", 29) ||
        !strcmp(l->string, "workflows.argoproj.io/workflow-archiving-status"))
      continue;
    cJSON_AddItemToObject(labels, l->string, cJSON_Duplicate(l, 1));
  }
  cJSON_DeleteItemFromObjectCaseSensitive(labels, RESUBMITTED_LABEL);
  cJSON_AddStringToObject(labels, RESUBMITTED_LABEL, name);
  const cJSON *ann = cJSON_GetObjectItemCaseSensitive(md, "annotations");
  if (cJSON_IsObject(ann) && cJSON_GetArraySize(ann))
    cJSON_AddItemToObject(nmd, "annotations", cJSON_Duplicate(ann, 1));
  cJSON *spec = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(wf, "spec"), 1);
  if (!spec) spec = cJSON_CreateObject();
  cJSON_DeleteItemFromObjectCaseSensitive(spec, "shutdown");
  cJSON_AddItemToObject(nw, "spec", spec);
  cJSON_Delete(wf);
  kb_argo_create_workflow(e, req, ns, nw, 0);
  cJSON_Delete(nw);
}

/* set: argo changes only waiting suspend nodes, picked by a node field
 * selector: their phase (Succeeded, Failed, Error) and message. Output
 * parameters are not modelled (the model keeps no outputs). */
static void do_set(argo_env *e, kb_httpd_req *req, const char *ns, const char *name, cJSON *wf,
                   const cJSON *body) {
  const char *phase = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(body, "phase"));
  const char *sel = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(body, "nodeFieldSelector"));
  const char *msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(body, "message"));
  const char *outs = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(body, "outputParameters"));
  char text[600];
  if (phase && *phase && strcmp(phase, "Succeeded") && strcmp(phase, "Failed") && strcmp(phase, "Error")) {
    snprintf(text, sizeof text, "%.200s is an invalid phase to set to", phase);
    cJSON_Delete(wf);
    kb_argo_send_error(req, 400, text);
  } else if (outs && *outs) {
    cJSON_Delete(wf);
    kb_argo_send_error(req, 501, "outputParameters are not modelled by the simulator");
  } else if (!sel || !*sel) {
    cJSON_Delete(wf);
    kb_argo_send_error(req, 500, "'set' currently only targets suspend nodes, use a node field "
                    "selector to target them");
  } else {
    do_node_action(e, req, ns, name, wf, sel, phase, msg);
  }
}

void kb_argo_workflow_action(argo_env *e, kb_httpd_req *req, const char *ns, const char *name,
                          const char *action) {
  static const char *known[] = {"suspend", "resume", "terminate", "stop", "retry", "resubmit", "set"};
  int k = -1;
  for (int i = 0; i < (int)(sizeof known / sizeof *known); i++)
    if (!strcmp(action, known[i])) k = i;
  if (k < 0) {
    kb_argo_send_error(req, 404, "Not Found");
    return;
  }
  size_t len = 0;
  const char *text = kb_httpd_req_body(req, &len);
  cJSON *body = len ? cJSON_ParseWithLength(text, len) : cJSON_CreateObject();
  if (!cJSON_IsObject(body)) {
    cJSON_Delete(body);
    kb_argo_send_error(req, 400, "the body must be a JSON object");
    return;
  }
  const cJSON *cur = kb_k8s_peek(e->st, e->wfs, ns, name);
  if (!cur) {
    char msg[400];
    snprintf(msg, sizeof msg, "workflows.argoproj.io \"%.200s\" not found", name);
    kb_argo_send_error(req, 404, msg);
    cJSON_Delete(body);
    return;
  }
  if (k != 5 && kb_k8s_annotation(cur, KB_SIM_MIRRORED)) { /* resubmit only copies it */
    kb_argo_send_error(req, 501, "actions on the Workflow of a KFP run are not supported by the "
                    "simulator: use the KFP API (terminate, retry)");
    cJSON_Delete(body);
    return;
  }
  cJSON *wf = cJSON_Duplicate(cur, 1);
  const char *sel = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(body, "nodeFieldSelector"));
  const char *msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(body, "message"));
  int by_node = sel && *sel && (k == 1 || k == 3);
  switch (by_node ? -1 : k) {
  case -1: do_node_action(e, req, ns, name, wf, sel, k == 1 ? "Succeeded" : "Failed", msg); break;
  case 0: do_suspend(e, req, ns, name, wf, 1); break;
  case 1: do_suspend(e, req, ns, name, wf, 0); break;
  case 2: do_shutdown(e, req, ns, name, wf, "Terminate"); break;
  case 3: do_shutdown(e, req, ns, name, wf, "Stop"); break;
  case 4: do_retry(e, req, ns, name, wf, body); break;
  case 5:
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "memoized"))) {
      cJSON_Delete(wf);
      kb_argo_send_error(req, 501, "resubmit with memoized is not supported by the simulator");
    } else {
      kb_argo_resubmit(e, req, ns, name, wf);
    }
    break;
  default: do_set(e, req, ns, name, wf, body); break;
  }
  cJSON_Delete(body);
}
