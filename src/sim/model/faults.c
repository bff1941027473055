/* Injected faults: lost nodes and pools, a global failing-step rate.
 *
 * A lost node turns NotReady at once and every pod bound to it fails with
 * reason NodeLost (the model skips the 300 s eviction grace of the real
 * not-ready toleration: a benchmark wants the failure, not the wait). Its
 * steps fail, so their runs fail; no new pod lands there until restored. */
#include <string.h>

#include "sim_internal.h"

int kb_sim_node_fail(kb_sim *sim, int node, kb_sim_error *err) {
  kb_sim_sync(sim);
  if (node < 0 || (size_t)node >= sim->n_nodes)
    return kb_sim_fail(err, KB_SIM_ENOENT, "node %d not found", node);
  sim_node *n = &sim->nodes[node];
  if (!n->ready) return 0;
  n->ready = 0;
  kb_sim_touch(sim, KB_SIM_KIND_NODE, (uint32_t)node, &n->rv);
  kb_sim_event_emit(sim, "Normal", "NodeNotReady", KB_SIM_KIND_NODE, (uint32_t)node,
                 "Node %s status is now: NodeNotReady", n->name);
  for (size_t i = 0; i < sim->n_pods; i++) {
    sim_pod *p = &sim->pods[i];
    if (p->node != (uint32_t)node || p->scheduled != 1) continue;
    kb_sim_pod_stop(sim, (uint32_t)i, "NodeLost", "Node lost: the node running this pod is NotReady");
  }
  return 0;
}

int kb_sim_node_restore(kb_sim *sim, int node, kb_sim_error *err) {
  kb_sim_sync(sim);
  if (node < 0 || (size_t)node >= sim->n_nodes)
    return kb_sim_fail(err, KB_SIM_ENOENT, "node %d not found", node);
  sim_node *n = &sim->nodes[node];
  if (n->ready) return 0;
  n->ready = 1;
  kb_sim_touch(sim, KB_SIM_KIND_NODE, (uint32_t)node, &n->rv);
  kb_sim_event_emit(sim, "Normal", "NodeReady", KB_SIM_KIND_NODE, (uint32_t)node,
                 "Node %s status is now: NodeReady", n->name);
  kb_sim_sched_capacity_freed(sim);
  return 0;
}

static int pool_index(const kb_sim *sim, const char *pool) {
  for (size_t i = 0; i < sim->cfg->n_pools; i++)
    if (!strcmp(sim->cfg->pools[i].name, pool)) return (int)i;
  return -1;
}

static int pool_apply(kb_sim *sim, const char *pool, int fail, kb_sim_error *err) {
  int p = pool ? pool_index(sim, pool) : -1;
  if (p < 0) return kb_sim_fail(err, KB_SIM_ENOENT, "node pool %s not found", pool ? pool : "(null)");
  for (size_t i = 0; i < sim->n_nodes; i++) {
    if (sim->nodes[i].pool != p) continue;
    int rc = fail ? kb_sim_node_fail(sim, (int)i, err) : kb_sim_node_restore(sim, (int)i, err);
    if (rc) return rc;
  }
  return 0;
}

int kb_sim_pool_fail(kb_sim *sim, const char *pool, kb_sim_error *err) {
  return pool_apply(sim, pool, 1, err);
}

int kb_sim_pool_restore(kb_sim *sim, const char *pool, kb_sim_error *err) {
  return pool_apply(sim, pool, 0, err);
}

int kb_sim_set_step_fail_prob(kb_sim *sim, double p, kb_sim_error *err) {
  if (!(p >= 0 && p <= 1))
    return kb_sim_fail(err, KB_SIM_EINVAL, "step failure probability must be within 0..1, got %g", p);
  sim->cfg->step_fail_prob = p;
  return 0;
}
