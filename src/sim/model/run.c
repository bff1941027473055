/* Runs: one execution of an expanded pipeline.
 *
 * Timeline of a step (calibration rows in brackets):
 *   deps done -> +argo.pod_create: pod object (Pending)
 *   -> scheduler (D7) binds it -> image pull if the node lacks it (D9, D10)
 *   -> +k8s.pod_startup (D2): container Running
 *   -> work W from the step's duration model, stretched when the node's cpu
 *      is oversubscribed (cluster.c)
 *   -> +argo.wait_exit: pod Succeeded / Failed
 *   -> +argo.completion_detect (E2, E6): the controller marks the node done
 *      and creates the next pods.
 * A run starts kfp_run.create_to_workflow_running after creation; what the
 * KFP API reports changes only when the persistence agent (B6, B7) has
 * processed the workflow: see report(). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim_internal.h"

static sim_pipeline *pipe_of(const kb_sim *sim, const sim_run *r) {
  return sim->pipelines[r->pipeline];
}

const sim_step *kb_sim_pod_step(const kb_sim *sim, uint32_t pi) {
  const sim_pod *p = &sim->pods[pi];
  return &pipe_of(sim, &sim->runs[p->run])->steps[p->step];
}

const char *kb_sim_run_state_name(kb_sim_run_state s) {
  static const char *names[] = {"RUNTIME_STATE_UNSPECIFIED", "PENDING", "RUNNING", "SUCCEEDED",
                                "SKIPPED", "FAILED", "CANCELING", "CANCELED", "PAUSED"};
  return (unsigned)s < sizeof names / sizeof *names ? names[s] : "RUNTIME_STATE_UNSPECIFIED";
}

const char *kb_sim_pod_phase_name(kb_sim_pod_phase p) {
  static const char *names[] = {"Pending", "Running", "Succeeded", "Failed", "Unknown"};
  return (unsigned)p < sizeof names / sizeof *names ? names[p] : "Unknown";
}

static void history_add(sim_run *r, double t, kb_sim_run_state s) {
  if (r->n_history == KB_SIM_RUN_HISTORY) {
    memmove(r->history, r->history + 1, sizeof r->history[0] * (KB_SIM_RUN_HISTORY - 1));
    r->n_history--;
  }
  r->history[r->n_history].time = t;
  r->history[r->n_history].state = s;
  r->n_history++;
}

/* The persistence agent as a fluid queue: its workers spend, every resync
 * period, service_time on each stored workflow (B6, B7). That load, plus
 * one service time per update, builds a backlog whenever it exceeds the
 * workers; an update reaches the API after lag + backlog. O(1) per update. */
static void report(kb_sim *sim, uint32_t ri, kb_sim_run_state state) {
  const kb_sim_config *c = sim->cfg;
  sim_run *r = &sim->runs[ri];
  kb_sim_rng rng;
  kb_sim_rng_seed(&rng, kb_sim_seed_mix(sim->seed, r->serial, 0x10000 + (uint64_t)state));
  double workers = c->pa_workers > 0 ? c->pa_workers : 1;
  double dt = sim->now - sim->pa_t;
  double load = c->pa_resync_period > 0
                    ? (sim->wf_active * c->pa_service_active + sim->wf_finished * c->pa_service_finished) /
                          c->pa_resync_period / workers
                    : 0;
  sim->pa_backlog += dt * (load - 1);
  if (sim->pa_backlog < 0) sim->pa_backlog = 0;
  sim->pa_t = sim->now;
  double svc = (state == KB_SIM_RUN_RUNNING ? c->pa_service_active : c->pa_service_finished) / workers;
  double at = sim->now + kb_sim_dist_sample(&c->pa_lag, &rng) + sim->pa_backlog + svc;
  sim->pa_backlog += svc;
  if (at < r->last_report_t) at = r->last_report_t;
  r->last_report_t = at;
  kb_sim_schedule(sim, at, EV_RUN_REPORT, ri, (uint32_t)state);
}

static void deliver_report(kb_sim *sim, uint32_t ri, kb_sim_run_state state) {
  sim_run *r = &sim->runs[ri];
  if (r->deleted) return;
  r->state = state;
  history_add(r, sim->now, state);
  if (state == KB_SIM_RUN_SUCCEEDED || state == KB_SIM_RUN_FAILED || state == KB_SIM_RUN_CANCELED)
    r->finished_reported = r->wf_finished;
  kb_sim_touch(sim, KB_SIM_KIND_RUN, ri, &r->rv);
}

static double step_fail_prob(const kb_sim *sim, const sim_run *r, const sim_step *st) {
  if (st->info.kind != KB_SIM_STEP_EXECUTOR) return 0;
  if (st->info.fail_prob >= 0) return st->info.fail_prob;
  if (r->fail_prob >= 0) return r->fail_prob;
  return sim->cfg->step_fail_prob;
}

