/* The simulator's cron parser (sim_cron.h), for KFP recurring runs and
 * batch/v1 CronJobs (ctl_cronjob.c).
 *
 * Cron expressions as KFP's ScheduledWorkflow controller reads them
 * (robfig/cron): "sec min hour dom month dow" (5 fields: no seconds),
 * with *, numbers, a-b ranges, lists and /steps, and the descriptors
 * @yearly @monthly @weekly @daily @hourly. Day-of-month and day-of-week
 * restrict together when either is '*', else either matches. UTC. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim_cron.h"

typedef struct cron {
  uint64_t f[6]; /* sec, min, hour, dom, month, dow bit sets */
  int dom_star, dow_star;
} cron;

static const int lo[6] = {0, 0, 0, 1, 1, 0}, hi[6] = {59, 59, 23, 31, 12, 7};

static int parse_field(const char *s, size_t n, int k, uint64_t *out, int *star) {
  *out = 0;
  *star = 0;
  char buf[64];
  if (n == 0 || n >= sizeof buf) return -1;
  memcpy(buf, s, n);
  buf[n] = 0;
  char *save = NULL;
  for (char *part = strtok_r(buf, ",", &save); part; part = strtok_r(NULL, ",", &save)) {
    int a, b, step = 1;
    char *slash = strchr(part, '/');
    if (slash) {
      *slash = 0;
      char *end;
      step = (int)strtol(slash + 1, &end, 10);
      if (*end || step <= 0) return -1;
    }
    if (!strcmp(part, "*") || !strcmp(part, "?")) {
      a = lo[k], b = hi[k];
      if (!slash) *star = 1;
    } else {
      char *end;
      a = (int)strtol(part, &end, 10);
      if (end == part) return -1;
      if (*end == '-') {
        char *e2;
        b = (int)strtol(end + 1, &e2, 10);
        if (*e2 || e2 == end + 1) return -1;
      } else if (*end) {
        return -1;
      } else {
        b = slash ? hi[k] : a;
      }
    }
    if (a < lo[k] || b > hi[k] || a > b) return -1;
    for (int i = a; i <= b; i += step) *out |= 1ULL << i;
  }
  if (k == 5 && (*out >> 7 & 1)) *out |= 1; /* 7 is Sunday too */
  return 0;
}

static int parse(const char *expr, cron *c) {
  static const struct { const char *name, *spec; } desc[] = {
      {"@yearly", "0 0 0 1 1 *"}, {"@annually", "0 0 0 1 1 *"}, {"@monthly", "0 0 0 1 * *"},
      {"@weekly", "0 0 0 * * 0"}, {"@daily", "0 0 0 * * *"},    {"@midnight", "0 0 0 * * *"},
      {"@hourly", "0 0 * * * *"}};
  for (size_t i = 0; i < sizeof desc / sizeof desc[0]; i++)
    if (!strcmp(expr, desc[i].name)) expr = desc[i].spec;
  const char *f[6];
  size_t len[6], n = 0;
  for (const char *p = expr; *p;) {
    while (*p == ' ' || *p == '\t') p++;
    if (!*p) break;
    if (n == 6) return -1;
    f[n] = p;
    while (*p && *p != ' ' && *p != '\t') p++;
    len[n] = (size_t)(p - f[n]);
    n++;
  }
  if (n != 5 && n != 6) return -1;
  int off = n == 5 ? 1 : 0, star;
  if (n == 5) c->f[0] = 1; /* second 0 */
  for (size_t i = 0; i < n; i++) {
    if (parse_field(f[i], len[i], (int)i + off, &c->f[i + off], &star)) return -1;
    if (i + off == 3) c->dom_star = star;
    if (i + off == 5) c->dow_star = star;
  }
  return 0;
}

int kb_sim_cron_fields(const char *expr) {
  int n = 0;
  if (!expr || expr[0] == '@') return 0;
  for (const char *p = expr; *p;) {
    while (*p == ' ' || *p == '\t') p++;
    if (!*p) break;
    n++;
    while (*p && *p != ' ' && *p != '\t') p++;
  }
  return n;
}

int kb_sim_cron_valid(const char *expr) {
  cron c;
  return expr && !parse(expr, &c);
}

static int day_ok(const cron *c, const struct tm *tm) {
  int dom = c->f[3] >> tm->tm_mday & 1, dow = c->f[5] >> tm->tm_wday & 1;
  return c->dom_star || c->dow_star ? dom && dow : dom || dow;
}

double kb_sim_cron_next(const char *expr, double after) {
  cron c;
  if (!expr || parse(expr, &c)) return -1;
  time_t t = (time_t)floor(after) + 1;
  struct tm tm;
  /* bounded: five years of hour-sized steps at most */
  for (int guard = 0; guard < 5 * 366 * 24 * 60; guard++) {
    gmtime_r(&t, &tm);
    if (!(c.f[4] >> (tm.tm_mon + 1) & 1)) {
      tm.tm_mon++, tm.tm_mday = 1, tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
    } else if (!day_ok(&c, &tm)) {
      tm.tm_mday++, tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
    } else if (!(c.f[2] >> tm.tm_hour & 1)) {
      tm.tm_hour++, tm.tm_min = tm.tm_sec = 0;
    } else if (!(c.f[1] >> tm.tm_min & 1)) {
      tm.tm_min++, tm.tm_sec = 0;
    } else {
      for (int s = tm.tm_sec; s < 60; s++)
        if (c.f[0] >> s & 1) {
          tm.tm_sec = s;
          return (double)timegm(&tm);
        }
      tm.tm_min++, tm.tm_sec = 0;
    }
    t = timegm(&tm);
  }
  return INFINITY;
}
