/* PodDisruptionBudget status and pod eviction (see k8s_pdb.h).
 *
 * Status, as pkg/controller/disruption computes it: expectedPods is the
 * number of pods the selector matches when minAvailable is a number; with
 * maxUnavailable or a percentage it is the controllers' scale, which here
 * is the number of matching pods, provided every one has a controller
 * (else, as there, the budget fails safe: 0 disruptions, reason
 * SyncFailed). desiredHealthy = minAvailable (rounded up from a
 * percentage) or expectedPods - maxUnavailable; disruptionsAllowed =
 * currentHealthy - desiredHealthy, at least 0.
 *
 * Eviction, as the apiserver's eviction handler decides: a pod that is
 * Pending, Succeeded, Failed or being deleted goes without a budget check;
 * several budgets for one pod are a 500; an unready pod goes if its budget
 * is healthy (unhealthyPodEvictionPolicy IfHealthyBudget) or the policy is
 * AlwaysAllow; a ready one only while disruptionsAllowed > 0, which the
 * eviction then decrements (disruptedPods records it); otherwise 429
 * "Cannot evict pod as it would violate the pod's disruption budget." */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_internal.h"
#include "k8s_pdb.h"

static const cJSON *get(const cJSON *o, const char *k) {
  return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

static const char *str(const cJSON *o, const char *k) { return cJSON_GetStringValue(get(o, k)); }

static int value_in(const cJSON *values, const char *v) {
  const cJSON *x;
  cJSON_ArrayForEach(x, values) if (cJSON_IsString(x) && !strcmp(x->valuestring, v)) return 1;
  return 0;
}

int kb_k8s_label_selector_match(const cJSON *sel, const cJSON *labels) {
  if (!cJSON_IsObject(sel)) return 0;
  const cJSON *m;
  cJSON_ArrayForEach(m, get(sel, "matchLabels")) {
    const char *v = str(labels, m->string);
    if (!cJSON_IsString(m) || !v || strcmp(v, m->valuestring)) return 0;
  }
  cJSON_ArrayForEach(m, get(sel, "matchExpressions")) {
    const char *key = str(m, "key"), *op = str(m, "operator");
    if (!key || !op) return 0;
    const char *v = str(labels, key);
    const cJSON *vals = get(m, "values");
    int ok = !strcmp(op, "In")             ? v && value_in(vals, v)
             : !strcmp(op, "NotIn")        ? !v || !value_in(vals, v)
             : !strcmp(op, "Exists")       ? v != NULL
             : !strcmp(op, "DoesNotExist") ? v == NULL
                                           : 0;
    if (!ok) return 0;
  }
  return 1;
}

static k8s_bucket *bucket(const kb_k8s_store *st, const kb_k8s_res *res) {
  if (!res || res->index < 0 || (size_t)res->index >= st->n_buckets) return NULL;
  k8s_bucket *b = st->buckets[res->index];
  return &b->res == res ? b : NULL;
}

static int pod_ready(const cJSON *pod) {
  const cJSON *c;
  cJSON_ArrayForEach(c, kb_k8s_path(pod, "status.conditions")) {
    const char *t = str(c, "type"), *s = str(c, "status");
    if (t && s && !strcmp(t, "Ready")) return !strcmp(s, "True");
  }
  return 0;
}

static int has_controller(const cJSON *pod) {
  const cJSON *r;
  cJSON_ArrayForEach(r, kb_k8s_path(pod, "metadata.ownerReferences")) if (cJSON_IsTrue(get(r, "controller"))) return 1;
  return 0;
}

/* minAvailable / maxUnavailable: a number, or "50%" of `of` rounded up. */
static int int_or_percent(const cJSON *v, int of, int *out) {
  if (cJSON_IsNumber(v)) {
    *out = v->valueint;
    return 0;
  }
  const char *s = cJSON_GetStringValue(v);
  char *end;
  long p = s ? strtol(s, &end, 10) : 0;
  if (!s || end == s) return -1;
  if (*end == '%' && !end[1]) {
    *out = (int)ceil((double)p * of / 100.0);
    return 0;
  }
  if (*end) return -1;
  *out = (int)p;
  return 0;
}

typedef struct pdb_counts {
  int expected, healthy, desired, allowed;
  const char *fail; /* SyncFailed message, or NULL */
  char fail_msg[300];
} pdb_counts;

static void count(kb_k8s_store *st, const cJSON *pdb, pdb_counts *pc) {
  memset(pc, 0, sizeof *pc);
  const char *ns = kb_k8s_meta_str(pdb, "namespace");
  const cJSON *spec = get(pdb, "spec"), *sel = get(spec, "selector");
  const cJSON *min = get(spec, "minAvailable"), *max = get(spec, "maxUnavailable");
  k8s_bucket *b = bucket(st, kb_k8s_store_lookup(st, "", "v1", "pods"));
  int n = 0, uncontrolled = 0;
  for (size_t i = 0; b && i < b->n; i++) {
    const cJSON *pod = kb_k8s_entry_tree(st, &b->v[i]);
    if (ns && strcmp(b->v[i].ns, ns)) continue;
    if (!kb_k8s_label_selector_match(sel, kb_k8s_path(pod, "metadata.labels"))) continue;
    n++;
    if (!has_controller(pod) && !uncontrolled++)
      snprintf(pc->fail_msg, sizeof pc->fail_msg, "found no controllers for pod \"%s\"", b->v[i].name);
    if (!kb_k8s_meta_str(pod, "deletionTimestamp") && pod_ready(pod)) pc->healthy++;
  }
  int by_scale = max || (min && !cJSON_IsNumber(min));
  if (by_scale && uncontrolled) { /* fail safe: nothing counted, nothing allowed */
    pc->fail = pc->fail_msg;
    pc->healthy = 0;
    return;
  }
  pc->expected = n;
  int v = 0;
  if (max) {
    if (int_or_percent(max, n, &v)) v = 0;
    pc->desired = n - v > 0 ? n - v : 0;
  } else if (min) {
    if (int_or_percent(min, n, &v)) v = 0;
    pc->desired = v;
  }
  pc->allowed = pc->healthy - pc->desired > 0 ? pc->healthy - pc->desired : 0;
}

cJSON *kb_k8s_pdb_status(kb_k8s_store *st, const cJSON *pdb) {
  pdb_counts pc;
  count(st, pdb, &pc);
  cJSON *s = cJSON_CreateObject();
  if (!s) return NULL;
  const cJSON *gen = kb_k8s_path(pdb, "metadata.generation");
  cJSON_AddNumberToObject(s, "observedGeneration", cJSON_IsNumber(gen) ? gen->valuedouble : 1);
  cJSON_AddObjectToObject(s, "disruptedPods");
  cJSON_AddNumberToObject(s, "disruptionsAllowed", pc.allowed);
  cJSON_AddNumberToObject(s, "currentHealthy", pc.healthy);
  cJSON_AddNumberToObject(s, "desiredHealthy", pc.desired);
  cJSON_AddNumberToObject(s, "expectedPods", pc.expected);
  const char *status = pc.allowed > 0 ? "True" : "False";
  const char *reason = pc.fail ? "SyncFailed" : pc.allowed > 0 ? "SufficientPods" : "InsufficientPods";
  const cJSON *old = cJSON_GetArrayItem(kb_k8s_path(pdb, "status.conditions"), 0);
  char ts[32];
  kb_k8s_format_time(kb_k8s_store_now(st), ts);
  const char *since = old && str(old, "status") && !strcmp(str(old, "status"), status) &&
                              str(old, "reason") && !strcmp(str(old, "reason"), reason)
                          ? str(old, "lastTransitionTime") : NULL;
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "type", "DisruptionAllowed");
  cJSON_AddStringToObject(c, "status", status);
  cJSON_AddNumberToObject(c, "observedGeneration", cJSON_IsNumber(gen) ? gen->valuedouble : 1);
  cJSON_AddStringToObject(c, "lastTransitionTime", since ? since : ts);
  cJSON_AddStringToObject(c, "reason", reason);
  cJSON_AddStringToObject(c, "message", pc.fail ? pc.fail : "");
  cJSON_AddItemToArray(cJSON_AddArrayToObject(s, "conditions"), c);
  return s;
}

