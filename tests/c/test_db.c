/* kb_db (src/db/): the SQLite backend's statements, parameters, types and
 * errors; '?' numbering for PostgreSQL; a PostgreSQL server that is not
 * there (the real server: tests/e2e/postgres.sh). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kb/db.h"
#include "kbtest.h"

typedef struct {
  int rows;
  int64_t sum;
  char last[64];
  int stop_after;
} seen;

static int on_row(void *ud, int ncols, const char *const *names, const kb_db_value *vals) {
  seen *s = ud;
  s->rows++;
  for (int i = 0; i < ncols; i++) {
    if (strcmp(names[i], "a") == 0 && vals[i].type == KB_DB_INT) s->sum += vals[i].i;
    if (strcmp(names[i], "b") == 0 && vals[i].type == KB_DB_TEXT)
      snprintf(s->last, sizeof s->last, "%.*s", (int)vals[i].len, vals[i].s);
    if (strcmp(names[i], "b") == 0 && vals[i].type == KB_DB_NULL) snprintf(s->last, sizeof s->last, "NULL");
  }
  return s->stop_after && s->rows >= s->stop_after;
}

static void test_sqlite_statements(void) {
  kb_db *db;
  char err[256];
  kb_db_options o = kb_db_defaults();
  KB_CHECK(kb_db_open(":memory:", &o, &db, err, sizeof err) == KB_DB_OK);
  KB_CHECK_STR(kb_db_kind(db), "sqlite");
  KB_CHECK(kb_db_exec(db, "CREATE TABLE t (a INTEGER, b TEXT, c DOUBLE PRECISION); -- two\n"
                          "CREATE TABLE u (x INTEGER)", 0, NULL, NULL, NULL, err, sizeof err) == KB_DB_OK);
  for (int i = 1; i <= 5; i++) {
    kb_db_value p[3] = {{.type = KB_DB_INT, .i = i}, {.type = KB_DB_TEXT, .s = "row-xyz", .len = 5},
                        {.type = KB_DB_REAL, .d = i / 2.0}};
    if (i == 5) p[1].type = KB_DB_NULL;
    KB_CHECK(kb_db_exec(db, "INSERT INTO t VALUES (?, ?, ?)", 3, p, NULL, NULL, err, sizeof err) == KB_DB_OK);
  }
  seen s = {0};
  KB_CHECK(kb_db_exec(db, "SELECT a, b, c FROM t ORDER BY a", 0, NULL, on_row, &s, err, sizeof err) == KB_DB_OK);
  KB_CHECK(s.rows == 5);
  KB_CHECK(s.sum == 15);
  KB_CHECK_STR(s.last, "NULL");
  /* a cached statement runs again with other parameters */
  memset(&s, 0, sizeof s);
  kb_db_value lim = {.type = KB_DB_INT, .i = 3};
  KB_CHECK(kb_db_exec(db, "SELECT a, b FROM t WHERE a <= ? ORDER BY a", 1, &lim, on_row, &s, err, sizeof err) == KB_DB_OK);
  KB_CHECK(s.rows == 3 && s.sum == 6);
  KB_CHECK_STR(s.last, "row-x");
  lim.i = 1;
  memset(&s, 0, sizeof s);
  KB_CHECK(kb_db_exec(db, "SELECT a, b FROM t WHERE a <= ? ORDER BY a", 1, &lim, on_row, &s, err, sizeof err) == KB_DB_OK);
  KB_CHECK(s.rows == 1 && s.sum == 1);
  /* the callback stops the statement */
  memset(&s, 0, sizeof s);
  s.stop_after = 2;
  KB_CHECK(kb_db_exec(db, "SELECT a FROM t", 0, NULL, on_row, &s, err, sizeof err) == KB_DB_STOP);
  KB_CHECK(s.rows == 2);
  /* errors, with context */
  KB_CHECK(kb_db_exec(db, "SELEC 1", 0, NULL, NULL, NULL, err, sizeof err) == KB_DB_ERROR);
  KB_CHECK_STR(err, ":memory:: prepare: near \"SELEC\": syntax error");
  KB_CHECK(kb_db_exec(db, "INSERT INTO t VALUES (?, ?, ?)", 1, &lim, NULL, NULL, err, sizeof err) == KB_DB_ERROR);
  KB_CHECK_STR(err, ":memory:: the statement takes 3 parameter(s), 1 given");
  KB_CHECK(kb_db_exec(db, "SELECT ?", 0, NULL, NULL, NULL, err, sizeof err) == KB_DB_ERROR);
  KB_CHECK_STR(err, ":memory:: the statement takes parameters, none given");
  KB_CHECK(kb_db_exec(db, "INSERT INTO nope VALUES (1)", 0, NULL, NULL, NULL, err, sizeof err) == KB_DB_ERROR);
  KB_CHECK(strstr(err, "no such table: nope") != NULL);
  /* a constraint failure while stepping */
  KB_CHECK(kb_db_exec(db, "CREATE TABLE k (id TEXT PRIMARY KEY); INSERT INTO k VALUES ('x')", 0, NULL, NULL, NULL,
                      err, sizeof err) == KB_DB_OK);
  KB_CHECK(kb_db_exec(db, "INSERT INTO k VALUES ('x')", 0, NULL, NULL, NULL, err, sizeof err) == KB_DB_ERROR);
  KB_CHECK(strstr(err, "UNIQUE constraint failed: k.id") != NULL);
  /* more distinct statements than the cache holds */
  for (int i = 0; i < 40; i++) {
    char sql[64];
    snprintf(sql, sizeof sql, "SELECT ? + %d AS a", i);
    kb_db_value v = {.type = KB_DB_INT, .i = 1};
    memset(&s, 0, sizeof s);
    KB_CHECK(kb_db_exec(db, sql, 1, &v, on_row, &s, err, sizeof err) == KB_DB_OK);
    KB_CHECK(s.sum == 1 + i);
  }
  kb_db_close(db);
  kb_db_close(NULL);
}

