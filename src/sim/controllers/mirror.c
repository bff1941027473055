/* The mirror: the model's nodes, pods and events as Kubernetes objects in
 * the store, the Workflow objects of KFP runs, and pod logs (Events in
 * mirror_events.c, nodes in mirror_nodes.c, logs in mirror_logs.c). The
 * model's observer only marks things dirty, once per object however often
 * it changes; kb_glue_flush writes each out once, with its latest state
 * (see sim_glue.h for why). Pods of runs a controller owns take the shape the
 * controller gives them (names, labels, owner references); the rest look
 * like Argo's. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kb/log.h"
#include "mirror_internal.h"

/* ---- small helpers ---- */

kb_sim *kb_glue_sim(sim_glue *g) { return g->sim; }
uv_loop_t *kb_glue_loop(sim_glue *g) { return g->loop; }
kb_k8s_store *kb_glue_store(sim_glue *g) { return g->st; }
int kb_glue_writing(const sim_glue *g) { return g->writing; }
void kb_glue_write_begin(sim_glue *g) { g->writing++; }
void kb_glue_write_end(sim_glue *g) { g->writing--; }

const kb_k8s_res *kb_glue_res(sim_glue *g, const char *group, const char *resource) {
  return kb_k8s_store_find(g->st, group, resource);
}

double kb_glue_unix(const sim_glue *g, double t) { return kb_sim_epoch(g->sim) + t; }

void kb_glue_time(const sim_glue *g, double t, char out[32]) {
  kb_k8s_format_time(kb_glue_unix(g, t), out);
}

void kb_glue_suffix(sim_glue *g, char out[6]) {
  static const char chars[] = "bcdfghjklmnpqrstvwxz2456789";
  for (int i = 0; i < 5; i++) {
    uint64_t z = (g->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    out[i] = chars[(z ^ (z >> 31)) % (sizeof chars - 1)];
  }
  out[5] = 0;
}

void kb_glue_ensure_namespace(sim_glue *g, const char *ns) {
  if (!ns || !*ns || kb_k8s_peek(g->st, g->r_namespaces, NULL, ns)) return;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "metadata"), "name", ns);
  kb_glue_write_begin(g);
  kb_k8s_create(g->st, g->r_namespaces, NULL, o, 0, NULL, NULL);
  kb_glue_write_end(g);
  cJSON_Delete(o);
}

int kb_glue_put_status(sim_glue *g, const kb_k8s_res *res, const char *ns, const char *name,
                    const cJSON *status) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "metadata"), "name", name);
  cJSON_AddItemToObject(o, "status", cJSON_Duplicate(status, 1));
  kb_glue_write_begin(g);
  int rc = kb_k8s_update(g->st, res, ns, name, o, KB_K8S_STATUS, NULL, NULL);
  kb_glue_write_end(g);
  cJSON_Delete(o);
  return rc;
}

static int grow(void **arr, size_t *n, size_t need, size_t elem) {
  if (need <= *n) return 0;
  size_t cap = *n ? *n : 64;
  while (cap < need) cap *= 2;
  void *p = realloc(*arr, cap * elem);
  if (!p) return -1;
  memset((char *)p + *n * elem, 0, (cap - *n) * elem);
  *arr = p;
  *n = cap;
  return 0;
}

static glue_run *run_rec(sim_glue *g, int run) {
  if (run < 0 || grow((void **)&g->runs, &g->n_runs, (size_t)run + 1, sizeof *g->runs)) return NULL;
  return &g->runs[run];
}

static glue_pod *pod_rec(sim_glue *g, int pod) {
  if (pod < 0 || grow((void **)&g->pods, &g->n_pods, (size_t)pod + 1, sizeof *g->pods)) return NULL;
  return &g->pods[pod];
}

/* ---- dirty sets and the observer ---- */

/* A dirty set is a queue of ids, each in it at most once (flag): however
 * often an object changes before the mirror reaches it, it is written once.
 * The mirror takes ids from the head in place (dirty_pop); the queue is
 * compacted when it would grow, so a backlog of 500,000 ids is not copied
 * at every turn that takes 64 of them. */
static void dirty_add(dirty_set *d, uint32_t i) {
  if (grow((void **)&d->flag, &d->n_flag, (size_t)i + 1, 1)) return;
  if (d->flag[i]) return;
  if (d->n == d->cap && d->head) {
    memmove(d->v, d->v + d->head, (d->n - d->head) * sizeof *d->v);
    d->n -= d->head;
    d->head = 0;
  }
  if (d->n == d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 64;
    uint32_t *v = realloc(d->v, cap * sizeof *v);
    if (!v) return;
    d->v = v;
    d->cap = cap;
  }
  d->flag[i] = 1;
  d->v[d->n++] = i;
  d->added++;
}

