/* Simulator configuration: built-in profiles and the YAML/JSON overlay.
 * Every default cites its row of /work/shared/notes/calibration.md (also
 * docs/simulator.md); "est." marks a reasoned value without a source. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb/yaml.h"
#include "sim_internal.h"

#define GiB (INT64_C(1) << 30)
#define MiB (INT64_C(1) << 20)

/* ---- quantities ---- */

int kb_sim_parse_cpu_str(const char *s, int64_t *m) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || !isfinite(v) || v < 0) return -1;
  if (*end == 'm' && !end[1]) {
    *m = (int64_t)llround(v);
    return 0;
  }
  if (*end) return -1;
  *m = (int64_t)llround(v * 1000);
  return 0;
}

int kb_sim_parse_cpu(const cJSON *v, int64_t *m) {
  if (cJSON_IsNumber(v)) {
    if (!(v->valuedouble >= 0) || !isfinite(v->valuedouble)) return -1;
    *m = (int64_t)llround(v->valuedouble * 1000);
    return 0;
  }
  return cJSON_IsString(v) ? kb_sim_parse_cpu_str(v->valuestring, m) : -1;
}

int kb_sim_parse_mem_str(const char *s, int64_t *b) {
  static const struct { const char *sfx; double mul; } units[] = {
      {"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0},
      {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"", 1}};
  char *end;
  double v = strtod(s, &end);
  if (end == s || !isfinite(v) || v < 0) return -1;
  for (size_t i = 0; i < sizeof units / sizeof *units; i++)
    if (!strcmp(end, units[i].sfx)) {
      *b = (int64_t)llround(v * units[i].mul);
      return 0;
    }
  return -1;
}

int kb_sim_parse_mem(const cJSON *v, int64_t *b) {
  if (cJSON_IsNumber(v)) {
    if (!(v->valuedouble >= 0) || !isfinite(v->valuedouble)) return -1;
    *b = (int64_t)llround(v->valuedouble);
    return 0;
  }
  return cJSON_IsString(v) ? kb_sim_parse_mem_str(v->valuestring, b) : -1;
}

/* ---- construction ---- */

static kb_sim_dist fixed(double v) { return (kb_sim_dist){KB_SIM_FIXED, v, v}; }
static kb_sim_dist lognormal(double p50, double p99) {
  return (kb_sim_dist){KB_SIM_LOGNORMAL, p50, p99};
}
static kb_sim_dist uniform(double a, double b) { return (kb_sim_dist){KB_SIM_UNIFORM, a, b}; }

static int kv_set(kb_sim_kv **arr, size_t *n, const char *key, const char *value) {
  for (size_t i = 0; i < *n; i++)
    if (!strcmp((*arr)[i].key, key)) {
      char *v = kb_sim_strdup(value);
      if (!v) return -1;
      free((*arr)[i].value);
      (*arr)[i].value = v;
      return 0;
    }
  kb_sim_kv *a = realloc(*arr, (*n + 1) * sizeof **arr);
  if (!a) return -1;
  *arr = a;
  a[*n].key = kb_sim_strdup(key);
  a[*n].value = kb_sim_strdup(value);
  if (!a[*n].key || !a[*n].value) {
    free(a[*n].key);
    free(a[*n].value);
    return -1;
  }
  (*n)++;
  return 0;
}

static void kv_free(kb_sim_kv *a, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(a[i].key);
    free(a[i].value);
  }
  free(a);
}

static void pool_clear(kb_sim_pool_config *p) {
  free(p->name);
  kv_free(p->labels, p->n_labels);
  for (size_t i = 0; i < p->n_taints; i++) {
    free(p->taints[i].key);
    free(p->taints[i].value);
    free(p->taints[i].effect);
  }
  free(p->taints);
  for (size_t i = 0; i < p->n_images; i++) free(p->images[i]);
  free(p->images);
  memset(p, 0, sizeof *p);
}

static void pools_clear(kb_sim_config *c) {
  for (size_t i = 0; i < c->n_pools; i++) pool_clear(&c->pools[i]);
  free(c->pools);
  c->pools = NULL;
  c->n_pools = 0;
}

static kb_sim_api_endpoint *endpoint(kb_sim_config *c, const char *name) {
  for (size_t i = 0; i < c->n_endpoints; i++)
    if (!strcmp(c->endpoints[i].name, name)) return &c->endpoints[i];
  kb_sim_api_endpoint *e = realloc(c->endpoints, (c->n_endpoints + 1) * sizeof *e);
  if (!e) return NULL;
  c->endpoints = e;
  e = &e[c->n_endpoints];
  *e = (kb_sim_api_endpoint){.name = kb_sim_strdup(name), .base = fixed(0)};
  if (!e->name) return NULL;
  c->n_endpoints++;
  return e;
}

