/* Simulator core: event queue order, virtual clock, PRNG distributions,
 * configuration profiles and overlay errors. */
#include <math.h>
#include <uv.h>

#include "../../src/sim/model/sim_internal.h"
#include "sim_test_util.h"

static void test_heap_order(void) {
  sim_heap h = {0};
  /* Same times must come out in insertion order. */
  double times[] = {5, 1, 5, 3, 1, 0, 5, 2};
  for (uint32_t i = 0; i < 8; i++) KB_CHECK(kb_sim_heap_push(&h, times[i], 0, i, 0, 0) == 0);
  uint32_t want[] = {5, 1, 4, 7, 3, 0, 2, 6};
  sim_event ev;
  for (int i = 0; i < 8; i++) {
    KB_CHECK(kb_sim_heap_pop(&h, &ev) == 1);
    KB_CHECK(ev.a == want[i]);
  }
  KB_CHECK(kb_sim_heap_pop(&h, &ev) == 0);
  /* Many events: nondecreasing (t, seq). */
  kb_sim_rng r;
  kb_sim_rng_seed(&r, 7);
  for (uint32_t i = 0; i < 5000; i++) kb_sim_heap_push(&h, floor(kb_sim_rng_uniform(&r) * 100), 0, i, 0, 0);
  double last_t = -1;
  uint64_t last_seq = 0;
  int ordered = 1;
  while (kb_sim_heap_pop(&h, &ev)) {
    if (ev.t < last_t || (ev.t == last_t && ev.seq < last_seq)) ordered = 0;
    last_t = ev.t;
    last_seq = ev.seq;
  }
  KB_CHECK(ordered);
  kb_sim_heap_free(&h);
}

static void test_manual_clock(void) {
  kb_sim *sim = st_sim("fast", NULL, 1);
  KB_CHECK(sim != NULL);
  if (!sim) return;
  KB_CHECK(kb_sim_now(sim) == 0);
  KB_CHECK(kb_sim_advance_to(sim, 10) == 0);
  KB_CHECK(kb_sim_now(sim) == 10);
  KB_CHECK(kb_sim_advance_to(sim, 5) == KB_SIM_EINVAL);
  KB_CHECK(kb_sim_now(sim) == 10);
  uint64_t origin = 1;
  double speed = 1;
  kb_sim_clock_params(sim, &origin, &speed);
  KB_CHECK(origin == 0 && speed == 0);
  KB_CHECK(isinf(kb_sim_next_event_time(sim)));
  KB_CHECK(kb_sim_run_until_idle(sim, 1e9) == 0);
  kb_sim_free(sim);
}

static void test_attached_clock(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  kb_sim_error err;
  kb_sim_config *cfg = kb_sim_config_new("fast", &err);
  kb_sim *sim = kb_sim_new(cfg, 1, 600, &err);
  kb_sim_config_free(cfg);
  KB_CHECK(kb_sim_advance_to(sim, 100) == 0);
  KB_CHECK(kb_sim_attach(sim, &loop) == 0);
  KB_CHECK(kb_sim_attach(sim, &loop) == KB_SIM_ESTATE);
  uint64_t origin;
  double speed;
  kb_sim_clock_params(sim, &origin, &speed);
  KB_CHECK(speed == 600);
  /* The virtual clock continues from 100, as another thread computes it. */
  double other_thread = (double)(uv_hrtime() - origin) / 1e9 * speed;
  KB_CHECK(other_thread >= 100);
  KB_CHECK(kb_sim_now(sim) >= 100);
  KB_CHECK(kb_sim_advance_to(sim, 1000) == KB_SIM_ESTATE);
  KB_CHECK(kb_sim_run_until_idle(sim, 1000) == KB_SIM_ESTATE);
  /* A run created while attached completes when the loop runs. */
  int p = st_load_file(sim, "data/sim/v2ir_hello_world.yaml");
  int r = st_run(sim, p);
  KB_CHECK(r == 0);
  for (int i = 0; i < 2000 && st_info(sim, r).state != KB_SIM_RUN_SUCCEEDED; i++)
    uv_run(&loop, UV_RUN_ONCE);
  KB_CHECK(st_info(sim, r).state == KB_SIM_RUN_SUCCEEDED);
  kb_sim_detach(sim);
  kb_sim_clock_params(sim, &origin, &speed);
  KB_CHECK(speed == 0);
  double t = kb_sim_now(sim);
  KB_CHECK(kb_sim_advance_to(sim, t + 1) == 0);
  uv_run(&loop, UV_RUN_DEFAULT); /* lets the timer close */
  KB_CHECK(uv_loop_close(&loop) == 0);
  kb_sim_free(sim);
}

