/* Expansion of a compiled pipeline into steps (pods) and Argo nodes.
 *
 * KFP v1 / Argo: from spec.entrypoint, container and script templates are
 * pods, suspend templates steps without a pod (KB_SIM_STEP_SUSPEND: they
 * wait for suspend.duration or to be resumed); dag templates nest tasks
 * (dependencies, or the task names in a `depends` expression); steps
 * templates are sequential groups of parallel steps. spec.onExit runs
 * after the rest. A task that depends on a group
 * waits for every step below that group. `when` and loops are not
 * evaluated: each task runs once.
 *
 * KFP v2 IR: root.dag.tasks (dependentTasks, producerTask of inputs) ->
 * componentRef -> executorLabel -> deploymentSpec.executors[].container;
 * nodeSelector, tolerations and pod annotations from the platform spec
 * (second document). With v2_driver_pods (B1) each task becomes a
 * system-container-driver pod and an executor pod, and the root gets a
 * system-dag-driver pod, named like the backend's Argo workflow.
 *
 * Duration hints (docs/simulator.md): pod annotation
 * `sim.kbrun.io/duration` ("fixed:30", "lognormal:70,91"), then config
 * steps.durations by task name, then by template name, then steps.default.
 * `sim.kbrun.io/fail-probability` and `sim.kbrun.io/cpu` (cores used while
 * running) likewise. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb/yaml.h"
#include "pipeline_internal.h"



char *kb_sim_pl_xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *kb_sim_pl_xprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = malloc((size_t)n + 1);
  if (!s) return NULL;
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}




void kb_sim_pipeline_free(sim_pipeline *p) {
  if (!p) return;
  for (size_t i = 0; i < p->n_steps; i++) {
    sim_step *s = &p->steps[i];
    free(s->name);
    free(s->template_name);
    free(s->image);
    for (size_t j = 0; j < s->info.n_node_selector; j++) {
      free(s->selector[j].key);
      free(s->selector[j].value);
    }
    free(s->selector);
    for (size_t j = 0; j < s->info.n_tolerations; j++) {
      free(s->tolerations[j].key);
      free(s->tolerations[j].value);
      free(s->tolerations[j].effect);
      free(s->tol_ops[j]);
    }
    free(s->tolerations);
    free(s->tol_ops);
    for (size_t j = 0; j < s->n_affinity; j++) {
      free(s->affinity[j].key);
      for (size_t k = 0; k < s->affinity[j].n_values; k++) free(s->affinity[j].values[k]);
      free(s->affinity[j].values);
    }
    free(s->affinity);
    free(s->deps);
    free(s->rdeps);
  }
  free(p->steps);
  for (size_t i = 0; i < p->n_gnodes; i++) {
    free(p->gnodes[i].suffix);
    free(p->gnodes[i].display);
    free(p->gnodes[i].template_name);
  }
  free(p->gnodes);
  free(p->name);
  free(p->format);
  free(p->generate_name);
  free(p);
}

/* ---- nodes and steps ---- */

int kb_sim_pl_gnode_add(builder *b, sim_gnode_type type, int parent, char *suffix, const char *display,
                     const char *tmpl) {
  sim_pipeline *p = b->p;
  if (!suffix || kb_sim_reserve((void **)&p->gnodes, &b->cap_gnodes, p->n_gnodes + 1, sizeof *p->gnodes)) {
    free(suffix);
    return oom(b);
  }
  sim_gnode *g = &p->gnodes[p->n_gnodes];
  *g = (sim_gnode){.suffix = suffix, .display = kb_sim_strdup(display),
                   .template_name = kb_sim_strdup(tmpl ? tmpl : ""), .type = type,
                   .parent = parent, .step = -1, .first = (int)p->n_steps, .end = (int)p->n_steps};
  p->n_gnodes++;
  if (!g->display || !g->template_name) return oom(b);
  return (int)p->n_gnodes - 1;
}

int kb_sim_pl_add_dep(builder *b, size_t step, size_t on) {
  sim_step *s = &b->p->steps[step];
  for (size_t i = 0; i < s->info.n_deps; i++)
    if (s->deps[i] == on) return 0;
  uint16_t *d = realloc(s->deps, (s->info.n_deps + 1) * sizeof *d);
  if (!d) return oom(b);
  s->deps = d;
  d[s->info.n_deps++] = (uint16_t)on;
  return 0;
}