/* A step's dependencies are done: draw its times from its own stream and
 * have Argo create its pod. */
static void step_ready(kb_sim *sim, uint32_t ri, size_t si) {
  sim_run *r = &sim->runs[ri];
  if (r->suspended) return; /* stays ready (ST_WAIT, no deps left) until resumed */
  const sim_step *st = &pipe_of(sim, r)->steps[si];
  if (st->info.kind == KB_SIM_STEP_SUSPEND) { /* no pod: it waits */
    sim_stepstate *ss = &r->steps[si];
    ss->state = ST_CREATED;
    ss->started = sim->now;
    r->inflight++;
    if (st->info.duration.a >= 0)
      kb_sim_schedule(sim, sim->now + st->info.duration.a, EV_SUSPEND_END, ri,
                   (uint32_t)si | (r->retries & 0xffff) << 16);
    kb_sim_touch(sim, KB_SIM_KIND_RUN, ri, &r->rv);
    return;
  }
  uint32_t pi = kb_sim_pod_new(sim);
  r = &sim->runs[ri];
  if (pi == SIM_NONE) return; /* out of memory: the step never starts */
  kb_sim_rng rng;
  /* a retried step draws afresh; the first attempt's stream is unchanged */
  kb_sim_rng_seed(&rng, kb_sim_seed_mix(sim->seed, r->serial, si + 1 + ((uint64_t)r->retries << 32)));
  const kb_sim_config *c = sim->cfg;
  sim_pod *p = &sim->pods[pi];
  p->run = ri;
  p->step = (uint16_t)si;
  p->work = kb_sim_dist_sample(&st->info.duration, &rng) + st->extra;
  p->will_fail = kb_sim_rng_uniform(&rng) < step_fail_prob(sim, r, st);
  p->startup = kb_sim_dist_sample(&c->pod_startup, &rng);
  p->detect_delay = kb_sim_dist_sample(&c->completion_detect, &rng);
  p->demand = st->info.cpu_demand;
  char node_name[512];
  snprintf(node_name, sizeof node_name, "%s%s", r->workflow, pipe_of(sim, r)->gnodes[st->gnode].suffix);
  p->name = kb_sim_printf("%s-%s-%u", r->workflow, st->template_name, kb_sim_fnv32a(node_name));
  p->created = sim->now + c->argo_pod_create;
  r->steps[si].pod = pi;
  r->steps[si].state = ST_CREATED;
  r->inflight++;
  kb_sim_schedule(sim, p->created, EV_POD_CREATE, pi, 0);
}

static void release_ready(kb_sim *sim, uint32_t ri, int exit_part) {
  sim_pipeline *pl = pipe_of(sim, &sim->runs[ri]);
  for (size_t i = 0; i < pl->n_steps; i++) {
    sim_stepstate *ss = &sim->runs[ri].steps[i];
    if (ss->state == ST_WAIT && !ss->deps_left && pl->steps[i].info.exit_handler == exit_part)
      step_ready(sim, ri, i);
  }
}

static void run_finish(kb_sim *sim, uint32_t ri) {
  sim_run *r = &sim->runs[ri];
  r->wf_finished = sim->now;
  r->wf_phase = r->failed ? "Failed" : "Succeeded";
  r->true_state = r->failed ? KB_SIM_RUN_FAILED : KB_SIM_RUN_SUCCEEDED;
  if (sim->wf_active) sim->wf_active--;
  sim->wf_finished++;
  kb_sim_touch(sim, KB_SIM_KIND_RUN, ri, &r->rv);
  report(sim, ri, r->true_state);
}

static void run_check_done(kb_sim *sim, uint32_t ri) {
  sim_run *r = &sim->runs[ri];
  if (r->inflight || r->wf_finished >= 0 || r->suspended) return;
  sim_pipeline *pl = pipe_of(sim, r);
  if (!r->exit_started && pl->n_steps > pl->n_main) {
    r->exit_started = 1;
    release_ready(sim, ri, 1);
    if (sim->runs[ri].inflight) return;
  }
  run_finish(sim, ri);
}

static void on_run_start(kb_sim *sim, uint32_t ri) {
  sim_run *r = &sim->runs[ri];
  if (r->terminated || r->deleted) return;
  r->wf_phase = "Running";
  r->wf_started = sim->now;
  r->true_state = KB_SIM_RUN_RUNNING;
  sim->wf_active++;
  kb_sim_touch(sim, KB_SIM_KIND_RUN, ri, &r->rv);
  report(sim, ri, KB_SIM_RUN_RUNNING);
  release_ready(sim, ri, 0);
  run_check_done(sim, ri);
}

