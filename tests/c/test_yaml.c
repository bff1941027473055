/* Tests of the YAML codec (src/codec/yaml*.c) and the cJSON <-> Lua
 * converter (src/lua/cjson_conv.c). */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <lauxlib.h>
#include <lualib.h>

#include "kb/lua_cjson.h"
#include "kb/lua_util.h"
#include "kb/yaml.h"
#include "kbtest.h"

/* ---- helpers ---------------------------------------------------------------- */

static cJSON *parse(const char *text) {
  kb_yaml_error err;
  cJSON *doc = kb_yaml_parse(text, strlen(text), &err);
  if (!doc) fprintf(stderr, "unexpected error for %s: %s (%d:%d)\n", text, err.message,
                    err.line, err.column);
  return doc;
}

/* The document as compact JSON, for comparisons ("" when it failed). */
static char json_buf[4096];
static const char *as_json(const char *yaml) {
  cJSON *doc = parse(yaml);
  json_buf[0] = '\0';
  if (doc) {
    char *s = cJSON_PrintUnformatted(doc);
    snprintf(json_buf, sizeof json_buf, "%s", s ? s : "");
    free(s);
    cJSON_Delete(doc);
  }
  return json_buf;
}

/* Parses text expecting failure at line:column with exactly msg. */
static void check_error_opts(const char *text, const kb_yaml_opts *opts, int code, int line,
                             int column, const char *msg, int lineno) {
  kb_yaml_error err;
  cJSON *docs = NULL;
  int rc = kb_yaml_parse_all_opts(text, strlen(text), opts, &docs, &err);
  if (rc == 0) {
    fprintf(stderr, "test_yaml.c:%d: parse of %s should have failed\n", lineno, text);
    kb_test_failed_checks++;
    cJSON_Delete(docs);
    return;
  }
  if (err.line != line || err.column != column || strcmp(err.message, msg) != 0 ||
      err.code != code) {
    fprintf(stderr, "test_yaml.c:%d: got [%d] %d:%d \"%s\", want [%d] %d:%d \"%s\"\n", lineno,
            err.code, err.line, err.column, err.message, code, line, column, msg);
    kb_test_failed_checks++;
  }
  KB_CHECK(docs == NULL);
}

#define CHECK_ERROR(text, code, line, col, msg) \
  check_error_opts(text, NULL, code, line, col, msg, __LINE__)
#define CHECK_ERROR_OPTS(text, opts, code, line, col, msg) \
  check_error_opts(text, opts, code, line, col, msg, __LINE__)

/* Follows dot-separated object keys. */
static cJSON *dig(cJSON *node, const char *path) {
  char key[128];
  while (node && *path) {
    size_t n = strcspn(path, ".");
    snprintf(key, sizeof key, "%.*s", (int)n, path);
    node = cJSON_GetObjectItemCaseSensitive(node, key);
    path += n + (path[n] == '.');
  }
  return node;
}

/* ---- core schema ---------------------------------------------------------- */

typedef struct scalar_case {
  const char *text;
  const char *json; /* expected compact JSON of the document */
} scalar_case;

static void test_core_schema_table(void) {
  static const scalar_case cases[] = {
      /* null */
      {"~", "null"},
      {"null", "null"},
      {"Null", "null"},
      {"NULL", "null"},
      {"v:", "{\"v\":null}"},
      {"[~, , null]", "[null,null,null]"}, /* empty flow entries are not allowed: see below */
      {"nULL", "\"nULL\""},
      {"NuLL", "\"NuLL\""},
      /* bool: only the six spellings */
      {"true", "true"},
      {"True", "true"},
      {"TRUE", "true"},
      {"false", "false"},
      {"False", "false"},
      {"FALSE", "false"},
      {"tRUE", "\"tRUE\""},
      {"yes", "\"yes\""},
      {"no", "\"no\""},
      {"on", "\"on\""},
      {"off", "\"off\""},
      {"y", "\"y\""},
      {"N", "\"N\""},
      /* int */
      {"0", "0"},
      {"42", "42"},
      {"-17", "-17"},
      {"+5", "5"},
      {"007", "7"},
      {"0o17", "15"},
      {"0x1F", "31"},
      {"0xff", "255"},
      {"0X1F", "\"0X1F\""},
      {"0o8", "\"0o8\""},
      {"-0x1", "\"-0x1\""},
      {"1_000", "\"1_000\""},
      {"0b101", "\"0b101\""},
      /* float */
      {"1.5", "1.5"},
      {"-2.5e3", "-2500"},
      {".5", "0.5"},
      {"1.", "1"},
      {"1e3", "1000"},
      {"+1.0E+2", "100"},
      {"1e", "\"1e\""},
      {".", "\".\""},
      {"e3", "\"e3\""},
      {"inf", "\"inf\""},
      {"nan", "\"nan\""},
      {"1.2.3", "\"1.2.3\""},
      /* quoted and block scalars are strings */
      {"'true'", "\"true\""},
      {"\"123\"", "\"123\""},
      {"'~'", "\"~\""},
      {"\"\"", "\"\""},
      {"'null'", "\"null\""},
      {"|\n  123\n", "\"123\\n\""},
      {">-\n  1.5\n", "\"1.5\""},
      /* plain scalars that only look special */
      {"a: b", "{\"a\":\"b\"}"},
      {"2001-12-14", "\"2001-12-14\""},
      {"12:30:00", "\"12:30:00\""},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (i == 5) continue; /* "[~, , null]" is a syntax error, checked below */
    const char *got = as_json(cases[i].text);
    if (strcmp(got, cases[i].json) != 0) {
      fprintf(stderr, "core schema: %s -> %s, want %s\n", cases[i].text, got, cases[i].json);
      kb_test_failed_checks++;
    }
  }
  KB_CHECK_STR(as_json("[~, null, '']"), "[null,null,\"\"]");
}

static void test_special_floats(void) {
  static const char *const inf[] = {".inf", ".Inf", ".INF", "+.inf", "-.inf", "-.Inf", "-.INF"};
  for (size_t i = 0; i < sizeof inf / sizeof inf[0]; i++) {
    cJSON *d = parse(inf[i]);
    KB_CHECK(d && cJSON_IsNumber(d) && isinf(d->valuedouble));
    if (d) KB_CHECK((d->valuedouble < 0) == (inf[i][0] == '-'));
    cJSON_Delete(d);
  }
  static const char *const nan[] = {".nan", ".NaN", ".NAN"};
  for (size_t i = 0; i < 3; i++) {
    cJSON *d = parse(nan[i]);
    KB_CHECK(d && cJSON_IsNumber(d) && isnan(d->valuedouble));
    cJSON_Delete(d);
  }
  KB_CHECK_STR(as_json("-.nan"), "\"-.nan\""); /* no signed nan in the core schema */
  KB_CHECK_STR(as_json(".infinity"), "\".infinity\"");
}

