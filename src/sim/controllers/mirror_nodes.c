/* Nodes both ways. The mirror creates each model node's Node object (its
 * labels, taints, capacity) and then keeps writing what the kubelet and the
 * node lifecycle controller own: status, and the taints
 * node.kubernetes.io/unreachable (NotReady) and
 * node.kubernetes.io/unschedulable (cordoned). Everything else in the
 * object is the clients': labels, annotations, taints, spec.unschedulable
 * persist, and a hook hands them to the model (kb_sim_node_set_spec), whose
 * scheduler honours them from then on, and a NoExecute taint evicts the
 * pods there that do not tolerate it. Nodes a client creates are stored
 * but not modelled. */
#include <stdlib.h>
#include <string.h>

#include "k8s_internal.h"
#include "kb/log.h"
#include "sim_glue.h"

#define T_UNREACHABLE "node.kubernetes.io/unreachable"
#define T_UNSCHEDULABLE "node.kubernetes.io/unschedulable"

static int model_taint(const char *key) {
  return key && (!strcmp(key, T_UNREACHABLE) || !strcmp(key, T_UNSCHEDULABLE));
}

static void add_taint(sim_glue *g, cJSON *taints, const char *key, const char *effect) {
  cJSON *t = cJSON_CreateObject();
  char ts[32];
  kb_glue_time(g, kb_sim_now(kb_glue_sim(g)), ts);
  cJSON_AddStringToObject(t, "key", key);
  cJSON_AddStringToObject(t, "effect", effect);
  cJSON_AddStringToObject(t, "timeAdded", ts);
  cJSON_AddItemToArray(taints, t);
}

static int has_taint(const cJSON *taints, const char *key, const char *effect) {
  const cJSON *t;
  cJSON_ArrayForEach(t, taints) {
    const char *k = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "key"));
    const char *e = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "effect"));
    if (k && e && !strcmp(k, key) && !strcmp(e, effect)) return 1;
  }
  return 0;
}

/* spec.taints with the model's own taints as the node is now: kept where
 * present (their timeAdded stays), added or removed otherwise. */
static void own_taints(sim_glue *g, cJSON *spec, int ready, int unschedulable) {
  cJSON *taints = cJSON_GetObjectItemCaseSensitive(spec, "taints");
  if (!cJSON_IsArray(taints)) {
    cJSON_DeleteItemFromObjectCaseSensitive(spec, "taints");
    taints = cJSON_AddArrayToObject(spec, "taints");
  }
  for (int i = cJSON_GetArraySize(taints) - 1; i >= 0; i--) {
    const cJSON *t = cJSON_GetArrayItem(taints, i);
    const char *k = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "key"));
    if (!model_taint(k)) continue;
    int keep = !strcmp(k, T_UNREACHABLE) ? !ready : unschedulable;
    if (!keep) cJSON_DeleteItemFromArray(taints, i);
  }
  if (!ready && !has_taint(taints, T_UNREACHABLE, "NoSchedule")) add_taint(g, taints, T_UNREACHABLE, "NoSchedule");
  if (!ready && !has_taint(taints, T_UNREACHABLE, "NoExecute")) add_taint(g, taints, T_UNREACHABLE, "NoExecute");
  if (unschedulable && !has_taint(taints, T_UNSCHEDULABLE, "NoSchedule"))
    add_taint(g, taints, T_UNSCHEDULABLE, "NoSchedule");
  if (!cJSON_GetArraySize(taints)) cJSON_DeleteItemFromObjectCaseSensitive(spec, "taints");
}

void kb_glue_mirror_node(sim_glue *g, int id) {
  kb_sim_node_info ni;
  if (kb_sim_node_get(kb_glue_sim(g), id, &ni) < 0) return;
  kb_k8s_store *st = kb_glue_store(g);
  const kb_k8s_res *res = kb_glue_res(g, "", "nodes");
  cJSON *fresh = kb_glue_node_object(g, &ni);
  if (!fresh) return;
  const cJSON *cur = kb_k8s_peek(st, res, NULL, ni.name);
  kb_glue_write_begin(g);
  if (!cur) {
    cJSON *spec = cJSON_GetObjectItemCaseSensitive(fresh, "spec");
    if (ni.unschedulable) cJSON_AddBoolToObject(spec, "unschedulable", 1);
    own_taints(g, spec, ni.ready, ni.unschedulable);
    kb_k8s_create(st, res, NULL, fresh, 0, NULL, NULL);
  } else {
    cJSON *o = cJSON_Duplicate(cur, 1);
    cJSON *spec = cJSON_GetObjectItemCaseSensitive(o, "spec");
    if (!cJSON_IsObject(spec)) {
      cJSON_DeleteItemFromObjectCaseSensitive(o, "spec");
      spec = cJSON_AddObjectToObject(o, "spec");
    }
    own_taints(g, spec, ni.ready, ni.unschedulable);
    if (!cJSON_Compare(spec, cJSON_GetObjectItemCaseSensitive(cur, "spec"), 1))
      kb_k8s_update(st, res, NULL, ni.name, o, 0, NULL, NULL);
    cJSON_Delete(o);
    kb_k8s_update(st, res, NULL, ni.name, fresh, KB_K8S_STATUS, NULL, NULL);
  }
  kb_glue_write_end(g);
  cJSON_Delete(fresh);
}

/* ---- clients' writes into the model ---- */

typedef struct ctl_nodes {
  glue_ctl base;
  sim_glue *g;
  kb_k8s_watch *w;
} ctl_nodes;

