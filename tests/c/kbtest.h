/* A minimal unit-test harness for kbrun's C tests.
 *
 *   static void test_something(void) { KB_CHECK(1 + 1 == 2); }
 *   int main(void) { KB_RUN(test_something); return kb_test_report(); }
 *
 * Each failed check prints file:line and the expression; the report prints
 * "N passed, N failed" and returns the process exit status. */
#ifndef KB_TEST_H
#define KB_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int kb_test_failed_checks;
static int kb_test_passed, kb_test_failed;

#define KB_CHECK(cond)                                                    \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__,    \
              #cond);                                                     \
      kb_test_failed_checks++;                                            \
    }                                                                     \
  } while (0)

#define KB_CHECK_STR(a, b)                                                \
  do {                                                                    \
    const char *kb_a_ = (a), *kb_b_ = (b);                                \
    if (!kb_a_ || !kb_b_ || strcmp(kb_a_, kb_b_) != 0) {                  \
      fprintf(stderr, "%s:%d: \"%s\" != \"%s\"\n", __FILE__, __LINE__,    \
              kb_a_ ? kb_a_ : "(null)", kb_b_ ? kb_b_ : "(null)");        \
      kb_test_failed_checks++;                                            \
    }                                                                     \
  } while (0)

#define KB_CHECK_NEAR(a, b, tol)                                          \
  do {                                                                    \
    double kb_a_ = (a), kb_b_ = (b);                                      \
    if (!(fabs(kb_a_ - kb_b_) <= (tol))) {                                \
      fprintf(stderr, "%s:%d: %g != %g (tolerance %g)\n", __FILE__,       \
              __LINE__, kb_a_, kb_b_, (double)(tol));                     \
      kb_test_failed_checks++;                                            \
    }                                                                     \
  } while (0)

#define KB_RUN(fn)                                                        \
  do {                                                                    \
    int kb_before_ = kb_test_failed_checks;                               \
    fn();                                                                 \
    if (kb_test_failed_checks == kb_before_) {                            \
      kb_test_passed++;                                                   \
    } else {                                                              \
      kb_test_failed++;                                                   \
      fprintf(stderr, "FAIL %s\n", #fn);                                  \
    }                                                                     \
  } while (0)

static inline int kb_test_report(void) {
  printf("%d passed, %d failed\n", kb_test_passed, kb_test_failed);
  return kb_test_failed ? 1 : 0;
}

#endif
