/* Cluster objects: nodes (from the pool config), pods, images, events,
 * and the CPU model of a node.
 *
 * CPU oversubscription (calibration.md, "Taxi fit"): a pod without requests
 * is never refused, it slows down. Each running pod wants `demand` cores;
 * a node's running pods share its cpu by processor sharing: all progress at
 * rate min(1, cpu / sum of demand). The node keeps a work clock V that
 * advances at that rate; a pod that needs W seconds of work at full speed
 * finishes when V reaches V_start + W. A change of the running set only
 * moves V to now and re-plans the single next completion on that node. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_internal.h"

static int node_add_label(sim_node *n, const char *k, const char *v) {
  kb_sim_kv *a = realloc(n->labels, (n->n_labels + 1) * sizeof *a);
  if (!a) return -1;
  n->labels = a;
  /* Keys and values are owned by the config or the arena. */
  a[n->n_labels++] = (kb_sim_kv){(char *)k, (char *)v};
  return 0;
}

int kb_sim_cluster_build(kb_sim *sim, kb_sim_error *err) {
  const kb_sim_config *c = sim->cfg;
  for (size_t p = 0; p < c->n_pools; p++) {
    const kb_sim_pool_config *pc = &c->pools[p];
    for (int i = 0; i < pc->nodes; i++) {
      if (kb_sim_reserve((void **)&sim->nodes, &sim->cap_nodes, sim->n_nodes + 1, sizeof *sim->nodes))
        return kb_sim_fail(err, KB_SIM_ENOMEM, "out of memory");
      sim_node *n = &sim->nodes[sim->n_nodes];
      *n = (sim_node){.pool = (int)p, .ready = 1, .cpu_m = pc->cpu_m, .memory = pc->memory,
                      .gpu = pc->gpu, .max_pods = pc->max_pods, .rate = 1,
                      .run_head = SIM_NONE};
      n->name = kb_sim_arena_printf(&sim->arena, "%s%s-%d", c->node_name_prefix, pc->name, i);
      if (!n->name) return kb_sim_fail(err, KB_SIM_ENOMEM, "out of memory");
      sim->n_nodes++;
      /* The labels a kubelet sets (nodeSelector kubernetes.io/os: linux is
       * common in charts), then the pool's. */
      if (node_add_label(n, c->pool_label, pc->name) ||
          node_add_label(n, "kubernetes.io/hostname", n->name) ||
          node_add_label(n, "kubernetes.io/os", "linux") ||
          node_add_label(n, "kubernetes.io/arch", "amd64"))
        return kb_sim_fail(err, KB_SIM_ENOMEM, "out of memory");
      for (size_t l = 0; l < pc->n_labels; l++)
        if (node_add_label(n, pc->labels[l].key, pc->labels[l].value))
          return kb_sim_fail(err, KB_SIM_ENOMEM, "out of memory");
      if (pc->n_taints) {
        n->taints = malloc(pc->n_taints * sizeof *n->taints);
        if (!n->taints) return kb_sim_fail(err, KB_SIM_ENOMEM, "out of memory");
        memcpy(n->taints, pc->taints, pc->n_taints * sizeof *n->taints); /* strings: the config's */
        n->n_taints = pc->n_taints;
      }
      for (size_t m = 0; m < pc->n_images; m++) {
        int img = kb_sim_image_intern(sim, pc->images[m]);
        if (img < 0 || kb_sim_reserve((void **)&n->images, &n->cap_images, n->n_images + 1,
                                   sizeof *n->images))
          return kb_sim_fail(err, KB_SIM_ENOMEM, "out of memory");
        n->images[n->n_images++] = (sim_image_slot){img, 0};
      }
    }
  }
  return 0;
}

/* Size of an image: the configured size of its repository ("tensorflow/tfx")
 * or of the repository's last path part ("tfx"), else "default". */
static double image_size_mb(const kb_sim_config *c, const char *image) {
  char repo[256];
  snprintf(repo, sizeof repo, "%s", image);
  char *at = strchr(repo, '@');
  if (at) *at = 0;
  char *slash = strrchr(repo, '/');
  char *colon = strrchr(repo, ':');
  if (colon && (!slash || colon > slash)) *colon = 0;
  const char *last = slash ? slash + 1 : repo;
  const char *dflt = NULL;
  for (size_t i = 0; i < c->n_image_sizes; i++) {
    const kb_sim_kv *kv = &c->image_size_mb[i];
    if (!strcmp(kv->key, repo)) return atof(kv->value);
    if (!strcmp(kv->key, "default")) dflt = kv->value;
  }
  for (size_t i = 0; i < c->n_image_sizes; i++)
    if (!strcmp(c->image_size_mb[i].key, last)) return atof(c->image_size_mb[i].value);
  return dflt ? atof(dflt) : 0;
}