static void on_pod_create(kb_sim *sim, uint32_t pi) {
  sim_pod *p = &sim->pods[pi];
  if (p->phase != KB_SIM_POD_PENDING) return; /* cancelled before creation */
  p->exists = 1;
  p->cstate = CS_WAITING;
  kb_sim_touch(sim, KB_SIM_KIND_POD, pi, &p->rv);
  kb_sim_sched_enqueue(sim, pi);
}

void kb_sim_pod_bound(kb_sim *sim, uint32_t pi) {
  sim_pod *p = &sim->pods[pi];
  const sim_step *st = kb_sim_pod_step(sim, pi);
  double ready = sim->now;
  if (st->image_id >= 0) {
    ready = kb_sim_image_pull_ready(sim, p->node, st->image_id);
    if (ready > sim->now) {
      kb_sim_event_emit(sim, "Normal", "Pulling", KB_SIM_KIND_POD, pi, "Pulling image \"%s\"", st->image);
      kb_sim_event_emit(sim, "Normal", "Pulled", KB_SIM_KIND_POD, pi,
                     "Successfully pulled image \"%s\" in %.3fs (waited for the node's pulls)",
                     st->image, ready - sim->now);
    } else {
      ready = sim->now;
      kb_sim_event_emit(sim, "Normal", "Pulled", KB_SIM_KIND_POD, pi,
                     "Container image \"%s\" already present on machine", st->image);
    }
  }
  p->reason = "ContainerCreating";
  kb_sim_touch(sim, KB_SIM_KIND_POD, pi, &p->rv);
  kb_sim_schedule(sim, ready + p->startup, EV_POD_START, pi, 0);
}

static void on_pod_start(kb_sim *sim, uint32_t pi) {
  sim_pod *p = &sim->pods[pi];
  if (p->phase != KB_SIM_POD_PENDING || p->scheduled != 1) return;
  p->phase = KB_SIM_POD_RUNNING;
  p->cstate = CS_RUNNING;
  p->reason = NULL;
  p->started = sim->now;
  kb_sim_touch(sim, KB_SIM_KIND_POD, pi, &p->rv);
  kb_sim_event_emit(sim, "Normal", "Created", KB_SIM_KIND_POD, pi, "Created container main");
  kb_sim_event_emit(sim, "Normal", "Started", KB_SIM_KIND_POD, pi, "Started container main");
  kb_sim_node_add_running(sim, p->node, pi);
}

void kb_sim_pod_work_done(kb_sim *sim, uint32_t pi) {
  sim_pod *p = &sim->pods[pi];
  p->finished = sim->now;
  kb_sim_schedule(sim, sim->now + sim->cfg->wait_exit, EV_POD_EXIT, pi, 0);
}

static void on_pod_exit(kb_sim *sim, uint32_t pi) {
  sim_pod *p = &sim->pods[pi];
  if (p->phase != KB_SIM_POD_RUNNING) return;
  p->phase = p->will_fail ? KB_SIM_POD_FAILED : KB_SIM_POD_SUCCEEDED;
  p->cstate = CS_TERMINATED;
  p->reason = p->will_fail ? "Error" : "Completed";
  p->exit_code = p->will_fail ? 1 : 0;
  kb_sim_touch(sim, KB_SIM_KIND_POD, pi, &p->rv);
  kb_sim_pod_unbind(sim, pi);
  kb_sim_schedule(sim, sim->now + p->detect_delay, EV_STEP_DETECT, pi, 0);
}

/* Step si of the run ended (its pod seen done, or a suspend step ended). */
static void step_done(kb_sim *sim, uint32_t ri, size_t si, int ok, const char *why) {
  sim_run *r = &sim->runs[ri];
  sim_stepstate *ss = &r->steps[si];
  const sim_step *st = &pipe_of(sim, r)->steps[si];
  ss->state = ok ? ST_OK : ST_FAIL;
  r->inflight--;
  if (!ok && !r->failed) {
    r->failed = 1;
    r->error = kb_sim_printf("step %s failed: %s", st->name, why);
  }
  kb_sim_touch(sim, KB_SIM_KIND_RUN, ri, &r->rv);
  /* failFast: once a step failed no new step of the main DAG starts;
   * the exit handler still runs. */
  for (size_t i = 0; i < st->n_rdeps; i++) {
    size_t d = st->rdeps[i];
    sim_stepstate *ds = &sim->runs[ri].steps[d];
    if (!ok || !ds->deps_left) continue;
    if (--ds->deps_left) continue;
    const sim_step *dst = &pipe_of(sim, &sim->runs[ri])->steps[d];
    if (dst->info.exit_handler ? sim->runs[ri].exit_started : !sim->runs[ri].failed)
      step_ready(sim, ri, d);
  }
  run_check_done(sim, ri);
}

