/* YAML <-> cJSON (libyaml underneath). No Lua here: see src/lua/yaml.c.
 *
 * Parsing builds one cJSON tree per document:
 *
 *  - Plain scalars are typed by the YAML 1.2 core schema, whatever the
 *    stream's %YAML directive says:
 *      null   ~  null  Null  NULL  and the empty scalar
 *      bool   true True TRUE false False FALSE   (not yes/no/on/off)
 *      int    [-+]?[0-9]+   0o[0-7]+   0x[0-9a-fA-F]+
 *      float  [-+]?(.[0-9]+|[0-9]+(.[0-9]*)?)([eE][-+]?[0-9]+)?
 *             [-+]?.inf .Inf .INF   .nan .NaN .NAN
 *    anything else is a string. Quoted and block (| >) scalars are strings.
 *  - Integers that a double cannot hold exactly (beyond +-2^53, including
 *    beyond int64) become cJSON_Raw nodes whose valuestring is the exact
 *    decimal text ("9007199254740993"), so nothing is rounded. cJSON_Print
 *    writes them as JSON numbers; kb_lua_push_cjson turns them into Lua
 *    integers (floats when even int64 cannot hold them).
 *  - Explicit tags: !!str, !!int, !!float, !!bool, !!null convert the scalar
 *    (a value the tag cannot hold is an error); !!map and !!seq must sit on a
 *    mapping / sequence. Any other tag (!!timestamp, !!binary, !Ref, ...)
 *    is dropped and the node kept as written: a scalar stays a string, a
 *    collection stays a collection. The non-specific tag "!" makes a string.
 *  - Anchors and aliases: an alias is a deep copy of its anchored node.
 *    Anchors are scoped to their document; a redefined anchor takes its new
 *    value from that point on; an alias inside its own anchored node is an
 *    error (the tree would be infinite).
 *  - Merge keys (YAML 1.1, as in Kubernetes manifests): a plain `<<` key
 *    whose value is a mapping or a sequence of mappings merges those
 *    mappings' entries into the enclosing one. Keys written in the mapping
 *    win over merged ones, wherever `<<` appears; among several merged
 *    mappings the earlier one wins. A quoted "<<" is an ordinary key.
 *  - Mapping keys must be scalars (cJSON objects have string keys): the key
 *    is the scalar's text as written (`1: a` has key "1"). An alias key must
 *    refer to a string. A key written twice in one mapping is an error.
 *  - Limits (alias bombs, runaway nesting): nodes produced by alias
 *    expansion are counted per document, max_alias_nodes (default 1e6);
 *    nesting deeper than max_depth (default 512) is refused, counting
 *    the depth an alias expands to.
 *
 * Errors: functions return NULL / -1 and fill a kb_yaml_error whose
 * message is the bare problem ("mapping values are not allowed in this
 * context") and whose line/column are 1-based (0 when unknown). */
#ifndef KB_YAML_H
#define KB_YAML_H

#include <stddef.h>
#include <cjson/cJSON.h>

#define KB_YAML_MAX_ALIAS_NODES 1000000
#define KB_YAML_MAX_DEPTH 512

/* Kinds of failure (kb_yaml_error.code). */
enum {
  KB_YAML_ESYNTAX = 1, /* libyaml refused the text (or its encoding) */
  KB_YAML_EINVALID,    /* well-formed but not convertible: duplicate key,
                          bad tagged value, non-scalar key, bad merge,
                          undefined or recursive alias, NUL in a string;
                          for the emitter: a node it cannot write */
  KB_YAML_ELIMIT,      /* max_alias_nodes or max_depth exceeded */
  KB_YAML_EMULTIDOC,   /* a second document where opts.single forbids it */
  KB_YAML_ENOMEM
};

typedef struct kb_yaml_error {
  int code;          /* KB_YAML_E* */
  int line;          /* 1-based; 0 when the problem has no position */
  int column;        /* 1-based */
  char message[256]; /* without the position */
} kb_yaml_error;

typedef struct kb_yaml_opts {
  size_t max_alias_nodes; /* 0: KB_YAML_MAX_ALIAS_NODES */
  int max_depth;          /* 0: KB_YAML_MAX_DEPTH */
  int single;             /* nonzero: a stream of several documents is an error */
} kb_yaml_opts;

/* The first document of the stream, as a new tree the caller frees with
 * cJSON_Delete. The rest of the stream is still checked for errors. An
 * empty stream gives a cJSON null. NULL on error. */
cJSON *kb_yaml_parse(const char *text, size_t len, kb_yaml_error *err);

/* Every document of the stream, as a new cJSON array in *docs_out (empty
 * for an empty stream). Returns 0, or -1 with *docs_out = NULL. */
int kb_yaml_parse_all(const char *text, size_t len, cJSON **docs_out,
                      kb_yaml_error *err);

/* The same with explicit limits; opts may be NULL. */
cJSON *kb_yaml_parse_opts(const char *text, size_t len, const kb_yaml_opts *opts,
                          kb_yaml_error *err);
int kb_yaml_parse_all_opts(const char *text, size_t len, const kb_yaml_opts *opts,
                           cJSON **docs_out, kb_yaml_error *err);

/* YAML text for one document, malloc'd (caller frees), NULL on error.
 * Block style, 2-space indent, object keys sorted (bytewise) so the output
 * is deterministic, no "---". Strings that a YAML 1.2 or 1.1 reader would
 * type as something else ("true", "yes", "123", "1.5", "null", "", "<<",
 * ...) are quoted; strings with line breaks use literal block style `|`.
 * Numbers: integral values within +-2^53 as integers, others in the
 * shortest form that reads back exactly, non-finite as .inf/-.inf/.nan.
 * cJSON_Raw nodes must hold number text and are written as is. Errors
 * (invalid UTF-8, nesting deeper than KB_YAML_MAX_DEPTH, a non-numeric raw
 * node) name the node by its JSON Pointer (/spec/containers/0/name) in the
 * message; line and column are 0. */
char *kb_yaml_emit(const cJSON *doc, kb_yaml_error *err);

/* Every element of the array `docs` as one document, each starting with
 * "---". An empty array gives "". */
char *kb_yaml_emit_all(const cJSON *docs, kb_yaml_error *err);

#endif