int kb_sim_image_intern(kb_sim *sim, const char *image) {
  for (size_t i = 0; i < sim->n_images; i++)
    if (!strcmp(sim->images[i], image)) return (int)i;
  if (kb_sim_reserve((void **)&sim->images, &sim->cap_images, sim->n_images + 1, sizeof *sim->images) ||
      kb_sim_reserve((void **)&sim->image_mb, &sim->cap_image_mb, sim->n_images + 1,
                  sizeof *sim->image_mb))
    return -1;
  if (!(sim->images[sim->n_images] = kb_sim_strdup(image))) return -1;
  sim->image_mb[sim->n_images] = image_size_mb(sim->cfg, image);
  return (int)sim->n_images++;
}

/* When the image is usable on the node. Pulls are serial per node (D9):
 * a new pull starts when the previous one ends; a pod wanting an image that
 * is already being pulled waits for that pull. */
double kb_sim_image_pull_ready(kb_sim *sim, uint32_t node, int image) {
  sim_node *n = &sim->nodes[node];
  for (size_t i = 0; i < n->n_images; i++)
    if (n->images[i].image == image) return n->images[i].ready_at;
  const kb_sim_config *c = sim->cfg;
  double mb = sim->image_mb[image];
  double dur = c->image_pull_fixed + (c->image_pull_mb_per_s > 0 ? mb / c->image_pull_mb_per_s : 0);
  double start = sim->now;
  if (c->image_pull_serial && n->pull_free_at > start) start = n->pull_free_at;
  double ready = start + dur;
  if (c->image_pull_serial) n->pull_free_at = ready;
  if (!kb_sim_reserve((void **)&n->images, &n->cap_images, n->n_images + 1, sizeof *n->images))
    n->images[n->n_images++] = (sim_image_slot){image, ready};
  return ready;
}

int kb_sim_free_push(uint32_t **v, size_t *n, size_t *cap, uint32_t i) {
  if (kb_sim_reserve((void **)v, cap, *n + 1, sizeof **v)) return -1;
  (*v)[(*n)++] = i;
  return 0;
}

static void pod_reset(sim_pod *p, uint32_t gen) {
  *p = (sim_pod){.gen = gen, .run = SIM_NONE, .node = SIM_NONE, .created = -1,
                 .scheduled_at = -1, .started = -1, .finished = -1, .detected = -1,
                 .run_prev = SIM_NONE, .run_next = SIM_NONE, .q_next = SIM_NONE,
                 .phase = KB_SIM_POD_FAILED};
}

uint32_t kb_sim_pod_new(kb_sim *sim) {
  uint32_t pi;
  if (sim->n_free_pods) {
    pi = sim->free_pods[--sim->n_free_pods];
  } else {
    if (kb_sim_reserve((void **)&sim->pods, &sim->cap_pods, sim->n_pods + 1, sizeof *sim->pods))
      return SIM_NONE;
    pi = (uint32_t)sim->n_pods++;
    sim->pods[pi].gen = 0;
  }
  pod_reset(&sim->pods[pi], sim->pods[pi].gen);
  sim->pods[pi].phase = KB_SIM_POD_PENDING;
  return pi;
}

/* A freed slot looks like a dead pod that never existed (phase Failed, no
 * node, no run), so loops over every slot pass it by. */
void kb_sim_pod_free(kb_sim *sim, uint32_t pi) {
  sim_pod *p = &sim->pods[pi];
  free(p->name);
  pod_reset(p, p->gen + 1);
  kb_sim_free_push(&sim->free_pods, &sim->n_free_pods, &sim->cap_free_pods, pi);
}

void kb_sim_event_emit(kb_sim *sim, const char *type, const char *reason, kb_sim_kind kind,
                    uint32_t obj, const char *fmt, ...) {
  size_t cap = sim->cfg->events_capacity ? sim->cfg->events_capacity : 1;
  sim_evrec *e = &sim->evring[sim->ev_end % cap];
  uint32_t gen = kind == KB_SIM_KIND_POD ? sim->pods[obj].gen : 0;
  *e = (sim_evrec){sim->ev_end, sim->now, type, reason, kind, (int)obj, gen, ""};
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
  sim->ev_end++;
  if (sim->ev_end - sim->ev_first > cap) sim->ev_first = sim->ev_end - cap;
  uint64_t rv;
  kb_sim_touch(sim, KB_SIM_KIND_EVENT, (uint32_t)(e->seq % cap), &rv);
}