static size_t dirty_count(const dirty_set *d) { return d->n - d->head; }

/* Takes the oldest id out of the set. */
static uint32_t dirty_pop(dirty_set *d) {
  uint32_t i = d->v[d->head++];
  d->flag[i] = 0;
  if (d->head == d->n) d->head = d->n = 0;
  return i;
}

/* top: 0 inside another's work (no trims), 1 an idle turn (trims, a
 * budget), 2 before a request (trims, everything), 3 before a request when
 * the view is far behind (trims, REQUEST_FLUSH_CPU of it). */
static void flush(sim_glue *g, int top);
/* Nothing up the stack holds a pointer into the store here: its objects
 * may go back to text (kb_k8s_store_trim), also between the flush's writes. */
static double thread_cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void on_idle(uv_idle_t *h) {
  sim_glue *g = h->data;
  double t0 = thread_cpu();
  flush(g, 1);
  double dt = thread_cpu() - t0;
  if (dt > g->longest_turn) g->longest_turn = dt;
}

double kb_glue_longest_turn(const sim_glue *g) { return g->longest_turn; }
/* Trees kept: an object written or read again soon (a pod through its
 * phases) is not printed and parsed at every turn. A trim packs the
 * oldest down to HOT_KEEP, so each packs about what came since the last
 * (packing 512 at once held a turn for 50 ms). */
#define HOT_BUDGET 512
#define HOT_KEEP 448

static void trim(sim_glue *g) {
  if (kb_k8s_store_hot(g->st) > HOT_BUDGET) kb_k8s_store_trim_to(g->st, HOT_KEEP);
}

static void on_check(uv_check_t *h) { trim(h->data); }

/* The view is kept current as the model changes: the observer marks
 * objects dirty and the idle turn after writes them out, so a first
 * Kubernetes request finds it built (it once was built then, all at once,
 * which held the loop for as long as 100,000 pods took). */
static void want_flush(sim_glue *g) {
  if (g->idle_on || g->stopped || !g->idle_init) return;
  g->idle_on = 1;
  uv_idle_start(&g->idle, on_idle);
}

static void observer(void *ud, kb_sim_kind kind, uint32_t index, uint64_t rv) {
  (void)rv;
  sim_glue *g = ud;
  switch (kind) {
  case KB_SIM_KIND_POD: dirty_add(&g->d_pods, index); break;
  case KB_SIM_KIND_NODE: dirty_add(&g->d_nodes, index); break;
  case KB_SIM_KIND_RUN: dirty_add(&g->d_runs, index); break;
  case KB_SIM_KIND_EVENT: g->events_dirty = 1; break;
  }
  want_flush(g);
}

/* ---- owners ---- */

/* The record no longer names a Workflow object (it is gone). */
static void workflow_forget(glue_run *r) {
  free(r->wf_ns), free(r->wf_name), free(r->wf_uid);
  r->wf_ns = r->wf_name = r->wf_uid = NULL;
  r->wf_state = OBJ_GONE;
}

/* Deletes the Workflow object the record names, if any. */
static void workflow_gone(sim_glue *g, glue_run *r) {
  if (r->wf_state == OBJ_LIVE && r->wf_name) {
    kb_glue_write_begin(g);
    kb_k8s_delete(g->st, g->r_workflows, r->wf_ns, r->wf_name, NULL, NULL, NULL);
    kb_glue_write_end(g);
  }
  workflow_forget(r);
}

/* The record of run id `run` as of the model's generation `gen`. */
static glue_run *run_rec_gen(sim_glue *g, int run, uint32_t gen) {
  glue_run *r = run_rec(g, run);
  if (!r || r->gen == gen) return r;
  workflow_gone(g, r);
  free(r->pods);
  free(r->adopt_ns), free(r->adopt_name);
  *r = (glue_run){.gen = gen};
  return r;
}

void kb_glue_own_run(sim_glue *g, int run, const glue_owner_ops *ops, void *ud) {
  kb_sim_run_info ri;
  if (kb_sim_run_get(g->sim, run, &ri) < 0) return;
  glue_run *r = run_rec_gen(g, run, ri.gen);
  if (!r) return;
  r->ops = ops;
  r->ud = ud;
}

void kb_glue_adopt_pod(sim_glue *g, int run, const char *ns, const char *name) {
  glue_run *r = run_rec(g, run);
  if (!r) return;
  free(r->adopt_ns), free(r->adopt_name);
  r->adopt_ns = strdup(ns);
  r->adopt_name = strdup(name);
}