static void check_raw(const char *yaml, const char *text) {
  cJSON *d = parse(yaml);
  KB_CHECK(d && cJSON_IsRaw(d));
  if (d && cJSON_IsRaw(d)) KB_CHECK_STR(d->valuestring, text);
  cJSON_Delete(d);
}

static void test_big_integers(void) {
  cJSON *d = parse("9007199254740992"); /* 2^53: still exact as a double */
  KB_CHECK(d && cJSON_IsNumber(d) && d->valuedouble == 9007199254740992.0);
  cJSON_Delete(d);
  d = parse("-9007199254740992");
  KB_CHECK(d && cJSON_IsNumber(d) && d->valuedouble == -9007199254740992.0);
  cJSON_Delete(d);
  check_raw("9007199254740993", "9007199254740993");
  check_raw("-9007199254740993", "-9007199254740993");
  check_raw("+0009007199254740993", "9007199254740993");
  check_raw("9223372036854775807", "9223372036854775807");
  check_raw("-9223372036854775808", "-9223372036854775808");
  check_raw("123456789012345678901234567890", "123456789012345678901234567890");
  check_raw("0x20000000000001", "9007199254740993");
  check_raw("0xFFFFFFFFFFFFFFFF", "18446744073709551615");
  check_raw("0xFFFFFFFFFFFFFFFFFF", "4722366482869645213695");
  check_raw("0o1000000000000000000001", "9223372036854775809");
  /* A raw node prints as a JSON number. */
  KB_CHECK_STR(as_json("[9007199254740993]"), "[9007199254740993]");
}

/* ---- tags ------------------------------------------------------------------ */

static void test_tags(void) {
  KB_CHECK_STR(as_json("!!str 123"), "\"123\"");
  KB_CHECK_STR(as_json("!!str true"), "\"true\"");
  KB_CHECK_STR(as_json("!!int \"42\""), "42");
  KB_CHECK_STR(as_json("!!int 0x10"), "16");
  KB_CHECK_STR(as_json("!!float 3"), "3");
  KB_CHECK_STR(as_json("!!float '2.5'"), "2.5");
  KB_CHECK_STR(as_json("!!bool \"true\""), "true");
  KB_CHECK_STR(as_json("!!bool False"), "false");
  KB_CHECK_STR(as_json("!!null ''"), "null");
  KB_CHECK_STR(as_json("!!null ~"), "null");
  KB_CHECK_STR(as_json("!!map {a: 1}"), "{\"a\":1}");
  KB_CHECK_STR(as_json("!!seq [1]"), "[1]");
  KB_CHECK_STR(as_json("%TAG !e! tag:example.com,2000:\n---\n!e!thing 12"), "\"12\"");
  KB_CHECK_STR(as_json("a: !Ref 12"), "{\"a\":\"12\"}");
  KB_CHECK_STR(as_json("a: !custom true"), "{\"a\":\"true\"}");
  KB_CHECK_STR(as_json("! 12"), "\"12\"");
  KB_CHECK_STR(as_json("!!timestamp 2001-12-14"), "\"2001-12-14\"");
  KB_CHECK_STR(as_json("!!binary aGVsbG8="), "\"aGVsbG8=\"");
  KB_CHECK_STR(as_json("!!set {a: null}"), "{\"a\":null}");
  KB_CHECK_STR(as_json("!Custom [1, 2]"), "[1,2]");
  /* A tagged int beyond 2^53 stays exact; a tagged float rounds. */
  cJSON *d = parse("!!int '9007199254740993'");
  KB_CHECK(d && cJSON_IsRaw(d));
  cJSON_Delete(d);
  d = parse("!!float 9007199254740993");
  KB_CHECK(d && cJSON_IsNumber(d) && d->valuedouble == 9007199254740992.0);
  cJSON_Delete(d);

  CHECK_ERROR("a: !!int abc", KB_YAML_EINVALID, 1, 4, "invalid !!int value \"abc\"");
  CHECK_ERROR("a: !!int 1.5", KB_YAML_EINVALID, 1, 4, "invalid !!int value \"1.5\"");
  CHECK_ERROR("- !!float x", KB_YAML_EINVALID, 1, 3, "invalid !!float value \"x\"");
  CHECK_ERROR("!!bool yes", KB_YAML_EINVALID, 1, 1, "invalid !!bool value \"yes\"");
  CHECK_ERROR("!!null 0", KB_YAML_EINVALID, 1, 1, "invalid !!null value \"0\"");
  CHECK_ERROR("!!map [1]", KB_YAML_EINVALID, 1, 1, "!!map tag on a sequence");
  CHECK_ERROR("x:\n  !!seq {a: 1}", KB_YAML_EINVALID, 2, 3, "!!seq tag on a mapping");
  CHECK_ERROR("!!str {a: 1}", KB_YAML_EINVALID, 1, 1, "!!str tag on a mapping");
  CHECK_ERROR("!!map x", KB_YAML_EINVALID, 1, 1, "!!map tag on a scalar");
}

/* ---- anchors, aliases, merge keys --------------------------------------------- */

static void test_anchors(void) {
  KB_CHECK_STR(as_json("a: &x 1\nb: *x"), "{\"a\":1,\"b\":1}");
  KB_CHECK_STR(as_json("- &s hi\n- *s\n- &s bye\n- *s"), "[\"hi\",\"hi\",\"bye\",\"bye\"]");
  KB_CHECK_STR(as_json("base: &b {x: [1, 2]}\ncopy: *b"),
               "{\"base\":{\"x\":[1,2]},\"copy\":{\"x\":[1,2]}}");
  /* An alias is a copy, not shared structure. */
  cJSON *d = parse("a: &x {k: 1}\nb: *x");
  KB_CHECK(d != NULL);
  if (d) {
    cJSON *a = cJSON_GetObjectItem(d, "a"), *b = cJSON_GetObjectItem(d, "b");
    KB_CHECK(a && b && a != b && a->child != b->child);
    cJSON_Delete(d);
  }
  /* Anchored keys can be aliased as values and as keys. */
  CHECK_ERROR("&k name: 1\nother: *k\n*k : 2", KB_YAML_EINVALID, 3, 1,
              "duplicate key \"name\" in mapping");
  KB_CHECK_STR(as_json("&k name: 1\nother: *k"), "{\"name\":1,\"other\":\"name\"}");
  KB_CHECK_STR(as_json("a: &k key\nm: {*k : 2}"), "{\"a\":\"key\",\"m\":{\"key\":2}}");

  CHECK_ERROR("a: 1\nb: *nope", KB_YAML_EINVALID, 2, 4, "undefined alias *nope");
  CHECK_ERROR("&a [1, *a]", KB_YAML_EINVALID, 1, 8,
              "alias *a refers to a node that contains it (recursive alias)");
  CHECK_ERROR("a: &n 5\nm: {*n : 2}", KB_YAML_EINVALID, 2, 5,
              "alias *n used as a key must refer to a string");
  /* Anchors do not cross documents. */
  CHECK_ERROR("a: &x 1\n---\nb: *x", KB_YAML_EINVALID, 3, 4, "undefined alias *x");
}

