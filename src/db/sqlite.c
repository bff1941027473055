/* kb_db's SQLite backend: a file in WAL mode, writers waiting for each
 * other up to busy_timeout_ms (include/kb/db.h).
 *
 * Opening checks that the file is a database before anything is written
 * to it: a corrupt or foreign file is reported (KB_DB_CORRUPT) and left as
 * it is. Prepared statements are cached by their SQL text (the writer runs
 * the same few INSERTs hundreds of times per experiment). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "kb/db.h"

#define CACHE_SLOTS 32

typedef struct {
  kb_db base;
  sqlite3 *db;
  char *path;
  struct {
    char *sql;
    sqlite3_stmt *stmt;
  } cache[CACHE_SLOTS];
  unsigned next_slot;
} sq_db;

static int status_of(int rc) {
  switch (rc & 0xff) {
  case SQLITE_BUSY:
  case SQLITE_LOCKED: return KB_DB_BUSY;
  case SQLITE_NOTADB:
  case SQLITE_CORRUPT: return KB_DB_CORRUPT;
  case SQLITE_NOMEM: return KB_DB_NOMEM;
  default: return KB_DB_ERROR;
  }
}

static int fail(sq_db *s, int rc, const char *what, char *err, size_t errlen) {
  snprintf(err, errlen, "%s: %s: %s", s->path, what,
           s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
  return status_of(rc);
}

static void sq_close(kb_db *base) {
  sq_db *s = (sq_db *)base;
  for (int i = 0; i < CACHE_SLOTS; i++) {
    sqlite3_finalize(s->cache[i].stmt);
    free(s->cache[i].sql);
  }
  sqlite3_close(s->db);
  free(s->path);
  free(s);
}

/* A cached statement for sql (reset, bindings cleared), or a new one. */
static int prepare_cached(sq_db *s, const char *sql, sqlite3_stmt **out) {
  for (int i = 0; i < CACHE_SLOTS; i++) {
    if (s->cache[i].sql && strcmp(s->cache[i].sql, sql) == 0) {
      sqlite3_reset(s->cache[i].stmt);
      sqlite3_clear_bindings(s->cache[i].stmt);
      *out = s->cache[i].stmt;
      return SQLITE_OK;
    }
  }
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL);
  if (rc != SQLITE_OK) return rc;
  char *copy = strdup(sql);
  if (!copy) {
    sqlite3_finalize(st);
    return SQLITE_NOMEM;
  }
  unsigned slot = s->next_slot++ % CACHE_SLOTS;
  sqlite3_finalize(s->cache[slot].stmt);
  free(s->cache[slot].sql);
  s->cache[slot].sql = copy;
  s->cache[slot].stmt = st;
  *out = st;
  return SQLITE_OK;
}

static int bind_all(sqlite3_stmt *st, int n, const kb_db_value *p) {
  if (sqlite3_bind_parameter_count(st) != n) return SQLITE_RANGE;
  for (int i = 0; i < n; i++) {
    int rc;
    switch (p[i].type) {
    case KB_DB_INT: rc = sqlite3_bind_int64(st, i + 1, p[i].i); break;
    case KB_DB_REAL: rc = sqlite3_bind_double(st, i + 1, p[i].d); break;
    case KB_DB_TEXT: rc = sqlite3_bind_text64(st, i + 1, p[i].s, p[i].len, SQLITE_TRANSIENT, SQLITE_UTF8); break;
    default: rc = sqlite3_bind_null(st, i + 1); break;
    }
    if (rc != SQLITE_OK) return rc;
  }
  return SQLITE_OK;
}

/* Steps one statement to its end, handing every row to fn. */
static int step_rows(sq_db *s, sqlite3_stmt *st, kb_db_row_fn fn, void *ud, char *err,
                     size_t errlen) {
  int ncols = sqlite3_column_count(st);
  const char *names[ncols > 0 ? ncols : 1];
  kb_db_value vals[ncols > 0 ? ncols : 1];
  for (int i = 0; i < ncols; i++) names[i] = sqlite3_column_name(st, i);
  for (;;) {
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) return KB_DB_OK;
    if (rc != SQLITE_ROW) return fail(s, rc, "query", err, errlen);
    if (!fn) continue;
    for (int i = 0; i < ncols; i++) {
      kb_db_value *v = &vals[i];
      memset(v, 0, sizeof *v);
      switch (sqlite3_column_type(st, i)) {
      case SQLITE_INTEGER: v->type = KB_DB_INT; v->i = sqlite3_column_int64(st, i); break;
      case SQLITE_FLOAT: v->type = KB_DB_REAL; v->d = sqlite3_column_double(st, i); break;
      case SQLITE_NULL: v->type = KB_DB_NULL; break;
      default: /* text, and blobs as their bytes */
        v->type = KB_DB_TEXT;
        v->s = (const char *)sqlite3_column_text(st, i);
        v->len = (size_t)sqlite3_column_bytes(st, i);
        if (!v->s) { v->s = ""; v->len = 0; }
        break;
      }
    }
    if (fn(ud, ncols, names, vals)) return KB_DB_STOP;
  }
}