static double quantile(double *v, size_t n, double q) {
  qsort(v, n, sizeof *v, st_cmp_double);
  return v[(size_t)(q * (double)(n - 1))];
}

static void test_distributions(void) {
  enum { N = 20001 };
  static double v[N];
  kb_sim_rng r;
  kb_sim_rng_seed(&r, 42);
  kb_sim_dist d;
  kb_sim_error err;
  KB_CHECK(kb_sim_dist_parse("lognormal:70,91", &d, &err) == 0);
  for (int i = 0; i < N; i++) v[i] = kb_sim_dist_sample(&d, &r);
  KB_CHECK_NEAR(quantile(v, N, 0.5), 70, 70 * 0.02);
  KB_CHECK_NEAR(quantile(v, N, 0.99), 91, 91 * 0.05);
  KB_CHECK(kb_sim_dist_parse("uniform:1,10", &d, &err) == 0);
  double sum = 0, lo = 1e9, hi = -1;
  for (int i = 0; i < N; i++) {
    double x = kb_sim_dist_sample(&d, &r);
    sum += x;
    lo = x < lo ? x : lo;
    hi = x > hi ? x : hi;
  }
  KB_CHECK_NEAR(sum / N, 5.5, 0.1);
  KB_CHECK(lo >= 1 && hi < 10);
  KB_CHECK(kb_sim_dist_parse("normal:10,2", &d, &err) == 0);
  for (int i = 0; i < N; i++) v[i] = kb_sim_dist_sample(&d, &r);
  KB_CHECK_NEAR(quantile(v, N, 0.5), 10, 0.1);
  KB_CHECK_NEAR(quantile(v, N, 0.8413), 12, 0.15);
  KB_CHECK(kb_sim_dist_parse("30", &d, &err) == 0);
  KB_CHECK(d.kind == KB_SIM_FIXED && kb_sim_dist_sample(&d, &r) == 30);
  KB_CHECK(kb_sim_dist_parse("fixed:2.5", &d, &err) == 0 && d.a == 2.5);
  /* Same seed, same stream; mixed seeds diverge. */
  kb_sim_rng a, b;
  kb_sim_rng_seed(&a, 9);
  kb_sim_rng_seed(&b, 9);
  KB_CHECK(kb_sim_rng_next(&a) == kb_sim_rng_next(&b));
  KB_CHECK(kb_sim_seed_mix(1, 2, 3) != kb_sim_seed_mix(1, 3, 2));
  /* JSON forms */
  cJSON *j = cJSON_Parse("{\"lognormal\": [0.4, 0.85]}");
  KB_CHECK(kb_sim_dist_from_json(j, &d, &err) == 0 && d.kind == KB_SIM_LOGNORMAL && d.b == 0.85);
  cJSON_Delete(j);
}

static void test_distribution_errors(void) {
  kb_sim_dist d;
  kb_sim_error err = {0};
  KB_CHECK(kb_sim_dist_parse("gamma:1,2", &d, &err) == KB_SIM_EINVAL);
  KB_CHECK_STR(err.message,
               "distribution \"gamma:1,2\": unknown kind (fixed, uniform, normal, lognormal)");
  KB_CHECK(kb_sim_dist_parse("lognormal:70", &d, &err) == KB_SIM_EINVAL);
  KB_CHECK_STR(err.message, "distribution \"lognormal:70\": lognormal takes 2 numbers");
  KB_CHECK(kb_sim_dist_parse("lognormal:90,70", &d, &err) == KB_SIM_EINVAL);
  KB_CHECK_STR(err.message, "lognormal:90,70: lognormal needs 0 < p50 <= p99");
  KB_CHECK(kb_sim_dist_parse("uniform:5,1", &d, &err) == KB_SIM_EINVAL);
  KB_CHECK_STR(err.message, "uniform:5,1: uniform needs 0 <= min <= max");
  KB_CHECK(kb_sim_dist_parse("fixed:abc", &d, &err) == KB_SIM_EINVAL);
  KB_CHECK_STR(err.message, "distribution \"fixed:abc\": fixed takes 1 number");
  cJSON *j = cJSON_Parse("{\"uniform\": [1]}");
  KB_CHECK(kb_sim_dist_from_json(j, &d, &err) == KB_SIM_EINVAL);
  KB_CHECK_STR(err.message, "distribution: uniform takes 2 numbers");
  cJSON_Delete(j);
}

