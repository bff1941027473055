/* kb_db: dispatch to the SQLite or PostgreSQL backend (include/kb/db.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb/db.h"

kb_db_options kb_db_defaults(void) {
  kb_db_options o = {.busy_timeout_ms = 10000, .connect_attempts = 3, .retry_delay_ms = 250,
                     .connect_timeout_s = 5, .create = 1};
  return o;
}

static int is_pg(const char *target) {
  return strncmp(target, "postgresql://", 13) == 0 || strncmp(target, "postgres://", 11) == 0;
}

const char *kb_db_kind_of(const char *target) { return is_pg(target) ? "postgresql" : "sqlite"; }

int kb_db_open(const char *target, const kb_db_options *opts, kb_db **out, char *err,
               size_t errlen) {
  kb_db_options def = kb_db_defaults();
  if (!opts) opts = &def;
  *out = NULL;
  if (!target || !*target) {
    snprintf(err, errlen, "no database named");
    return KB_DB_ERROR;
  }
  if (is_pg(target)) return kb_db_pg_open(target, opts, out, err, errlen);
  if (strncmp(target, "sqlite:", 7) == 0) target += 7;
  return kb_db_sqlite_open(target, opts, out, err, errlen);
}

const char *kb_db_kind(const kb_db *db) { return db->ops->kind; }

int kb_db_exec(kb_db *db, const char *sql, int nparams, const kb_db_value *params,
               kb_db_row_fn fn, void *ud, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  return db->ops->exec(db, sql, nparams, params, fn, ud, err, errlen);
}

void kb_db_close(kb_db *db) {
  if (db) db->ops->close(db);
}

const char *kb_db_strstatus(int status) {
  switch (status) {
  case KB_DB_OK: return "ok";
  case KB_DB_BUSY: return "busy";
  case KB_DB_CORRUPT: return "corrupt";
  case KB_DB_CONNECT: return "connect";
  case KB_DB_NOMEM: return "nomem";
  case KB_DB_STOP: return "stop";
  default: return "error";
  }
}

char *kb_db_number_placeholders(const char *sql, int *count) {
  size_t len = strlen(sql);
  /* each '?' (1 byte) becomes at most "$32767" (6 bytes) */
  char *out = malloc(len * 6 + 1);
  if (!out) return NULL;
  char *o = out;
  int n = 0;
  char quote = 0;
  for (const char *p = sql; *p; p++) {
    if (quote) {
      *o++ = *p;
      if (*p == quote) quote = 0;
    } else if (*p == '\'' || *p == '"') {
      quote = *p;
      *o++ = *p;
    } else if (*p == '-' && p[1] == '-') {
      while (*p && *p != '\n') *o++ = *p++;
      if (!*p) break;
      *o++ = *p;
    } else if (*p == '?' && n < 32767) {
      o += sprintf(o, "$%d", ++n);
    } else {
      *o++ = *p;
    }
  }
  *o = '\0';
  *count = n;
  return out;
}
