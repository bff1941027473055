/* kb.csv.codec: the hot half of kb.csv (lua/kb/csv.lua), a row's cells
 * encoded in C. A storm writes a latencies.csv row per API call; in Lua
 * the cells of one row (each number printed up to four times to find its
 * shortest form, each text searched three times for what needs quotes)
 * cost about a third of the call's own HTTP request (bench/kfp.md).
 *
 *   codec.encode_row(list, n, secrets, null [, eol]) -> line (and eol)
 *   codec.format_number(x) -> text
 *   codec.parse_rows(text [, limit]) -> rows | nil, what, pos [, char]
 *
 * A cell is: a string scrubbed as kb.secrets.scrub does (secrets: its
 * register, kb.secrets.register_list(); everything kbrun writes is
 * scrubbed, docs/security.md), then quoted RFC 4180 style
 * when it holds a comma, a quote, CR or LF or starts or ends with a blank;
 * a number in the shortest form that reads back exactly (integers as they
 * are, floats as kb.json writes them; nan, inf, -inf); nil and `null`
 * (kb.json.null) empty; anything else tostring(). A lone empty cell is
 * written "" so the line is not blank (kb.csv.parse skips blank lines). */
#include <math.h>
#include <string.h>

#include <lauxlib.h>

#include "kb/json.h"
#include "kb/lua_modules.h"
#include "kb/lua_util.h"

/* The text of number idx into buf (KB_JSON_NUMBUF bytes): its length. */
static size_t format_number(lua_State *L, int idx, char *buf) {
  if (lua_isinteger(L, idx)) return kb_json_format_int64(buf, (int64_t)lua_tointeger(L, idx));
  double d = lua_tonumber(L, idx);
  size_t n = kb_json_format_double(buf, d);
  if (n == 0) { /* not finite: JSON has no form for it, a CSV cell does */
    const char *word = d != d ? "nan" : d > 0 ? "inf" : "-inf";
    n = strlen(word);
    memcpy(buf, word, n + 1);
  }
  return n;
}

/* Pushes the text of number idx. */
static void push_number(lua_State *L, int idx) {
  char num[KB_JSON_NUMBUF];
  size_t n = format_number(L, idx, num);
  lua_pushlstring(L, num, n);
}

static int needs_quotes(const char *s, size_t len) {
  if (len == 0) return 0;
  if (s[0] == ' ' || s[0] == '\t' || s[len - 1] == ' ' || s[len - 1] == '\t') return 1;
  for (size_t i = 0; i < len; i++)
    if (s[i] == ',' || s[i] == '"' || s[i] == '\r' || s[i] == '\n') return 1;
  return 0;
}

static void add_quoted(luaL_Buffer *b, const char *s, size_t len) {
  luaL_addchar(b, '"');
  for (size_t i = 0; i < len; i++) {
    if (s[i] == '"') luaL_addchar(b, '"');
    luaL_addchar(b, s[i]);
  }
  luaL_addchar(b, '"');
}

/* Pushes the text of cell v (at idx), scrubbed when it is a string; a
 * number is pushed as it is (encode_row formats it into the line). */
static void push_cell_text(lua_State *L, int idx, int secrets, int null) {
  switch (lua_type(L, idx)) {
  case LUA_TSTRING:
    kb_lua_push_scrubbed(L, idx, secrets);
    break;
  case LUA_TNUMBER:
    lua_pushvalue(L, idx);
    break;
  case LUA_TNIL:
    lua_pushliteral(L, "");
    break;
  default:
    if (lua_rawequal(L, idx, null)) lua_pushliteral(L, "");
    else luaL_tolstring(L, idx, NULL);
    break;
  }
}