static int set_endpoint(kb_sim_config *c, const char *name, kb_sim_dist base, double per_item,
                        double per_stored) {
  kb_sim_api_endpoint *e = endpoint(c, name);
  if (!e) return -1;
  e->base = base;
  e->per_item = per_item;
  e->per_stored_run = per_stored;
  return 0;
}

static int add_pool(kb_sim_config *c, const char *name, int nodes, int64_t cpu_m, int64_t mem,
                    const char *image) {
  kb_sim_pool_config *p = realloc(c->pools, (c->n_pools + 1) * sizeof *p);
  if (!p) return -1;
  c->pools = p;
  p = &p[c->n_pools++];
  *p = (kb_sim_pool_config){.name = kb_sim_strdup(name), .nodes = nodes, .cpu_m = cpu_m,
                            .memory = mem, .max_pods = 110};
  if (!p->name) return -1;
  if (kv_set(&p->labels, &p->n_labels, "node.kubernetes.io/instance-type", "n1-standard-8"))
    return -1;
  if (image) {
    p->images = malloc(sizeof *p->images);
    if (!p->images || !(p->images[0] = kb_sim_strdup(image))) return -1;
    p->n_images = 1;
  }
  return 0;
}

/* The calibrated model ("Proposed default config" of calibration.md). */
static int profile_default(kb_sim_config *c) {
  strcpy(c->profile, "default");
  c->pool_label = kb_sim_strdup("cloud.google.com/gke-nodepool");
  c->node_name_prefix = kb_sim_strdup("gke-kbrun-");
  if (!c->pool_label || !c->node_name_prefix) return -1;
  /* A1/C3: 2 pools x 3 n1-standard-8. The benchmark cluster had run the
   * taxi sample before (assumption, see docs): tfx image cached. */
  if (add_pool(c, "pool-1", 3, 8000, 30 * GiB, "tensorflow/tfx:0.15.0") ||
      add_pool(c, "pool-2", 3, 8000, 30 * GiB, "tensorflow/tfx:0.15.0"))
    return -1;
  c->api_max_inflight = 64;                                             /* est. */
  if (set_endpoint(c, "CreateRun", lognormal(0.40, 0.85), 0, 0) ||      /* A1 */
      set_endpoint(c, "GetRun", lognormal(0.15, 0.20), 0, 0) ||         /* A2 */
      set_endpoint(c, "DeleteRun", lognormal(0.18, 0.45), 0, 0) ||      /* A3: p50 .18, p90 .3 */
      set_endpoint(c, "ListRuns", lognormal(0.20, 0.50), 0.005, 1e-5) || /* est. A2, A6, A8 */
      set_endpoint(c, "CreatePipeline", lognormal(0.30, 0.80), 0, 0) || /* est. A11 */
      set_endpoint(c, "CreateExperiment", lognormal(0.08, 0.25), 0, 0) || /* est. A11 */
      set_endpoint(c, "k8s.single", lognormal(0.015, 0.20), 0, 0) ||    /* D5, D4 */
      set_endpoint(c, "k8s.list", fixed(0.02), 5e-5, 0) ||              /* est. (D6) */
      /* argo-server: its own handling (auth, validation) over one
       * apiserver call: D5 plus an estimated 10 ms; lists as k8s.list. */
      set_endpoint(c, "argo.single", lognormal(0.025, 0.25), 0, 0) ||   /* est. (D5) */
      set_endpoint(c, "argo.list", fixed(0.03), 5e-5, 0) ||             /* est. (D6) */
      set_endpoint(c, "default", lognormal(0.10, 0.40), 0, 0))          /* est. */
    return -1;
  c->create_to_workflow_running = uniform(0.2, 1.0); /* est. (A4, E4) */
  c->v2_driver_pods = 1;                             /* B1 */
  c->driver_cpu_m = 100;                             /* B2 */
  c->driver_memory = 64 * MiB;                       /* B2 */
  c->driver_runtime = lognormal(2.0, 8.0);           /* est. (B4, B5) */
  c->launcher_init = 0.5;                            /* est. (B3) */
  c->pa_workers = 2;                                 /* B6 */
  c->pa_resync_period = 30;                          /* B6 */
  c->pa_lag = lognormal(1.0, 5.0);                   /* est. */
  c->pa_service_active = 0.10;                       /* est. (B7) */
  c->pa_service_finished = 0.02;                     /* est. (B7) */
  c->pod_startup = lognormal(1.2, 2.5);              /* D2, D1 */
  c->sched_pods_per_s = 100;                         /* D7 */
  c->image_pull_serial = 1;                          /* D9 */
  c->image_pull_fixed = 1.0;                         /* est. */
  c->image_pull_mb_per_s = 40;                       /* est. (D10) */
  if (kv_set(&c->image_size_mb, &c->n_image_sizes, "tfx", "2500") ||            /* C5 */
      kv_set(&c->image_size_mb, &c->n_image_sizes, "tensorflow", "1000") ||     /* D11 */
      kv_set(&c->image_size_mb, &c->n_image_sizes, "tensorflow-gpu", "2700") || /* D11 */
      kv_set(&c->image_size_mb, &c->n_image_sizes, "default", "200"))           /* est. */
    return -1;
  c->default_cpu_demand = 0.4;            /* est.: C3 fit, see docs */
  c->argo_pod_create = 0.3;               /* est. */
  c->completion_detect = uniform(1, 10);  /* E2, E6 */
  c->wait_exit = 1.0;                     /* est. (E5) */
  c->step_default = lognormal(10, 30);    /* est. */
  c->step_fail_prob = 0;
  c->events_capacity = 10000;
  c->epoch = 1704067200; /* 2024-01-01T00:00:00Z */
  return 0;
}

