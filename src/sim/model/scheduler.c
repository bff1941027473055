/* The scheduler: places pending pods on nodes by cordon
 * (spec.unschedulable), taints and tolerations, nodeSelector, required node
 * affinity and resource requests (cpu, memory, nvidia.com/gpu, pod count).
 *
 * Pods wait in a FIFO; a pass places as many as the token bucket allows
 * (D7: pods_per_s, burst of one second's worth). A pod no node can take
 * stays Pending with PodScheduled=False/Unschedulable and a FailedScheduling
 * event, and moves to the unschedulable list; every release of capacity
 * (a pod finishing, a node coming back) puts those pods back at the front
 * of the queue. Among feasible nodes the least loaded wins, load counted as
 * kube-scheduler scores it: requests, with 100m for a pod without a cpu
 * request; ties go to the lowest node index (deterministic). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_internal.h"

static uint32_t *list_head(kb_sim *sim, int which) { return which == 1 ? &sim->q_head : &sim->u_head; }
static uint32_t *list_tail(kb_sim *sim, int which) { return which == 1 ? &sim->q_tail : &sim->u_tail; }

static void push_back(kb_sim *sim, int which, uint32_t pi) {
  uint32_t *h = list_head(sim, which), *t = list_tail(sim, which);
  sim->pods[pi].q_next = SIM_NONE;
  sim->pods[pi].in_queue = (uint8_t)which;
  if (*t == SIM_NONE) *h = pi;
  else sim->pods[*t].q_next = pi;
  *t = pi;
  if (which == 1) sim->q_len++;
  else sim->u_len++;
}

static uint32_t pop_front(kb_sim *sim) {
  uint32_t pi = sim->q_head;
  if (pi == SIM_NONE) return pi;
  sim->q_head = sim->pods[pi].q_next;
  if (sim->q_head == SIM_NONE) sim->q_tail = SIM_NONE;
  sim->pods[pi].q_next = SIM_NONE;
  sim->pods[pi].in_queue = 0;
  sim->q_len--;
  return pi;
}

void kb_sim_sched_kick(kb_sim *sim) {
  if (sim->pass_scheduled || sim->q_head == SIM_NONE) return;
  double at = sim->now;
  double rate = sim->cfg->sched_pods_per_s;
  if (rate > 0) {
    double tokens = sim->tokens + (sim->now - sim->tokens_t) * rate;
    if (tokens > rate) tokens = rate;
    if (tokens < 1) at += (1 - tokens) / rate;
  }
  sim->pass_scheduled = 1;
  kb_sim_schedule(sim, at, EV_SCHEDULE, 0, 0);
}

void kb_sim_sched_enqueue(kb_sim *sim, uint32_t pi) {
  push_back(sim, 1, pi);
  kb_sim_sched_kick(sim);
}

void kb_sim_sched_remove(kb_sim *sim, uint32_t pi) {
  int which = sim->pods[pi].in_queue;
  if (!which) return;
  uint32_t *h = list_head(sim, which), *t = list_tail(sim, which);
  uint32_t prev = SIM_NONE;
  for (uint32_t q = *h; q != SIM_NONE; prev = q, q = sim->pods[q].q_next) {
    if (q != pi) continue;
    uint32_t next = sim->pods[q].q_next;
    if (prev == SIM_NONE) *h = next;
    else sim->pods[prev].q_next = next;
    if (*t == pi) *t = prev;
    break;
  }
  if (which == 1) sim->q_len--;
  else sim->u_len--;
  sim->pods[pi].in_queue = 0;
  sim->pods[pi].q_next = SIM_NONE;
}

void kb_sim_sched_capacity_freed(kb_sim *sim) {
  if (sim->u_head == SIM_NONE) return;
  for (uint32_t q = sim->u_head; q != SIM_NONE; q = sim->pods[q].q_next) sim->pods[q].in_queue = 1;
  sim->pods[sim->u_tail].q_next = sim->q_head;
  if (sim->q_tail == SIM_NONE) sim->q_tail = sim->u_tail;
  sim->q_head = sim->u_head;
  sim->q_len += sim->u_len;
  sim->u_head = sim->u_tail = SIM_NONE;
  sim->u_len = 0;
  kb_sim_sched_kick(sim);
}

/* ---- feasibility ----
 * The filters of kube-scheduler's default profile that the model has, in
 * its order (NodeUnschedulable, TaintToleration, NodeAffinity,
 * NodeResourcesFit): a node is refused for the first that fails, and the
 * FailedScheduling message counts nodes per reason, in its words. */

