/* The batch/v1 CronJob controller, on the virtual clock: at each time the
 * 5-field schedule names (UTC; the cron parser of cron.c) it creates
 * the Job `<cronjob>-<scheduled time in minutes since the epoch>` from
 * jobTemplate, with the annotation batch.kubernetes.io/cronjob-scheduled-
 * timestamp and the CronJob as controller, as the 1.32 controller does.
 * Missed times run once, for the most recent one (startingDeadlineSeconds
 * drops it when too late). concurrencyPolicy: Allow runs side by side,
 * Forbid skips while a Job is active (the missed time then runs when it
 * ends, as the real controller's next sync does), Replace deletes the
 * active ones first. suspend stops new Jobs. Finished Jobs beyond
 * successfulJobsHistoryLimit / failedJobsHistoryLimit are deleted, oldest
 * first. Status: active (references), lastScheduleTime,
 * lastSuccessfulTime. spec.timeZone is not applied (UTC). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_ctl.h"
#include "k8s_internal.h"
#include "sim_cron.h"

#define SCHEDULED "batch.kubernetes.io/cronjob-scheduled-timestamp"
#define MAX_MISSED 100000 /* schedule times walked to find the latest missed one */

typedef struct ctl_cron {
  k8s_ctl base;
  kb_k8s_store *st;
  const kb_k8s_res *cj, *jobs;
  kb_k8s_watch *w_cj, *w_jobs;
  kb_vclock *clock;
  kb_vtimer timer;
  int busy, again;
} ctl_cron;

/* 1 complete, -1 failed, 0 still running. */
static int job_outcome(const cJSON *job) {
  const cJSON *c;
  cJSON_ArrayForEach(c, kb_k8s_path(job, "status.conditions")) {
    const char *t = kb_k8s_path_str(c, "type"), *s = kb_k8s_path_str(c, "status");
    if (!t || !s || strcmp(s, "True")) continue;
    if (!strcmp(t, "Complete")) return 1;
    if (!strcmp(t, "Failed")) return -1;
  }
  return 0;
}

static double scheduled_at(const cJSON *job) {
  const char *v = cJSON_GetStringValue(
      cJSON_GetObjectItemCaseSensitive(kb_k8s_path(job, "metadata.annotations"), SCHEDULED));
  return v ? kb_k8s_parse_time(v) : kb_k8s_parse_time(kb_k8s_meta_str(job, "creationTimestamp"));
}

static int create_job(ctl_cron *c, const cJSON *cj, double t) {
  const char *name = kb_k8s_meta_str(cj, "name");
  char jname[300], ts[32];
  snprintf(jname, sizeof jname, "%.52s-%lld", name, (long long)floor(t / 60));
  kb_k8s_format_time(t, ts);
  const cJSON *jt = kb_k8s_path(cj, "spec.jobTemplate");
  cJSON *job = cJSON_CreateObject();
  const cJSON *jmd = cJSON_GetObjectItemCaseSensitive(jt, "metadata");
  cJSON *md = jmd ? cJSON_Duplicate(jmd, 1) : cJSON_CreateObject();
  cJSON_AddItemToObject(job, "metadata", md);
  cJSON_DeleteItemFromObjectCaseSensitive(md, "name");
  cJSON_AddStringToObject(md, "name", jname);
  cJSON *ann = cJSON_GetObjectItemCaseSensitive(md, "annotations");
  if (!cJSON_IsObject(ann)) {
    cJSON_DeleteItemFromObjectCaseSensitive(md, "annotations");
    ann = cJSON_AddObjectToObject(md, "annotations");
  }
  cJSON_DeleteItemFromObjectCaseSensitive(ann, SCHEDULED);
  cJSON_AddStringToObject(ann, SCHEDULED, ts);
  cJSON_AddItemToArray(cJSON_AddArrayToObject(md, "ownerReferences"),
                       kb_ctl_owner_ref("batch/v1", "CronJob", name, kb_k8s_meta_str(cj, "uid")));
  const cJSON *spec = cJSON_GetObjectItemCaseSensitive(jt, "spec");
  cJSON_AddItemToObject(job, "spec", spec ? cJSON_Duplicate(spec, 1) : cJSON_CreateObject());
  kb_k8s_error e;
  int rc = kb_k8s_create(c->st, c->jobs, kb_k8s_meta_str(cj, "namespace"), job, 0, NULL, &e);
  cJSON_Delete(job);
  return rc == -409 ? 0 : rc;
}

typedef struct job_view {
  char name[256];
  double at;
  int outcome;
} job_view;

