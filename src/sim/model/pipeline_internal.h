/* The pipeline builder shared by pipeline.c (nodes, steps, scheduling
 * constraints and hints, the entry points), pipeline_v1.c (KFP v1 and Argo
 * workflows) and pipeline_v2.c (KFP v2 IR). Not a public header. */
#ifndef KB_SIM_PIPELINE_INTERNAL_H
#define KB_SIM_PIPELINE_INTERNAL_H

#include <cjson/cJSON.h>

#include "sim_internal.h"

#define ANN_DURATION "sim.kbrun.io/duration"
#define ANN_FAIL "sim.kbrun.io/fail-probability"
#define ANN_CPU "sim.kbrun.io/cpu"
#define MAX_DEPTH 32
#define MAX_STEPS 60000

typedef struct builder {
  kb_sim *sim;
  kb_sim_error *err;
  sim_pipeline *p;
  size_t cap_steps, cap_gnodes;
  /* v1 */
  const cJSON *templates, *wf_selector, *wf_tolerations, *wf_affinity;
  /* v2 */
  const cJSON *components, *executors, *platform, *root_inputs, *params;
  int exit_handler;
} builder;

static inline const cJSON *get(const cJSON *o, const char *k) {
  return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

static inline const char *getstr(const cJSON *o, const char *k) {
  const cJSON *v = get(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static inline int oom(builder *b) { return kb_sim_fail(b->err, KB_SIM_ENOMEM, "out of memory"); }

/* pipeline.c */
char *kb_sim_pl_xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A graph node (owns suffix, freed on failure); its index or -1. */
int kb_sim_pl_gnode_add(builder *b, sim_gnode_type type, int parent, char *suffix, const char *display,
                        const char *tmpl);
int kb_sim_pl_add_dep(builder *b, size_t step, size_t on);
/* Every step in [f, e) waits for every step in [df, de). */
int kb_sim_pl_range_dep(builder *b, int f, int e, int df, int de);
int kb_sim_pl_selectors_from(builder *b, sim_step *s, const cJSON *sel, const char *where);
int kb_sim_pl_tolerations_from(builder *b, sim_step *s, const cJSON *tols, const char *where);
int kb_sim_pl_affinity_from(builder *b, sim_step *s, const cJSON *aff, const char *where);
/* Duration, failure and cpu hints from annotations and the config. */
int kb_sim_pl_step_hints(builder *b, sim_step *s, const cJSON *annotations, const char *where);
/* A step of graph node gnode; its index or -1. */
int kb_sim_pl_step_add(builder *b, int gnode, const char *name, const char *tmpl, const char *image,
                       kb_sim_step_kind kind);

/* pipeline_v1.c: a KFP v1 / Argo Workflow. */
int kb_sim_pl_load_v1(builder *b, const cJSON *wf);
/* pipeline_v2.c: a KFP v2 IR spec (and its platform document, or NULL). */
int kb_sim_pl_load_v2(builder *b, const cJSON *spec, const cJSON *platform_doc);

#endif