static int sq_exec(kb_db *base, const char *sql, int nparams, const kb_db_value *params,
                   kb_db_row_fn fn, void *ud, char *err, size_t errlen) {
  sq_db *s = (sq_db *)base;
  if (nparams > 0) {
    sqlite3_stmt *st;
    int rc = prepare_cached(s, sql, &st);
    if (rc != SQLITE_OK) return fail(s, rc, "prepare", err, errlen);
    rc = bind_all(st, nparams, params);
    if (rc == SQLITE_RANGE) {
      snprintf(err, errlen, "%s: the statement takes %d parameter(s), %d given", s->path,
               sqlite3_bind_parameter_count(st), nparams);
      return KB_DB_ERROR;
    }
    if (rc != SQLITE_OK) return fail(s, rc, "bind", err, errlen);
    int st_rc = step_rows(s, st, fn, ud, err, errlen);
    sqlite3_reset(st);
    return st_rc;
  }
  /* no parameters: every statement of the text in turn */
  const char *tail = sql;
  while (tail && *tail) {
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, tail, -1, &st, &tail);
    if (rc != SQLITE_OK) return fail(s, rc, "prepare", err, errlen);
    if (!st) break; /* only whitespace or a comment left */
    if (sqlite3_bind_parameter_count(st) > 0) {
      sqlite3_finalize(st);
      snprintf(err, errlen, "%s: the statement takes parameters, none given", s->path);
      return KB_DB_ERROR;
    }
    int st_rc = step_rows(s, st, fn, ud, err, errlen);
    sqlite3_finalize(st);
    if (st_rc != KB_DB_OK) return st_rc;
  }
  return KB_DB_OK;
}

static const kb_db_ops sqlite_ops = {"sqlite", sq_exec, sq_close};

/* The journal mode the pragma left the file in: 1 for WAL, 0 for another,
 * or a negative SQLite code. */
static int try_wal(sqlite3 *db) {
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &st, NULL);
  if (rc != SQLITE_OK) return -rc;
  rc = sqlite3_step(st);
  const char *mode = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
  /* an in-memory database has no WAL: "memory" is as good as it gets */
  int wal = mode && (!sqlite3_stricmp(mode, "wal") || !sqlite3_stricmp(mode, "memory"));
  sqlite3_finalize(st);
  return rc == SQLITE_ROW ? wal : -rc;
}

/* WAL mode, waiting for other connections as any statement does. Two
 * kbruns opening a new kbrun.db together (shards of one experiments
 * folder) both hold the file shared and both want it to themselves to
 * switch it: SQLite answers one of them BUSY at once, without the busy
 * handler (it would deadlock). So try again, for up to busy_ms, until the
 * mode is WAL; a file system that cannot do WAL keeps the mode it has, as
 * before. */
static int set_wal(sqlite3 *db, int busy_ms) {
  for (int waited = 0;; waited += 10) {
    int r = try_wal(db);
    if (r == 1) return SQLITE_OK;
    if (r < 0 && -r != SQLITE_BUSY) return -r;
    if (waited >= busy_ms) return r < 0 ? -r : SQLITE_OK;
    sqlite3_sleep(10);
  }
}

int kb_db_sqlite_open(const char *path, const kb_db_options *opts, kb_db **out, char *err,
                      size_t errlen) {
  sq_db *s = calloc(1, sizeof *s);
  if (!s || !(s->path = strdup(path))) {
    free(s);
    snprintf(err, errlen, "%s: out of memory", path);
    return KB_DB_NOMEM;
  }
  s->base.ops = &sqlite_ops;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (opts->create ? SQLITE_OPEN_CREATE : 0);
  int rc = sqlite3_open_v2(path, &s->db, flags, NULL);
  if (rc != SQLITE_OK) {
    int st = fail(s, rc, "cannot open", err, errlen);
    sq_close(&s->base);
    return st;
  }
  sqlite3_extended_result_codes(s->db, 1);
  sqlite3_busy_timeout(s->db, opts->busy_timeout_ms);
  /* Read before writing anything: a file that is not a database fails
   * here with SQLITE_NOTADB and is not touched. */
  rc = sqlite3_exec(s->db, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL);
  if (rc == SQLITE_OK) rc = set_wal(s->db, opts->busy_timeout_ms);
  if (rc == SQLITE_OK) rc = sqlite3_exec(s->db, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL);
  if (rc != SQLITE_OK) {
    int st = status_of(rc);
    snprintf(err, errlen, "%s: %s%s", path, sqlite3_errmsg(s->db),
             st == KB_DB_CORRUPT ? " (the file is left as it is)" : "");
    sq_close(&s->base);
    return st;
  }
  *out = &s->base;
  return KB_DB_OK;
}