static void on_step_detect(kb_sim *sim, uint32_t pi) {
  sim_pod *p = &sim->pods[pi];
  sim_run *r = &sim->runs[p->run];
  sim_stepstate *ss = &r->steps[p->step];
  if (r->terminated || r->deleted || ss->state != ST_CREATED) return;
  p->detected = sim->now;
  r->done_pods++;
  step_done(sim, p->run, p->step, p->phase == KB_SIM_POD_SUCCEEDED,
            p->message ? p->message : p->reason ? p->reason : "Error");
}

/* A suspend step ends (its duration, a resume, argo's set or stop). */
static void suspend_end(kb_sim *sim, uint32_t ri, size_t si, int ok) {
  sim_stepstate *ss = &sim->runs[ri].steps[si];
  ss->finished = sim->now;
  step_done(sim, ri, si, ok, "Stopped");
}

static void on_suspend_end(kb_sim *sim, uint32_t ri, uint32_t b) {
  sim_run *r = &sim->runs[ri];
  size_t si = b & 0xffff;
  if (r->terminated || r->deleted || (b >> 16) != (r->retries & 0xffff) ||
      si >= pipe_of(sim, r)->n_steps || r->steps[si].state != ST_CREATED)
    return; /* ended otherwise meanwhile */
  suspend_end(sim, ri, si, 1);
}

void kb_sim_run_event(kb_sim *sim, const sim_event *ev) {
  switch (ev->kind) {
  case EV_RUN_START: on_run_start(sim, ev->a); break;
  case EV_POD_CREATE: on_pod_create(sim, ev->a); break;
  case EV_POD_START: on_pod_start(sim, ev->a); break;
  case EV_POD_EXIT: on_pod_exit(sim, ev->a); break;
  case EV_STEP_DETECT: on_step_detect(sim, ev->a); break;
  case EV_RUN_REPORT: deliver_report(sim, ev->a, (kb_sim_run_state)ev->b); break;
  case EV_SUSPEND_END: on_suspend_end(sim, ev->a, ev->b); break;
  default: break;
  }
}

void kb_sim_pod_stop(kb_sim *sim, uint32_t pi, const char *reason, const char *msg) {
  sim_pod *p = &sim->pods[pi];
  if (p->phase == KB_SIM_POD_SUCCEEDED || p->phase == KB_SIM_POD_FAILED) return;
  kb_sim_sched_remove(sim, pi);
  kb_sim_pod_unbind(sim, pi);
  p->phase = KB_SIM_POD_FAILED;
  p->cstate = CS_TERMINATED;
  p->reason = reason;
  p->message = msg;
  p->exit_code = 137;
  p->will_fail = 1;
  if (p->started >= 0 && p->finished < 0) p->finished = sim->now;
  if (p->exists) kb_sim_touch(sim, KB_SIM_KIND_POD, pi, &p->rv);
  sim_run *r = &sim->runs[p->run];
  if (!r->terminated && !r->deleted)
    kb_sim_schedule(sim, sim->now + p->detect_delay, EV_STEP_DETECT, pi, 0);
}

/* ---- public ---- */

int kb_sim_pod_kill(kb_sim *sim, int pod, const char *reason, const char *message,
                    kb_sim_error *err) {
  if (pod < 0 || (size_t)pod >= sim->n_pods || sim->pods[pod].run == SIM_NONE)
    return kb_sim_fail(err, KB_SIM_ENOENT, "no such pod");
  kb_sim_sync(sim);
  /* Pods keep pointers to their reason and message: copies in the arena,
   * the last ones reused (evictions repeat the same words). */
  const char *want_r = reason ? reason : "Killed", *want_m = message && *message ? message : NULL;
  if (!sim->kill_reason || strcmp(sim->kill_reason, want_r))
    sim->kill_reason = kb_sim_arena_strdup(&sim->arena, want_r);
  if (want_m && (!sim->kill_message || strcmp(sim->kill_message, want_m)))
    sim->kill_message = kb_sim_arena_strdup(&sim->arena, want_m);
  const char *r = sim->kill_reason, *m = want_m ? sim->kill_message : NULL;
  if (!r || (want_m && !m)) return kb_sim_fail(err, KB_SIM_ENOMEM, "out of memory");
  kb_sim_pod_stop(sim, (uint32_t)pod, r, m);
  return 0;
}

static const char name_chars[] = "bcdfghjklmnpqrstvwxz2456789";

/* A slot for a new run: a freed one if any (its generation moves on), else
 * a fresh one. */
