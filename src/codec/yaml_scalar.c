/* YAML 1.2 core schema scalar resolution (see yaml_scalar.h). */
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "yaml_scalar.h"

#define MAX_EXACT 9007199254740992ULL /* 2^53 */

static int is_word(const char *s, size_t len, const char *const *words) {
  for (; *words; words++) {
    if (strlen(*words) == len && memcmp(s, *words, len) == 0) return 1;
  }
  return 0;
}

int kb_yaml_is_null(const char *s, size_t len) {
  static const char *const words[] = {"", "~", "null", "Null", "NULL", NULL};
  return is_word(s, len, words);
}

int kb_yaml_is_bool(const char *s, size_t len, int *out) {
  static const char *const yes[] = {"true", "True", "TRUE", NULL};
  static const char *const no[] = {"false", "False", "FALSE", NULL};
  if (is_word(s, len, yes)) {
    *out = 1;
    return 1;
  }
  if (is_word(s, len, no)) {
    *out = 0;
    return 1;
  }
  return 0;
}

static int digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return 99;
}

/* Splits a core-schema int into sign, base and digits; 0 if it is none. */
static int split_int(const char *s, size_t len, int *neg, int *base, const char **digits,
                     size_t *ndigits) {
  *neg = 0;
  *base = 10;
  if (len > 2 && s[0] == '0' && (s[1] == 'o' || s[1] == 'x')) {
    *base = s[1] == 'o' ? 8 : 16;
    s += 2;
    len -= 2;
  } else if (len > 0 && (s[0] == '-' || s[0] == '+')) {
    *neg = s[0] == '-';
    s++;
    len--;
  }
  if (len == 0) return 0;
  for (size_t i = 0; i < len; i++) {
    if (digit_value(s[i]) >= *base) return 0;
  }
  *digits = s;
  *ndigits = len;
  return 1;
}

int kb_yaml_is_int(const char *s, size_t len) {
  int neg, base;
  const char *d;
  size_t n;
  return split_int(s, len, &neg, &base, &d, &n);
}

static size_t skip_digits(const char *s, size_t i, size_t len) {
  while (i < len && s[i] >= '0' && s[i] <= '9') i++;
  return i;
}

static int is_special_float(const char *s, size_t len) {
  static const char *const inf[] = {".inf", ".Inf", ".INF", NULL};
  static const char *const nan[] = {".nan", ".NaN", ".NAN", NULL};
  if (is_word(s, len, nan)) return 1;
  if (len > 0 && (s[0] == '-' || s[0] == '+')) {
    s++;
    len--;
  }
  return is_word(s, len, inf);
}

int kb_yaml_is_float(const char *s, size_t len) {
  if (is_special_float(s, len)) return 1;
  size_t i = 0;
  if (i < len && (s[i] == '-' || s[i] == '+')) i++;
  size_t int_start = i;
  i = skip_digits(s, i, len);
  int int_digits = i > int_start;
  if (i < len && s[i] == '.') {
    size_t frac_start = ++i;
    i = skip_digits(s, i, len);
    if (!int_digits && i == frac_start) return 0; /* "." alone */
  } else if (!int_digits) {
    return 0;
  }
  if (i < len && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    if (i < len && (s[i] == '-' || s[i] == '+')) i++;
    size_t exp_start = i;
    i = skip_digits(s, i, len);
    if (i == exp_start) return 0;
  }
  return i == len;
}

kb_yaml_kind kb_yaml_resolve(const char *s, size_t len) {
  int b;
  if (kb_yaml_is_null(s, len)) return KB_YAML_NULL;
  if (kb_yaml_is_bool(s, len, &b)) return KB_YAML_BOOL;
  if (kb_yaml_is_int(s, len)) return KB_YAML_INT;
  if (kb_yaml_is_float(s, len)) return KB_YAML_FLOAT;
  return KB_YAML_STR;
}

