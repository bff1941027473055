/* Nearest-rank percentiles of raw values: an exact statistic of a small
 * sample (kb.timeseries' intervals), where kb_hdr's buckets would round.
 *
 * The q-quantile of n values sorted ascending is the value of rank
 * ceil(q * n), clamped to [1, n]. With weights (a value counted w times)
 * the ranks run over the total weight: the first value, in ascending
 * order, at which the running weight reaches max(1, ceil(q * total)).
 *
 * Both functions sort their array in place and write out[i] for each
 * qs[i]; *max gets the largest value (a NaN sorts after every number, so
 * it is then the max). They return 0,
 * or -1 when n is 0 (out and max untouched). */
#ifndef KB_RANKS_H
#define KB_RANKS_H

#include <stddef.h>

typedef struct kb_weighted {
  double value;
  double weight; /* > 0 */
} kb_weighted;

int kb_ranks(double *values, size_t n, const double *qs, size_t nq, double *out, double *max);

/* *total gets the sum of the weights. */
int kb_ranks_weighted(kb_weighted *values, size_t n, const double *qs, size_t nq, double *out,
                      double *max, double *total);

#endif
