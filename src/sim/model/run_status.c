/* The Argo WorkflowStatus of a run (kb_sim_run_workflow_status): phase,
 * times, progress, message, conditions, resourcesDuration and the node
 * tree, as the workflow controller writes them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim_internal.h"

static const sim_pipeline *pipe_of(const kb_sim *sim, const sim_run *r) {
  return sim->pipelines[r->pipeline];
}

/* ---- Argo workflow status ---- */

static void add_time(cJSON *o, const char *key, const kb_sim *sim, double t) {
  if (t < 0) {
    cJSON_AddNullToObject(o, key);
    return;
  }
  time_t s = (time_t)floor(sim->epoch + t);
  struct tm tm;
  gmtime_r(&s, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  cJSON_AddStringToObject(o, key, buf);
}

static const char *gtype_name(sim_gnode_type t) {
  switch (t) {
  case GN_POD: return "Pod";
  case GN_SUSPEND: return "Suspend";
  case GN_DAG: return "DAG";
  case GN_STEPS: return "Steps";
  default: return "StepGroup";
  }
}

static void node_id(const sim_run *r, const sim_gnode *g, char *out, size_t n) {
  char name[512];
  if (!*g->suffix) {
    snprintf(out, n, "%s", r->workflow);
    return;
  }
  snprintf(name, sizeof name, "%s%s", r->workflow, g->suffix);
  snprintf(out, n, "%s-%u", r->workflow, kb_sim_fnv32a(name));
}

/* Argo's resource duration of a pod (util/resource): for each container
 * (wait and main), every requested resource (cpu 100m and memory 100Mi
 * when none is requested) x the container's run time in whole seconds, in
 * units of 1 cpu, 100Mi of memory, 1 GPU; integer division per container
 * and resource, as argo does. The times are the pod's status timestamps
 * (seconds). */
typedef struct res_dur {
  int64_t cpu, memory, gpu;
} res_dur;

static int64_t whole_seconds(const kb_sim *sim, double t) { return (int64_t)floor(sim->epoch + t); }

static res_dur pod_resources_duration(const kb_sim *sim, const sim_pod *p, const sim_step *st) {
  res_dur d = {0, 0, 0};
  if (p->cstate != CS_TERMINATED || p->started < 0 || p->finished < 0) return d;
  int64_t age = whole_seconds(sim, p->finished) - whole_seconds(sim, p->started);
  const int64_t mem_unit = 100LL * 1024 * 1024;
  int64_t cpu_m[2] = {100, st->info.cpu_m > 0 ? st->info.cpu_m : 100};
  int64_t mem[2] = {mem_unit, st->info.memory > 0 ? st->info.memory : mem_unit};
  for (int c = 0; c < 2; c++) {
    d.cpu += cpu_m[c] * age / 1000;
    d.memory += mem[c] / mem_unit * age + (mem[c] % mem_unit) * age / mem_unit;
  }
  d.gpu = (int64_t)st->info.gpu * age;
  return d;
}

static void add_resources_duration(cJSON *o, res_dur d) {
  cJSON *rd = cJSON_AddObjectToObject(o, "resourcesDuration");
  cJSON_AddNumberToObject(rd, "cpu", (double)d.cpu);
  cJSON_AddNumberToObject(rd, "memory", (double)d.memory);
  if (d.gpu) cJSON_AddNumberToObject(rd, "nvidia.com/gpu", (double)d.gpu);
}

static cJSON *gnode_json(const kb_sim *sim, const sim_run *r, const sim_pipeline *pl, int gi) {
  const sim_gnode *g = &pl->gnodes[gi];
  int ok = 0, fail = 0, live = 0, seen = 0, pods_done = 0, pods = 0;
  double start = INFINITY, end = -1;
  for (int s = g->first; s < g->end; s++) {
    const sim_stepstate *ss = &r->steps[s];
    if (pl->steps[s].info.kind == KB_SIM_STEP_SUSPEND) { /* no pod: its own times */
      if (ss->started < 0) continue;
      seen++;
      if (ss->started < start) start = ss->started;
      ok += ss->state == ST_OK;
      fail += ss->state == ST_FAIL;
      live += ss->state == ST_CREATED;
      if (ss->finished > end) end = ss->finished;
      continue;
    }
    pods++;
    if (ss->pod == SIM_NONE) continue;
    const sim_pod *p = &sim->pods[ss->pod];
    if (!p->exists && !r->deleted && p->phase == KB_SIM_POD_PENDING) continue; /* not created yet */
    seen++;
    if (p->created < start) start = p->created;
    ok += ss->state == ST_OK;
    fail += ss->state == ST_FAIL;
    live += ss->state == ST_CREATED;
    pods_done += ss->state == ST_OK || ss->state == ST_FAIL;
    double e = p->detected >= 0 ? p->detected : p->finished;
    if (e > end) end = e;
  }
  if (!seen && *g->suffix) return NULL;
  int total = g->end - g->first;
  const char *phase;
  if (ok == total) phase = "Succeeded";
  else if (live) phase = g->type == GN_POD && seen && sim->pods[r->steps[g->step].pod].phase == KB_SIM_POD_PENDING ? "Pending" : "Running";
  else if (r->wf_finished >= 0 || fail) phase = fail || r->wf_finished >= 0 ? "Failed" : "Running";
  else phase = "Running";
  if (!*g->suffix && r->wf_finished < 0 && strcmp(phase, "Succeeded")) phase = "Running";
  cJSON *o = cJSON_CreateObject();
  char id[192], name[512], buf[64];
  node_id(r, g, id, sizeof id);
  snprintf(name, sizeof name, "%s%s", r->workflow, g->suffix);
  cJSON_AddStringToObject(o, "id", id);
  cJSON_AddStringToObject(o, "name", name);
  cJSON_AddStringToObject(o, "displayName", *g->suffix ? g->display : r->workflow);
  cJSON_AddStringToObject(o, "type", gtype_name(g->type));
  cJSON_AddStringToObject(o, "templateName", g->template_name);
  cJSON_AddStringToObject(o, "phase", phase);
  for (int b = g->parent; b >= 0; b = pl->gnodes[b].parent)
    if (pl->gnodes[b].type == GN_DAG || pl->gnodes[b].type == GN_STEPS) {
      node_id(r, &pl->gnodes[b], buf, sizeof buf);
      cJSON_AddStringToObject(o, "boundaryID", buf);
      break;
    }
  cJSON *children = cJSON_AddArrayToObject(o, "children");
  for (size_t c = 0; c < pl->n_gnodes; c++)
    if (pl->gnodes[c].parent == gi) {
      node_id(r, &pl->gnodes[c], buf, sizeof buf);
      cJSON_AddItemToArray(children, cJSON_CreateString(buf));
    }
  add_time(o, "startedAt", sim, start < INFINITY ? start : r->wf_started);
  int terminal = !strcmp(phase, "Succeeded") || !strcmp(phase, "Failed");
  add_time(o, "finishedAt", sim, terminal ? (end >= 0 ? end : r->wf_finished) : -1);
  snprintf(buf, sizeof buf, "%d/%d", pods_done, pods); /* argo counts pods only */
  cJSON_AddStringToObject(o, "progress", buf);
  if (g->type == GN_POD && r->steps[g->step].pod != SIM_NONE) {
    const sim_pod *p = &sim->pods[r->steps[g->step].pod];
    if (p->node != SIM_NONE) cJSON_AddStringToObject(o, "hostNodeName", sim->nodes[p->node].name);
    if (p->phase == KB_SIM_POD_FAILED) {
      cJSON_AddStringToObject(o, "message", p->message ? p->message : "Error (exit code 1)");
      cJSON *out = cJSON_AddObjectToObject(o, "outputs");
      cJSON_AddStringToObject(out, "exitCode", p->exit_code == 137 ? "137" : "1");
    } else if (p->phase == KB_SIM_POD_SUCCEEDED) {
      cJSON *out = cJSON_AddObjectToObject(o, "outputs");
      cJSON_AddStringToObject(out, "exitCode", "0");
    }
    if (p->cstate == CS_TERMINATED)
      add_resources_duration(o, pod_resources_duration(sim, p, &pl->steps[g->step]));
  }
  return o;
}

uint64_t kb_sim_run_version(const kb_sim *sim, int run) {
  const sim_run *r = kb_sim_run_at(sim, run);
  if (!r) return 0;
  uint64_t v = r->rv;
  const sim_pipeline *pl = pipe_of(sim, r);
  for (size_t s = 0; s < pl->n_steps; s++) {
    uint32_t pi = r->steps[s].pod;
    if (pi != SIM_NONE && sim->pods[pi].rv > v) v = sim->pods[pi].rv;
  }
  return v;
}

cJSON *kb_sim_run_workflow_status(const kb_sim *sim, int run) {
  const sim_run *r = kb_sim_run_at(sim, run);
  if (!r || r->deleted) return NULL;
  const sim_pipeline *pl = pipe_of(sim, r);
  cJSON *st = cJSON_CreateObject();
  if (!st) return NULL;
  cJSON_AddStringToObject(st, "phase", r->wf_phase);
  add_time(st, "startedAt", sim, r->wf_started);
  add_time(st, "finishedAt", sim, r->wf_finished >= 0 && r->wf_started >= 0 ? r->wf_finished : -1);
  char buf[64];
  snprintf(buf, sizeof buf, "%d/%zu", r->done_pods, pl->n_steps - pl->n_suspend);
  cJSON_AddStringToObject(st, "progress", buf);
  if (r->wf_message) cJSON_AddStringToObject(st, "message", r->wf_message);
  else if (r->failed && r->wf_finished >= 0) cJSON_AddStringToObject(st, "message", r->error);
  /* the workflow's total is the sum of its pods' (argo sums the nodes) */
  res_dur total = {0, 0, 0};
  int running = 0, any_done = 0;
  for (size_t i = 0; i < pl->n_steps; i++) {
    uint32_t pi = r->steps[i].pod;
    if (pi == SIM_NONE) continue;
    const sim_pod *p = &sim->pods[pi];
    running += p->phase == KB_SIM_POD_RUNNING;
    if (p->cstate != CS_TERMINATED) continue;
    any_done = 1;
    res_dur d = pod_resources_duration(sim, p, &pl->steps[i]);
    total.cpu += d.cpu, total.memory += d.memory, total.gpu += d.gpu;
  }
  if (any_done) add_resources_duration(st, total);
  if (r->wf_started >= 0) {
    cJSON *conds = cJSON_AddArrayToObject(st, "conditions");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "type", "PodRunning");
    cJSON_AddStringToObject(c, "status", running ? "True" : "False");
    cJSON_AddItemToArray(conds, c);
    if (r->wf_finished >= 0) {
      c = cJSON_CreateObject();
      cJSON_AddStringToObject(c, "type", "Completed");
      cJSON_AddStringToObject(c, "status", "True");
      cJSON_AddItemToArray(conds, c);
    }
  }
  cJSON *nodes = cJSON_AddObjectToObject(st, "nodes");
  if (r->wf_started >= 0)
    for (size_t g = 0; g < pl->n_gnodes; g++) {
      cJSON *n = gnode_json(sim, r, pl, (int)g);
      if (n) cJSON_AddItemToObject(nodes, cJSON_GetObjectItemCaseSensitive(n, "id")->valuestring, n);
    }
  return st;
}