enum { R_UNSCHED, R_NOTREADY, R_TAINT, R_SELECTOR, R_PODS, R_CPU, R_MEM, R_GPU, R_COUNT };

static int label_of(const sim_node *n, const char *key, const char **value) {
  for (size_t i = 0; i < n->n_labels; i++)
    if (!strcmp(n->labels[i].key, key)) {
      *value = n->labels[i].value;
      return 1;
    }
  return 0;
}

static int tolerates(const sim_step *st, const char *key, const char *value, const char *effect) {
  for (size_t i = 0; i < st->info.n_tolerations; i++) {
    const kb_sim_taint *o = &st->tolerations[i];
    int exists = !strcmp(st->tol_ops[i], "Exists");
    if (*o->effect && strcmp(o->effect, effect)) continue;
    if (!*o->key && exists) return 1;
    if (strcmp(o->key, key)) continue;
    if (exists || !strcmp(o->value, value)) return 1;
  }
  return 0;
}

/* First NoSchedule/NoExecute taint the step does not tolerate, or NULL. */
static const kb_sim_taint *untolerated(const sim_node *n, const sim_step *st) {
  for (size_t i = 0; i < n->n_taints; i++) {
    const kb_sim_taint *t = &n->taints[i];
    if (!strcmp(t->effect, "PreferNoSchedule")) continue;
    if (!tolerates(st, t->key, t->value, t->effect)) return t;
  }
  return NULL;
}

static int expr_match(const sim_node *n, const sim_nsexpr *e) {
  const char *v = NULL;
  int has = label_of(n, e->key, &v);
  switch (e->op) {
  case NS_EXISTS: return has;
  case NS_NOTEXIST: return !has;
  case NS_GT:
  case NS_LT: {
    if (!has || !e->n_values) return 0;
    char *end;
    long long a = strtoll(v, &end, 10), b = strtoll(e->values[0], NULL, 10);
    if (end == v || *end) return 0;
    return e->op == NS_GT ? a > b : a < b;
  }
  default: break;
  }
  int in = 0;
  for (size_t i = 0; has && i < e->n_values && !in; i++) in = !strcmp(v, e->values[i]);
  return e->op == NS_IN ? in : !in;
}

/* Required node affinity: some term whose every expression matches (a
 * term without expressions matches no node, as in Kubernetes). */
static int affinity_match(const sim_node *n, const sim_step *st) {
  if (!st->n_terms) return 1;
  for (size_t t = 0; t < st->n_terms; t++) {
    int any = 0, ok = 1;
    for (size_t i = 0; i < st->n_affinity && ok; i++) {
      if (st->affinity[i].term != t) continue;
      any = 1;
      ok = expr_match(n, &st->affinity[i]);
    }
    if (any && ok) return 1;
  }
  return 0;
}

