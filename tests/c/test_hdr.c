/* HDR histogram: layout, percentiles against exact values, merge, encoding,
 * corrupt input, coordinated-omission correction, statistics; and the
 * nearest-rank quantiles of raw values (kb_ranks). */
#include <stdint.h>
#include <stdlib.h>

#include "kb/hdr.h"
#include "kb/ranks.h"
#include "kbtest.h"

static const kb_hdr_config usec_hour = {.highest = INT64_C(3600000000), .digits = 3, .unit = 1e-6};

/* A deterministic generator (xorshift64*), so failures reproduce. */
static uint64_t rng_state = 0x9E3779B97F4A7C15u;
static uint64_t rng(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1Du;
}

/* Log-uniform over 1 .. 10^decades. */
static int64_t log_uniform(int decades) {
  double u = (double)(rng() >> 11) / 9007199254740992.0;
  return (int64_t)pow(10.0, u * decades);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static int same_hist(const kb_hdr *a, const kb_hdr *b) {
  return kb_hdr_same_layout(a, b) && a->total == b->total && a->saturated == b->saturated &&
         a->min == b->min && a->max == b->max && a->counts_len == b->counts_len &&
         memcmp(a->counts, b->counts, (size_t)a->counts_len * sizeof(int64_t)) == 0;
}

/* What the percentile of a sorted array must be: the exact rank's value,
 * reported as the highest equivalent of its bucket, capped at the max. */
static int64_t expected_percentile(const kb_hdr *h, const int64_t *sorted, int64_t n, double p) {
  int64_t rank = (int64_t)ceil(p / 100.0 * (double)n - 1e-9);
  if (rank < 1) rank = 1;
  if (rank > n) rank = n;
  int64_t hi = kb_hdr_highest_equivalent(h, sorted[rank - 1]);
  return hi < sorted[n - 1] ? hi : sorted[n - 1];
}

static void test_layout(void) {
  kb_hdr h;
  KB_CHECK(kb_hdr_init(&h, &usec_hour) == 0);
  KB_CHECK(h.counts_len == 23221);
  KB_CHECK(kb_hdr_counts_size(&usec_hour) == 23221 * sizeof(int64_t));
  /* Exact below S = 2048, then buckets of width 2, 4, ... */
  KB_CHECK(kb_hdr_lowest_equivalent(&h, 2047) == 2047);
  KB_CHECK(kb_hdr_highest_equivalent(&h, 2047) == 2047);
  KB_CHECK(kb_hdr_lowest_equivalent(&h, 2049) == 2048);
  KB_CHECK(kb_hdr_highest_equivalent(&h, 2048) == 2049);
  KB_CHECK(kb_hdr_highest_equivalent(&h, 1000000) == 1000447);
  KB_CHECK(kb_hdr_lowest_equivalent(&h, 1000000) == 999936);
  /* Walk every bucket from 0 to highest: they tile the range without gaps,
   * there are exactly counts_len of them, and each is within 1/1024. */
  int64_t v = 0, buckets = 0, worst_gap = 0;
  while (v <= usec_hour.highest) {
    int64_t hi = kb_hdr_highest_equivalent(&h, v);
    if (kb_hdr_lowest_equivalent(&h, v) != v || kb_hdr_lowest_equivalent(&h, hi) != v) break;
    if (v >= 2048 && (hi - v + 1) * 1024 > v) worst_gap = hi - v + 1;
    buckets++;
    v = hi + 1;
  }
  KB_CHECK(v > usec_hour.highest);
  KB_CHECK(buckets == h.counts_len);
  KB_CHECK(worst_gap == 0);
  kb_hdr_release(&h);
  KB_CHECK(h.counts == NULL);

  /* Other digit counts: S = 32, 256, 2048, 32768, 262144. */
  const int64_t exact_below[] = {32, 256, 2048, 32768, 262144};
  for (int d = 1; d <= 5; d++) {
    kb_hdr_config cfg = {.highest = INT64_C(1) << 40, .digits = d, .unit = 1};
    KB_CHECK(kb_hdr_init(&h, &cfg) == 0);
    int64_t s = exact_below[d - 1];
    KB_CHECK(kb_hdr_highest_equivalent(&h, s - 1) == s - 1);
    KB_CHECK(kb_hdr_highest_equivalent(&h, s) == s + 1);
    KB_CHECK(kb_hdr_highest_equivalent(&h, cfg.highest) >= cfg.highest);
    kb_hdr_release(&h);
  }
}

static void test_config_errors(void) {
  kb_hdr_config c = usec_hour;
  KB_CHECK(kb_hdr_config_problem(&c) == NULL);
  c.digits = 0;
  KB_CHECK_STR(kb_hdr_config_problem(&c), "digits must be an integer from 1 to 5");
  c.digits = 6;
  KB_CHECK_STR(kb_hdr_config_problem(&c), "digits must be an integer from 1 to 5");
  c = usec_hour;
  c.highest = 1;
  KB_CHECK_STR(kb_hdr_config_problem(&c), "highest must be at least 2 units");
  c.highest = KB_HDR_MAX_HIGHEST + 1;
  KB_CHECK_STR(kb_hdr_config_problem(&c), "highest must be at most 2^62 units");
  c = usec_hour;
  c.unit = 0;
  KB_CHECK_STR(kb_hdr_config_problem(&c), "unit must be a finite number > 0");
  c.unit = NAN;
  KB_CHECK_STR(kb_hdr_config_problem(&c), "unit must be a finite number > 0");
  c = (kb_hdr_config){.highest = KB_HDR_MAX_HIGHEST, .digits = 5, .unit = 1};
  KB_CHECK_STR(kb_hdr_config_problem(&c),
               "layout needs more than 2^22 counters: lower digits or highest");
  KB_CHECK(kb_hdr_counts_size(&c) == 0);
  int err = 0;
  KB_CHECK(kb_hdr_new(&c, &err) == NULL && err == KB_HDR_EINVAL);
  kb_hdr h;
  KB_CHECK(kb_hdr_init(&h, &c) == KB_HDR_EINVAL && h.counts == NULL);
  kb_hdr_release(&h); /* harmless on a failed init */
  KB_CHECK_STR(kb_hdr_strerror(KB_HDR_ELAYOUT), "histogram layouts differ");
  KB_CHECK_STR(kb_hdr_strerror(KB_HDR_ECORRUPT), "corrupt histogram encoding");
  KB_CHECK_STR(kb_hdr_strerror(42), "unknown error");
}

static void test_record_errors(void) {
  kb_hdr *h = kb_hdr_new(&usec_hour, NULL);
  KB_CHECK(kb_hdr_record(h, -1, 1) == KB_HDR_EINVAL);
  KB_CHECK(kb_hdr_record(h, 1, -1) == KB_HDR_EINVAL);
  KB_CHECK(kb_hdr_record_corrected(h, 10, 1, -1) == KB_HDR_EINVAL);
  KB_CHECK(kb_hdr_record(h, 5, 0) == 0);
  KB_CHECK(h->total == 0 && h->max == -1); /* count 0 changes nothing */
  KB_CHECK(kb_hdr_min(h) == 0 && kb_hdr_max(h) == 0 && kb_hdr_mean(h) == 0.0);
  KB_CHECK(kb_hdr_stddev(h) == 0.0 && kb_hdr_value_at_percentile(h, 50) == 0);
  KB_CHECK(kb_hdr_record(h, 7, INT64_MAX) == 0);
  KB_CHECK(kb_hdr_record(h, 7, 1) == KB_HDR_EOVERFLOW);
  KB_CHECK(kb_hdr_record_corrected(h, 7000, 1, 7) == KB_HDR_EOVERFLOW);
  KB_CHECK(h->total == INT64_MAX);
  kb_hdr_free(h);
}

static void test_zero_and_saturation(void) {
  kb_hdr *h = kb_hdr_new(&usec_hour, NULL);
  kb_hdr_record(h, 0, 3);
  KB_CHECK(h->counts[0] == 3 && kb_hdr_min(h) == 0);
  KB_CHECK(kb_hdr_record(h, INT64_C(5000000000), 2) == 0);
  KB_CHECK(kb_hdr_record(h, INT64_MAX, 1) == 0);
  KB_CHECK(h->saturated == 3 && h->total == 6);
  KB_CHECK(kb_hdr_max(h) == usec_hour.highest);
  KB_CHECK(kb_hdr_value_at_percentile(h, 100) == usec_hour.highest);
  KB_CHECK(kb_hdr_value_at_percentile(h, 50) == 0);
  kb_hdr_free(h);
}

static void test_percentile_rounding(void) {
  kb_hdr *h = kb_hdr_new(&usec_hour, NULL);
  for (int v = 1; v <= 10; v++) kb_hdr_record(h, v, 1);
  KB_CHECK(kb_hdr_value_at_percentile(h, 0) == 1);   /* rank is at least 1 */
  KB_CHECK(kb_hdr_value_at_percentile(h, 10) == 1);  /* rank ceil(1.0) = 1 */
  KB_CHECK(kb_hdr_value_at_percentile(h, 10.5) == 2);
  KB_CHECK(kb_hdr_value_at_percentile(h, 50) == 5);
  KB_CHECK(kb_hdr_value_at_percentile(h, 50.01) == 6);
  KB_CHECK(kb_hdr_value_at_percentile(h, 100) == 10);
  KB_CHECK(kb_hdr_value_at_percentile(h, 250) == 10); /* clamped */
  KB_CHECK(kb_hdr_value_at_percentile(h, -3) == 1);
  KB_CHECK(kb_hdr_value_at_percentile(h, NAN) == 1);
  kb_hdr_reset(h);
  /* 99.9 is not exact in binary: 99.9 / 100 * 1000 = 999.0000000000001,
   * which must still be rank 999, not 1000. */
  for (int v = 1; v <= 1000; v++) kb_hdr_record(h, v, 1);
  KB_CHECK(kb_hdr_value_at_percentile(h, 99.9) == 999);
  KB_CHECK(kb_hdr_value_at_percentile(h, 29) == 290);
  KB_CHECK(kb_hdr_value_at_percentile(h, 57) == 570);
  /* Highest equivalent, capped at max: one value of 1000001 lies in the
   * bucket 999936..1000447, so p50 reports 1000001 (the max), while with a
   * larger max in the histogram it reports the bucket's top. */
  kb_hdr_reset(h);
  kb_hdr_record(h, 1000001, 1);
  KB_CHECK(kb_hdr_value_at_percentile(h, 50) == 1000001);
  kb_hdr_record(h, 2000000, 1);
  KB_CHECK(kb_hdr_value_at_percentile(h, 50) == 1000447);
  kb_hdr_free(h);
}

static void test_percentiles_uniform(void) {
  kb_hdr *h = kb_hdr_new(&usec_hour, NULL);
  const int64_t n = 1000000;
  for (int64_t v = 1; v <= n; v++) kb_hdr_record(h, v, 1);
  const double ps[] = {0, 1, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.99, 99.999, 100};
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
    int64_t exact = (int64_t)ceil(ps[i] / 100.0 * (double)n - 1e-9);
    if (exact < 1) exact = 1;
    int64_t got = kb_hdr_value_at_percentile(h, ps[i]);
    int64_t want = kb_hdr_highest_equivalent(h, exact);
    KB_CHECK(got == (want < n ? want : n));
    KB_CHECK(got >= exact && (double)(got - exact) <= (double)exact / 1024.0);
  }
  KB_CHECK(kb_hdr_value_at_percentile(h, 50) == 500223); /* bucket 499968..500223 */
  kb_hdr_free(h);
}

