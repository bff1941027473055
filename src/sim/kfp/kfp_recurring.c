/* Recurring runs (v2beta1) and jobs (v1beta1): one record, two shapes.
 * The schedule runs on the virtual clock: a periodic schedule fires every
 * interval_second after max(start_time, creation), a cron schedule at its
 * matching times; at most max_concurrency runs of one recurring run are
 * active (a due run waits for a slot, as the controller does); with
 * no_catchup, missed times are skipped. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kfp_internal.h"

static const cJSON *jget(const cJSON *o, const char *proto, const char *camel) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, proto);
  return v ? v : cJSON_GetObjectItemCaseSensitive(o, camel);
}

static const char *jstr2(const cJSON *o, const char *proto, const char *camel) {
  const cJSON *v = jget(o, proto, camel);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int64_t jint(const cJSON *v, int64_t dflt) {
  if (cJSON_IsNumber(v)) return (int64_t)v->valuedouble;
  if (cJSON_IsString(v)) return strtoll(v->valuestring, NULL, 10);
  return dflt;
}

static double jtime(const cJSON *o, const char *proto, const char *camel) {
  const char *s = jstr2(o, proto, camel);
  return s ? (double)kb_kfp_time_parse(s) : -1;
}

static double first_fire(const kfp_recurring *rr, double base) {
  double t = rr->cron ? kb_sim_cron_next(rr->cron, base - 1) : base + (double)rr->interval;
  if (rr->cron && t == base) t = kb_sim_cron_next(rr->cron, base);
  if (rr->end_time >= 0 && t > rr->end_time) return INFINITY;
  return t;
}

static double after(const kfp_recurring *rr, double t) {
  double n = rr->cron ? kb_sim_cron_next(rr->cron, t) : t + (double)rr->interval;
  if (n < 0 || (rr->end_time >= 0 && n > rr->end_time)) return INFINITY;
  return n;
}

static void invalid(kfp_req *r, const char *wrap, const char *ext) {
  kb_kfp_error(r, KFP_INVALID_ARGUMENT, ext, "%s: Invalid input error: %s", wrap, ext);
}

void kb_kfp_h_create_recurring(kfp_req *r) {
  kb_sim_kfp *kfp = r->kfp;
  const cJSON *b = r->body;
  const char *wrap = r->ver == 1 ? "Failed to create a job" : "Failed to create a recurring run";
  const char *name = r->ver == 1 ? jstr2(b, "name", "name") : jstr2(b, "display_name", "displayName");
  if (!name || !*name) {
    invalid(r, wrap, r->ver == 1 ? "The job name is empty. Please specify a valid name"
                                 : "The recurring run name is empty. Please specify a valid name");
    return;
  }
  const cJSON *trig = cJSON_GetObjectItemCaseSensitive(b, "trigger");
  const cJSON *cs = jget(trig, "cron_schedule", "cronSchedule");
  const cJSON *ps = jget(trig, "periodic_schedule", "periodicSchedule");
  const char *cron = jstr2(cs, "cron", "cron");
  int64_t interval = jint(jget(ps, "interval_second", "intervalSecond"), 0);
  if (!cs && !ps) {
    invalid(r, wrap, "Trigger is required: specify a cron_schedule or a periodic_schedule");
    return;
  }
  if (cs && !kb_sim_cron_valid(cron)) {
    char ext[300];
    snprintf(ext, sizeof ext,
             "Schedule cron is not a supported format(https://godoc.org/github.com/robfig/cron). "
             "Error: %s",
             cron ? cron : "empty spec string");
    invalid(r, wrap, ext);
    return;
  }
  if (!cs && interval <= 0) {
    invalid(r, wrap, "The interval of a periodic schedule must be positive");
    return;
  }
  int64_t maxc = jint(jget(b, "max_concurrency", "maxConcurrency"), 1);
  if (maxc == 0) maxc = 1;
  if (maxc < 1 || maxc > 10) {
    char ext[200];
    snprintf(ext, sizeof ext,
             "The max concurrency of the job is out of range. Support 1-10. Received %lld.",
             (long long)maxc);
    invalid(r, wrap, ext);
    return;
  }
  const char *exp = r->ver == 1 ? kb_kfp_v1_ref_id(b, "EXPERIMENT")
                                 : jstr2(b, "experiment_id", "experimentId");
  if (!exp || !*exp) exp = kfp->default_experiment_id;
  if (!kb_kfp_lookup(kfp, exp, KFP_EXPERIMENT)) {
    kb_kfp_not_found(r, wrap, "Experiment", exp);
    return;
  }
  kfp_recurring *rr = calloc(1, sizeof *rr);
  if (!rr) {
    kb_kfp_error(r, KFP_INTERNAL, "Internal Server Error", "%s: out of memory", wrap);
    return;
  }
  /* the pipeline must compile now (the server validates the spec); each
   * trigger resolves it again */
  int hold = 0, sp = -1;
  if ((r->ver == 1 ? kb_kfp_target_from_v1 : kb_kfp_target_from_v2)(r, b, &rr->t, wrap) ||
      (sp = kb_kfp_target_sim_pipeline(r, &rr->t, wrap, &hold)) < 0) {
    kb_kfp_target_free(&rr->t);
    free(rr);
    return;
  }
  if (hold) kb_sim_pipeline_release(kfp->sim, sp);
  const cJSON *mode = cJSON_GetObjectItemCaseSensitive(b, "mode");
  rr->enabled = r->ver == 1 ? cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "enabled")) ||
                                  (cJSON_IsString(mode) && !strcmp(mode->valuestring, "ENABLED"))
                            : !(cJSON_IsString(mode) && !strcmp(mode->valuestring, "DISABLE"));
  rr->id = kb_kfp_uuid(kfp);
  rr->display_name = kb_kfp_strdup(name);
  rr->description = kb_kfp_strdup(jstr2(b, "description", "description"));
  rr->experiment_id = kb_kfp_strdup(exp);
  rr->service_account = kb_kfp_strdup(jstr2(b, "service_account", "serviceAccount"));
  rr->max_concurrency = maxc;
  rr->no_catchup = cJSON_IsTrue(jget(b, "no_catchup", "noCatchup"));
  rr->cron = cs ? kb_kfp_strdup(cron) : NULL;
  rr->interval = interval;
  const cJSON *sched = cs ? cs : ps;
  rr->start_time = jtime(sched, "start_time", "startTime");
  rr->end_time = jtime(sched, "end_time", "endTime");
  rr->created_at = rr->updated_at = kb_kfp_now_unix(kfp);
  rr->seq = ++kfp->seq;
  double base = rr->start_time > (double)rr->created_at ? rr->start_time : (double)rr->created_at;
  rr->next_fire = first_fire(rr, base);
  if (!rr->id || !rr->display_name || kb_kfp_store_add(kfp, KFP_RECURRING, rr->id, rr)) {
    free(rr->id), free(rr->display_name), free(rr->description), free(rr->experiment_id);
    free(rr->service_account), free(rr->cron);
    kb_kfp_target_free(&rr->t);
    free(rr);
    kb_kfp_error(r, KFP_INTERNAL, "Internal Server Error", "%s: out of memory", wrap);
    return;
  }
  kb_kfp_reply(r, r->ver == 1 ? kb_kfp_j_v1_job(kfp, rr) : kb_kfp_j_v2_recurring(kfp, rr));
}