void kb_glue_disown_run(sim_glue *g, int run) {
  glue_run *r = run_rec(g, run);
  if (r) r->ud = NULL;
}

void kb_glue_forget_run(sim_glue *g, int run) {
  glue_run *r = run_rec(g, run);
  for (size_t i = 0; r && i < r->n_pods; i++) {
    glue_pod *gp = pod_rec(g, r->pods[i]);
    if (gp && gp->state == OBJ_LIVE) gp->state = OBJ_GONE;
  }
}

int kb_glue_creating_pod(const sim_glue *g) { return g->creating_pod > 0; }

int kb_glue_pod_deleted(sim_glue *g, const cJSON *pod) {
  const char *ns = kb_k8s_meta_str(pod, "namespace"), *name = kb_k8s_meta_str(pod, "name");
  if (!ns || !name) return 0;
  /* A scan: deletes of model pods through the API are rare (evictions,
   * kubectl delete); the model's own deletes are glue writes. */
  for (size_t i = 0; i < g->n_pods; i++) {
    glue_pod *gp = &g->pods[i];
    if (gp->state != OBJ_LIVE || strcmp(gp->name, name) || strcmp(gp->ns, ns)) continue;
    kb_sim_pod_info pi;
    gp->state = OBJ_GONE;
    if (kb_sim_pod_get(g->sim, (int)i, &pi) == 0 && pi.gen == gp->gen)
      kb_sim_pod_kill(g->sim, (int)i, "Deleted", "the pod was deleted", NULL);
    return 1;
  }
  return 0;
}

size_t kb_glue_run_pods(sim_glue *g, int run, const int **pods) {
  glue_run *r = run_rec(g, run);
  *pods = r ? r->pods : NULL;
  return r ? r->n_pods : 0;
}

static int owned(const glue_run *r) { return r && r->ops; }

/* ---- pods ---- */

static void pod_gone(sim_glue *g, glue_pod *gp) {
  if (gp->state == OBJ_LIVE) {
    kb_glue_write_begin(g);
    kb_k8s_delete(g->st, g->r_pods, gp->ns, gp->name, NULL, NULL, NULL);
    kb_glue_write_end(g);
  }
  gp->state = OBJ_GONE;
}

/* The model's pod `gen` took over the id: the record starts afresh. */
static void pod_renew(sim_glue *g, glue_pod *gp, uint32_t gen) {
  pod_gone(g, gp);
  free(gp->ns), free(gp->name), free(gp->container);
  *gp = (glue_pod){.gen = gen};
}

static const char *wf_uid(sim_glue *g, const char *ns, const char *wf) {
  const cJSON *o = kb_k8s_peek(g->st, g->r_workflows, ns, wf);
  return o ? kb_k8s_meta_str(o, "uid") : NULL;
}

/* Lists the pod among the run's (out of memory: it is just not listed). */
static void run_add_pod(glue_run *r, int pod) {
  if (r->n_pods == r->cap_pods) {
    size_t cap = r->cap_pods ? r->cap_pods * 2 : 4;
    int *p = realloc(r->pods, cap * sizeof *p);
    if (!p) return;
    r->pods = p;
    r->cap_pods = cap;
  }
  r->pods[r->n_pods++] = pod;
}

/* The pod a client made for the run: the record names it, nothing is
 * created. -1 when it is gone already. */
static int pod_adopt(sim_glue *g, glue_pod *gp, const kb_sim_pod_info *pi, glue_run *r,
                     const char *ns, const char *name) {
  const char *ctr = r->ops && r->ud && r->ops->container ? r->ops->container(r->ud, pi->run, pi->step)
                                                         : NULL;
  gp->ns = strdup(ns);
  gp->name = strdup(name);
  gp->container = strdup(ctr ? ctr : "main");
  if (!gp->ns || !gp->name || !gp->container || !kb_k8s_peek(g->st, g->r_pods, ns, name)) return -1;
  gp->bound = 0;
  run_add_pod(r, pi->id);
  return 0;
}

/* The model pod's latest state on o (the object about to be created, or
 * a copy of the stored one): its node once bound, its status, and Argo's
 * completed=true once it ended (Argo's controller labels a pod it has seen
 * finish so; other pods have no such label). However often the pod changed
 * since the mirror last wrote it, this is one write. */
