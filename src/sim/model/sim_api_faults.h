/* API-level faults of the simulator server (see api_faults.c). */
#ifndef KB_SIM_API_FAULTS_H
#define KB_SIM_API_FAULTS_H

#include <cjson/cJSON.h>

#include "kb/sim.h"

typedef enum {
  KB_SIM_FAULT_NONE,
  KB_SIM_FAULT_ERROR,    /* error_status (503 by default) */
  KB_SIM_FAULT_THROTTLE, /* 429 with Retry-After */
  KB_SIM_FAULT_RESET,    /* connection reset mid-response */
  KB_SIM_FAULT_STALL     /* answered after stall_seconds (sim time) */
} kb_sim_api_fault;

typedef struct kb_sim_api_faults {
  double error_rate, throttle_rate, reset_rate, stall_rate;
  int error_status;
  double retry_after;   /* seconds, sent in Retry-After */
  double stall_seconds; /* sim seconds */
  char path_prefix[128]; /* only requests under this path ("" = all APIs) */
  kb_sim_rng rng;
} kb_sim_api_faults;

void kb_sim_api_faults_init(kb_sim_api_faults *f, uint64_t seed);
/* Overlays {error_rate, error_status, throttle_rate, retry_after,
 * reset_rate, stall_rate, stall_seconds, path_prefix}; all-or-nothing. */
int kb_sim_api_faults_apply(kb_sim_api_faults *f, const cJSON *obj, kb_sim_error *err);
kb_sim_api_fault kb_sim_api_faults_roll(kb_sim_api_faults *f, const char *path);
cJSON *kb_sim_api_faults_json(const kb_sim_api_faults *f);

#endif