static int l_encode_row(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer n = luaL_checkinteger(L, 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  size_t eol_len = 0;
  const char *eol = luaL_optlstring(L, 5, "", &eol_len);
  lua_settop(L, 5); /* 4: kb.json.null (any value); 5: the line ending */
  if (n < 0 || n > 100000) return luaL_argerror(L, 2, "cell count out of range");
  luaL_checkstack(L, (int)n + LUA_MINSTACK, "kb.csv: too many cells");
  /* Every cell's text (a number as it is) first, on the stack: the buffer
   * then only adds. */
  int empty = 1;
  for (lua_Integer i = 1; i <= n; i++) {
    lua_geti(L, 1, i);
    push_cell_text(L, lua_gettop(L), 3, 4);
    lua_remove(L, -2);
    if (lua_type(L, -1) == LUA_TNUMBER || lua_rawlen(L, -1) > 0) empty = 0;
  }
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (lua_Integer i = 1; i <= n; i++) {
    int at = 5 + (int)i;
    if (i > 1) luaL_addchar(&b, ',');
    if (lua_type(L, at) == LUA_TNUMBER) { /* never quoted: digits, '.', '-', e, nan, inf */
      char num[KB_JSON_NUMBUF];
      luaL_addlstring(&b, num, format_number(L, at, num));
      continue;
    }
    size_t len;
    const char *s = lua_tolstring(L, at, &len);
    if (needs_quotes(s, len)) add_quoted(&b, s, len);
    else luaL_addlstring(&b, s, len);
  }
  if (n == 1 && empty) luaL_addlstring(&b, "\"\"", 2);
  luaL_addlstring(&b, eol, eol_len);
  luaL_pushresult(&b);
  return 1;
}

static int l_format_number(lua_State *L) {
  luaL_checktype(L, 1, LUA_TNUMBER);
  push_number(L, 1);
  return 1;
}

/* ---- parsing ------------------------------------------------------------------------ */

/* Pushes the quoted field whose opening quote is at s[*at], its doubled
 * quotes single; *at moves past its closing quote. 0 when it never closes. */
static int push_quoted(lua_State *L, const char *s, size_t n, size_t *at) {
  size_t j = *at + 1;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (;;) {
    const char *q = j < n ? memchr(s + j, '"', n - j) : NULL;
    if (!q) {
      luaL_pushresult(&b);
      lua_pop(L, 1);
      return 0;
    }
    size_t qi = (size_t)(q - s);
    luaL_addlstring(&b, s + j, qi - j);
    if (qi + 1 >= n || s[qi + 1] != '"') {
      *at = qi + 1;
      luaL_pushresult(&b);
      return 1;
    }
    luaL_addchar(&b, '"');
    j = qi + 2;
  }
}

/* Ends the row at stack top: appended to rows (at index 3) unless it is a
 * blank line (one empty unquoted field); a new empty row replaces it. */
static void end_row(lua_State *L, lua_Integer *nrows, lua_Integer *nfields, int *blank) {
  if (*blank && *nfields == 1) lua_pop(L, 1);
  else lua_rawseti(L, 3, ++*nrows);
  lua_newtable(L);
  *nfields = 0;
  *blank = 1;
}

/* RFC 4180 records as lists of strings (what kb.csv.parse documents): CRLF,
 * LF or lone CR end a record; blank lines are skipped; at most `limit`
 * records. On malformed text: nil, "unterminated" and the 1-based position
 * of the opening quote, or nil, "unexpected", the position and the
 * character found after a closing quote (kb.csv names the line). */
static int l_parse_rows(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  lua_Number limit = luaL_optnumber(L, 2, HUGE_VAL);
  lua_settop(L, 2);
  lua_newtable(L); /* 3: the rows */
  lua_newtable(L); /* 4: the row being read */
  lua_Integer nrows = 0, nfields = 0;
  int blank = 1;
  size_t i = 0;
  while (i < n) {
    if (s[i] == '"') {
      size_t open = i;
      if (!push_quoted(L, s, n, &i)) {
        lua_pushnil(L);
        lua_pushliteral(L, "unterminated");
        lua_pushinteger(L, (lua_Integer)open + 1);
        return 3;
      }
      blank = 0;
    } else {
      size_t e = i;
      while (e < n && s[e] != ',' && s[e] != '\r' && s[e] != '\n') e++;
      lua_pushlstring(L, s + i, e - i);
      if (e > i) blank = 0;
      i = e;
    }
    lua_rawseti(L, 4, ++nfields);
    if (i >= n) break;
    char c = s[i];
    if (c == ',') {
      blank = 0;
      if (++i >= n) {
        lua_pushliteral(L, "");
        lua_rawseti(L, 4, ++nfields);
      }
    } else if (c == '\r' || c == '\n') {
      i += (c == '\r' && i + 1 < n && s[i + 1] == '\n') ? 2 : 1;
      end_row(L, &nrows, &nfields, &blank);
      if ((lua_Number)nrows >= limit) break;
    } else {
      lua_pushnil(L);
      lua_pushliteral(L, "unexpected");
      lua_pushinteger(L, (lua_Integer)i + 1);
      lua_pushlstring(L, &c, 1);
      return 4;
    }
  }
  if (nfields > 0 && (lua_Number)nrows < limit) end_row(L, &nrows, &nfields, &blank);
  lua_settop(L, 3);
  return 1;
}

static const luaL_Reg codec_funcs[] = {
  {"encode_row", l_encode_row},
  {"format_number", l_format_number},
  {"parse_rows", l_parse_rows},
  {NULL, NULL},
};

int luaopen_kb_csv_codec(lua_State *L) {
  luaL_newlib(L, codec_funcs);
  return 1;
}