static void pod_state(sim_glue *g, glue_pod *gp, cJSON *o, const kb_sim_pod_info *pi) {
  cJSON *spec = cJSON_GetObjectItemCaseSensitive(o, "spec");
  if (pi->node && !gp->bound && spec) {
    kb_k8s_set_str(spec, "nodeName", pi->node);
    gp->bound = 1;
  }
  cJSON *status = kb_glue_pod_status(g, pi, cJSON_GetObjectItemCaseSensitive(spec, "containers"));
  if (status) {
    cJSON_DeleteItemFromObjectCaseSensitive(o, "status");
    cJSON_AddItemToObject(o, "status", status);
  }
  if (pi->phase != KB_SIM_POD_SUCCEEDED && pi->phase != KB_SIM_POD_FAILED) return;
  cJSON *md = cJSON_GetObjectItemCaseSensitive(o, "metadata");
  const cJSON *labels = cJSON_GetObjectItemCaseSensitive(md, "labels");
  const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(labels, "workflows.argoproj.io/completed"));
  if (v && !strcmp(v, "false")) kb_k8s_set_meta(md, "labels", "workflows.argoproj.io/completed", "true");
}

static int pod_create(sim_glue *g, glue_pod *gp, const kb_sim_pod_info *pi, glue_run *r) {
  if (r && r->adopt_name) return pod_adopt(g, gp, pi, r, r->adopt_ns, r->adopt_name);
  cJSON *o = owned(r) && r->ops->pod && r->ud ? r->ops->pod(r->ud, pi->run, pi->step) : NULL;
  /* the Workflow's uid as the mirror made it, else as stored (a peek parses it) */
  const char *uid = r && r->wf_uid && r->wf_name && !strcmp(r->wf_name, pi->workflow)
                        ? r->wf_uid : NULL;
  if (!o) o = kb_argo_server_pod(g, pi, uid ? uid : wf_uid(g, pi->namespace_, pi->workflow));
  if (!o) return -1;
  cJSON *md = cJSON_GetObjectItemCaseSensitive(o, "metadata");
  const char *ns = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(md, "namespace"));
  const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(md, "name"));
  const char *ctr = owned(r) && r->ops->container && r->ud
                        ? r->ops->container(r->ud, pi->run, pi->step) : NULL;
  gp->ns = strdup(ns ? ns : pi->namespace_);
  gp->name = strdup(name ? name : pi->name);
  gp->container = strdup(ctr ? ctr : "main");
  gp->bound = 0;
  /* created as it is now: a pod the mirror reaches late (a backlog) is one
   * ADDED with its latest state, not a replay of every step it took */
  pod_state(g, gp, o, pi);
  kb_glue_ensure_namespace(g, gp->ns);
  kb_k8s_error e;
  kb_glue_write_begin(g);
  g->creating_pod++;
  int rc = kb_k8s_create_take(g->st, g->r_pods, gp->ns, o, K8S_WHOLE, NULL, &e);
  g->creating_pod--;
  kb_glue_write_end(g);
  if (rc < 0) {
    kb_log(KB_LOG_WARN, "simulator: cannot mirror pod %s/%s: %s", gp->ns, gp->name, e.message);
    return -1;
  }
  if (r) run_add_pod(r, pi->id);
  return 0;
}

/* The stored pod takes the model's latest state: one write of both halves
 * (spec.nodeName, status), as a kubelet and a scheduler would in two.
 * -404 when the pod is gone from the store. */
static int pod_write(sim_glue *g, glue_pod *gp, const kb_sim_pod_info *pi) {
  k8s_entry *e = kb_k8s_entry_find(g->st, g->r_pods, gp->ns, gp->name);
  const cJSON *cur = e ? kb_k8s_entry_tree(g->st, e) : NULL;
  if (!cur) return -404;
  cJSON *o = cJSON_Duplicate(cur, 1);
  if (!o) return -1;
  pod_state(g, gp, o, pi);
  kb_glue_write_begin(g);
  int rc = kb_k8s_replace_entry(g->st, g->r_pods, e, o, K8S_WHOLE, NULL, NULL);
  kb_glue_write_end(g);
  return rc;
}

/* A container's output is in its log before the pod shows it terminated
 * (as on a node), so `logs -f`, which ends when the pod does, gets the
 * last line: the log first, then the pod's write. */
static void pod_logs(sim_glue *g, glue_pod *gp, const kb_sim_pod_info *pi) {
  int started = !strcmp(pi->container_state, "running") ||
                (!strcmp(pi->container_state, "terminated") && pi->started_at >= 0);
  if (started && !gp->started_logged) {
    gp->started_logged = 1;
    kb_glue_logs_started(g, pi, gp->ns, gp->name, gp->container);
  }
  if (!strcmp(pi->container_state, "terminated") && !gp->ended_logged) {
    gp->ended_logged = 1;
    kb_glue_logs_ended(g, pi, gp->ns, gp->name, gp->container);
  }
}

/* The pod's latest state, in one write however many times it changed since
 * the last (the dirty set holds it once). */
