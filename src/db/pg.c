/* kb_db's PostgreSQL backend (libpq): the same statements as SQLite's, '?'
 * placeholders numbered for the server (include/kb/db.h).
 *
 * The URL goes to libpq as it is (expand_dbname), so PG* environment
 * variables, ~/.pgpass and sslmode= work as for psql. A server that cannot
 * be reached is tried connect_attempts times, retry_delay_ms apart
 * (doubling), then KB_DB_CONNECT with the server's (libpq's) message; the
 * URL never appears in a message (it may hold a password). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "kb/db.h"

typedef struct {
  kb_db base;
  PGconn *conn;
} pg_db;

/* libpq's messages end in a newline (several lines for some): one line. */
static void copy_message(char *err, size_t errlen, const char *prefix, const char *msg) {
  int n = snprintf(err, errlen, "%s%s", prefix, msg ? msg : "(no message)");
  if (n < 0 || !errlen) return;
  size_t len = strlen(err);
  while (len > 0 && (err[len - 1] == '\n' || err[len - 1] == ' ')) err[--len] = '\0';
  for (char *p = err; *p; p++)
    if (*p == '\n' || *p == '\t') *p = ' ';
}

static void pause_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {}
}

static int value_type(Oid oid) {
  switch (oid) {
  case 16: /* bool */
  case 20: /* int8 */
  case 21: /* int2 */
  case 23: /* int4 */
  case 26: /* oid */
    return KB_DB_INT;
  case 700: /* float4 */
  case 701: /* float8 */
  case 1700: /* numeric */
    return KB_DB_REAL;
  default: return KB_DB_TEXT;
  }
}

static int deliver_rows(PGresult *res, kb_db_row_fn fn, void *ud) {
  int ncols = PQnfields(res), nrows = PQntuples(res);
  if (!fn || ncols == 0) return KB_DB_OK;
  const char *names[ncols];
  kb_db_value vals[ncols];
  int types[ncols];
  for (int c = 0; c < ncols; c++) {
    names[c] = PQfname(res, c);
    types[c] = value_type(PQftype(res, c));
  }
  for (int r = 0; r < nrows; r++) {
    for (int c = 0; c < ncols; c++) {
      kb_db_value *v = &vals[c];
      memset(v, 0, sizeof *v);
      if (PQgetisnull(res, r, c)) continue; /* KB_DB_NULL */
      const char *text = PQgetvalue(res, r, c);
      v->type = types[c];
      if (v->type == KB_DB_INT) v->i = (text[0] == 't') ? 1 : (text[0] == 'f') ? 0 : strtoll(text, NULL, 10);
      else if (v->type == KB_DB_REAL) v->d = strtod(text, NULL);
      else { v->s = text; v->len = (size_t)PQgetlength(res, r, c); }
    }
    if (fn(ud, ncols, names, vals)) return KB_DB_STOP;
  }
  return KB_DB_OK;
}

static int result_status(pg_db *p, PGresult *res, kb_db_row_fn fn, void *ud, char *err,
                         size_t errlen) {
  if (!res) {
    copy_message(err, errlen, "postgresql: ", PQerrorMessage(p->conn));
    return PQstatus(p->conn) == CONNECTION_BAD ? KB_DB_CONNECT : KB_DB_ERROR;
  }
  ExecStatusType st = PQresultStatus(res);
  int rc = KB_DB_OK;
  if (st == PGRES_TUPLES_OK) {
    rc = deliver_rows(res, fn, ud);
  } else if (st != PGRES_COMMAND_OK && st != PGRES_EMPTY_QUERY) {
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "postgresql (SQLSTATE %s): ", state ? state : "?");
    copy_message(err, errlen, prefix, PQresultErrorMessage(res));
    rc = PQstatus(p->conn) == CONNECTION_BAD ? KB_DB_CONNECT : KB_DB_ERROR;
  }
  PQclear(res);
  return rc;
}