static uint32_t run_slot(kb_sim *sim) {
  if (sim->n_free_runs) return sim->free_runs[--sim->n_free_runs];
  if (kb_sim_reserve((void **)&sim->runs, &sim->cap_runs, sim->n_runs + 1, sizeof *sim->runs))
    return SIM_NONE;
  sim->runs[sim->n_runs].gen = 0;
  return (uint32_t)sim->n_runs++;
}

static void run_names_free(sim_run *r) {
  free(r->name), free(r->workflow), free(r->ns), free(r->error);
  r->name = r->workflow = r->ns = r->error = NULL;
}

static int run_names(sim_run *r, const sim_pipeline *pl, const kb_sim_run_opts *opts,
                     kb_sim_rng *rng, uint64_t seed) {
  if (opts && opts->workflow_name) {
    r->workflow = kb_sim_strdup(opts->workflow_name);
  } else {
    /* Five characters as Argo's generateName gives, but never the same
     * twice in one simulator: the run's serial through a bijection of
     * [0, 27^5) (a*x + b mod 27^5, a prime to 3), so names look random yet
     * 14 million runs get distinct workflows and pods (random draws lost
     * 2 of 10,000 Workflows to collisions). The draws still advance the
     * stream, so every later draw of the run stays as it was. */
    const uint64_t base = sizeof name_chars - 1, space = 14348907; /* 27^5 */
    for (int i = 0; i < 5; i++) (void)kb_sim_rng_next(rng);
    uint64_t offset = kb_sim_seed_mix(seed, 0x6e616d65 /* "name" */, 0) % space;
    uint64_t x = ((r->serial % space) * 4093082899ull + offset) % space; /* a: not a multiple of 3 */
    char sfx[6];
    for (int i = 4; i >= 0; i--) {
      sfx[i] = name_chars[x % base];
      x /= base;
    }
    sfx[5] = 0;
    r->workflow = kb_sim_printf("%s%s", pl->generate_name, sfx);
  }
  r->name = kb_sim_strdup(opts && opts->name ? opts->name : r->workflow ? r->workflow : "");
  r->ns = kb_sim_strdup(opts && opts->namespace_ ? opts->namespace_ : "kubeflow");
  return r->workflow && r->name && r->ns ? 0 : -1;
}

int kb_sim_run_create(kb_sim *sim, int pipeline, const kb_sim_run_opts *opts, kb_sim_error *err) {
  kb_sim_sync(sim);
  if (pipeline < 0 || (size_t)pipeline >= sim->n_pipelines || !sim->pipelines[pipeline])
    return kb_sim_fail(err, KB_SIM_ENOENT, "pipeline %d not found", pipeline);
  if (opts && opts->fail_prob > 1)
    return kb_sim_fail(err, KB_SIM_EINVAL, "run fail_prob must be a probability 0..1");
  sim_pipeline *pl = sim->pipelines[pipeline];
  uint32_t ri = run_slot(sim);
  if (ri == SIM_NONE) return kb_sim_fail(err, KB_SIM_ENOMEM, "out of memory");
  sim_run *r = &sim->runs[ri];
  uint32_t gen = r->gen;
  memset(r, 0, sizeof *r);
  r->gen = gen;
  r->serial = sim->runs_created;
  kb_sim_rng rng;
  kb_sim_rng_seed(&rng, kb_sim_seed_mix(sim->seed, r->serial, 0));
  r->steps = calloc(pl->n_steps ? pl->n_steps : 1, sizeof *r->steps);
  if (!r->steps || run_names(r, pl, opts, &rng, sim->seed)) {
    free(r->steps);
    run_names_free(r);
    r->steps = NULL;
    kb_sim_free_push(&sim->free_runs, &sim->n_free_runs, &sim->cap_free_runs, ri);
    return kb_sim_fail(err, KB_SIM_ENOMEM, "out of memory");
  }
  for (size_t i = 0; i < pl->n_steps; i++)
    r->steps[i] = (sim_stepstate){SIM_NONE, (uint16_t)pl->steps[i].info.n_deps, ST_WAIT, -1, -1};
  r->in_use = 1;
  sim->runs_created++;
  kb_sim_pipeline_hold(sim, pipeline);
  r->pipeline = pipeline;
  r->fail_prob = opts ? opts->fail_prob : -1;
  r->created = sim->now;
  r->wf_started = r->wf_finished = r->finished_reported = -1;
  r->wf_phase = "";
  r->true_state = r->state = KB_SIM_RUN_PENDING;
  history_add(r, sim->now, KB_SIM_RUN_PENDING);
  kb_sim_touch(sim, KB_SIM_KIND_RUN, ri, &r->rv);
  kb_sim_schedule(sim, sim->now + kb_sim_dist_sample(&sim->cfg->create_to_workflow_running, &rng),
               EV_RUN_START, ri, 0);
  return (int)ri;
}

