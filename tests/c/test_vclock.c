/* The scenario clock (kb/vclock.h): timer order, stop, re-arming, a linear
 * clock that never fires early, and the fast-forwarding clock: it stands
 * still while the loop works, jumps when everything waits, and runs in
 * real time while real work is declared. */
#include <stdlib.h>
#include <unistd.h>
#include <uv.h>

#include "kb/vclock.h"
#include "kbtest.h"

typedef struct {
  kb_vclock *clock;
  int order[16];
  double at[16];
  int n;
} log_t;

typedef struct {
  kb_vtimer t;
  log_t *log;
  int id;
  kb_vtimer *stop_other; /* stopped by this one's callback */
  double rearm;          /* > 0: starts `t` again once, this far ahead */
} probe;

static void fired(kb_vtimer *t) {
  probe *p = t->data;
  log_t *l = p->log;
  if (l->n < 16) {
    l->order[l->n] = p->id;
    l->at[l->n] = kb_vclock_now(l->clock);
  }
  l->n++;
  if (p->stop_other) kb_vtimer_stop(p->stop_other);
  if (p->rearm > 0) {
    double d = p->rearm;
    p->rearm = 0;
    kb_vtimer_start(&p->t, d);
  }
}

static void run_loop(uv_loop_t *loop) {
  for (int i = 0; i < 100000 && uv_run(loop, UV_RUN_ONCE); i++) {
  }
}

static void close_loop(uv_loop_t *loop, kb_vclock *c) {
  kb_vclock_free(c);
  uv_run(loop, UV_RUN_DEFAULT);
  KB_CHECK(uv_loop_close(loop) == 0);
}

/* Due order, ties in start order, a stopped timer never fires, and one
 * stopped by an earlier timer's callback neither. */
static void test_order_and_stop(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  kb_vclock *c = kb_vclock_new(&loop, KB_VCLOCK_EVENTS, 1);
  log_t l = {.clock = c};
  probe p[6];
  double delays[6] = {3, 1, 2, 1, 5, 4};
  for (int i = 0; i < 6; i++) {
    p[i] = (probe){.log = &l, .id = i};
    kb_vtimer_init(c, &p[i].t, fired, &p[i]);
    KB_CHECK(kb_vtimer_start(&p[i].t, delays[i]) == 0);
  }
  kb_vtimer_stop(&p[2].t);   /* never fires */
  p[0].stop_other = &p[5].t; /* 0 (at 3) stops 5 (at 4) */
  KB_CHECK(kb_vtimer_active(&p[1].t) && !kb_vtimer_active(&p[2].t));
  double t0 = kb_vclock_now(c);
  run_loop(&loop);
  KB_CHECK(l.n == 4);
  int want[4] = {1, 3, 0, 4};
  for (int i = 0; i < 4; i++) KB_CHECK(l.order[i] == want[i]);
  /* the clock jumped to each due time exactly: nothing else ran */
  KB_CHECK_NEAR(l.at[0] - t0, 1, 1e-9);
  KB_CHECK_NEAR(l.at[2] - t0, 3, 1e-9);
  KB_CHECK_NEAR(l.at[3] - t0, 5, 1e-9);
  uint64_t jumps;
  KB_CHECK_NEAR(kb_vclock_skipped(c, &jumps), 5, 1e-6);
  KB_CHECK(jumps == 3); /* 1, 3 and 5: the tie at 1 needs none */
  close_loop(&loop, c);
}

/* A timer re-armed from its own callback fires again, later; one started
 * with 0 from a callback waits for the next pass. */
static void test_rearm(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  kb_vclock *c = kb_vclock_new(&loop, KB_VCLOCK_EVENTS, 1);
  log_t l = {.clock = c};
  probe p = {.log = &l, .id = 7, .rearm = 2.5};
  kb_vtimer_init(c, &p.t, fired, &p);
  double t0 = kb_vclock_now(c);
  kb_vtimer_start(&p.t, 0.5);
  run_loop(&loop);
  KB_CHECK(l.n == 2);
  KB_CHECK_NEAR(l.at[1] - t0, 3.0, 1e-9);
  close_loop(&loop, c);
}

/* The linear clock at 600x: a timer fires no earlier than its due time
 * and the clock reads real time times the speed. */
