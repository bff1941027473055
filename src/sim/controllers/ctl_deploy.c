/* The apps/v1 Deployment controller, as kube-controller-manager 1.32 runs
 * it over ReplicaSets:
 *
 *  - the new ReplicaSet is `<deploy>-<pod-template-hash>`, the hash of the
 *    pod template (FNV-1a over the template with its keys sorted and null or
 *    empty fields left out, printed
 *    in decimal and spelled with the apimachinery "safe" alphabet), which
 *    is also the pod-template-hash label of its selector and template;
 *  - RollingUpdate: the new ReplicaSet grows while all pods stay within
 *    replicas + maxSurge, old ones shrink (unavailable pods first) while
 *    available pods stay at replicas - maxUnavailable or more (25% each by
 *    default: surge rounds up, unavailability down); Recreate: old ones go
 *    to 0 and the new one grows once their pods are gone;
 *  - revisions in the deployment.kubernetes.io/revision annotation (an old
 *    template coming back, as `rollout undo` makes it, takes the next);
 *  - status: replicas, updatedReplicas, readyReplicas, availableReplicas,
 *    unavailableReplicas, observedGeneration, and the conditions Available
 *    (MinimumReplicasAvailable / MinimumReplicasUnavailable) and
 *    Progressing (NewReplicaSetCreated, ReplicaSetUpdated,
 *    NewReplicaSetAvailable), with the real messages.
 *
 * Not modelled: progressDeadlineSeconds (no ProgressDeadlineExceeded),
 * proportional scaling of several old ReplicaSets mid-rollout (the newest
 * takes the change), paused rollouts (status only), old ReplicaSets beyond
 * revisionHistoryLimit are kept. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_ctl.h"
#include "k8s_internal.h"

#define REVISION "deployment.kubernetes.io/revision"
#define HASH_LABEL "pod-template-hash"

typedef struct ctl_deploy {
  k8s_ctl base;
  kb_k8s_store *st;
  const kb_k8s_res *deploy, *rs;
  kb_k8s_watch *w_deploy, *w_rs;
} ctl_deploy;

/* ---- the template hash ---- */

static uint32_t fnv(uint32_t h, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
  return h;
}

