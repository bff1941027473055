/* The simulator object: construction, shared helpers, summary queries. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb/fnv.h"
#include "sim_internal.h"

int kb_sim_fail(kb_sim_error *err, int code, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    err->code = code;
  }
  return code;
}

char *kb_sim_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  return d ? memcpy(d, s, n) : NULL;
}

int kb_sim_reserve(void **arr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t n = *cap ? *cap : 16;
  while (n < need) n *= 2;
  void *a = realloc(*arr, n * elem);
  if (!a) return -1;
  *arr = a;
  *cap = n;
  return 0;
}

char *kb_sim_printf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *out = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (!out) return NULL;
  va_start(ap, fmt);
  vsnprintf(out, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return out;
}

uint32_t kb_sim_fnv32a(const char *s) { return kb_fnv32(KB_FNV32_INIT, s); }

/* ---- arena ---- */

#define ARENA_CHUNK 65536

static char *arena_alloc(sim_arena *a, size_t n) {
  if (!a->n || a->used + n > a->size) {
    size_t size = n > ARENA_CHUNK ? n : ARENA_CHUNK;
    if (kb_sim_reserve((void **)&a->chunks, &a->cap, a->n + 1, sizeof *a->chunks)) return NULL;
    char *c = malloc(size);
    if (!c) return NULL;
    a->chunks[a->n++] = c;
    a->used = 0;
    a->size = size;
  }
  char *p = a->chunks[a->n - 1] + a->used;
  a->used += n;
  return p;
}

const char *kb_sim_arena_strdup(sim_arena *a, const char *s) {
  size_t n = strlen(s) + 1;
  char *p = arena_alloc(a, n);
  return p ? memcpy(p, s, n) : NULL;
}

const char *kb_sim_arena_printf(sim_arena *a, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return kb_sim_arena_strdup(a, buf);
}

void kb_sim_arena_free(sim_arena *a) {
  for (size_t i = 0; i < a->n; i++) free(a->chunks[i]);
  free(a->chunks);
  *a = (sim_arena){0};
}

/* ---- lifecycle ---- */

kb_sim *kb_sim_new(const kb_sim_config *cfg, uint64_t seed, double speed, kb_sim_error *err) {
  kb_sim *sim = calloc(1, sizeof *sim);
  if (!sim) {
    kb_sim_fail(err, KB_SIM_ENOMEM, "out of memory");
    return NULL;
  }
  sim->cfg = cfg ? kb_sim_config_copy(cfg) : kb_sim_config_new("default", err);
  sim->seed = seed;
  sim->speed = speed > 0 ? speed : 600;
  sim->q_head = sim->q_tail = sim->u_head = sim->u_tail = SIM_NONE;
  if (!sim->cfg) goto oom;
  sim->epoch = sim->cfg->epoch;
  kb_sim_rng_seed(&sim->api_rng, kb_sim_seed_mix(seed, UINT64_MAX, 1));
  sim->evring = calloc(sim->cfg->events_capacity ? sim->cfg->events_capacity : 1,
                       sizeof *sim->evring);
  sim->api_free_at = calloc((size_t)(sim->cfg->api_max_inflight > 0 ? sim->cfg->api_max_inflight : 1),
                            sizeof *sim->api_free_at);
  if (!sim->evring || !sim->api_free_at) goto oom;
  int rc = kb_sim_cluster_build(sim, err);
  if (rc) {
    kb_sim_free(sim);
    return NULL;
  }
  return sim;
oom:
  kb_sim_fail(err, KB_SIM_ENOMEM, "out of memory");
  kb_sim_free(sim);
  return NULL;
}

void kb_sim_free(kb_sim *sim) {
  if (!sim) return;
  kb_sim_detach(sim);
  kb_sim_runs_free(sim);
  for (size_t i = 0; i < sim->n_pipelines; i++) kb_sim_pipeline_free(sim->pipelines[i]);
  free(sim->pipelines);
  for (size_t i = 0; i < sim->n_nodes; i++) {
    free(sim->nodes[i].images);
    free(sim->nodes[i].labels);
    free(sim->nodes[i].taints);
  }
  free(sim->nodes);
  for (size_t i = 0; i < sim->n_pods; i++) free(sim->pods[i].name);
  free(sim->pods);
  free(sim->free_pods);
  free(sim->free_runs);
  free(sim->free_pipelines);
  for (size_t i = 0; i < sim->n_images; i++) free(sim->images[i]);
  free(sim->images);
  free(sim->image_mb);
  free(sim->evring);
  free(sim->api_free_at);
  kb_sim_heap_free(&sim->heap);
  kb_sim_arena_free(&sim->arena);
  kb_sim_config_free(sim->cfg);
  free(sim);
}

const kb_sim_config *kb_sim_config_of(const kb_sim *sim) { return sim->cfg; }
double kb_sim_epoch(const kb_sim *sim) { return sim->epoch; }
void kb_sim_set_epoch(kb_sim *sim, double unix_seconds) { sim->epoch = unix_seconds; }

void kb_sim_set_observer(kb_sim *sim, kb_sim_observer fn, void *ud) {
  sim->observer = fn;
  sim->observer_ud = ud;
}

uint64_t kb_sim_resource_version(const kb_sim *sim) { return sim->rv; }

void kb_sim_touch(kb_sim *sim, kb_sim_kind kind, uint32_t idx, uint64_t *rv) {
  *rv = ++sim->rv;
  if (kind == KB_SIM_KIND_NODE) sim->node_epoch++;
  if (sim->observer) sim->observer(sim->observer_ud, kind, idx, *rv);
}

void kb_sim_stats_get(const kb_sim *sim, kb_sim_stats *o) {
  memset(o, 0, sizeof *o);
  for (size_t i = 0; i < sim->n_pods; i++) {
    const sim_pod *p = &sim->pods[i];
    if (!p->exists) continue;
    switch (p->phase) {
    case KB_SIM_POD_PENDING: o->pods_pending++; break;
    case KB_SIM_POD_RUNNING: o->pods_running++; break;
    case KB_SIM_POD_SUCCEEDED: o->pods_succeeded++; break;
    case KB_SIM_POD_FAILED: o->pods_failed++; break;
    default: break;
    }
  }
  o->pods_unschedulable = sim->u_len;
  o->runs_total = sim->runs_created;
  for (size_t i = 0; i < sim->n_runs; i++)
    if (sim->runs[i].in_use && sim->runs[i].wf_finished < 0) o->runs_active++;
  for (size_t i = 0; i < sim->n_nodes; i++) {
    const sim_node *n = &sim->nodes[i];
    o->nodes_total++;
    if (!n->ready) continue;
    o->nodes_ready++;
    o->cpu_capacity_m += n->cpu_m;
    o->memory_capacity += n->memory;
    o->gpu_capacity += n->gpu;
    o->cpu_requested_m += n->req_cpu;
    o->memory_requested += n->req_mem;
    o->gpu_requested += n->req_gpu;
    o->cpu_demand += n->demand;
  }
  o->events_processed = sim->events_processed;
}