/* ---- eviction ---- */

static cJSON *status_obj(int code, const char *status, const char *reason, const char *msg) {
  cJSON *s = cJSON_CreateObject();
  cJSON_AddStringToObject(s, "kind", "Status");
  cJSON_AddStringToObject(s, "apiVersion", "v1");
  cJSON_AddObjectToObject(s, "metadata");
  cJSON_AddStringToObject(s, "status", status);
  if (msg) cJSON_AddStringToObject(s, "message", msg);
  if (reason) cJSON_AddStringToObject(s, "reason", reason);
  cJSON_AddNumberToObject(s, "code", code);
  return s;
}

static int refuse(cJSON **out, int code, const char *reason, const char *msg, const char *cause) {
  *out = status_obj(code, "Failure", reason, msg);
  if (cause && *out) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "reason", "DisruptionBudget");
    cJSON_AddStringToObject(c, "message", cause);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(cJSON_AddObjectToObject(*out, "details"), "causes"), c);
  }
  return -code;
}

/* Takes one disruption from the budget before the pod goes. */
static int take_disruption(kb_k8s_store *st, const kb_k8s_res *res, const cJSON *pdb, cJSON *status,
                           const char *pod, unsigned flags, kb_k8s_error *err) {
  cJSON *allowed = cJSON_GetObjectItemCaseSensitive(status, "disruptionsAllowed");
  cJSON_SetNumberValue(allowed, allowed->valuedouble - 1);
  char ts[32];
  kb_k8s_format_time(kb_k8s_store_now(st), ts);
  cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(status, "disruptedPods"), pod, ts);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "metadata"), "name", kb_k8s_meta_str(pdb, "name"));
  cJSON_AddItemReferenceToObject(o, "status", status);
  int rc = kb_k8s_update(st, res, kb_k8s_meta_str(pdb, "namespace"), kb_k8s_meta_str(pdb, "name"), o,
                         KB_K8S_STATUS | (flags & KB_K8S_DRY_RUN), NULL, err);
  cJSON_Delete(o);
  return rc;
}

