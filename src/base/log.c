/* The logger (include/kb/log.h): level threshold, UTC timestamps, optional
 * color, and every message redacted before it is written. Needs libc and
 * kb_redact only, so any C layer may log. */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "kb/log.h"
#include "kb/redact.h"

static atomic_int log_threshold = KB_LOG_INFO;
static atomic_int log_fd = STDERR_FILENO;
static atomic_int color_setting = -1; /* -1: not decided yet (NO_COLOR decides) */
static atomic_int fd_is_tty = -1;     /* -1: not checked yet for log_fd */

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};
static const char *const level_labels[] = {"DEBUG", "INFO", "WARN", "ERROR"};
static const char *const level_colors[] = {"\033[2m", "\033[36m", "\033[33m", "\033[31m"};
#define COLOR_RESET "\033[0m"

bool kb_log_enabled(kb_log_level level) {
  return level >= KB_LOG_DEBUG && level < KB_LOG_OFF && (int)level >= atomic_load(&log_threshold);
}

void kb_log_set_level(kb_log_level threshold) {
  if (threshold >= KB_LOG_DEBUG && threshold <= KB_LOG_OFF) atomic_store(&log_threshold, threshold);
}

kb_log_level kb_log_get_level(void) { return (kb_log_level)atomic_load(&log_threshold); }

const char *kb_log_level_name(kb_log_level level) {
  return (level >= KB_LOG_DEBUG && level <= KB_LOG_OFF) ? level_names[level] : NULL;
}

int kb_log_level_parse(const char *name, kb_log_level *out) {
  for (int l = KB_LOG_DEBUG; l <= KB_LOG_OFF; l++) {
    if (strcasecmp(name, level_names[l]) == 0) {
      *out = (kb_log_level)l;
      return 0;
    }
  }
  if (strcasecmp(name, "warning") == 0) {
    *out = KB_LOG_WARN;
    return 0;
  }
  return -1;
}

void kb_log_set_color(bool on) { atomic_store(&color_setting, on); }

int kb_log_set_fd(int fd) {
  int old = atomic_exchange(&log_fd, fd);
  atomic_store(&fd_is_tty, -1);
  return old;
}

static bool use_color(int fd) {
  int want = atomic_load(&color_setting);
  if (want < 0) {
    const char *no_color = getenv("NO_COLOR");
    want = !(no_color && *no_color);
    atomic_store(&color_setting, want);
  }
  if (!want) return false;
  int tty = atomic_load(&fd_is_tty);
  if (tty < 0) {
    tty = isatty(fd);
    atomic_store(&fd_is_tty, tty);
  }
  return tty;
}

/* "2026-11-29T10:00:00.123Z WARN ", colored or not. */
static size_t format_prefix(char *buf, size_t cap, kb_log_level level, bool color) {
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  int n = snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ %s%s%s ",
                   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                   tm.tm_sec, (int)(ts.tv_nsec / 1000000), color ? level_colors[level] : "",
                   level_labels[level], color ? COLOR_RESET : "");
  return n < 0 ? 0 : ((size_t)n < cap ? (size_t)n : cap - 1);
}

/* Writes every byte, riding out EINTR and a non-blocking descriptor. A log
 * line that cannot be written has nowhere else to go, so errors end it. */
static void write_all(int fd, struct iovec *iov, int n) {
  while (n > 0) {
    ssize_t w = writev(fd, iov, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      if (poll(&p, 1, 1000) > 0) continue;
      return;
    }
    if (w <= 0) return;
    while (n > 0 && (size_t)w >= iov->iov_len) {
      w -= (ssize_t)iov->iov_len;
      iov++;
      n--;
    }
    if (n > 0) {
      iov->iov_base = (char *)iov->iov_base + w;
      iov->iov_len -= (size_t)w;
    }
  }
}

void kb_log_msg(kb_log_level level, const char *msg, size_t len) {
  if (!kb_log_enabled(level)) return;
  int saved_errno = errno; /* logging an error must not change it */
  if (len > 0 && msg[len - 1] == '\n') len--;

  char small[1024];
  char *text = small, *heap = NULL;
  size_t n = kb_redact(msg, len, small, sizeof small);
  if (n >= sizeof small) {
    heap = kb_redact_dup(msg, len, &n);
    if (heap) text = heap;
    else n = sizeof small - 1; /* out of memory: the truncated line is still redacted */
  }

  int fd = atomic_load(&log_fd);
  char prefix[128];
  size_t plen = format_prefix(prefix, sizeof prefix, level, use_color(fd));
  struct iovec iov[3] = {
    {.iov_base = prefix, .iov_len = plen},
    {.iov_base = text, .iov_len = n},
    {.iov_base = "\n", .iov_len = 1},
  };
  write_all(fd, iov, 3);
  free(heap);
  errno = saved_errno;
}

void kb_logv(kb_log_level level, const char *fmt, va_list ap) {
  if (!kb_log_enabled(level)) return;
  int saved_errno = errno; /* also keeps %m working inside fmt */
  char small[512];
  va_list again;
  va_copy(again, ap);
  errno = saved_errno;
  int n = vsnprintf(small, sizeof small, fmt, ap);
  if (n < 0) {
    va_end(again);
    return;
  }
  if ((size_t)n < sizeof small) {
    kb_log_msg(level, small, (size_t)n);
  } else {
    char *big = malloc((size_t)n + 1);
    if (big) {
      errno = saved_errno;
      vsnprintf(big, (size_t)n + 1, fmt, again);
      kb_log_msg(level, big, (size_t)n);
      free(big);
    } else {
      kb_log_msg(level, small, sizeof small - 1);
    }
  }
  va_end(again);
  errno = saved_errno;
}

void kb_log(kb_log_level level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kb_logv(level, fmt, ap);
  va_end(ap);
}