/* Bitmask of reasons the node cannot take the pod (0: it can). */
static unsigned check_node(const sim_node *n, const sim_step *st, const kb_sim_taint **taint) {
  if (n->unschedulable && !tolerates(st, "node.kubernetes.io/unschedulable", "", "NoSchedule"))
    return 1u << R_UNSCHED;
  if (!n->ready) return 1u << R_NOTREADY;
  if ((*taint = untolerated(n, st))) return 1u << R_TAINT;
  for (size_t i = 0; i < st->info.n_node_selector; i++) {
    const char *v;
    if (!label_of(n, st->selector[i].key, &v) || strcmp(v, st->selector[i].value))
      return 1u << R_SELECTOR;
  }
  if (!affinity_match(n, st)) return 1u << R_SELECTOR;
  unsigned r = 0;
  if (n->npods + 1 > n->max_pods) r |= 1u << R_PODS;
  if (n->req_cpu + st->info.cpu_m > n->cpu_m) r |= 1u << R_CPU;
  if (n->req_mem + st->info.memory > n->memory) r |= 1u << R_MEM;
  if (n->req_gpu + st->info.gpu > n->gpu) r |= 1u << R_GPU;
  return r;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static const char *intern_msg(kb_sim *sim, const char *msg) {
  /* The few distinct messages repeat for thousands of pods. */
  static const int slots = 64;
  for (size_t i = 0; i < sim->n_msgs; i++)
    if (!strcmp(sim->msgs[i], msg)) return sim->msgs[i];
  const char *s = kb_sim_arena_strdup(&sim->arena, msg);
  if (s && sim->n_msgs < (size_t)slots) sim->msgs[sim->n_msgs++] = s;
  return s;
}

/* Untolerated taints are counted per taint, as kube-scheduler words them
 * ("2 node(s) had untolerated taint {k: v}"). */
#define MAX_TAINT_KINDS SIM_TAINT_KINDS
typedef sim_refusals refusals;
_Static_assert(R_COUNT == SIM_REFUSAL_REASONS, "one count per reason");

static void count_taint(refusals *rf, const kb_sim_taint *t) {
  char s[160];
  snprintf(s, sizeof s, "%s: %s", t->key, t->value ? t->value : "");
  for (int i = 0; i < rf->n_taint; i++)
    if (!strcmp(rf->taint[i], s)) {
      rf->taint_n[i]++;
      return;
    }
  int i = rf->n_taint < MAX_TAINT_KINDS ? rf->n_taint++ : MAX_TAINT_KINDS - 1;
  if (rf->taint_n[i]) { /* out of slots: the last one takes the rest */
    rf->taint_n[i]++;
    return;
  }
  snprintf(rf->taint[i], sizeof rf->taint[i], "%s", s);
  rf->taint_n[i] = 1;
}

/* kube-scheduler's FailedScheduling message for the refusals, interned. */
static const char *refusal_message(kb_sim *sim, const refusals *rf) {
  if (sim->last_msg && !memcmp(&sim->last_rf, rf, sizeof *rf)) return sim->last_msg;
  char parts[R_COUNT + MAX_TAINT_KINDS][200];
  const char *sorted[R_COUNT + MAX_TAINT_KINDS];
  int n = 0;
  const unsigned *counts = rf->counts;
  for (int r = 0; r < R_COUNT; r++) {
    if (!counts[r] || r == R_TAINT) continue;
    switch (r) {
    case R_UNSCHED: snprintf(parts[n], sizeof parts[n], "%u node(s) were unschedulable", counts[r]); break;
    case R_NOTREADY:
      snprintf(parts[n], sizeof parts[n], "%u node(s) had untolerated taint {node.kubernetes.io/unreachable: }", counts[r]);
      break;
    case R_SELECTOR:
      snprintf(parts[n], sizeof parts[n], "%u node(s) didn't match Pod's node affinity/selector", counts[r]);
      break;
    case R_PODS: snprintf(parts[n], sizeof parts[n], "%u Too many pods", counts[r]); break;
    case R_CPU: snprintf(parts[n], sizeof parts[n], "%u Insufficient cpu", counts[r]); break;
    case R_MEM: snprintf(parts[n], sizeof parts[n], "%u Insufficient memory", counts[r]); break;
    case R_GPU: snprintf(parts[n], sizeof parts[n], "%u Insufficient nvidia.com/gpu", counts[r]); break;
    }
    sorted[n] = parts[n];
    n++;
  }
  for (int i = 0; i < rf->n_taint; i++) {
    snprintf(parts[n], sizeof parts[n], "%u node(s) had untolerated taint {%s}", rf->taint_n[i], rf->taint[i]);
    sorted[n] = parts[n];
    n++;
  }
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_str);
  char msg[1600];
  int len = snprintf(msg, sizeof msg, "0/%zu nodes are available", sim->n_nodes);
  for (int i = 0; i < n && len < (int)sizeof msg; i++)
    len += snprintf(msg + len, sizeof msg - (size_t)len, "%s%s", i ? ", " : ": ", sorted[i]);
  if (len < (int)sizeof msg) snprintf(msg + len, sizeof msg - (size_t)len, ".");
  const char *m = intern_msg(sim, msg);
  if (m) {
    sim->last_rf = *rf;
    sim->last_msg = m;
  }
  return m;
}

