/* The disruption controller: keeps every PodDisruptionBudget's status
 * (kb_k8s_pdb_status) current as its pods come, go and turn Ready. Pod
 * changes only mark the budgets stale; an idle turn of the loop recomputes
 * them once and writes those that changed, so a storm of pod updates costs
 * one pass, not one per update. */
#include <stdlib.h>
#include <string.h>

#include "k8s_internal.h"
#include "k8s_pdb.h"
#include "sim_glue.h"

typedef struct ctl_pdb {
  glue_ctl base;
  sim_glue *g;
  const kb_k8s_res *r_pdb;
  kb_k8s_watch *w_pods, *w_pdb;
  uv_idle_t idle;
  int idle_on, writing;
} ctl_pdb;

static void recompute(ctl_pdb *c) {
  kb_k8s_store *st = kb_glue_store(c->g);
  kb_k8s_list_opts lo = {0};
  cJSON *list = NULL;
  if (kb_k8s_list(st, c->r_pdb, &lo, &list, NULL)) return;
  const cJSON *it;
  cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(list, "items")) {
    cJSON *status = kb_k8s_pdb_status(st, it);
    const cJSON *cur = cJSON_GetObjectItemCaseSensitive(it, "status");
    if (status && !cJSON_Compare(status, cur, 1)) {
      c->writing++;
      kb_glue_put_status(c->g, c->r_pdb, kb_k8s_meta_str(it, "namespace"), kb_k8s_meta_str(it, "name"), status);
      c->writing--;
    }
    cJSON_Delete(status);
  }
  cJSON_Delete(list);
}

static void on_idle(uv_idle_t *h) {
  ctl_pdb *c = h->data;
  uv_idle_stop(&c->idle);
  c->idle_on = 0;
  recompute(c);
}

static void stale(ctl_pdb *c) {
  if (c->idle_on || c->writing || !kb_k8s_store_count(kb_glue_store(c->g), c->r_pdb, NULL)) return;
  c->idle_on = 1;
  uv_idle_start(&c->idle, on_idle);
}

static void on_change(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  (void)type, (void)obj;
  stale(ud);
}

static void idle_closed(uv_handle_t *h) { free(h->data); }

static void pdb_free(glue_ctl *base) {
  ctl_pdb *c = (ctl_pdb *)base;
  kb_k8s_watch_cancel(c->w_pods);
  kb_k8s_watch_cancel(c->w_pdb);
  uv_close((uv_handle_t *)&c->idle, idle_closed);
}

glue_ctl *kb_glue_pdb_start(sim_glue *g) {
  ctl_pdb *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->g = g;
  c->base.free = pdb_free;
  c->r_pdb = kb_glue_res(g, "policy", "poddisruptionbudgets");
  const kb_k8s_res *pods = kb_glue_res(g, "", "pods");
  if (!c->r_pdb || !pods || uv_idle_init(kb_glue_loop(g), &c->idle)) {
    free(c);
    return NULL;
  }
  c->idle.data = c;
  c->w_pods = kb_k8s_store_on(kb_glue_store(g), pods, on_change, c);
  c->w_pdb = kb_k8s_store_on(kb_glue_store(g), c->r_pdb, on_change, c);
  if (!c->w_pods || !c->w_pdb) {
    kb_k8s_watch_cancel(c->w_pods);
    kb_k8s_watch_cancel(c->w_pdb);
    uv_close((uv_handle_t *)&c->idle, idle_closed);
    return NULL;
  }
  return &c->base;
}
