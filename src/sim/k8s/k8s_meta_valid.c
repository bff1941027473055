/* ObjectMeta validation as the apiserver words it (apimachinery's
 * validation.IsDNS1123Subdomain/Label, IsQualifiedName, IsValidLabelValue):
 * the object's name, its label keys and values, its annotation keys and
 * their total size. The first problem is a 422 whose message carries the
 * field, so kubectl prints it (details.causes, k8s_store.c). */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "k8s_internal.h"

#define DNS1123_LABEL_MAX 63
#define DNS1123_SUBDOMAIN_MAX 253
#define QUALIFIED_NAME_MAX 63
#define LABEL_VALUE_MAX 63
#define ANNOTATIONS_MAX (256 * 1024)

static const char LABEL_MSG[] =
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
static const char SUBDOMAIN_MSG[] =
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
static const char NAME_PART_MSG[] =
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used "
    "for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
static const char VALUE_MSG[] =
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

/* [a-z0-9]([-a-z0-9]*[a-z0-9])? over n bytes */
static int dns_label(const char *s, size_t n) {
  if (!n) return 0;
  for (size_t i = 0; i < n; i++)
    if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-')) return 0;
  return s[0] != '-' && s[n - 1] != '-';
}

static int dns_subdomain(const char *s, size_t n) {
  if (!n || n > DNS1123_SUBDOMAIN_MAX) return 0;
  for (size_t start = 0, i = 0; i <= n; i++) {
    if (i < n && s[i] != '.') continue;
    if (!dns_label(s + start, i - start)) return 0;
    start = i + 1;
  }
  return 1;
}

/* ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9] over n bytes (empty allowed: the caller decides) */
static int name_part(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!(isalnum(c) || c == '-' || c == '_' || c == '.')) return 0;
  }
  return !n || (isalnum((unsigned char)s[0]) && isalnum((unsigned char)s[n - 1]));
}

int kb_k8s_valid_name(const kb_k8s_res *res, const char *name, kb_k8s_error *err) {
  size_t n = strlen(name);
  /* namespaces and services are DNS labels, the rest subdomains */
  int label = !res->group[0] && (!strcmp(res->resource, "namespaces") ||
                                 !strcmp(res->resource, "services"));
  const char *why = NULL;
  char buf[64];
  if (label && n > DNS1123_LABEL_MAX) {
    snprintf(buf, sizeof buf, "must be no more than %d characters", DNS1123_LABEL_MAX);
    why = buf;
  } else if (label ? !dns_label(name, n) : !dns_subdomain(name, n)) {
    why = label ? LABEL_MSG : SUBDOMAIN_MSG;
  }
  if (!why) return 0;
  return kb_k8s_error_set(err, 422, "Invalid",
                          "%s \"%.200s\" is invalid: metadata.name: Invalid value: \"%.200s\": %s",
                          res->kind, name, name, why);
}

/* A label or annotation key: [prefix/]name, the prefix a DNS subdomain. */
static const char *key_problem(const char *key, char *buf, size_t cap) {
  const char *slash = strchr(key, '/');
  const char *name = slash ? slash + 1 : key;
  size_t n = strlen(name);
  if (slash) {
    size_t p = (size_t)(slash - key);
    if (!p) return "prefix part must be non-empty";
    if (!dns_subdomain(key, p)) {
      snprintf(buf, cap, "prefix part %s", SUBDOMAIN_MSG);
      return buf;
    }
  }
  if (!n) return "name part must be non-empty";
  if (n > QUALIFIED_NAME_MAX) {
    snprintf(buf, cap, "name part must be no more than %d characters", QUALIFIED_NAME_MAX);
    return buf;
  }
  return name_part(name, n) ? NULL : NAME_PART_MSG;
}

static int meta_invalid(const kb_k8s_res *res, const char *name, const char *field,
                        const char *value, const char *why, kb_k8s_error *err) {
  return kb_k8s_error_set(err, 422, "Invalid",
                          "%s \"%.200s\" is invalid: %s: Invalid value: \"%.200s\": %s", res->kind,
                          name, field, value, why);
}

int kb_k8s_valid_meta(const kb_k8s_res *res, const cJSON *obj, kb_k8s_error *err) {
  const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
  const char *name = kb_k8s_meta_str(obj, "name");
  name = name ? name : "";
  char buf[600];
  const cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(md, "labels")) {
    const char *why = key_problem(c->string, buf, sizeof buf);
    if (why) return meta_invalid(res, name, "metadata.labels", c->string, why, err);
    const char *v = cJSON_GetStringValue(c);
    if (!v) continue; /* a non-string is the decoder's error, not this one */
    size_t n = strlen(v);
    if (n > LABEL_VALUE_MAX) {
      snprintf(buf, sizeof buf, "must be no more than %d characters", LABEL_VALUE_MAX);
      return meta_invalid(res, name, "metadata.labels", v, buf, err);
    }
    if (!name_part(v, n)) return meta_invalid(res, name, "metadata.labels", v, VALUE_MSG, err);
  }
  size_t total = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(md, "annotations")) {
    const char *why = key_problem(c->string, buf, sizeof buf);
    if (why) return meta_invalid(res, name, "metadata.annotations", c->string, why, err);
    const char *v = cJSON_GetStringValue(c);
    total += strlen(c->string) + (v ? strlen(v) : 0);
  }
  if (total > ANNOTATIONS_MAX)
    return kb_k8s_error_set(err, 422, "Invalid",
                            "%s \"%.200s\" is invalid: metadata.annotations: Too long: must have "
                            "at most %d bytes", res->kind, name, ANNOTATIONS_MAX);
  return 0;
}