/* No modelled latency or overhead: sim time equals step durations. */
static int profile_fast(kb_sim_config *c) {
  if (profile_default(c)) return -1;
  strcpy(c->profile, "fast");
  for (size_t i = 0; i < c->n_endpoints; i++) {
    c->endpoints[i].base = fixed(0);
    c->endpoints[i].per_item = c->endpoints[i].per_stored_run = 0;
  }
  c->create_to_workflow_running = fixed(0);
  c->driver_runtime = fixed(0);
  c->launcher_init = 0;
  c->pa_lag = fixed(0);
  c->pa_service_active = c->pa_service_finished = 0;
  c->pod_startup = fixed(0);
  c->sched_pods_per_s = 0;
  c->image_pull_fixed = 0;
  c->image_pull_mb_per_s = 0;
  c->argo_pod_create = 0;
  c->completion_detect = fixed(0);
  c->wait_exit = 0;
  c->step_default = fixed(1);
  return 0;
}

/* The shape of the degraded reports (est.): slower control plane and
 * pulls, API latency growing with stored runs as in A7, a persistence
 * agent that saturates with a few hundred stored workflows (B7). */
static int profile_degraded(kb_sim_config *c) {
  if (profile_default(c)) return -1;
  strcpy(c->profile, "degraded");
  c->api_max_inflight = 16;
  if (set_endpoint(c, "CreateRun", lognormal(1.0, 5.0), 0, 0) ||
      set_endpoint(c, "GetRun", lognormal(0.5, 3.0), 0, 0) ||
      set_endpoint(c, "ListRuns", lognormal(0.5, 30.0), 0.01, 1.5e-4) || /* A5, A7 */
      set_endpoint(c, "default", lognormal(0.3, 2.0), 0, 0))
    return -1;
  c->pa_lag = lognormal(5, 60);
  c->pa_service_active = 0.5;
  c->pa_service_finished = 0.1;
  c->pod_startup = lognormal(2.5, 6.5); /* D3 */
  c->sched_pods_per_s = 20;
  c->image_pull_mb_per_s = 10;          /* D10 */
  c->completion_detect = uniform(5, 20);
  return 0;
}

kb_sim_config *kb_sim_config_new(const char *profile, kb_sim_error *err) {
  if (!profile) profile = "default";
  int (*make)(kb_sim_config *) = !strcmp(profile, "default")    ? profile_default
                                 : !strcmp(profile, "fast")     ? profile_fast
                                 : !strcmp(profile, "degraded") ? profile_degraded
                                                                : NULL;
  if (!make) {
    kb_sim_fail(err, KB_SIM_EINVAL, "unknown profile \"%s\" (default, fast, degraded)", profile);
    return NULL;
  }
  kb_sim_config *c = calloc(1, sizeof *c);
  if (!c || make(c)) {
    kb_sim_config_free(c);
    kb_sim_fail(err, KB_SIM_ENOMEM, "out of memory");
    return NULL;
  }
  return c;
}

