/* Stored objects (k8s_obj): one per object state, shared by reference
 * between the store's entry and the events of the watch history, never
 * copied. A state is immutable once stored: a write makes a new one.
 *
 * A state is a cJSON tree while it is in use (about 30 KB for a mirrored
 * pod) and packed otherwise: its JSON text (what cJSON_PrintUnformatted
 * gives, 3.3 KB for that pod) deflated against a dictionary of its
 * resource type (the text of the first object of that type packed: pods
 * are much alike), about 0.5 KB. Trees are made on demand (kb_k8s_obj_tree:
 * a peek, a watch delivery, a write reading the old state) and listed as
 * "hot"; kb_k8s_store_trim, which the simulator calls where nobody holds a
 * borrowed pointer (between loop turns, between the mirror's writes), packs
 * every hot object (a state only the history holds is kept as text, not
 * deflated: it goes with its events). Lists inflate straight into their
 * output. Without trims
 * (the store alone, as in its unit tests) objects keep their trees. */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "k8s_internal.h"
#include "kb/json.h"

#define DICT_MAX 32768 /* deflate's window */

struct k8s_obj {
  int refs;
  int res;      /* resource index: its dictionary */
  int current;  /* an entry holds it (kb_k8s_obj_set_current) */
  kb_k8s_store *st;
  size_t hot;   /* 1 + its index in st->hot while it has a tree; 0 else */
  cJSON *tree;  /* NULL while packed */
  char *text;   /* printed, until packed (NULL when z holds it) */
  unsigned char *z; /* deflated text */
  size_t len, zlen; /* text length, deflated length */
};

typedef struct k8s_dict {
  unsigned char *d;
  size_t n;
} k8s_dict;

