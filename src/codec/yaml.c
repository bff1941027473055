/* YAML text -> cJSON trees, driven by libyaml's event parser.
 *
 * Open collections live on a stack of frames; a finished node is attached
 * to the frame below it. Every node records its subtree size and height so
 * that an alias can be checked against the limits before it is copied. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "kb/fnv.h"
#include "kb/yaml.h"
#include "yaml_scalar.h"

#define TAG_PREFIX "tag:yaml.org,2002:"

/* Keys already present in one mapping, for duplicate detection. Open
 * addressing over pointers to the key strings the cJSON object owns. */
typedef struct keyset {
  const char **slot;
  size_t cap, count;
} keyset;

typedef struct frame {
  cJSON *node;   /* the open object or array; owned until attached */
  int is_map;
  long anchor;   /* index in anchors[] or -1 */
  size_t nodes;  /* subtree size so far, this node included */
  int height;    /* collection levels in the subtree, this one included */
  /* mappings only */
  char *key;     /* pending key awaiting its value (owned), or NULL */
  int key_is_merge;
  yaml_mark_t key_mark;
  keyset keys;
  cJSON **merges; /* merge sources (owned by the graveyard), in order */
  size_t nmerges, capmerges;
} frame;

typedef struct anchor {
  char *name;
  const cJSON *node; /* NULL while its node is still open */
  size_t nodes;
  int height;
} anchor;

typedef struct builder {
  yaml_parser_t parser;
  kb_yaml_error *err;
  size_t max_alias_nodes;
  int max_depth;
  frame *stack;
  int depth, capstack;
  anchor *anchors;
  size_t nanchors, capanchors;
  size_t alias_nodes; /* nodes copied by aliases in this document */
  cJSON *graveyard;   /* detached nodes anchors may still point into */
  cJSON *root;        /* the finished root node of the current document */
} builder;

/* ---- errors --------------------------------------------------------------- */