static void mirror_pod(sim_glue *g, int id) {
  glue_pod *gp = pod_rec(g, id);
  if (!gp) return;
  kb_sim_pod_info pi;
  int found = kb_sim_pod_get(g->sim, id, &pi) == 0;
  if (found && gp->gen != pi.gen) pod_renew(g, gp, pi.gen);
  if (gp->state == OBJ_GONE) return;
  if (!found) {
    pod_gone(g, gp);
    return;
  }
  kb_sim_run_info ri;
  glue_run *r = pi.run >= 0 && kb_sim_run_get(g->sim, pi.run, &ri) == 0
                    ? run_rec_gen(g, pi.run, ri.gen) : NULL;
  if (owned(r) && !r->ud) { /* its owner is gone: so are its pods */
    gp->state = OBJ_GONE;
    return;
  }
  if (gp->state == OBJ_NONE) {
    int adopted = r && r->adopt_name; /* the client's pod: written below */
    if (pod_create(g, gp, &pi, r) < 0) {
      gp->state = OBJ_GONE;
      return;
    }
    gp->state = OBJ_LIVE;
    if (!adopted) {
      /* nobody follows the logs of a pod that was not there: they come
       * after it, when a training pod's command can be read from it */
      pod_logs(g, gp, &pi);
      if (owned(r)) dirty_add(&g->d_runs, (uint32_t)pi.run);
      return;
    }
  }
  if (!kb_k8s_entry_find(g->st, g->r_pods, gp->ns, gp->name)) {
    gp->state = OBJ_GONE; /* deleted through the API (or its owner) */
    return;
  }
  pod_logs(g, gp, &pi);
  if (pod_write(g, gp, &pi) == -404) {
    gp->state = OBJ_GONE;
    return;
  }
  if (owned(r)) dirty_add(&g->d_runs, (uint32_t)pi.run);
}

/* Of a backlog, a terminated pod with pod_gc terminated pods queued after
 * it would be created, then deleted by the terminated-pod GC (ctl_podgc.c:
 * the oldest go first, and every pod written after it is newer) before
 * the backlog is through: it is not written at all, nor its logs. Only
 * pods no controller owns (a Job counts its pods from the store). The scan
 * walks the queue from its newest end, again once it grew by a quarter of
 * the threshold. */
static void skip_collected(sim_glue *g) {
  dirty_set *d = &g->d_pods;
  if (!g->pod_gc || dirty_count(d) <= g->pod_gc || d->added - g->gc_scanned < g->pod_gc / 4) return;
  g->gc_scanned = d->added;
  size_t newer = 0;
  for (size_t i = d->n; i-- > d->head;) {
    kb_sim_pod_info pi;
    kb_sim_run_info ri;
    glue_pod *gp = pod_rec(g, (int)d->v[i]);
    if (!gp || kb_sim_pod_get(g->sim, (int)d->v[i], &pi) < 0) continue;
    if (pi.phase != KB_SIM_POD_SUCCEEDED && pi.phase != KB_SIM_POD_FAILED) continue;
    if (gp->gen == pi.gen && gp->state != OBJ_NONE) continue; /* written (or gone) */
    if (pi.run < 0 || kb_sim_run_get(g->sim, pi.run, &ri) < 0) continue;
    /* an owner names its run (kb_glue_own_run) before the run has pods */
    if ((size_t)pi.run < g->n_runs && g->runs[pi.run].gen == ri.gen && owned(&g->runs[pi.run])) continue;
    if (++newer <= g->pod_gc) continue;
    if (gp->gen != pi.gen) pod_renew(g, gp, pi.gen);
    gp->state = OBJ_GONE;
  }
}

/* ---- runs: KFP workflows ---- */

void kb_glue_workflow_status(sim_glue *g, int run, const char *ns, const char *name) {
  const cJSON *cur = kb_k8s_peek(g->st, g->r_workflows, ns, name);
  cJSON *status = cur ? kb_sim_run_workflow_status(g->sim, run) : NULL;
  if (!status) return;
  cJSON *o = cJSON_Duplicate(cur, 1);
  cJSON *md = cJSON_GetObjectItemCaseSensitive(o, "metadata");
  cJSON *ph = cJSON_GetObjectItemCaseSensitive(status, "phase");
  if (cJSON_IsString(ph) && !ph->valuestring[0]) cJSON_SetValuestring(ph, "Pending");
  const char *phase = cJSON_GetStringValue(ph);
  if (phase && *phase) kb_k8s_set_meta(md, "labels", "workflows.argoproj.io/phase", phase);
  const char *done = phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed") ||
                               !strcmp(phase, "Error")) ? "true" : "false";
  kb_k8s_set_meta(md, "labels", "workflows.argoproj.io/completed", done);
  cJSON_DeleteItemFromObjectCaseSensitive(o, "status");
  cJSON_AddItemToObject(o, "status", status);
  kb_glue_write_begin(g);
  kb_k8s_update(g->st, g->r_workflows, ns, name, o, 0, NULL, NULL);
  kb_glue_write_end(g);
  cJSON_Delete(o);
}

