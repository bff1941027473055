/* KFP v2 IR as pipeline steps: root.dag tasks through componentRef and
 * executorLabel to containers, with driver pods when v2_driver_pods is
 * on (pipeline.c describes the rules). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline_internal.h"

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
  int g = kb_sim_pl_gnode_add(b, GN_POD, parent, kb_sim_pl_xprintf("%s", suffix), name, tmpl);
  if (g < 0) return -1;
  int si = kb_sim_pl_step_add(b, g, name, tmpl, "ghcr.io/kubeflow/kfp-driver",
                    dag ? KB_SIM_STEP_DAG_DRIVER : KB_SIM_STEP_DRIVER);
  if (si < 0) return -1;
  sim_step *s = &b->p->steps[si];
  s->info.cpu_m = b->sim->cfg->driver_cpu_m;      /* B2 */
  s->info.memory = b->sim->cfg->driver_memory;    /* B2 */
  s->info.cpu_demand = s->info.cpu_m / 1000.0;
  return kb_sim_pl_step_hints(b, s, NULL, name) ? -1 : si;
}

static int executor_v2(builder *b, const cJSON *task, const char *task_name, const char *label,
                       int g) {
  const cJSON *ex = get(b->executors, label);
  const cJSON *ctr = get(ex, "container");
  if (!ctr)
    return kb_sim_fail(b->err, KB_SIM_EPARSE, "task %s: executor %s has no container (importer and "
                    "resolver executors are not modelled)", task_name, label);
  const char *tmpl = b->sim->cfg->v2_driver_pods ? "system-container-impl" : label;
  int si = kb_sim_pl_step_add(b, g, task_name, tmpl, getstr(ctr, "image"), KB_SIM_STEP_EXECUTOR);
  if (si < 0) return -1;
  sim_step *s = &b->p->steps[si];
  if (b->sim->cfg->v2_driver_pods) s->extra = b->sim->cfg->launcher_init; /* B3 */
  const cJSON *plat = get(b->platform, label);
  if (kb_sim_pl_step_hints(b, s, get(get(plat, "podMetadata"), "annotations"), task_name) ||
      resources_v2(b, s, task, get(ctr, "resources"), task_name) ||
      kb_sim_pl_selectors_from(b, s, get(get(plat, "nodeSelector"), "labels"), task_name) ||
      kb_sim_pl_tolerations_from(b, s, get(plat, "tolerations"), task_name))
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
    int g = kb_sim_pl_gnode_add(b, GN_DAG, parent, kb_sim_pl_xprintf("%s.%s", suffix, name), name, comp_name);
    if (g < 0) return -1;
    int drv = -1;
    if (drivers) {
      char *ds = kb_sim_pl_xprintf("%s.%s-driver", suffix, name), *dn = kb_sim_pl_xprintf("%s-driver", name);
      drv = ds && dn ? driver_step(b, parent, ds, dn, 1) : oom(b);
      free(ds);
      free(dn);
      if (drv < 0) return -1;
      if (entry_driver >= 0 && kb_sim_pl_add_dep(b, (size_t)drv, (size_t)entry_driver)) return -1;
    }
    char *sub = kb_sim_pl_xprintf("%s.%s", suffix, name);
    int rc = sub ? expand_dag_v2(b, get(comp, "dag"), sub, g, drv >= 0 ? drv : entry_driver, depth + 1) : oom(b);
    free(sub);
    b->p->gnodes[g].first = first;
    b->p->gnodes[g].end = (int)b->p->n_steps;
    return rc;
  }
  const char *label = getstr(comp, "executorLabel");
  if (!label) return kb_sim_fail(b->err, KB_SIM_EPARSE, "component %s: no executorLabel or dag", comp_name);
  if (!drivers) {
    int g = kb_sim_pl_gnode_add(b, GN_POD, parent, kb_sim_pl_xprintf("%s.%s", suffix, name), name, label);
    if (g < 0) return -1;
    int si = executor_v2(b, task, name, label, g);
    if (si < 0) return -1;
    return entry_driver >= 0 ? kb_sim_pl_add_dep(b, (size_t)si, (size_t)entry_driver) : 0;
  }
  char *ds = kb_sim_pl_xprintf("%s.%s-driver", suffix, name), *dn = kb_sim_pl_xprintf("%s-driver", name);
  int drv = ds && dn ? driver_step(b, parent, ds, dn, 0) : oom(b);
  free(ds);
  free(dn);
  if (drv < 0) return -1;
  if (entry_driver >= 0 && kb_sim_pl_add_dep(b, (size_t)drv, (size_t)entry_driver)) return -1;
  int g = kb_sim_pl_gnode_add(b, GN_DAG, parent, kb_sim_pl_xprintf("%s.%s", suffix, name), name, "system-container-executor");
  if (g < 0) return -1;
  int eg = kb_sim_pl_gnode_add(b, GN_POD, g, kb_sim_pl_xprintf("%s.%s.executor", suffix, name), "executor",
                     "system-container-impl");
  if (eg < 0) return -1;
  int si = executor_v2(b, task, name, label, eg);
  if (si < 0) return -1;
  b->p->gnodes[g].first = si;
  b->p->gnodes[g].end = si + 1;
  return kb_sim_pl_add_dep(b, (size_t)si, (size_t)drv);
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
          rc = kb_sim_pl_range_dep(b, first[i], end[i], first[j], end[j]);
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

int kb_sim_pl_load_v2(builder *b, const cJSON *spec, const cJSON *platform_doc) {
  const cJSON *root = get(spec, "root");
  b->components = get(spec, "components");
  b->executors = get(get(spec, "deploymentSpec"), "executors");
  b->root_inputs = get(root, "inputDefinitions");
  b->platform = get(get(get(get(platform_doc, "platforms"), "kubernetes"), "deploymentSpec"), "executors");
  const char *name = getstr(get(spec, "pipelineInfo"), "name");
  b->p->format = kb_sim_strdup("v2");
  b->p->name = kb_sim_strdup(name ? name : "pipeline");
  b->p->generate_name = kb_sim_pl_xprintf("%s-", name ? name : "pipeline");
  if (!b->p->format || !b->p->name || !b->p->generate_name) return oom(b);
  if (!get(root, "dag")) return kb_sim_fail(b->err, KB_SIM_EPARSE, "pipeline spec: root.dag is required");
  int entry = kb_sim_pl_gnode_add(b, GN_DAG, -1, kb_sim_strdup(""), "", "entrypoint");
  if (entry < 0) return -1;
  int rc;
  if (b->sim->cfg->v2_driver_pods) {
    int rd = driver_step(b, entry, ".root-driver", "root-driver", 1);
    if (rd < 0) return -1;
    int rg = kb_sim_pl_gnode_add(b, GN_DAG, entry, kb_sim_strdup(".root"), "root", "root");
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
