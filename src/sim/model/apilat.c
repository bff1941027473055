/* API server latency: per-endpoint base draw + per returned item + per
 * stored row (A1-A8), behind a limit of api_max_inflight concurrent
 * requests (est.). The limit is a multi-server FIFO queue: each slot
 * remembers when it frees; a request takes the earliest slot and waits
 * for it. Deterministic: its own PRNG stream, fed in request order. */
#include <string.h>

#include "sim_internal.h"

static const kb_sim_api_endpoint *find(const kb_sim_config *c, const char *name) {
  const kb_sim_api_endpoint *dflt = NULL;
  for (size_t i = 0; i < c->n_endpoints; i++) {
    if (name && !strcmp(c->endpoints[i].name, name)) return &c->endpoints[i];
    if (!strcmp(c->endpoints[i].name, "default")) dflt = &c->endpoints[i];
  }
  return dflt;
}

double kb_sim_api_latency(kb_sim *sim, const char *endpoint, size_t stored_rows, size_t items) {
  const kb_sim_api_endpoint *e = find(sim->cfg, endpoint);
  if (!e) return 0;
  double service = kb_sim_dist_sample(&e->base, &sim->api_rng) + e->per_item * (double)items +
                   e->per_stored_run * (double)stored_rows;
  double now = kb_sim_now(sim);
  int n = sim->cfg->api_max_inflight > 0 ? sim->cfg->api_max_inflight : 1;
  int best = 0;
  for (int i = 1; i < n; i++)
    if (sim->api_free_at[i] < sim->api_free_at[best]) best = i;
  double start = sim->api_free_at[best] > now ? sim->api_free_at[best] : now;
  sim->api_free_at[best] = start + service;
  return start + service - now;
}
