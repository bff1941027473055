/* The apps/v1 ReplicaSet controller: keeps spec.replicas active Pods that
 * match the selector and name the ReplicaSet as their controller, creating
 * them from the template as `<rs>-xxxxx` (generateName) through the store
 * and deleting the surplus in the 1.32 controller's order (unscheduled
 * before scheduled, Pending before Running, not Ready before Ready, newest
 * first). Status as the controller writes it: replicas,
 * fullyLabeledReplicas, readyReplicas (Ready condition True),
 * availableReplicas (Ready for minReadySeconds), observedGeneration.
 * Orphans matching the selector are not adopted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_ctl.h"
#include "k8s_internal.h"

#define MAX_BURST 500 /* pods created or deleted per reconcile, as the controller's burst */

/* Creations a ReplicaSet still waits to see (the controller's
 * expectations): the pod events its own creates cause do not each rescan
 * the namespace, only the last one does. */
typedef struct expect {
  char uid[64];
  long adds;
  struct expect *next;
} expect;

typedef struct ctl_rs {
  k8s_ctl base;
  kb_k8s_store *st;
  const kb_k8s_res *rs, *pods;
  kb_k8s_watch *w_rs, *w_pods;
  expect *expects;
} ctl_rs;

static expect *expect_of(ctl_rs *c, const char *uid, int make) {
  for (expect *x = c->expects; x; x = x->next)
    if (!strcmp(x->uid, uid)) return x;
  expect *x = make ? calloc(1, sizeof *x) : NULL;
  if (!x) return NULL;
  snprintf(x->uid, sizeof x->uid, "%s", uid);
  x->next = c->expects;
  c->expects = x;
  return x;
}

static void expect_drop(ctl_rs *c, const char *uid) {
  for (expect **p = &c->expects; *p; p = &(*p)->next)
    if (!strcmp((*p)->uid, uid)) {
      expect *x = *p;
      *p = x->next;
      free(x);
      return;
    }
}

static int create_pod(ctl_rs *c, const cJSON *rs) {
  const cJSON *tmpl = kb_k8s_path(rs, "spec.template");
  cJSON *pod = cJSON_CreateObject();
  const cJSON *tmd = cJSON_GetObjectItemCaseSensitive(tmpl, "metadata");
  cJSON *md = tmd ? cJSON_Duplicate(tmd, 1) : cJSON_CreateObject();
  cJSON_AddItemToObject(pod, "metadata", md);
  cJSON_DeleteItemFromObjectCaseSensitive(md, "name");
  cJSON_DeleteItemFromObjectCaseSensitive(md, "generateName");
  cJSON_DeleteItemFromObjectCaseSensitive(md, "ownerReferences");
  char gen[300];
  snprintf(gen, sizeof gen, "%.57s-", kb_k8s_meta_str(rs, "name"));
  cJSON_AddStringToObject(md, "generateName", gen);
  cJSON_AddItemToArray(cJSON_AddArrayToObject(md, "ownerReferences"),
                       kb_ctl_owner_ref("apps/v1", "ReplicaSet", kb_k8s_meta_str(rs, "name"),
                                     kb_k8s_meta_str(rs, "uid")));
  const cJSON *spec = cJSON_GetObjectItemCaseSensitive(tmpl, "spec");
  cJSON_AddItemToObject(pod, "spec", spec ? cJSON_Duplicate(spec, 1) : cJSON_CreateObject());
  kb_k8s_error e;
  int rc = kb_k8s_create(c->st, c->pods, kb_k8s_meta_str(rs, "namespace"), pod, 0, NULL, &e);
  cJSON_Delete(pod);
  return rc;
}

/* Deletion rank: lower goes first. */
static long rank(const cJSON *pod) {
  const char *phase = kb_k8s_path_str(pod, "status.phase");
  long r = 0;
  if (kb_k8s_path_str(pod, "spec.nodeName")) r += 4;
  if (phase && !strcmp(phase, "Running")) r += 2;
  else if (phase && strcmp(phase, "Pending")) r += 1; /* Unknown */
  if (kb_ctl_pod_ready(pod)) r += 8;
  return r;
}

typedef struct victim {
  const cJSON *pod;
  long rank;
  double created;
} victim;

static int victim_cmp(const void *a, const void *b) {
  const victim *x = a, *y = b;
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  return x->created > y->created ? -1 : x->created < y->created; /* newest first */
}

static void delete_surplus(ctl_rs *c, const char *ns, const cJSON **active, size_t n, size_t k) {
  victim *v = calloc(n, sizeof *v);
  if (!v) return;
  for (size_t i = 0; i < n; i++)
    v[i] = (victim){active[i], rank(active[i]),
                    kb_k8s_parse_time(kb_k8s_meta_str(active[i], "creationTimestamp"))};
  qsort(v, n, sizeof *v, victim_cmp);
  char (*names)[256] = calloc(k, sizeof *names);
  if (names) {
    /* names first: the pods' trees go away with the deletes */
    for (size_t i = 0; i < k; i++) snprintf(names[i], sizeof names[i], "%s", kb_k8s_meta_str(v[i].pod, "name"));
    for (size_t i = 0; i < k; i++) kb_k8s_delete(c->st, c->pods, ns, names[i], NULL, NULL, NULL);
  }
  free(names);
  free(v);
}

