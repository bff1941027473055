/* A sampling profiler of the Lua code a scenario runs, for the engineers
 * who tune kbrun's own cost (bench/, issue 15's "profile the per-call
 * path"): perf sees the interpreter, not which Lua function it executes.
 *
 * KBRUN_LUA_PROFILE=FILE arms a timer on the main thread's CPU time (1 kHz,
 * its signal sent to that thread, not to libuv's pool threads). Its handler, like the SIGINT one, only arms a count hook on the coroutine
 * that runs; the hook, back in ordinary Lua context, reads the stack and
 * counts it. Samples that land while no Lua runs (the event loop, libcurl,
 * a C function's own time attributed to its caller's line is the exception)
 * count as "[event loop]". At exit FILE gets one line per distinct stack,
 * "frame;frame;...;leaf COUNT", root first: the folded format flame-graph
 * tools read; bench/lua_profile.lua summarises it.
 *
 * KBRUN_LUA_PROFILE_EVERY=N counts instead every N Lua VM instructions
 * (a count hook): deterministic on a noisy machine, blind to C. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>

#include "kb/fnv.h"
#include "rt_internal.h"

#define PROFILE_HZ 1000
#define PROFILE_DEPTH 24

typedef struct prof_slot {
  char *stack;
  unsigned long count;
} prof_slot;

static struct {
  kb_rt *volatile rt;
  char *path;
  prof_slot *slots;
  size_t cap, used;
  unsigned long loop_samples, lost;
  volatile sig_atomic_t armed; /* ticks since the hook was armed, not yet counted */
  lua_State *volatile armed_on; /* the thread whose hook is armed, or NULL */
  unsigned long unknown;        /* ticks of a thread that yielded before its hook ran */
  timer_t timer;
  int counting; /* the count mode: no timer */
} prof;

static prof_slot *prof_find(const char *stack) {
  for (size_t i = kb_fnv64(KB_FNV64_INIT, stack) & (prof.cap - 1);; i = (i + 1) & (prof.cap - 1))
    if (!prof.slots[i].stack || !strcmp(prof.slots[i].stack, stack)) return &prof.slots[i];
}

static int prof_grow(void) {
  size_t cap = prof.cap ? prof.cap * 2 : 1024;
  prof_slot *old = prof.slots;
  size_t old_cap = prof.cap;
  if (!(prof.slots = calloc(cap, sizeof *prof.slots))) {
    prof.slots = old;
    return -1;
  }
  prof.cap = cap;
  for (size_t i = 0; i < old_cap; i++)
    if (old[i].stack) *prof_find(old[i].stack) = old[i];
  free(old);
  return 0;
}

static void prof_count(const char *stack, unsigned long ticks) {
  if ((prof.used + 1) * 2 > prof.cap && prof_grow() < 0) {
    prof.lost++;
    return;
  }
  prof_slot *s = prof_find(stack);
  if (!s->stack) {
    if (!(s->stack = strdup(stack))) {
      prof.lost++;
      return;
    }
    prof.used++;
  }
  s->count += ticks;
}

/* Counts L's stack: "source:line function" frames, root first, the leaf
 * with its current line, the others with the line they start at. */
static void count_stack(lua_State *L, unsigned long ticks) {
  lua_Debug frames[PROFILE_DEPTH];
  int n = 0;
  while (n < PROFILE_DEPTH && lua_getstack(L, n, &frames[n])) n++;
  char stack[PROFILE_DEPTH * 96], *p = stack, *end = stack + sizeof stack;
  *p = 0;
  for (int i = n - 1; i >= 0 && p < end - 1; i--) {
    lua_Debug *d = &frames[i];
    if (!lua_getinfo(L, "Sln", d)) continue;
    int line = i == 0 ? d->currentline : d->linedefined;
    int w = snprintf(p, (size_t)(end - p), "%s%s:%d %s", p == stack ? "" : ";", d->short_src,
                     line, d->name ? d->name : "?");
    if (w < 0) break;
    p += (size_t)w < (size_t)(end - p) ? (size_t)w : (size_t)(end - p) - 1;
  }
  prof_count(*stack ? stack : "[no frame]", ticks);
}

/* The time mode's hook, armed by the timer's signal: counts once and
 * disarms. */
