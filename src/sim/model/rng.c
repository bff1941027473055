/* Seeded PRNG (xoshiro256**, seeded through splitmix64) and the duration
 * distributions of the model. Lognormals are given as [p50, p99], as in
 * calibration.md: mu = ln p50, sigma = ln(p99 / p50) / z(0.99). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_internal.h"

#define Z99 2.3263478740408408

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

void kb_sim_rng_seed(kb_sim_rng *r, uint64_t seed) {
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t kb_sim_rng_next(kb_sim_rng *r) {
  uint64_t *s = r->s;
  uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

double kb_sim_rng_uniform(kb_sim_rng *r) {
  return (double)(kb_sim_rng_next(r) >> 11) * 0x1.0p-53;
}

uint64_t kb_sim_seed_mix(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t x = seed;
  uint64_t h = splitmix64(&x);
  x = h ^ (a * UINT64_C(0xD6E8FEB86659FD93));
  h = splitmix64(&x);
  x = h ^ (b * UINT64_C(0xA0761D6478BD642F));
  return splitmix64(&x);
}

/* Box-Muller without caching the second value: one normal per two draws
 * keeps each stream's draw count fixed per sample. */
static double std_normal(kb_sim_rng *r) {
  double u1 = kb_sim_rng_uniform(r), u2 = kb_sim_rng_uniform(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

double kb_sim_dist_sample(const kb_sim_dist *d, kb_sim_rng *r) {
  double v;
  switch (d->kind) {
  case KB_SIM_FIXED: return d->a;
  case KB_SIM_UNIFORM: return d->a + (d->b - d->a) * kb_sim_rng_uniform(r);
  case KB_SIM_NORMAL:
    v = d->a + d->b * std_normal(r);
    return v < 0 ? 0 : v;
  case KB_SIM_LOGNORMAL:
    if (d->a <= 0) return 0;
    return exp(log(d->a) + log(d->b / d->a) / Z99 * std_normal(r));
  }
  return 0;
}

double kb_sim_dist_median(const kb_sim_dist *d) {
  switch (d->kind) {
  case KB_SIM_UNIFORM: return (d->a + d->b) / 2;
  default: return d->a;
  }
}

static int check(kb_sim_dist *d, const char *what, kb_sim_error *err) {
  if (!isfinite(d->a) || !isfinite(d->b))
    return kb_sim_fail(err, KB_SIM_EINVAL, "%s: values must be finite numbers", what);
  switch (d->kind) {
  case KB_SIM_FIXED:
    if (d->a < 0) return kb_sim_fail(err, KB_SIM_EINVAL, "%s: fixed value must be >= 0", what);
    break;
  case KB_SIM_UNIFORM:
    if (d->a < 0 || d->b < d->a)
      return kb_sim_fail(err, KB_SIM_EINVAL, "%s: uniform needs 0 <= min <= max", what);
    break;
  case KB_SIM_NORMAL:
    if (d->b < 0) return kb_sim_fail(err, KB_SIM_EINVAL, "%s: normal stddev must be >= 0", what);
    break;
  case KB_SIM_LOGNORMAL:
    if (d->a <= 0 || d->b < d->a)
      return kb_sim_fail(err, KB_SIM_EINVAL, "%s: lognormal needs 0 < p50 <= p99", what);
    break;
  }
  return 0;
}

static const struct {
  const char *name;
  kb_sim_dist_kind kind;
  int nargs;
} kinds[] = {
    {"fixed", KB_SIM_FIXED, 1},
    {"uniform", KB_SIM_UNIFORM, 2},
    {"normal", KB_SIM_NORMAL, 2},
    {"lognormal", KB_SIM_LOGNORMAL, 2},
};

static int kind_of(const char *name, size_t len) {
  for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
    if (strlen(kinds[i].name) == len && !memcmp(kinds[i].name, name, len)) return (int)i;
  return -1;
}

int kb_sim_dist_parse(const char *text, kb_sim_dist *out, kb_sim_error *err) {
  const char *colon = strchr(text, ':');
  int k = colon ? kind_of(text, (size_t)(colon - text)) : 0;
  if (k < 0)
    return kb_sim_fail(err, KB_SIM_EINVAL,
                    "distribution \"%s\": unknown kind (fixed, uniform, normal, lognormal)", text);
  const char *args = colon ? colon + 1 : text;
  double v[2] = {0, 0};
  int n = 0;
  char *end;
  for (const char *p = args; n < 2;) {
    v[n] = strtod(p, &end);
    if (end == p) break;
    n++;
    while (*end == ' ') end++;
    if (*end != ',') break;
    p = end + 1;
  }
  while (n && *end == ' ') end++;
  if (n != kinds[k].nargs || *end)
    return kb_sim_fail(err, KB_SIM_EINVAL, "distribution \"%s\": %s takes %d number%s", text,
                    kinds[k].name, kinds[k].nargs, kinds[k].nargs > 1 ? "s" : "");
  *out = (kb_sim_dist){kinds[k].kind, v[0], n > 1 ? v[1] : v[0]};
  return check(out, text, err);
}

int kb_sim_dist_from_json(const cJSON *node, kb_sim_dist *out, kb_sim_error *err) {
  if (cJSON_IsNumber(node)) {
    *out = (kb_sim_dist){KB_SIM_FIXED, node->valuedouble, node->valuedouble};
    return check(out, "distribution", err);
  }
  if (cJSON_IsString(node)) return kb_sim_dist_parse(node->valuestring, out, err);
  if (!cJSON_IsObject(node) || !node->child || node->child->next)
    return kb_sim_fail(err, KB_SIM_EINVAL,
                    "distribution: expected a number, \"kind:args\" or {kind: [args]}");
  const cJSON *c = node->child;
  int k = kind_of(c->string, strlen(c->string));
  if (k < 0)
    return kb_sim_fail(err, KB_SIM_EINVAL, "distribution: unknown kind \"%s\"", c->string);
  double v[2] = {0, 0};
  int n = 0;
  if (cJSON_IsNumber(c)) {
    v[n++] = c->valuedouble;
  } else if (cJSON_IsArray(c)) {
    for (const cJSON *e = c->child; e; e = e->next) {
      if (!cJSON_IsNumber(e) || n == 2) {
        n = -1;
        break;
      }
      v[n++] = e->valuedouble;
    }
  }
  if (n != kinds[k].nargs)
    return kb_sim_fail(err, KB_SIM_EINVAL, "distribution: %s takes %d number%s", kinds[k].name,
                    kinds[k].nargs, kinds[k].nargs > 1 ? "s" : "");
  *out = (kb_sim_dist){kinds[k].kind, v[0], n > 1 ? v[1] : v[0]};
  return check(out, kinds[k].name, err);
}