static void test_merge_keys(void) {
  const char *k8s =
      "base: &base\n"
      "  image: busybox\n"
      "  imagePullPolicy: IfNotPresent\n"
      "  resources: {limits: {cpu: 1}}\n"
      "train:\n"
      "  <<: *base\n"
      "  image: trainer\n"
      "  name: train\n";
  KB_CHECK_STR(as_json(k8s),
               "{\"base\":{\"image\":\"busybox\",\"imagePullPolicy\":\"IfNotPresent\","
               "\"resources\":{\"limits\":{\"cpu\":1}}},\"train\":{\"image\":\"trainer\","
               "\"name\":\"train\",\"imagePullPolicy\":\"IfNotPresent\","
               "\"resources\":{\"limits\":{\"cpu\":1}}}}");
  /* Explicit keys win wherever << stands; earlier merged maps win. */
  KB_CHECK_STR(as_json("a: &a {x: 1, y: 1}\nb: &b {y: 2, z: 2}\n"
                       "c: {x: 0, <<: [*a, *b]}"),
               "{\"a\":{\"x\":1,\"y\":1},\"b\":{\"y\":2,\"z\":2},"
               "\"c\":{\"x\":0,\"y\":1,\"z\":2}}");
  /* Inline merge source, anchored and reused afterwards. */
  KB_CHECK_STR(as_json("m: {<<: &s {q: 1}, r: 2}\nn: *s"),
               "{\"m\":{\"r\":2,\"q\":1},\"n\":{\"q\":1}}");
  /* A merged mapping that itself merges. */
  KB_CHECK_STR(as_json("a: &a {x: 1}\nb: &b {<<: *a, y: 2}\nc: {<<: *b}"),
               "{\"a\":{\"x\":1},\"b\":{\"y\":2,\"x\":1},\"c\":{\"y\":2,\"x\":1}}");
  /* A quoted "<<" is an ordinary key. */
  KB_CHECK_STR(as_json("\"<<\": {a: 1}"), "{\"<<\":{\"a\":1}}");
  /* Merged keys never count as duplicates. */
  KB_CHECK_STR(as_json("a: &a {x: 1}\nb: {<<: *a, <<: {x: 2, w: 3}}"),
               "{\"a\":{\"x\":1},\"b\":{\"x\":1,\"w\":3}}");

  CHECK_ERROR("a:\n  <<: 3", KB_YAML_EINVALID, 2, 3,
              "the value of a merge key (<<) must be a mapping or a sequence of mappings");
  CHECK_ERROR("a: {<<: [{x: 1}, 2]}", KB_YAML_EINVALID, 1, 5,
              "the value of a merge key (<<) must be a mapping or a sequence of mappings");
}

/* ---- documents ------------------------------------------------------------- */

static void test_multi_document(void) {
  const char *text = "a: 1\n---\n- x\n---\n# only a comment\n...\n---\n\"s\"\n";
  cJSON *docs = NULL;
  kb_yaml_error err;
  KB_CHECK(kb_yaml_parse_all(text, strlen(text), &docs, &err) == 0);
  if (docs) {
    char *s = cJSON_PrintUnformatted(docs);
    KB_CHECK_STR(s, "[{\"a\":1},[\"x\"],null,\"s\"]");
    free(s);
    cJSON_Delete(docs);
  }
  /* kb_yaml_parse gives the first document but still checks the rest. */
  KB_CHECK_STR(as_json(text), "{\"a\":1}");
  const char *bad = "a: 1\n---\nb: [\n";
  KB_CHECK(kb_yaml_parse(bad, strlen(bad), &err) == NULL);
  KB_CHECK(err.code == KB_YAML_ESYNTAX && err.line == 4);

  /* Empty streams. */
  KB_CHECK(kb_yaml_parse_all("", 0, &docs, &err) == 0);
  KB_CHECK(docs && cJSON_IsArray(docs) && cJSON_GetArraySize(docs) == 0);
  cJSON_Delete(docs);
  KB_CHECK(kb_yaml_parse_all("# nothing\n", 10, &docs, &err) == 0);
  KB_CHECK(docs && cJSON_GetArraySize(docs) == 0);
  cJSON_Delete(docs);
  KB_CHECK_STR(as_json(""), "null");
  KB_CHECK(kb_yaml_parse_all("---\n", 4, &docs, &err) == 0);
  KB_CHECK(docs && cJSON_GetArraySize(docs) == 1 && cJSON_IsNull(docs->child));
  cJSON_Delete(docs);

  /* single: a second document is an error at its start. */
  kb_yaml_opts single = {0, 0, 1};
  CHECK_ERROR_OPTS("a: 1\n---\nb: 2\n", &single, KB_YAML_EMULTIDOC, 2, 1,
                   "more than one document in the stream");
  cJSON *one = kb_yaml_parse_opts("--- {a: 1}\n", 11, &single, &err);
  KB_CHECK(one && cJSON_GetObjectItem(one, "a"));
  cJSON_Delete(one);
}

/* ---- errors ---------------------------------------------------------------- */

static void test_syntax_errors(void) {
  CHECK_ERROR("a: b: c", KB_YAML_ESYNTAX, 1, 5, "mapping values are not allowed in this context");
  CHECK_ERROR("image: x\nport: 1\nname: a: b\n", KB_YAML_ESYNTAX, 3, 8,
              "mapping values are not allowed in this context");
  CHECK_ERROR("x:\n  y: 1\n  z: 2\n   w: 3", KB_YAML_ESYNTAX, 4, 5,
              "mapping values are not allowed in this context");
  CHECK_ERROR("a: [1, 2\n", KB_YAML_ESYNTAX, 2, 1, "did not find expected ',' or ']'");
  CHECK_ERROR("a:\n\tb: 1\n", KB_YAML_ESYNTAX, 2, 1,
              "found character that cannot start any token");
  CHECK_ERROR("a: \"abc\n", KB_YAML_ESYNTAX, 2, 1, "found unexpected end of stream");
  CHECK_ERROR("- a\nb: 1\n", KB_YAML_ESYNTAX, 2, 1, "did not find expected '-' indicator");
  CHECK_ERROR("[~, , null]", KB_YAML_ESYNTAX, 1, 5, "did not find expected node content");
  CHECK_ERROR("a: \xff\n", KB_YAML_ESYNTAX, 1, 4, "invalid leading UTF-8 octet #FF");
  CHECK_ERROR("a: &x\n  b: *x\n", KB_YAML_EINVALID, 2, 6,
              "alias *x refers to a node that contains it (recursive alias)");
}

