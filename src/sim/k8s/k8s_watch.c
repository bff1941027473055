/* The watch history (a ring of the last cfg.history events, which hold
 * references to the stored objects, not copies), event delivery to watches
 * and controller hooks, and watches themselves. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

#include "k8s_internal.h"
#include "kb/base64.h"

/* ---- events ----------------------------------------------------------- */

static void history_push(kb_k8s_store *st, k8s_event *ev) {
  size_t cap = st->cfg.history;
  if (st->ring_count == cap) {
    k8s_event *old = st->ring[st->ring_head];
    st->floor_rv = old->rv;
    kb_k8s_event_unref(old);
    st->ring_head = (st->ring_head + 1) % cap;
    st->ring_count--;
  }
  st->ring[(st->ring_head + st->ring_count) % cap] = ev;
  st->ring_count++;
  ev->refs++;
}

static const char *obj_ns(const cJSON *obj) {
  const char *ns = kb_k8s_meta_str(obj, "namespace");
  return ns ? ns : "";
}

static int watch_matches(const kb_k8s_watch *w, const cJSON *obj) {
  if (!obj) return 0;
  if (w->ns && strcmp(w->ns, obj_ns(obj))) return 0;
  return !w->sel || kb_k8s_selector_match(w->sel, obj);
}

/* Delivers one event to one watch, translating for its selector: an object
 * that starts matching is ADDED, one that stops matching is DELETED. */
static void deliver(kb_k8s_watch *w, const k8s_event *ev) {
  if (w->cancelled || w->done || ev->res_index != w->res_index || ev->rv <= w->start_rv) return;
  const cJSON *obj = kb_k8s_obj_tree(w->st, ev->obj);
  int now = watch_matches(w, obj);
  if (ev->type == KB_K8S_MODIFIED) {
    int before = watch_matches(w, kb_k8s_obj_tree(w->st, ev->prev));
    if (before && now) w->fn(w->ud, KB_K8S_MODIFIED, obj);
    else if (now) w->fn(w->ud, KB_K8S_ADDED, obj);
    else if (before) w->fn(w->ud, KB_K8S_DELETED, obj);
  } else if (now) {
    w->fn(w->ud, ev->type, obj);
  }
}

static void sweep_watches(kb_k8s_store *st) {
  kb_k8s_watch **pp = &st->watches;
  while (*pp) {
    kb_k8s_watch *w = *pp;
    if (w->cancelled) {
      *pp = w->next;
      kb_k8s_watch_free(w);
    } else {
      pp = &w->next;
    }
  }
}

static void dispatch(kb_k8s_store *st) {
  if (st->dispatching) return;
  st->dispatching = 1;
  /* watchers (the simulator's controllers) write as themselves, not as
   * the API request whose write they are told of */
  const char *manager = st->manager;
  st->manager = NULL;
  while (st->pend_head) {
    k8s_pending *p = st->pend_head;
    st->pend_head = p->next;
    if (!st->pend_head) st->pend_tail = NULL;
    for (kb_k8s_watch *w = st->watches; w; w = w->next) deliver(w, p->ev);
    kb_k8s_event_unref(p->ev);
    free(p);
  }
  st->dispatching = 0;
  st->manager = manager;
  sweep_watches(st);
}

/* Records a write: the history and the watchers take references to obj
 * and prev (the states themselves, no copies).
 * Out of memory here loses the event (the write itself stands). */
void kb_k8s_emit(kb_k8s_store *st, kb_k8s_event_type type, const kb_k8s_res *res,
                 k8s_obj *obj, k8s_obj *prev) {
  k8s_event *ev = calloc(1, sizeof *ev);
  k8s_pending *p = calloc(1, sizeof *p);
  if (ev) {
    ev->type = type;
    ev->res_index = res->index;
    ev->rv = st->rv;
    ev->obj = obj;
    ev->prev = prev;
  }
  if (!ev || !p) {
    free(ev);
    free(p);
    return;
  }
  kb_k8s_obj_ref(obj);
  kb_k8s_obj_ref(prev);
  history_push(st, ev);
  ev->refs++;
  p->ev = ev;
  if (st->pend_tail) st->pend_tail->next = p;
  else st->pend_head = p;
  st->pend_tail = p;
  dispatch(st);
}


/* ---- watches --------------------------------------------------------------- */

static void send_status(kb_k8s_watch *w, int code, const char *reason, const char *msg) {
  kb_k8s_error e;
  kb_k8s_error_set(&e, code, reason, "%s", msg);
  cJSON *s = kb_k8s_status_json(&e, NULL);
  w->done = 1;
  if (s) w->fn(w->ud, KB_K8S_ERROR, s);
  cJSON_Delete(s);
}

