/* kb_db: a results database, SQLite (a file) or PostgreSQL (a server),
 * behind one small interface. No Lua here (src/db links only libsqlite3
 * and libpq); the binding is src/lua/db.c.
 *
 *   kb_db *db;
 *   char err[512];
 *   kb_db_options o = kb_db_defaults();
 *   if (kb_db_open("out/kbrun.db", &o, &db, err, sizeof err) != KB_DB_OK) ...
 *   kb_db_value p[1] = {{.type = KB_DB_TEXT, .s = "taxi", .len = 4}};
 *   kb_db_exec(db, "SELECT id FROM experiments WHERE scenario = ?", 1, p,
 *              on_row, ud, err, sizeof err);
 *   kb_db_close(db);
 *
 * A target is a PostgreSQL URL (postgresql:// or postgres://, handed to
 * libpq as it is: PG* environment variables and ~/.pgpass apply), or else
 * a file name, optionally prefixed sqlite:. SQL uses '?' placeholders on
 * both; the PostgreSQL backend numbers them ($1, $2, ...) outside quoted
 * text. Statements run in autocommit mode unless the caller sends BEGIN.
 *
 * Errors are written to err (snprintf-style) with context: the file or the
 * server's message, never the URL (it may hold a password). */
#ifndef KB_DB_H
#define KB_DB_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  KB_DB_OK = 0,
  KB_DB_ERROR = -1,   /* an SQL or I/O error */
  KB_DB_BUSY = -2,    /* SQLite: locked by another writer after busy_timeout_ms */
  KB_DB_CORRUPT = -3, /* SQLite: not a database, or a damaged one */
  KB_DB_CONNECT = -4, /* PostgreSQL: no connection after connect_attempts */
  KB_DB_NOMEM = -5,
  KB_DB_STOP = -6     /* the row callback asked to stop (not an error to report) */
} kb_db_status;

typedef enum { KB_DB_NULL, KB_DB_INT, KB_DB_REAL, KB_DB_TEXT } kb_db_type;

typedef struct {
  kb_db_type type;
  int64_t i;
  double d;
  const char *s; /* KB_DB_TEXT: not necessarily NUL-terminated */
  size_t len;
} kb_db_value;

typedef struct {
  int busy_timeout_ms;  /* SQLite: how long a locked database is waited for */
  int connect_attempts; /* PostgreSQL: tries before KB_DB_CONNECT */
  int retry_delay_ms;   /* PostgreSQL: first pause between tries (doubles) */
  int connect_timeout_s; /* PostgreSQL: per try (libpq connect_timeout) */
  int create;           /* SQLite: create the file when missing */
} kb_db_options;

typedef struct kb_db kb_db;

/* Called once per result row; names and vals have ncols entries and live
 * until the callback returns. A non-zero return stops the statement
 * (kb_db_exec then returns KB_DB_STOP). */
typedef int (*kb_db_row_fn)(void *ud, int ncols, const char *const *names,
                            const kb_db_value *vals);

kb_db_options kb_db_defaults(void);
/* "sqlite" or "postgresql" for a target string, without opening it. */
const char *kb_db_kind_of(const char *target);
int kb_db_open(const char *target, const kb_db_options *opts, kb_db **out,
               char *err, size_t errlen);
const char *kb_db_kind(const kb_db *db);
/* Runs sql with nparams '?' parameters. Without parameters sql may hold
 * several statements separated by ';' (a migration). */
int kb_db_exec(kb_db *db, const char *sql, int nparams, const kb_db_value *params,
               kb_db_row_fn fn, void *ud, char *err, size_t errlen);
void kb_db_close(kb_db *db);
const char *kb_db_strstatus(int status);

/* sql with every '?' outside quoted text and -- comments numbered $1, $2,
 * ... (PostgreSQL's placeholders), in a malloc'ed string the caller frees
 * (NULL when out of memory); *count is set to how many there were. */
char *kb_db_number_placeholders(const char *sql, int *count);

/* Backends (src/db/sqlite.c, src/db/pg.c): what kb_db_open dispatches to. */
typedef struct kb_db_ops {
  const char *kind;
  int (*exec)(kb_db *db, const char *sql, int nparams, const kb_db_value *params,
              kb_db_row_fn fn, void *ud, char *err, size_t errlen);
  void (*close)(kb_db *db);
} kb_db_ops;

struct kb_db {
  const kb_db_ops *ops;
};

int kb_db_sqlite_open(const char *path, const kb_db_options *opts, kb_db **out,
                      char *err, size_t errlen);
int kb_db_pg_open(const char *url, const kb_db_options *opts, kb_db **out,
                  char *err, size_t errlen);

#endif
