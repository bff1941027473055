/* Running a libuv loop in the C tests: until a callback has counted what
 * the test waits for, with a 20 s safety timer so that a bug fails the test
 * instead of hanging it. */
#ifndef KB_UV_TEST_UTIL_H
#define KB_UV_TEST_UTIL_H

#include <uv.h>

#include "kbtest.h"

static int kb_test_loop_timed_out;
static void kb_test_on_safety(uv_timer_t *t) {
  (void)t;
  kb_test_loop_timed_out = 1;
}

/* Runs loop until *flag >= want (or 20 s passed: a failed check). */
static inline void kb_test_run_until(uv_loop_t *loop, int *flag, int want) {
  uv_timer_t safety;
  uv_timer_init(loop, &safety);
  uv_timer_start(&safety, kb_test_on_safety, 20000, 0);
  kb_test_loop_timed_out = 0;
  while (*flag < want && !kb_test_loop_timed_out) uv_run(loop, UV_RUN_ONCE);
  KB_CHECK(!kb_test_loop_timed_out);
  uv_close((uv_handle_t *)&safety, NULL);
  uv_run(loop, UV_RUN_NOWAIT);
}

#endif