static void refused(kb_sim *sim, uint32_t pi, const char *m) {
  sim_pod *p = &sim->pods[pi];
  if (m && m != p->unsched_msg) {
    p->unsched_msg = m;
    kb_sim_event_emit(sim, "Warning", "FailedScheduling", KB_SIM_KIND_POD, pi, "%s", m);
    kb_sim_touch(sim, KB_SIM_KIND_POD, pi, &p->rv);
  }
  push_back(sim, 2, pi);
}

static int plain(const sim_step *st) {
  return !st->info.n_node_selector && !st->info.n_tolerations && !st->n_terms;
}

/* A pass after capacity freed retries every waiting pod; thousands of
 * alike pods (a storm of bare pods) would each scan every node only to be
 * refused as the one before. */
static int refused_as_before(kb_sim *sim, uint32_t pi, const sim_step *st) {
  if (!plain(st) || !sim->plain_refused.valid || sim->plain_refused.epoch != sim->node_epoch ||
      sim->plain_refused.cpu_m != st->info.cpu_m || sim->plain_refused.memory != st->info.memory ||
      sim->plain_refused.gpu != st->info.gpu)
    return 0;
  refused(sim, pi, sim->plain_refused.msg);
  return 1;
}

static void place(kb_sim *sim, uint32_t pi) {
  const sim_step *st = kb_sim_pod_step(sim, pi);
  if (refused_as_before(sim, pi, st)) return;
  refusals rf;
  memset(&rf, 0, sizeof rf);
  uint32_t best = SIM_NONE;
  double best_score = 0;
  for (size_t i = 0; i < sim->n_nodes; i++) {
    const sim_node *n = &sim->nodes[i];
    const kb_sim_taint *t = NULL;
    unsigned r = check_node(n, st, &t);
    if (r) {
      for (int k = 0; k < R_COUNT; k++)
        if (r & (1u << k)) rf.counts[k]++;
      if (t) count_taint(&rf, t);
      continue;
    }
    int64_t c = st->info.cpu_m > 100 ? st->info.cpu_m : 100;
    double score = (double)(n->score_cpu + c) / (double)n->cpu_m +
                   (double)(n->req_mem + st->info.memory) / (double)n->memory;
    if (best == SIM_NONE || score < best_score) {
      best = (uint32_t)i;
      best_score = score;
    }
  }
  if (best == SIM_NONE) {
    const char *m = refusal_message(sim, &rf);
    if (plain(st) && m) {
      sim->plain_refused.epoch = sim->node_epoch;
      sim->plain_refused.cpu_m = st->info.cpu_m;
      sim->plain_refused.memory = st->info.memory;
      sim->plain_refused.gpu = st->info.gpu;
      sim->plain_refused.msg = m;
      sim->plain_refused.valid = 1;
    }
    refused(sim, pi, m);
    return;
  }
  sim_node *n = &sim->nodes[best];
  sim_pod *p = &sim->pods[pi];
  n->req_cpu += st->info.cpu_m;
  n->req_mem += st->info.memory;
  n->req_gpu += st->info.gpu;
  n->score_cpu += st->info.cpu_m > 100 ? st->info.cpu_m : 100;
  n->npods++;
  p->node = best;
  p->scheduled = 1;
  p->scheduled_at = sim->now;
  p->unsched_msg = NULL;
  kb_sim_touch(sim, KB_SIM_KIND_NODE, best, &n->rv);
  kb_sim_event_emit(sim, "Normal", "Scheduled", KB_SIM_KIND_POD, pi,
                 "Successfully assigned %s/%s to %s", sim->runs[p->run].ns, p->name, n->name);
  kb_sim_pod_bound(sim, pi);
}

void kb_sim_sched_pass(kb_sim *sim) {
  sim->pass_scheduled = 0;
  double rate = sim->cfg->sched_pods_per_s;
  if (rate > 0) {
    sim->tokens += (sim->now - sim->tokens_t) * rate;
    if (sim->tokens > rate) sim->tokens = rate;
    sim->tokens_t = sim->now;
  }
  /* Pods that fail now wait in the unschedulable list, so one pass sees
   * each queued pod at most once. */
  size_t budget = sim->q_len;
  while (budget-- && sim->q_head != SIM_NONE && (rate <= 0 || sim->tokens >= 1 - 1e-9)) {
    uint32_t pi = pop_front(sim);
    if (rate > 0) sim->tokens -= 1;
    place(sim, pi);
  }
  kb_sim_sched_kick(sim);
}