static int key_cmp(const void *a, const void *b) {
  return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* Hashes a JSON value with object keys in sorted order, so the hash does
 * not depend on the order a client wrote them in. */
static uint32_t hash_value(uint32_t h, const cJSON *v) {
  if (cJSON_IsObject(v)) {
    size_t n = (size_t)cJSON_GetArraySize(v), i = 0;
    const cJSON **kids = calloc(n ? n : 1, sizeof *kids);
    if (!kids) return h;
    /* null and empty fields are absent ones, as in the typed template
     * (Go clients send creationTimestamp: null and resources: {}, so
     * `rollout undo` must find the old hash) */
    for (const cJSON *c = v->child; c; c = c->next)
      if (!cJSON_IsNull(c) && !((cJSON_IsObject(c) || cJSON_IsArray(c)) && !c->child)) kids[i++] = c;
    n = i;
    qsort(kids, n, sizeof *kids, key_cmp);
    h = fnv(h, "{", 1);
    for (i = 0; i < n; i++) {
      h = fnv(h, kids[i]->string, strlen(kids[i]->string) + 1);
      h = hash_value(h, kids[i]);
    }
    free(kids);
    return fnv(h, "}", 1);
  }
  if (cJSON_IsArray(v)) {
    h = fnv(h, "[", 1);
    for (const cJSON *c = v->child; c; c = c->next) h = hash_value(h, c);
    return fnv(h, "]", 1);
  }
  char *text = cJSON_PrintUnformatted(v);
  if (text) h = fnv(h, text, strlen(text) + 1);
  free(text);
  return h;
}

void kb_k8s_template_hash(const cJSON *tmpl, char out[16]) {
  static const char safe[] = "bcdfghjklmnpqrstvwxz2456789";
  char dec[16];
  snprintf(dec, sizeof dec, "%u", hash_value(2166136261u, tmpl));
  size_t i = 0;
  for (; dec[i]; i++) out[i] = safe[(unsigned char)dec[i] % (sizeof safe - 1)];
  out[i] = 0;
}

/* ---- the rollout ---- */

typedef struct rs_view {
  const cJSON *obj;
  char name[256];
  int spec, replicas, ready, available; /* available: at most spec */
  long revision;
  double created;
} rs_view;

/* maxSurge / maxUnavailable: an integer or "25%" of replicas. */
static int int_or_percent(const cJSON *v, int replicas, int round_up, int dflt_pct) {
  if (cJSON_IsNumber(v)) return v->valueint < 0 ? 0 : v->valueint;
  double pct = dflt_pct;
  if (cJSON_IsString(v)) pct = atof(v->valuestring);
  double x = pct * replicas / 100.0;
  return (int)(round_up ? ceil(x - 1e-9) : floor(x + 1e-9));
}

static int set_replicas(ctl_deploy *c, const char *ns, const rs_view *r, int n, int desired,
                        int max) {
  if (r->spec == n) return 0;
  cJSON *p = cJSON_CreateObject();
  cJSON *ann = cJSON_AddObjectToObject(cJSON_AddObjectToObject(p, "metadata"), "annotations");
  char v[16];
  snprintf(v, sizeof v, "%d", desired);
  cJSON_AddStringToObject(ann, "deployment.kubernetes.io/desired-replicas", v);
  snprintf(v, sizeof v, "%d", max);
  cJSON_AddStringToObject(ann, "deployment.kubernetes.io/max-replicas", v);
  cJSON_AddNumberToObject(cJSON_AddObjectToObject(p, "spec"), "replicas", n);
  int rc = kb_ctl_merge(c->st, c->rs, ns, r->name, p);
  cJSON_Delete(p);
  return rc == 0;
}

static int create_rs(ctl_deploy *c, const cJSON *d, const char *hash, int replicas, long revision,
                     int max) {
  const char *name = kb_k8s_meta_str(d, "name");
  char rsname[300], rev[24], v[16];
  snprintf(rsname, sizeof rsname, "%.230s-%.15s", name, hash);
  cJSON *rs = cJSON_CreateObject();
  cJSON *md = cJSON_AddObjectToObject(rs, "metadata");
  cJSON_AddStringToObject(md, "name", rsname);
  const cJSON *tmpl = kb_k8s_path(d, "spec.template");
  const cJSON *tl = kb_k8s_path(tmpl, "metadata.labels");
  cJSON *labels = tl ? cJSON_Duplicate(tl, 1) : cJSON_CreateObject();
  cJSON_AddStringToObject(labels, HASH_LABEL, hash);
  cJSON_AddItemToObject(md, "labels", labels);
  cJSON *ann = cJSON_AddObjectToObject(md, "annotations");
  snprintf(rev, sizeof rev, "%ld", revision);
  snprintf(v, sizeof v, "%d", (int)kb_k8s_path_num(d, "spec.replicas", 1));
  cJSON_AddStringToObject(ann, "deployment.kubernetes.io/desired-replicas", v);
  snprintf(v, sizeof v, "%d", max);
  cJSON_AddStringToObject(ann, "deployment.kubernetes.io/max-replicas", v);
  cJSON_AddStringToObject(ann, REVISION, rev);
  cJSON_AddItemToArray(cJSON_AddArrayToObject(md, "ownerReferences"),
                       kb_ctl_owner_ref("apps/v1", "Deployment", name, kb_k8s_meta_str(d, "uid")));
  cJSON *spec = cJSON_AddObjectToObject(rs, "spec");
  cJSON_AddNumberToObject(spec, "replicas", replicas);
  cJSON_AddNumberToObject(spec, "minReadySeconds", kb_k8s_path_num(d, "spec.minReadySeconds", 0));
  const cJSON *sel = kb_k8s_path(d, "spec.selector");
  cJSON *s = sel ? cJSON_Duplicate(sel, 1) : cJSON_CreateObject();
  cJSON *ml = cJSON_GetObjectItemCaseSensitive(s, "matchLabels");
  if (!cJSON_IsObject(ml)) ml = cJSON_AddObjectToObject(s, "matchLabels");
  cJSON_AddStringToObject(ml, HASH_LABEL, hash);
  cJSON_AddItemToObject(spec, "selector", s);
  cJSON *t = tmpl ? cJSON_Duplicate(tmpl, 1) : cJSON_CreateObject();
  cJSON *tmd = cJSON_GetObjectItemCaseSensitive(t, "metadata");
  if (!cJSON_IsObject(tmd)) tmd = cJSON_AddObjectToObject(t, "metadata");
  cJSON *tlab = cJSON_GetObjectItemCaseSensitive(tmd, "labels");
  if (!cJSON_IsObject(tlab)) tlab = cJSON_AddObjectToObject(tmd, "labels");
  cJSON_AddStringToObject(tlab, HASH_LABEL, hash);
  cJSON_AddItemToObject(spec, "template", t);
  kb_k8s_error e;
  int rc = kb_k8s_create(c->st, c->rs, kb_k8s_meta_str(d, "namespace"), rs, 0, NULL, &e);
  cJSON_Delete(rs);
  return rc;
}

static void add_condition(cJSON *conds, const cJSON *old_status, const char *type,
                          const char *status, const char *reason, const char *msg, const char *now) {
  const char *upd = now, *trans = now;
  const cJSON *o;
  cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(old_status, "conditions")) {
    if (!kb_k8s_path_str(o, "type") || strcmp(kb_k8s_path_str(o, "type"), type)) continue;
    int same_status = kb_k8s_path_str(o, "status") && !strcmp(kb_k8s_path_str(o, "status"), status);
    int same = same_status && kb_k8s_path_str(o, "reason") && !strcmp(kb_k8s_path_str(o, "reason"), reason) &&
               kb_k8s_path_str(o, "message") && !strcmp(kb_k8s_path_str(o, "message"), msg);
    if (same_status && kb_k8s_path_str(o, "lastTransitionTime")) trans = kb_k8s_path_str(o, "lastTransitionTime");
    if (same && kb_k8s_path_str(o, "lastUpdateTime")) upd = kb_k8s_path_str(o, "lastUpdateTime");
  }
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "type", type);
  cJSON_AddStringToObject(c, "status", status);
  cJSON_AddStringToObject(c, "lastUpdateTime", upd);
  cJSON_AddStringToObject(c, "lastTransitionTime", trans);
  cJSON_AddStringToObject(c, "reason", reason);
  cJSON_AddStringToObject(c, "message", msg);
  cJSON_AddItemToArray(conds, c);
}