void kb_sim_config_free(kb_sim_config *c) {
  if (!c) return;
  free(c->pool_label);
  free(c->node_name_prefix);
  pools_clear(c);
  for (size_t i = 0; i < c->n_endpoints; i++) free(c->endpoints[i].name);
  free(c->endpoints);
  kv_free(c->image_size_mb, c->n_image_sizes);
  kv_free(c->step_durations, c->n_step_durations);
  free(c);
}

static int kv_copy(kb_sim_kv **dst, size_t *dn, const kb_sim_kv *src, size_t n) {
  *dst = NULL;
  *dn = 0;
  for (size_t i = 0; i < n; i++)
    if (kv_set(dst, dn, src[i].key, src[i].value)) return -1;
  return 0;
}

kb_sim_config *kb_sim_config_copy(const kb_sim_config *s) {
  kb_sim_config *c = malloc(sizeof *c);
  if (!c) return NULL;
  *c = *s;
  c->pool_label = c->node_name_prefix = NULL;
  c->pools = NULL;
  c->n_pools = 0;
  c->endpoints = NULL;
  c->n_endpoints = 0;
  c->image_size_mb = c->step_durations = NULL;
  c->n_image_sizes = c->n_step_durations = 0;
  if (!(c->pool_label = kb_sim_strdup(s->pool_label)) ||
      !(c->node_name_prefix = kb_sim_strdup(s->node_name_prefix)) ||
      kv_copy(&c->image_size_mb, &c->n_image_sizes, s->image_size_mb, s->n_image_sizes) ||
      kv_copy(&c->step_durations, &c->n_step_durations, s->step_durations,
              s->n_step_durations))
    goto fail;
  for (size_t i = 0; i < s->n_endpoints; i++) {
    const kb_sim_api_endpoint *e = &s->endpoints[i];
    if (set_endpoint(c, e->name, e->base, e->per_item, e->per_stored_run)) goto fail;
  }
  if (s->n_pools && !(c->pools = calloc(s->n_pools, sizeof *c->pools))) goto fail;
  for (size_t i = 0; i < s->n_pools; i++) {
    const kb_sim_pool_config *sp = &s->pools[i];
    kb_sim_pool_config *p = &c->pools[c->n_pools++];
    *p = (kb_sim_pool_config){.nodes = sp->nodes, .cpu_m = sp->cpu_m, .memory = sp->memory,
                              .gpu = sp->gpu, .max_pods = sp->max_pods};
    if (!(p->name = kb_sim_strdup(sp->name)) ||
        kv_copy(&p->labels, &p->n_labels, sp->labels, sp->n_labels))
      goto fail;
    if (sp->n_taints && !(p->taints = calloc(sp->n_taints, sizeof *p->taints))) goto fail;
    for (size_t j = 0; j < sp->n_taints; j++, p->n_taints++) {
      p->taints[j].key = kb_sim_strdup(sp->taints[j].key);
      p->taints[j].value = kb_sim_strdup(sp->taints[j].value);
      p->taints[j].effect = kb_sim_strdup(sp->taints[j].effect);
      if (!p->taints[j].key || !p->taints[j].value || !p->taints[j].effect) {
        p->n_taints++;
        goto fail;
      }
    }
    if (sp->n_images && !(p->images = calloc(sp->n_images, sizeof *p->images))) goto fail;
    for (size_t j = 0; j < sp->n_images; j++, p->n_images++)
      if (!(p->images[j] = kb_sim_strdup(sp->images[j]))) goto fail;
  }
  return c;
fail:
  kb_sim_config_free(c);
  return NULL;
}

/* ---- overlay ---- */

typedef struct walker {
  kb_sim_config *c;
  kb_sim_error *err;
  char path[200];
} walker;

static int bad(walker *w, const char *key, const char *what) {
  return kb_sim_fail(w->err, KB_SIM_EINVAL, "config %s%s%s: %s", w->path, *w->path ? "." : "", key,
                  what);
}

static int num(walker *w, const cJSON *v, double lo, double *out) {
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo) {
    char what[64];
    snprintf(what, sizeof what, "expected a number >= %g", lo);
    return bad(w, v->string, what);
  }
  *out = v->valuedouble;
  return 0;
}

static int integer(walker *w, const cJSON *v, int lo, int *out) {
  double d;
  if (num(w, v, lo, &d)) return -1;
  if (d != floor(d) || d > 1e9) return bad(w, v->string, "expected an integer");
  *out = (int)d;
  return 0;
}

static int boolean(walker *w, const cJSON *v, int *out) {
  if (!cJSON_IsBool(v)) return bad(w, v->string, "expected true or false");
  *out = cJSON_IsTrue(v);
  return 0;
}