static int by_time(const void *a, const void *b) {
  const job_view *x = a, *y = b;
  return x->at < y->at ? -1 : x->at > y->at;
}

/* Deletes the oldest finished Jobs with that outcome beyond limit. */
static void trim_history(ctl_cron *c, const char *ns, job_view *v, size_t n, int outcome, int limit) {
  size_t have = 0;
  for (size_t i = 0; i < n; i++) have += v[i].outcome == outcome;
  kb_k8s_delete_opts o = {.propagation = KB_K8S_PROPAGATE_BACKGROUND};
  for (size_t i = 0; i < n && have > (size_t)(limit < 0 ? 0 : limit); i++)
    if (v[i].outcome == outcome) {
      kb_k8s_delete(c->st, c->jobs, ns, v[i].name, &o, NULL, NULL);
      v[i].outcome = 2; /* gone */
      have--;
    }
}

/* Brings one CronJob up to now; returns its next schedule time. */
static double sync_one(ctl_cron *c, const cJSON *cj) {
  const char *ns = kb_k8s_meta_str(cj, "namespace"), *uid = kb_k8s_meta_str(cj, "uid");
  const char *sched = kb_k8s_path_str(cj, "spec.schedule");
  double now = kb_k8s_store_now(c->st);
  const cJSON *items, *it;
  cJSON *list = kb_ctl_list(c->st, c->jobs, ns, NULL, &items);
  size_t n = 0, cap = (size_t)cJSON_GetArraySize(items);
  job_view *v = calloc(cap + 1, sizeof *v);
  if (!list || !v) {
    free(v);
    cJSON_Delete(list);
    return INFINITY;
  }
  double last_ok = kb_k8s_parse_time(kb_k8s_path_str(cj, "status.lastSuccessfulTime"));
  cJSON_ArrayForEach(it, items) {
    if (!kb_ctl_owned_by(it, "CronJob", uid) || kb_k8s_meta_str(it, "deletionTimestamp")) continue;
    job_view *j = &v[n++];
    snprintf(j->name, sizeof j->name, "%s", kb_k8s_meta_str(it, "name"));
    j->at = scheduled_at(it);
    j->outcome = job_outcome(it);
    double done = kb_k8s_parse_time(kb_k8s_path_str(it, "status.completionTime"));
    if (j->outcome == 1 && done > last_ok) last_ok = done;
  }
  cJSON_Delete(list);
  qsort(v, n, sizeof *v, by_time);
  trim_history(c, ns, v, n, 1, (int)kb_k8s_path_num(cj, "spec.successfulJobsHistoryLimit", 3));
  trim_history(c, ns, v, n, -1, (int)kb_k8s_path_num(cj, "spec.failedJobsHistoryLimit", 1));
  /* the most recent schedule time not yet run */
  double from = kb_k8s_parse_time(kb_k8s_path_str(cj, "status.lastScheduleTime"));
  if (from < 0) from = kb_k8s_parse_time(kb_k8s_meta_str(cj, "creationTimestamp"));
  double due = -1, t = kb_sim_cron_next(sched, from);
  for (int i = 0; t >= 0 && t <= now && i < MAX_MISSED; i++) {
    due = t;
    t = kb_sim_cron_next(sched, t);
  }
  double deadline = kb_k8s_path_num(cj, "spec.startingDeadlineSeconds", -1);
  if (due >= 0 && deadline >= 0 && due + deadline < now) due = -1; /* too late: missed */
  int active = 0;
  for (size_t i = 0; i < n; i++) active += v[i].outcome == 0;
  const char *policy = kb_k8s_path_str(cj, "spec.concurrencyPolicy");
  double scheduled = -1;
  if (due >= 0 && !cJSON_IsTrue(kb_k8s_path(cj, "spec.suspend"))) {
    if (policy && !strcmp(policy, "Forbid") && active) {
      due = -1; /* the Job that ends brings the next sync */
    } else if (policy && !strcmp(policy, "Replace") && active) {
      kb_k8s_delete_opts o = {.propagation = KB_K8S_PROPAGATE_BACKGROUND};
      for (size_t i = 0; i < n; i++)
        if (v[i].outcome == 0) kb_k8s_delete(c->st, c->jobs, ns, v[i].name, &o, NULL, NULL), v[i].outcome = 2;
    }
    if (due >= 0 && create_job(c, cj, due) == 0) scheduled = due;
  }
  free(v);
  /* status from what is stored now */
  char ts[32];
  cJSON *st = cJSON_CreateObject();
  cJSON *act = cJSON_CreateArray();
  list = kb_ctl_list(c->st, c->jobs, ns, NULL, &items);
  cJSON_ArrayForEach(it, items) {
    if (!kb_ctl_owned_by(it, "CronJob", uid) || job_outcome(it) || kb_k8s_meta_str(it, "deletionTimestamp"))
      continue;
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "kind", "Job");
    cJSON_AddStringToObject(r, "namespace", ns);
    cJSON_AddStringToObject(r, "name", kb_k8s_meta_str(it, "name"));
    cJSON_AddStringToObject(r, "uid", kb_k8s_meta_str(it, "uid"));
    cJSON_AddStringToObject(r, "apiVersion", "batch/v1");
    cJSON_AddStringToObject(r, "resourceVersion", kb_k8s_meta_str(it, "resourceVersion"));
    cJSON_AddItemToArray(act, r);
  }
  cJSON_Delete(list);
  if (cJSON_GetArraySize(act)) cJSON_AddItemToObject(st, "active", act);
  else cJSON_Delete(act);
  const char *prev = kb_k8s_path_str(cj, "status.lastScheduleTime");
  if (scheduled >= 0) kb_k8s_format_time(scheduled, ts);
  if (scheduled >= 0 || prev) cJSON_AddStringToObject(st, "lastScheduleTime", scheduled >= 0 ? ts : prev);
  if (last_ok >= 0) {
    kb_k8s_format_time(last_ok, ts);
    cJSON_AddStringToObject(st, "lastSuccessfulTime", ts);
  }
  kb_ctl_put_status(c->st, c->cj, ns, kb_k8s_meta_str(cj, "name"), st);
  cJSON_Delete(st);
  return t >= 0 ? t : INFINITY;
}

