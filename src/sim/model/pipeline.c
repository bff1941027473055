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
#include "sim_internal.h"

#define ANN_DURATION "sim.kbrun.io/duration"
#define ANN_FAIL "sim.kbrun.io/fail-probability"
#define ANN_CPU "sim.kbrun.io/cpu"
#define MAX_DEPTH 32
#define MAX_STEPS 60000

typedef struct builder {
  kb_sim *sim;
  kb_sim_error *err;
  sim_pipeline *p;
  size_t cap_steps, cap_gnodes;
  /* v1 */
  const cJSON *templates, *wf_selector, *wf_tolerations, *wf_affinity;
  /* v2 */
  const cJSON *components, *executors, *platform, *root_inputs, *params;
  int exit_handler;
} builder;

static char *xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xprintf(const char *fmt, ...) {
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

static const cJSON *get(const cJSON *o, const char *k) {
  return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

static const char *getstr(const cJSON *o, const char *k) {
  const cJSON *v = get(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int oom(builder *b) { return kb_sim_fail(b->err, KB_SIM_ENOMEM, "out of memory"); }

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

static int gnode_add(builder *b, sim_gnode_type type, int parent, char *suffix, const char *display,
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

static int add_dep(builder *b, size_t step, size_t on) {
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
static int range_dep(builder *b, int f, int e, int df, int de) {
  for (int i = f; i < e; i++)
    for (int j = df; j < de; j++)
      if (add_dep(b, (size_t)i, (size_t)j)) return -1;
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

static int selectors_from(builder *b, sim_step *s, const cJSON *sel, const char *where) {
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

static int tolerations_from(builder *b, sim_step *s, const cJSON *tols, const char *where) {
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
static int affinity_from(builder *b, sim_step *s, const cJSON *aff, const char *where) {
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
static int step_hints(builder *b, sim_step *s, const cJSON *annotations, const char *where) {
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

static int step_add(builder *b, int gnode, const char *name, const char *tmpl, const char *image,
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

/* requests, or limits where no request is given (Kubernetes defaulting). */
static int resources_v1(builder *b, sim_step *s, const cJSON *res, const char *where) {
  const cJSON *req = get(res, "requests"), *lim = get(res, "limits");
  int64_t cpu_lim = -1;
  const cJSON *v;
  if ((v = get(lim, "cpu")) && kb_sim_parse_cpu(v, &cpu_lim))
    return kb_sim_fail(b->err, KB_SIM_EPARSE, "%s: bad cpu limit", where);
  if ((v = get(req, "cpu")) ? kb_sim_parse_cpu(v, &s->info.cpu_m) : 0)
    return kb_sim_fail(b->err, KB_SIM_EPARSE, "%s: bad cpu request", where);
  if (!get(req, "cpu") && cpu_lim >= 0) s->info.cpu_m = cpu_lim;
  v = get(req, "memory") ? get(req, "memory") : get(lim, "memory");
  if (v && kb_sim_parse_mem(v, &s->info.memory))
    return kb_sim_fail(b->err, KB_SIM_EPARSE, "%s: bad memory quantity", where);
  v = get(req, "nvidia.com/gpu") ? get(req, "nvidia.com/gpu") : get(lim, "nvidia.com/gpu");
  if (v) {
    int64_t g;
    if (kb_sim_parse_cpu(v, &g) || g % 1000)
      return kb_sim_fail(b->err, KB_SIM_EPARSE, "%s: nvidia.com/gpu must be a whole number", where);
    s->info.gpu = (int)(g / 1000);
  }
  if (s->info.cpu_demand < 0)
    s->info.cpu_demand = cpu_lim >= 0 ? cpu_lim / 1000.0
                         : s->info.cpu_m > 0 ? s->info.cpu_m / 1000.0
                                             : b->sim->cfg->default_cpu_demand;
  return 0;
}

static int classify_template(const char *tmpl) {
  if (!strcmp(tmpl, "system-dag-driver")) return KB_SIM_STEP_DAG_DRIVER;
  if (!strcmp(tmpl, "system-container-driver")) return KB_SIM_STEP_DRIVER;
  return KB_SIM_STEP_EXECUTOR;
}

/* ---- KFP v1 / Argo ---- */

static const cJSON *find_template(builder *b, const char *name) {
  for (const cJSON *t = b->templates ? b->templates->child : NULL; t; t = t->next)
    if (getstr(t, "name") && !strcmp(getstr(t, "name"), name)) return t;
  return NULL;
}

static int expand_v1(builder *b, const char *tmpl_name, char *suffix, const char *display,
                     const char *task_name, int parent, int depth);

/* The task names a `depends` expression mentions ("a.Succeeded && (b || c)"). */
static int depends_names(const char *expr, char names[][128], int max) {
  int n = 0;
  const char *p = expr;
  while (*p && n < max) {
    if (isalnum((unsigned char)*p) || *p == '-' || *p == '_') {
      const char *s = p;
      while (isalnum((unsigned char)*p) || *p == '-' || *p == '_') p++;
      size_t len = (size_t)(p - s);
      if (len < 128) {
        memcpy(names[n], s, len);
        names[n][len] = 0;
        n++;
      }
      if (*p == '.') /* skip .Succeeded / .Failed / .AnySucceeded */
        while (*p && (*p == '.' || isalnum((unsigned char)*p))) p++;
    } else {
      p++;
    }
  }
  return n;
}

static int expand_dag_v1(builder *b, const cJSON *dag, int g, const char *suffix, int depth,
                         const char *where) {
  const cJSON *tasks = get(dag, "tasks");
  if (!cJSON_IsArray(tasks))
    return kb_sim_fail(b->err, KB_SIM_EPARSE, "template %s: dag.tasks must be a list", where);
  int n = cJSON_GetArraySize(tasks);
  int *first = calloc((size_t)n + 1, sizeof *first), *end = calloc((size_t)n + 1, sizeof *end);
  if (!first || !end) {
    free(first);
    free(end);
    return oom(b);
  }
  int i = 0, rc = 0;
  for (const cJSON *t = tasks->child; t && !rc; t = t->next, i++) {
    const char *name = getstr(t, "name"), *tmpl = getstr(t, "template");
    if (!name || !tmpl) {
      rc = kb_sim_fail(b->err, KB_SIM_EPARSE, "template %s: every dag task needs name and template", where);
      break;
    }
    first[i] = (int)b->p->n_steps;
    rc = expand_v1(b, tmpl, xprintf("%s.%s", suffix, name), name, name, g, depth + 1);
    end[i] = (int)b->p->n_steps;
  }
  i = 0;
  for (const cJSON *t = tasks->child; t && !rc; t = t->next, i++) {
    char names[16][128];
    int nn = 0;
    const cJSON *deps = get(t, "dependencies");
    for (const cJSON *d = cJSON_IsArray(deps) ? deps->child : NULL; d && nn < 16; d = d->next)
      if (cJSON_IsString(d)) snprintf(names[nn++], sizeof names[0], "%s", d->valuestring);
    const char *expr = getstr(t, "depends");
    if (expr) nn += depends_names(expr, names + nn, 16 - nn);
    for (int k = 0; k < nn && !rc; k++) {
      int j = 0, found = 0;
      for (const cJSON *u = tasks->child; u; u = u->next, j++)
        if (getstr(u, "name") && !strcmp(getstr(u, "name"), names[k])) {
          rc = range_dep(b, first[i], end[i], first[j], end[j]);
          found = 1;
          break;
        }
      if (!found && !rc)
        rc = kb_sim_fail(b->err, KB_SIM_EPARSE, "template %s: task %s depends on unknown task %s", where,
                      getstr(t, "name"), names[k]);
    }
  }
  free(first);
  free(end);
  return rc;
}

static int expand_steps_v1(builder *b, const cJSON *steps, int g, const char *suffix, int depth,
                           const char *where) {
  if (!cJSON_IsArray(steps))
    return kb_sim_fail(b->err, KB_SIM_EPARSE, "template %s: steps must be a list of lists", where);
  int gi = 0, prev_first = -1, prev_end = -1;
  for (const cJSON *grp = steps->child; grp; grp = grp->next, gi++) {
    if (!cJSON_IsArray(grp))
      return kb_sim_fail(b->err, KB_SIM_EPARSE, "template %s: steps must be a list of lists", where);
    char disp[32];
    snprintf(disp, sizeof disp, "[%d]", gi);
    int sg = gnode_add(b, GN_STEPGROUP, g, xprintf("%s[%d]", suffix, gi), disp, NULL);
    if (sg < 0) return -1;
    int first = (int)b->p->n_steps;
    for (const cJSON *s = grp->child; s; s = s->next) {
      const char *name = getstr(s, "name"), *tmpl = getstr(s, "template");
      if (!name || !tmpl)
        return kb_sim_fail(b->err, KB_SIM_EPARSE, "template %s: every step needs name and template", where);
      if (expand_v1(b, tmpl, xprintf("%s[%d].%s", suffix, gi, name), name, name, sg, depth + 1))
        return -1;
    }
    int end = (int)b->p->n_steps;
    b->p->gnodes[sg].first = first;
    b->p->gnodes[sg].end = end;
    if (prev_first >= 0 && range_dep(b, first, end, prev_first, prev_end)) return -1;
    if (end > first) {
      prev_first = first;
      prev_end = end;
    }
  }
  return 0;
}

static int container_step_v1(builder *b, const cJSON *t, int g, const char *tmpl_name,
                             const char *task_name) {
  const cJSON *ctr = get(t, "container") ? get(t, "container") : get(t, "script");
  const char *image = getstr(ctr, "image");
  if (!image)
    return kb_sim_fail(b->err, KB_SIM_EPARSE, "template %s: container has no image", tmpl_name);
  int si = step_add(b, g, task_name, tmpl_name, image, classify_template(tmpl_name));
  if (si < 0) return -1;
  sim_step *s = &b->p->steps[si];
  const cJSON *ann = get(get(t, "metadata"), "annotations");
  if (step_hints(b, s, ann, tmpl_name) || resources_v1(b, s, get(ctr, "resources"), tmpl_name) ||
      selectors_from(b, s, b->wf_selector, "spec") ||
      selectors_from(b, s, get(t, "nodeSelector"), tmpl_name) ||
      tolerations_from(b, s, get(t, "tolerations") ? get(t, "tolerations") : b->wf_tolerations,
                       tmpl_name) ||
      affinity_from(b, s, get(t, "affinity") ? get(t, "affinity") : b->wf_affinity, tmpl_name))
    return -1;
  if (!strcmp(tmpl_name, "system-container-impl")) s->extra = b->sim->cfg->launcher_init; /* B3 */
  return 0;
}

/* Argo's suspend.duration: seconds ("20") or a Go duration ("30s", "5m",
 * "1h30m"). -1 for none or an expression the model cannot read. */
static double suspend_seconds(const char *d) {
  if (!d || !*d) return -1;
  char *end;
  double v = strtod(d, &end), total = 0;
  if (!*end) return v >= 0 ? v : -1;
  for (const char *p = d; *p;) {
    v = strtod(p, &end);
    if (end == p) return -1;
    double unit = *end == 'h' ? 3600 : *end == 's' ? 1 : *end == 'm' && end[1] != 's' ? 60 : -1;
    if (unit < 0) return -1;
    total += v * unit;
    p = end + 1;
  }
  return total;
}

/* A suspend template: a step without a pod, its duration the suspend's. */
static int suspend_step_v1(builder *b, const cJSON *t, int g, const char *tmpl_name,
                           const char *task_name) {
  int si = step_add(b, g, task_name, tmpl_name, NULL, KB_SIM_STEP_SUSPEND);
  if (si < 0) return -1;
  const cJSON *d = get(get(t, "suspend"), "duration");
  char num[32];
  if (cJSON_IsNumber(d)) snprintf(num, sizeof num, "%g", d->valuedouble);
  double secs = suspend_seconds(cJSON_IsNumber(d) ? num : getstr(get(t, "suspend"), "duration"));
  b->p->steps[si].info.duration = (kb_sim_dist){KB_SIM_FIXED, secs, 0};
  b->p->n_suspend++;
  return 0;
}

static int expand_v1(builder *b, const char *tmpl_name, char *suffix, const char *display,
                     const char *task_name, int parent, int depth) {
  if (!suffix) return oom(b);
  if (depth > MAX_DEPTH) {
    free(suffix);
    return kb_sim_fail(b->err, KB_SIM_EPARSE, "templates nest deeper than %d (recursive template %s?)",
                    MAX_DEPTH, tmpl_name);
  }
  const cJSON *t = find_template(b, tmpl_name);
  if (!t) {
    free(suffix);
    return kb_sim_fail(b->err, KB_SIM_EPARSE, "template %s not found", tmpl_name);
  }
  sim_gnode_type type = get(t, "dag")     ? GN_DAG
                        : get(t, "steps") ? GN_STEPS
                        : (get(t, "container") || get(t, "script")) ? GN_POD
                        : get(t, "suspend")                         ? GN_SUSPEND
                                                                    : (sim_gnode_type)-1;
  if ((int)type < 0) {
    free(suffix);
    return kb_sim_fail(b->err, KB_SIM_EPARSE,
                    "template %s: unsupported template type (container, script, suspend, dag and steps are modelled)",
                    tmpl_name);
  }
  char *sfx_copy = kb_sim_strdup(suffix);
  int g = gnode_add(b, type, parent, suffix, display, tmpl_name);
  if (g < 0 || !sfx_copy) {
    free(sfx_copy);
    return g < 0 ? -1 : oom(b);
  }
  int first = (int)b->p->n_steps, rc;
  if (type == GN_POD) rc = container_step_v1(b, t, g, tmpl_name, task_name);
  else if (type == GN_SUSPEND) rc = suspend_step_v1(b, t, g, tmpl_name, task_name);
  else if (type == GN_DAG) rc = expand_dag_v1(b, get(t, "dag"), g, sfx_copy, depth, tmpl_name);
  else rc = expand_steps_v1(b, get(t, "steps"), g, sfx_copy, depth, tmpl_name);
  free(sfx_copy);
  b->p->gnodes[g].first = first;
  b->p->gnodes[g].end = (int)b->p->n_steps;
  return rc < 0 ? -1 : 0;
}

static int load_v1(builder *b, const cJSON *wf) {
  const cJSON *spec = get(wf, "spec"), *meta = get(wf, "metadata");
  b->templates = get(spec, "templates");
  b->wf_selector = get(spec, "nodeSelector");
  b->wf_tolerations = get(spec, "tolerations");
  b->wf_affinity = get(spec, "affinity");
  const char *entry = getstr(spec, "entrypoint");
  if (!cJSON_IsArray(b->templates) || !entry)
    return kb_sim_fail(b->err, KB_SIM_EPARSE, "workflow: spec.entrypoint and spec.templates are required");
  const char *gen = getstr(meta, "generateName"), *name = getstr(meta, "name");
  b->p->format = kb_sim_strdup("v1");
  b->p->generate_name = gen ? kb_sim_strdup(gen) : xprintf("%s-", name ? name : "workflow");
  /* The KFP v1 SDK stores the pipeline's name in an annotation. */
  const char *ps = getstr(get(meta, "annotations"), "pipelines.kubeflow.org/pipeline_spec");
  cJSON *psj = ps ? cJSON_Parse(ps) : NULL;
  const char *pname = getstr(psj, "name");
  b->p->name = kb_sim_strdup(pname ? pname : name ? name : gen ? gen : entry);
  cJSON_Delete(psj);
  if (!b->p->format || !b->p->generate_name || !b->p->name) return oom(b);
  if (expand_v1(b, entry, kb_sim_strdup(""), "", entry, -1, 0)) return -1;
  b->p->n_main = b->p->n_steps;
  const char *on_exit = getstr(spec, "onExit");
  if (on_exit) {
    b->exit_handler = 1;
    if (expand_v1(b, on_exit, kb_sim_strdup(".onExit"), "onExit", "onExit", -1, 0)) return -1;
  }
  return 0;
}

/* ---- KFP v2 IR ---- */

/* Resolve `{{$.inputs.parameters['x']}}` through the task's inputs to a
 * constant or a pipeline input (params, then its default). */
static const char *resolve_v2(builder *b, const cJSON *task, const char *text, char *buf, size_t n) {
  const char *open = strstr(text, "{{$.inputs.parameters['");
  if (!open) return text;
  const char *name = open + strlen("{{$.inputs.parameters['");
  const char *close = strstr(name, "']}}");
  if (!close || (size_t)(close - name) >= n) return NULL;
  char key[256];
  snprintf(key, sizeof key, "%.*s", (int)(close - name), name);
  const cJSON *in = get(get(get(task, "inputs"), "parameters"), key);
  const cJSON *v = get(get(in, "runtimeValue"), "constant");
  const char *root_param = getstr(in, "componentInputParameter");
  if (root_param) {
    v = get(b->params, root_param);
    if (!v) v = get(get(get(b->root_inputs, "parameters"), root_param), "defaultValue");
  }
  if (cJSON_IsString(v)) return v->valuestring;
  if (cJSON_IsNumber(v)) {
    snprintf(buf, n, "%.17g", v->valuedouble);
    return buf;
  }
  return NULL;
}

static int res_field(builder *b, const cJSON *task, const cJSON *res, const char *key,
                     const char **out, char *buf, size_t n) {
  const cJSON *v = get(res, key);
  *out = NULL;
  if (!v) return 0;
  if (cJSON_IsNumber(v)) {
    snprintf(buf, n, "%.17g", v->valuedouble);
    *out = buf;
    return 0;
  }
  if (!cJSON_IsString(v)) return kb_sim_fail(b->err, KB_SIM_EPARSE, "resources.%s: expected a string", key);
  *out = resolve_v2(b, task, v->valuestring, buf, n);
  if (!*out)
    return kb_sim_fail(b->err, KB_SIM_EPARSE, "resources.%s: cannot resolve \"%s\"", key, v->valuestring);
  return 0;
}

static int resources_v2(builder *b, sim_step *s, const cJSON *task, const cJSON *res, const char *where) {
  char b1[64], b2[64], b3[64], b4[64], b5[64];
  const char *creq, *clim, *mreq, *mlim, *gcount;
  if (res_field(b, task, res, "resourceCpuRequest", &creq, b1, sizeof b1) ||
      res_field(b, task, res, "resourceCpuLimit", &clim, b2, sizeof b2) ||
      res_field(b, task, res, "resourceMemoryRequest", &mreq, b3, sizeof b3) ||
      res_field(b, task, res, "resourceMemoryLimit", &mlim, b4, sizeof b4))
    return -1;
  /* Deprecated numeric fields: cpuLimit in cores, memoryLimit in GB. */
  char b6[64], b7[64], b8[64];
  if (!clim && cJSON_IsNumber(get(res, "cpuLimit")))
    snprintf(b6, sizeof b6, "%.17g", get(res, "cpuLimit")->valuedouble), clim = b6;
  if (!creq && cJSON_IsNumber(get(res, "cpuRequest")))
    snprintf(b7, sizeof b7, "%.17g", get(res, "cpuRequest")->valuedouble), creq = b7;
  if (!mlim && cJSON_IsNumber(get(res, "memoryLimit")))
    snprintf(b8, sizeof b8, "%.17gG", get(res, "memoryLimit")->valuedouble), mlim = b8;
  int64_t cpu_lim = -1;
  if (clim && kb_sim_parse_cpu_str(clim, &cpu_lim))
    return kb_sim_fail(b->err, KB_SIM_EPARSE, "%s: bad cpu limit \"%s\"", where, clim);
  if (creq ? kb_sim_parse_cpu_str(creq, &s->info.cpu_m) : 0)
    return kb_sim_fail(b->err, KB_SIM_EPARSE, "%s: bad cpu request \"%s\"", where, creq);
  if (!creq && cpu_lim >= 0) s->info.cpu_m = cpu_lim;
  const char *mem = mreq ? mreq : mlim;
  if (mem && kb_sim_parse_mem_str(mem, &s->info.memory))
    return kb_sim_fail(b->err, KB_SIM_EPARSE, "%s: bad memory quantity \"%s\"", where, mem);
  const cJSON *acc = get(res, "accelerator");
  if (acc) {
    if (res_field(b, task, acc, "resourceCount", &gcount, b5, sizeof b5)) return -1;
    if (!gcount && res_field(b, task, acc, "count", &gcount, b5, sizeof b5)) return -1;
    char *end;
    long g = gcount ? strtol(gcount, &end, 10) : 1;
    if (gcount && (end == gcount || *end || g < 0))
      return kb_sim_fail(b->err, KB_SIM_EPARSE, "%s: bad accelerator count \"%s\"", where, gcount);
    s->info.gpu = (int)g;
  }
  if (s->info.cpu_demand < 0)
    s->info.cpu_demand = cpu_lim >= 0 ? cpu_lim / 1000.0
                         : s->info.cpu_m > 0 ? s->info.cpu_m / 1000.0
                                             : b->sim->cfg->default_cpu_demand;
  return 0;
}

static int driver_step(builder *b, int parent, const char *suffix, const char *name, int dag) {
  const char *tmpl = dag ? "system-dag-driver" : "system-container-driver";
  int g = gnode_add(b, GN_POD, parent, xprintf("%s", suffix), name, tmpl);
  if (g < 0) return -1;
  int si = step_add(b, g, name, tmpl, "ghcr.io/kubeflow/kfp-driver",
                    dag ? KB_SIM_STEP_DAG_DRIVER : KB_SIM_STEP_DRIVER);
  if (si < 0) return -1;
  sim_step *s = &b->p->steps[si];
  s->info.cpu_m = b->sim->cfg->driver_cpu_m;      /* B2 */
  s->info.memory = b->sim->cfg->driver_memory;    /* B2 */
  s->info.cpu_demand = s->info.cpu_m / 1000.0;
  return step_hints(b, s, NULL, name) ? -1 : si;
}

static int executor_v2(builder *b, const cJSON *task, const char *task_name, const char *label,
                       int g) {
  const cJSON *ex = get(b->executors, label);
  const cJSON *ctr = get(ex, "container");
  if (!ctr)
    return kb_sim_fail(b->err, KB_SIM_EPARSE, "task %s: executor %s has no container (importer and "
                    "resolver executors are not modelled)", task_name, label);
  const char *tmpl = b->sim->cfg->v2_driver_pods ? "system-container-impl" : label;
  int si = step_add(b, g, task_name, tmpl, getstr(ctr, "image"), KB_SIM_STEP_EXECUTOR);
  if (si < 0) return -1;
  sim_step *s = &b->p->steps[si];
  if (b->sim->cfg->v2_driver_pods) s->extra = b->sim->cfg->launcher_init; /* B3 */
  const cJSON *plat = get(b->platform, label);
  if (step_hints(b, s, get(get(plat, "podMetadata"), "annotations"), task_name) ||
      resources_v2(b, s, task, get(ctr, "resources"), task_name) ||
      selectors_from(b, s, get(get(plat, "nodeSelector"), "labels"), task_name) ||
      tolerations_from(b, s, get(plat, "tolerations"), task_name))
    return -1;
  return si;
}

static int expand_dag_v2(builder *b, const cJSON *dag, const char *suffix, int parent,
                         int entry_driver, int depth);

/* One task: [driver +] executor, or a nested DAG. Steps land in [first, end). */
static int task_v2(builder *b, const cJSON *task, const char *suffix, int parent, int entry_driver,
                   int depth) {
  const char *name = task->string;
  const char *comp_name = getstr(get(task, "componentRef"), "name");
  const cJSON *comp = comp_name ? get(b->components, comp_name) : NULL;
  if (!comp) return kb_sim_fail(b->err, KB_SIM_EPARSE, "task %s: component %s not found", name,
                             comp_name ? comp_name : "(none)");
  int drivers = b->sim->cfg->v2_driver_pods;
  int first = (int)b->p->n_steps;
  if (get(comp, "dag")) {
    if (depth > MAX_DEPTH) return kb_sim_fail(b->err, KB_SIM_EPARSE, "DAGs nest deeper than %d", MAX_DEPTH);
    int g = gnode_add(b, GN_DAG, parent, xprintf("%s.%s", suffix, name), name, comp_name);
    if (g < 0) return -1;
    int drv = -1;
    if (drivers) {
      char *ds = xprintf("%s.%s-driver", suffix, name), *dn = xprintf("%s-driver", name);
      drv = ds && dn ? driver_step(b, parent, ds, dn, 1) : oom(b);
      free(ds);
      free(dn);
      if (drv < 0) return -1;
      if (entry_driver >= 0 && add_dep(b, (size_t)drv, (size_t)entry_driver)) return -1;
    }
    char *sub = xprintf("%s.%s", suffix, name);
    int rc = sub ? expand_dag_v2(b, get(comp, "dag"), sub, g, drv >= 0 ? drv : entry_driver, depth + 1) : oom(b);
    free(sub);
    b->p->gnodes[g].first = first;
    b->p->gnodes[g].end = (int)b->p->n_steps;
    return rc;
  }
  const char *label = getstr(comp, "executorLabel");
  if (!label) return kb_sim_fail(b->err, KB_SIM_EPARSE, "component %s: no executorLabel or dag", comp_name);
  if (!drivers) {
    int g = gnode_add(b, GN_POD, parent, xprintf("%s.%s", suffix, name), name, label);
    if (g < 0) return -1;
    int si = executor_v2(b, task, name, label, g);
    if (si < 0) return -1;
    return entry_driver >= 0 ? add_dep(b, (size_t)si, (size_t)entry_driver) : 0;
  }
  char *ds = xprintf("%s.%s-driver", suffix, name), *dn = xprintf("%s-driver", name);
  int drv = ds && dn ? driver_step(b, parent, ds, dn, 0) : oom(b);
  free(ds);
  free(dn);
  if (drv < 0) return -1;
  if (entry_driver >= 0 && add_dep(b, (size_t)drv, (size_t)entry_driver)) return -1;
  int g = gnode_add(b, GN_DAG, parent, xprintf("%s.%s", suffix, name), name, "system-container-executor");
  if (g < 0) return -1;
  int eg = gnode_add(b, GN_POD, g, xprintf("%s.%s.executor", suffix, name), "executor",
                     "system-container-impl");
  if (eg < 0) return -1;
  int si = executor_v2(b, task, name, label, eg);
  if (si < 0) return -1;
  b->p->gnodes[g].first = si;
  b->p->gnodes[g].end = si + 1;
  return add_dep(b, (size_t)si, (size_t)drv);
}

static void task_deps_v2(const cJSON *task, char names[][128], int *n, int max) {
  const cJSON *deps = get(task, "dependentTasks");
  for (const cJSON *d = cJSON_IsArray(deps) ? deps->child : NULL; d && *n < max; d = d->next)
    if (cJSON_IsString(d)) snprintf(names[(*n)++], 128, "%s", d->valuestring);
  static const char *kinds[][2] = {{"parameters", "taskOutputParameter"},
                                   {"artifacts", "taskOutputArtifact"}};
  for (int k = 0; k < 2; k++) {
    const cJSON *ins = get(get(task, "inputs"), kinds[k][0]);
    for (const cJSON *i = ins ? ins->child : NULL; i && *n < max; i = i->next) {
      const char *prod = getstr(get(i, kinds[k][1]), "producerTask");
      if (!prod) continue;
      int dup = 0;
      for (int j = 0; j < *n; j++) dup |= !strcmp(names[j], prod);
      if (!dup) snprintf(names[(*n)++], 128, "%s", prod);
    }
  }
}

static int expand_dag_v2(builder *b, const cJSON *dag, const char *suffix, int parent,
                         int entry_driver, int depth) {
  const cJSON *tasks = get(dag, "tasks");
  if (!cJSON_IsObject(tasks)) return kb_sim_fail(b->err, KB_SIM_EPARSE, "dag.tasks must be a mapping");
  int n = cJSON_GetArraySize(tasks);
  int *first = calloc((size_t)n + 1, sizeof *first), *end = calloc((size_t)n + 1, sizeof *end);
  if (!first || !end) {
    free(first);
    free(end);
    return oom(b);
  }
  int i = 0, rc = 0;
  for (const cJSON *t = tasks->child; t && !rc; t = t->next, i++) {
    first[i] = (int)b->p->n_steps;
    rc = task_v2(b, t, suffix, parent, entry_driver, depth);
    end[i] = (int)b->p->n_steps;
  }
  i = 0;
  for (const cJSON *t = tasks->child; t && !rc; t = t->next, i++) {
    char names[32][128];
    int nn = 0;
    task_deps_v2(t, names, &nn, 32);
    for (int k = 0; k < nn && !rc; k++) {
      int j = 0, found = 0;
      for (const cJSON *u = tasks->child; u; u = u->next, j++)
        if (!strcmp(u->string, names[k])) {
          rc = range_dep(b, first[i], end[i], first[j], end[j]);
          found = 1;
          break;
        }
      if (!found && !rc)
        rc = kb_sim_fail(b->err, KB_SIM_EPARSE, "task %s depends on unknown task %s", t->string, names[k]);
    }
  }
  free(first);
  free(end);
  return rc;
}

static int load_v2(builder *b, const cJSON *spec, const cJSON *platform_doc) {
  const cJSON *root = get(spec, "root");
  b->components = get(spec, "components");
  b->executors = get(get(spec, "deploymentSpec"), "executors");
  b->root_inputs = get(root, "inputDefinitions");
  b->platform = get(get(get(get(platform_doc, "platforms"), "kubernetes"), "deploymentSpec"), "executors");
  const char *name = getstr(get(spec, "pipelineInfo"), "name");
  b->p->format = kb_sim_strdup("v2");
  b->p->name = kb_sim_strdup(name ? name : "pipeline");
  b->p->generate_name = xprintf("%s-", name ? name : "pipeline");
  if (!b->p->format || !b->p->name || !b->p->generate_name) return oom(b);
  if (!get(root, "dag")) return kb_sim_fail(b->err, KB_SIM_EPARSE, "pipeline spec: root.dag is required");
  int entry = gnode_add(b, GN_DAG, -1, kb_sim_strdup(""), "", "entrypoint");
  if (entry < 0) return -1;
  int rc;
  if (b->sim->cfg->v2_driver_pods) {
    int rd = driver_step(b, entry, ".root-driver", "root-driver", 1);
    if (rd < 0) return -1;
    int rg = gnode_add(b, GN_DAG, entry, kb_sim_strdup(".root"), "root", "root");
    if (rg < 0) return -1;
    rc = expand_dag_v2(b, get(root, "dag"), ".root", rg, rd, 0);
    b->p->gnodes[rg].first = rd + 1;
    b->p->gnodes[rg].end = (int)b->p->n_steps;
  } else {
    rc = expand_dag_v2(b, get(root, "dag"), "", entry, -1, 0);
  }
  b->p->gnodes[entry].first = 0;
  b->p->gnodes[entry].end = (int)b->p->n_steps;
  b->p->n_main = b->p->n_steps;
  return rc;
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
    rc = load_v1(&b, main_doc);
  else if (get(main_doc, "root") && (get(main_doc, "pipelineInfo") || get(main_doc, "deploymentSpec")))
    rc = load_v2(&b, main_doc, second);
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