sim_run *kb_sim_run_at(const kb_sim *sim, int run) {
  return run >= 0 && (size_t)run < sim->n_runs && sim->runs[run].in_use ? &sim->runs[run] : NULL;
}

/* Kill every live pod of the run and close its workflow. */
static void stop_run(kb_sim *sim, uint32_t ri, const char *reason, const char *msg) {
  sim_pipeline *pl = pipe_of(sim, &sim->runs[ri]);
  for (size_t i = 0; i < pl->n_steps; i++) {
    sim_stepstate *ss = &sim->runs[ri].steps[i];
    if (ss->pod == SIM_NONE && ss->state == ST_CREATED) { /* a waiting suspend step */
      ss->state = ST_FAIL;
      ss->finished = sim->now;
      sim->runs[ri].inflight--;
    }
    if (ss->pod == SIM_NONE) continue;
    kb_sim_pod_stop(sim, ss->pod, reason, msg);
    if (ss->state == ST_CREATED) {
      ss->state = ST_FAIL;
      sim->runs[ri].inflight--;
    }
  }
}

int kb_sim_run_terminate(kb_sim *sim, int run, kb_sim_error *err) {
  kb_sim_sync(sim);
  sim_run *r = kb_sim_run_at(sim, run);
  if (!r || r->deleted) return kb_sim_fail(err, KB_SIM_ENOENT, "run %d not found", run);
  if (r->wf_finished >= 0 || r->terminated)
    return kb_sim_fail(err, KB_SIM_ESTATE, "run %s has already finished", r->name);
  uint32_t ri = (uint32_t)run;
  r->terminated = 1;
  r->state = KB_SIM_RUN_CANCELING; /* written by the API server itself */
  history_add(r, sim->now, KB_SIM_RUN_CANCELING);
  int started = r->wf_started >= 0;
  stop_run(sim, ri, "Error", "terminated");
  r = &sim->runs[ri];
  r->wf_finished = sim->now;
  r->wf_phase = "Failed";
  r->wf_message = "Stopped with strategy 'Terminate'";
  r->true_state = KB_SIM_RUN_CANCELED;
  if (started && sim->wf_active) sim->wf_active--;
  sim->wf_finished++;
  kb_sim_touch(sim, KB_SIM_KIND_RUN, ri, &r->rv);
  report(sim, ri, KB_SIM_RUN_CANCELED);
  return 0;
}

int kb_sim_run_suspend(kb_sim *sim, int run, int suspend, kb_sim_error *err) {
  kb_sim_sync(sim);
  sim_run *r = kb_sim_run_at(sim, run);
  if (!r || r->deleted) return kb_sim_fail(err, KB_SIM_ENOENT, "run %d not found", run);
  if (r->wf_finished >= 0) return kb_sim_fail(err, KB_SIM_ESTATE, "run %s has already finished", r->name);
  if (r->suspended == !!suspend) return 0;
  r->suspended = !!suspend;
  uint32_t ri = (uint32_t)run;
  kb_sim_touch(sim, KB_SIM_KIND_RUN, ri, &r->rv);
  if (suspend || r->wf_started < 0) return 0; /* not started: the start releases the roots */
  if (!r->failed) release_ready(sim, ri, 0);
  if (sim->runs[ri].exit_started) release_ready(sim, ri, 1);
  run_check_done(sim, ri);
  return 0;
}

int kb_sim_run_stop(kb_sim *sim, int run, kb_sim_error *err) {
  static const char msg[] = "Stopped with strategy 'Stop'";
  kb_sim_sync(sim);
  sim_run *r = kb_sim_run_at(sim, run);
  if (!r || r->deleted) return kb_sim_fail(err, KB_SIM_ENOENT, "run %d not found", run);
  if (r->wf_finished >= 0 || r->terminated)
    return kb_sim_fail(err, KB_SIM_ESTATE, "run %s has already finished", r->name);
  if (r->wf_started < 0) { /* nothing ran: nothing to hand to an exit handler */
    int rc = kb_sim_run_terminate(sim, run, err);
    sim->runs[run].wf_message = msg;
    return rc;
  }
  uint32_t ri = (uint32_t)run;
  if (!r->failed) {
    r->failed = 1;
    free(r->error);
    r->error = kb_sim_strdup(msg);
  }
  r->wf_message = msg;
  r->suspended = 0; /* a stopped workflow is not held */
  sim_pipeline *pl = pipe_of(sim, r);
  for (size_t i = 0; i < pl->n_steps; i++) {
    sim_stepstate *ss = &sim->runs[ri].steps[i];
    if (ss->state != ST_CREATED || pl->steps[i].info.exit_handler) continue;
    if (ss->pod == SIM_NONE) {
      ss->state = ST_FAIL; /* a waiting suspend step: failed now, nothing follows it */
      ss->finished = sim->now;
      sim->runs[ri].inflight--;
    } else {
      kb_sim_pod_stop(sim, ss->pod, "Error", "workflow shutdown with strategy:  Stop");
    }
  }
  kb_sim_touch(sim, KB_SIM_KIND_RUN, ri, &sim->runs[ri].rv);
  run_check_done(sim, ri);
  return 0;
}