static void test_percentiles_decades(void) {
  kb_hdr *h = kb_hdr_new(&usec_hour, NULL);
  enum { N = 200000 };
  int64_t *vals = malloc(N * sizeof *vals);
  for (int i = 0; i < N; i++) {
    vals[i] = log_uniform(9); /* 1 us .. 1000 s */
    kb_hdr_record(h, vals[i], 1);
  }
  qsort(vals, N, sizeof *vals, cmp_i64);
  KB_CHECK(kb_hdr_min(h) == vals[0] && kb_hdr_max(h) == vals[N - 1]);
  for (double p = 0; p <= 100; p += 0.5) {
    int64_t got = kb_hdr_value_at_percentile(h, p);
    KB_CHECK(got == expected_percentile(h, vals, N, p));
  }
  const double tail[] = {99.9, 99.99, 99.999};
  for (int i = 0; i < 3; i++)
    KB_CHECK(kb_hdr_value_at_percentile(h, tail[i]) == expected_percentile(h, vals, N, tail[i]));
  free(vals);
  /* One value per decade: percentile 10 (k+1) is 10^k to within 1/1024. */
  kb_hdr_reset(h);
  for (int64_t k = 0, v = 1; k < 10; k++, v *= 10) kb_hdr_record(h, v, 1);
  for (int64_t k = 0, v = 1; k < 10; k++, v *= 10) {
    int64_t got = kb_hdr_value_at_percentile(h, 10.0 * (double)(k + 1));
    KB_CHECK(got >= v && (double)(got - v) <= (double)v / 1024.0);
  }
  kb_hdr_free(h);
}

