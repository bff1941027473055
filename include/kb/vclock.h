/* The scenario clock and its timers, shared by the runtime and the
 * simulator so that both read one time and wait on one timer queue.
 *
 * Two kinds of clock:
 *
 *  - linear: now = base + real elapsed * speed. speed 1 is real time; the
 *    standalone simulator (and the embedded one with clock = "linear") runs
 *    600 times faster. A timer due in d seconds becomes a libuv timer of
 *    d / speed real seconds. Everything that takes real time, the host's
 *    overhead included, is scaled by the speed.
 *
 *  - events (fast-forward): time stands still while the loop works on its
 *    own (host overhead costs nothing: a seed reproduces the same figures),
 *    runs at the real rate while real work is in flight (a child process,
 *    a request to a real server: kb_vclock_busy), waits for host work off
 *    the loop without counting it (a thread-pool job: kb_vclock_hold), and
 *    jumps to the next timer when nothing happens: every task waits, no
 *    byte is in flight on the loop's sockets. A wait of 1.5 modelled
 *    seconds costs no real time. Only sound when every party
 *    whose time matters runs on this loop: the embedded simulator does
 *    (same loop, Unix socket), outside clients do not.
 *
 * Timers: a binary min-heap keyed by (due, sequence), so timers due at the
 * same instant fire in the order they were started, behind one libuv timer
 * armed for the earliest. A timer never fires before its due time (libuv's
 * millisecond timers may wake a little early: the earliest is re-armed).
 *
 * Not thread-safe: a clock and its timers belong to the thread of its loop.
 * kb_vclock_now may be read from any thread in linear mode only. */
#ifndef KB_VCLOCK_H
#define KB_VCLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct kb_vclock kb_vclock;
typedef struct kb_vtimer kb_vtimer;
typedef void (*kb_vtimer_cb)(kb_vtimer *t);

typedef enum { KB_VCLOCK_LINEAR, KB_VCLOCK_EVENTS } kb_vclock_mode;

/* Embedded in its owner; kb_vtimer_init before use. */
struct kb_vtimer {
  kb_vclock *clock;
  kb_vtimer_cb cb;
  void *data;
  double due;   /* clock seconds */
  uint64_t seq; /* start order, for ties */
  size_t slot;  /* index in the heap + 1; 0 while not armed */
};

/* Returns NULL when out of memory. */
kb_vclock *kb_vclock_new(uv_loop_t *loop, kb_vclock_mode mode, double speed);
/* Stops every timer (their callbacks are not called) and releases the clock
 * once its libuv handles are closed (the loop must run once more). */
void kb_vclock_free(kb_vclock *c);
/* Disarms every timer (their callbacks are not called); the clock stays. */
void kb_vclock_stop_all(kb_vclock *c);

double kb_vclock_now(const kb_vclock *c);
kb_vclock_mode kb_vclock_mode_of(const kb_vclock *c);
/* Scenario seconds per real second while time runs (1 in events mode). */
double kb_vclock_speed(const kb_vclock *c);
/* Switches a linear clock's speed (or the mode) from the current time on:
 * now never jumps backwards. Armed timers keep their due times. */
void kb_vclock_set(kb_vclock *c, kb_vclock_mode mode, double speed);

/* Real work in flight that fast-forwarding must not skip over (a child
 * process, a request to a real server): +1 when it
 * starts, -1 when it ends. Has no effect on a linear clock. */
void kb_vclock_busy(kb_vclock *c, int delta);
/* Host work off the loop (a thread-pool job): +1/-1. The clock neither
 * jumps nor runs while it is in flight: like the loop's own work, it costs
 * no time, and a wait behind it is not skipped before it completes. */
void kb_vclock_hold(kb_vclock *c, int delta);
/* Seconds skipped by fast-forwarding and the number of jumps, so far. */
double kb_vclock_skipped(const kb_vclock *c, uint64_t *jumps);

void kb_vtimer_init(kb_vclock *c, kb_vtimer *t, kb_vtimer_cb cb, void *data);
/* Arms t to fire `delay` clock seconds from now (re-arms if armed). 0 or
 * UV_ENOMEM. A delay of 0 fires on the next loop iteration, not inside the
 * call. */
int kb_vtimer_start(kb_vtimer *t, double delay);
int kb_vtimer_start_at(kb_vtimer *t, double due);
void kb_vtimer_stop(kb_vtimer *t);
int kb_vtimer_active(const kb_vtimer *t);

#endif
