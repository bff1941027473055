/* Who names each uid in their ownerReferences. Garbage collection asks
 * "who depends on uid?" on every delete; this index answers with one hash
 * lookup and the dependents' keys, not a scan of the whole store (which, with
 * states kept deflated, would also inflate every stored object: deleting
 * 2,000 Workflows over 22,000 pods took minutes).
 *
 * Open addressing, linear probing; a slot whose last dependent goes keeps its
 * key as a tombstone until the table is rebuilt. A dependent's namespace and
 * name are borrowed from its store entry: the store untracks an entry before
 * it frees the entry's strings (kb_k8s_take_entry), and never renames one. */
#include <stdlib.h>
#include <string.h>

#include "kb/fnv.h"
#include "k8s_internal.h"

typedef struct owner_dep {
  int res_index;
  const char *ns, *name; /* borrowed from the entry */
} owner_dep;

typedef struct owner_slot {
  char *uid;
  owner_dep *v;
  size_t n, cap;
} owner_slot;

struct k8s_owners {
  owner_slot *slots;
  size_t cap, used; /* used: slots with a key, tombstones included */
  int lost;         /* a reference could not be recorded (out of memory) */
};

static uint64_t hash(const char *s) { return kb_fnv64(KB_FNV64_INIT, s); }

static owner_slot *find(const k8s_owners *o, const char *uid) {
  if (!o->cap) return NULL;
  for (size_t i = hash(uid) & (o->cap - 1);; i = (i + 1) & (o->cap - 1)) {
    if (!o->slots[i].uid) return &o->slots[i];
    if (!strcmp(o->slots[i].uid, uid)) return &o->slots[i];
  }
}

static void slot_free(owner_slot *s) {
  free(s->uid);
  free(s->v);
}

static int grow(k8s_owners *o) {
  size_t cap = o->cap ? o->cap * 2 : 256;
  owner_slot *old = o->slots;
  size_t old_cap = o->cap;
  o->slots = calloc(cap, sizeof *o->slots);
  if (!o->slots) {
    o->slots = old;
    return -1;
  }
  o->cap = cap;
  o->used = 0;
  for (size_t i = 0; i < old_cap; i++) {
    if (!old[i].uid) continue;
    if (!old[i].n) { /* drop tombstones */
      slot_free(&old[i]);
      continue;
    }
    *find(o, old[i].uid) = old[i];
    o->used++;
  }
  free(old);
  return 0;
}

k8s_owners *kb_k8s_owners_new(void) { return calloc(1, sizeof(k8s_owners)); }

void kb_k8s_owners_free(k8s_owners *o) {
  if (!o) return;
  for (size_t i = 0; i < o->cap; i++) slot_free(&o->slots[i]);
  free(o->slots);
  free(o);
}

static void add(k8s_owners *o, const char *uid, owner_dep d) {
  if ((o->used + 1) * 4 >= o->cap * 3 && grow(o) < 0) {
    o->lost = 1;
    return;
  }
  owner_slot *s = find(o, uid);
  if (!s->uid) {
    if (!(s->uid = strdup(uid))) {
      o->lost = 1;
      return;
    }
    o->used++;
  }
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 4;
    owner_dep *v = realloc(s->v, cap * sizeof *v);
    if (!v) {
      o->lost = 1;
      return;
    }
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = d;
}

static void drop(k8s_owners *o, const char *uid, owner_dep d) {
  owner_slot *s = find(o, uid);
  if (!s || !s->uid) return;
  for (size_t i = 0; i < s->n; i++) {
    if (s->v[i].res_index == d.res_index && !strcmp(s->v[i].name, d.name) &&
        !strcmp(s->v[i].ns, d.ns)) {
      s->v[i] = s->v[--s->n];
      return;
    }
  }
}

void kb_k8s_owners_track(k8s_owners *o, int res_index, const char *ns, const char *name,
                         const cJSON *obj, int delta) {
  if (!o || !obj) return;
  const cJSON *refs = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "ownerReferences");
  const cJSON *r;
  owner_dep d = {res_index, ns, name};
  cJSON_ArrayForEach(r, refs) {
    const char *uid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "uid"));
    if (!uid || !*uid) continue;
    if (delta > 0) add(o, uid, d);
    else drop(o, uid, d);
  }
}

int kb_k8s_owners_dependents(const k8s_owners *o, const char *uid,
                             void (*fn)(void *ud, int res_index, const char *ns,
                                        const char *name),
                             void *ud) {
  /* Without a table (out of memory at start) or with a reference it could
   * not record, the index may miss someone: the caller scans. */
  if (!o || o->lost) return -1;
  const owner_slot *s = find(o, uid);
  if (!s || !s->uid) return 0;
  for (size_t i = 0; i < s->n; i++) fn(ud, s->v[i].res_index, s->v[i].ns, s->v[i].name);
  return 0;
}