static void test_stats(void) {
  kb_hdr *h = kb_hdr_new(&usec_hour, NULL);
  /* Exact region: uniform 1..1000. */
  for (int v = 1; v <= 1000; v++) kb_hdr_record(h, v, 1);
  KB_CHECK(kb_hdr_mean(h) == 500.5);
  KB_CHECK_NEAR(kb_hdr_stddev(h), sqrt((1000.0 * 1000.0 - 1) / 12.0), 1e-9);
  KB_CHECK(kb_hdr_min(h) == 1 && kb_hdr_max(h) == 1000);
  /* One repeated value: buckets are clipped to [min, max], so exact. */
  kb_hdr_reset(h);
  kb_hdr_record(h, 1000001, 5);
  KB_CHECK(kb_hdr_mean(h) == 1000001.0 && kb_hdr_stddev(h) == 0.0);
  /* Two values in different wide buckets: each counts as its bucket's middle
   * (999936..1000447 clipped below by min: 1000001..1000447 -> 1000224;
   * 1999872..2000895 clipped above by max: 1999872..2000000 -> 1999936). */
  kb_hdr_record(h, 2000000, 5);
  KB_CHECK(kb_hdr_mean(h) == (1000224.0 + 1999936.0) / 2);
  /* Many decades: within the resolution (half a bucket, 1/2048 relative). */
  kb_hdr_reset(h);
  enum { N = 100000 };
  double sum = 0, sq = 0;
  int64_t lo = INT64_MAX, hi = 0;
  for (int i = 0; i < N; i++) {
    int64_t v = log_uniform(8);
    kb_hdr_record(h, v, 1);
    sum += (double)v;
    sq += (double)v * (double)v;
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  double mean = sum / N, sd = sqrt(sq / N - mean * mean);
  KB_CHECK(kb_hdr_min(h) == lo && kb_hdr_max(h) == hi);
  KB_CHECK_NEAR(kb_hdr_mean(h), mean, mean / 2048.0);
  KB_CHECK_NEAR(kb_hdr_stddev(h), sd, sqrt(sq / N) / 2048.0);
  kb_hdr_free(h);
}

static void test_merge(void) {
  kb_hdr *a = kb_hdr_new(&usec_hour, NULL), *b = kb_hdr_new(&usec_hour, NULL);
  kb_hdr *all = kb_hdr_new(&usec_hour, NULL);
  for (int i = 0; i < 50000; i++) {
    int64_t v = log_uniform(10); /* some above highest: saturated */
    kb_hdr_record(i % 2 ? a : b, v, 1 + i % 3);
    kb_hdr_record(all, v, 1 + i % 3);
  }
  KB_CHECK(all->saturated > 0);
  KB_CHECK(kb_hdr_merge(a, b) == 0);
  KB_CHECK(same_hist(a, all));
  KB_CHECK(kb_hdr_value_at_percentile(a, 99) == kb_hdr_value_at_percentile(all, 99));
  KB_CHECK(kb_hdr_mean(a) == kb_hdr_mean(all));
  /* Merging an empty histogram changes nothing; into an empty one copies. */
  kb_hdr_reset(b);
  KB_CHECK(kb_hdr_merge(a, b) == 0 && same_hist(a, all));
  KB_CHECK(kb_hdr_merge(b, a) == 0 && same_hist(b, all));
  /* Different layouts are refused and leave dst unchanged. */
  kb_hdr_config other = usec_hour;
  other.digits = 2;
  kb_hdr *c = kb_hdr_new(&other, NULL);
  kb_hdr_record(c, 5, 1);
  KB_CHECK(kb_hdr_merge(a, c) == KB_HDR_ELAYOUT && same_hist(a, all));
  other = usec_hour;
  other.unit = 1e-3;
  kb_hdr *d = kb_hdr_new(&other, NULL);
  KB_CHECK(kb_hdr_merge(a, d) == KB_HDR_ELAYOUT);
  kb_hdr_free(a), kb_hdr_free(b), kb_hdr_free(c), kb_hdr_free(d), kb_hdr_free(all);
}

static void test_iteration(void) {
  kb_hdr *h = kb_hdr_new(&usec_hour, NULL);
  kb_hdr_iter it;
  kb_hdr_iter_init(&it, h);
  KB_CHECK(kb_hdr_iter_next(&it) == 0);
  kb_hdr_record(h, 3, 2);
  kb_hdr_record(h, 2048, 1);
  kb_hdr_record(h, 2049, 4);
  kb_hdr_record(h, 1000000, 1);
  kb_hdr_iter_init(&it, h);
  KB_CHECK(kb_hdr_iter_next(&it) && it.low == 3 && it.high == 3 && it.count == 2);
  KB_CHECK(kb_hdr_iter_next(&it) && it.low == 2048 && it.high == 2049 && it.count == 5);
  KB_CHECK(kb_hdr_iter_next(&it) && it.low == 999936 && it.high == 1000447 && it.count == 1);
  KB_CHECK(kb_hdr_iter_next(&it) == 0);
  kb_hdr_free(h);
}

/* Reference: the plain loop of HdrHistogram's recordValueWithExpectedInterval. */
static void record_corrected_naive(kb_hdr *h, int64_t v, int64_t count, int64_t interval) {
  kb_hdr_record(h, v, count);
  if (v > h->cfg.highest) v = h->cfg.highest;
  for (int64_t m = v - interval; interval > 0 && m >= interval; m -= interval)
    kb_hdr_record(h, m, count);
}

static void test_record_corrected(void) {
  kb_hdr *h = kb_hdr_new(&usec_hour, NULL), *ref = kb_hdr_new(&usec_hour, NULL);
  /* 1000 with an expected interval of 10: 1000, 990, ..., 10 = 100 values. */
  KB_CHECK(kb_hdr_record_corrected(h, 1000, 1, 10) == 0);
  KB_CHECK(h->total == 100 && kb_hdr_min(h) == 10 && kb_hdr_max(h) == 1000);
  KB_CHECK(kb_hdr_mean(h) == 505.0);
  /* No correction when the value is below twice the interval or interval 0. */
  kb_hdr_reset(h);
  kb_hdr_record_corrected(h, 19, 1, 10);
  kb_hdr_record_corrected(h, 500, 1, 0);
  KB_CHECK(h->total == 2);
  /* Analytic count: value v, interval i -> floor(v / i) values. */
  const int64_t cases[][3] = {
      {INT64_C(1000000000), 1000, 7},   {INT64_C(987654321), 12345, 1},
      {INT64_C(3600000000), 1, 1},      {INT64_C(50000000000), 1000000, 2}, /* saturated */
      {100000, 3001, 5},                {4096, 64, 1},
      {2048 * 33, 2048, 3},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int64_t v = cases[i][0], iv = cases[i][1], c = cases[i][2];
    kb_hdr_reset(h);
    KB_CHECK(kb_hdr_record_corrected(h, v, c, iv) == 0);
    int64_t vc = v > usec_hour.highest ? usec_hour.highest : v;
    KB_CHECK(h->total == vc / iv * c);
    KB_CHECK(kb_hdr_min(h) == vc - (vc / iv - 1) * iv);
    if (vc / iv <= 2000000) { /* compare with the plain loop where it is cheap */
      kb_hdr_reset(ref);
      record_corrected_naive(ref, v, c, iv);
      KB_CHECK(same_hist(h, ref));
    }
  }
  kb_hdr_free(h);
  kb_hdr_free(ref);
}

/* ---- encoding ------------------------------------------------------------- */

static char *b64(const uint8_t *in, size_t n) {
  static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
                 (i + 2 < n ? in[i + 2] : 0);
    *o++ = a[v >> 18];
    *o++ = a[v >> 12 & 63];
    *o++ = i + 1 < n ? a[v >> 6 & 63] : '=';
    *o++ = i + 2 < n ? a[v & 63] : '=';
  }
  *o = 0;
  return out;
}