static void sync_all(ctl_cron *c) {
  if (c->busy) { /* a write of ours came back through a hook */
    c->again = 1;
    return;
  }
  c->busy = 1;
  double wake = INFINITY;
  do {
    c->again = 0;
    wake = INFINITY;
    const cJSON *items, *it;
    cJSON *list = kb_ctl_list(c->st, c->cj, NULL, NULL, &items);
    cJSON_ArrayForEach(it, items) {
      if (kb_k8s_meta_str(it, "deletionTimestamp")) continue;
      double t = sync_one(c, it);
      if (t < wake) wake = t;
    }
    cJSON_Delete(list);
  } while (c->again);
  c->busy = 0;
  if (!c->clock) return;
  kb_vtimer_stop(&c->timer);
  /* a hair after the schedule time, so it is due when the timer fires */
  if (isfinite(wake)) kb_vtimer_start(&c->timer, fmax(0, wake - kb_k8s_store_now(c->st)) + 1e-3);
}

static void fired(kb_vtimer *t) { sync_all(t->data); }

static void on_cj(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  (void)obj;
  if (type != KB_K8S_DELETED) sync_all(ud);
}

static void on_job(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  (void)type;
  const cJSON *ref = kb_ctl_controller_ref(obj);
  const char *kind = kb_k8s_path_str(ref, "kind");
  if (kind && !strcmp(kind, "CronJob")) sync_all(ud);
}

static void set_clock(k8s_ctl *base, kb_vclock *clock) {
  ctl_cron *c = (ctl_cron *)base;
  if (c->clock) kb_vtimer_stop(&c->timer);
  c->clock = clock;
  if (!clock) return;
  kb_vtimer_init(clock, &c->timer, fired, c);
  sync_all(c);
}

static void cron_free(k8s_ctl *base) {
  ctl_cron *c = (ctl_cron *)base;
  if (c->clock) kb_vtimer_stop(&c->timer);
  kb_k8s_watch_cancel(c->w_cj);
  kb_k8s_watch_cancel(c->w_jobs);
  free(c);
}

k8s_ctl *kb_k8s_cronjob_start(kb_k8s_store *st) {
  ctl_cron *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->base.free = cron_free;
  c->base.set_clock = set_clock;
  c->st = st;
  c->cj = kb_k8s_store_lookup(st, "batch", "v1", "cronjobs");
  c->jobs = kb_k8s_store_lookup(st, "batch", "v1", "jobs");
  if (c->cj && c->jobs) {
    c->w_cj = kb_k8s_store_on(st, c->cj, on_cj, c);
    c->w_jobs = kb_k8s_store_on(st, c->jobs, on_job, c);
  }
  if (!c->w_cj || !c->w_jobs) {
    cron_free(&c->base);
    return NULL;
  }
  return &c->base;
}