static void write_status(ctl_deploy *c, const cJSON *d, const rs_view *v, size_t n,
                         const rs_view *nw, int max_unavailable, int created) {
  int want = (int)kb_k8s_path_num(d, "spec.replicas", 1), replicas = 0, ready = 0, available = 0;
  for (size_t i = 0; i < n; i++) {
    replicas += v[i].replicas;
    ready += v[i].ready;
    available += (int)kb_k8s_path_num(v[i].obj, "status.availableReplicas", 0);
  }
  int updated = nw ? nw->replicas : 0;
  const cJSON *old = kb_k8s_path(d, "status");
  char now[32], msg[400];
  kb_k8s_format_time(kb_k8s_store_now(c->st), now);
  cJSON *st = cJSON_CreateObject();
  cJSON_AddNumberToObject(st, "observedGeneration", kb_k8s_path_num(d, "metadata.generation", 1));
  if (replicas) cJSON_AddNumberToObject(st, "replicas", replicas);
  if (updated) cJSON_AddNumberToObject(st, "updatedReplicas", updated);
  if (ready) cJSON_AddNumberToObject(st, "readyReplicas", ready);
  if (available) cJSON_AddNumberToObject(st, "availableReplicas", available);
  if (want - available > 0) cJSON_AddNumberToObject(st, "unavailableReplicas", want - available);
  cJSON *conds = cJSON_AddArrayToObject(st, "conditions");
  if (available >= want - max_unavailable)
    add_condition(conds, old, "Available", "True", "MinimumReplicasAvailable",
                  "Deployment has minimum availability.", now);
  else
    add_condition(conds, old, "Available", "False", "MinimumReplicasUnavailable",
                  "Deployment does not have minimum availability.", now);
  const char *rsname = nw ? nw->name : "";
  int complete = nw && updated == want && replicas == want && available == want;
  const char *reason = complete ? "NewReplicaSetAvailable" : created ? "NewReplicaSetCreated"
                                                                     : "ReplicaSetUpdated";
  if (complete) snprintf(msg, sizeof msg, "ReplicaSet \"%s\" has successfully progressed.", rsname);
  else if (created) snprintf(msg, sizeof msg, "Created new replica set \"%s\"", rsname);
  else snprintf(msg, sizeof msg, "ReplicaSet \"%s\" is progressing.", rsname);
  /* Progressing moves to ReplicaSetUpdated only when the rollout made
   * progress (more updated, ready or available pods, fewer old ones);
   * otherwise it keeps what it said, as the controller's
   * DeploymentProgressing check has it */
  int old_updated = (int)kb_k8s_path_num(old, "updatedReplicas", 0);
  int progressed = updated > old_updated || ready > kb_k8s_path_num(old, "readyReplicas", 0) ||
                   available > kb_k8s_path_num(old, "availableReplicas", 0) ||
                   kb_k8s_path_num(old, "replicas", 0) - old_updated > replicas - updated;
  const cJSON *oc;
  cJSON_ArrayForEach(oc, cJSON_GetObjectItemCaseSensitive(old, "conditions")) {
    const char *t = kb_k8s_path_str(oc, "type"), *r = kb_k8s_path_str(oc, "reason"), *m = kb_k8s_path_str(oc, "message");
    if (complete || created || progressed || !t || strcmp(t, "Progressing") || !r || !m) continue;
    if (!strcmp(r, "NewReplicaSetCreated") || !strcmp(r, "ReplicaSetUpdated"))
      reason = r, snprintf(msg, sizeof msg, "%s", m);
  }
  add_condition(conds, old, "Progressing", "True", reason, msg, now);
  kb_ctl_put_status(c->st, c->deploy, kb_k8s_meta_str(d, "namespace"), kb_k8s_meta_str(d, "name"), st);
  cJSON_Delete(st);
}

