/* The logger (src/base/log.c) on a stderr nobody reads: logging returns
 * at once whatever the reader does, and every line is accounted for: it
 * reaches the reader whole and in order, or it is counted in a "dropped"
 * report that reaches it once the reader catches up. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kb/log.h"
#include "kbtest.h"

#define LINES 20000 /* ~2.5 MB: far more than a pipe and the 1 MiB backlog */

static void test_full_pipe_never_blocks_and_loses_nothing_uncounted(void) {
  int fds[2];
  KB_CHECK(pipe(fds) == 0);
  int old = kb_log_set_fd(fds[1]);
  kb_log_level was = kb_log_get_level();
  kb_log_set_level(KB_LOG_INFO);
  kb_log_set_color(false);
  /* nobody reads yet: with a blocking logger this loop never ends (the
   * test then fails by its ctest timeout) */
  for (int i = 1; i <= LINES; i++)
    kb_log(KB_LOG_INFO, "line %d %s", i, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");

  /* now read everything: lines in order, then the dropped count(s) */
  long received = 0, dropped = 0, last = 0;
  int disorder = 0, broken = 0;
  char buf[65536], line[4096];
  size_t llen = 0;
  while (received + dropped < LINES) {
    struct pollfd p = {.fd = fds[0], .events = POLLIN};
    if (poll(&p, 1, 30000) <= 0) break; /* 30 s of silence: something is lost */
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; i++) {
      if (buf[i] != '\n') {
        if (llen < sizeof line - 1) line[llen++] = buf[i];
        continue;
      }
      line[llen] = '\0';
      llen = 0;
      const char *body = strstr(line, " INFO ");
      const char *warn = strstr(line, " WARN kbrun: ");
      long v;
      if (body && sscanf(body, " INFO line %ld", &v) == 1) {
        if (v <= last) disorder++;
        last = v;
        received++;
      } else if (warn && sscanf(warn, " WARN kbrun: %ld log line(s) dropped", &v) == 1) {
        dropped += v;
      } else {
        broken++;
      }
    }
  }
  kb_log_set_fd(old);
  kb_log_set_level(was);
  close(fds[0]);
  close(fds[1]);
  fprintf(stderr, "received %ld lines, %ld reported dropped\n", received, dropped);
  KB_CHECK(received + dropped == LINES);
  KB_CHECK(received > 0);
  KB_CHECK(dropped > 0); /* the backlog is bounded */
  KB_CHECK(disorder == 0);
  KB_CHECK(broken == 0);
}

int main(void) {
  KB_RUN(test_full_pipe_never_blocks_and_loses_nothing_uncounted);
  return kb_test_report();
}
