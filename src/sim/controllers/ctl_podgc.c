/* Pod garbage collection of terminated pods, as kube-controller-manager's
 * PodGC does with --terminated-pod-gc-threshold: once more pods than the
 * threshold are Succeeded or Failed, the oldest of them (by
 * creationTimestamp, then namespace/name) are deleted until the threshold
 * is met, so a long run of pods does not grow the store without bound.
 * Threshold 0 turns it off (kube-controller-manager's <= 0); the default is
 * its 12500; pods that end while it is off are not counted when it is turned
 * on. Unlike PodGC (every 20 s) it acts on the pod event that crosses
 * the threshold, so the store never holds more. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_ctl.h"
#include "k8s_internal.h"

typedef struct gc_pod {
  double created;
  char *ns, *name;
  uint64_t uid; /* hash of the uid */
} gc_pod;

typedef struct ctl_podgc {
  k8s_ctl base;
  kb_k8s_store *st;
  const kb_k8s_res *pods;
  kb_k8s_watch *w;
  size_t threshold;
  /* the terminated pods: a min-heap by age (entries of pods deleted
   * meanwhile are dropped when they come up), and the set of their uids */
  gc_pod *heap;
  size_t n_heap, cap_heap;
  uint64_t *set; /* open addressing; 0 empty, 1 removed */
  size_t cap_set, n_set, used_set;
  int collecting;
  uint64_t collected;
} ctl_podgc;

static uint64_t uid_hash(const char *uid) {
  uint64_t h = 1469598103934665603ull;
  for (; *uid; uid++) h = (h ^ (unsigned char)*uid) * 1099511628211ull;
  return h < 2 ? h + 2 : h;
}

/* ---- the uid set ---- */

static size_t set_slot(const ctl_podgc *c, uint64_t h, int *found) {
  size_t mask = c->cap_set - 1, i = (size_t)h & mask, tomb = SIZE_MAX;
  for (;; i = (i + 1) & mask) {
    if (c->set[i] == h) {
      *found = 1;
      return i;
    }
    if (c->set[i] == 1 && tomb == SIZE_MAX) tomb = i;
    if (c->set[i] == 0) {
      *found = 0;
      return tomb != SIZE_MAX ? tomb : i;
    }
  }
}

static int set_grow(ctl_podgc *c) {
  size_t cap = c->cap_set ? c->cap_set * 2 : 1024;
  uint64_t *old = c->set, *v = calloc(cap, sizeof *v);
  if (!v) return -1;
  size_t old_cap = c->cap_set;
  c->set = v;
  c->cap_set = cap;
  c->used_set = c->n_set;
  for (size_t i = 0; i < old_cap; i++)
    if (old[i] > 1) {
      int found;
      c->set[set_slot(c, old[i], &found)] = old[i];
    }
  free(old);
  return 0;
}

/* 1 if added, 0 if there already, -1 out of memory. */
static int set_add(ctl_podgc *c, uint64_t h) {
  if ((c->used_set + 1) * 2 > c->cap_set && set_grow(c)) return -1;
  int found;
  size_t i = set_slot(c, h, &found);
  if (found) return 0;
  if (c->set[i] == 0) c->used_set++;
  c->set[i] = h;
  c->n_set++;
  return 1;
}

static int set_has(const ctl_podgc *c, uint64_t h) {
  int found = 0;
  if (c->cap_set) set_slot(c, h, &found);
  return found;
}

static void set_del(ctl_podgc *c, uint64_t h) {
  int found = 0;
  size_t i = c->cap_set ? set_slot(c, h, &found) : 0;
  if (!found) return;
  c->set[i] = 1;
  c->n_set--;
}

/* ---- the heap ---- */

static int older(const gc_pod *a, const gc_pod *b) {
  if (a->created != b->created) return a->created < b->created;
  int k = strcmp(a->ns, b->ns);
  return k ? k < 0 : strcmp(a->name, b->name) < 0;
}

static void heap_swap(gc_pod *v, size_t i, size_t j) {
  gc_pod t = v[i];
  v[i] = v[j];
  v[j] = t;
}

static int heap_push(ctl_podgc *c, gc_pod p) {
  if (c->n_heap == c->cap_heap) {
    size_t cap = c->cap_heap ? c->cap_heap * 2 : 1024;
    gc_pod *v = realloc(c->heap, cap * sizeof *v);
    if (!v) return -1;
    c->heap = v;
    c->cap_heap = cap;
  }
  size_t i = c->n_heap++;
  c->heap[i] = p;
  while (i && older(&c->heap[i], &c->heap[(i - 1) / 2])) {
    heap_swap(c->heap, i, (i - 1) / 2);
    i = (i - 1) / 2;
  }
  return 0;
}

