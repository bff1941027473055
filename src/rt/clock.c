/* Scenario clocks. The runtime's own clock is linear in monotonic time:
 *   now = base + (uv_hrtime() - origin_ns) / 1e9 * speed
 * speed 1 is the real clock; the simulator's virtual clock runs `speed`
 * times faster. Changing speed re-bases the clock at the current value, so
 * kb.now() never jumps: durations measured across a switch stay sane. */
#include <uv.h>

#include "rt_internal.h"

static double linear_now(kb_clock *self) {
  kb_linear_clock *c = (kb_linear_clock *)self;
  return c->base + (double)(uv_hrtime() - c->origin_ns) / 1e9 * self->speed;
}

void kb_linear_clock_init(kb_linear_clock *c, double base, double speed) {
  c->clock.now = linear_now;
  c->clock.speed = speed;
  c->clock.data = c;
  c->base = base;
  c->origin_ns = uv_hrtime();
}

void kb_rt_set_speed(kb_rt *rt, double speed) {
  double now = kb_rt_now(rt);
  kb_linear_clock_init(&rt->linear, now, speed > 0 ? speed : 1.0);
  rt->clock = &rt->linear.clock;
}
