/* API-level fault injection: error responses, 429 storms, connection
 * resets and stalls, rolled per request from the simulator's seed so a
 * faulty run is reproducible. Node, pool and step faults live in the model
 * (faults.c); these are the faults a client sees on the wire. */
#include <stdio.h>
#include <string.h>

#include "sim_api_faults.h"

void kb_sim_api_faults_init(kb_sim_api_faults *f, uint64_t seed) {
  memset(f, 0, sizeof *f);
  f->error_status = 503;
  f->retry_after = 1;
  f->stall_seconds = 10;
  kb_sim_rng_seed(&f->rng, kb_sim_seed_mix(seed, 0xfa17, 0));
}

static int read_rate(const cJSON *obj, const char *key, double *out, kb_sim_error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v) return 0;
  if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1) {
    snprintf(err->message, sizeof err->message, "api_faults.%s: a probability 0..1 expected", key);
    err->code = KB_SIM_EINVAL;
    return -1;
  }
  *out = v->valuedouble;
  return 0;
}

static int read_positive(const cJSON *obj, const char *key, double *out, kb_sim_error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v) return 0;
  if (!cJSON_IsNumber(v) || v->valuedouble < 0) {
    snprintf(err->message, sizeof err->message, "api_faults.%s: a non-negative number expected", key);
    err->code = KB_SIM_EINVAL;
    return -1;
  }
  *out = v->valuedouble;
  return 0;
}

int kb_sim_api_faults_apply(kb_sim_api_faults *f, const cJSON *obj, kb_sim_error *err) {
  static const char *known[] = {"error_rate", "error_status", "throttle_rate", "retry_after",
                                "reset_rate", "stall_rate", "stall_seconds", "path_prefix", NULL};
  if (!cJSON_IsObject(obj)) {
    snprintf(err->message, sizeof err->message, "api_faults: a mapping expected");
    err->code = KB_SIM_EINVAL;
    return -1;
  }
  for (const cJSON *c = obj->child; c; c = c->next) {
    int ok = 0;
    for (const char **k = known; *k; k++) ok |= strcmp(c->string, *k) == 0;
    if (!ok) {
      snprintf(err->message, sizeof err->message, "api_faults.%s: unknown key", c->string);
      err->code = KB_SIM_EINVAL;
      return -1;
    }
  }
  kb_sim_api_faults next = *f;
  double status = next.error_status;
  if (read_rate(obj, "error_rate", &next.error_rate, err) ||
      read_rate(obj, "throttle_rate", &next.throttle_rate, err) ||
      read_rate(obj, "reset_rate", &next.reset_rate, err) ||
      read_rate(obj, "stall_rate", &next.stall_rate, err) ||
      read_positive(obj, "retry_after", &next.retry_after, err) ||
      read_positive(obj, "stall_seconds", &next.stall_seconds, err) ||
      read_positive(obj, "error_status", &status, err))
    return -1;
  if (status < 500 || status > 599) {
    snprintf(err->message, sizeof err->message, "api_faults.error_status: a 5xx status expected");
    err->code = KB_SIM_EINVAL;
    return -1;
  }
  next.error_status = (int)status;
  const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(obj, "path_prefix");
  if (prefix) {
    if (!cJSON_IsString(prefix) || strlen(prefix->valuestring) >= sizeof next.path_prefix) {
      snprintf(err->message, sizeof err->message, "api_faults.path_prefix: a short string expected");
      err->code = KB_SIM_EINVAL;
      return -1;
    }
    snprintf(next.path_prefix, sizeof next.path_prefix, "%s", prefix->valuestring);
  }
  *f = next;
  return 0;
}

kb_sim_api_fault kb_sim_api_faults_roll(kb_sim_api_faults *f, const char *path) {
  if (f->path_prefix[0] && strncmp(path, f->path_prefix, strlen(f->path_prefix)) != 0)
    return KB_SIM_FAULT_NONE;
  /* One draw per request decides among the faults, in a fixed order, so the
   * configured rates are the probabilities of each outcome. */
  double u = kb_sim_rng_uniform(&f->rng);
  double edge = f->error_rate;
  if (u < edge) return KB_SIM_FAULT_ERROR;
  edge += f->throttle_rate;
  if (u < edge) return KB_SIM_FAULT_THROTTLE;
  edge += f->reset_rate;
  if (u < edge) return KB_SIM_FAULT_RESET;
  edge += f->stall_rate;
  if (u < edge) return KB_SIM_FAULT_STALL;
  return KB_SIM_FAULT_NONE;
}

cJSON *kb_sim_api_faults_json(const kb_sim_api_faults *f) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "error_rate", f->error_rate);
  cJSON_AddNumberToObject(o, "error_status", f->error_status);
  cJSON_AddNumberToObject(o, "throttle_rate", f->throttle_rate);
  cJSON_AddNumberToObject(o, "retry_after", f->retry_after);
  cJSON_AddNumberToObject(o, "reset_rate", f->reset_rate);
  cJSON_AddNumberToObject(o, "stall_rate", f->stall_rate);
  cJSON_AddNumberToObject(o, "stall_seconds", f->stall_seconds);
  cJSON_AddStringToObject(o, "path_prefix", f->path_prefix);
  return o;
}