static void test_semantic_errors(void) {
  CHECK_ERROR("a: 1\nb: 2\na: 3\n", KB_YAML_EINVALID, 3, 1, "duplicate key \"a\" in mapping");
  CHECK_ERROR("spec:\n  x: {k: 1, k: 2}\n", KB_YAML_EINVALID, 2, 13,
              "duplicate key \"k\" in mapping");
  CHECK_ERROR("1: a\n'1': b\n", KB_YAML_EINVALID, 2, 1, "duplicate key \"1\" in mapping");
  CHECK_ERROR("? [a]\n: 1\n", KB_YAML_EINVALID, 1, 3,
              "mapping keys must be scalars (a sequence cannot be a key)");
  CHECK_ERROR("{{a: 1}: 2}", KB_YAML_EINVALID, 1, 2,
              "mapping keys must be scalars (a mapping cannot be a key)");
  CHECK_ERROR("a: \"x\\0y\"\n", KB_YAML_EINVALID, 1, 4,
              "strings with NUL characters are not supported");
  /* Many keys: the duplicate check does not get confused by growth. */
  char big[8192];
  size_t n = 0;
  for (int i = 0; i < 300; i++) n += (size_t)snprintf(big + n, sizeof big - n, "k%d: %d\n", i, i);
  snprintf(big + n, sizeof big - n, "k17: again\n");
  CHECK_ERROR(big, KB_YAML_EINVALID, 301, 1, "duplicate key \"k17\" in mapping");
  big[n] = '\0';
  cJSON *d = parse(big);
  KB_CHECK(d && cJSON_GetArraySize(d) == 300 && cJSON_GetObjectItem(d, "k299")->valuedouble == 299);
  cJSON_Delete(d);
}

/* ---- limits -------------------------------------------------------------------- */

static void test_alias_bomb(void) {
  const char *bomb =
      "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
      "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
      "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
      "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
      "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
      "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
      "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n"
      "h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]\n"
      "i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]\n";
  /* f has 1 + 9 * 7381 nodes = 66430; the 16th alias to *f crosses 1e6. */
  CHECK_ERROR(bomb, KB_YAML_ELIMIT, 7, 8,
              "aliases expand to more than 1000000 nodes (alias bomb?)");
  /* The limit counts exactly: 4 aliases of a 3-node list fit in 12. */
  kb_yaml_opts small = {12, 0, 0};
  cJSON *docs = NULL;
  kb_yaml_error err;
  const char *ok = "a: &a [1, 2]\nb: [*a, *a, *a, *a]";
  KB_CHECK(kb_yaml_parse_all_opts(ok, strlen(ok), &small, &docs, &err) == 0);
  cJSON_Delete(docs);
  CHECK_ERROR_OPTS("a: &a [1, 2]\nb: [*a, *a, *a, *a, *a]", &small, KB_YAML_ELIMIT, 2, 21,
                   "aliases expand to more than 12 nodes (alias bomb?)");
  /* Merges of aliases count the same way. */
  CHECK_ERROR_OPTS("a: &a {x: 1, y: 2}\nb: {<<: [*a, *a, *a, *a, *a]}", &small, KB_YAML_ELIMIT,
                   2, 26, "aliases expand to more than 12 nodes (alias bomb?)");
}

static char *nested(int levels, const char *inner) {
  size_t n = strlen(inner);
  char *s = malloc((size_t)levels * 2 + n + 1);
  memset(s, '[', (size_t)levels);
  memcpy(s + levels, inner, n);
  memset(s + levels + n, ']', (size_t)levels);
  s[levels * 2 + n] = '\0';
  return s;
}

static void test_depth_limit(void) {
  char *ok = nested(512, "1");
  cJSON *d = parse(ok);
  KB_CHECK(d != NULL);
  char *text = d ? kb_yaml_emit(d, NULL) : NULL;
  KB_CHECK(text != NULL); /* the emitter takes what the parser gives */
  free(text);
  cJSON_Delete(d);
  free(ok);
  char *deep = nested(513, "1");
  CHECK_ERROR(deep, KB_YAML_ELIMIT, 1, 513, "nesting deeper than 512 levels");
  free(deep);
  char *very = nested(100000, "");
  CHECK_ERROR(very, KB_YAML_ELIMIT, 1, 513, "nesting deeper than 512 levels");
  free(very);
  /* An alias counts with the depth it expands to. */
  kb_yaml_opts shallow = {0, 3, 0};
  CHECK_ERROR_OPTS("a: &a [[1]]\nb: [*a]", &shallow, KB_YAML_ELIMIT, 2, 5,
                   "alias *a nests deeper than 3 levels");
  cJSON *docs = NULL;
  kb_yaml_error err;
  const char *fits = "a: &a [[1]]\nb: *a";
  KB_CHECK(kb_yaml_parse_all_opts(fits, strlen(fits), &shallow, &docs, &err) == 0);
  cJSON_Delete(docs);
}

/* ---- emitter ------------------------------------------------------------------- */

static char *emit_json(const char *json) {
  cJSON *doc = cJSON_Parse(json);
  kb_yaml_error err;
  char *text = kb_yaml_emit(doc, &err);
  if (!text) fprintf(stderr, "emit failed: %s\n", err.message);
  cJSON_Delete(doc);
  return text;
}

static void check_emit(const char *json, const char *yaml, int lineno) {
  char *text = emit_json(json);
  if (!text || strcmp(text, yaml) != 0) {
    fprintf(stderr, "test_yaml.c:%d: emit %s gave\n%s\nwant\n%s\n", lineno, json,
            text ? text : "(null)", yaml);
    kb_test_failed_checks++;
  }
  free(text);
}
#define CHECK_EMIT(json, yaml) check_emit(json, yaml, __LINE__)

static void test_emit_layout(void) {
  CHECK_EMIT("{\"b\":1,\"a\":{\"z\":[1,{\"k\":\"v\"}],\"c\":[]},\"e\":{}}",
             "a:\n"
             "  c: []\n"
             "  z:\n"
             "  - 1\n"
             "  - k: v\n"
             "b: 1\n"
             "e: {}\n");
  CHECK_EMIT("[1,2.5,0.1,-3,1e300,true,false,null]",
             "- 1\n- 2.5\n- 0.1\n- -3\n- 1e+300\n- true\n- false\n- null\n");
  CHECK_EMIT("\"plain text\"", "plain text\n");
  CHECK_EMIT("{\"script\":\"line 1\\nline 2\\n\"}", "script: |\n  line 1\n  line 2\n");
  CHECK_EMIT("{\"s\":\"no newline\\nat end\"}", "s: |-\n  no newline\n  at end\n");
  CHECK_EMIT("{\"u\":\"h\\u00e9llo \\u4e16\\u754c\"}",
             "u: h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c\n");
  /* Long strings are not folded. */
  char json[700], yaml[700];
  char word[601];
  for (int i = 0; i < 600; i++) word[i] = (char)(i % 7 == 6 ? ' ' : 'a' + i % 7);
  word[600] = '\0';
  while (word[599] == ' ') word[599] = 'x';
  snprintf(json, sizeof json, "{\"k\":\"%s\"}", word);
  snprintf(yaml, sizeof yaml, "k: %s\n", word);
  CHECK_EMIT(json, yaml);
}

