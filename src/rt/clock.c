/* The real scenario clock: monotonic time since the runtime started. */
#include <uv.h>

#include "kb/rt.h"

typedef struct {
  uint64_t origin_ns;
} real_clock_data;

static real_clock_data real_data;

static double real_now(kb_clock *self) {
  real_clock_data *d = self->data;
  return (double)(uv_hrtime() - d->origin_ns) / 1e9;
}

void kb_clock_init_real(kb_clock *c) {
  if (real_data.origin_ns == 0) real_data.origin_ns = uv_hrtime();
  c->now = real_now;
  c->speed = 1.0;
  c->data = &real_data;
}