static int dist(walker *w, const cJSON *v, kb_sim_dist *out) {
  kb_sim_error e;
  if (kb_sim_dist_from_json(v, out, &e)) return bad(w, v->string, e.message);
  return 0;
}

static int string(walker *w, const cJSON *v, char **out) {
  if (!cJSON_IsString(v) || !*v->valuestring) return bad(w, v->string, "expected a string");
  char *s = kb_sim_strdup(v->valuestring);
  if (!s) return kb_sim_fail(w->err, KB_SIM_ENOMEM, "out of memory");
  free(*out);
  *out = s;
  return 0;
}

static int object(walker *w, const cJSON *v) {
  return cJSON_IsObject(v) ? 0 : bad(w, v->string, "expected a mapping");
}

typedef int (*section_fn)(walker *w, const cJSON *v);

/* Walk the mapping v, calling fn for each key, with path bookkeeping. */
static int each(walker *w, const cJSON *v, section_fn fn) {
  if (object(w, v)) return -1;
  size_t len = strlen(w->path);
  if (v->string) snprintf(w->path + len, sizeof w->path - len, "%s%s", len ? "." : "", v->string);
  int rc = 0;
  for (const cJSON *c = v->child; c && !rc; c = c->next) rc = fn(w, c);
  w->path[len] = 0;
  return rc;
}

static int unknown(walker *w, const cJSON *v) { return bad(w, v->string, "unknown key"); }
static int ignore(walker *w, const cJSON *v) { return 0; }

static int is(const cJSON *v, const char *k) { return !strcmp(v->string, k); }

static int sec_taint(walker *w, const cJSON *t, kb_sim_pool_config *p) {
  const cJSON *k = cJSON_GetObjectItemCaseSensitive(t, "key");
  const cJSON *val = cJSON_GetObjectItemCaseSensitive(t, "value");
  const cJSON *eff = cJSON_GetObjectItemCaseSensitive(t, "effect");
  if (!cJSON_IsObject(t) || !cJSON_IsString(k) || (val && !cJSON_IsString(val)) ||
      !cJSON_IsString(eff))
    return bad(w, "taints", "each taint needs string key, effect and optional value");
  const char *e = eff->valuestring;
  if (strcmp(e, "NoSchedule") && strcmp(e, "PreferNoSchedule") && strcmp(e, "NoExecute"))
    return bad(w, "taints", "effect must be NoSchedule, PreferNoSchedule or NoExecute");
  kb_sim_taint *a = realloc(p->taints, (p->n_taints + 1) * sizeof *a);
  if (!a) return kb_sim_fail(w->err, KB_SIM_ENOMEM, "out of memory");
  p->taints = a;
  a[p->n_taints] = (kb_sim_taint){kb_sim_strdup(k->valuestring),
                                  kb_sim_strdup(val ? val->valuestring : ""), kb_sim_strdup(e)};
  p->n_taints++;
  return 0;
}

static int sec_pool(walker *w, const cJSON *v, kb_sim_pool_config *p) {
  if (object(w, v)) return -1;
  for (const cJSON *c = v->child; c; c = c->next) {
    int rc = 0;
    if (is(c, "name")) rc = string(w, c, &p->name);
    else if (is(c, "nodes")) rc = integer(w, c, 0, &p->nodes);
    else if (is(c, "cpu")) rc = kb_sim_parse_cpu(c, &p->cpu_m) ? bad(w, "cpu", "expected a cpu quantity (8, \"7910m\")") : 0;
    else if (is(c, "memory")) rc = kb_sim_parse_mem(c, &p->memory) ? bad(w, "memory", "expected a memory quantity (\"30Gi\")") : 0;
    else if (is(c, "gpu")) rc = integer(w, c, 0, &p->gpu);
    else if (is(c, "max_pods")) rc = integer(w, c, 1, &p->max_pods);
    else if (is(c, "labels")) {
      if ((rc = object(w, c))) return rc;
      for (const cJSON *l = c->child; l; l = l->next) {
        if (!cJSON_IsString(l)) return bad(w, "labels", "label values must be strings");
        if (kv_set(&p->labels, &p->n_labels, l->string, l->valuestring))
          return kb_sim_fail(w->err, KB_SIM_ENOMEM, "out of memory");
      }
    } else if (is(c, "taints")) {
      if (!cJSON_IsArray(c)) return bad(w, "taints", "expected a list");
      for (const cJSON *t = c->child; t && !rc; t = t->next) rc = sec_taint(w, t, p);
    } else if (is(c, "images")) {
      if (!cJSON_IsArray(c)) return bad(w, "images", "expected a list of image names");
      for (const cJSON *i = c->child; i; i = i->next) {
        if (!cJSON_IsString(i)) return bad(w, "images", "expected a list of image names");
        char **a = realloc(p->images, (p->n_images + 1) * sizeof *a);
        if (!a || !(a[p->n_images] = kb_sim_strdup(i->valuestring))) {
          if (a) p->images = a;
          return kb_sim_fail(w->err, KB_SIM_ENOMEM, "out of memory");
        }
        p->images = a;
        p->n_images++;
      }
    } else rc = unknown(w, c);
    if (rc) return rc;
  }
  if (!p->name) return bad(w, "name", "every pool needs a name");
  if (p->cpu_m <= 0 || p->memory <= 0) return bad(w, p->name, "pool needs cpu and memory > 0");
  return 0;
}

