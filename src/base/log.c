/* The logger (include/kb/log.h): level threshold, UTC timestamps, optional
 * color, and every message redacted before it is written. Needs libc and
 * kb_redact only, so any C layer may log. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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

/* ---- never blocking the caller ---------------------------------------------
 * A line goes straight to the descriptor when nothing is queued and poll(2)
 * says it can take it without blocking (a pipe or a socket with room, a
 * terminal that drains, a file): the common case costs one poll and one
 * writev, and stays in order with the rest of stderr. Otherwise (stderr is a
 * pipe nobody reads, a stopped terminal) the line joins a backlog that a
 * writer thread writes with blocking writes, so the event loop never waits
 * for the reader. The backlog is bounded (BACKLOG_MAX): beyond it lines are
 * dropped and counted, and the writer reports the count once it catches up.
 * At exit the backlog gets up to a second without progress to drain. */

#define BACKLOG_MAX (1u << 20)

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t log_work = PTHREAD_COND_INITIALIZER; /* the writer waits */
static pthread_cond_t log_idle = PTHREAD_COND_INITIALIZER; /* the exit flush waits */
static char *backlog;          /* whole lines not written yet (malloc'd) */
static size_t backlog_len, backlog_cap;
static bool writer_busy;       /* the writer is writing a batch it took */
static bool writer_started;
static unsigned long dropped;  /* lines dropped since the last report */
static unsigned long written_batches; /* progress, for the exit flush */

/* Writes what a non-blocking attempt can; returns the bytes written, or
 * (size_t)-1 on a hard error (the line is lost, as it would be anyway). */
static size_t write_some(int fd, const char *p, size_t len) {
  size_t done = 0;
  while (done < len) {
    ssize_t w = write(fd, p + done, len - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (w <= 0) return (size_t)-1;
    done += (size_t)w;
  }
  return done;
}

/* Writes everything, waiting as long as it takes (the writer thread only). */
static void write_blocking(int fd, const char *p, size_t len) {
  while (len > 0) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd pfd = {.fd = fd, .events = POLLOUT};
      poll(&pfd, 1, -1);
      continue;
    }
    if (w <= 0) return;
    p += w;
    len -= (size_t)w;
  }
}

/* Can fd take len bytes now without blocking? A pipe or a socket reports
 * POLLOUT with at least a page (a unix socket: most of its buffer) free; up
 * to PIPE_BUF bytes then go in at once. */
static bool can_take(int fd, size_t len) {
  if (len > PIPE_BUF) return false;
  struct pollfd pfd = {.fd = fd, .events = POLLOUT};
  int r;
  while ((r = poll(&pfd, 1, 0)) < 0 && errno == EINTR) {
  }
  return r > 0 && (pfd.revents & POLLOUT) && !(pfd.revents & (POLLERR | POLLNVAL));
}

static void queue_locked(const char *p, size_t len) {
  if (backlog_len + len > BACKLOG_MAX) {
    dropped++;
    return;
  }
  if (backlog_len + len > backlog_cap) {
    size_t cap = backlog_cap ? backlog_cap : 16384;
    while (cap < backlog_len + len) cap *= 2;
    char *b = realloc(backlog, cap);
    if (!b) {
      dropped++;
      return;
    }
    backlog = b;
    backlog_cap = cap;
  }
  memcpy(backlog + backlog_len, p, len);
  backlog_len += len;
}

static void *writer_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&log_mu);
  for (;;) {
    while (backlog_len == 0 && dropped == 0) pthread_cond_wait(&log_work, &log_mu);
    char *batch = backlog;
    size_t len = backlog_len;
    backlog = NULL;
    backlog_len = backlog_cap = 0;
    unsigned long lost = dropped;
    dropped = 0;
    writer_busy = true;
    pthread_mutex_unlock(&log_mu);

    int fd = atomic_load(&log_fd);
    write_blocking(fd, batch, len);
    free(batch);
    if (lost) {
      char prefix[128], line[256];
      format_prefix(prefix, sizeof prefix, KB_LOG_WARN, false);
      int n = snprintf(line, sizeof line,
                       "%skbrun: %lu log line(s) dropped: stderr was not being read\n", prefix,
                       lost);
      if (n > 0) write_blocking(fd, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    }

    pthread_mutex_lock(&log_mu);
    writer_busy = false;
    written_batches++;
    pthread_cond_broadcast(&log_idle);
  }
  return NULL;
}

/* At exit: lets the writer drain, but gives up after a second in which
 * nothing moved (nobody reads stderr), so the exit never hangs. */
static void flush_at_exit(void) {
  pthread_mutex_lock(&log_mu);
  unsigned long seen = written_batches;
  while (backlog_len > 0 || writer_busy || dropped > 0) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 1;
    int r = pthread_cond_timedwait(&log_idle, &log_mu, &until);
    if (r == ETIMEDOUT) {
      if (written_batches == seen) break;
      seen = written_batches;
    }
  }
  pthread_mutex_unlock(&log_mu);
}

/* Under log_mu. False if no thread can be started (the line is dropped). */
static bool start_writer_locked(void) {
  if (writer_started) return true;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  /* the writer must not take the signals kbrun handles on the loop */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t tid;
  int r = pthread_create(&tid, &attr, writer_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  if (r != 0) return false;
  writer_started = true;
  atexit(flush_at_exit);
  return true;
}

static void emit(int fd, const char *line, size_t len) {
  pthread_mutex_lock(&log_mu);
  if (backlog_len == 0 && !writer_busy && can_take(fd, len)) {
    size_t done = write_some(fd, line, len);
    if (done == len || done == (size_t)-1) {
      pthread_mutex_unlock(&log_mu);
      return;
    }
    line += done; /* a partial write: the rest goes through the backlog */
    len -= done;
  }
  if (start_writer_locked()) {
    queue_locked(line, len);
    pthread_cond_signal(&log_work);
  }
  pthread_mutex_unlock(&log_mu);
}

void kb_log_msg(kb_log_level level, const char *msg, size_t len) {
  if (!kb_log_enabled(level)) return;
  int saved_errno = errno; /* logging an error must not change it */
  if (len > 0 && msg[len - 1] == '\n') len--;

  int fd = atomic_load(&log_fd);
  char prefix[128];
  size_t plen = format_prefix(prefix, sizeof prefix, level, use_color(fd));

  /* the whole line in one buffer: one write(2), or one backlog entry */
  char small[1024];
  char *line = small, *heap = NULL;
  size_t cap = sizeof small - plen - 1;
  size_t n = kb_redact(msg, len, small + plen, cap);
  if (n >= cap) {
    size_t rn;
    char *red = kb_redact_dup(msg, len, &rn);
    heap = red ? malloc(plen + rn + 1) : NULL;
    if (heap) {
      memcpy(heap + plen, red, rn);
      line = heap;
      n = rn;
    } else {
      n = cap - 1; /* out of memory: the truncated line is still redacted */
    }
    free(red);
  }
  memcpy(line, prefix, plen);
  line[plen + n] = '\n';
  emit(fd, line, plen + n + 1);
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