static void test_emit_quoting(void) {
  static const char *const retyping[] = {
      "true", "True", "FALSE", "null", "Null", "~", "", "123", "-7", "0x1F", "0o17", "1.5",
      ".inf", "-.Inf", ".nan", "1e3", "yes", "No", "on", "OFF", "y", "n", "<<", "=",
      "1_000", "12:30", "2001-12-14", "2.1.0", "0b11",
  };
  for (size_t i = 0; i < sizeof retyping / sizeof retyping[0]; i++) {
    cJSON *s = cJSON_CreateString(retyping[i]);
    char *text = kb_yaml_emit(s, NULL);
    char want[64];
    snprintf(want, sizeof want, "\"%s\"\n", retyping[i]);
    KB_CHECK_STR(text, want);
    free(text);
    cJSON_Delete(s);
  }
  static const char *const awkward[] = {
      " lead", "trail ", "a: b", "a:", "#x", "x #y", "- x", "-", "? x", "[a]", "{a}", "*x",
      "&x", "!x", "|x", ">x", "'q'", "\"d\"", "%x", "@x", "`x", "a,b", "tab\there", "cr\rhere",
      "bell\a", "\xc3\xa9t\xc3\xa9", "multi\nline", "two\n\nbreaks\n\n", "\n", " \nx",
      "trailing space \nx", "x\n ", "a\xe2\x80\xa8" "b",
  };
  for (size_t i = 0; i < sizeof awkward / sizeof awkward[0]; i++) {
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, awkward[i], awkward[i]);
    char *text = kb_yaml_emit(doc, NULL);
    cJSON *back = text ? parse(text) : NULL;
    cJSON *item = back ? cJSON_GetObjectItemCaseSensitive(back, awkward[i]) : NULL;
    if (!item || !cJSON_IsString(item) || strcmp(item->valuestring, awkward[i]) != 0) {
      fprintf(stderr, "round trip of %s failed:\n%s\n", awkward[i], text ? text : "(null)");
      kb_test_failed_checks++;
    }
    free(text);
    cJSON_Delete(back);
    cJSON_Delete(doc);
  }
  CHECK_EMIT("{\"e\":\"true\",\"n\":\"123\",\"s\":\" x\",\"z\":\"\"}",
             "e: \"true\"\n\"n\": \"123\"\ns: ' x'\nz: \"\"\n");
  CHECK_EMIT("{\"<<\":1,\"y\":2}", "\"<<\": 1\n\"y\": 2\n");
}

static void test_emit_numbers(void) {
  double values[] = {0.1, 1.0 / 3, -2.5e-7, 1e21, 123456789.125, 5e-324, 1.7976931348623157e308};
  for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
    cJSON *n = cJSON_CreateNumber(values[i]);
    char *text = kb_yaml_emit(n, NULL);
    cJSON *back = text ? parse(text) : NULL;
    KB_CHECK(back && cJSON_IsNumber(back) && back->valuedouble == values[i]);
    free(text);
    cJSON_Delete(back);
    cJSON_Delete(n);
  }
  cJSON *arr = cJSON_CreateArray();
  cJSON_AddItemToArray(arr, cJSON_CreateNumber(INFINITY));
  cJSON_AddItemToArray(arr, cJSON_CreateNumber(-INFINITY));
  cJSON_AddItemToArray(arr, cJSON_CreateNumber(NAN));
  cJSON_AddItemToArray(arr, cJSON_CreateNumber(9007199254740992.0));
  cJSON_AddItemToArray(arr, cJSON_CreateNumber(-0.0));
  cJSON_AddItemToArray(arr, cJSON_CreateRaw("9007199254740993"));
  cJSON_AddItemToArray(arr, cJSON_CreateRaw("-123456789012345678901234567890"));
  char *text = kb_yaml_emit(arr, NULL);
  KB_CHECK_STR(text, "- .inf\n- -.inf\n- .nan\n- 9007199254740992\n- 0\n- 9007199254740993\n"
                     "- -123456789012345678901234567890\n");
  cJSON *back = text ? parse(text) : NULL;
  KB_CHECK(back && cJSON_IsRaw(cJSON_GetArrayItem(back, 5)) &&
           strcmp(cJSON_GetArrayItem(back, 6)->valuestring,
                  "-123456789012345678901234567890") == 0);
  cJSON_Delete(back);
  free(text);
  cJSON_Delete(arr);
}

static void test_emit_errors(void) {
  kb_yaml_error err;
  cJSON *doc = cJSON_Parse("{\"spec\":{\"containers\":[{\"name\":\"a\"},{\"name\":\"b\"}]}}");
  cJSON *c1 = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "spec"),
                                                     "containers"), 1);
  cJSON_ReplaceItemInObject(c1, "name", cJSON_CreateString("bad \xff byte"));
  KB_CHECK(kb_yaml_emit(doc, &err) == NULL);
  KB_CHECK_STR(err.message, "invalid UTF-8 in string at /spec/containers/1/name");
  KB_CHECK(err.code == KB_YAML_EINVALID && err.line == 0);
  cJSON_Delete(doc);

  doc = cJSON_CreateObject();
  cJSON_AddItemToObject(doc, "a/b~c", cJSON_CreateRaw("{\"x\":1}"));
  KB_CHECK(kb_yaml_emit(doc, &err) == NULL);
  KB_CHECK_STR(err.message, "raw node \"{\"x\":1}\" is not a number at /a~1b~0c");
  cJSON_Delete(doc);

  doc = cJSON_CreateObject();
  cJSON_AddNumberToObject(doc, "k\xc3", 1);
  KB_CHECK(kb_yaml_emit(doc, &err) == NULL);
  KB_CHECK_STR(err.message, "invalid UTF-8 in string at /k\xc3");
  cJSON_Delete(doc);

  /* One level deeper than the parser accepts. */
  cJSON *root = cJSON_CreateArray(), *cur = root;
  for (int i = 0; i < KB_YAML_MAX_DEPTH; i++) {
    cJSON *next = cJSON_CreateArray();
    cJSON_AddItemToArray(cur, next);
    cur = next;
  }
  KB_CHECK(kb_yaml_emit(root, &err) == NULL);
  KB_CHECK(strncmp(err.message, "nesting deeper than 512 levels at /0/0/0/", 41) == 0);
  cJSON_Delete(root);

  doc = cJSON_CreateObject();
  KB_CHECK(kb_yaml_emit_all(doc, &err) == NULL);
  KB_CHECK_STR(err.message, "the documents must be a cJSON array");
  KB_CHECK(err.code == KB_YAML_EINVALID);
  cJSON_Delete(doc);
  KB_CHECK(kb_yaml_emit(NULL, &err) == NULL);
  KB_CHECK_STR(err.message, "no document (NULL)");
}