int kb_k8s_pod_evict(kb_k8s_store *st, const char *ns, const char *name, const cJSON *body,
                  unsigned flags, cJSON **out, kb_k8s_error *err) {
  *out = NULL;
  const kb_k8s_res *pods = kb_k8s_store_lookup(st, "", "v1", "pods");
  const kb_k8s_res *pdbs = kb_k8s_store_lookup(st, "policy", "v1", "poddisruptionbudgets");
  if (!cJSON_IsObject(body)) return kb_k8s_error_set(err, 400, "BadRequest", "the body must be an Eviction object");
  const char *ename = kb_k8s_meta_str(body, "name");
  if (ename && strcmp(ename, name))
    return kb_k8s_error_set(err, 400, "BadRequest", "name in URL does not match name in Eviction object");
  const cJSON *pod = kb_k8s_peek(st, pods, ns, name);
  if (!pod) return kb_k8s_error_set(err, 404, "NotFound", "pods \"%s\" not found", name);
  const cJSON *dopts = get(body, "deleteOptions"), *dr;
  cJSON_ArrayForEach(dr, get(dopts, "dryRun")) if (cJSON_IsString(dr) && !strcmp(dr->valuestring, "All")) flags |= KB_K8S_DRY_RUN;
  const cJSON *pre = get(dopts, "preconditions");
  kb_k8s_delete_opts del = {KB_K8S_PROPAGATE_DEFAULT, str(pre, "uid"), str(pre, "resourceVersion"),
                            flags & KB_K8S_DRY_RUN};
  const char *phase = cJSON_GetStringValue(kb_k8s_path(pod, "status.phase"));
  int ignore_pdb = kb_k8s_meta_str(pod, "deletionTimestamp") ||
                   (phase && (!strcmp(phase, "Pending") || !strcmp(phase, "Succeeded") || !strcmp(phase, "Failed")));
  const cJSON *budget = NULL;
  k8s_bucket *b = bucket(st, pdbs);
  for (size_t i = 0; !ignore_pdb && b && i < b->n; i++) {
    if (strcmp(b->v[i].ns, ns) ||
        !kb_k8s_label_selector_match(kb_k8s_path(kb_k8s_entry_tree(st, &b->v[i]), "spec.selector"), kb_k8s_path(pod, "metadata.labels")))
      continue;
    if (budget)
      return refuse(out, 500, "InternalError",
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                    NULL);
    budget = kb_k8s_entry_tree(st, &b->v[i]);
  }
  if (budget) {
    cJSON *status = kb_k8s_pdb_status(st, budget);
    if (!status) return kb_k8s_error_set(err, 500, "InternalError", "out of memory");
    int healthy = (int)cJSON_GetObjectItemCaseSensitive(status, "currentHealthy")->valuedouble;
    int desired = (int)cJSON_GetObjectItemCaseSensitive(status, "desiredHealthy")->valuedouble;
    int allowed = (int)cJSON_GetObjectItemCaseSensitive(status, "disruptionsAllowed")->valuedouble;
    const char *policy = cJSON_GetStringValue(kb_k8s_path(budget, "spec.unhealthyPodEvictionPolicy"));
    int rc = 0;
    if (!pod_ready(pod) && ((policy && !strcmp(policy, "AlwaysAllow")) || healthy >= desired)) {
      rc = 0; /* an unready pod of a healthy budget costs it nothing */
    } else if (allowed <= 0) {
      char cause[400];
      snprintf(cause, sizeof cause, "The disruption budget %s needs %d healthy pods and has %d currently",
               kb_k8s_meta_str(budget, "name"), desired, healthy);
      cJSON_Delete(status);
      return refuse(out, 429, "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.", cause);
    } else {
      rc = take_disruption(st, pdbs, budget, status, name, flags, err);
    }
    cJSON_Delete(status);
    if (rc < 0) return rc;
  }
  int rc = kb_k8s_delete(st, pods, ns, name, &del, NULL, err);
  if (rc < 0) return rc;
  *out = status_obj(201, "Success", NULL, NULL);
  return 0;
}
