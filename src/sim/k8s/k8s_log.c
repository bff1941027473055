/* Pod logs: one buffer per (namespace, pod, container), kept as the
 * kubelet keeps them: "RFC3339-time text\n" per line, so timestamps=true,
 * tailLines and sinceSeconds can be answered. Dropped with the pod. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb/fnv.h"
#include "k8s_internal.h"

struct k8s_log {
  char *key; /* "ns/pod/container" */
  kb_buf text;
  int partial; /* the last append ended mid-line */
  k8s_log *next;
};

/* The bucket is the pod's ("ns/pod/", the key without its container), so
 * that dropping a pod's logs looks in one bucket, not in every log. */
static size_t pod_hash(const char *key) {
  const char *end = strrchr(key, '/');
  uint32_t h = KB_FNV32_INIT;
  for (const char *c = key; c < end; c++) h = (h ^ (unsigned char)*c) * 16777619u;
  return h;
}

static void make_key(char *out, size_t n, const char *ns, const char *pod, const char *c) {
  snprintf(out, n, "%s/%s/%s", ns, pod, c ? c : "");
}

/* Doubles the table (a pod's log per pod, 110,000 pods: chains stay short). */
static int grow(kb_k8s_store *st) {
  size_t cap = st->cap_logs ? st->cap_logs * 2 : 1024;
  k8s_log **v = calloc(cap, sizeof *v);
  if (!v) return -1;
  for (size_t i = 0; i < st->cap_logs; i++) {
    while (st->logs[i]) {
      k8s_log *l = st->logs[i];
      st->logs[i] = l->next;
      size_t h = pod_hash(l->key) & (cap - 1);
      l->next = v[h];
      v[h] = l;
    }
  }
  free(st->logs);
  st->logs = v;
  st->cap_logs = cap;
  return 0;
}

static k8s_log *find(kb_k8s_store *st, const char *key, int create) {
  if (!st->cap_logs && (!create || grow(st))) return NULL;
  size_t h = pod_hash(key) & (st->cap_logs - 1);
  for (k8s_log *l = st->logs[h]; l; l = l->next)
    if (!strcmp(l->key, key)) return l;
  if (!create) return NULL;
  if (st->n_logs >= st->cap_logs && !grow(st)) h = pod_hash(key) & (st->cap_logs - 1);
  k8s_log *l = calloc(1, sizeof *l);
  if (!l || !(l->key = strdup(key))) {
    free(l);
    return NULL;
  }
  l->next = st->logs[h];
  st->logs[h] = l;
  st->n_logs++;
  return l;
}

static void log_free(k8s_log *l) {
  free(l->key);
  kb_buf_free(&l->text);
  free(l);
}

void kb_k8s_log_free_all(kb_k8s_store *st) {
  for (size_t i = 0; i < st->cap_logs; i++) {
    while (st->logs[i]) {
      k8s_log *l = st->logs[i];
      st->logs[i] = l->next;
      log_free(l);
    }
  }
  free(st->logs);
  st->logs = NULL;
  st->n_logs = st->cap_logs = 0;
}

void kb_k8s_log_drop_pod(kb_k8s_store *st, const char *ns, const char *pod) {
  char prefix[600];
  int n = snprintf(prefix, sizeof prefix, "%s/%s/", ns, pod);
  if (!st->cap_logs || n < 0 || (size_t)n >= sizeof prefix) return;
  k8s_log **pp = &st->logs[pod_hash(prefix) & (st->cap_logs - 1)];
  while (*pp) {
    k8s_log *l = *pp;
    if (!strncmp(l->key, prefix, (size_t)n) && !strchr(l->key + n, '/')) {
      *pp = l->next;
      log_free(l);
      st->n_logs--;
    } else {
      pp = &l->next;
    }
  }
}

void kb_k8s_log_set_listener(kb_k8s_store *st, kb_k8s_log_fn fn, void *ud) {
  st->log_fn = fn;
  st->log_ud = ud;
}

int kb_k8s_log_append(kb_k8s_store *st, const char *ns, const char *pod, const char *container,
                      const char *text, size_t len) {
  char key[600];
  make_key(key, sizeof key, ns, pod, container);
  k8s_log *l = find(st, key, 1);
  if (!l) return -500;
  char ts[32];
  kb_k8s_format_time(kb_k8s_store_now(st), ts);
  for (size_t i = 0; i < len;) {
    const char *nl = memchr(text + i, '\n', len - i);
    size_t end = nl ? (size_t)(nl - text) + 1 : len;
    if (!l->partial && (kb_buf_append(&l->text, ts, strlen(ts)) || kb_buf_putc(&l->text, ' ')))
      return -500;
    if (kb_buf_append(&l->text, text + i, end - i)) return -500;
    l->partial = !nl;
    i = end;
  }
  if (st->log_fn) st->log_fn(st->log_ud, ns, pod, container);
  return 0;
}