static int pg_exec(kb_db *base, const char *sql, int nparams, const kb_db_value *params,
                   kb_db_row_fn fn, void *ud, char *err, size_t errlen) {
  pg_db *p = (pg_db *)base;
  if (nparams == 0) {
    /* several statements possible; only the last one's rows are seen */
    return result_status(p, PQexec(p->conn, sql), fn, ud, err, errlen);
  }
  int count = 0;
  char *numbered = kb_db_number_placeholders(sql, &count);
  if (!numbered) {
    snprintf(err, errlen, "postgresql: out of memory");
    return KB_DB_NOMEM;
  }
  if (count != nparams) {
    free(numbered);
    snprintf(err, errlen, "postgresql: the statement takes %d parameter(s), %d given", count, nparams);
    return KB_DB_ERROR;
  }
  const char **values = calloc((size_t)nparams, sizeof *values);
  int *lengths = calloc((size_t)nparams, sizeof *lengths);
  char (*nums)[32] = calloc((size_t)nparams, sizeof *nums);
  char **owned = calloc((size_t)nparams, sizeof *owned);
  int rc = KB_DB_NOMEM;
  if (!values || !lengths || !nums || !owned) {
    snprintf(err, errlen, "postgresql: out of memory");
    goto done;
  }
  for (int i = 0; i < nparams; i++) {
    const kb_db_value *v = &params[i];
    switch (v->type) {
    case KB_DB_INT: snprintf(nums[i], sizeof nums[i], "%lld", (long long)v->i); values[i] = nums[i]; break;
    case KB_DB_REAL: snprintf(nums[i], sizeof nums[i], "%.17g", v->d); values[i] = nums[i]; break;
    case KB_DB_TEXT:
      /* text parameters are NUL-terminated for the server */
      owned[i] = malloc(v->len + 1);
      if (!owned[i]) {
        snprintf(err, errlen, "postgresql: out of memory");
        goto done;
      }
      memcpy(owned[i], v->s, v->len);
      owned[i][v->len] = '\0';
      values[i] = owned[i];
      break;
    default: values[i] = NULL; break;
    }
    lengths[i] = values[i] ? (int)strlen(values[i]) : 0;
  }
  rc = result_status(p, PQexecParams(p->conn, numbered, nparams, NULL, values, lengths, NULL, 0),
                     fn, ud, err, errlen);
done:
  if (owned)
    for (int i = 0; i < nparams; i++) free(owned[i]);
  free(owned);
  free(nums);
  free(lengths);
  free(values);
  free(numbered);
  return rc;
}

static void pg_close(kb_db *base) {
  pg_db *p = (pg_db *)base;
  PQfinish(p->conn);
  free(p);
}

static void quiet_notices(void *arg, const char *message) {
  (void)arg;
  (void)message; /* "relation already exists, skipping" and the like */
}

static const kb_db_ops pg_ops = {"postgresql", pg_exec, pg_close};

int kb_db_pg_open(const char *url, const kb_db_options *opts, kb_db **out, char *err,
                  size_t errlen) {
  pg_db *p = calloc(1, sizeof *p);
  if (!p) {
    snprintf(err, errlen, "postgresql: out of memory");
    return KB_DB_NOMEM;
  }
  p->base.ops = &pg_ops;
  char timeout[16];
  snprintf(timeout, sizeof timeout, "%d", opts->connect_timeout_s > 0 ? opts->connect_timeout_s : 5);
  /* the URL's own settings win over these defaults (they come later) */
  const char *keys[] = {"connect_timeout", "application_name", "dbname", NULL};
  const char *vals[] = {timeout, "kbrun", url, NULL};
  int attempts = opts->connect_attempts > 0 ? opts->connect_attempts : 1;
  int delay = opts->retry_delay_ms;
  for (int i = 0; i < attempts; i++) {
    if (i > 0) {
      pause_ms(delay);
      delay *= 2;
    }
    PQfinish(p->conn);
    p->conn = PQconnectdbParams(keys, vals, 1);
    if (!p->conn) {
      snprintf(err, errlen, "postgresql: out of memory");
      free(p);
      return KB_DB_NOMEM;
    }
    if (PQstatus(p->conn) == CONNECTION_OK) break;
  }
  if (PQstatus(p->conn) != CONNECTION_OK) {
    char prefix[96];
    snprintf(prefix, sizeof prefix, "postgresql: no connection after %d attempt%s: ", attempts,
             attempts == 1 ? "" : "s");
    copy_message(err, errlen, prefix, PQerrorMessage(p->conn));
    pg_close(&p->base);
    return KB_DB_CONNECT;
  }
  PQsetNoticeProcessor(p->conn, quiet_notices, NULL);
  *out = &p->base;
  return KB_DB_OK;
}