uint64_t kb_sim_event_first(const kb_sim *sim) { return sim->ev_first; }
uint64_t kb_sim_event_end(const kb_sim *sim) { return sim->ev_end; }

int kb_sim_event_get(const kb_sim *sim, uint64_t seq, kb_sim_event_info *out) {
  if (seq < sim->ev_first || seq >= sim->ev_end) return KB_SIM_ENOENT;
  const sim_evrec *e = &sim->evring[seq % sim->cfg->events_capacity];
  *out = (kb_sim_event_info){e->seq, e->time, e->type, e->reason, e->kind, e->object,
                             e->message, e->object_gen};
  return 0;
}

/* ---- processor sharing ---- */

static void node_advance(kb_sim *sim, sim_node *n) {
  n->vclock += (sim->now - n->vclock_t) * n->rate;
  n->vclock_t = sim->now;
}

static void node_replan(kb_sim *sim, uint32_t ni) {
  sim_node *n = &sim->nodes[ni];
  double cpu = n->cpu_m / 1000.0;
  n->rate = n->demand > cpu && n->demand > 0 ? cpu / n->demand : 1;
  n->gen++;
  double best = INFINITY;
  for (uint32_t p = n->run_head; p != SIM_NONE; p = sim->pods[p].run_next)
    if (sim->pods[p].vtarget < best) best = sim->pods[p].vtarget;
  if (best < INFINITY) {
    double dt = (best - n->vclock) / n->rate;
    kb_sim_schedule(sim, sim->now + (dt > 0 ? dt : 0), EV_NODE_WORK, ni, n->gen);
  }
}

void kb_sim_node_add_running(kb_sim *sim, uint32_t ni, uint32_t pi) {
  sim_node *n = &sim->nodes[ni];
  sim_pod *p = &sim->pods[pi];
  node_advance(sim, n);
  p->vtarget = n->vclock + p->work;
  p->run_prev = SIM_NONE;
  p->run_next = n->run_head;
  if (n->run_head != SIM_NONE) sim->pods[n->run_head].run_prev = pi;
  n->run_head = pi;
  n->demand += p->demand;
  node_replan(sim, ni);
}

static void unlink_running(kb_sim *sim, sim_node *n, uint32_t pi) {
  sim_pod *p = &sim->pods[pi];
  if (p->run_prev != SIM_NONE) sim->pods[p->run_prev].run_next = p->run_next;
  else n->run_head = p->run_next;
  if (p->run_next != SIM_NONE) sim->pods[p->run_next].run_prev = p->run_prev;
  p->run_prev = p->run_next = SIM_NONE;
  n->demand -= p->demand;
  if (n->demand < 1e-9) n->demand = 0;
}

void kb_sim_node_remove_running(kb_sim *sim, uint32_t ni, uint32_t pi) {
  sim_node *n = &sim->nodes[ni];
  node_advance(sim, n);
  unlink_running(sim, n, pi);
  node_replan(sim, ni);
}

void kb_sim_node_work_due(kb_sim *sim, uint32_t ni, uint32_t gen) {
  sim_node *n = &sim->nodes[ni];
  if (gen != n->gen) return; /* re-planned since */
  node_advance(sim, n);
  /* Finish every pod whose work is done (within rounding), in list order
   * from the oldest so simultaneous completions are deterministic. */
  uint32_t done[64];
  size_t nd;
  do {
    nd = 0;
    for (uint32_t p = n->run_head; p != SIM_NONE && nd < 64; p = sim->pods[p].run_next)
      if (sim->pods[p].vtarget <= n->vclock + 1e-9) done[nd++] = p;
    for (size_t i = 0; i < nd; i++) unlink_running(sim, n, done[i]);
    for (size_t i = nd; i-- > 0;) kb_sim_pod_work_done(sim, done[i]);
  } while (nd == 64);
  node_replan(sim, ni);
}

