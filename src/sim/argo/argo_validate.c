/* argo-server's checks of a Workflow before it is created or linted, in
 * the order and words of argo's workflow/validate (v3.5+): the entrypoint,
 * then spec.onExit, then every template, each template through the ones it
 * calls. Only the structural checks a benchmark's workflows can trip are
 * made: a missing or unknown entrypoint, templates of no or several types,
 * DAGs without tasks, with unknown dependencies or a cycle, steps without a
 * name or with a duplicate one, references to undefined templates. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "argo_internal.h"

#define MAX_TASKS 512
#define MAX_DEPTH 32

typedef struct vctx {
  const cJSON *templates;
  char *msg;
  size_t cap;
} vctx;

static const char *str_of(const cJSON *o, const char *key) {
  return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key));
}

static const cJSON *find_template(const vctx *v, const char *name) {
  const cJSON *t;
  cJSON_ArrayForEach(t, v->templates) {
    const char *n = str_of(t, "name");
    if (n && !strcmp(n, name)) return t;
  }
  return NULL;
}

static int fail(vctx *v, const char *fmt, const char *a, const char *b, const char *c) {
  snprintf(v->msg, v->cap, fmt, a, b, c);
  return -1;
}

/* Prefixes the message: "templates.main.tasks.a " + what the callee said. */
static int wrap(vctx *v, const char *fmt, const char *a, const char *b) {
  char inner[512], prefix[512];
  snprintf(inner, sizeof inner, "%s", v->msg);
  snprintf(prefix, sizeof prefix, fmt, a, b);
  snprintf(v->msg, v->cap, "%s %s", prefix, inner);
  return -1;
}

static int check_template(vctx *v, const cJSON *t, int depth);

/* A template holder (a task, a step, the entrypoint): its template must
 * exist, and is checked in turn. A templateRef points elsewhere (another
 * WorkflowTemplate): not followed. */
static int check_holder(vctx *v, const cJSON *holder_template, int depth) {
  const char *name = cJSON_GetStringValue(holder_template);
  if (!name || !*name) return 0; /* templateRef or inline: not ours to resolve */
  const cJSON *t = find_template(v, name);
  if (!t) return fail(v, "template name '%s' undefined", name, "", "");
  return depth < MAX_DEPTH ? check_template(v, t, depth + 1) : 0;
}

/* The task names a depends expression mentions ("a.Succeeded && (b || c)"). */
static int depends_names(const char *expr, const char **names, char store[][128], int n, int max) {
  for (const char *p = expr; *p && n < max;) {
    if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_') {
      p++;
      continue;
    }
    const char *s = p;
    while (isalnum((unsigned char)*p) || *p == '-' || *p == '_') p++;
    snprintf(store[n], 128, "%.*s", (int)(p - s), s);
    names[n] = store[n];
    n++;
    if (*p == '.')
      while (*p == '.' || isalnum((unsigned char)*p)) p++;
  }
  return n;
}

#define MAX_DEPS 16

typedef struct dag_task {
  const char *name;
  const char *deps[MAX_DEPS];
  char store[MAX_DEPS][128];
  int n_deps;
} dag_task;

static int task_index(dag_task *tasks, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(tasks[i].name, name)) return i;
  return -1;
}

/* Argo sorts the tasks topologically first: duplicate names, unknown
 * dependencies and cycles all fail there ("sorting failed: ..."). */
static int sort_dag(vctx *v, const char *tname, dag_task *tasks, int n) {
  for (int i = 0; i < n; i++)
    for (int j = 0; j < i; j++)
      if (!strcmp(tasks[i].name, tasks[j].name))
        return fail(v, "templates.%s sorting failed: duplicated nodeName %s", tname, tasks[i].name, "");
  for (int i = 0; i < n; i++)
    for (int d = 0; d < tasks[i].n_deps; d++)
      if (task_index(tasks, n, tasks[i].deps[d]) < 0)
        return fail(v, "templates.%s sorting failed: invalid dependency %s", tname, tasks[i].deps[d], "");
  /* Kahn: what is left once no task is free is on or behind a cycle */
  int done = 0, progress = 1;
  unsigned char placed[MAX_TASKS] = {0};
  while (progress) {
    progress = 0;
    for (int i = 0; i < n; i++) {
      if (placed[i]) continue;
      int ready = 1;
      for (int d = 0; d < tasks[i].n_deps && ready; d++)
        ready = placed[task_index(tasks, n, tasks[i].deps[d])];
      if (ready) placed[i] = 1, done++, progress = 1;
    }
  }
  if (done < n) return fail(v, "templates.%s sorting failed: graph with cycle", tname, "", "");
  return 0;
}