static size_t unb64(const char *s, uint8_t *out) {
  size_t n = 0, len = strlen(s);
  for (size_t i = 0; i < len; i += 4) {
    uint32_t v = 0;
    for (int j = 0; j < 4; j++) {
      const char *p = strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", s[i + j]);
      v = v << 6 | (uint32_t)(s[i + j] == '=' ? 0 : p - "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/");
    }
    out[n++] = (uint8_t)(v >> 16), out[n++] = (uint8_t)(v >> 8), out[n++] = (uint8_t)v;
  }
  return n - (len && s[len - 1] == '=') - (len > 1 && s[len - 2] == '=');
}

/* Decodes base64 of raw bytes; returns the error message ("" on success). */
static char errbuf[256];
static const char *decode_raw(const uint8_t *bytes, size_t n) {
  char *s = b64(bytes, n);
  errbuf[0] = 0;
  kb_hdr *h = kb_hdr_decode(s, strlen(s), errbuf, sizeof errbuf);
  if (h) {
    /* Anything accepted must be self-consistent. */
    int64_t sum = 0;
    for (int32_t i = 0; i < h->counts_len; i++) sum += h->counts[i];
    KB_CHECK(sum == h->total);
    kb_hdr_free(h);
    errbuf[0] = 0;
  } else {
    KB_CHECK(errbuf[0] != 0);
  }
  free(s);
  return errbuf;
}

