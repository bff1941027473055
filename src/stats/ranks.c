/* Nearest-rank percentiles of raw values (include/kb/ranks.h).
 *
 * A sort, then a rank per quantile: kb.timeseries closes an interval of a
 * storm's calls (100,000s of values under load) this way, and in Lua
 * (table.sort, a Lua comparison per step) that sort was ~12% of a KFP
 * request's CPU (bench/kfp.md). */
#include "kb/ranks.h"

#include <math.h>
#include <stdlib.h>

/* Ascending, NaN last (so every number keeps its rank among numbers). */
static int cmp_double(double a, double b) {
  if (a < b) return -1;
  if (a > b) return 1;
  if (a == b) return 0;
  return isnan(a) - isnan(b);
}

static int cmp_values(const void *a, const void *b) {
  return cmp_double(*(const double *)a, *(const double *)b);
}

static int cmp_weighted(const void *a, const void *b) {
  return cmp_double(((const kb_weighted *)a)->value, ((const kb_weighted *)b)->value);
}

/* The 1-based rank of quantile q among `count`, at least 1. */
static double rank_of(double q, double count) {
  double r = ceil(q * count);
  return r < 1 ? 1 : r;
}

int kb_ranks(double *values, size_t n, const double *qs, size_t nq, double *out, double *max) {
  if (n == 0) return -1;
  qsort(values, n, sizeof *values, cmp_values);
  for (size_t i = 0; i < nq; i++) {
    double r = rank_of(qs[i], (double)n);
    out[i] = values[r > (double)n ? n - 1 : (size_t)r - 1];
  }
  *max = values[n - 1];
  return 0;
}

int kb_ranks_weighted(kb_weighted *values, size_t n, const double *qs, size_t nq, double *out,
                      double *max, double *total) {
  if (n == 0) return -1;
  qsort(values, n, sizeof *values, cmp_weighted);
  double sum = 0;
  for (size_t i = 0; i < n; i++) sum += values[i].weight;
  for (size_t i = 0; i < nq; i++) {
    double want = rank_of(qs[i], sum), acc = 0;
    out[i] = values[n - 1].value; /* rounding left the running weight short */
    for (size_t j = 0; j < n; j++) {
      acc += values[j].weight;
      if (acc >= want) {
        out[i] = values[j].value;
        break;
      }
    }
  }
  *max = values[n - 1].value;
  *total = sum;
  return 0;
}