static void test_linear(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  kb_vclock *c = kb_vclock_new(&loop, KB_VCLOCK_LINEAR, 600);
  KB_CHECK(kb_vclock_speed(c) == 600 && kb_vclock_mode_of(c) == KB_VCLOCK_LINEAR);
  log_t l = {.clock = c};
  probe p[3];
  double t0 = kb_vclock_now(c);
  uint64_t r0 = uv_hrtime();
  for (int i = 0; i < 3; i++) {
    p[i] = (probe){.log = &l, .id = i};
    kb_vtimer_init(c, &p[i].t, fired, &p[i]);
    kb_vtimer_start(&p[i].t, 6.0 * (i + 1)); /* 10, 20, 30 ms real */
  }
  run_loop(&loop);
  double real = (double)(uv_hrtime() - r0) / 1e9;
  KB_CHECK(l.n == 3);
  for (int i = 0; i < 3; i++) KB_CHECK(l.at[i] - t0 >= 6.0 * (i + 1));
  KB_CHECK(real >= 0.030 && real < 5);
  KB_CHECK(kb_vclock_skipped(c, NULL) == 0);
  /* switching speed continues from the current time */
  double before = kb_vclock_now(c);
  kb_vclock_set(c, KB_VCLOCK_LINEAR, 1);
  KB_CHECK(kb_vclock_now(c) >= before && kb_vclock_now(c) - before < 1);
  close_loop(&loop, c);
}

/* A real wait (a uv timer, here a thread-pool job stand-in) declared busy
 * keeps the clock from jumping: it runs at the real rate meanwhile. */
typedef struct {
  kb_vclock *c;
  double at_done;
} busy_job;

static void busy_work(uv_work_t *w) {
  (void)w;
  usleep(50 * 1000);
}

static void busy_after(uv_work_t *w, int status) {
  (void)status;
  busy_job *j = w->data;
  j->at_done = kb_vclock_now(j->c);
  kb_vclock_busy(j->c, -1);
}

static void test_events_busy(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  kb_vclock *c = kb_vclock_new(&loop, KB_VCLOCK_EVENTS, 1);
  log_t l = {.clock = c};
  probe p = {.log = &l, .id = 1};
  kb_vtimer_init(c, &p.t, fired, &p);
  double t0 = kb_vclock_now(c);
  /* standing still: the loop's own work costs no time */
  volatile double sink = 0;
  for (int i = 0; i < 2000000; i++) sink += i;
  KB_CHECK(kb_vclock_now(c) == t0);
  kb_vtimer_start(&p.t, 10);
  busy_job j = {c, -1};
  uv_work_t w = {.data = &j};
  kb_vclock_busy(c, +1);
  uv_queue_work(&loop, &w, busy_work, busy_after);
  run_loop(&loop);
  /* the job's 50 ms passed in real time, before the jump to 10 s */
  KB_CHECK(j.at_done - t0 >= 0.05 && j.at_done - t0 < 5);
  KB_CHECK(l.n == 1);
  KB_CHECK_NEAR(l.at[0] - t0, 10, 1e-9);
  close_loop(&loop, c);
}

/* A byte waiting on a socket the loop watches is work: no jump until it
 * was read. */
typedef struct {
  kb_vclock *c;
  double at_read;
  uv_pipe_t a, b;
} pipe_pair;

static void on_alloc(uv_handle_t *h, size_t n, uv_buf_t *buf) {
  (void)h;
  static char space[64];
  *buf = uv_buf_init(space, sizeof space < n ? sizeof space : (unsigned)n);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  (void)buf;
  pipe_pair *pp = s->data;
  if (n > 0 && pp->at_read < 0) pp->at_read = kb_vclock_now(pp->c);
  uv_read_stop(s);
  uv_close((uv_handle_t *)&pp->a, NULL);
  uv_close((uv_handle_t *)&pp->b, NULL);
}

static void test_events_io(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  kb_vclock *c = kb_vclock_new(&loop, KB_VCLOCK_EVENTS, 1);
  log_t l = {.clock = c};
  probe p = {.log = &l, .id = 1};
  kb_vtimer_init(c, &p.t, fired, &p);
  int fds[2];
  KB_CHECK(uv_pipe(fds, 0, 0) == 0);
  pipe_pair pp = {.c = c, .at_read = -1};
  uv_pipe_init(&loop, &pp.a, 0);
  uv_pipe_init(&loop, &pp.b, 0);
  uv_pipe_open(&pp.a, fds[0]);
  uv_pipe_open(&pp.b, fds[1]);
  pp.a.data = &pp;
  double t0 = kb_vclock_now(c);
  kb_vtimer_start(&p.t, 30);
  KB_CHECK(write(fds[1], "x", 1) == 1); /* waiting before the loop runs */
  uv_read_start((uv_stream_t *)&pp.a, on_alloc, on_read);
  run_loop(&loop);
  KB_CHECK(pp.at_read >= 0 && pp.at_read - t0 < 1); /* read before any jump */
  KB_CHECK(l.n == 1);
  KB_CHECK_NEAR(l.at[0] - t0, 30, 1e-9);
  close_loop(&loop, c);
}

int main(void) {
  KB_RUN(test_order_and_stop);
  KB_RUN(test_rearm);
  KB_RUN(test_linear);
  KB_RUN(test_events_busy);
  KB_RUN(test_events_io);
  return kb_test_report();
}