static int view_cmp(const void *a, const void *b) { /* oldest first */
  const rs_view *x = a, *y = b;
  return x->created < y->created ? -1 : x->created > y->created;
}

/* One step of the rollout over the ReplicaSets in v (new one: nw). */
static void scale(ctl_deploy *c, const cJSON *d, const char *ns, rs_view *v, size_t n,
                  rs_view *nw, int surge, int unavail) {
  int want = (int)kb_k8s_path_num(d, "spec.replicas", 1), total = 0, old_spec = 0, old_pods = 0;
  for (size_t i = 0; i < n; i++) {
    total += v[i].spec;
    if (&v[i] != nw) old_spec += v[i].spec, old_pods += v[i].replicas;
  }
  const char *type = kb_k8s_path_str(d, "spec.strategy.type");
  if (type && !strcmp(type, "Recreate")) {
    for (size_t i = 0; i < n; i++)
      if (&v[i] != nw) set_replicas(c, ns, &v[i], 0, want, want);
    if (!old_spec && !old_pods) set_replicas(c, ns, nw, want, want, want);
    return;
  }
  if (!old_spec || nw->spec > want) {
    set_replicas(c, ns, nw, want, want, want + surge);
    return;
  }
  /* grow the new one within replicas + maxSurge */
  int grown = nw->spec;
  if (nw->spec < want && total < want + surge) {
    grown = nw->spec + (want + surge - total);
    if (grown > want) grown = want;
    set_replicas(c, ns, nw, grown, want, want + surge);
    total += grown - nw->spec;
  }
  /* shrink old ones while available pods stay >= replicas - maxUnavailable:
   * first their unavailable pods, then available ones */
  int min_avail = want - unavail, new_unavail = grown - nw->available;
  if (new_unavail < 0) new_unavail = 0;
  int cleanup = total - min_avail - new_unavail, avail_all = 0;
  int *next = calloc(n, sizeof *next);
  if (!next) return;
  for (size_t i = 0; i < n; i++) {
    next[i] = v[i].spec;
    if (&v[i] == nw || cleanup <= 0) continue;
    int bad = v[i].spec - v[i].available, down = bad < cleanup ? bad : cleanup;
    if (down > 0) next[i] -= down, cleanup -= down;
  }
  for (size_t i = 0; i < n; i++) avail_all += v[i].available < next[i] ? v[i].available : next[i];
  int todo = avail_all - min_avail;
  for (size_t i = 0; i < n && todo > 0; i++) {
    if (&v[i] == nw) continue;
    int down = next[i] < todo ? next[i] : todo;
    next[i] -= down, todo -= down;
  }
  for (size_t i = 0; i < n; i++)
    if (&v[i] != nw) set_replicas(c, ns, &v[i], next[i], want, want + surge);
  free(next);
}