static gc_pod heap_pop(ctl_podgc *c) {
  gc_pod top = c->heap[0];
  c->heap[0] = c->heap[--c->n_heap];
  for (size_t i = 0;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < c->n_heap && older(&c->heap[l], &c->heap[m])) m = l;
    if (r < c->n_heap && older(&c->heap[r], &c->heap[m])) m = r;
    if (m == i) break;
    heap_swap(c->heap, i, m);
    i = m;
  }
  return top;
}

/* ---- the controller ---- */

static int terminated(const cJSON *pod) {
  const char *phase = kb_k8s_path_str(pod, "status.phase");
  return phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed"));
}

static void collect(ctl_podgc *c) {
  if (c->collecting) return; /* our own deletes come back as events */
  c->collecting = 1;
  while (c->threshold && c->n_set > c->threshold && c->n_heap) {
    gc_pod p = heap_pop(c);
    if (set_has(c, p.uid)) {
      const cJSON *cur = kb_k8s_peek(c->st, c->pods, p.ns, p.name);
      const char *uid = cur ? kb_k8s_meta_str(cur, "uid") : NULL;
      if (uid && uid_hash(uid) == p.uid && terminated(cur)) {
        char *u = strdup(uid);
        kb_k8s_delete_opts o = {KB_K8S_PROPAGATE_BACKGROUND, u, NULL, 0};
        if (u && kb_k8s_delete(c->st, c->pods, p.ns, p.name, &o, NULL, NULL) >= 0) c->collected++;
        free(u);
      }
      set_del(c, p.uid); /* deleted, or no longer the pod we knew */
    }
    free(p.ns);
    free(p.name);
  }
  c->collecting = 0;
}

static void on_pod(void *ud, kb_k8s_event_type type, const cJSON *pod) {
  ctl_podgc *c = ud;
  const char *uid = kb_k8s_meta_str(pod, "uid");
  if (!uid) return;
  uint64_t h = uid_hash(uid);
  if (type == KB_K8S_DELETED || (type == KB_K8S_MODIFIED && !terminated(pod))) {
    set_del(c, h);
    return;
  }
  if (!c->threshold || (type != KB_K8S_ADDED && type != KB_K8S_MODIFIED) || !terminated(pod) ||
      set_has(c, h))
    return; /* off: nothing is tracked either */
  const char *ts = kb_k8s_meta_str(pod, "creationTimestamp");
  gc_pod p = {ts ? kb_k8s_parse_time(ts) : 0, strdup(kb_k8s_meta_str(pod, "namespace") ?: ""),
              strdup(kb_k8s_meta_str(pod, "name") ?: ""), h};
  if (!p.ns || !p.name || heap_push(c, p)) { /* out of memory: this one is not collected */
    free(p.ns);
    free(p.name);
    return;
  }
  if (set_add(c, h) < 0) return; /* the same: its heap entry is dropped when it comes up */
  collect(c);
}

static void podgc_free(k8s_ctl *base) {
  ctl_podgc *c = (ctl_podgc *)base;
  kb_k8s_watch_cancel(c->w);
  for (size_t i = 0; i < c->n_heap; i++) {
    free(c->heap[i].ns);
    free(c->heap[i].name);
  }
  free(c->heap);
  free(c->set);
  free(c);
}

k8s_ctl *kb_k8s_podgc_start(kb_k8s_store *st) {
  ctl_podgc *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->base.free = podgc_free;
  c->st = st;
  c->threshold = KB_K8S_POD_GC_THRESHOLD;
  c->pods = kb_k8s_store_lookup(st, "", "v1", "pods");
  if (!c->pods || !(c->w = kb_k8s_store_on(st, c->pods, on_pod, c))) {
    free(c);
    return NULL;
  }
  return &c->base;
}

void kb_k8s_podgc_set_threshold(k8s_ctl *base, size_t threshold) {
  ctl_podgc *c = (ctl_podgc *)base;
  c->threshold = threshold;
  collect(c);
}

uint64_t kb_k8s_podgc_collected(const k8s_ctl *base) {
  return ((const ctl_podgc *)base)->collected;
}