static int sec_pools(walker *w, const cJSON *v) {
  if (!cJSON_IsArray(v)) return bad(w, "pools", "expected a list of pools");
  pools_clear(w->c);
  int n = cJSON_GetArraySize(v);
  if (n && !(w->c->pools = calloc((size_t)n, sizeof *w->c->pools)))
    return kb_sim_fail(w->err, KB_SIM_ENOMEM, "out of memory");
  for (const cJSON *p = v->child; p; p = p->next) {
    kb_sim_pool_config *pc = &w->c->pools[w->c->n_pools++];
    pc->max_pods = 110;
    if (sec_pool(w, p, pc)) return -1;
    for (size_t i = 0; i + 1 < w->c->n_pools; i++)
      if (!strcmp(w->c->pools[i].name, pc->name)) return bad(w, "pools", "duplicate pool name");
  }
  return 0;
}

static int sec_cluster(walker *w, const cJSON *v) {
  if (is(v, "pool_label")) return string(w, v, &w->c->pool_label);
  if (is(v, "node_name_prefix")) {
    if (!cJSON_IsString(v)) return bad(w, v->string, "expected a string");
    char *s = kb_sim_strdup(v->valuestring);
    if (!s) return -1;
    free(w->c->node_name_prefix);
    w->c->node_name_prefix = s;
    return 0;
  }
  if (is(v, "pools")) return sec_pools(w, v);
  return unknown(w, v);
}

static int sec_endpoint(walker *w, const cJSON *v) {
  if (object(w, v)) return -1;
  kb_sim_api_endpoint *e = endpoint(w->c, v->string);
  if (!e) return kb_sim_fail(w->err, KB_SIM_ENOMEM, "out of memory");
  for (const cJSON *c = v->child; c; c = c->next) {
    int rc = 0;
    if (is(c, "per_item")) rc = num(w, c, 0, &e->per_item);
    else if (is(c, "per_stored_run")) rc = num(w, c, 0, &e->per_stored_run);
    else if (is(c, "per_manifest_kb")) rc = 0; /* accepted; not modelled (A6) */
    else if (is(c, "fixed") || is(c, "uniform") || is(c, "normal") || is(c, "lognormal")) {
      cJSON *one = cJSON_CreateObject();
      if (!one || !cJSON_AddItemReferenceToObject(one, c->string, (cJSON *)c)) {
        cJSON_Delete(one);
        return kb_sim_fail(w->err, KB_SIM_ENOMEM, "out of memory");
      }
      rc = dist(w, one, &e->base);
      cJSON_Delete(one);
    } else rc = unknown(w, c);
    if (rc) return rc;
  }
  return 0;
}

static int sec_kfp_api(walker *w, const cJSON *v) {
  if (is(v, "max_inflight")) return integer(w, v, 1, &w->c->api_max_inflight);
  if (is(v, "k8s_client")) return object(w, v); /* A10: not modelled separately */
  return sec_endpoint(w, v);
}

static int sec_pa(walker *w, const cJSON *v) {
  kb_sim_config *c = w->c;
  if (is(v, "workers")) return integer(w, v, 1, &c->pa_workers);
  if (is(v, "resync_period")) return num(w, v, 0, &c->pa_resync_period);
  if (is(v, "lag")) return dist(w, v, &c->pa_lag);
  if (is(v, "service_time")) {
    if (object(w, v)) return -1;
    for (const cJSON *s = v->child; s; s = s->next) {
      int rc = is(s, "active")     ? num(w, s, 0, &c->pa_service_active)
               : is(s, "finished") ? num(w, s, 0, &c->pa_service_finished)
                                   : unknown(w, s);
      if (rc) return rc;
    }
    return 0;
  }
  return unknown(w, v);
}