void kb_glue_kfp_workflow(sim_glue *g, int run) {
  kb_sim_run_info ri;
  if (kb_sim_run_get(g->sim, run, &ri) < 0) { /* deleted (and freed) */
    glue_run *r = run_rec(g, run);
    if (r) workflow_gone(g, r);
    return;
  }
  glue_run *r = run_rec_gen(g, run, ri.gen);
  if (!r || r->wf_state == OBJ_GONE) return;
  if (r->wf_state == OBJ_NONE) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "apiVersion", "argoproj.io/v1alpha1");
    cJSON_AddStringToObject(o, "kind", "Workflow");
    cJSON *md = cJSON_AddObjectToObject(o, "metadata");
    cJSON_AddStringToObject(md, "name", ri.workflow);
    cJSON_AddStringToObject(md, "namespace", ri.namespace_);
    const char *id = g->kfp ? kb_sim_kfp_run_id_of(g->kfp, run) : NULL;
    cJSON *labels = cJSON_AddObjectToObject(md, "labels");
    if (id) cJSON_AddStringToObject(labels, "pipeline/runid", id);
    cJSON_AddStringToObject(labels, "pipelines.kubeflow.org/v2_component", "true");
    cJSON_AddStringToObject(labels, "workflows.argoproj.io/completed", "false");
    cJSON *ann = cJSON_AddObjectToObject(md, "annotations");
    cJSON_AddStringToObject(ann, "pipelines.kubeflow.org/run_name", ri.name);
    cJSON_AddStringToObject(ann, KB_SIM_MIRRORED, "kfp"); /* not for the workflow controller */
    cJSON_AddItemToObject(o, "spec", kb_glue_workflow_spec(g, ri.pipeline));
    kb_glue_ensure_namespace(g, ri.namespace_);
    kb_k8s_error e;
    kb_glue_write_begin(g);
    int rc = kb_k8s_create(g->st, g->r_workflows, ri.namespace_, o, 0, NULL, &e);
    kb_glue_write_end(g);
    cJSON_Delete(o);
    if (rc < 0) {
      kb_log(KB_LOG_ERROR, "simulator: cannot mirror workflow %s/%s: %s", ri.namespace_,
             ri.workflow, e.message);
      r->wf_state = OBJ_GONE;
      return;
    }
    r->wf_state = OBJ_LIVE;
    const char *uid = wf_uid(g, ri.namespace_, ri.workflow);
    r->wf_uid = uid ? strdup(uid) : NULL;
    r->wf_ns = strdup(ri.namespace_);
    r->wf_name = strdup(ri.workflow);
  }
  if (!kb_k8s_peek(g->st, g->r_workflows, ri.namespace_, ri.workflow)) {
    /* Deleted through the API: its pods stop. A KFP run stays in KFP (the
     * API server still holds the id), so it is stopped, not freed. */
    workflow_forget(r);
    if (g->kfp && kb_sim_kfp_run_id_of(g->kfp, run)) kb_sim_run_terminate(g->sim, run, NULL);
    else kb_sim_run_delete(g->sim, run, NULL);
    return;
  }
  kb_glue_workflow_status(g, run, ri.namespace_, ri.workflow);
}

static void mirror_run(sim_glue *g, int run) {
  kb_sim_run_info ri;
  glue_run *r = kb_sim_run_get(g->sim, run, &ri) == 0 ? run_rec_gen(g, run, ri.gen)
                                                     : run_rec(g, run);
  if (!r) return;
  if (owned(r)) {
    if (r->ud && r->ops->changed) r->ops->changed(r->ud, run);
    return;
  }
  kb_glue_kfp_workflow(g, run);
}

/* ---- flush ---- */

void kb_glue_flush(sim_glue *g) {
  g->looked = 1;
  flush(g, 0);
}

size_t kb_glue_backlog(const sim_glue *g) {
  uint64_t end = kb_sim_event_end(g->sim);
  return dirty_count(&g->d_runs) + dirty_count(&g->d_pods) + dirty_count(&g->d_nodes) +
         (size_t)(end > g->ev_next ? end - g->ev_next : 0);
}

