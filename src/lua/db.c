/* kb.db: the results database's C core (include/kb/db.h) for Lua.
 *
 *   local db = require "kb.db"
 *   local h = db.open("out/kbrun.db")           -- or "postgresql://..."
 *   h:exec("INSERT INTO t(a, b) VALUES (?, ?)", {1, "x"})
 *   local rows, columns = h:exec("SELECT a, b FROM t WHERE a > ?", {0})
 *   -- rows = { {a = 1, b = "x"}, ... }, columns = {"a", "b"}
 *   h:kind()                                    -- "sqlite" | "postgresql"
 *   h:close()                                   -- also when collected
 *   db.kind_of(target)                          -- without opening
 *
 * open's options: busy_timeout (ms, SQLite), connect_attempts,
 * retry_delay (ms), connect_timeout (s) (PostgreSQL), create (SQLite,
 * default true). Parameters: integers, floats, strings, booleans (1/0);
 * kb.json.null (or a hole below params.n) is NULL. A NULL column is absent
 * from its row. Calls block the loop while they run (a local file or a
 * loopback server: milliseconds; docs/results.md).
 *
 * Errors are kb errors of class "db" with `code` = "busy" | "corrupt" |
 * "connect" | "error" | "nomem" | "closed" and the file's or server's
 * message (never a URL). */
#include <string.h>

#include <lauxlib.h>

#include "kb/db.h"
#include "kb/lua_modules.h"
#include "kb/lua_util.h"

#define DB_MT "kb.db.handle"
#define ERR_LEN 1024

typedef struct {
  kb_db *db;
} ldb;

static ldb *check_db(lua_State *L, int idx) {
  ldb *h = luaL_checkudata(L, idx, DB_MT);
  if (!h->db) kb_error_raise(L, "db", "kb.db: the database handle is closed");
  return h;
}

static int raise_status(lua_State *L, int status, const char *what, const char *msg) {
  kb_error_new(L, "db", "%s: %s", what, msg);
  lua_pushstring(L, status == KB_DB_ERROR ? "error" : kb_db_strstatus(status));
  lua_setfield(L, -2, "code");
  return lua_error(L);
}

static int l_open(lua_State *L) {
  const char *target = luaL_checkstring(L, 1);
  kb_db_options o = kb_db_defaults();
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    o.busy_timeout_ms = (int)kb_opt_integer(L, 2, "busy_timeout", o.busy_timeout_ms);
    o.connect_attempts = (int)kb_opt_integer(L, 2, "connect_attempts", o.connect_attempts);
    o.retry_delay_ms = (int)kb_opt_integer(L, 2, "retry_delay", o.retry_delay_ms);
    o.connect_timeout_s = (int)kb_opt_integer(L, 2, "connect_timeout", o.connect_timeout_s);
    o.create = kb_opt_boolean(L, 2, "create", o.create);
  }
  ldb *h = lua_newuserdatauv(L, sizeof *h, 0);
  h->db = NULL;
  luaL_setmetatable(L, DB_MT);
  char err[ERR_LEN];
  int rc = kb_db_open(target, &o, &h->db, err, sizeof err);
  if (rc != KB_DB_OK) return raise_status(L, rc, "kb.db.open", err);
  return 1;
}

/* Converts params (table at idx) into vals; strings stay anchored by it. */
static int to_values(lua_State *L, int idx, kb_db_value *vals, int n) {
  for (int i = 0; i < n; i++) {
    kb_db_value *v = &vals[i];
    memset(v, 0, sizeof *v);
    int t = lua_geti(L, idx, i + 1);
    if (t == LUA_TNUMBER) {
      if (lua_isinteger(L, -1)) { v->type = KB_DB_INT; v->i = lua_tointeger(L, -1); }
      else { v->type = KB_DB_REAL; v->d = lua_tonumber(L, -1); }
    } else if (t == LUA_TSTRING) {
      v->type = KB_DB_TEXT;
      v->s = lua_tolstring(L, -1, &v->len);
    } else if (t == LUA_TBOOLEAN) {
      v->type = KB_DB_INT;
      v->i = lua_toboolean(L, -1);
    } else if (t != LUA_TNIL && !kb_is_null(L, -1)) {
      return luaL_error(L, "kb.db: parameter %d is a %s (numbers, strings, booleans or "
                        "kb.json.null)", i + 1, luaL_typename(L, -1));
    }
    lua_pop(L, 1);
  }
  return 0;
}

typedef struct {
  lua_State *L;
  int rows;  /* stack index of the rows table */
  int cols;  /* of the column names (filled at the first row) */
  int count;
  int failed; /* building a row raised (out of memory): its error is on the stack */
  int ncols;
  const char *const *names;
  const kb_db_value *vals;
} collect;

