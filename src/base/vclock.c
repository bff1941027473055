/* The scenario clock (kb/vclock.h): linear or fast-forwarding, with one
 * timer heap behind one libuv timer.
 *
 * How fast-forwarding knows that nothing is working. It looks just before
 * the loop would block in poll (a prepare handle) and jumps only when all
 * of these hold:
 *  - libuv would block at all: no idle handle (the runtime's ready queue,
 *    stream deliveries), no pending callback, no timer due now
 *    (uv_backend_timeout != 0);
 *  - every I/O watcher started is known to the kernel (libuv registers new
 *    ones only when it polls: a connection just accepted may have its
 *    request waiting unread), and none is ready: the epoll descriptor
 *    polls readable as soon as any of them is. Over a Unix socket a write
 *    is in the peer's queue when write() returns, so "nothing ready" means
 *    "nothing in flight" between a client and a server on this loop;
 *  - no real work was declared (kb_vclock_busy).
 * Then the clock skips to the earliest timer, which fires right away. */
#include <math.h>
#include <poll.h>
#include <stdlib.h>

#include "kb/vclock.h"

struct kb_vclock {
  uv_loop_t *loop;
  kb_vclock_mode mode;
  double speed;
  double base;        /* clock seconds at origin_ns */
  uint64_t origin_ns;
  double skipped;
  uint64_t jumps;
  int busy;
  int held;           /* host work elsewhere (a thread-pool job): no jump */
  double ev_now;      /* events: the time when busy last changed, or jumped */
  uint64_t busy_since; /* events, busy > 0: uv_hrtime() when it started */

  kb_vtimer **heap;
  size_t n, cap;
  uint64_t seq;

  uv_timer_t timer;     /* armed for heap[0] */
  uv_prepare_t prepare; /* the fast-forward check */
  int open_handles;
  int freeing;
};

/* ---- time -------------------------------------------------------------- */

/* Events mode: time stands still while only this loop's own work runs
 * (host overhead costs nothing, so a seed gives the same figures), runs at
 * the real rate while real work is in flight, and jumps when all waits. */
double kb_vclock_now(const kb_vclock *c) {
  if (c->mode == KB_VCLOCK_EVENTS)
    return c->ev_now + (c->busy > 0 ? (double)(uv_hrtime() - c->busy_since) / 1e9 : 0);
  double real = (double)(uv_hrtime() - c->origin_ns) / 1e9;
  return c->base + real * c->speed;
}

kb_vclock_mode kb_vclock_mode_of(const kb_vclock *c) { return c->mode; }
double kb_vclock_speed(const kb_vclock *c) { return c->speed; }

double kb_vclock_skipped(const kb_vclock *c, uint64_t *jumps) {
  if (jumps) *jumps = c->jumps;
  return c->skipped;
}

void kb_vclock_hold(kb_vclock *c, int delta) {
  if (!c) return;
  c->held += delta;
  if (c->held < 0) c->held = 0;
}

void kb_vclock_busy(kb_vclock *c, int delta) {
  if (!c || !delta) return;
  if (c->mode == KB_VCLOCK_EVENTS) {
    if (c->busy == 0 && delta > 0) c->busy_since = uv_hrtime();
    if (c->busy > 0 && c->busy + delta <= 0) c->ev_now = kb_vclock_now(c);
  }
  c->busy += delta;
  if (c->busy < 0) c->busy = 0;
}

/* ---- the heap ------------------------------------------------------------ */

static int earlier(const kb_vtimer *a, const kb_vtimer *b) {
  return a->due != b->due ? a->due < b->due : a->seq < b->seq;
}

static void place(kb_vclock *c, size_t i, kb_vtimer *t) {
  c->heap[i] = t;
  t->slot = i + 1;
}

static void sift_up(kb_vclock *c, size_t i) {
  kb_vtimer *t = c->heap[i];
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!earlier(t, c->heap[p])) break;
    place(c, i, c->heap[p]);
    i = p;
  }
  place(c, i, t);
}

static void sift_down(kb_vclock *c, size_t i) {
  kb_vtimer *t = c->heap[i];
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = l;
    if (l >= c->n) break;
    if (r < c->n && earlier(c->heap[r], c->heap[l])) m = r;
    if (!earlier(c->heap[m], t)) break;
    place(c, i, c->heap[m]);
    i = m;
  }
  place(c, i, t);
}

static void heap_remove(kb_vclock *c, kb_vtimer *t) {
  size_t i = t->slot - 1;
  t->slot = 0;
  kb_vtimer *last = c->heap[--c->n];
  if (i == c->n) return;
  place(c, i, last);
  if (i > 0 && earlier(last, c->heap[(i - 1) / 2])) sift_up(c, i);
  else sift_down(c, i);
}

/* ---- firing ---------------------------------------------------------------- */

static void on_timer(uv_timer_t *h);

/* Arms the libuv timer for the earliest timer, in real milliseconds
 * (rounded up, so it does not wake before the due time more than libuv's
 * own rounding makes it). */
static void arm(kb_vclock *c) {
  if (!c->n) {
    uv_timer_stop(&c->timer);
    uv_unref((uv_handle_t *)&c->timer);
    return;
  }
  uv_ref((uv_handle_t *)&c->timer); /* an armed timer keeps the loop alive */
  double wait = (c->heap[0]->due - kb_vclock_now(c)) / c->speed * 1e3;
  /* Standing still, only a jump makes it due: the prepare check does that.
   * Armed anyway (for when real work starts), but it may not fire early
   * and spin: on_timer just re-arms. */
  uint64_t ms = wait <= 0 ? 0 : wait > 9.0e15 ? (uint64_t)9.0e15 : (uint64_t)ceil(wait);
  uv_timer_start(&c->timer, on_timer, ms, 0);
}