static kfp_recurring *find(kfp_req *r, const char *what) {
  kfp_recurring *rr = kb_kfp_lookup(r->kfp, r->params[0], KFP_RECURRING);
  if (!rr) {
    char wrap[200];
    snprintf(wrap, sizeof wrap, "Failed to %s a %s", what, r->ver == 1 ? "job" : "recurring run");
    kb_kfp_not_found(r, wrap, "Job", r->params[0]);
  }
  return rr;
}

void kb_kfp_h_get_recurring(kfp_req *r) {
  kfp_recurring *rr = find(r, "get");
  if (rr) kb_kfp_reply(r, r->ver == 1 ? kb_kfp_j_v1_job(r->kfp, rr) : kb_kfp_j_v2_recurring(r->kfp, rr));
}

static cJSON *render_v2(const kb_sim_kfp *k, const void *o) {
  return kb_kfp_j_v2_recurring(k, o);
}
static cJSON *render_v1(const kb_sim_kfp *k, const void *o) { return kb_kfp_j_v1_job(k, o); }

void kb_kfp_h_list_recurring(kfp_req *r) {
  kb_sim_kfp *kfp = r->kfp;
  const char *exp = kb_kfp_query(r, "experiment_id");
  if (r->ver == 1) {
    const char *type = kb_kfp_query(r, "resource_reference_key.type");
    exp = type && !strcmp(type, "EXPERIMENT") ? kb_kfp_query(r, "resource_reference_key.id") : NULL;
  }
  if (exp && !*exp) exp = NULL;
  kfp_vec cand = {0};
  for (size_t i = 0; i < kfp->recurring.n; i++) {
    kfp_recurring *rr = kfp->recurring.items[i];
    if (!rr->deleted && (!exp || !strcmp(rr->experiment_id, exp))) kb_kfp_vec_push(&cand, rr);
  }
  r->stored_rows = cand.n;
  /* the server's quirk: camelCase key in v2 */
  kb_kfp_reply_list(r, &kb_kfp_list_recurring, &cand,
                    r->ver == 1 ? "Failed to list jobs" : "Failed to list recurring runs",
                    r->ver == 1 ? "jobs" : "recurringRuns", r->ver == 1 ? render_v1 : render_v2);
}