/* A request's flush when the view is far behind the model (10,000 runs
 * just finished: half a million changes, 17 s of CPU with every pod kept):
 * it writes REQUEST_FLUSH_CPU worth, the oldest first, and the request is
 * answered from the view as it then stands, consistent but behind, as an
 * apiserver is behind lagging kubelets; idle turns write the rest, and
 * watchers get it as events. A smaller backlog (every test's) is written
 * whole first, so a request sees all the model did. */
#define REQUEST_BACKLOG_MAX 50000
#define REQUEST_FLUSH_CPU 0.040

void kb_glue_set_request_flush(sim_glue *g, size_t backlog_max, double cpu_s) {
  g->request_backlog_max = backlog_max;
  g->request_flush_cpu = cpu_s;
}

void kb_glue_flush_all(sim_glue *g) {
  g->looked = 1;
  size_t behind = kb_glue_backlog(g);
  if (behind <= g->request_backlog_max) {
    flush(g, 2);
    return;
  }
  flush(g, 3);
  if (!g->said_behind) {
    g->said_behind = 1;
    kb_log(KB_LOG_INFO, "simulator: the Kubernetes view is %zu changes behind the model; requests "
           "are answered from it as it stands while it catches up (kbrun_sim_k8s_mirror_backlog)",
           behind);
  }
}

void kb_glue_reading(sim_glue *g, const char *path) {
  if (path && strstr(path, "/apis/coordination.k8s.io/")) kb_k8s_ctls_leases_read(g->apps);
}

#define TRIM_EVERY 64 /* objects mirrored between trims in a top-level flush */
#define FLUSH_BUDGET 64 /* objects an idle turn mirrors at most */
#define NODES_EVERY_MS 100 /* see flush */
#define FLUSH_CPU 0.010 /* and seconds of CPU it takes at most (one object more) */

static void flush(sim_glue *g, int top) {
  if (g->flushing || g->stopped) return;
  if (!g->apps_clocked && g->apps_clock && g->looked) { /* as lazy as the mirror */
    g->apps_clocked = 1;
    kb_k8s_ctls_set_clock(g->apps, g->apps_clock);
  }
  g->flushing = 1;
  kb_sim_sync(g->sim);
  skip_collected(g);
  /* Owners react to their runs by changing the model, which dirties more:
   * a few rounds settle it (anything left waits for the next idle turn). */
  /* An idle turn does FLUSH_BUDGET objects and leaves the rest dirty for
   * the next one, so the requests in between wait for one slice, not for
   * a burst of thousands of pods; a request's own flush does everything. */
  size_t budget = top == 1 ? FLUSH_BUDGET : SIZE_MAX;
  double deadline = top == 1 ? thread_cpu() + FLUSH_CPU
                  : top == 3 ? thread_cpu() + g->request_flush_cpu : 0;
#define MORE() (budget && (!deadline || thread_cpu() < deadline) ? 1 : (budget = 0))
  for (int round = 0; round < 8 && budget; round++) {
    /* what is dirty as the round starts (what its writes dirty waits for
     * the next round) */
    size_t n = dirty_count(&g->d_runs);
    for (size_t i = 0; i < n && MORE(); i++, budget--) {
      mirror_run(g, (int)dirty_pop(&g->d_runs));
      if (top && i % TRIM_EVERY == TRIM_EVERY - 1) trim(g);
    }
    n = dirty_count(&g->d_pods);
    for (size_t i = 0; i < n && MORE(); i++, budget--) {
      mirror_pod(g, (int)dirty_pop(&g->d_pods));
      if (top && i % TRIM_EVERY == TRIM_EVERY - 1) trim(g);
    }
    /* A node changes with every pod bound to or leaving it: amid a backlog
     * of pods an idle turn writes nodes at most every NODES_EVERY_MS (a
     * request's flush, and the turn that ends the backlog, always) */
    if (top != 1 || !dirty_count(&g->d_pods) || uv_now(g->loop) - g->nodes_at >= NODES_EVERY_MS) {
      g->nodes_at = uv_now(g->loop);
      n = dirty_count(&g->d_nodes);
      for (size_t i = 0; i < n && MORE(); i++, budget--) kb_glue_mirror_node(g, (int)dirty_pop(&g->d_nodes));
    }
    if (g->events_dirty && MORE()) budget -= kb_glue_mirror_events(g, budget);
    if (!kb_glue_backlog(g)) break;
  }
  if (!kb_glue_backlog(g) && g->idle_on) {
    uv_idle_stop(&g->idle);
    g->idle_on = 0;
  }
  g->flushing = 0;
}

/* ---- lifecycle ---- */

void kb_glue_ctl_free(glue_ctl *c) {
  if (c) c->free(c);
}