static void sync_deploy(ctl_deploy *c, const char *ns, const char *name) {
  kb_k8s_error e;
  cJSON *d = kb_k8s_get(c->st, c->deploy, ns, name, &e);
  if (!d || kb_k8s_meta_str(d, "deletionTimestamp")) {
    cJSON_Delete(d);
    return;
  }
  char hash[16];
  kb_k8s_template_hash(kb_k8s_path(d, "spec.template"), hash);
  const char *uid = kb_k8s_meta_str(d, "uid");
  int want = (int)kb_k8s_path_num(d, "spec.replicas", 1);
  const cJSON *ru = kb_k8s_path(d, "spec.strategy.rollingUpdate");
  int surge = int_or_percent(cJSON_GetObjectItemCaseSensitive(ru, "maxSurge"), want, 1, 25);
  int unavail = int_or_percent(cJSON_GetObjectItemCaseSensitive(ru, "maxUnavailable"), want, 0, 25);
  const char *type = kb_k8s_path_str(d, "spec.strategy.type");
  if (type && !strcmp(type, "Recreate")) surge = 0, unavail = want;
  else if (!surge && !unavail) unavail = 1;
  const cJSON *items;
  cJSON *list = kb_ctl_list(c->st, c->rs, ns, NULL, &items);
  size_t n = 0, cap = (size_t)cJSON_GetArraySize(items);
  rs_view *v = calloc(cap + 1, sizeof *v);
  if (!list || !v) goto out;
  const cJSON *it;
  long max_rev = 0;
  rs_view *nw = NULL;
  cJSON_ArrayForEach(it, items) {
    if (!kb_ctl_owned_by(it, "Deployment", uid)) continue;
    rs_view *r = &v[n++];
    r->obj = it;
    snprintf(r->name, sizeof r->name, "%s", kb_k8s_meta_str(it, "name"));
    r->spec = (int)kb_k8s_path_num(it, "spec.replicas", 1);
    r->replicas = (int)kb_k8s_path_num(it, "status.replicas", 0);
    r->ready = (int)kb_k8s_path_num(it, "status.readyReplicas", 0);
    r->available = (int)kb_k8s_path_num(it, "status.availableReplicas", 0);
    if (r->available > r->spec) r->available = r->spec; /* status may lag a scale-down */
    const char *rev = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(kb_k8s_path(it, "metadata.annotations"), REVISION));
    r->revision = rev ? atol(rev) : 0;
    r->created = kb_k8s_parse_time(kb_k8s_meta_str(it, "creationTimestamp"));
    if (r->revision > max_rev) max_rev = r->revision;
  }
  qsort(v, n, sizeof *v, view_cmp);
  for (size_t i = 0; i < n; i++) {
    const char *h = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(kb_k8s_path(v[i].obj, "metadata.labels"), HASH_LABEL));
    if (h && !strcmp(h, hash)) nw = &v[i];
  }
  int created = 0;
  if (!nw) {
    int total = 0, old_active = 0;
    for (size_t i = 0; i < n; i++) total += v[i].spec, old_active |= v[i].spec > 0 || v[i].replicas > 0;
    int start = want;
    if (type && !strcmp(type, "Recreate")) start = old_active ? 0 : want;
    else if (old_active) start = want + surge - total < 0 ? 0 : want + surge - total > want ? want : want + surge - total;
    if (create_rs(c, d, hash, start, max_rev + 1, want + surge) == 0) created = 1;
    /* the ReplicaSet's ADDED event brings the next step */
  } else if (cJSON_IsTrue(kb_k8s_path(d, "spec.paused"))) {
    /* paused: no scaling, status only */
  } else {
    if (nw->revision < max_rev && n > 1) { /* an old template is back: next revision */
      cJSON *p = cJSON_CreateObject();
      char rev[24];
      snprintf(rev, sizeof rev, "%ld", max_rev + 1);
      cJSON_AddStringToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(p, "metadata"),
                                                      "annotations"), REVISION, rev);
      kb_ctl_merge(c->st, c->rs, ns, nw->name, p);
      cJSON_Delete(p);
      nw->revision = max_rev + 1;
    }
    scale(c, d, ns, v, n, nw, surge, unavail);
  }
  long rev_now = nw ? nw->revision : max_rev + 1;
  char rev[24];
  snprintf(rev, sizeof rev, "%ld", rev_now);
  const char *cur = cJSON_GetStringValue(
      cJSON_GetObjectItemCaseSensitive(kb_k8s_path(d, "metadata.annotations"), REVISION));
  if (!cur || strcmp(cur, rev)) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(p, "metadata"),
                                                    "annotations"), REVISION, rev);
    kb_ctl_merge(c->st, c->deploy, ns, name, p);
    cJSON_Delete(p);
    cJSON_Delete(d); /* the stored object changed: read it again for status */
    d = kb_k8s_get(c->st, c->deploy, ns, name, &e);
    if (!d) goto out;
  }
  rs_view none = {0};
  snprintf(none.name, sizeof none.name, "%.230s-%.15s", name, hash);
  write_status(c, d, v, n, nw ? nw : created ? &none : NULL, unavail, created);