static int sec_driver_res(walker *w, const cJSON *v) {
  if (is(v, "cpu"))
    return kb_sim_parse_cpu(v, &w->c->driver_cpu_m) ? bad(w, "cpu", "expected a cpu quantity") : 0;
  if (is(v, "memory"))
    return kb_sim_parse_mem(v, &w->c->driver_memory) ? bad(w, "memory", "expected a memory quantity") : 0;
  return unknown(w, v);
}

static int sec_kfp_run(walker *w, const cJSON *v) {
  kb_sim_config *c = w->c;
  if (is(v, "create_to_workflow_running")) return dist(w, v, &c->create_to_workflow_running);
  if (is(v, "v2_driver_pods")) return boolean(w, v, &c->v2_driver_pods);
  if (is(v, "driver_resources")) return each(w, v, sec_driver_res);
  if (is(v, "driver_runtime")) return dist(w, v, &c->driver_runtime);
  if (is(v, "launcher_init")) return num(w, v, 0, &c->launcher_init);
  if (is(v, "persistence_agent")) return each(w, v, sec_pa);
  return unknown(w, v);
}

static int sec_sched(walker *w, const cJSON *v) {
  if (is(v, "pods_per_s")) return num(w, v, 0, &w->c->sched_pods_per_s);
  if (is(v, "qps") || is(v, "burst")) return 0; /* D8: accepted, not modelled */
  return unknown(w, v);
}

static int sec_sizes(walker *w, const cJSON *v) {
  double mb;
  if (num(w, v, 0, &mb)) return -1;
  char text[32];
  snprintf(text, sizeof text, "%.17g", mb);
  return kv_set(&w->c->image_size_mb, &w->c->n_image_sizes, v->string, text)
             ? kb_sim_fail(w->err, KB_SIM_ENOMEM, "out of memory")
             : 0;
}

static int sec_pull(walker *w, const cJSON *v) {
  kb_sim_config *c = w->c;
  if (is(v, "serial_per_node")) return boolean(w, v, &c->image_pull_serial);
  if (is(v, "fixed")) return num(w, v, 0, &c->image_pull_fixed);
  if (is(v, "mb_per_s")) return num(w, v, 0, &c->image_pull_mb_per_s);
  if (is(v, "size_mb")) return each(w, v, sec_sizes);
  return unknown(w, v);
}

/* `api_list: {base, per_object}` of the endpoint `name`. */
static int api_list_field(walker *w, const cJSON *v, const char *name) {
  kb_sim_api_endpoint *e = endpoint(w->c, name);
  if (!e) return kb_sim_fail(w->err, KB_SIM_ENOMEM, "out of memory");
  double d;
  if (is(v, "base")) {
    if (num(w, v, 0, &d)) return -1;
    e->base = fixed(d);
    return 0;
  }
  if (is(v, "per_object")) return num(w, v, 0, &e->per_item);
  return unknown(w, v);
}

static int sec_k8s_api_list(walker *w, const cJSON *v) { return api_list_field(w, v, "k8s.list"); }
static int sec_argo_api_list(walker *w, const cJSON *v) { return api_list_field(w, v, "argo.list"); }

/* `api_single_object: DIST`: the base latency of the endpoint `name`. */
static int api_single_field(walker *w, const cJSON *v, const char *name) {
  kb_sim_api_endpoint *e = endpoint(w->c, name);
  return e ? dist(w, v, &e->base) : kb_sim_fail(w->err, KB_SIM_ENOMEM, "out of memory");
}

static int sec_k8s(walker *w, const cJSON *v) {
  kb_sim_config *c = w->c;
  if (is(v, "pod_startup")) return dist(w, v, &c->pod_startup);
  if (is(v, "api_single_object")) return api_single_field(w, v, "k8s.single");
  if (is(v, "api_list")) return each(w, v, sec_k8s_api_list);
  if (is(v, "scheduler")) return each(w, v, sec_sched);
  if (is(v, "image_pull")) return each(w, v, sec_pull);
  if (is(v, "cpu_demand")) return num(w, v, 0, &c->default_cpu_demand);
  return unknown(w, v);
}

static int sec_argo(walker *w, const cJSON *v) {
  kb_sim_config *c = w->c;
  if (is(v, "pod_create")) return num(w, v, 0, &c->argo_pod_create);
  if (is(v, "completion_detect")) return dist(w, v, &c->completion_detect);
  if (is(v, "wait_exit")) return num(w, v, 0, &c->wait_exit);
  if (is(v, "api_single_object")) return api_single_field(w, v, "argo.single");
  if (is(v, "api_list")) return each(w, v, sec_argo_api_list);
  /* E1, E3, E4: accepted, not modelled. */
  if (is(v, "controller") || is(v, "max_workflows_per_min") || is(v, "pod_gc_delete_delay"))
    return 0;
  return unknown(w, v);
}