/* Every step in [f, e) waits for every step in [df, de). */
int kb_sim_pl_range_dep(builder *b, int f, int e, int df, int de) {
  for (int i = f; i < e; i++)
    for (int j = df; j < de; j++)
      if (kb_sim_pl_add_dep(b, (size_t)i, (size_t)j)) return -1;
  return 0;
}

static int selector_set(builder *b, sim_step *s, const char *k, const char *v) {
  for (size_t i = 0; i < s->info.n_node_selector; i++)
    if (!strcmp(s->selector[i].key, k)) {
      char *nv = kb_sim_strdup(v);
      if (!nv) return oom(b);
      free(s->selector[i].value);
      s->selector[i].value = nv;
      return 0;
    }
  kb_sim_kv *a = realloc(s->selector, (s->info.n_node_selector + 1) * sizeof *a);
  if (!a) return oom(b);
  s->selector = a;
  a[s->info.n_node_selector] = (kb_sim_kv){kb_sim_strdup(k), kb_sim_strdup(v)};
  s->info.n_node_selector++;
  return a[s->info.n_node_selector - 1].key && a[s->info.n_node_selector - 1].value ? 0 : oom(b);
}

int kb_sim_pl_selectors_from(builder *b, sim_step *s, const cJSON *sel, const char *where) {
  if (!sel) return 0;
  if (!cJSON_IsObject(sel))
    return kb_sim_fail(b->err, KB_SIM_EPARSE, "%s: nodeSelector must be a mapping", where);
  for (const cJSON *c = sel->child; c; c = c->next) {
    if (!cJSON_IsString(c))
      return kb_sim_fail(b->err, KB_SIM_EPARSE, "%s: nodeSelector values must be strings", where);
    if (selector_set(b, s, c->string, c->valuestring)) return -1;
  }
  return 0;
}

int kb_sim_pl_tolerations_from(builder *b, sim_step *s, const cJSON *tols, const char *where) {
  if (!tols) return 0;
  if (!cJSON_IsArray(tols))
    return kb_sim_fail(b->err, KB_SIM_EPARSE, "%s: tolerations must be a list", where);
  size_t n = (size_t)cJSON_GetArraySize(tols);
  if (!n) return 0;
  s->tolerations = calloc(n, sizeof *s->tolerations);
  s->tol_ops = calloc(n, sizeof *s->tol_ops);
  if (!s->tolerations || !s->tol_ops) return oom(b);
  for (const cJSON *t = tols->child; t; t = t->next) {
    const char *op = getstr(t, "operator");
    const char *val = getstr(t, "value");
    kb_sim_taint *o = &s->tolerations[s->info.n_tolerations];
    *o = (kb_sim_taint){kb_sim_strdup(getstr(t, "key") ? getstr(t, "key") : ""),
                        kb_sim_strdup(val ? val : ""),
                        kb_sim_strdup(getstr(t, "effect") ? getstr(t, "effect") : "")};
    s->tol_ops[s->info.n_tolerations] = kb_sim_strdup(op ? op : (val ? "Equal" : "Exists"));
    s->info.n_tolerations++;
    if (!o->key || !o->value || !o->effect || !s->tol_ops[s->info.n_tolerations - 1]) return oom(b);
  }
  return 0;
}