static int check_dag(vctx *v, const char *tname, const cJSON *dag, int depth) {
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(dag, "tasks");
  int n = cJSON_GetArraySize(list);
  if (n == 0) return fail(v, "templates.%s must have at least one task", tname, "", "");
  if (n > MAX_TASKS) return 0; /* beyond what the check holds: the model decides */
  dag_task *tasks = calloc((size_t)n, sizeof *tasks);
  if (!tasks) return 0; /* out of memory: the model decides */
  int i = 0;
  const cJSON *t;
  cJSON_ArrayForEach(t, list) {
    dag_task *dt = &tasks[i++];
    dt->name = str_of(t, "name") ? str_of(t, "name") : "";
    dt->n_deps = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(t, "dependencies")) {
      if (cJSON_IsString(d) && dt->n_deps < MAX_DEPS) {
        snprintf(dt->store[dt->n_deps], 128, "%s", d->valuestring);
        dt->deps[dt->n_deps] = dt->store[dt->n_deps];
        dt->n_deps++;
      }
    }
    const char *dep = str_of(t, "depends");
    if (dep) dt->n_deps = depends_names(dep, dt->deps, dt->store, dt->n_deps, MAX_DEPS);
  }
  int rc = sort_dag(v, tname, tasks, n);
  free(tasks);
  if (rc) return -1;
  cJSON_ArrayForEach(t, list) {
    const char *task = str_of(t, "name") ? str_of(t, "name") : "";
    if (check_holder(v, cJSON_GetObjectItemCaseSensitive(t, "template"), depth))
      return wrap(v, "templates.%s.tasks.%s", tname, task);
  }
  return 0;
}

static int check_steps(vctx *v, const char *tname, const cJSON *groups, int depth) {
  const char *seen[MAX_TASKS];
  int n_seen = 0, gi = 0;
  const cJSON *g;
  cJSON_ArrayForEach(g, groups) {
    char idx[16];
    snprintf(idx, sizeof idx, "%d", gi++);
    const cJSON *s;
    cJSON_ArrayForEach(s, g) {
      const char *name = str_of(s, "name");
      if (!name || !*name) return fail(v, "templates.%s.steps[%s].name is required", tname, idx, "");
      for (int k = 0; k < n_seen; k++)
        if (!strcmp(seen[k], name))
          return fail(v, "templates.%s.steps[%s].name '%s' is not unique", tname, idx, name);
      if (n_seen < MAX_TASKS) seen[n_seen++] = name;
      if (check_holder(v, cJSON_GetObjectItemCaseSensitive(s, "template"), depth)) {
        char where[300];
        snprintf(where, sizeof where, "%s.steps[%s]", tname, idx);
        return wrap(v, "templates.%s.%s", where, name);
      }
    }
  }
  return 0;
}

static int check_template(vctx *v, const cJSON *t, int depth) {
  static const char *types[] = {"container", "containerSet", "steps", "script", "resource",
                                "dag", "suspend", "data", "http", "plugin"};
  const char *name = str_of(t, "name") ? str_of(t, "name") : "";
  int n_types = 0;
  for (size_t i = 0; i < sizeof types / sizeof *types; i++)
    n_types += cJSON_GetObjectItemCaseSensitive(t, types[i]) != NULL;
  const char *kinds = "container, containerSet, steps, script, resource, dag, suspend, template, "
                      "template ref";
  if (n_types == 0)
    return fail(v, "templates.%s template type unspecified. choose one of: %s", name, kinds, "");
  if (n_types > 1)
    return fail(v, "templates.%s multiple template types specified. choose one of: %s", name, kinds, "");
  const cJSON *dag = cJSON_GetObjectItemCaseSensitive(t, "dag");
  if (dag) return check_dag(v, name, dag, depth);
  const cJSON *steps = cJSON_GetObjectItemCaseSensitive(t, "steps");
  if (steps) return check_steps(v, name, steps, depth);
  return 0;
}

int kb_argo_validate_workflow(const cJSON *wf, int template, char *msg, size_t cap) {
  const cJSON *spec = cJSON_GetObjectItemCaseSensitive(wf, "spec");
  vctx v = {cJSON_GetObjectItemCaseSensitive(spec, "templates"), msg, cap};
  msg[0] = 0;
  if (cJSON_GetObjectItemCaseSensitive(spec, "workflowTemplateRef")) return 0; /* resolved elsewhere */
  const cJSON *entry = cJSON_GetObjectItemCaseSensitive(spec, "entrypoint");
  int has_entry = cJSON_GetStringValue(entry) && *entry->valuestring;
  /* a WorkflowTemplate may leave the entrypoint to its submitter */
  if (!has_entry && !template) return fail(&v, "spec.entrypoint is required", "", "", "");
  if (has_entry && check_holder(&v, entry, 0)) return -1;
  const cJSON *on_exit = cJSON_GetObjectItemCaseSensitive(spec, "onExit");
  if (cJSON_GetStringValue(on_exit) && *on_exit->valuestring && check_holder(&v, on_exit, 0)) return -1;
  const cJSON *t;
  cJSON_ArrayForEach(t, v.templates) {
    if (check_template(&v, t, 0)) return wrap(&v, "templates.%s%s", str_of(t, "name") ? str_of(t, "name") : "", "");
  }
  return 0;
}