size_t kb_k8s_log_size(kb_k8s_store *st, const char *ns, const char *pod, const char *container) {
  char key[600];
  make_key(key, sizeof key, ns, pod, container);
  k8s_log *l = find(st, key, 0);
  return l ? l->text.len : 0;
}

const char *kb_k8s_log_raw(kb_k8s_store *st, const char *ns, const char *pod,
                           const char *container, size_t offset, size_t *len) {
  char key[600];
  make_key(key, sizeof key, ns, pod, container);
  k8s_log *l = find(st, key, 0);
  if (!l || offset >= l->text.len) {
    *len = 0;
    return "";
  }
  *len = l->text.len - offset;
  return l->text.data + offset;
}

/* Checks the pod and picks the container. */
static int pick_container(kb_k8s_store *st, const char *ns, const char *pod, const char *want,
                          const char **out, kb_k8s_error *err) {
  const kb_k8s_res *pods = kb_k8s_store_lookup(st, "", "v1", "pods");
  const cJSON *obj = pods ? kb_k8s_peek(st, pods, ns, pod) : NULL;
  if (!obj) return kb_k8s_error_set(err, 404, "NotFound", "pods \"%s\" not found", pod);
  const cJSON *spec = cJSON_GetObjectItemCaseSensitive(obj, "spec");
  const cJSON *cs = cJSON_GetObjectItemCaseSensitive(spec, "containers");
  const cJSON *ics = cJSON_GetObjectItemCaseSensitive(spec, "initContainers");
  char names[512] = "";
  size_t used = 0;
  const cJSON *lists[2] = {cs, ics};
  for (int k = 0; k < 2; k++) {
    const cJSON *c;
    cJSON_ArrayForEach(c, lists[k]) {
      const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "name"));
      if (!n) continue;
      if (want && !strcmp(want, n)) {
        *out = n;
        return 0;
      }
      if (k == 0 && used < sizeof names)
        used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", used ? " " : "", n);
    }
  }
  if (want)
    return kb_k8s_error_set(err, 400, "BadRequest",
                            "container %s is not valid for pod %s", want, pod);
  if (cJSON_GetArraySize(cs) == 1) {
    *out = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cs->child, "name"));
    return 0;
  }
  return kb_k8s_error_set(err, 400, "BadRequest",
                          "a container name must be specified for pod %s, choose one of: [%s]",
                          pod, names);
}

int kb_k8s_log_read(kb_k8s_store *st, const char *ns, const char *pod,
                    const kb_k8s_log_opts *opts, char **out, size_t *len, kb_k8s_error *err) {
  kb_k8s_log_opts o = {.tail_lines = -1};
  if (opts) o = *opts;
  *out = NULL;
  *len = 0;
  const char *container = NULL;
  int rc = pick_container(st, ns, pod, o.container, &container, err);
  if (rc) return rc;
  size_t n;
  const char *raw = kb_k8s_log_raw(st, ns, pod, container, 0, &n);
  /* start of the tail: walk back tail_lines line starts */
  size_t start = 0;
  if (o.tail_lines >= 0) {
    long lines = 0;
    start = n;
    size_t i = n;
    if (i && raw[i - 1] == '\n') i--;
    while (lines < o.tail_lines && start > 0) {
      while (i > 0 && raw[i - 1] != '\n') i--;
      start = i;
      lines++;
      if (i) i--;
    }
    if (o.tail_lines == 0) start = n;
  }
  double since = o.since_seconds > 0 ? kb_k8s_store_now(st) - o.since_seconds : -1;
  kb_buf b = KB_BUF_INIT;
  for (size_t i = start; i < n;) {
    const char *nl = memchr(raw + i, '\n', n - i);
    size_t end = nl ? (size_t)(nl - raw) + 1 : n;
    const char *sp = memchr(raw + i, ' ', end - i);
    size_t body = sp ? (size_t)(sp - raw) + 1 : i;
    int keep = 1;
    if (since >= 0 && sp) {
      char ts[40];
      size_t tl = (size_t)(sp - (raw + i));
      if (tl < sizeof ts) {
        memcpy(ts, raw + i, tl);
        ts[tl] = '\0';
        keep = kb_k8s_parse_time(ts) >= since - 1;
      }
    }
    if (keep && kb_buf_append(&b, raw + (o.timestamps ? i : body), end - (o.timestamps ? i : body)))
      return kb_buf_free(&b), kb_k8s_error_set(err, 500, "InternalError", "out of memory");
    i = end;
  }
  if (o.limit_bytes > 0 && b.len > (size_t)o.limit_bytes) {
    b.len = (size_t)o.limit_bytes;
    b.data[b.len] = '\0';
  }
  *len = b.len;
  *out = b.data ? kb_buf_detach(&b, NULL) : strdup("");
  return *out ? 0 : kb_k8s_error_set(err, 500, "InternalError", "out of memory");
}