static void test_config_profiles(void) {
  kb_sim_error err = {0};
  kb_sim_config *c = kb_sim_config_new("default", &err);
  KB_CHECK(c && c->n_pools == 2 && c->pools[0].nodes == 3 && c->pools[0].cpu_m == 8000);
  KB_CHECK(c && c->pod_startup.kind == KB_SIM_LOGNORMAL && c->pod_startup.a == 1.2); /* D2 */
  KB_CHECK(c && c->sched_pods_per_s == 100);                                         /* D7 */
  kb_sim_config_free(c);
  c = kb_sim_config_new("fast", &err);
  KB_CHECK(c && c->pod_startup.kind == KB_SIM_FIXED && c->pod_startup.a == 0);
  kb_sim_config_free(c);
  c = kb_sim_config_new("degraded", &err);
  KB_CHECK(c && c->image_pull_mb_per_s == 10);
  kb_sim_config_free(c);
  KB_CHECK(kb_sim_config_new("turbo", &err) == NULL);
  KB_CHECK_STR(err.message, "unknown profile \"turbo\" (default, fast, degraded)");
}

static void test_config_yaml(void) {
  const char *yaml =
      "profile: fast\n"
      "cluster:\n"
      "  pool_label: example.com/pool\n"
      "  pools:\n"
      "  - {name: cpu, nodes: 2, cpu: 4, memory: 16Gi}\n"
      "  - name: gpu\n"
      "    nodes: 1\n"
      "    cpu: 7910m\n"
      "    memory: 30Gi\n"
      "    gpu: 4\n"
      "    labels: {cloud.google.com/gke-accelerator: nvidia-tesla-k80}\n"
      "    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]\n"
      "kfp_api:\n"
      "  max_inflight: 8\n"
      "  ListRuns: {lognormal: [0.2, 0.5], per_item: 0.005, per_stored_run: 1.5e-4}\n"
      "k8s:\n"
      "  pod_startup: {lognormal: [1.2, 2.5]}\n"
      "  image_pull: {mb_per_s: 20, size_mb: {myimage: 300}}\n"
      "argo: {completion_detect: {uniform: [1, 10]}, controller: {workflow_workers: 32}}\n"
      "steps: {default: \"fixed:5\", fail_prob: 0.1, durations: {trainer: \"lognormal:90,117\"}}\n";
  kb_sim_error err = {0};
  kb_sim_config *c = kb_sim_config_from_yaml(yaml, strlen(yaml), &err);
  KB_CHECK(c != NULL);
  if (!c) {
    fprintf(stderr, "%s\n", err.message);
    return;
  }
  KB_CHECK_STR(c->profile, "fast");
  KB_CHECK_STR(c->pool_label, "example.com/pool");
  KB_CHECK(c->n_pools == 2 && c->pools[1].cpu_m == 7910 && c->pools[1].gpu == 4);
  KB_CHECK(c->pools[0].memory == 16LL << 30);
  KB_CHECK(c->pools[1].n_taints == 1 && !strcmp(c->pools[1].taints[0].effect, "NoSchedule"));
  KB_CHECK(c->api_max_inflight == 8);
  KB_CHECK(c->pod_startup.kind == KB_SIM_LOGNORMAL);
  KB_CHECK(c->image_pull_mb_per_s == 20);
  KB_CHECK(c->step_default.a == 5 && c->step_fail_prob == 0.1);
  KB_CHECK(c->n_step_durations == 1 && !strcmp(c->step_durations[0].value, "lognormal:90,117"));
  kb_sim_config *copy = kb_sim_config_copy(c);
  KB_CHECK(copy && copy->n_pools == 2 && !strcmp(copy->pools[1].labels[0].key, "cloud.google.com/gke-accelerator"));
  kb_sim_config_free(copy);
  kb_sim *sim = kb_sim_new(c, 1, 0, &err);
  KB_CHECK(kb_sim_node_count(sim) == 3);
  kb_sim_node_info ni;
  KB_CHECK(kb_sim_node_get(sim, 2, &ni) == 0);
  KB_CHECK_STR(ni.name, "gke-kbrun-gpu-0");
  KB_CHECK_STR(ni.labels[0].key, "example.com/pool");
  KB_CHECK_STR(ni.labels[0].value, "gpu");
  KB_CHECK(kb_sim_node_find(sim, "gke-kbrun-cpu-1") == 1);
  kb_sim_free(sim);
  kb_sim_config_free(c);
}