/* Removes a step's pod from the model (retry): its object goes too. */
static void step_forget_pod(kb_sim *sim, sim_run *r, sim_stepstate *ss) {
  sim_pod *p = &sim->pods[ss->pod];
  if (p->detected >= 0 && r->done_pods) r->done_pods--;
  if (p->exists) {
    p->exists = 0;
    kb_sim_touch(sim, KB_SIM_KIND_POD, ss->pod, &p->rv);
  }
  kb_sim_pod_free(sim, ss->pod);
  ss->pod = SIM_NONE;
}

int kb_sim_run_retry(kb_sim *sim, int run, kb_sim_error *err) {
  kb_sim_sync(sim);
  sim_run *r = kb_sim_run_at(sim, run);
  if (!r || r->deleted) return kb_sim_fail(err, KB_SIM_ENOENT, "run %d not found", run);
  if (r->wf_finished < 0 || (strcmp(r->wf_phase, "Failed") && strcmp(r->wf_phase, "Error")))
    return kb_sim_fail(err, KB_SIM_ESTATE, "Cannot retry a workflow in phase %s",
                    r->wf_finished < 0 ? "Running" : r->wf_phase);
  uint32_t ri = (uint32_t)run;
  sim_pipeline *pl = pipe_of(sim, r);
  for (size_t i = 0; i < pl->n_steps; i++) {
    sim_stepstate *ss = &r->steps[i];
    if (ss->state == ST_OK && !pl->steps[i].info.exit_handler) continue;
    if (ss->pod != SIM_NONE) step_forget_pod(sim, r, ss);
    ss->state = ST_WAIT;
    ss->started = ss->finished = -1;
  }
  for (size_t i = 0; i < pl->n_steps; i++) {
    sim_stepstate *ss = &r->steps[i];
    if (ss->state == ST_OK) continue;
    ss->deps_left = 0;
    for (size_t d = 0; d < pl->steps[i].info.n_deps; d++)
      ss->deps_left += r->steps[pl->steps[i].info.deps[d]].state != ST_OK;
  }
  r->failed = r->terminated = r->exit_started = 0;
  free(r->error);
  r->error = NULL;
  r->wf_message = NULL;
  r->wf_finished = r->finished_reported = -1;
  r->wf_phase = "Running";
  r->true_state = KB_SIM_RUN_RUNNING;
  r->retries++;
  if (sim->wf_finished) sim->wf_finished--;
  sim->wf_active++;
  kb_sim_touch(sim, KB_SIM_KIND_RUN, ri, &r->rv);
  report(sim, ri, KB_SIM_RUN_RUNNING);
  release_ready(sim, ri, 0);
  run_check_done(sim, ri);
  return 0;
}

int kb_sim_run_node_resume(kb_sim *sim, int run, size_t step, int ok, kb_sim_error *err) {
  kb_sim_sync(sim);
  sim_run *r = kb_sim_run_at(sim, run);
  if (!r || r->deleted) return kb_sim_fail(err, KB_SIM_ENOENT, "run %d not found", run);
  const sim_pipeline *pl = pipe_of(sim, r);
  if (step >= pl->n_steps || pl->steps[step].info.kind != KB_SIM_STEP_SUSPEND ||
      r->steps[step].state != ST_CREATED || r->terminated)
    return kb_sim_fail(err, KB_SIM_ESTATE, "step %zu of run %s is not a waiting suspend step", step, r->name);
  suspend_end(sim, (uint32_t)run, step, ok);
  return 0;
}

/* The run's pods are freed already; observers see a freed id as gone. */
static void run_free(kb_sim *sim, uint32_t ri) {
  sim_run *r = &sim->runs[ri];
  int pipeline = r->pipeline;
  free(r->steps);
  run_names_free(r);
  uint32_t gen = r->gen + 1;
  memset(r, 0, sizeof *r);
  r->gen = gen;
  r->pipeline = -1;
  kb_sim_free_push(&sim->free_runs, &sim->n_free_runs, &sim->cap_free_runs, ri);
  kb_sim_pipeline_drop(sim, pipeline);
}