static int ns_op(const char *op) {
  static const char *ops[] = {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"};
  for (int i = 0; op && i < 6; i++)
    if (!strcmp(op, ops[i])) return i;
  return -1;
}

static int expr_add(builder *b, sim_step *s, size_t term, const cJSON *e, const char *where) {
  const char *key = getstr(e, "key");
  int op = ns_op(getstr(e, "operator"));
  const cJSON *vals = get(e, "values");
  if (!key || op < 0)
    return kb_sim_fail(b->err, KB_SIM_EPARSE,
                    "%s: a nodeSelectorTerm's matchExpressions need a key and an operator "
                    "(In, NotIn, Exists, DoesNotExist, Gt, Lt)", where);
  sim_nsexpr *a = realloc(s->affinity, (s->n_affinity + 1) * sizeof *a);
  if (!a) return oom(b);
  s->affinity = a;
  sim_nsexpr *x = &a[s->n_affinity++];
  *x = (sim_nsexpr){.term = term, .op = op, .key = kb_sim_strdup(key)};
  size_t n = cJSON_IsArray(vals) ? (size_t)cJSON_GetArraySize(vals) : 0;
  if (n && !(x->values = calloc(n, sizeof *x->values))) return oom(b);
  for (const cJSON *v = n ? vals->child : NULL; v; v = v->next)
    if (cJSON_IsString(v) && !(x->values[x->n_values++] = kb_sim_strdup(v->valuestring))) return oom(b);
  return x->key ? 0 : oom(b);
}

/* affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution:
 * the terms are ORed, a term's matchExpressions ANDed (preferred terms only
 * score in Kubernetes: not modelled). */
int kb_sim_pl_affinity_from(builder *b, sim_step *s, const cJSON *aff, const char *where) {
  const cJSON *req = get(get(aff, "nodeAffinity"), "requiredDuringSchedulingIgnoredDuringExecution");
  const cJSON *terms = get(req, "nodeSelectorTerms");
  if (!req) return 0;
  if (!cJSON_IsArray(terms))
    return kb_sim_fail(b->err, KB_SIM_EPARSE, "%s: nodeSelectorTerms must be a list", where);
  for (const cJSON *t = terms->child; t; t = t->next, s->n_terms++) {
    const cJSON *e;
    cJSON_ArrayForEach(e, get(t, "matchExpressions"))
    if (expr_add(b, s, s->n_terms, e, where)) return -1;
  }
  return 0;
}

static const char *config_duration(const kb_sim_config *c, const char *name) {
  for (size_t i = 0; i < c->n_step_durations; i++)
    if (!strcmp(c->step_durations[i].key, name)) return c->step_durations[i].value;
  return NULL;
}

/* Apply the hints of pod annotations and the config; defaults by kind. */
int kb_sim_pl_step_hints(builder *b, sim_step *s, const cJSON *annotations, const char *where) {
  const kb_sim_config *c = b->sim->cfg;
  const char *dur = getstr(annotations, ANN_DURATION);
  const char *from_cfg = config_duration(c, s->name);
  if (!from_cfg) from_cfg = config_duration(c, s->template_name);
  kb_sim_error e;
  if (dur && !strcmp(dur, "forever")) {
    /* a server: it runs until its pod is deleted or its run stopped */
    s->info.duration = (kb_sim_dist){KB_SIM_FIXED, INFINITY, INFINITY};
  } else if (dur) {
    if (kb_sim_dist_parse(dur, &s->info.duration, &e))
      return kb_sim_fail(b->err, KB_SIM_EPARSE, "%s: annotation %s: %s", where, ANN_DURATION, e.message);
  } else if (from_cfg) {
    if (kb_sim_dist_parse(from_cfg, &s->info.duration, &e))
      return kb_sim_fail(b->err, KB_SIM_EPARSE, "config steps.durations.%s: %s", s->name, e.message);
  } else if (s->info.kind != KB_SIM_STEP_EXECUTOR) {
    s->info.duration = c->driver_runtime;
  } else {
    s->info.duration = c->step_default;
  }
  const char *fp = getstr(annotations, ANN_FAIL);
  s->info.fail_prob = -1;
  if (fp) {
    char *end;
    double v = strtod(fp, &end);
    if (end == fp || *end || !(v >= 0 && v <= 1))
      return kb_sim_fail(b->err, KB_SIM_EPARSE, "%s: annotation %s: expected a probability 0..1, got \"%s\"",
                      where, ANN_FAIL, fp);
    s->info.fail_prob = v;
  }
  const char *cpu = getstr(annotations, ANN_CPU);
  if (cpu) {
    int64_t m;
    if (kb_sim_parse_cpu_str(cpu, &m))
      return kb_sim_fail(b->err, KB_SIM_EPARSE, "%s: annotation %s: expected a cpu quantity, got \"%s\"",
                      where, ANN_CPU, cpu);
    s->info.cpu_demand = (double)m / 1000;
  }
  return 0;
}

int kb_sim_pl_step_add(builder *b, int gnode, const char *name, const char *tmpl, const char *image,
                    kb_sim_step_kind kind) {
  sim_pipeline *p = b->p;
  if (p->n_steps >= MAX_STEPS)
    return kb_sim_fail(b->err, KB_SIM_EINVAL, "pipeline has more than %d pods", MAX_STEPS);
  if (kb_sim_reserve((void **)&p->steps, &b->cap_steps, p->n_steps + 1, sizeof *p->steps)) return oom(b);
  sim_step *s = &p->steps[p->n_steps++];
  memset(s, 0, sizeof *s);
  s->gnode = gnode;
  s->info.kind = kind;
  s->info.exit_handler = b->exit_handler;
  s->info.cpu_demand = -1;
  s->name = kb_sim_strdup(name);
  s->template_name = kb_sim_strdup(tmpl);
  s->image = kb_sim_strdup(image ? image : "");
  if (!s->name || !s->template_name || !s->image) return oom(b);
  p->gnodes[gnode].step = (int)p->n_steps - 1;
  p->gnodes[gnode].end = (int)p->n_steps;
  return (int)p->n_steps - 1;
}

/* ---- entry ---- */

static int finish(builder *b) {
  sim_pipeline *p = b->p;
  if (!p->n_steps) return kb_sim_fail(b->err, KB_SIM_EPARSE, "pipeline has no container steps");
  for (size_t i = 0; i < p->n_steps; i++) {
    sim_step *s = &p->steps[i];
    for (size_t j = 0; j < s->info.n_deps; j++) {
      sim_step *d = &p->steps[s->deps[j]];
      uint16_t *r = realloc(d->rdeps, (d->n_rdeps + 1) * sizeof *r);
      if (!r) return oom(b);
      d->rdeps = r;
      r[d->n_rdeps++] = (uint16_t)i;
    }
    s->image_id = *s->image ? kb_sim_image_intern(b->sim, s->image) : -1;
    if (*s->image && s->image_id < 0) return oom(b);
  }
  for (size_t i = 0; i < p->n_steps; i++) {
    sim_step *s = &p->steps[i];
    s->info.name = s->name;
    s->info.template_name = s->template_name;
    s->info.node_suffix = p->gnodes[s->gnode].suffix;
    s->info.image = s->image;
    s->info.deps = s->deps;
    s->info.node_selector = s->selector;
  }
  return 0;
}

int kb_sim_pipeline_expand(kb_sim *sim, const cJSON *doc, const cJSON *params, sim_pipeline **out,
                        kb_sim_error *err) {
  const cJSON *main_doc = cJSON_IsArray(doc) ? cJSON_GetArrayItem(doc, 0) : doc;
  const cJSON *second = cJSON_IsArray(doc) ? cJSON_GetArrayItem(doc, 1) : NULL;
  builder b = {.sim = sim, .err = err, .params = params};
  if (!cJSON_IsObject(main_doc))
    return kb_sim_fail(err, KB_SIM_EPARSE, "pipeline: expected a mapping");
  /* A PipelineJob-style wrapper: {pipeline_spec, platform_spec}. */
  if (get(main_doc, "pipeline_spec") && !get(main_doc, "root")) {
    second = get(main_doc, "platform_spec");
    main_doc = get(main_doc, "pipeline_spec");
  }
  if (!(b.p = calloc(1, sizeof *b.p))) return kb_sim_fail(err, KB_SIM_ENOMEM, "out of memory");
  const char *api = getstr(main_doc, "apiVersion"), *kind = getstr(main_doc, "kind");
  int rc;
  if (api && !strncmp(api, "argoproj.io/", 12) && kind && !strcmp(kind, "Workflow"))
    rc = kb_sim_pl_load_v1(&b, main_doc);
  else if (get(main_doc, "root") && (get(main_doc, "pipelineInfo") || get(main_doc, "deploymentSpec")))
    rc = kb_sim_pl_load_v2(&b, main_doc, second);
  else
    rc = kb_sim_fail(err, KB_SIM_EPARSE,
                  "unknown template format: expected an Argo Workflow (apiVersion argoproj.io/*, kind "
                  "Workflow) or a KFP v2 pipeline spec (pipelineInfo, root)");
  if (!rc) rc = finish(&b);
  if (rc) {
    kb_sim_pipeline_free(b.p);
    return rc < 0 ? rc : KB_SIM_EPARSE;
  }
  *out = b.p;
  return 0;
}

/* ---- public ---- */

int kb_sim_pipeline_load(kb_sim *sim, const cJSON *doc, const cJSON *params, kb_sim_error *err) {
  sim_pipeline *p;
  if (params && !cJSON_IsObject(params))
    return kb_sim_fail(err, KB_SIM_EINVAL, "pipeline parameters: expected a mapping");
  int rc = kb_sim_pipeline_expand(sim, doc, params, &p, err);
  if (rc) return err && err->code ? err->code : rc;
  p->holds = 1; /* the loader's */
  if (sim->n_free_pipelines) {
    uint32_t i = sim->free_pipelines[--sim->n_free_pipelines];
    sim->pipelines[i] = p;
    return (int)i;
  }
  if (kb_sim_reserve((void **)&sim->pipelines, &sim->cap_pipelines, sim->n_pipelines + 1,
                  sizeof *sim->pipelines)) {
    kb_sim_pipeline_free(p);
    return kb_sim_fail(err, KB_SIM_ENOMEM, "out of memory");
  }
  sim->pipelines[sim->n_pipelines] = p;
  return (int)sim->n_pipelines++;
}

/* Holds: one per load (dropped by kb_sim_pipeline_release) and one per
 * run using the pipeline (dropped when the run is freed). */
void kb_sim_pipeline_hold(kb_sim *sim, int i) { sim->pipelines[i]->holds++; }

void kb_sim_pipeline_drop(kb_sim *sim, int i) {
  if (i < 0 || (size_t)i >= sim->n_pipelines || !sim->pipelines[i]) return;
  if (--sim->pipelines[i]->holds > 0) return;
  kb_sim_pipeline_free(sim->pipelines[i]);
  sim->pipelines[i] = NULL;
  kb_sim_free_push(&sim->free_pipelines, &sim->n_free_pipelines, &sim->cap_free_pipelines, (uint32_t)i);
}

void kb_sim_pipeline_release(kb_sim *sim, int pipeline) { kb_sim_pipeline_drop(sim, pipeline); }

int kb_sim_pipeline_load_yaml(kb_sim *sim, const char *text, size_t len, const cJSON *params,
                              kb_sim_error *err) {
  cJSON *docs;
  kb_yaml_error ye;
  if (kb_yaml_parse_all(text, len, &docs, &ye))
    return kb_sim_fail(err, KB_SIM_EPARSE, "pipeline YAML: line %d column %d: %s", ye.line, ye.column,
                    ye.message);
  int rc = kb_sim_pipeline_load(sim, docs, params, err);
  cJSON_Delete(docs);
  return rc;
}

static const sim_pipeline *pipeline(const kb_sim *sim, int i) {
  return i >= 0 && (size_t)i < sim->n_pipelines ? sim->pipelines[i] : NULL;
}

size_t kb_sim_pipeline_count(const kb_sim *sim) { return sim->n_pipelines; }

const char *kb_sim_pipeline_format(const kb_sim *sim, int i) {
  const sim_pipeline *p = pipeline(sim, i);
  return p ? p->format : NULL;
}

const char *kb_sim_pipeline_name(const kb_sim *sim, int i) {
  const sim_pipeline *p = pipeline(sim, i);
  return p ? p->name : NULL;
}

size_t kb_sim_pipeline_steps(const kb_sim *sim, int i) {
  const sim_pipeline *p = pipeline(sim, i);
  return p ? p->n_steps : 0;
}

int kb_sim_pipeline_step(const kb_sim *sim, int i, size_t step, kb_sim_step_info *out) {
  const sim_pipeline *p = pipeline(sim, i);
  if (!p || step >= p->n_steps) return KB_SIM_ENOENT;
  *out = p->steps[step].info;
  return 0;
}

int kb_sim_pipeline_find_step(const kb_sim *sim, int i, const char *name) {
  const sim_pipeline *p = pipeline(sim, i);
  for (size_t s = 0; p && s < p->n_steps; s++)
    if (!strcmp(p->steps[s].name, name)) return (int)s;
  return -1;
}