void kb_kfp_h_delete_recurring(kfp_req *r) {
  kfp_recurring *rr = find(r, "delete");
  if (!rr) return;
  kb_kfp_mark_deleted(r->kfp, KFP_RECURRING, rr);
  kb_kfp_reply_empty(r);
}

static void set_enabled(kfp_req *r, int enabled) {
  kfp_recurring *rr = find(r, enabled ? "enable" : "disable");
  if (!rr) return;
  if (enabled && !rr->enabled) {
    double now = kb_kfp_now_unix_f(r->kfp);
    double base = rr->start_time > now ? rr->start_time : now;
    rr->next_fire = first_fire(rr, base);
  }
  rr->enabled = enabled;
  rr->updated_at = kb_kfp_now_unix(r->kfp);
  kb_kfp_reply_empty(r);
}

void kb_kfp_h_enable_recurring(kfp_req *r) {
  set_enabled(r, 1);
}

void kb_kfp_h_disable_recurring(kfp_req *r) {
  set_enabled(r, 0);
}

/* ---- the schedule ---- */

static size_t active_runs(const kb_sim_kfp *kfp, const kfp_recurring *rr) {
  size_t n = 0;
  for (size_t i = 0; i < kfp->runs.n; i++) {
    const kfp_run *run = kfp->runs.items[i];
    if (run->deleted || !run->recurring_run_id || strcmp(run->recurring_run_id, rr->id)) continue;
    kb_sim_run_info ri;
    memset(&ri, 0, sizeof ri);
    if (!kb_sim_run_get(kfp->sim, run->sim_run, &ri) && ri.wf_finished_at < 0) n++;
  }
  return n;
}

void kb_kfp_on_sched(kb_vtimer *t) {
  kb_sim_kfp *kfp = t->data;
  kb_sim_sync(kfp->sim);
  kb_kfp_schedule_tick(kfp);
}

void kb_kfp_schedule_tick(kb_sim_kfp *kfp) {
  double now = kb_kfp_now_unix_f(kfp), wake = INFINITY;
  for (size_t i = 0; i < kfp->recurring.n; i++) {
    kfp_recurring *rr = kfp->recurring.items[i];
    if (rr->deleted || !rr->enabled) continue;
    for (int guard = 0; guard < 100 && rr->next_fire <= now; guard++) {
      if (active_runs(kfp, rr) >= (size_t)rr->max_concurrency) {
        if (now + 1 < wake) wake = now + 1; /* look again in a sim second */
        break;
      }
      char name[300];
      snprintf(name, sizeof name, "%s-%llu", rr->display_name,
               (unsigned long long)++rr->triggered);
      kb_kfp_run_start(kfp, NULL, name, rr->description, rr->experiment_id, &rr->t,
                    rr->service_account, rr->id, "Failed to create a run for a recurring run");
      rr->next_fire = after(rr, rr->no_catchup && after(rr, rr->next_fire) <= now ? now
                                                                                 : rr->next_fire);
    }
    if (rr->next_fire < wake) wake = rr->next_fire;
  }
  if (!kfp->has_clock) return;
  kb_vtimer_stop(&kfp->sched_timer);
  /* a hair after the trigger, so `after(...) <= now` holds when it fires */
  if (isfinite(wake)) kb_vtimer_start(&kfp->sched_timer, wake - now + 1e-6);
}
