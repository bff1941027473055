/* The kbrun logger: one line per message on stderr,
 *
 *   2026-11-29T10:00:00.123Z WARN message
 *
 * with a UTC timestamp (milliseconds), the level, and the message passed
 * through kb_redact() (include/kb/redact.h) so credentials never reach a
 * terminal or a CI log. Messages below the threshold (default INFO; kbrun
 * sets WARN for -q and DEBUG for -v) cost one comparison.
 *
 * Needs libc and pthreads only (no Lua, no libuv), and is safe from any
 * thread: the settings are atomics and each line goes out in one write(2)
 * under a mutex, so lines from the simulator thread and the main loop do
 * not interleave.
 *
 * Logging never blocks the caller on a full stderr (a pipe nobody reads, a
 * stopped terminal): a line is written directly only when poll(2) says the
 * descriptor can take it; otherwise it joins an in-memory backlog (1 MiB,
 * plus the batch the writer is writing)
 * that a writer thread drains with blocking writes, in order. Lines beyond
 * the backlog are dropped and counted; the writer then logs "kbrun: N log
 * line(s) dropped: stderr was not being read" once it catches up. At exit
 * the backlog gets up to a second without progress to drain. Output by
 * other means (fprintf(stderr), io.stderr) can overtake queued lines. */
#ifndef KB_LOG_H
#define KB_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum kb_log_level {
  KB_LOG_DEBUG = 0,
  KB_LOG_INFO,
  KB_LOG_WARN,
  KB_LOG_ERROR,
  KB_LOG_OFF /* as a threshold: log nothing */
} kb_log_level;

#if defined(__GNUC__)
#define KB_LOG_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define KB_LOG_PRINTF(f, a)
#endif

/* printf-style message at `level`. A trailing newline in the message is
 * not doubled; embedded newlines are kept. */
void kb_log(kb_log_level level, const char *fmt, ...) KB_LOG_PRINTF(2, 3);
void kb_logv(kb_log_level level, const char *fmt, va_list ap) KB_LOG_PRINTF(2, 0);
/* A preformatted message of `len` bytes (may contain NUL bytes). */
void kb_log_msg(kb_log_level level, const char *msg, size_t len);

bool kb_log_enabled(kb_log_level level);
void kb_log_set_level(kb_log_level threshold);
kb_log_level kb_log_get_level(void);

/* "debug", "info", "warn", "error", "off" (NULL for an invalid level). */
const char *kb_log_level_name(kb_log_level level);
/* Parses a level name (case-insensitive; "warning" is accepted for warn).
 * Returns 0, or -1 if the name is unknown. */
int kb_log_level_parse(const char *name, kb_log_level *out);

/* Colors the level name with ANSI escapes when `on` and the output is a
 * terminal. The default is on unless the NO_COLOR environment variable is
 * set, so a redirected stderr is always plain text. */
void kb_log_set_color(bool on);

/* Redirects the log to file descriptor fd (default 2, stderr; the logger
 * never closes it). Returns the previous descriptor. */
int kb_log_set_fd(int fd);

#endif