out:
  free(v);
  cJSON_Delete(list);
  cJSON_Delete(d);
}

static void on_deploy(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  if (type != KB_K8S_ADDED && type != KB_K8S_MODIFIED) return;
  char ns[256], name[256];
  snprintf(ns, sizeof ns, "%s", kb_k8s_meta_str(obj, "namespace"));
  snprintf(name, sizeof name, "%s", kb_k8s_meta_str(obj, "name"));
  sync_deploy(ud, ns, name);
}

static void on_rs(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  (void)type;
  const cJSON *ref = kb_ctl_controller_ref(obj);
  const char *kind = kb_k8s_path_str(ref, "kind"), *name = kb_k8s_path_str(ref, "name");
  if (!kind || !name || strcmp(kind, "Deployment")) return;
  char ns[256], d[256];
  snprintf(ns, sizeof ns, "%s", kb_k8s_meta_str(obj, "namespace"));
  snprintf(d, sizeof d, "%s", name);
  sync_deploy(ud, ns, d);
}

static void deploy_free(k8s_ctl *base) {
  ctl_deploy *c = (ctl_deploy *)base;
  kb_k8s_watch_cancel(c->w_deploy);
  kb_k8s_watch_cancel(c->w_rs);
  free(c);
}

k8s_ctl *kb_k8s_deploy_start(kb_k8s_store *st) {
  ctl_deploy *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->base.free = deploy_free;
  c->st = st;
  c->deploy = kb_k8s_store_lookup(st, "apps", "v1", "deployments");
  c->rs = kb_k8s_store_lookup(st, "apps", "v1", "replicasets");
  if (c->deploy && c->rs) {
    c->w_deploy = kb_k8s_store_on(st, c->deploy, on_deploy, c);
    c->w_rs = kb_k8s_store_on(st, c->rs, on_rs, c);
  }
  if (!c->w_deploy || !c->w_rs) {
    deploy_free(&c->base);
    return NULL;
  }
  return &c->base;
}