static int fail_at(builder *b, int code, const yaml_mark_t *mark, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail_at(builder *b, int code, const yaml_mark_t *mark, const char *fmt, ...) {
  va_list ap;
  b->err->code = code;
  va_start(ap, fmt);
  vsnprintf(b->err->message, sizeof b->err->message, fmt, ap);
  va_end(ap);
  b->err->line = mark ? (int)mark->line + 1 : 0;
  b->err->column = mark ? (int)mark->column + 1 : 0;
  return -1;
}

static int fail_oom(builder *b) { return fail_at(b, KB_YAML_ENOMEM, NULL, "out of memory"); }

/* libyaml's reader reports a byte offset only; find its line and column. */
static void offset_to_mark(const char *text, size_t len, size_t offset, yaml_mark_t *m) {
  m->index = offset;
  m->line = 0;
  m->column = 0;
  for (size_t i = 0; i < offset && i < len; i++) {
    if (text[i] == '\n') {
      m->line++;
      m->column = 0;
    } else if (((unsigned char)text[i] & 0xC0) != 0x80) {
      m->column++;
    }
  }
}

static int fail_parser(builder *b, const char *text, size_t len) {
  yaml_parser_t *p = &b->parser;
  const char *problem = p->problem ? p->problem : "invalid YAML";
  switch (p->error) {
  case YAML_MEMORY_ERROR:
    return fail_oom(b);
  case YAML_READER_ERROR: {
    yaml_mark_t m;
    offset_to_mark(text, len, p->problem_offset, &m);
    if (p->problem_value != -1) {
      return fail_at(b, KB_YAML_ESYNTAX, &m, "%s #%X", problem, p->problem_value);
    }
    return fail_at(b, KB_YAML_ESYNTAX, &m, "%s", problem);
  }
  default:
    return fail_at(b, KB_YAML_ESYNTAX, &p->problem_mark, "%s", problem);
  }
}

/* ---- keys ----------------------------------------------------------------- */

static size_t key_hash(const char *s) { return (size_t)kb_fnv64(KB_FNV64_INIT, s); }

static const char **keyset_find(keyset *ks, const char *key) {
  size_t mask = ks->cap - 1;
  for (size_t i = key_hash(key) & mask;; i = (i + 1) & mask) {
    if (!ks->slot[i] || strcmp(ks->slot[i], key) == 0) return &ks->slot[i];
  }
}

static int keyset_has(keyset *ks, const char *key) {
  return ks->cap && *keyset_find(ks, key) != NULL;
}

/* Adds key (owned elsewhere, must outlive the set). 0, or -1 when out of memory. */
static int keyset_add(keyset *ks, const char *key) {
  if ((ks->count + 1) * 2 > ks->cap) {
    keyset grown = {calloc(ks->cap ? ks->cap * 2 : 16, sizeof(char *)),
                    ks->cap ? ks->cap * 2 : 16, 0};
    if (!grown.slot) return -1;
    for (size_t i = 0; i < ks->cap; i++) {
      if (ks->slot[i]) *keyset_find(&grown, ks->slot[i]) = ks->slot[i];
    }
    grown.count = ks->count;
    free(ks->slot);
    *ks = grown;
  }
  *keyset_find(ks, key) = key;
  ks->count++;
  return 0;
}

/* ---- anchors -------------------------------------------------------------- */

static long anchor_define(builder *b, const char *name) {
  if (b->nanchors == b->capanchors) {
    size_t cap = b->capanchors ? b->capanchors * 2 : 8;
    anchor *a = realloc(b->anchors, cap * sizeof *a);
    if (!a) return -1;
    b->anchors = a;
    b->capanchors = cap;
  }
  char *copy = strdup(name);
  if (!copy) return -1;
  b->anchors[b->nanchors] = (anchor){copy, NULL, 0, 0};
  return (long)b->nanchors++;
}

static void anchor_set(builder *b, long i, const cJSON *node, size_t nodes, int height) {
  if (i < 0) return;
  b->anchors[i].node = node;
  b->anchors[i].nodes = nodes;
  b->anchors[i].height = height;
}

/* The latest definition wins: YAML lets a document redefine an anchor. */
static anchor *anchor_find(builder *b, const char *name) {
  for (size_t i = b->nanchors; i-- > 0;) {
    if (strcmp(b->anchors[i].name, name) == 0) return &b->anchors[i];
  }
  return NULL;
}

static void anchors_clear(builder *b) {
  for (size_t i = 0; i < b->nanchors; i++) free(b->anchors[i].name);
  b->nanchors = 0;
}

/* Registers the anchor of an event (if any); -2 when out of memory. */
static long anchor_of(builder *b, const yaml_char_t *name) {
  if (!name) return -1;
  long i = anchor_define(b, (const char *)name);
  return i < 0 ? -2 : i;
}

/* ---- tree statistics ------------------------------------------------------ */

static void tree_stats(const cJSON *n, size_t *nodes, int *height) {
  *nodes = 1;
  *height = 0;
  if (!cJSON_IsObject(n) && !cJSON_IsArray(n)) return;
  for (const cJSON *c = n->child; c; c = c->next) {
    size_t cn;
    int ch;
    tree_stats(c, &cn, &ch);
    *nodes += cn;
    if (ch > *height) *height = ch;
  }
  *height += 1;
}

/* ---- scalars -------------------------------------------------------------- */

static int tag_is(const char *tag, const char *name) {
  return strncmp(tag, TAG_PREFIX, sizeof TAG_PREFIX - 1) == 0 &&
         strcmp(tag + sizeof TAG_PREFIX - 1, name) == 0;
}

/* "!!int" for tag:yaml.org,2002:int, the tag itself otherwise. */
static const char *short_tag(const char *tag, char buf[64]) {
  if (strncmp(tag, TAG_PREFIX, sizeof TAG_PREFIX - 1) != 0) return tag;
  snprintf(buf, 64, "!!%.40s", tag + sizeof TAG_PREFIX - 1);
  return buf;
}

/* The typed node for a scalar event, or NULL with the error set. */
static cJSON *scalar_node(builder *b, const yaml_event_t *ev) {
  const char *s = (const char *)ev->data.scalar.value;
  size_t len = ev->data.scalar.length;
  const char *tag = (const char *)ev->data.scalar.tag;
  int plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
  cJSON *node = NULL;
  int bval;
  char tagbuf[64];

  if (memchr(s, '\0', len)) {
    fail_at(b, KB_YAML_EINVALID, &ev->start_mark, "strings with NUL characters are not supported");
    return NULL;
  }
  kb_yaml_kind kind;
  if (!tag) {
    kind = plain ? kb_yaml_resolve(s, len) : KB_YAML_STR;
  } else if (tag_is(tag, "null")) {
    kind = KB_YAML_NULL;
    if (!kb_yaml_is_null(s, len)) goto bad_value;
  } else if (tag_is(tag, "bool")) {
    kind = KB_YAML_BOOL;
    if (!kb_yaml_is_bool(s, len, &bval)) goto bad_value;
  } else if (tag_is(tag, "int")) {
    kind = KB_YAML_INT;
    if (!kb_yaml_is_int(s, len)) goto bad_value;
  } else if (tag_is(tag, "float")) {
    kind = kb_yaml_is_int(s, len) ? KB_YAML_INT : KB_YAML_FLOAT;
    if (kind == KB_YAML_FLOAT && !kb_yaml_is_float(s, len)) goto bad_value;
  } else if (tag_is(tag, "map") || tag_is(tag, "seq")) {
    fail_at(b, KB_YAML_EINVALID, &ev->start_mark, "%s tag on a scalar", short_tag(tag, tagbuf));
    return NULL;
  } else {
    kind = KB_YAML_STR; /* !!str, "!" and tags we do not know */
  }

  switch (kind) {
  case KB_YAML_NULL:
    node = cJSON_CreateNull();
    break;
  case KB_YAML_BOOL:
    kb_yaml_is_bool(s, len, &bval);
    node = cJSON_CreateBool(bval);
    break;
  case KB_YAML_INT:
    node = kb_yaml_int_node(s, len);
    if (node && tag && tag_is(tag, "float") && cJSON_IsRaw(node)) {
      double v = kb_yaml_float_value(s, len); /* a float wants a double, rounded */
      cJSON_Delete(node);
      node = cJSON_CreateNumber(v);
    }
    break;
  case KB_YAML_FLOAT:
    node = cJSON_CreateNumber(kb_yaml_float_value(s, len));
    break;
  case KB_YAML_STR:
    node = cJSON_CreateString(s);
    break;
  }
  if (!node) fail_oom(b);
  return node;

bad_value:
  fail_at(b, KB_YAML_EINVALID, &ev->start_mark, "invalid %s value \"%.64s\"",
          short_tag(tag, tagbuf), s);
  return NULL;
}

/* ---- frames --------------------------------------------------------------- */

static frame *top(builder *b) { return b->depth ? &b->stack[b->depth - 1] : NULL; }

static void frame_free(frame *f) {
  cJSON_Delete(f->node);
  free(f->key);
  free(f->keys.slot);
  free(f->merges);
}

static int add_merge_source(builder *b, frame *f, cJSON *src, const yaml_mark_t *mark) {
  int ok = cJSON_IsObject(src);
  if (cJSON_IsArray(src)) {
    ok = 1;
    for (cJSON *c = src->child; c; c = c->next) ok = ok && cJSON_IsObject(c);
  }
  if (!ok) {
    cJSON_Delete(src);
    return fail_at(b, KB_YAML_EINVALID, mark,
                   "the value of a merge key (<<) must be a mapping or a sequence of mappings");
  }
  cJSON_AddItemToArray(b->graveyard, src);
  if (f->nmerges == f->capmerges) {
    size_t cap = f->capmerges ? f->capmerges * 2 : 4;
    cJSON **m = realloc(f->merges, cap * sizeof *m);
    if (!m) return fail_oom(b);
    f->merges = m;
    f->capmerges = cap;
  }
  f->merges[f->nmerges++] = src;
  return 0;
}

/* Attaches a finished node (ownership passes) to the open collection, or
 * makes it the document root. */
static int attach(builder *b, cJSON *node, size_t nodes, int height) {
  frame *f = top(b);
  if (!f) {
    b->root = node;
    return 0;
  }
  f->nodes += nodes;
  if (height + 1 > f->height) f->height = height + 1;
  if (!f->is_map) {
    cJSON_AddItemToArray(f->node, node);
    return 0;
  }
  char *key = f->key;
  f->key = NULL;
  if (f->key_is_merge) {
    f->key_is_merge = 0;
    free(key);
    return add_merge_source(b, f, node, &f->key_mark);
  }
  /* The object takes the key string itself: no copy, and the key set can
   * point at it. */
  node->string = key;
  cJSON_AddItemToArray(f->node, node);
  if (keyset_add(&f->keys, key)) return fail_oom(b);
  return 0;
}

/* A scalar or alias in key position: remember its text for the value. */
static int take_key(builder *b, frame *f, const char *key, int is_merge,
                    const yaml_mark_t *mark) {
  if (!is_merge && keyset_has(&f->keys, key)) {
    return fail_at(b, KB_YAML_EINVALID, mark, "duplicate key \"%.100s\" in mapping", key);
  }
  f->key = strdup(key);
  if (!f->key) return fail_oom(b);
  f->key_is_merge = is_merge;
  f->key_mark = *mark;
  return 0;
}

static int expecting_key(builder *b) {
  frame *f = top(b);
  return f && f->is_map && !f->key && !f->key_is_merge;
}

static int open_collection(builder *b, const yaml_event_t *ev, int is_map) {
  const yaml_char_t *anchor_name, *tag;
  if (is_map) {
    anchor_name = ev->data.mapping_start.anchor;
    tag = ev->data.mapping_start.tag;
  } else {
    anchor_name = ev->data.sequence_start.anchor;
    tag = ev->data.sequence_start.tag;
  }
  if (expecting_key(b)) {
    return fail_at(b, KB_YAML_EINVALID, &ev->start_mark,
                   "mapping keys must be scalars (a %s cannot be a key)",
                   is_map ? "mapping" : "sequence");
  }
  if (tag) {
    const char *t = (const char *)tag;
    int wrong = is_map ? tag_is(t, "seq") : tag_is(t, "map");
    wrong = wrong || tag_is(t, "str") || tag_is(t, "int") || tag_is(t, "float") ||
            tag_is(t, "bool") || tag_is(t, "null");
    if (wrong) {
      char tagbuf[64];
      return fail_at(b, KB_YAML_EINVALID, &ev->start_mark, "%s tag on a %s",
                     short_tag(t, tagbuf), is_map ? "mapping" : "sequence");
    }
  }
  if (b->depth >= b->max_depth) {
    return fail_at(b, KB_YAML_ELIMIT, &ev->start_mark, "nesting deeper than %d levels",
                   b->max_depth);
  }
  if (b->depth == b->capstack) {
    int cap = b->capstack ? b->capstack * 2 : 16;
    frame *s = realloc(b->stack, (size_t)cap * sizeof *s);
    if (!s) return fail_oom(b);
    b->stack = s;
    b->capstack = cap;
  }
  frame *f = &b->stack[b->depth];
  memset(f, 0, sizeof *f);
  f->is_map = is_map;
  f->nodes = 1;
  f->height = 1;
  f->node = is_map ? cJSON_CreateObject() : cJSON_CreateArray();
  if (!f->node) return fail_oom(b);
  b->depth++;
  f->anchor = anchor_of(b, anchor_name);
  if (f->anchor == -2) return fail_oom(b);
  return 0;
}

/* Copies the merged mappings' entries the mapping does not have yet. */
static int apply_merges(builder *b, frame *f) {
  for (size_t i = 0; i < f->nmerges; i++) {
    cJSON *src = f->merges[i];
    cJSON *first = cJSON_IsArray(src) ? src->child : src;
    for (cJSON *m = first; m; m = cJSON_IsArray(src) ? m->next : NULL) {
      for (cJSON *c = m->child; c; c = c->next) {
        if (keyset_has(&f->keys, c->string)) continue;
        cJSON *copy = cJSON_Duplicate(c, 1); /* copies the key too */
        if (!copy) return fail_oom(b);
        cJSON_AddItemToArray(f->node, copy);
        if (!copy->string || keyset_add(&f->keys, copy->string)) return fail_oom(b);
        size_t nodes;
        int height;
        tree_stats(copy, &nodes, &height);
        f->nodes += nodes;
        if (height + 1 > f->height) f->height = height + 1;
      }
    }
  }
  return 0;
}

static int close_collection(builder *b) {
  frame *f = top(b);
  if (f->is_map && apply_merges(b, f)) return -1;
  frame done = *f;
  b->depth--;
  free(done.key);
  free(done.keys.slot);
  free(done.merges);
  anchor_set(b, done.anchor, done.node, done.nodes, done.height);
  return attach(b, done.node, done.nodes, done.height);
}

static int on_scalar(builder *b, const yaml_event_t *ev) {
  long a = anchor_of(b, ev->data.scalar.anchor);
  if (a == -2) return fail_oom(b);
  if (expecting_key(b)) {
    const char *text = (const char *)ev->data.scalar.value;
    if (memchr(text, '\0', ev->data.scalar.length)) {
      return fail_at(b, KB_YAML_EINVALID, &ev->start_mark,
                     "keys with NUL characters are not supported");
    }
    int merge = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && !ev->data.scalar.tag &&
                strcmp(text, "<<") == 0;
    if (a >= 0) { /* an anchored key can be aliased later: keep a typed copy */
      cJSON *n = scalar_node(b, ev);
      if (!n) return -1;
      cJSON_AddItemToArray(b->graveyard, n);
      anchor_set(b, a, n, 1, 0);
    }
    return take_key(b, top(b), text, merge, &ev->start_mark);
  }
  cJSON *node = scalar_node(b, ev);
  if (!node) return -1;
  anchor_set(b, a, node, 1, 0);
  return attach(b, node, 1, 0);
}

static int on_alias(builder *b, const yaml_event_t *ev) {
  const char *name = (const char *)ev->data.alias.anchor;
  anchor *a = anchor_find(b, name);
  if (!a) {
    return fail_at(b, KB_YAML_EINVALID, &ev->start_mark, "undefined alias *%.100s", name);
  }
  if (!a->node) {
    return fail_at(b, KB_YAML_EINVALID, &ev->start_mark,
                   "alias *%.100s refers to a node that contains it (recursive alias)",
                   name);
  }
  if (expecting_key(b)) {
    if (!cJSON_IsString(a->node)) {
      return fail_at(b, KB_YAML_EINVALID, &ev->start_mark,
                     "alias *%.100s used as a key must refer to a string", name);
    }
    return take_key(b, top(b), a->node->valuestring, 0, &ev->start_mark);
  }
  if (a->nodes > b->max_alias_nodes - b->alias_nodes) {
    return fail_at(b, KB_YAML_ELIMIT, &ev->start_mark,
                   "aliases expand to more than %zu nodes (alias bomb?)", b->max_alias_nodes);
  }
  if (b->depth + a->height > b->max_depth) {
    return fail_at(b, KB_YAML_ELIMIT, &ev->start_mark,
                   "alias *%.100s nests deeper than %d levels", name, b->max_depth);
  }
  b->alias_nodes += a->nodes;
  cJSON *copy = cJSON_Duplicate(a->node, 1);
  if (!copy) return fail_oom(b);
  cJSON_free(copy->string); /* the anchored node's key, if it had one */
  copy->string = NULL;
  return attach(b, copy, a->nodes, a->height);
}

/* ---- the stream ----------------------------------------------------------- */

static void document_reset(builder *b) {
  anchors_clear(b);
  b->alias_nodes = 0;
  cJSON_Delete(b->graveyard);
  b->graveyard = NULL;
  cJSON_Delete(b->root);
  b->root = NULL;
}

static void builder_free(builder *b) {
  while (b->depth > 0) frame_free(&b->stack[--b->depth]);
  free(b->stack);
  document_reset(b);
  free(b->anchors);
  yaml_parser_delete(&b->parser);
}

/* Parses the stream, appending to docs the first `keep` documents. */
static int parse_stream(const char *text, size_t len, const kb_yaml_opts *opts,
                        size_t keep, cJSON *docs, kb_yaml_error *err) {
  builder b;
  memset(&b, 0, sizeof b);
  b.err = err;
  b.max_alias_nodes = opts && opts->max_alias_nodes ? opts->max_alias_nodes
                                                    : KB_YAML_MAX_ALIAS_NODES;
  b.max_depth = opts && opts->max_depth > 0 ? opts->max_depth : KB_YAML_MAX_DEPTH;
  if (!yaml_parser_initialize(&b.parser)) return fail_oom(&b);
  yaml_parser_set_input_string(&b.parser, (const unsigned char *)text, len);

  size_t ndocs = 0;
  int rc = 0, done = 0;
  while (!done && rc == 0) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&b.parser, &ev)) {
      rc = fail_parser(&b, text, len);
      break;
    }
    switch (ev.type) {
    case YAML_DOCUMENT_START_EVENT:
      if (opts && opts->single && ndocs == 1) {
        rc = fail_at(&b, KB_YAML_EMULTIDOC, &ev.start_mark,
                     "more than one document in the stream");
        break;
      }
      document_reset(&b);
      b.graveyard = cJSON_CreateArray();
      if (!b.graveyard) rc = fail_oom(&b);
      break;
    case YAML_DOCUMENT_END_EVENT:
      if (ndocs++ < keep) {
        cJSON_AddItemToArray(docs, b.root);
        b.root = NULL;
      }
      document_reset(&b);
      break;
    case YAML_MAPPING_START_EVENT:
    case YAML_SEQUENCE_START_EVENT:
      rc = open_collection(&b, &ev, ev.type == YAML_MAPPING_START_EVENT);
      break;
    case YAML_MAPPING_END_EVENT:
    case YAML_SEQUENCE_END_EVENT:
      rc = close_collection(&b);
      break;
    case YAML_SCALAR_EVENT:
      rc = on_scalar(&b, &ev);
      break;
    case YAML_ALIAS_EVENT:
      rc = on_alias(&b, &ev);
      break;
    case YAML_STREAM_END_EVENT:
      done = 1;
      break;
    default:
      break;
    }
    yaml_event_delete(&ev);
  }
  builder_free(&b);
  return rc;
}