struct k8s_pack {
  z_stream zd, zi;
  int zd_ok, zi_ok;
  k8s_dict *dicts;
  size_t n_dicts;
  unsigned char *buf; /* deflate's output */
  size_t cap;
  kb_buf text; /* a state printed (print_tree), before it is copied or deflated */
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

k8s_obj *kb_k8s_obj_new(kb_k8s_store *st, int res_index, cJSON *tree) {
  k8s_obj *o = calloc(1, sizeof *o);
  if (!o) return NULL;
  o->refs = 1;
  o->res = res_index;
  o->st = st;
  o->tree = tree;
  make_hot(st, o);
  return o;
}

void kb_k8s_obj_set_current(k8s_obj *o, int current) {
  if (o) o->current = current;
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
  free(o->z);
  free(o);
}

/* ---- deflate against the resource's dictionary ---- */

static struct k8s_pack *pack_of(kb_k8s_store *st) {
  if (!st->pack) st->pack = calloc(1, sizeof *st->pack);
  return st->pack;
}

void kb_k8s_pack_free(kb_k8s_store *st) {
  struct k8s_pack *p = st->pack;
  if (!p) return;
  if (p->zd_ok) deflateEnd(&p->zd);
  if (p->zi_ok) inflateEnd(&p->zi);
  for (size_t i = 0; i < p->n_dicts; i++) free(p->dicts[i].d);
  free(p->dicts);
  free(p->buf);
  kb_buf_free(&p->text);
  free(p);
  st->pack = NULL;
}

/* The dictionary of resource `res`, made from `text` when it has none. */
static const k8s_dict *dict_of(struct k8s_pack *p, int res, const char *text, size_t len) {
  if (res < 0) return NULL;
  if ((size_t)res >= p->n_dicts) {
    k8s_dict *v = realloc(p->dicts, ((size_t)res + 1) * sizeof *v);
    if (!v) return NULL;
    memset(v + p->n_dicts, 0, ((size_t)res + 1 - p->n_dicts) * sizeof *v);
    p->dicts = v;
    p->n_dicts = (size_t)res + 1;
  }
  k8s_dict *d = &p->dicts[res];
  if (!d->d && text) {
    d->n = len < DICT_MAX ? len : DICT_MAX;
    d->d = malloc(d->n ? d->n : 1);
    if (!d->d) return NULL;
    memcpy(d->d, text, d->n);
  }
  return d->d ? d : NULL;
}

/* text[0..len) (o's printed state) deflated into o->z. 0, or -1. */
static int deflate_into(kb_k8s_store *st, k8s_obj *o, const char *text, size_t len) {
  struct k8s_pack *p = pack_of(st);
  if (!p) return -1;
  if (!p->zd_ok) {
    if (deflateInit2(&p->zd, 1, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) return -1;
    p->zd_ok = 1;
  }
  const k8s_dict *d = dict_of(p, o->res, text, len);
  deflateReset(&p->zd);
  if (d && deflateSetDictionary(&p->zd, d->d, (uInt)d->n) != Z_OK) return -1;
  size_t bound = deflateBound(&p->zd, (uLong)len);
  if (bound > p->cap) {
    unsigned char *b = realloc(p->buf, bound);
    if (!b) return -1;
    p->buf = b;
    p->cap = bound;
  }
  p->zd.next_in = (Bytef *)text;
  p->zd.avail_in = (uInt)len;
  p->zd.next_out = p->buf;
  p->zd.avail_out = (uInt)bound;
  if (deflate(&p->zd, Z_FINISH) != Z_STREAM_END) return -1;
  size_t zlen = bound - p->zd.avail_out;
  unsigned char *z = malloc(zlen ? zlen : 1);
  if (!z) return -1;
  memcpy(z, p->buf, zlen);
  o->z = z;
  o->zlen = zlen;
  o->len = len;
  return 0;
}

/* o->text deflated into o->z (the text then freed). 0, or -1 (the text stays). */
static int deflate_text(kb_k8s_store *st, k8s_obj *o) {
  if (deflate_into(st, o, o->text, o->len)) return -1;
  free(o->text);
  o->text = NULL;
  return 0;
}

/* The text of a packed state, inflated into out (o->len bytes). */
static int inflate_into(kb_k8s_store *st, const k8s_obj *o, char *out) {
  struct k8s_pack *p = pack_of(st);
  if (!p) return -1;
  if (!p->zi_ok) {
    if (inflateInit2(&p->zi, -15) != Z_OK) return -1;
    p->zi_ok = 1;
  }
  inflateReset(&p->zi);
  const k8s_dict *d = dict_of(p, o->res, NULL, 0);
  if (d && inflateSetDictionary(&p->zi, d->d, (uInt)d->n) != Z_OK) return -1;
  p->zi.next_in = o->z;
  p->zi.avail_in = (uInt)o->zlen;
  p->zi.next_out = (Bytef *)out;
  p->zi.avail_out = (uInt)o->len;
  int rc = inflate(&p->zi, Z_FINISH);
  return rc == Z_STREAM_END && p->zi.avail_out == 0 ? 0 : -1;
}

/* ---- the state's forms ---- */

/* ---- printing ---- */

/* The value as cJSON_PrintUnformatted spells it (numbers aside, which take
 * the shortest form that reads back: the same for the integers objects
 * hold), straight into b: no buffer regrown per value, no number read
 * back by scanf. -1 on invalid UTF-8 (cJSON then prints it) or memory. */
static int print_value(kb_buf *b, const cJSON *v) {
  switch (v->type & 0xff) {
  case cJSON_NULL: return kb_buf_append(b, "null", 4);
  case cJSON_False: return kb_buf_append(b, "false", 5);
  case cJSON_True: return kb_buf_append(b, "true", 4);
  case cJSON_Number: {
    char n[KB_JSON_NUMBUF];
    size_t k = kb_json_format_double(n, v->valuedouble);
    return k ? kb_buf_append(b, n, k) : kb_buf_append(b, "null", 4);
  }
  case cJSON_String: {
    const char *t = v->valuestring ? v->valuestring : "";
    return kb_json_write_string(b, t, strlen(t), NULL) ? -1 : 0;
  }
  case cJSON_Raw: return v->valuestring ? kb_buf_append(b, v->valuestring, strlen(v->valuestring)) : -1;
  case cJSON_Array:
  case cJSON_Object: {
    int obj = (v->type & 0xff) == cJSON_Object;
    if (kb_buf_putc(b, obj ? '{' : '[')) return -1;
    for (const cJSON *c = v->child; c; c = c->next) {
      if (c != v->child && kb_buf_putc(b, ',')) return -1;
      if (obj && (!c->string || kb_json_write_string(b, c->string, strlen(c->string), NULL) ||
                  kb_buf_putc(b, ':')))
        return -1;
      if (print_value(b, c)) return -1;
    }
    return kb_buf_putc(b, obj ? '}' : ']');
  }
  default: return -1;
  }
}

/* o's tree printed into the pack's buffer (valid until the next print):
 * its text and length, or NULL (out of memory, or invalid UTF-8). */
static const char *print_tree(kb_k8s_store *st, const k8s_obj *o, size_t *len) {
  struct k8s_pack *p = pack_of(st);
  if (!p || !o->tree) return NULL;
  p->text.len = 0;
  if (print_value(&p->text, o->tree) || kb_buf_putc(&p->text, 0)) return NULL;
  *len = p->text.len - 1;
  return p->text.data;
}

static int ensure_text(k8s_obj *o) {
  if (o->text || o->z) return 0;
  if (!o->tree) return -1;
  size_t len;
  const char *t = print_tree(o->st, o, &len);
  if (t && (o->text = malloc(len + 1))) {
    memcpy(o->text, t, len + 1);
    o->len = len;
    return 0;
  }
  o->text = cJSON_PrintUnformatted(o->tree);
  if (!o->text) return -1;
  o->len = strlen(o->text);
  return 0;
}

/* A new tree from the packed or printed text. */
static cJSON *parse(const k8s_obj *o) {
  if (o->text) return cJSON_ParseWithLength(o->text, o->len);
  if (!o->z) return NULL;
  char *t = malloc(o->len + 1);
  cJSON *tree = t && !inflate_into(o->st, o, t) ? cJSON_ParseWithLength(t, o->len) : NULL;
  free(t);
  return tree;
}

const cJSON *kb_k8s_obj_tree(const kb_k8s_store *cst, k8s_obj *o) {
  if (!o) return NULL;
  if (!o->tree) {
    kb_k8s_store *st = (kb_k8s_store *)cst; /* the cache is not the store's state */
    o->tree = parse(o);
    if (o->tree && make_hot(st, o)) { /* unlisted, it would never be packed again */
      cJSON_Delete(o->tree);
      o->tree = NULL;
    }
  }
  return o->tree;
}

cJSON *kb_k8s_obj_copy(const k8s_obj *o) {
  if (!o) return NULL;
  return o->tree ? cJSON_Duplicate(o->tree, 1) : parse(o);
}

int kb_k8s_obj_match(const k8s_obj *o, const kb_k8s_selector *sel) {
  if (o->tree) return kb_k8s_selector_match(sel, o->tree);
  cJSON *t = parse(o); /* not kept: a list must not unpack the store */
  int m = t && kb_k8s_selector_match(sel, t);
  cJSON_Delete(t);
  return m;
}

int kb_k8s_obj_append(k8s_obj *o, kb_buf *out) {
  if (!o || ensure_text(o)) return -1;
  if (o->text) return kb_buf_append(out, o->text, o->len);
  if (kb_buf_reserve(out, o->len) || inflate_into(o->st, o, out->data + out->len)) return -1;
  out->len += o->len;
  return 0;
}

/* Packs one hot object (its tree goes); o->hot is the caller's. */
static void pack(kb_k8s_store *st, k8s_obj *o) {
  size_t len;
  const char *t = o->current && !o->text && !o->z ? print_tree(st, o, &len) : NULL;
  if (t && !deflate_into(st, o, t, len)) { /* printed and packed: no text kept between */
    cJSON_Delete(o->tree);
    o->tree = NULL;
  } else if (!ensure_text(o)) { /* out of memory: the tree stays, unlisted */
    /* the current state is deflated; a superseded one (the history's
     * alone, soon gone) stays text: deflating it would cost more */
    if (o->text && o->current) deflate_text(st, o); /* else the text stays */
    cJSON_Delete(o->tree);
    o->tree = NULL;
  }
}

void kb_k8s_store_trim_to(kb_k8s_store *st, size_t keep) {
  if (st->n_hot <= keep) return;
  size_t n = st->n_hot - keep; /* the first listed (the oldest, mostly) go */
  for (size_t i = 0; i < n; i++) {
    st->hot[i]->hot = 0;
    pack(st, st->hot[i]);
  }
  memmove(st->hot, st->hot + n, keep * sizeof *st->hot);
  st->n_hot = keep;
  for (size_t i = 0; i < keep; i++) st->hot[i]->hot = i + 1;
}

void kb_k8s_store_trim(kb_k8s_store *st) {
  kb_k8s_store_trim_to(st, 0);
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
      out->stored_bytes += o->z ? o->zlen : o->text ? o->len + 1 : 0;
      out->text_bytes += o->z || o->text ? o->len : 0;
    }
  }
  out->history = st->ring_count;
  out->hot = st->n_hot;
}

size_t kb_k8s_store_hot(const kb_k8s_store *st) { return st->n_hot; }
