/* Simulator scale: N runs of a 10-step pipeline (a chain with a fan-out)
 * simulated to completion on the default profile; prints wall time, event
 * count and peak RSS. Usage: sim_bench [runs=10000]. Not a test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "kb/sim.h"

static const char *wf =
    "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: {generateName: bench-}\n"
    "spec:\n  entrypoint: m\n  templates:\n"
    "  - name: m\n    dag:\n      tasks:\n"
    "      - {name: s0, template: s}\n"
    "      - {name: s1, template: s, dependencies: [s0]}\n"
    "      - {name: s2, template: s, dependencies: [s1]}\n"
    "      - {name: s3, template: s, dependencies: [s1]}\n"
    "      - {name: s4, template: s, dependencies: [s1]}\n"
    "      - {name: s5, template: s, dependencies: [s2, s3, s4]}\n"
    "      - {name: s6, template: s, dependencies: [s5]}\n"
    "      - {name: s7, template: s, dependencies: [s6]}\n"
    "      - {name: s8, template: s, dependencies: [s6]}\n"
    "      - {name: s9, template: s, dependencies: [s7, s8]}\n"
    "  - name: s\n    metadata: {annotations: {sim.kbrun.io/duration: \"lognormal:30,60\"}}\n"
    "    container: {image: alpine, resources: {requests: {cpu: 100m, memory: 64Mi}}}\n";

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 10000;
  kb_sim_error err;
  kb_sim_config *cfg = kb_sim_config_new("default", &err);
  kb_sim *sim = kb_sim_new(cfg, 1, 0, &err);
  kb_sim_config_free(cfg);
  int p = kb_sim_pipeline_load_yaml(sim, wf, strlen(wf), NULL, &err);
  if (p < 0) {
    fprintf(stderr, "%s\n", err.message);
    return 1;
  }
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < n; i++) kb_sim_run_create(sim, p, NULL, &err);
  kb_sim_run_until_idle(sim, 1e9);
  clock_gettime(CLOCK_MONOTONIC, &b);
  kb_sim_stats s;
  kb_sim_stats_get(sim, &s);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("%d runs x 10 steps: %zu pods succeeded, %llu events, sim time %.0f s, wall %.2f s, "
         "peak RSS %ld MiB\n",
         n, s.pods_succeeded, (unsigned long long)s.events_processed, kb_sim_now(sim),
         (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9, ru.ru_maxrss / 1024);
  kb_sim_free(sim);
  return 0;
}