static void config_error(const char *yaml, const char *want) {
  kb_sim_error err = {0};
  kb_sim_config *c = kb_sim_config_from_yaml(yaml, strlen(yaml), &err);
  KB_CHECK(c == NULL);
  KB_CHECK_STR(err.message, want);
  kb_sim_config_free(c);
}

static void test_config_errors(void) {
  config_error("k8s: {pod_startp: 1}\n", "config k8s.pod_startp: unknown key");
  config_error("bogus: 1\n", "config bogus: unknown key");
  config_error("k8s: {pod_startup: {lognormal: [3, 1]}}\n",
               "config k8s.pod_startup: lognormal: lognormal needs 0 < p50 <= p99");
  config_error("cluster: {pools: [{name: a, nodes: 1, cpu: lots, memory: 1Gi}]}\n",
               "config cluster.cpu: expected a cpu quantity (8, \"7910m\")");
  config_error("cluster: {pools: [{name: a, nodes: 1, cpu: 1, memory: 1Gi, taints: [{key: k, effect: Never}]}]}\n",
               "config cluster.taints: effect must be NoSchedule, PreferNoSchedule or NoExecute");
  config_error("steps: {fail_prob: 2}\n", "config steps.fail_prob: expected a probability 0..1");
  config_error("profile: turbo\n", "unknown profile \"turbo\" (default, fast, degraded)");
  config_error("k8s: [1]\n", "config k8s: expected a mapping");
  config_error("kfp_api: {max_inflight: 0}\n", "config kfp_api.max_inflight: expected a number >= 1");
  config_error("a: [\n", "config: line 2 column 1: did not find expected node content");
}

/* The commented example in docs/simulator.md is the default profile. */
static void test_docs_example(void) {
  size_t len;
  char *md = st_read_file("../docs/simulator.md", &len);
  KB_CHECK(md != NULL);
  if (!md) return;
  char *start = strstr(md, "```yaml\n"), *end = start ? strstr(start + 8, "```") : NULL;
  KB_CHECK(start && end);
  if (start && end) {
    kb_sim_error err = {0};
    kb_sim_config *c = kb_sim_config_from_yaml(start + 8, (size_t)(end - start - 8), &err);
    if (!c) fprintf(stderr, "%s\n", err.message);
    kb_sim_config *d = kb_sim_config_new("default", &err);
    KB_CHECK(c && d);
    if (c && d) {
      KB_CHECK(c->n_pools == d->n_pools && c->pools[1].n_images == 1);
      KB_CHECK(c->n_endpoints == d->n_endpoints);
      KB_CHECK(c->pa_lag.b == d->pa_lag.b && c->default_cpu_demand == d->default_cpu_demand);
      KB_CHECK(c->completion_detect.b == d->completion_detect.b && c->epoch == d->epoch);
    }
    kb_sim_config_free(c);
    kb_sim_config_free(d);
  }
  free(md);
}

int main(void) {
  KB_RUN(test_docs_example);
  KB_RUN(test_heap_order);
  KB_RUN(test_manual_clock);
  KB_RUN(test_attached_clock);
  KB_RUN(test_distributions);
  KB_RUN(test_distribution_errors);
  KB_RUN(test_config_profiles);
  KB_RUN(test_config_yaml);
  KB_RUN(test_config_errors);
  return kb_test_report();
}
