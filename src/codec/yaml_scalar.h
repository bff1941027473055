/* YAML 1.2 core schema scalars, shared by the YAML parser (typing plain
 * scalars) and emitter (deciding which strings must be quoted). Private to
 * src/codec. */
#ifndef KB_YAML_SCALAR_H
#define KB_YAML_SCALAR_H

#include <stddef.h>
#include <cjson/cJSON.h>

typedef enum kb_yaml_kind {
  KB_YAML_STR,
  KB_YAML_NULL,
  KB_YAML_BOOL,
  KB_YAML_INT,
  KB_YAML_FLOAT
} kb_yaml_kind;

/* What the core schema makes of the plain scalar s[0..len). */
kb_yaml_kind kb_yaml_resolve(const char *s, size_t len);

int kb_yaml_is_null(const char *s, size_t len);
/* 1 and *out set when s is a core-schema bool, else 0. */
int kb_yaml_is_bool(const char *s, size_t len, int *out);
int kb_yaml_is_int(const char *s, size_t len);
int kb_yaml_is_float(const char *s, size_t len);

/* A cJSON node for the core-schema int s (kb_yaml_is_int must hold): a
 * number when a double holds it exactly, else a Raw node with the exact
 * decimal text. NULL when out of memory. */
cJSON *kb_yaml_int_node(const char *s, size_t len);

/* The value of the core-schema float s (kb_yaml_is_float must hold).
 * s must be NUL-terminated at len. */
double kb_yaml_float_value(const char *s, size_t len);

/* 1 when a YAML 1.1 reader (PyYAML, go-yaml v2, ...) would type the plain
 * scalar s as something other than a string although the core schema
 * says string: yes/no/on/off/y/n, sexagesimal and underscored numbers,
 * timestamps, 0b/legacy-octal ints, "<<" and "=". */
int kb_yaml_retypes_in_yaml11(const char *s, size_t len);

#endif