static int sec_step_durations(walker *w, const cJSON *v) {
  kb_sim_dist d;
  if (!cJSON_IsString(v) && !cJSON_IsNumber(v)) return bad(w, v->string, "expected a distribution string");
  if (dist(w, v, &d)) return -1;
  char text[96];
  if (cJSON_IsNumber(v)) snprintf(text, sizeof text, "fixed:%.17g", v->valuedouble);
  else snprintf(text, sizeof text, "%s", v->valuestring);
  return kv_set(&w->c->step_durations, &w->c->n_step_durations, v->string, text)
             ? kb_sim_fail(w->err, KB_SIM_ENOMEM, "out of memory")
             : 0;
}

static int sec_steps(walker *w, const cJSON *v) {
  kb_sim_config *c = w->c;
  if (is(v, "default")) return dist(w, v, &c->step_default);
  if (is(v, "fail_prob")) {
    if (num(w, v, 0, &c->step_fail_prob)) return -1;
    return c->step_fail_prob > 1 ? bad(w, v->string, "expected a probability 0..1") : 0;
  }
  if (is(v, "durations")) return each(w, v, sec_step_durations);
  return unknown(w, v);
}

static int sec_events(walker *w, const cJSON *v) {
  int n;
  if (!is(v, "capacity")) return unknown(w, v);
  if (integer(w, v, 1, &n)) return -1;
  w->c->events_capacity = (size_t)n;
  return 0;
}

static int sec_clock(walker *w, const cJSON *v) {
  if (is(v, "epoch")) return num(w, v, 0, &w->c->epoch);
  return unknown(w, v);
}

static int sec_top(walker *w, const cJSON *v) {
  static const struct { const char *name; section_fn fn; } secs[] = {
      {"cluster", sec_cluster}, {"kfp_api", sec_kfp_api}, {"kfp_run", sec_kfp_run},
      {"k8s", sec_k8s},         {"argo", sec_argo},       {"steps", sec_steps},
      {"events", sec_events},   {"clock", sec_clock},
      {"training_operator", ignore}, /* F1-F3: no training jobs in this model */
      {"tfx_taxi", ignore},          /* informational: hints live in the pipeline */
  };
  if (is(v, "profile")) return 0;
  for (size_t i = 0; i < sizeof secs / sizeof *secs; i++)
    if (is(v, secs[i].name)) return secs[i].fn == ignore ? object(w, v) : each(w, v, secs[i].fn);
  return unknown(w, v);
}

int kb_sim_config_apply(kb_sim_config *cfg, const cJSON *tree, kb_sim_error *err) {
  if (!tree || cJSON_IsNull(tree)) return 0;
  if (!cJSON_IsObject(tree))
    return kb_sim_fail(err, KB_SIM_EINVAL, "config: expected a mapping at the top level");
  walker w = {cfg, err, ""};
  for (const cJSON *c = tree->child; c; c = c->next)
    if (sec_top(&w, c)) return err ? (err->code ? err->code : KB_SIM_EINVAL) : KB_SIM_EINVAL;
  return 0;
}

kb_sim_config *kb_sim_config_from_json(const cJSON *tree, kb_sim_error *err) {
  const cJSON *p = cJSON_IsObject(tree) ? cJSON_GetObjectItemCaseSensitive(tree, "profile") : NULL;
  if (p && !cJSON_IsString(p)) {
    kb_sim_fail(err, KB_SIM_EINVAL, "config profile: expected a string");
    return NULL;
  }
  kb_sim_config *c = kb_sim_config_new(p ? p->valuestring : NULL, err);
  if (c && kb_sim_config_apply(c, tree, err)) {
    kb_sim_config_free(c);
    return NULL;
  }
  return c;
}

kb_sim_config *kb_sim_config_from_yaml(const char *text, size_t len, kb_sim_error *err) {
  kb_yaml_error ye;
  cJSON *tree = kb_yaml_parse(text, len, &ye);
  if (!tree) {
    kb_sim_fail(err, KB_SIM_EPARSE, "config: line %d column %d: %s", ye.line, ye.column, ye.message);
    return NULL;
  }
  kb_sim_config *c = kb_sim_config_from_json(tree, err);
  cJSON_Delete(tree);
  return c;
}
