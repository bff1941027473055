/* KFP v1 / Argo workflows as pipeline steps: spec.entrypoint expanded
 * through dag, steps, container, script and suspend templates, then
 * spec.onExit (pipeline.c describes the rules). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline_internal.h"

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
    rc = expand_v1(b, tmpl, kb_sim_pl_xprintf("%s.%s", suffix, name), name, name, g, depth + 1);
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
          rc = kb_sim_pl_range_dep(b, first[i], end[i], first[j], end[j]);
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
    int sg = kb_sim_pl_gnode_add(b, GN_STEPGROUP, g, kb_sim_pl_xprintf("%s[%d]", suffix, gi), disp, NULL);
    if (sg < 0) return -1;
    int first = (int)b->p->n_steps;
    for (const cJSON *s = grp->child; s; s = s->next) {
      const char *name = getstr(s, "name"), *tmpl = getstr(s, "template");
      if (!name || !tmpl)
        return kb_sim_fail(b->err, KB_SIM_EPARSE, "template %s: every step needs name and template", where);
      if (expand_v1(b, tmpl, kb_sim_pl_xprintf("%s[%d].%s", suffix, gi, name), name, name, sg, depth + 1))
        return -1;
    }
    int end = (int)b->p->n_steps;
    b->p->gnodes[sg].first = first;
    b->p->gnodes[sg].end = end;
    if (prev_first >= 0 && kb_sim_pl_range_dep(b, first, end, prev_first, prev_end)) return -1;
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
  int si = kb_sim_pl_step_add(b, g, task_name, tmpl_name, image, classify_template(tmpl_name));
  if (si < 0) return -1;
  sim_step *s = &b->p->steps[si];
  const cJSON *ann = get(get(t, "metadata"), "annotations");
  if (kb_sim_pl_step_hints(b, s, ann, tmpl_name) || resources_v1(b, s, get(ctr, "resources"), tmpl_name) ||
      kb_sim_pl_selectors_from(b, s, b->wf_selector, "spec") ||
      kb_sim_pl_selectors_from(b, s, get(t, "nodeSelector"), tmpl_name) ||
      kb_sim_pl_tolerations_from(b, s, get(t, "tolerations") ? get(t, "tolerations") : b->wf_tolerations,
                       tmpl_name) ||
      kb_sim_pl_affinity_from(b, s, get(t, "affinity") ? get(t, "affinity") : b->wf_affinity, tmpl_name))
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
  int si = kb_sim_pl_step_add(b, g, task_name, tmpl_name, NULL, KB_SIM_STEP_SUSPEND);
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
  int g = kb_sim_pl_gnode_add(b, type, parent, suffix, display, tmpl_name);
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

int kb_sim_pl_load_v1(builder *b, const cJSON *wf) {
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
  b->p->generate_name = gen ? kb_sim_strdup(gen) : kb_sim_pl_xprintf("%s-", name ? name : "workflow");
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