static void prof_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  /* every tick since the arming: the time a C function spent before Lua
   * ran again is its caller's */
  unsigned long ticks = L == prof.armed_on ? (unsigned long)prof.armed : 1;
  prof.armed = 0;
  prof.armed_on = NULL;
  kb_rt *rt = prof.rt;
  if (rt && rt->interrupt_armed && L != rt->L) kb__signal_arm(L); /* it came meanwhile */
  count_stack(L, ticks ? ticks : 1);
}

/* The count mode: every `every` Lua VM instructions, in every coroutine
 * (a new thread inherits its creator's hook). Deterministic, and blind to
 * time spent in C: it says which Lua code executes most. */
static void count_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  count_stack(L, 1);
}

static void on_sigprof(int sig) {
  (void)sig;
  kb_rt *rt = prof.rt;
  if (!rt || rt->interrupt_armed) return;
  lua_State *running = rt->running;
  if (!running && rt->in_lua > 0) running = rt->L;
  if (!running) {
    prof.loop_samples++;
    return;
  }
  if (running == prof.armed_on) { /* still in the C function it called */
    prof.armed++;
    return;
  }
  /* Another thread runs: the armed one yielded inside C (an await) before
   * its hook could read its stack; its ticks are not this one's. */
  if (prof.armed_on) {
    lua_sethook(prof.armed_on, NULL, 0, 0);
    prof.unknown += (unsigned long)prof.armed;
  }
  prof.armed_on = running;
  prof.armed = 1;
  lua_sethook(running, prof_hook, LUA_MASKCOUNT, 1);
}

int kb_rt_profile_start(kb_rt *rt, const char *path, int every) {
  if (prof.rt || !(prof.path = strdup(path))) return -1;
  if (every > 0) {
    prof.rt = rt;
    prof.counting = 1;
    lua_sethook(rt->L, count_hook, LUA_MASKCOUNT, every);
    return 0;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigprof;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_THREAD_ID;
  ev.sigev_signo = SIGPROF;
  ev._sigev_un._tid = gettid(); /* sigev_notify_thread_id: glibc >= 2.37 names it */
  struct itimerspec it = {{0, 1000000000L / PROFILE_HZ}, {0, 1000000000L / PROFILE_HZ}};
  if (sigaction(SIGPROF, &sa, NULL) || timer_create(CLOCK_THREAD_CPUTIME_ID, &ev, &prof.timer)) {
    free(prof.path);
    prof.path = NULL;
    return -1;
  }
  prof.rt = rt;
  if (timer_settime(prof.timer, 0, &it, NULL)) {
    kb_rt_profile_stop();
    return -1;
  }
  return 0;
}

static int by_count(const void *a, const void *b) {
  const prof_slot *x = a, *y = b;
  return (y->count > x->count) - (y->count < x->count);
}

/* Stops sampling and writes the folded stacks; -1 if FILE cannot be written. */
int kb_rt_profile_stop(void) {
  if (!prof.rt) return 0;
  kb_rt *rt = prof.rt;
  if (prof.counting) {
    lua_sethook(rt->L, NULL, 0, 0);
  } else {
    timer_delete(prof.timer);
    signal(SIGPROF, SIG_IGN);
  }
  prof.rt = NULL;
  size_t n = 0;
  for (size_t i = 0; i < prof.cap; i++)
    if (prof.slots[i].stack) prof.slots[n++] = prof.slots[i];
  qsort(prof.slots, n, sizeof *prof.slots, by_count);
  FILE *f = fopen(prof.path, "w");
  int rc = f ? 0 : -1;
  if (f) {
    if (prof.loop_samples) fprintf(f, "[event loop] %lu\n", prof.loop_samples);
    for (size_t i = 0; i < n; i++) fprintf(f, "%s %lu\n", prof.slots[i].stack, prof.slots[i].count);
    if (prof.unknown) fprintf(f, "[C, then a yield] %lu\n", prof.unknown);
    if (prof.lost) fprintf(f, "[lost] %lu\n", prof.lost);
    if (fclose(f)) rc = -1;
  }
  for (size_t i = 0; i < n; i++) free(prof.slots[i].stack);
  free(prof.slots);
  free(prof.path);
  memset(&prof, 0, sizeof prof);
  return rc;
}