static void test_emit_all(void) {
  cJSON *docs = cJSON_Parse("[{\"a\":1},[1,2],\"s\",null]");
  char *text = kb_yaml_emit_all(docs, NULL);
  KB_CHECK_STR(text, "---\na: 1\n---\n- 1\n- 2\n--- s\n--- null\n");
  cJSON *back = NULL;
  KB_CHECK(text && kb_yaml_parse_all(text, strlen(text), &back, NULL) == 0);
  KB_CHECK(back && cJSON_Compare(docs, back, 1));
  cJSON_Delete(back);
  free(text);
  cJSON_Delete(docs);
  docs = cJSON_CreateArray();
  text = kb_yaml_emit_all(docs, NULL);
  KB_CHECK_STR(text, "");
  free(text);
  cJSON_Delete(docs);
}

/* ---- round trips ------------------------------------------------------------------ */

static const char k8s_manifest[] =
    "# A training job and its config, as people write them\n"
    "apiVersion: v1\n"
    "kind: ConfigMap\n"
    "metadata:\n"
    "  name: bench-config\n"
    "  labels: {app: kubebench, tier: \"1\"}\n"
    "data:\n"
    "  params.yaml: |\n"
    "    batch_size: 32\n"
    "    model: resnet50\n"
    "  enabled: \"true\"\n"
    "  version: \"2.1.0\"\n"
    "  empty: \"\"\n"
    "---\n"
    "apiVersion: kubeflow.org/v1\n"
    "kind: TFJob\n"
    "metadata:\n"
    "  name: tf-cnn\n"
    "  labels: &labels {app: kubebench, tier: \"1\"}\n"
    "  annotations:\n"
    "    note: 'colons: here, # and hashes'\n"
    "spec:\n"
    "  tfReplicaSpecs:\n"
    "    Worker:\n"
    "      replicas: 2\n"
    "      restartPolicy: OnFailure\n"
    "      template:\n"
    "        metadata: {labels: *labels}\n"
    "        spec:\n"
    "          nodeSelector: {cloud.google.com/gke-nodepool: gpu-pool}\n"
    "          containers:\n"
    "          - &container\n"
    "            name: tensorflow\n"
    "            image: gcr.io/kubeflow/tf-benchmarks:v1\n"
    "            args: [--model=resnet50, --batch_size=32, --num_gpus=1]\n"
    "            env:\n"
    "            - {name: TF_CPP_MIN_LOG_LEVEL, value: \"0\"}\n"
    "            - {name: RATE, value: \"1.5\"}\n"
    "            resources:\n"
    "              limits: {nvidia.com/gpu: 1, cpu: 4, memory: 16Gi}\n"
    "              requests: {cpu: 500m, memory: 1e3}\n"
    "          - <<: *container\n"
    "            name: sidecar\n"
    "            args: []\n"
    "          tolerations: ~\n"
    "          terminationGracePeriodSeconds: 9007199254740993\n";

static void test_k8s_round_trip(void) {
  cJSON *docs = NULL;
  kb_yaml_error err;
  KB_CHECK(kb_yaml_parse_all(k8s_manifest, strlen(k8s_manifest), &docs, &err) == 0);
  if (!docs) return;
  KB_CHECK(cJSON_GetArraySize(docs) == 2);
  cJSON *job = cJSON_GetArrayItem(docs, 1);
  cJSON *spec = dig(job, "spec.tfReplicaSpecs.Worker.template.spec");
  cJSON *containers = cJSON_GetObjectItem(spec, "containers");
  KB_CHECK(cJSON_GetArraySize(containers) == 2);
  cJSON *sidecar = cJSON_GetArrayItem(containers, 1);
  KB_CHECK_STR(cJSON_GetObjectItem(sidecar, "name")->valuestring, "sidecar");
  KB_CHECK_STR(cJSON_GetObjectItem(sidecar, "image")->valuestring,
               "gcr.io/kubeflow/tf-benchmarks:v1");
  KB_CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(sidecar, "args")) == 0);
  KB_CHECK(cJSON_IsNull(cJSON_GetObjectItem(spec, "tolerations")));
  KB_CHECK(cJSON_IsRaw(cJSON_GetObjectItem(spec, "terminationGracePeriodSeconds")));
  KB_CHECK_STR(dig(job, "metadata.labels.tier")->valuestring, "1");

  char *text = kb_yaml_emit_all(docs, &err);
  KB_CHECK(text != NULL);
  cJSON *back = NULL;
  KB_CHECK(text && kb_yaml_parse_all(text, strlen(text), &back, &err) == 0);
  KB_CHECK(back && cJSON_Compare(docs, back, 1));
  /* Emitting again gives the same text: the output is deterministic. */
  char *again = back ? kb_yaml_emit_all(back, &err) : NULL;
  KB_CHECK_STR(again, text);
  KB_CHECK(text && strstr(text, "  enabled: \"true\"\n") && strstr(text, "  version: \"2.1.0\"\n"));
  KB_CHECK(text && strstr(text, "  params.yaml: |\n    batch_size: 32\n    model: resnet50\n"));
  free(again);
  free(text);
  cJSON_Delete(back);
  cJSON_Delete(docs);
}

/* ---- the carried spec corpus (specs/) ------------------------------------------------------ */

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* <repo>/specs: from KBRUN_SOURCE_DIR, else from __FILE__
 * (<repo>/tests/c/test_yaml.c, absolute in CMake builds), else relative to
 * the tests/ working directory ctest uses. */
static void specs_dir(char *buf, size_t n) {
  const char *src = getenv("KBRUN_SOURCE_DIR");
  if (src && *src) {
    snprintf(buf, n, "%s/specs", src);
    if (is_dir(buf)) return;
  }
  snprintf(buf, n, "%s", __FILE__);
  for (int i = 0; i < 3; i++) {
    char *slash = strrchr(buf, '/');
    if (slash) *slash = '\0';
  }
  size_t len = strlen(buf);
  snprintf(buf + len, n - len, "/specs");
  if (buf[0] == '/' && is_dir(buf)) return;
  snprintf(buf, n, "../specs");
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *data = malloc((size_t)size + 1);
  *len = data ? fread(data, 1, (size_t)size, f) : 0;
  if (data) data[*len] = '\0';
  fclose(f);
  return data;
}

static int spec_files_parsed;

/* Every *.yaml file under dir (recursively when deep) parses, and survives
 * an emit -> parse round trip unchanged. */
