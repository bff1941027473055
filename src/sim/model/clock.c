/* The virtual clock and the event queue.
 *
 * Events sit in a binary min-heap keyed by (time, sequence): the sequence
 * number is the insertion order, so events due at the same instant run in
 * the order they were scheduled and a run is reproducible bit for bit.
 *
 * Manual mode (tests, kbrun's deterministic mode): time only moves in
 * kb_sim_advance_to / kb_sim_run_until_idle. Attached mode: a uv timer is
 * armed for the next event's real due time, now = (hrtime - origin) *
 * speed. */
#include <math.h>
#include <stdlib.h>
#include <uv.h>

#include "sim_internal.h"

static int ev_less(const sim_event *x, const sim_event *y) {
  if (x->t != y->t) return x->t < y->t;
  return x->seq < y->seq;
}

static void ev_swap(sim_event *x, sim_event *y) {
  sim_event t = *x;
  *x = *y;
  *y = t;
}

int kb_sim_heap_push(sim_heap *h, double t, uint32_t kind, uint32_t a, uint32_t b, uint32_t gen) {
  if (kb_sim_reserve((void **)&h->ev, &h->cap, h->n + 1, sizeof *h->ev)) return KB_SIM_ENOMEM;
  size_t i = h->n++;
  h->ev[i] = (sim_event){t, h->seq++, kind, a, b, gen};
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!ev_less(&h->ev[i], &h->ev[p])) break;
    ev_swap(&h->ev[i], &h->ev[p]);
    i = p;
  }
  return 0;
}

const sim_event *kb_sim_heap_peek(const sim_heap *h) { return h->n ? &h->ev[0] : NULL; }

int kb_sim_heap_pop(sim_heap *h, sim_event *out) {
  if (!h->n) return 0;
  *out = h->ev[0];
  h->ev[0] = h->ev[--h->n];
  size_t i = 0;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < h->n && ev_less(&h->ev[l], &h->ev[m])) m = l;
    if (r < h->n && ev_less(&h->ev[r], &h->ev[m])) m = r;
    if (m == i) break;
    ev_swap(&h->ev[i], &h->ev[m]);
    i = m;
  }
  return 1;
}

void kb_sim_heap_free(sim_heap *h) {
  free(h->ev);
  *h = (sim_heap){0};
}

/* ---- clock ---- */

static double wall_now(const kb_sim *sim) { return kb_vclock_now(sim->clock) - sim->origin; }

double kb_sim_now(const kb_sim *sim) {
  if (!sim->clock) return sim->now;
  double t = wall_now(sim);
  return t > sim->now ? t : sim->now;
}

void kb_sim_clock_params(const kb_sim *sim, uint64_t *origin_ns, double *speed) {
  int linear = sim->clock && kb_vclock_mode_of(sim->clock) == KB_VCLOCK_LINEAR;
  if (origin_ns) *origin_ns = linear ? sim->origin_ns : 0;
  if (speed) *speed = sim->clock ? kb_vclock_speed(sim->clock) : 0;
}

kb_vclock *kb_sim_clock(const kb_sim *sim) { return sim->clock; }

double kb_sim_next_event_time(const kb_sim *sim) {
  const sim_event *e = kb_sim_heap_peek(&sim->heap);
  return e ? e->t : INFINITY;
}

/* The generation of the run or pod an event is about (0 for the rest). */
static uint32_t subject_gen(const kb_sim *sim, uint32_t kind, uint32_t a) {
  switch (kind) {
  case EV_RUN_START:
  case EV_SUSPEND_END:
  case EV_RUN_REPORT: return sim->runs[a].gen;
  case EV_POD_CREATE:
  case EV_POD_START:
  case EV_POD_EXIT:
  case EV_STEP_DETECT: return sim->pods[a].gen;
  default: return 0;
  }
}

static void dispatch(kb_sim *sim, const sim_event *ev) {
  sim->now = ev->t;
  sim->events_processed++;
  if (subject_gen(sim, ev->kind, ev->a) != ev->gen) return; /* its run or pod was freed */
  switch (ev->kind) {
  case EV_SCHEDULE: kb_sim_sched_pass(sim); break;
  case EV_NODE_WORK: kb_sim_node_work_due(sim, ev->a, ev->b); break;
  default: kb_sim_run_event(sim, ev); break;
  }
}