static void write_status(ctl_rs *c, const cJSON *rs, const cJSON **pods, size_t n) {
  double now = kb_k8s_store_now(c->st), min_ready = kb_k8s_path_num(rs, "spec.minReadySeconds", 0);
  int replicas = 0, ready = 0, available = 0;
  for (size_t i = 0; i < n; i++) {
    const cJSON *p = pods[i];
    if (!kb_ctl_owned_by(p, "ReplicaSet", kb_k8s_meta_str(rs, "uid")) || !kb_ctl_pod_active(p)) continue;
    replicas++;
    if (!kb_ctl_pod_ready(p)) continue;
    ready++;
    double since = now;
    const cJSON *cond;
    cJSON_ArrayForEach(cond, kb_k8s_path(p, "status.conditions"))
      if (kb_k8s_path_str(cond, "type") && !strcmp(kb_k8s_path_str(cond, "type"), "Ready"))
        since = kb_k8s_parse_time(kb_k8s_path_str(cond, "lastTransitionTime"));
    if (min_ready <= 0 || since + min_ready <= now) available++;
  }
  cJSON *st = cJSON_CreateObject();
  cJSON_AddNumberToObject(st, "replicas", replicas);
  cJSON_AddNumberToObject(st, "fullyLabeledReplicas", replicas);
  if (ready) cJSON_AddNumberToObject(st, "readyReplicas", ready);
  if (available) cJSON_AddNumberToObject(st, "availableReplicas", available);
  cJSON_AddNumberToObject(st, "observedGeneration", kb_k8s_path_num(rs, "metadata.generation", 1));
  kb_ctl_put_status(c->st, c->rs, kb_k8s_meta_str(rs, "namespace"), kb_k8s_meta_str(rs, "name"), st);
  cJSON_Delete(st);
}

static void sync_rs(ctl_rs *c, const char *ns, const char *name) {
  kb_k8s_error e;
  cJSON *rs = kb_k8s_get(c->st, c->rs, ns, name, &e);
  if (!rs) return;
  const char *uid = kb_k8s_meta_str(rs, "uid");
  if (kb_k8s_meta_str(rs, "deletionTimestamp")) {
    cJSON_Delete(rs);
    return;
  }
  /* the pods it controls (it adopts none), borrowed until the first write */
  size_t n_all = 0, n = 0;
  const cJSON **pods = kb_ctl_peek_all(c->st, c->pods, ns, &n_all);
  const cJSON **active = calloc(n_all ? n_all : 1, sizeof *active);
  for (size_t i = 0; pods && active && i < n_all; i++)
    if (kb_ctl_owned_by(pods[i], "ReplicaSet", uid) && kb_ctl_pod_active(pods[i])) active[n++] = pods[i];
  long want = (long)kb_k8s_path_num(rs, "spec.replicas", 1), diff = want - (long)n;
  if (pods && active && diff > 0) {
    expect *x = expect_of(c, uid, 1);
    for (long i = 0; i < diff && i < MAX_BURST; i++)
      if (create_pod(c, rs) == 0 && x) x->adds++;
  } else if (pods && active && diff < 0) {
    delete_surplus(c, ns, active, n, (size_t)(-diff < MAX_BURST ? -diff : MAX_BURST));
  }
  free(active);
  free(pods);
  pods = kb_ctl_peek_all(c->st, c->pods, ns, &n_all); /* what is there now */
  if (pods) write_status(c, rs, pods, n_all);
  free(pods);
  cJSON_Delete(rs);
}

static void on_rs(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  if (type == KB_K8S_DELETED && kb_k8s_meta_str(obj, "uid")) expect_drop(ud, kb_k8s_meta_str(obj, "uid"));
  /* a change that is not of the spec (its status, which it wrote, or an
   * annotation) needs no resync: the pods' events bring those */
  if (type == KB_K8S_MODIFIED &&
      kb_k8s_path_num(obj, "status.observedGeneration", -1) == kb_k8s_path_num(obj, "metadata.generation", 1))
    return;
  if (type == KB_K8S_ADDED || type == KB_K8S_MODIFIED) {
    char ns[256], name[256];
    snprintf(ns, sizeof ns, "%s", kb_k8s_meta_str(obj, "namespace"));
    snprintf(name, sizeof name, "%s", kb_k8s_meta_str(obj, "name"));
    sync_rs(ud, ns, name);
  }
}

static void on_pod(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  const cJSON *ref = kb_ctl_controller_ref(obj);
  const char *kind = kb_k8s_path_str(ref, "kind"), *name = kb_k8s_path_str(ref, "name");
  if (!kind || !name || strcmp(kind, "ReplicaSet")) return;
  expect *x = type == KB_K8S_ADDED ? expect_of(ud, kb_k8s_path_str(ref, "uid") ? kb_k8s_path_str(ref, "uid") : "", 0) : NULL;
  if (x && x->adds > 0 && --x->adds > 0) return; /* more of our creates to come */
  char ns[256], rs[256];
  snprintf(ns, sizeof ns, "%s", kb_k8s_meta_str(obj, "namespace"));
  snprintf(rs, sizeof rs, "%s", name);
  sync_rs(ud, ns, rs);
}

static void rs_free(k8s_ctl *base) {
  ctl_rs *c = (ctl_rs *)base;
  while (c->expects) {
    expect *x = c->expects;
    c->expects = x->next;
    free(x);
  }
  kb_k8s_watch_cancel(c->w_rs);
  kb_k8s_watch_cancel(c->w_pods);
  free(c);
}

k8s_ctl *kb_k8s_replicaset_start(kb_k8s_store *st) {
  ctl_rs *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->base.free = rs_free;
  c->st = st;
  c->rs = kb_k8s_store_lookup(st, "apps", "v1", "replicasets");
  c->pods = kb_k8s_store_lookup(st, "", "v1", "pods");
  if (c->rs && c->pods) {
    c->w_rs = kb_k8s_store_on(st, c->rs, on_rs, c);
    c->w_pods = kb_k8s_store_on(st, c->pods, on_pod, c);
  }
  if (!c->w_rs || !c->w_pods) {
    rs_free(&c->base);
    return NULL;
  }
  return &c->base;
}