static void test_encode_roundtrip(void) {
  kb_hdr *h = kb_hdr_new(&usec_hour, NULL);
  char *s;
  size_t len;
  /* Empty */
  KB_CHECK(kb_hdr_encode(h, &s, &len) == 0 && strlen(s) == len);
  kb_hdr *d = kb_hdr_decode(s, len, errbuf, sizeof errbuf);
  KB_CHECK(d && same_hist(d, h));
  KB_CHECK(d && d->cfg.unit == 1e-6);
  kb_hdr_free(d);
  free(s);
  /* Full: zero, exact region, many decades, saturated */
  kb_hdr_record(h, 0, 4);
  for (int i = 0; i < 100000; i++) kb_hdr_record(h, log_uniform(10), 1 + (int64_t)(rng() % 1000));
  kb_hdr_record(h, 123, INT64_C(1) << 40);
  KB_CHECK(kb_hdr_encode(h, &s, &len) == 0);
  d = kb_hdr_decode(s, len, errbuf, sizeof errbuf);
  KB_CHECK(d && same_hist(d, h));
  char *s2;
  size_t len2;
  KB_CHECK(d && kb_hdr_encode(d, &s2, &len2) == 0 && len2 == len && strcmp(s, s2) == 0);
  free(s2);
  kb_hdr_free(d);
  /* decode_into requires the same layout */
  kb_hdr_config other = usec_hour;
  other.highest = 1000;
  kb_hdr *o = kb_hdr_new(&other, NULL);
  kb_hdr_record(o, 5, 1);
  KB_CHECK(kb_hdr_decode_into(o, s, len, errbuf, sizeof errbuf) == KB_HDR_ELAYOUT);
  KB_CHECK_STR(errbuf, "histogram layouts differ");
  KB_CHECK(o->total == 0);
  kb_hdr_config cfg;
  KB_CHECK(kb_hdr_decode_config(s, len, &cfg, errbuf, sizeof errbuf) == 0);
  KB_CHECK(cfg.highest == usec_hour.highest && cfg.digits == 3 && cfg.unit == 1e-6);
  kb_hdr_free(o);
  free(s);
  /* Compactness: 1000 values in the exact region encode in a few KB */
  kb_hdr_reset(h);
  for (int v = 1000; v < 2000; v++) kb_hdr_record(h, v, 1);
  KB_CHECK(kb_hdr_encode(h, &s, &len) == 0 && len < 3000);
  free(s);
  kb_hdr_free(h);
}