/* Decimal text of the unsigned number digits[0..n) in `base`, into a new
 * string with `neg` giving a leading '-'. Schoolbook conversion through
 * base-1e9 limbs: only reached for integers beyond 64 bits. */
static char *big_to_decimal(const char *digits, size_t n, int base, int neg) {
  size_t cap = n / 2 + 2, used = 1;
  uint32_t *limb = calloc(cap, sizeof *limb);
  if (!limb) return NULL;
  for (size_t i = 0; i < n; i++) {
    uint64_t carry = (uint64_t)digit_value(digits[i]);
    for (size_t k = 0; k < used; k++) {
      uint64_t v = (uint64_t)limb[k] * (uint64_t)base + carry;
      limb[k] = (uint32_t)(v % 1000000000u);
      carry = v / 1000000000u;
    }
    if (carry) limb[used++] = (uint32_t)carry; /* carry < 1e9 since base <= 16 */
  }
  char *out = malloc(used * 9 + 2);
  if (out) {
    char *p = out;
    if (neg) *p++ = '-';
    p += sprintf(p, "%u", (unsigned)limb[used - 1]);
    for (size_t k = used - 1; k-- > 0;) p += sprintf(p, "%09u", (unsigned)limb[k]);
  }
  free(limb);
  return out;
}

cJSON *kb_yaml_int_node(const char *s, size_t len) {
  int neg, base;
  const char *d;
  size_t n;
  if (!split_int(s, len, &neg, &base, &d, &n)) return NULL;
  while (n > 1 && d[0] == '0') {
    d++;
    n--;
  }
  uint64_t mag = 0;
  int overflow = 0;
  for (size_t i = 0; i < n && !overflow; i++) {
    uint64_t digit = (uint64_t)digit_value(d[i]);
    if (mag > (UINT64_MAX - digit) / (uint64_t)base) overflow = 1;
    else mag = mag * (uint64_t)base + digit;
  }
  if (!overflow && mag <= MAX_EXACT) {
    double v = (double)mag;
    return cJSON_CreateNumber(neg ? -v : v);
  }
  /* A double would round it: keep the exact decimal text. */
  char *text;
  if (!overflow) {
    text = malloc(24);
    if (text) snprintf(text, 24, "%s%llu", neg ? "-" : "", (unsigned long long)mag);
  } else {
    text = big_to_decimal(d, n, base, neg);
  }
  if (!text) return NULL;
  cJSON *node = cJSON_CreateRaw(text);
  free(text);
  return node;
}

double kb_yaml_float_value(const char *s, size_t len) {
  if (is_special_float(s, len)) {
    if (s[len - 1] == 'n' || s[len - 1] == 'N') return NAN;
    return s[0] == '-' ? -INFINITY : INFINITY;
  }
  /* strtod follows LC_NUMERIC; YAML always writes '.'. */
  char point = localeconv()->decimal_point[0];
  if (point == '.' || !memchr(s, '.', len)) return strtod(s, NULL);
  char *copy = malloc(len + 1);
  if (!copy) return NAN;
  memcpy(copy, s, len + 1);
  *strchr(copy, '.') = point;
  double v = strtod(copy, NULL);
  free(copy);
  return v;
}

static int numeric_like(const char *s, size_t len) {
  size_t i = 0;
  if (i < len && (s[i] == '-' || s[i] == '+')) i++;
  if (i < len && s[i] == '.') i++;
  if (i >= len || s[i] < '0' || s[i] > '9') return 0;
  for (; i < len; i++) {
    char c = s[i];
    int ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
             c == '_' || c == '.' || c == ':' || c == '+' || c == '-' || c == ' ';
    if (!ok) return 0;
  }
  return 1;
}

int kb_yaml_retypes_in_yaml11(const char *s, size_t len) {
  static const char *const words[] = {
      "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
      "on", "On", "ON", "off", "Off", "OFF", "<<", "=", NULL};
  return is_word(s, len, words) || numeric_like(s, len);
}