static void test_sqlite_files(void) {
  char dir[] = "/tmp/kb-test-db-XXXXXX";
  KB_CHECK(mkdtemp(dir) != NULL);
  char path[128], err[256];
  kb_db *db;
  kb_db_options o = kb_db_defaults();
  /* a file that is not a database: refused, left as it is */
  snprintf(path, sizeof path, "%s/junk.db", dir);
  FILE *f = fopen(path, "w");
  for (int i = 0; i < 300; i++) fputs("this is not a database\n", f);
  fclose(f);
  KB_CHECK(kb_db_open(path, &o, &db, err, sizeof err) == KB_DB_CORRUPT);
  KB_CHECK(strstr(err, "file is not a database (the file is left as it is)") != NULL);
  KB_CHECK(db == NULL);
  char wal[160];
  snprintf(wal, sizeof wal, "%s-wal", path);
  KB_CHECK(access(wal, F_OK) != 0);
  unlink(path);
  /* create = 0: a missing file is an error, not a new database */
  snprintf(path, sizeof path, "%s/absent.db", dir);
  o.create = 0;
  KB_CHECK(kb_db_open(path, &o, &db, err, sizeof err) == KB_DB_ERROR);
  KB_CHECK(strstr(err, "cannot open") != NULL);
  KB_CHECK(access(path, F_OK) != 0);
  /* sqlite: prefix, WAL mode */
  o.create = 1;
  char target[160];
  snprintf(target, sizeof target, "sqlite:%s/ok.db", dir);
  KB_CHECK(kb_db_open(target, &o, &db, err, sizeof err) == KB_DB_OK);
  KB_CHECK(kb_db_exec(db, "CREATE TABLE t (a INTEGER)", 0, NULL, NULL, NULL, err, sizeof err) == KB_DB_OK);
  kb_db_close(db);
  snprintf(path, sizeof path, "%s/ok.db", dir);
  KB_CHECK(access(path, F_OK) == 0);
  unlink(path);
  /* no such folder */
  snprintf(path, sizeof path, "%s/no/such/x.db", dir);
  KB_CHECK(kb_db_open(path, &o, &db, err, sizeof err) == KB_DB_ERROR);
  KB_CHECK(kb_db_open("", &o, &db, err, sizeof err) == KB_DB_ERROR);
  KB_CHECK_STR(err, "no database named");
  rmdir(dir);
}

/* The first column of the first row, as text (a pragma's answer). */
static int first_text(void *ud, int ncols, const char *const *names, const kb_db_value *vals) {
  (void)names;
  char *out = ud;
  if (ncols > 0 && vals[0].type == KB_DB_TEXT && !*out)
    snprintf(out, 16, "%.*s", (int)vals[0].len, vals[0].s);
  return 0;
}

/* Three kbruns opening one new kbrun.db at the same moment (shards of one
 * experiments folder): each holds the file shared and wants it to itself
 * to switch it to WAL, and SQLite answers all but one BUSY at once,
 * without the busy handler. Every open must succeed, in WAL mode. 40
 * rounds, the processes released together by a pipe. */