/* Builds one row into rows (argument 1) and, the first time, the column
 * names into cols (argument 2); collect is argument 3. Runs under
 * lua_pcall: a Lua error must not unwind through the database library,
 * which is in the middle of a statement. */
static int build_row(lua_State *L) {
  collect *c = lua_touserdata(L, 3);
  if (c->count == 0) {
    for (int i = 0; i < c->ncols; i++) {
      lua_pushstring(L, c->names[i]);
      lua_rawseti(L, 2, i + 1);
    }
  }
  lua_createtable(L, 0, c->ncols);
  for (int i = 0; i < c->ncols; i++) {
    const kb_db_value *v = &c->vals[i];
    switch (v->type) {
    case KB_DB_INT: lua_pushinteger(L, v->i); break;
    case KB_DB_REAL: lua_pushnumber(L, v->d); break;
    case KB_DB_TEXT: lua_pushlstring(L, v->s, v->len); break;
    default: continue;
    }
    lua_setfield(L, -2, c->names[i]);
  }
  lua_rawseti(L, 1, c->count + 1);
  return 0;
}

static int on_row(void *ud, int ncols, const char *const *names, const kb_db_value *vals) {
  collect *c = ud;
  lua_State *L = c->L;
  c->ncols = ncols;
  c->names = names;
  c->vals = vals;
  if (!lua_checkstack(L, 6)) {
    lua_pushliteral(L, "kb.db: out of stack space for a row");
    c->failed = 1;
    return 1;
  }
  lua_pushcfunction(L, build_row);
  lua_pushvalue(L, c->rows);
  lua_pushvalue(L, c->cols);
  lua_pushlightuserdata(L, c);
  if (lua_pcall(L, 3, 0, 0) != LUA_OK) {
    c->failed = 1; /* the error stays on the stack for l_exec */
    return 1;
  }
  c->count++;
  return 0;
}

/* h:exec(sql [, params]) -> rows, columns */
static int l_exec(lua_State *L) {
  ldb *h = check_db(L, 1);
  const char *sql = luaL_checkstring(L, 2);
  int n = 0;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_getfield(L, 3, "n");
    n = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : (int)lua_rawlen(L, 3);
    lua_pop(L, 1);
    if (n < 0 || n > 32766) return luaL_error(L, "kb.db: %d parameters", n);
  }
  kb_db_value *vals = n > 0 ? lua_newuserdatauv(L, sizeof *vals * (size_t)n, 0) : NULL;
  if (n > 0) to_values(L, 3, vals, n);
  lua_newtable(L);
  lua_newtable(L);
  collect c = {L, lua_gettop(L) - 1, lua_gettop(L), 0, 0, 0, NULL, NULL};
  char err[ERR_LEN];
  int rc = kb_db_exec(h->db, sql, n, vals, on_row, &c, err, sizeof err);
  if (c.failed) return lua_error(L); /* the statement is finished; now raise */
  if (rc != KB_DB_OK) return raise_status(L, rc, "kb.db.exec", err);
  kb_mark_array(L, c.rows);
  kb_mark_array(L, c.cols);
  return 2;
}

static int l_kind(lua_State *L) {
  ldb *h = check_db(L, 1);
  lua_pushstring(L, kb_db_kind(h->db));
  return 1;
}

static int l_close(lua_State *L) {
  ldb *h = luaL_checkudata(L, 1, DB_MT);
  kb_db_close(h->db);
  h->db = NULL;
  return 0;
}

static int l_tostring(lua_State *L) {
  ldb *h = luaL_checkudata(L, 1, DB_MT);
  lua_pushfstring(L, "kb.db (%s)", h->db ? kb_db_kind(h->db) : "closed");
  return 1;
}

static int l_kind_of(lua_State *L) {
  lua_pushstring(L, kb_db_kind_of(luaL_checkstring(L, 1)));
  return 1;
}

static const luaL_Reg db_methods[] = {
  {"exec", l_exec}, {"kind", l_kind}, {"close", l_close}, {NULL, NULL}};
static const luaL_Reg db_meta[] = {
  {"__gc", l_close}, {"__close", l_close}, {"__tostring", l_tostring}, {NULL, NULL}};
static const luaL_Reg db_functions[] = {
  {"open", l_open}, {"kind_of", l_kind_of}, {NULL, NULL}};

int luaopen_kb_db(lua_State *L) {
  kb_new_class(L, DB_MT, db_methods, db_meta);
  luaL_newlib(L, db_functions);
  return 1;
}