static const char *jstr(const cJSON *o, const char *k) {
  return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

/* A toleration matches a taint as the scheduler matches them (scheduler.c);
 * tolerationSeconds is not counted down: such a pod stays. */
static int tolerated(const cJSON *tols, const cJSON *taint) {
  const char *key = jstr(taint, "key"), *value = jstr(taint, "value"), *effect = jstr(taint, "effect");
  const cJSON *t;
  cJSON_ArrayForEach(t, tols) {
    const char *k = jstr(t, "key"), *op = jstr(t, "operator"), *v = jstr(t, "value"), *e = jstr(t, "effect");
    int exists = op ? !strcmp(op, "Exists") : !v;
    if (e && *e && strcmp(e, effect)) continue;
    if ((!k || !*k) && exists) return 1;
    if (!k || strcmp(k, key)) continue;
    if (exists || !strcmp(v ? v : "", value ? value : "")) return 1;
  }
  return 0;
}

/* The taint eviction controller: a NoExecute taint a client put on the
 * node deletes the pods there that do not tolerate it (their controllers,
 * if any, make new ones elsewhere). */
static void evict_untolerating(ctl_nodes *c, const char *node, const cJSON *taints) {
  int any = 0;
  const cJSON *t;
  cJSON_ArrayForEach(t, taints) {
    const char *e = jstr(t, "effect");
    any |= e && !strcmp(e, "NoExecute") && jstr(t, "key") && !model_taint(jstr(t, "key"));
  }
  if (!any) return;
  kb_k8s_store *st = kb_glue_store(c->g);
  const kb_k8s_res *pods = kb_glue_res(c->g, "", "pods");
  char fs[320];
  snprintf(fs, sizeof fs, "spec.nodeName=%s", node);
  kb_k8s_list_opts lo = {.field_selector = fs};
  cJSON *list = NULL;
  if (kb_k8s_list(st, pods, &lo, &list, NULL)) return;
  const cJSON *pod;
  cJSON_ArrayForEach(pod, cJSON_GetObjectItemCaseSensitive(list, "items")) {
    const char *phase = cJSON_GetStringValue(kb_k8s_path(pod, "status.phase"));
    if (phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed"))) continue;
    const cJSON *tols = kb_k8s_path(pod, "spec.tolerations");
    int evict = 0;
    cJSON_ArrayForEach(t, taints) {
      const char *e = jstr(t, "effect");
      if (e && !strcmp(e, "NoExecute") && jstr(t, "key") && !model_taint(jstr(t, "key")) && !tolerated(tols, t))
        evict = 1;
    }
    if (!evict) continue;
    const char *ns = kb_k8s_meta_str(pod, "namespace"), *name = kb_k8s_meta_str(pod, "name");
    kb_glue_event(c->g, pod, "Normal", "TaintManagerEviction", "taint-eviction-controller",
               "Marking for deletion Pod %s/%s", ns, name);
    kb_k8s_delete(st, pods, ns, name, NULL, NULL, NULL);
  }
  cJSON_Delete(list);
}

static void node_written(ctl_nodes *c, const cJSON *obj) {
  kb_sim *sim = kb_glue_sim(c->g);
  const char *name = kb_k8s_meta_str(obj, "name");
  int id = name ? kb_sim_node_find(sim, name) : -1;
  if (id < 0) return;
  const cJSON *labels = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "labels");
  const cJSON *spec = cJSON_GetObjectItemCaseSensitive(obj, "spec");
  const cJSON *taints = cJSON_GetObjectItemCaseSensitive(spec, "taints");
  size_t nl = (size_t)cJSON_GetArraySize(labels), nt = (size_t)cJSON_GetArraySize(taints);
  kb_sim_kv *kv = calloc(nl + 1, sizeof *kv);
  kb_sim_taint *tv = calloc(nt + 1, sizeof *tv);
  if (!kv || !tv) goto out;
  size_t n_kv = 0, n_tv = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, labels) {
    if (cJSON_IsString(e) && e->string) kv[n_kv++] = (kb_sim_kv){e->string, e->valuestring};
  }
  cJSON_ArrayForEach(e, taints) {
    char *k = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "key"));
    char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "value"));
    char *eff = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "effect"));
    /* The model's own taints follow its state, not this write. */
    if (k && eff && !model_taint(k)) tv[n_tv++] = (kb_sim_taint){k, v ? v : "", eff};
  }
  kb_sim_error err = {0};
  if (kb_sim_node_set_spec(sim, id, cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(spec, "unschedulable")),
                           kv, n_kv, tv, n_tv, &err) < 0)
    kb_log(KB_LOG_WARN, "simulator: node %s: %s", name, err.message);
  evict_untolerating(c, name, taints);
out:
  free(kv);
  free(tv);
}

static void on_node(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  ctl_nodes *c = ud;
  if (kb_glue_writing(c->g)) return;
  if (type == KB_K8S_ADDED || type == KB_K8S_MODIFIED) node_written(c, obj);
}

static void nodes_free(glue_ctl *base) {
  ctl_nodes *c = (ctl_nodes *)base;
  kb_k8s_watch_cancel(c->w);
  free(c);
}

glue_ctl *kb_glue_nodes_start(sim_glue *g) {
  ctl_nodes *c = calloc(1, sizeof *c);
  const kb_k8s_res *res = kb_glue_res(g, "", "nodes");
  if (!c || !res) {
    free(c);
    return NULL;
  }
  c->base.free = nodes_free;
  c->g = g;
  c->w = kb_k8s_store_on(kb_glue_store(g), res, on_node, c);
  if (!c->w) {
    free(c);
    return NULL;
  }
  return &c->base;
}