static void parse_specs_in(const char *dir, int deep) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "cannot open %s\n", dir);
    kb_test_failed_checks++;
    return;
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (stat(path, &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      if (deep) parse_specs_in(path, deep);
      continue;
    }
    size_t n = strlen(e->d_name);
    if (n < 5 || strcmp(e->d_name + n - 5, ".yaml") != 0) continue;
    size_t len;
    char *text = read_file(path, &len);
    cJSON *docs = NULL, *back = NULL;
    kb_yaml_error err;
    if (!text || kb_yaml_parse_all(text, len, &docs, &err) != 0) {
      fprintf(stderr, "%s:%d:%d: %s\n", path, err.line, err.column,
              text ? err.message : "unreadable");
      kb_test_failed_checks++;
    } else {
      KB_CHECK(cJSON_GetArraySize(docs) >= 1);
      char *out = kb_yaml_emit_all(docs, &err);
      if (!out || kb_yaml_parse_all(out, strlen(out), &back, &err) != 0 ||
          !cJSON_Compare(docs, back, 1)) {
        fprintf(stderr, "%s: emit/parse round trip differs\n", path);
        kb_test_failed_checks++;
      }
      free(out);
      spec_files_parsed++;
    }
    cJSON_Delete(back);
    cJSON_Delete(docs);
    free(text);
  }
  closedir(d);
}

static cJSON *load_spec(const char *rel) {
  char dir[900], path[1024];
  specs_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/%s", dir, rel);
  size_t len;
  char *text = read_file(path, &len);
  cJSON *docs = NULL;
  if (text) kb_yaml_parse_all(text, len, &docs, NULL);
  free(text);
  return docs;
}

static void test_spec_corpus(void) {
  char dir[900], sub[1024];
  specs_dir(dir, sizeof dir);
  spec_files_parsed = 0;
  snprintf(sub, sizeof sub, "%s/kfp/pipelines", dir);
  parse_specs_in(sub, 0);
  int kfp = spec_files_parsed;
  snprintf(sub, sizeof sub, "%s/kubebench", dir);
  parse_specs_in(sub, 1);
  KB_CHECK(kfp >= 8);
  KB_CHECK(spec_files_parsed - kfp >= 14);

  /* Spot checks of typing on real files. */
  cJSON *docs = load_spec("kfp/pipelines/v2ir_hello_world.yaml");
  cJSON *ir = docs ? docs->child : NULL;
  KB_CHECK(ir && strcmp(cJSON_GetObjectItem(ir, "schemaVersion")->valuestring, "2.1.0") == 0);
  KB_CHECK(ir && strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(ir, "pipelineInfo"), "name")
                            ->valuestring, "echo") == 0);
  cJSON_Delete(docs);
  docs = load_spec("kfp/pipelines/v2ir_node_selector.yaml");
  KB_CHECK(docs && cJSON_GetArraySize(docs) == 2);
  KB_CHECK(docs && cJSON_GetObjectItem(cJSON_GetArrayItem(docs, 1), "platforms"));
  cJSON_Delete(docs);
  docs = load_spec("kubebench/params/tf-cnn-dummy.yaml");
  cJSON *p = docs ? docs->child : NULL;
  KB_CHECK(p && cJSON_IsNull(cJSON_GetObjectItem(p, "args")));
  KB_CHECK(p && cJSON_GetObjectItem(p, "num_worker")->valuedouble == 1);
  KB_CHECK(p && cJSON_IsTrue(cJSON_GetObjectItem(p, "forward_only")));
  KB_CHECK(p && strcmp(cJSON_GetObjectItem(p, "model")->valuestring, "resnet50") == 0);
  cJSON_Delete(docs);
}

/* ---- cJSON <-> Lua ------------------------------------------------------------------------- */

static lua_State *new_lua(void) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  kb_push_null(L);
  lua_setglobal(L, "null");
  return L;
}

/* Evaluates expr (Lua) and converts it; returns compact JSON or the error. */
static char conv_buf[512];
static const char *lua_to_json(lua_State *L, const char *expr) {
  char chunk[512];
  snprintf(chunk, sizeof chunk, "return %s", expr);
  if (luaL_dostring(L, chunk) != LUA_OK) {
    snprintf(conv_buf, sizeof conv_buf, "lua error: %s", lua_tostring(L, -1));
    lua_pop(L, 1);
    return conv_buf;
  }
  char err[200];
  int top = lua_gettop(L);
  cJSON *node = kb_lua_to_cjson(L, -1, err, sizeof err);
  KB_CHECK(lua_gettop(L) == top); /* the converter leaves the stack as it found it */
  lua_pop(L, 1);
  if (!node) {
    snprintf(conv_buf, sizeof conv_buf, "error: %s", err);
    return conv_buf;
  }
  char *s = cJSON_PrintUnformatted(node);
  snprintf(conv_buf, sizeof conv_buf, "%s", s);
  free(s);
  cJSON_Delete(node);
  return conv_buf;
}

