/* Helpers shared by the simulator's tests (test_sim_*.c). Tests run with
 * the tests/ directory as working directory. */
#ifndef SIM_TEST_UTIL_H
#define SIM_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb/sim.h"
#include "kb/yaml.h"
#include "kbtest.h"

static inline char *st_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    return NULL;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  if (buf) buf[n] = 0;
  fclose(f);
  if (len) *len = (size_t)n;
  return buf;
}

/* A simulator from a profile plus YAML overrides (NULL for none). */
static inline kb_sim *st_sim(const char *profile, const char *yaml, uint64_t seed) {
  kb_sim_error err = {0};
  kb_sim_config *cfg = kb_sim_config_new(profile, &err);
  if (cfg && yaml) {
    kb_yaml_error ye;
    cJSON *tree = kb_yaml_parse(yaml, strlen(yaml), &ye);
    if (!tree) fprintf(stderr, "yaml: %s\n", ye.message);
    if (!tree || kb_sim_config_apply(cfg, tree, &err)) {
      fprintf(stderr, "config: %s\n", err.message);
      kb_sim_config_free(cfg);
      cfg = NULL;
    }
    cJSON_Delete(tree);
  }
  kb_sim *sim = cfg ? kb_sim_new(cfg, seed, 0, &err) : NULL;
  if (!sim) fprintf(stderr, "kb_sim_new: %s\n", err.message);
  kb_sim_config_free(cfg);
  return sim;
}

static inline int st_load_text(kb_sim *sim, const char *yaml) {
  kb_sim_error err = {0};
  int p = kb_sim_pipeline_load_yaml(sim, yaml, strlen(yaml), NULL, &err);
  if (p < 0) fprintf(stderr, "pipeline: %s\n", err.message);
  return p;
}

static inline int st_load_file(kb_sim *sim, const char *path) {
  size_t len;
  char *text = st_read_file(path, &len);
  if (!text) return -1;
  kb_sim_error err = {0};
  int p = kb_sim_pipeline_load_yaml(sim, text, len, NULL, &err);
  if (p < 0) fprintf(stderr, "%s: %s\n", path, err.message);
  free(text);
  return p;
}

static inline int st_run(kb_sim *sim, int pipeline) {
  kb_sim_error err = {0};
  int r = kb_sim_run_create(sim, pipeline, NULL, &err);
  if (r < 0) fprintf(stderr, "run: %s\n", err.message);
  return r;
}

static inline kb_sim_run_info st_info(kb_sim *sim, int run) {
  kb_sim_run_info ri;
  memset(&ri, 0, sizeof ri);
  kb_sim_run_get(sim, run, &ri);
  return ri;
}

/* The pod of (run, step name), or -1. */
static inline int st_pod(kb_sim *sim, int run, const char *step) {
  kb_sim_pod_info pi;
  for (size_t i = 0; i < kb_sim_pod_count(sim); i++)
    if (!kb_sim_pod_get(sim, (int)i, &pi) && pi.run == run) {
      kb_sim_step_info si;
      kb_sim_pipeline_step(sim, st_info(sim, run).pipeline, (size_t)pi.step, &si);
      if (!strcmp(si.name, step)) return (int)i;
    }
  return -1;
}

static inline int st_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static inline double st_median(double *v, size_t n) {
  qsort(v, n, sizeof *v, st_cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#endif