static void error_clear(kb_yaml_error *err) {
  err->code = 0;
  err->line = 0;
  err->column = 0;
  err->message[0] = '\0';
}

int kb_yaml_parse_all_opts(const char *text, size_t len, const kb_yaml_opts *opts,
                           cJSON **docs_out, kb_yaml_error *err) {
  kb_yaml_error scratch;
  if (!err) err = &scratch;
  error_clear(err);
  *docs_out = NULL;
  cJSON *docs = cJSON_CreateArray();
  if (!docs) {
    err->code = KB_YAML_ENOMEM;
    snprintf(err->message, sizeof err->message, "out of memory");
    return -1;
  }
  if (parse_stream(text, len, opts, SIZE_MAX, docs, err)) {
    cJSON_Delete(docs);
    return -1;
  }
  *docs_out = docs;
  return 0;
}

cJSON *kb_yaml_parse_opts(const char *text, size_t len, const kb_yaml_opts *opts,
                          kb_yaml_error *err) {
  kb_yaml_error scratch;
  if (!err) err = &scratch;
  error_clear(err);
  cJSON *docs = cJSON_CreateArray();
  if (!docs) {
    err->code = KB_YAML_ENOMEM;
    snprintf(err->message, sizeof err->message, "out of memory");
    return NULL;
  }
  if (parse_stream(text, len, opts, 1, docs, err)) {
    cJSON_Delete(docs);
    return NULL;
  }
  cJSON *doc = docs->child ? cJSON_DetachItemFromArray(docs, 0) : cJSON_CreateNull();
  cJSON_Delete(docs);
  if (!doc) {
    err->code = KB_YAML_ENOMEM;
    snprintf(err->message, sizeof err->message, "out of memory");
  }
  return doc;
}

cJSON *kb_yaml_parse(const char *text, size_t len, kb_yaml_error *err) {
  return kb_yaml_parse_opts(text, len, NULL, err);
}

int kb_yaml_parse_all(const char *text, size_t len, cJSON **docs_out, kb_yaml_error *err) {
  return kb_yaml_parse_all_opts(text, len, NULL, docs_out, err);
}
