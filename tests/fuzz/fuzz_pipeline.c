/* Fuzz target: the simulator's pipeline expansion (src/sim/model/pipeline*.c):
 * compiled KFP v1 Argo workflows, v2 backend workflows and v2 IR
 * PipelineSpecs (with their platform spec) given as YAML text.
 *
 * Each input is loaded into a fresh "fast" simulator. When it expands, its
 * steps are walked (names, dependencies within range) and one run of it is
 * executed to completion in manual mode, with a bounded event budget, so the
 * scheduler sees whatever DAG the input describes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb/sim.h"

/* Sim seconds and events a run may take before the input is set aside:
 * a fast-profile step lasts about 1 s, but an input may ask for more. */
#define RUN_LIMIT_SECONDS 1e6
#define EVENT_BUDGET 200000

static kb_sim_config *cfg;

static void fail(const char *what) {
  fprintf(stderr, "fuzz_pipeline: %s\n", what);
  abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  kb_sim_error err = {0};
  cfg = kb_sim_config_new("fast", &err);
  if (!cfg) {
    fprintf(stderr, "fuzz_pipeline: %s\n", err.message);
    abort();
  }
  return 0;
}

static void check_steps(kb_sim *sim, int p) {
  size_t n = kb_sim_pipeline_steps(sim, p);
  if (!kb_sim_pipeline_format(sim, p) || !kb_sim_pipeline_name(sim, p)) fail("pipeline without format or name");
  for (size_t i = 0; i < n; i++) {
    kb_sim_step_info s;
    if (kb_sim_pipeline_step(sim, p, i, &s) != 0) fail("a listed step cannot be read");
    if (!s.name) fail("a step without a name");
    for (size_t d = 0; d < s.n_deps; d++)
      if (s.deps[d] >= n) fail("a dependency out of range");
    if (kb_sim_pipeline_find_step(sim, p, s.name) < 0) fail("a step not found by its name");
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kb_sim_error err = {0};
  kb_sim *sim = kb_sim_new(cfg, 7, 0, &err);
  if (!sim) fail(err.message);
  int p = kb_sim_pipeline_load_yaml(sim, (const char *)data, size, NULL, &err);
  if (p < 0) {
    if (err.code >= 0 || !err.message[0]) fail("a refused pipeline without an error");
  } else {
    check_steps(sim, p);
    int run = kb_sim_run_create(sim, p, NULL, &err);
    if (run >= 0) {
      long events = 0;
      while (events < EVENT_BUDGET && kb_sim_next_event_time(sim) <= RUN_LIMIT_SECONDS) {
        long n = kb_sim_run_until_idle(sim, kb_sim_now(sim) + 1000);
        if (n <= 0) {
          double next = kb_sim_next_event_time(sim);
          if (next > RUN_LIMIT_SECONDS) break;
          kb_sim_advance_to(sim, next);
          n = 1;
        }
        events += n;
      }
      kb_sim_run_info info;
      if (kb_sim_run_get(sim, run, &info) != 0) fail("a created run cannot be read");
      cJSON *st = kb_sim_run_workflow_status(sim, run);
      cJSON_Delete(st);
    } else if (!err.message[0]) {
      fail("a refused run without an error");
    }
  }
  kb_sim_free(sim);
  return 0;
}
