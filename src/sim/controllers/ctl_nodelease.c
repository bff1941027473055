/* The kubelets' node heartbeats: a coordination.k8s.io/v1 Lease per Node
 * in kube-node-lease (holderIdentity the node, leaseDurationSeconds 40,
 * owned by the Node), renewed every 10 seconds of the virtual clock as the
 * kubelet's renewInterval (a quarter of the duration) has it. A Node that
 * goes takes its Lease with it (garbage collection).
 *
 * A renewal is one store write per node: at 600x, 60 writes per real
 * second per node (12,000 for 200 nodes), which would crowd the watch
 * history (4096 events) and the loop. So renewals are written when someone
 * can see them: at each tick while a watch on Leases is open (its client
 * gets every MODIFIED, as from a cluster), and otherwise once, just before
 * a request reads Leases after a tick went unwritten (kb_k8s_nodelease_read).
 * A reader finds every renewTime at most one renewInterval old either way;
 * resourceVersions stay monotonic (a lazy renewal takes the store's next). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_ctl.h"
#include "k8s_internal.h"

#define LEASE_NS "kube-node-lease"
#define LEASE_SECONDS 40
#define RENEW_EVERY 10.0

typedef struct ctl_lease {
  k8s_ctl base;
  kb_k8s_store *st;
  const kb_k8s_res *nodes, *leases;
  kb_k8s_watch *w_nodes;
  kb_vclock *clock;
  kb_vtimer timer;
  int stale; /* a tick went unwritten: nobody was watching */
} ctl_lease;

/* MicroTime, as renewTime is written: 2024-01-02T03:04:05.123456Z */
static void micro_time(double t, char out[40]) {
  char base[32];
  kb_k8s_format_time(t, base);
  base[19] = 0; /* up to the seconds */
  snprintf(out, 40, "%s.%06dZ", base, (int)((t - (double)(long long)t) * 1e6));
}

static void renew(ctl_lease *c, const cJSON *node) {
  const char *name = kb_k8s_meta_str(node, "name");
  char now[40];
  micro_time(kb_k8s_store_now(c->st), now);
  cJSON *cur = kb_k8s_get(c->st, c->leases, LEASE_NS, name, NULL);
  cJSON *o = cur ? cur : cJSON_CreateObject();
  cJSON *spec = cJSON_GetObjectItemCaseSensitive(o, "spec");
  if (!cJSON_IsObject(spec)) {
    cJSON_DeleteItemFromObjectCaseSensitive(o, "spec");
    spec = cJSON_AddObjectToObject(o, "spec");
  }
  cJSON_DeleteItemFromObjectCaseSensitive(spec, "renewTime");
  cJSON_AddStringToObject(spec, "renewTime", now);
  if (!cur) {
    cJSON *md = cJSON_AddObjectToObject(o, "metadata");
    cJSON_AddStringToObject(md, "name", name);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(md, "ownerReferences"),
                         kb_ctl_owner_ref("v1", "Node", name, kb_k8s_meta_str(node, "uid")));
    cJSON_AddStringToObject(spec, "holderIdentity", name);
    cJSON_AddNumberToObject(spec, "leaseDurationSeconds", LEASE_SECONDS);
    kb_k8s_create(c->st, c->leases, LEASE_NS, o, 0, NULL, NULL);
  } else {
    kb_k8s_update(c->st, c->leases, LEASE_NS, name, o, 0, NULL, NULL);
  }
  cJSON_Delete(o);
}

static void renew_all(ctl_lease *c) {
  const cJSON *items, *n;
  cJSON *list = kb_ctl_list(c->st, c->nodes, NULL, NULL, &items);
  cJSON_ArrayForEach(n, items) renew(c, n);
  cJSON_Delete(list);
  c->stale = 0;
}

static void on_tick(kb_vtimer *t) {
  ctl_lease *c = t->data;
  if (kb_k8s_store_watched(c->st, c->leases)) renew_all(c);
  else c->stale = 1;
  kb_vtimer_start(&c->timer, RENEW_EVERY);
}

void kb_k8s_nodelease_read(k8s_ctl *base) {
  ctl_lease *c = (ctl_lease *)base;
  if (c && c->stale) renew_all(c);
}

static void on_node(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  ctl_lease *c = ud;
  if (type == KB_K8S_ADDED && !kb_k8s_peek(c->st, c->leases, LEASE_NS, kb_k8s_meta_str(obj, "name")))
    renew(c, obj);
}

static void set_clock(k8s_ctl *base, kb_vclock *clock) {
  ctl_lease *c = (ctl_lease *)base;
  if (c->clock) kb_vtimer_stop(&c->timer);
  c->clock = clock;
  if (!clock) return;
  kb_vtimer_init(clock, &c->timer, on_tick, c);
  kb_vtimer_start(&c->timer, RENEW_EVERY);
}

static void lease_free(k8s_ctl *base) {
  ctl_lease *c = (ctl_lease *)base;
  if (c->clock) kb_vtimer_stop(&c->timer);
  kb_k8s_watch_cancel(c->w_nodes);
  free(c);
}

k8s_ctl *kb_k8s_nodelease_start(kb_k8s_store *st) {
  ctl_lease *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->base.free = lease_free;
  c->base.set_clock = set_clock;
  c->st = st;
  c->nodes = kb_k8s_store_lookup(st, "", "v1", "nodes");
  c->leases = kb_k8s_store_lookup(st, "coordination.k8s.io", "v1", "leases");
  if (c->nodes && c->leases) {
    c->w_nodes = kb_k8s_store_on(st, c->nodes, on_node, c);
    /* nodes already there */
    const cJSON *items, *n;
    cJSON *list = kb_ctl_list(st, c->nodes, NULL, NULL, &items);
    cJSON_ArrayForEach(n, items) renew(c, n);
    cJSON_Delete(list);
  }
  if (!c->w_nodes) {
    lease_free(&c->base);
    return NULL;
  }
  return &c->base;
}