static void send_bookmark(kb_k8s_watch *w, const kb_k8s_res *res, uint64_t rv, int initial_end) {
  cJSON *o = cJSON_CreateObject();
  cJSON *m = cJSON_AddObjectToObject(o, "metadata");
  char s[24];
  snprintf(s, sizeof s, "%llu", (unsigned long long)rv);
  cJSON_AddStringToObject(o, "kind", res->kind);
  cJSON_AddStringToObject(o, "apiVersion", res->api_version);
  cJSON_AddStringToObject(m, "resourceVersion", s);
  if (initial_end)
    cJSON_AddStringToObject(cJSON_AddObjectToObject(m, "annotations"),
                            "k8s.io/initial-events-end", "true");
  if (m) w->fn(w->ud, KB_K8S_BOOKMARK, o);
  cJSON_Delete(o);
}

static void send_current(kb_k8s_watch *w, k8s_bucket *b) {
  for (size_t i = 0; i < b->n && !w->cancelled; i++)
  {
    const cJSON *obj = kb_k8s_entry_tree(w->st, &b->v[i]);
    if (watch_matches(w, obj)) w->fn(w->ud, KB_K8S_ADDED, obj);
  }
}

kb_k8s_watch *kb_k8s_watch_start(kb_k8s_store *st, const kb_k8s_res *res,
                                 const kb_k8s_watch_opts *opts, kb_k8s_watch_fn fn, void *ud,
                                 kb_k8s_error *err) {
  k8s_bucket *b = kb_k8s_bucket_of(st, res);
  if (!b || !fn) {
    kb_k8s_error_set(err, 400, "BadRequest", "bad watch");
    return NULL;
  }
  kb_k8s_watch_opts o = {0};
  if (opts) o = *opts;
  uint64_t from = 0;
  int have_rv = o.resource_version && *o.resource_version && strcmp(o.resource_version, "0");
  if (have_rv) {
    char *end;
    from = strtoull(o.resource_version, &end, 10);
    if (*end) {
      kb_k8s_error_set(err, 400, "BadRequest", "invalid resource version: %s",
                       o.resource_version);
      return NULL;
    }
  }
  kb_k8s_watch *w = calloc(1, sizeof *w);
  if (!w) {
    kb_k8s_oom(err);
    return NULL;
  }
  w->st = st;
  w->res_index = res->index;
  w->fn = fn;
  w->ud = ud;
  w->start_rv = st->rv;
  if (res->namespaced && o.ns && *o.ns && !(w->ns = strdup(o.ns))) {
    free(w);
    kb_k8s_oom(err);
    return NULL;
  }
  if ((o.label_selector && *o.label_selector) || (o.field_selector && *o.field_selector)) {
    w->sel = kb_k8s_selector_parse(o.label_selector, o.field_selector, res, err);
    if (!w->sel) {
      kb_k8s_watch_free(w);
      return NULL;
    }
  }
  /* link first so a callback may cancel it; events from writes made by
   * the callbacks are queued and delivered after start_rv */
  w->next = st->watches;
  st->watches = w;
  st->dispatching++;
  if (o.no_initial) {
    /* controller hook: changes only */
  } else if (!have_rv || o.send_initial) {
    send_current(w, b);
    if (o.send_initial && !w->cancelled) send_bookmark(w, res, st->rv, 1);
  } else if (from < st->floor_rv) {
    char msg[128];
    snprintf(msg, sizeof msg, "too old resource version: %llu (%llu)",
             (unsigned long long)from, (unsigned long long)st->floor_rv);
    send_status(w, 410, "Expired", msg);
  } else {
    uint64_t start = w->start_rv;
    w->start_rv = from;
    for (size_t i = 0; i < st->ring_count && !w->cancelled; i++) {
      k8s_event *ev = st->ring[(st->ring_head + i) % st->cfg.history];
      if (ev->rv <= start) deliver(w, ev);
    }
    w->start_rv = start;
  }
  st->dispatching--;
  int cancelled = w->cancelled; /* by its own callback: freed below */
  if (!st->dispatching) dispatch(st);
  if (cancelled) kb_k8s_error_set(err, 0, "", "cancelled during its initial events");
  return cancelled ? NULL : w;
}

void kb_k8s_watch_cancel(kb_k8s_watch *w) {
  if (!w || w->cancelled) return;
  w->cancelled = 1;
  if (!w->st->dispatching) sweep_watches(w->st);
}

int kb_k8s_watch_done(const kb_k8s_watch *w) { return w->done || w->cancelled; }

kb_k8s_watch *kb_k8s_store_on(kb_k8s_store *st, const kb_k8s_res *res, kb_k8s_watch_fn fn,
                              void *ud) {
  kb_k8s_watch_opts o = {.no_initial = 1};
  return kb_k8s_watch_start(st, res, &o, fn, ud, NULL);
}


int kb_k8s_store_watched(const kb_k8s_store *st, const kb_k8s_res *res) {
  for (const kb_k8s_watch *w = st->watches; w; w = w->next)
    if (!w->cancelled && !w->done && w->res_index == res->index) return 1;
  return 0;
}