sim_glue *kb_glue_new(kb_sim *sim, kb_k8s_store *st, kb_sim_kfp *kfp, uv_loop_t *loop) {
  sim_glue *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->sim = sim;
  g->request_backlog_max = REQUEST_BACKLOG_MAX;
  g->request_flush_cpu = REQUEST_FLUSH_CPU;
  g->st = st;
  g->kfp = kfp;
  g->loop = loop;
  g->rng = 0x6b62727573696dull;
  g->pod_gc = KB_K8S_POD_GC_THRESHOLD;
  g->r_pods = kb_k8s_store_lookup(st, "", "v1", "pods");
  g->r_nodes = kb_k8s_store_lookup(st, "", "v1", "nodes");
  g->r_events = kb_k8s_store_lookup(st, "", "v1", "events");
  g->r_namespaces = kb_k8s_store_lookup(st, "", "v1", "namespaces");
  g->r_workflows = kb_k8s_store_lookup(st, "argoproj.io", "v1alpha1", "workflows");
  if (!g->r_pods || !g->r_nodes || !g->r_events || !g->r_namespaces || !g->r_workflows) {
    free(g);
    return NULL;
  }
  return g;
}

void kb_glue_set_kfp(sim_glue *g, kb_sim_kfp *kfp) { g->kfp = kfp; }

void kb_glue_serving(sim_glue *g, kb_vclock *clock, const char *ip, int port) {
  g->apps_clock = clock;
  kb_k8s_ctls_set_apiserver(g->apps, ip, port);
}

int kb_glue_start(sim_glue *g) {
  if (uv_idle_init(g->loop, &g->idle)) return -1;
  g->idle.data = g;
  g->idle_init = 1;
  if (uv_check_init(g->loop, &g->trim)) return -1;
  g->trim.data = g;
  uv_check_start(&g->trim, on_check);
  uv_unref((uv_handle_t *)&g->trim); /* it keeps no loop alive */
  for (size_t i = 0; i < kb_sim_node_count(g->sim); i++) kb_glue_mirror_node(g, (int)i);
  g->ev_next = kb_sim_event_end(g->sim);
  g->ctl[0] = kb_glue_job_start(g);
  g->ctl[1] = kb_glue_workflow_start(g);
  g->ctl[2] = kb_glue_training_start(g);
  g->ctl[3] = kb_glue_pod_start(g);
  g->ctl[4] = kb_glue_pdb_start(g);
  g->ctl[5] = kb_glue_nodes_start(g);
  g->ctl[6] = kb_glue_cron_start(g);
  g->apps = kb_k8s_ctls_start(g->st);
  kb_sim_set_observer(g->sim, observer, g);
  for (size_t i = 0; i < sizeof g->ctl / sizeof g->ctl[0]; i++)
    if (!g->ctl[i]) return -1;
  return g->apps ? 0 : -1;
}

void kb_glue_set_pod_gc(sim_glue *g, size_t threshold) {
  g->pod_gc = threshold;
  kb_k8s_ctls_set_pod_gc(g->apps, threshold);
}

void kb_glue_stop(sim_glue *g) {
  if (!g || g->stopped) return;
  g->stopped = 1;
  kb_sim_set_observer(g->sim, NULL, NULL);
  for (size_t i = 0; i < sizeof g->ctl / sizeof g->ctl[0]; i++) {
    kb_glue_ctl_free(g->ctl[i]);
    g->ctl[i] = NULL;
  }
  kb_k8s_ctls_free(g->apps);
  g->apps = NULL;
  if (g->idle_init) {
    uv_close((uv_handle_t *)&g->idle, NULL);
    uv_close((uv_handle_t *)&g->trim, NULL);
  }
}

void kb_glue_free(sim_glue *g) {
  if (!g) return;
  for (size_t i = 0; i < g->n_pods; i++) {
    free(g->pods[i].ns);
    free(g->pods[i].name);
    free(g->pods[i].container);
  }
  free(g->pods);
  for (size_t i = 0; i < g->n_runs; i++) {
    free(g->runs[i].pods);
    free(g->runs[i].wf_ns);
    free(g->runs[i].wf_name);
    free(g->runs[i].wf_uid);
    free(g->runs[i].adopt_ns);
    free(g->runs[i].adopt_name);
  }
  free(g->runs);
  dirty_set *ds[] = {&g->d_pods, &g->d_nodes, &g->d_runs};
  for (int i = 0; i < 3; i++) {
    free(ds[i]->v);
    free(ds[i]->flag);
  }
  if (g->ev_keys)
    for (size_t i = 0; i < MAX_EVENT_OBJECTS; i++) free(g->ev_keys[i]);
  free(g->ev_keys);
  free(g);
}