/* Process every event due at or before t. */
static long drain(kb_sim *sim, double t) {
  long n = 0;
  sim_event ev;
  sim->in_dispatch = 1;
  while (sim->heap.n && sim->heap.ev[0].t <= t) {
    kb_sim_heap_pop(&sim->heap, &ev);
    dispatch(sim, &ev);
    n++;
  }
  sim->in_dispatch = 0;
  return n;
}

int kb_sim_advance_to(kb_sim *sim, double t) {
  if (sim->clock) return KB_SIM_ESTATE;
  if (!(t >= sim->now)) return KB_SIM_EINVAL;
  drain(sim, t);
  sim->now = t;
  return 0;
}

long kb_sim_run_until_idle(kb_sim *sim, double limit) {
  if (sim->clock) return KB_SIM_ESTATE;
  long n = 0;
  while (sim->heap.n && sim->heap.ev[0].t <= limit) n += drain(sim, sim->heap.ev[0].t);
  return n;
}

static void arm(kb_sim *sim);

static void on_timer(kb_vtimer *t) { kb_sim_sync(t->data); }

/* Due is judged on the clock's own numbers (event time + origin <= clock
 * time), as the timer was armed: judged in sim time, rounding could leave
 * an event the clock calls due undrained, and a clock that stands still
 * would fire its timer for ever. */
void kb_sim_sync(kb_sim *sim) {
  if (!sim->clock || sim->in_dispatch) return;
  double clock_now = kb_vclock_now(sim->clock);
  double t = clock_now - sim->origin;
  if (t < sim->now) t = sim->now;
  while (sim->heap.n && sim->heap.ev[0].t + sim->origin <= clock_now) {
    double due = sim->heap.ev[0].t;
    drain(sim, due > t ? due : t);
  }
  drain(sim, t);
  if (t > sim->now) sim->now = t;
  arm(sim);
}

/* Arm the timer for the next event, on the clock (which never fires it
 * early). */
static void arm(kb_sim *sim) {
  const sim_event *e = kb_sim_heap_peek(&sim->heap);
  if (!e) kb_vtimer_stop(&sim->timer);
  else kb_vtimer_start_at(&sim->timer, e->t + sim->origin);
}

/* Called whenever an event is scheduled: an earlier event may need an
 * earlier wake-up. */
int kb_sim_schedule(kb_sim *sim, double t, sim_ev_kind kind, uint32_t a, uint32_t b) {
  if (t < sim->now) t = sim->now;
  int rc = kb_sim_heap_push(&sim->heap, t, kind, a, b, subject_gen(sim, kind, a));
  if (!rc && sim->clock && !sim->in_dispatch && sim->heap.ev[0].seq == sim->heap.seq - 1)
    arm(sim);
  return rc;
}

int kb_sim_attach_clock(kb_sim *sim, kb_vclock *clock) {
  if (sim->clock) return KB_SIM_ESTATE;
  if (!clock) return KB_SIM_EINVAL;
  sim->clock = clock;
  /* Continue from the current virtual time. */
  sim->origin = kb_vclock_now(clock) - sim->now;
  double speed = kb_vclock_speed(clock);
  sim->origin_ns = uv_hrtime() - (uint64_t)(sim->now / speed * 1e9);
  kb_vtimer_init(clock, &sim->timer, on_timer, sim);
  arm(sim);
  return 0;
}

int kb_sim_attach(kb_sim *sim, uv_loop_t *loop) {
  if (sim->clock) return KB_SIM_ESTATE;
  kb_vclock *c = kb_vclock_new(loop, KB_VCLOCK_LINEAR, sim->speed);
  if (!c) return KB_SIM_ENOMEM;
  kb_sim_attach_clock(sim, c);
  sim->owns_clock = 1;
  return 0;
}

void kb_sim_detach(kb_sim *sim) {
  if (!sim->clock) return;
  kb_sim_sync(sim);
  kb_vtimer_stop(&sim->timer);
  if (sim->owns_clock) kb_vclock_free(sim->clock); /* its handles close on the loop */
  sim->clock = NULL;
  sim->owns_clock = 0;
}