void kb_sim_pod_unbind(kb_sim *sim, uint32_t pi) {
  sim_pod *p = &sim->pods[pi];
  if (p->node == SIM_NONE || p->scheduled != 1) return;
  sim_node *n = &sim->nodes[p->node];
  if (p->run_prev != SIM_NONE || n->run_head == pi) kb_sim_node_remove_running(sim, p->node, pi);
  const sim_step *st = kb_sim_pod_step(sim, pi);
  n->req_cpu -= st->info.cpu_m;
  n->req_mem -= st->info.memory;
  n->req_gpu -= st->info.gpu;
  n->score_cpu -= st->info.cpu_m > 100 ? st->info.cpu_m : 100;
  n->npods--;
  p->scheduled = 2; /* resources released; the node stays for display */
  kb_sim_touch(sim, KB_SIM_KIND_NODE, p->node, &n->rv);
  kb_sim_sched_capacity_freed(sim);
}

/* ---- node queries ---- */

size_t kb_sim_node_count(const kb_sim *sim) { return sim->n_nodes; }

int kb_sim_node_find(const kb_sim *sim, const char *name) {
  for (size_t i = 0; i < sim->n_nodes; i++)
    if (!strcmp(sim->nodes[i].name, name)) return (int)i;
  return -1;
}

int kb_sim_node_get(const kb_sim *sim, int node, kb_sim_node_info *o) {
  if (node < 0 || (size_t)node >= sim->n_nodes) return KB_SIM_ENOENT;
  const sim_node *n = &sim->nodes[node];
  const kb_sim_pool_config *pc = &sim->cfg->pools[n->pool];
  *o = (kb_sim_node_info){.id = node, .name = n->name, .pool = pc->name, .ready = n->ready,
                          .cpu_m = n->cpu_m, .memory = n->memory, .gpu = n->gpu,
                          .max_pods = n->max_pods, .cpu_requested_m = n->req_cpu,
                          .memory_requested = n->req_mem, .gpu_requested = n->req_gpu,
                          .pods = n->npods, .cpu_demand = n->demand, .labels = n->labels,
                          .n_labels = n->n_labels, .taints = n->taints, .n_taints = n->n_taints,
                          .unschedulable = n->unschedulable, .created_at = n->created_at, .resource_version = n->rv};
  double cpu = n->cpu_m / 1000.0;
  o->progress_rate = n->demand > cpu && n->demand > 0 ? cpu / n->demand : 1;
  return 0;
}

/* Strings of clients' writes go to the arena: a node's labels change
 * rarely (kubectl label, cordon), and old info pointers stay valid. */
static char *arena_dup(kb_sim *sim, const char *s) {
  return (char *)kb_sim_arena_strdup(&sim->arena, s ? s : "");
}

int kb_sim_node_set_spec(kb_sim *sim, int node, int unschedulable, const kb_sim_kv *labels,
                         size_t n_labels, const kb_sim_taint *taints, size_t n_taints,
                         kb_sim_error *err) {
  if (node < 0 || (size_t)node >= sim->n_nodes) return kb_sim_fail(err, KB_SIM_ENOENT, "no such node");
  kb_sim_sync(sim);
  sim_node *n = &sim->nodes[node];
  kb_sim_kv *nl = n_labels ? calloc(n_labels, sizeof *nl) : NULL;
  kb_sim_taint *nt = n_taints ? calloc(n_taints, sizeof *nt) : NULL;
  if ((n_labels && !nl) || (n_taints && !nt)) goto oom;
  for (size_t i = 0; i < n_labels; i++)
    if (!(nl[i].key = arena_dup(sim, labels[i].key)) || !(nl[i].value = arena_dup(sim, labels[i].value)))
      goto oom;
  for (size_t i = 0; i < n_taints; i++)
    if (!(nt[i].key = arena_dup(sim, taints[i].key)) || !(nt[i].value = arena_dup(sim, taints[i].value)) ||
        !(nt[i].effect = arena_dup(sim, taints[i].effect)))
      goto oom;
  free(n->labels);
  free(n->taints);
  n->labels = nl;
  n->n_labels = n_labels;
  n->taints = nt;
  n->n_taints = n_taints;
  n->unschedulable = unschedulable;
  kb_sim_touch(sim, KB_SIM_KIND_NODE, (uint32_t)node, &n->rv);
  kb_sim_sched_capacity_freed(sim); /* waiting pods may fit now */
  return 0;
oom:
  free(nl);
  free(nt);
  return kb_sim_fail(err, KB_SIM_ENOMEM, "out of memory");
}