static void test_sqlite_opens_together(void) {
  char dir[] = "/tmp/kb-test-db-XXXXXX";
  KB_CHECK(mkdtemp(dir) != NULL);
  int failures = 0;
  for (int round = 0; round < 40; round++) {
    char path[128];
    snprintf(path, sizeof path, "%s/r%d.db", dir, round);
    int go[2];
    KB_CHECK(pipe(go) == 0);
    pid_t kids[3];
    for (int k = 0; k < 3; k++) {
      kids[k] = fork();
      if (kids[k] == 0) {
        close(go[1]);
        char c, err[256], mode[16] = "";
        if (read(go[0], &c, 1) != 0) _exit(9); /* EOF: all released at once */
        kb_db_options o = kb_db_defaults();
        kb_db *db = NULL;
        if (kb_db_open(path, &o, &db, err, sizeof err) != KB_DB_OK) {
          fprintf(stderr, "    round %d: %s\n", round, err);
          _exit(1);
        }
        int rc = kb_db_exec(db, "PRAGMA journal_mode", 0, NULL, first_text, mode, err, sizeof err);
        kb_db_close(db);
        _exit(rc == KB_DB_OK && !strcmp(mode, "wal") ? 0 : 2);
      }
    }
    close(go[0]);
    close(go[1]);
    for (int k = 0; k < 3; k++) {
      int status = 0;
      if (waitpid(kids[k], &status, 0) != kids[k] || !WIFEXITED(status) || WEXITSTATUS(status))
        failures++;
    }
    char side[160];
    snprintf(side, sizeof side, "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", path);
    unlink(side);
    unlink(path);
  }
  KB_CHECK(failures == 0);
  if (failures) fprintf(stderr, "    %d of 120 opens failed or were not WAL\n", failures);
  rmdir(dir);
}

static void test_placeholders(void) {
  int n = -1;
  char *s = kb_db_number_placeholders("SELECT ?, '?', \"a?\" FROM t WHERE x = ? -- why?\nAND y = ?", &n);
  KB_CHECK_STR(s, "SELECT $1, '?', \"a?\" FROM t WHERE x = $2 -- why?\nAND y = $3");
  KB_CHECK(n == 3);
  free(s);
  s = kb_db_number_placeholders("INSERT INTO t VALUES (?, 'it''s ?', ?)", &n);
  KB_CHECK_STR(s, "INSERT INTO t VALUES ($1, 'it''s ?', $2)");
  KB_CHECK(n == 2);
  free(s);
  s = kb_db_number_placeholders("SELECT 1 -- trailing ?", &n);
  KB_CHECK_STR(s, "SELECT 1 -- trailing ?");
  KB_CHECK(n == 0);
  free(s);
  /* many: each grows to $NNNNN */
  char big[4001];
  for (int i = 0; i < 4000; i++) big[i] = '?';
  big[4000] = '\0';
  s = kb_db_number_placeholders(big, &n);
  KB_CHECK(n == 4000);
  KB_CHECK(strstr(s, "$4000") != NULL && strstr(s, "$3999$4000") != NULL);
  free(s);
}

static void test_kinds(void) {
  KB_CHECK_STR(kb_db_kind_of("postgresql://u:p@h/db"), "postgresql");
  KB_CHECK_STR(kb_db_kind_of("postgres://h"), "postgresql");
  KB_CHECK_STR(kb_db_kind_of("out/kbrun.db"), "sqlite");
  KB_CHECK_STR(kb_db_kind_of("sqlite:x.db"), "sqlite");
  KB_CHECK_STR(kb_db_strstatus(KB_DB_BUSY), "busy");
  KB_CHECK_STR(kb_db_strstatus(KB_DB_CORRUPT), "corrupt");
  KB_CHECK_STR(kb_db_strstatus(KB_DB_CONNECT), "connect");
  KB_CHECK_STR(kb_db_strstatus(KB_DB_ERROR), "error");
}

/* A port nothing listens on: the bounded retry, then libpq's message,
 * without the URL's password. */
static void test_pg_unreachable(void) {
  kb_db *db = NULL;
  char err[512];
  kb_db_options o = kb_db_defaults();
  o.connect_attempts = 2;
  o.retry_delay_ms = 10;
  KB_CHECK(kb_db_open("postgresql://kbrun:hunter2-secret@127.0.0.1:1/x", &o, &db, err, sizeof err) == KB_DB_CONNECT);
  KB_CHECK(db == NULL);
  KB_CHECK(strstr(err, "postgresql: no connection after 2 attempts: ") == err);
  KB_CHECK(strstr(err, "Connection refused") != NULL);
  KB_CHECK(strstr(err, "hunter2") == NULL);
  KB_CHECK(strchr(err, '\n') == NULL && strchr(err, '\t') == NULL);
  /* a malformed URL: libpq's own message */
  KB_CHECK(kb_db_open("postgresql://h:notaport/x", &o, &db, err, sizeof err) == KB_DB_CONNECT);
  KB_CHECK(strstr(err, "invalid") != NULL);
}

int main(void) {
  KB_RUN(test_sqlite_statements);
  KB_RUN(test_sqlite_files);
  KB_RUN(test_sqlite_opens_together);
  KB_RUN(test_placeholders);
  KB_RUN(test_kinds);
  KB_RUN(test_pg_unreachable);
  return kb_test_report();
}