int kb_sim_run_delete(kb_sim *sim, int run, kb_sim_error *err) {
  kb_sim_sync(sim);
  sim_run *r = kb_sim_run_at(sim, run);
  if (!r || r->deleted) return kb_sim_fail(err, KB_SIM_ENOENT, "run %d not found", run);
  uint32_t ri = (uint32_t)run;
  int active = r->wf_started >= 0 && r->wf_finished < 0;
  r->deleted = 1;
  stop_run(sim, ri, "Error", "deleted");
  r = &sim->runs[ri];
  if (active && sim->wf_active) sim->wf_active--;
  else if (r->wf_finished >= 0 && sim->wf_finished) sim->wf_finished--;
  if (r->wf_finished < 0) r->wf_finished = sim->now;
  sim_pipeline *pl = pipe_of(sim, r);
  for (size_t i = 0; i < pl->n_steps; i++) {
    uint32_t pi = r->steps[i].pod;
    if (pi == SIM_NONE) continue;
    if (sim->pods[pi].exists) {
      sim->pods[pi].exists = 0;
      kb_sim_touch(sim, KB_SIM_KIND_POD, pi, &sim->pods[pi].rv);
    }
    kb_sim_pod_free(sim, pi);
  }
  kb_sim_touch(sim, KB_SIM_KIND_RUN, ri, &r->rv);
  run_free(sim, ri);
  return 0;
}

size_t kb_sim_run_count(const kb_sim *sim) { return sim->n_runs; }

int kb_sim_run_get(const kb_sim *sim, int run, kb_sim_run_info *o) {
  const sim_run *r = kb_sim_run_at(sim, run);
  if (!r) return KB_SIM_ENOENT;
  memset(o, 0, sizeof *o);
  o->id = run;
  o->gen = r->gen;
  o->pipeline = r->pipeline;
  o->name = r->name;
  o->workflow = r->workflow;
  o->namespace_ = r->ns;
  o->deleted = r->deleted;
  o->state = r->state;
  o->created_at = o->scheduled_at = r->created;
  o->finished_at = r->finished_reported;
  memcpy(o->history, r->history, sizeof o->history);
  o->n_history = r->n_history;
  o->error = r->state == KB_SIM_RUN_FAILED ? r->error : NULL;
  o->wf_phase = r->wf_phase;
  o->wf_message = r->wf_message;
  o->wf_started_at = r->wf_started;
  o->wf_finished_at = r->wf_finished;
  o->pods_total = (int)(pipe_of(sim, r)->n_steps - pipe_of(sim, r)->n_suspend);
  o->pods_done = r->done_pods;
  return 0;
}

/* ---- pods ---- */

size_t kb_sim_pod_count(const kb_sim *sim) { return sim->n_pods; }

int kb_sim_pod_get(const kb_sim *sim, int pod, kb_sim_pod_info *o) {
  if (pod < 0 || (size_t)pod >= sim->n_pods || !sim->pods[pod].exists) return KB_SIM_ENOENT;
  const sim_pod *p = &sim->pods[pod];
  const sim_run *r = &sim->runs[p->run];
  const sim_step *st = kb_sim_pod_step(sim, (uint32_t)pod);
  memset(o, 0, sizeof *o);
  o->id = pod;
  o->gen = p->gen;
  o->name = p->name;
  o->namespace_ = r->ns;
  o->node = p->node != SIM_NONE ? sim->nodes[p->node].name : NULL;
  o->phase = p->phase;
  o->container_state = p->cstate == CS_RUNNING ? "running" : p->cstate == CS_TERMINATED ? "terminated" : "waiting";
  o->reason = p->reason;
  o->message = p->message;
  o->exit_code = p->exit_code;
  o->image = st->image;
  o->scheduled = p->scheduled != 0;
  o->unschedulable_message = p->unsched_msg;
  o->created_at = p->created;
  o->scheduled_at = p->scheduled_at;
  o->started_at = p->started;
  o->finished_at = p->finished;
  o->cpu_m = st->info.cpu_m;
  o->memory = st->info.memory;
  o->gpu = st->info.gpu;
  o->run = (int)p->run;
  o->step = p->step;
  o->workflow = r->workflow;
  o->template_name = st->template_name;
  snprintf(o->node_name, sizeof o->node_name, "%s%s", r->workflow, pipe_of(sim, r)->gnodes[st->gnode].suffix);
  snprintf(o->node_id, sizeof o->node_id, "%s-%u", r->workflow, kb_sim_fnv32a(o->node_name));
  o->resource_version = p->rv;
  return 0;
}

void kb_sim_runs_free(kb_sim *sim) {
  for (size_t i = 0; i < sim->n_runs; i++) {
    free(sim->runs[i].steps);
    run_names_free(&sim->runs[i]);
  }
  free(sim->runs);
  sim->runs = NULL;
  sim->n_runs = 0;
}
