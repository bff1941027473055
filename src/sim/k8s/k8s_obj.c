/* Stored objects (k8s_obj): one per object state, shared by reference
 * between the store's entry and the events of the watch history, never
 * copied. A state is immutable once stored: a write makes a new one.
 *
 * An object is held as its JSON text (what cJSON_PrintUnformatted gives,
 * about 3 KB for a pod) or as a cJSON tree (about ten times that), or both.
 * Trees are made on demand (kb_k8s_obj_tree: a peek, a watch delivery, a
 * write reading the old state) and listed as "hot"; kb_k8s_store_trim, which
 * the simulator calls where nobody holds a borrowed pointer (between loop
 * turns, between the mirror's writes), turns every hot object back into text
 * alone. Without trims (the store alone, as in its unit tests) objects keep
 * their trees, as before there was text. Lists and watch streams of JSON copy the text without a tree. */
#include <stdlib.h>
#include <string.h>

#include "k8s_internal.h"

struct k8s_obj {
  int refs;
  kb_k8s_store *st;
  size_t hot;  /* 1 + its index in st->hot while it has a tree; 0 else */
  cJSON *tree; /* NULL while packed */
  char *text;  /* NULL until first packed or printed */
  size_t len;
};

/* Lists o as hot (the list holds no reference: a freed object leaves it).
 * 0, or -1 (memory: the tree then stays until the object goes). */
static int make_hot(kb_k8s_store *st, k8s_obj *o) {
  if (o->hot) return 0;
  if (st->n_hot == st->cap_hot) {
    size_t cap = st->cap_hot ? st->cap_hot * 2 : 256;
    k8s_obj **v = realloc(st->hot, cap * sizeof *v);
    if (!v) return -1;
    st->hot = v;
    st->cap_hot = cap;
  }
  st->hot[st->n_hot++] = o;
  o->hot = st->n_hot;
  return 0;
}

k8s_obj *kb_k8s_obj_new(kb_k8s_store *st, cJSON *tree) {
  k8s_obj *o = calloc(1, sizeof *o);
  if (!o) return NULL;
  o->refs = 1;
  o->st = st;
  o->tree = tree;
  make_hot(st, o);
  return o;
}

void kb_k8s_obj_ref(k8s_obj *o) {
  if (o) o->refs++;
}

void kb_k8s_obj_unref(k8s_obj *o) {
  if (!o || --o->refs > 0) return;
  if (o->hot) { /* the last listed takes its place */
    kb_k8s_store *st = o->st;
    k8s_obj *last = st->hot[--st->n_hot];
    st->hot[o->hot - 1] = last;
    last->hot = o->hot;
  }
  cJSON_Delete(o->tree);
  free(o->text);
  free(o);
}

static int ensure_text(k8s_obj *o) {
  if (o->text) return 0;
  if (!o->tree) return -1;
  o->text = cJSON_PrintUnformatted(o->tree);
  if (!o->text) return -1;
  o->len = strlen(o->text);
  return 0;
}

const cJSON *kb_k8s_obj_tree(const kb_k8s_store *cst, k8s_obj *o) {
  if (!o) return NULL;
  if (!o->tree && o->text) {
    kb_k8s_store *st = (kb_k8s_store *)cst; /* the cache is not the store's state */
    o->tree = cJSON_ParseWithLength(o->text, o->len);
    if (o->tree && make_hot(st, o)) { /* unlisted, it would never be packed again */
      cJSON_Delete(o->tree);
      o->tree = NULL;
    }
  }
  return o->tree;
}

cJSON *kb_k8s_obj_copy(const k8s_obj *o) {
  if (!o) return NULL;
  if (o->tree) return cJSON_Duplicate(o->tree, 1);
  return o->text ? cJSON_ParseWithLength(o->text, o->len) : NULL;
}

int kb_k8s_obj_match(const k8s_obj *o, const kb_k8s_selector *sel) {
  if (o->tree) return kb_k8s_selector_match(sel, o->tree);
  cJSON *t = kb_k8s_obj_copy(o); /* not kept: a list must not unpack the store */
  int m = t && kb_k8s_selector_match(sel, t);
  cJSON_Delete(t);
  return m;
}

const char *kb_k8s_obj_text(k8s_obj *o, size_t *len) {
  if (!o || ensure_text(o)) return NULL;
  *len = o->len;
  return o->text;
}

void kb_k8s_store_trim(kb_k8s_store *st) {
  for (size_t i = 0; i < st->n_hot; i++) {
    k8s_obj *o = st->hot[i];
    o->hot = 0;
    if (!ensure_text(o)) { /* out of memory: the tree stays, unlisted */
      cJSON_Delete(o->tree);
      o->tree = NULL;
    }
  }
  st->n_hot = 0;
  if (st->cap_hot > 4096) { /* a burst's list is not kept */
    free(st->hot);
    st->hot = NULL;
    st->cap_hot = 0;
  }
}

void kb_k8s_store_usage(const kb_k8s_store *st, kb_k8s_store_stats *out) {
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < st->n_buckets; i++) {
    const k8s_bucket *b = st->buckets[i];
    out->objects += b->n;
    for (size_t j = 0; j < b->n; j++) {
      const k8s_obj *o = b->v[j].o;
      if (o->tree) out->trees++;
      out->text_bytes += o->text ? o->len + 1 : 0;
    }
  }
  out->history = st->ring_count;
  out->hot = st->n_hot;
}

size_t kb_k8s_store_hot(const kb_k8s_store *st) { return st->n_hot; }
