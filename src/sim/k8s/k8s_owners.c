/* How many stored objects name each uid in their ownerReferences. Garbage
 * collection asks "who depends on uid?" on every delete; with this count
 * the common answer ("nobody": events, most pods) costs one hash lookup
 * instead of a scan of the whole store. Open addressing, linear probing;
 * a slot whose count drops to 0 keeps its key as a tombstone until the
 * table is rebuilt. */
#include <stdlib.h>
#include <string.h>

#include "kb/fnv.h"
#include "k8s_internal.h"

typedef struct owner_slot {
  char *uid;
  size_t count;
} owner_slot;

struct k8s_owners {
  owner_slot *slots;
  size_t cap, used; /* used: slots with a key, tombstones included */
  int lost;         /* a reference could not be counted (out of memory) */
};

static uint64_t hash(const char *s) { return kb_fnv64(KB_FNV64_INIT, s); }

static owner_slot *find(k8s_owners *o, const char *uid) {
  if (!o->cap) return NULL;
  for (size_t i = hash(uid) & (o->cap - 1);; i = (i + 1) & (o->cap - 1)) {
    if (!o->slots[i].uid) return &o->slots[i];
    if (!strcmp(o->slots[i].uid, uid)) return &o->slots[i];
  }
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
    if (!old[i].count) { /* drop tombstones */
      free(old[i].uid);
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
  for (size_t i = 0; i < o->cap; i++) free(o->slots[i].uid);
  free(o->slots);
  free(o);
}

static void adjust(k8s_owners *o, const char *uid, int delta) {
  if ((o->used + 1) * 4 >= o->cap * 3 && grow(o) < 0) {
    o->lost |= delta > 0;
    return;
  }
  owner_slot *s = find(o, uid);
  if (!s->uid) {
    if (delta < 0) return;
    if (!(s->uid = strdup(uid))) {
      o->lost = 1;
      return;
    }
    o->used++;
  }
  if (delta > 0) s->count++;
  else if (s->count > 0) s->count--;
}

void kb_k8s_owners_track(k8s_owners *o, const cJSON *obj, int delta) {
  if (!o || !obj) return;
  const cJSON *refs = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "ownerReferences");
  const cJSON *r;
  cJSON_ArrayForEach(r, refs) {
    const char *uid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "uid"));
    if (uid && *uid) adjust(o, uid, delta);
  }
}

int kb_k8s_owners_has(k8s_owners *o, const char *uid) {
  owner_slot *s = o ? find(o, uid) : NULL;
  /* Without a table (out of memory at start) or with a reference it could
   * not count, answer "maybe": scan. An empty table (no object has owners
   * yet: bare pods only) is a sure "nobody". */
  return !o || o->lost || (s && s->uid && s->count > 0);
}