static void test_decode_corrupt(void) {
  kb_hdr *h = kb_hdr_new(&usec_hour, NULL);
  for (int i = 0; i < 300; i++) kb_hdr_record(h, log_uniform(9), 1 + i % 4);
  kb_hdr_record(h, INT64_C(9000000000), 1); /* saturated */
  char *s;
  size_t len;
  kb_hdr_encode(h, &s, &len);
  uint8_t *raw = malloc(len), *mut = malloc(len);
  size_t n = unb64(s, raw);
  KB_CHECK_STR(decode_raw(raw, n), "");

  /* base64 layer */
  KB_CHECK(kb_hdr_decode("", 0, errbuf, sizeof errbuf) == NULL);
  KB_CHECK_STR(errbuf, "base64 length 0 is not a positive multiple of 4");
  KB_CHECK(kb_hdr_decode("abc", 3, errbuf, sizeof errbuf) == NULL);
  KB_CHECK_STR(errbuf, "base64 length 3 is not a positive multiple of 4");
  KB_CHECK(kb_hdr_decode("S0JI$QAA", 8, errbuf, sizeof errbuf) == NULL);
  KB_CHECK_STR(errbuf, "invalid base64 character at offset 4");
  KB_CHECK(kb_hdr_decode("S0=IAQAA", 8, errbuf, sizeof errbuf) == NULL);
  KB_CHECK_STR(errbuf, "invalid base64 character at offset 2");
  KB_CHECK(kb_hdr_decode("QR==", 4, errbuf, sizeof errbuf) == NULL);
  KB_CHECK_STR(errbuf, "non-canonical base64 padding");

  /* header */
  KB_CHECK_STR(decode_raw((const uint8_t *)"XBH\1", 4), "not a kbrun histogram (bad magic)");
  KB_CHECK_STR(decode_raw((const uint8_t *)"KB", 2), "not a kbrun histogram (bad magic)");
  KB_CHECK_STR(decode_raw((const uint8_t *)"KBH\2", 4), "unsupported histogram encoding version 2");
  KB_CHECK_STR(decode_raw((const uint8_t *)"KBH\1", 4), "truncated in digits at byte 4");
  memcpy(mut, raw, n);
  mut[4] = 9; /* digits */
  KB_CHECK_STR(decode_raw(mut, n), "invalid layout: digits must be an integer from 1 to 5");
  const uint8_t huge_highest[] = {'K', 'B', 'H', 1, 5, 0x80, 0x80, 0x80, 0x80, 0x80,
                                  0x80, 0x80, 0x80, 0x40, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f};
  KB_CHECK_STR(decode_raw(huge_highest, sizeof huge_highest),
               "invalid layout: layout needs more than 2^22 counters: lower digits or highest");
  const uint8_t too_big[] = {'K', 'B', 'H', 1, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
  KB_CHECK_STR(decode_raw(too_big, sizeof too_big), "highest at byte 5 does not fit in 63 bits");
  const uint8_t overlong[] = {'K', 'B', 'H', 1, 0x83, 0x00};
  KB_CHECK_STR(decode_raw(overlong, sizeof overlong), "non-minimal varint in digits at byte 4");
  /* digits 3, highest 1000, unit 1.0, total 1, saturated 0, min 5, max 5, then n */
  uint8_t small[] = {'K', 'B', 'H', 1, 3, 0xe8, 0x07, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f,
                     1, 0, 5, 5, 1, 5, 1};
  KB_CHECK_STR(decode_raw(small, sizeof small), "");
  small[13] = 0xf8, small[14] = 0x7f; /* unit NaN */
  KB_CHECK_STR(decode_raw(small, sizeof small), "invalid layout: unit must be a finite number > 0");
  small[13] = 0xf0, small[14] = 0x3f;
  small[19] = 0x7f; /* bucket count far beyond the input: no allocation, no loop */
  KB_CHECK_STR(decode_raw(small, sizeof small), "bucket count 127 does not match the data");
  small[19] = 1, small[16] = 1; /* saturated > 0 with max below highest */
  KB_CHECK_STR(decode_raw(small, sizeof small), "saturated count without values at highest");
  small[16] = 2; /* saturated > total */
  KB_CHECK_STR(decode_raw(small, sizeof small), "saturated count exceeds total");
  small[16] = 0, small[18] = 4; /* max < min */
  KB_CHECK_STR(decode_raw(small, sizeof small), "min/max out of range");
  small[18] = 5, small[20] = 0x7f, small[4] = 1; /* gap past the 112 counters */
  KB_CHECK_STR(decode_raw(small, sizeof small), "bucket index out of range");
  small[4] = 3;
  small[20] = 4; /* bucket 4 but min is 5 */
  KB_CHECK_STR(decode_raw(small, sizeof small), "min is not in the first bucket");
  small[20] = 5, small[21] = 0;
  KB_CHECK_STR(decode_raw(small, sizeof small), "empty bucket listed");
  small[21] = 2;
  KB_CHECK_STR(decode_raw(small, sizeof small), "bucket counts exceed the total");
  small[21] = 1;
  KB_CHECK_STR(decode_raw(small, sizeof small - 1), "bucket count 1 does not match the data");
  KB_CHECK_STR(decode_raw(small, 6), "truncated in highest at byte 5");
  uint8_t longer[sizeof small + 1];
  memcpy(longer, small, sizeof small);
  longer[sizeof small] = 0;
  KB_CHECK_STR(decode_raw(longer, sizeof longer), "1 unexpected bytes after the last bucket");
  small[15] = 2, small[17] = small[18] = 5; /* total 2, one bucket of 1 */
  KB_CHECK_STR(decode_raw(small, sizeof small), "bucket counts add up to less than the total");
  small[15] = 0; /* total 0 but a bucket listed */
  KB_CHECK_STR(decode_raw(small, sizeof small), "bucket count 5 does not match the data");

  /* Every prefix of a valid encoding fails cleanly. */
  for (size_t cut = 0; cut < n; cut++) KB_CHECK(decode_raw(raw, cut)[0] != 0);
  /* Every single-bit flip either fails or yields a consistent histogram
   * (checked inside decode_raw); under ASan this also proves memory safety. */
  for (size_t i = 0; i < n; i++) {
    for (int bit = 0; bit < 8; bit++) {
      memcpy(mut, raw, n);
      mut[i] ^= (uint8_t)(1u << bit);
      decode_raw(mut, n);
    }
  }
  free(raw);
  free(mut);
  free(s);
  kb_hdr_free(h);
}

static void test_init_in(void) {
  size_t size = kb_hdr_counts_size(&usec_hour);
  int64_t *buf = malloc(size);
  kb_hdr h;
  KB_CHECK(kb_hdr_init_in(&h, &usec_hour, buf) == 0 && !h.owns_counts);
  kb_hdr_record(&h, 42, 1);
  KB_CHECK(buf[42] == 1);
  kb_hdr_release(&h); /* does not free the caller's buffer */
  free(buf);
}

/* Nearest ranks: an empty array, the ends (q = 0, 1), ties, weights that
 * fall short of a rank by rounding (0.1 + 0.2 ...). */
static void test_ranks(void) {
  double out[3], max = -1, total = -1;
  const double qs[3] = {0, 0.5, 1};
  KB_CHECK(kb_ranks(NULL, 0, qs, 3, out, &max) == -1 && max == -1);
  double v[5] = {5, 1, 4, 1, 3};
  KB_CHECK(kb_ranks(v, 5, qs, 3, out, &max) == 0);
  KB_CHECK(out[0] == 1 && out[1] == 3 && out[2] == 5 && max == 5); /* ranks 1, 3, 5 */
  KB_CHECK(v[0] == 1 && v[1] == 1 && v[4] == 5);                   /* sorted in place */
  kb_weighted w[3] = {{2, 1}, {1, 3}, {7, 0.5}};                    /* total 4.5 */
  KB_CHECK(kb_ranks_weighted(w, 3, qs, 3, out, &max, &total) == 0);
  KB_CHECK(total == 4.5 && out[0] == 1 && out[1] == 1 && out[2] == 7 && max == 7);
  kb_weighted tenths[10];
  for (int i = 0; i < 10; i++) tenths[i] = (kb_weighted){.value = i, .weight = 0.1};
  const double one = 1;
  KB_CHECK(kb_ranks_weighted(tenths, 10, &one, 1, out, &max, &total) == 0);
  KB_CHECK(out[0] == 9); /* the running sum ends just short of 1: the last value */
  KB_CHECK(kb_ranks_weighted(NULL, 0, qs, 3, out, &max, &total) == -1);
}

int main(void) {
  KB_RUN(test_layout);
  KB_RUN(test_config_errors);
  KB_RUN(test_record_errors);
  KB_RUN(test_zero_and_saturation);
  KB_RUN(test_percentile_rounding);
  KB_RUN(test_percentiles_uniform);
  KB_RUN(test_percentiles_decades);
  KB_RUN(test_stats);
  KB_RUN(test_merge);
  KB_RUN(test_iteration);
  KB_RUN(test_record_corrected);
  KB_RUN(test_encode_roundtrip);
  KB_RUN(test_decode_corrupt);
  KB_RUN(test_init_in);
  KB_RUN(test_ranks);
  return kb_test_report();
}