static void test_lua_to_cjson(void) {
  lua_State *L = new_lua();
  luaL_newmetatable(L, "kb.array");
  lua_pop(L, 1);
  KB_CHECK_STR(lua_to_json(L, "{b = 1, a = {1, 2, 'x'}, c = true, d = null}"),
               "{\"a\":[1,2,\"x\"],\"b\":1,\"c\":true,\"d\":null}");
  KB_CHECK_STR(lua_to_json(L, "{}"), "{}");
  KB_CHECK_STR(lua_to_json(L, "setmetatable({}, debug.getregistry()['kb.array'])"), "[]");
  KB_CHECK_STR(lua_to_json(L, "setmetatable({1, 2}, debug.getregistry()['kb.array'])"), "[1,2]");
  KB_CHECK_STR(lua_to_json(L, "nil"), "null");
  /* Integers beyond 2^53 become exact Raw text; cJSON_Print would round them. */
  KB_CHECK(luaL_dostring(L, "return {1.5, 1 << 53, -(1 << 53), math.maxinteger, "
                            "math.mininteger, (1 << 53) + 1, 2.0^60}") == LUA_OK);
  cJSON *nums = kb_lua_to_cjson(L, -1, NULL, 0);
  lua_pop(L, 1);
  KB_CHECK(nums && cJSON_GetArraySize(nums) == 7);
  if (nums) {
    KB_CHECK(cJSON_GetArrayItem(nums, 0)->valuedouble == 1.5);
    KB_CHECK(cJSON_IsNumber(cJSON_GetArrayItem(nums, 1)) &&
             cJSON_GetArrayItem(nums, 1)->valuedouble == 9007199254740992.0);
    KB_CHECK(cJSON_IsNumber(cJSON_GetArrayItem(nums, 2)) &&
             cJSON_GetArrayItem(nums, 2)->valuedouble == -9007199254740992.0);
    KB_CHECK_STR(cJSON_GetArrayItem(nums, 3)->valuestring, "9223372036854775807");
    KB_CHECK_STR(cJSON_GetArrayItem(nums, 4)->valuestring, "-9223372036854775808");
    KB_CHECK_STR(cJSON_GetArrayItem(nums, 5)->valuestring, "9007199254740993");
    KB_CHECK(cJSON_IsRaw(cJSON_GetArrayItem(nums, 5)));
    KB_CHECK(cJSON_IsNumber(cJSON_GetArrayItem(nums, 6)) &&
             cJSON_GetArrayItem(nums, 6)->valuedouble == ldexp(1, 60));
  }
  cJSON_Delete(nums);
  KB_CHECK_STR(lua_to_json(L, "{9007199254740993}"), "[9007199254740993]");
  KB_CHECK_STR(lua_to_json(L, "{[1] = 'a', [2] = 'b'}"), "[\"a\",\"b\"]");
  /* Shared (not cyclic) tables are fine. */
  KB_CHECK_STR(lua_to_json(L, "(function() local s = {1} return {a = s, b = s} end)()"),
               "{\"a\":[1],\"b\":[1]}");

  /* Integer keys that are no 1..n sequence make an object (as in kb.json). */
  KB_CHECK_STR(lua_to_json(L, "{[404] = 'nf', [200] = 'ok'}"), "{\"200\":\"ok\",\"404\":\"nf\"}");
  KB_CHECK_STR(lua_to_json(L, "{[0] = 'z', [1] = 'a'}"), "{\"0\":\"z\",\"1\":\"a\"}");
  luaL_newmetatable(L, "kb.json.object"); /* what kb.json.object() sets */
  lua_pop(L, 1);
  KB_CHECK_STR(lua_to_json(L, "setmetatable({'a', 'b'}, debug.getregistry()['kb.json.object'])"),
               "{\"1\":\"a\",\"2\":\"b\"}");
  /* Holes of a marked array are null. */
  KB_CHECK_STR(lua_to_json(L, "setmetatable({1, nil, 3}, debug.getregistry()['kb.array'])"),
               "[1,null,3]");

  KB_CHECK_STR(lua_to_json(L, "{spec = {args = {'a', print}}}"),
               "error: cannot encode a function at $.spec.args[2]");
  KB_CHECK_STR(lua_to_json(L, "{['a b'] = {x = coroutine.create(print)}}"),
               "error: cannot encode a thread at $[\"a b\"].x");
  KB_CHECK_STR(lua_to_json(L, "print"), "error: cannot encode a function at $");
  KB_CHECK_STR(lua_to_json(L, "{a = {1, 2, x = 3}}"),
               "error: table mixes integer and string keys at $.a.x");
  KB_CHECK_STR(lua_to_json(L, "{a = setmetatable({x = 1}, debug.getregistry()['kb.array'])}"),
               "error: array (kb.json.array) has a key that is not a positive integer at $.a.x");
  KB_CHECK_STR(lua_to_json(L, "setmetatable({[1000] = 1}, debug.getregistry()['kb.array'])"),
               "error: array (kb.json.array) is too sparse: 1 elements, largest index 1000 at $");
  KB_CHECK_STR(lua_to_json(L, "{k = {[true] = 1}}"),
               "error: table key is a boolean, not a string or an integer at $.k[true]");
  KB_CHECK_STR(lua_to_json(L, "{[1.5] = 1}"),
               "error: table key is a float, not a string or an integer at $[1.5]");
  KB_CHECK_STR(lua_to_json(L, "(function() local t = {k = {}} t.k.back = t return t end)()"),
               "error: cycle detected (a table contains itself) at $.k.back");
  KB_CHECK_STR(lua_to_json(L, "{s = 'a\\0b'}"), "error: string contains a NUL byte at $.s");
  KB_CHECK_STR(lua_to_json(L, "{list = {'ok', 'bad \\255'}}"),
               "error: invalid UTF-8 in string (byte 5) at $.list[2]");
  KB_CHECK_STR(lua_to_json(L, "{['a\\0b'] = 1}"),
               "error: table key contains a NUL byte at $[\"a\\x00b\"]");
  KB_CHECK_STR(lua_to_json(L, "{['k\\255'] = 1}"),
               "error: invalid UTF-8 in a key (byte 2) at $[\"k\\xff\"]");
  const char *deep = lua_to_json(L, "(function() local t = {} for i = 1, 600 do t = {t} end "
                                    "return t end)()");
  KB_CHECK_STR(deep, "error: nesting deeper than 512 levels at "
                     "$[1][1][1][1][1][1][1][1][1][1]...[1][1][1][1][1][1][1][1][1][1]");
  lua_close(L);
}

static void test_push_cjson(void) {
  lua_State *L = new_lua();
  const char *yaml = "a: [1, 2.5, ~, true, 'x', 9007199254740993, 99999999999999999999]\n"
                     "b: {}\n"
                     "c: []\n"
                     "d: 1e3\n";
  cJSON *doc = parse(yaml);
  KB_CHECK(doc != NULL);
  if (!doc) return;
  kb_lua_push_cjson(L, doc);
  cJSON_Delete(doc);
  lua_setglobal(L, "doc");
  const char *check =
      "local a = doc.a\n"
      "assert(math.type(a[1]) == 'integer' and a[1] == 1)\n"
      "assert(math.type(a[2]) == 'float' and a[2] == 2.5)\n"
      "assert(a[3] == null and a[4] == true and a[5] == 'x')\n"
      "assert(math.type(a[6]) == 'integer' and a[6] == 9007199254740993)\n"
      "assert(math.type(a[7]) == 'float' and a[7] == 1e20)\n"
      "assert(#a == 7)\n"
      "local mt = debug.getregistry()['kb.array']\n"
      "assert(getmetatable(a) == mt and getmetatable(doc.c) == mt)\n"
      "assert(getmetatable(doc.b) == nil and next(doc.b) == nil)\n"
      "assert(math.type(doc.d) == 'integer' and doc.d == 1000)\n"
      "return true";
  if (luaL_dostring(L, check) != LUA_OK) {
    fprintf(stderr, "push_cjson: %s\n", lua_tostring(L, -1));
    kb_test_failed_checks++;
  }
  /* Raw text that is no number arrives as a string. */
  cJSON *raw = cJSON_CreateRaw("{\"x\":1}");
  kb_lua_push_cjson(L, raw);
  KB_CHECK(lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "{\"x\":1}") == 0);
  cJSON_Delete(raw);
  lua_close(L);
}

int main(void) {
  KB_RUN(test_core_schema_table);
  KB_RUN(test_special_floats);
  KB_RUN(test_big_integers);
  KB_RUN(test_tags);
  KB_RUN(test_anchors);
  KB_RUN(test_merge_keys);
  KB_RUN(test_multi_document);
  KB_RUN(test_syntax_errors);
  KB_RUN(test_semantic_errors);
  KB_RUN(test_alias_bomb);
  KB_RUN(test_depth_limit);
  KB_RUN(test_emit_layout);
  KB_RUN(test_emit_quoting);
  KB_RUN(test_emit_numbers);
  KB_RUN(test_emit_errors);
  KB_RUN(test_emit_all);
  KB_RUN(test_k8s_round_trip);
  KB_RUN(test_spec_corpus);
  KB_RUN(test_lua_to_cjson);
  KB_RUN(test_push_cjson);
  return kb_test_report();
}