/* Fires what is due, in (due, start order). Timers started by these
 * callbacks wait for the next pass, even when due now, so a callback that
 * re-arms itself with 0 cannot hold the loop. */
static void on_timer(uv_timer_t *h) {
  kb_vclock *c = h->data;
  uint64_t last = c->seq;
  double now = kb_vclock_now(c);
  while (c->n && c->heap[0]->due <= now && c->heap[0]->seq < last) {
    kb_vtimer *t = c->heap[0];
    heap_remove(c, t);
    t->cb(t);
    if (c->freeing) return;
  }
  arm(c);
}

static int watchers_registered(const uv_loop_t *loop) {
#if UV_VERSION_HEX >= ((1 << 16) | (45 << 8))
  return loop->watcher_queue.next == &loop->watcher_queue;
#else
  return loop->watcher_queue[0] == (void *)&loop->watcher_queue;
#endif
}

static int ready_io(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  return poll(&p, 1, 0) > 0;
}

static void on_prepare(uv_prepare_t *h) {
  kb_vclock *c = h->data;
  if (c->mode != KB_VCLOCK_EVENTS || c->busy > 0 || c->held > 0 || !c->n) return;
  if (uv_backend_timeout(c->loop) == 0) return; /* something runs right away */
  if (!watchers_registered(c->loop)) {
    /* Poll once without blocking, which registers them, and look again. */
    uv_timer_start(&c->timer, on_timer, 0, 0);
    uv_ref((uv_handle_t *)&c->timer);
    return;
  }
  if (ready_io(uv_backend_fd(c->loop))) return;
  double now = kb_vclock_now(c), due = c->heap[0]->due;
  if (due > now) {
    c->skipped += due - now;
    c->jumps++;
    c->ev_now = due;
  }
  uv_timer_start(&c->timer, on_timer, 0, 0);
}

/* ---- the clock --------------------------------------------------------------- */

/* Events mode runs at the real rate when it runs at all. */
static double speed_of(kb_vclock_mode mode, double speed) {
  return mode == KB_VCLOCK_EVENTS || !(speed > 0) ? 1.0 : speed;
}

kb_vclock *kb_vclock_new(uv_loop_t *loop, kb_vclock_mode mode, double speed) {
  kb_vclock *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->loop = loop;
  c->mode = mode;
  c->speed = speed_of(mode, speed);
  c->origin_ns = uv_hrtime();
  uv_timer_init(loop, &c->timer);
  c->timer.data = c;
  uv_prepare_init(loop, &c->prepare);
  c->prepare.data = c;
  uv_prepare_start(&c->prepare, on_prepare);
  /* Neither keeps the loop alive: whoever waits on a timer does. */
  uv_unref((uv_handle_t *)&c->prepare);
  uv_unref((uv_handle_t *)&c->timer);
  c->open_handles = 2;
  return c;
}

void kb_vclock_set(kb_vclock *c, kb_vclock_mode mode, double speed) {
  double now = kb_vclock_now(c);
  c->mode = mode;
  c->speed = speed_of(mode, speed);
  c->origin_ns = c->busy_since = uv_hrtime();
  c->base = c->ev_now = now;
  /* Fast-forwarding starts on the next whole second: the real time spent
   * before (a varying fraction) would otherwise shift every later reading
   * in its last bits, and a seed could not reproduce figures exactly. */
  if (mode == KB_VCLOCK_EVENTS) c->ev_now = ceil(now);
  arm(c);
}

static void on_closed(uv_handle_t *h) {
  kb_vclock *c = h->data;
  if (--c->open_handles == 0) {
    free(c->heap);
    free(c);
  }
}

void kb_vclock_stop_all(kb_vclock *c) {
  while (c->n) heap_remove(c, c->heap[0]);
  arm(c);
}

void kb_vclock_free(kb_vclock *c) {
  if (!c) return;
  c->freeing = 1;
  while (c->n) heap_remove(c, c->heap[0]);
  uv_close((uv_handle_t *)&c->timer, on_closed);
  uv_close((uv_handle_t *)&c->prepare, on_closed);
}

/* ---- timers ------------------------------------------------------------------ */

void kb_vtimer_init(kb_vclock *c, kb_vtimer *t, kb_vtimer_cb cb, void *data) {
  *t = (kb_vtimer){.clock = c, .cb = cb, .data = data};
}

int kb_vtimer_start_at(kb_vtimer *t, double due) {
  kb_vclock *c = t->clock;
  if (c->freeing) return UV_EINVAL;
  if (t->slot) heap_remove(c, t);
  if (c->n == c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 64;
    kb_vtimer **h = realloc(c->heap, cap * sizeof *h);
    if (!h) return UV_ENOMEM;
    c->heap = h;
    c->cap = cap;
  }
  t->due = due;
  t->seq = c->seq++;
  place(c, c->n++, t);
  sift_up(c, t->slot - 1);
  if (c->heap[0] == t) arm(c);
  return 0;
}

int kb_vtimer_start(kb_vtimer *t, double delay) {
  return kb_vtimer_start_at(t, kb_vclock_now(t->clock) + (delay > 0 ? delay : 0));
}

void kb_vtimer_stop(kb_vtimer *t) {
  if (!t->slot) return;
  kb_vclock *c = t->clock;
  int was_first = c->heap[0] == t;
  heap_remove(c, t);
  if (was_first || !c->n) arm(c);
}

int kb_vtimer_active(const kb_vtimer *t) { return t->slot != 0; }
