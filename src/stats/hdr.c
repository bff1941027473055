/* The HDR histogram: layout, recording, statistics, merge, iteration and the
 * portable encoding. See include/kb/hdr.h for the model.
 *
 * Counter index of a value v (S = 2^m sub-buckets, H = 2^(m-1)):
 *   b = max(0, floor(log2 v) - (m - 1))      (the power-of-two bucket)
 *   index = b * H + (v >> b)
 * Bucket 0 holds v = 0 .. S-1 at indices 0 .. S-1; bucket b >= 1 holds
 * [H 2^b, S 2^b) at sub-indices H .. S-1, so indices run on without gaps. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb/base64.h"
#include "kb/hdr.h"

/* ---- layout --------------------------------------------------------------- */

static int sub_half_magnitude(int digits) {
  int64_t need = 2;
  for (int i = 0; i < digits; i++) need *= 10;
  int m = 0;
  while ((INT64_C(1) << m) < need) m++;
  return m - 1;
}

static inline int bucket_of(int half_mag, int64_t mask, int64_t v) {
  int log2v = 63 - __builtin_clzll((unsigned long long)(v | mask));
  return log2v - half_mag;
}

static inline int32_t index_of(const kb_hdr *h, int64_t v) {
  int b = bucket_of(h->sub_half_magnitude, h->sub_mask, v);
  return (int32_t)(((int64_t)b << h->sub_half_magnitude) + (v >> b));
}

static inline int bucket_at(const kb_hdr *h, int32_t idx) {
  int b = (idx >> h->sub_half_magnitude) - 1;
  return b < 0 ? 0 : b;
}

static inline int64_t low_at(const kb_hdr *h, int32_t idx) {
  int b = bucket_at(h, idx);
  return ((int64_t)idx - ((int64_t)b << h->sub_half_magnitude)) << b;
}

static inline int64_t width_at(const kb_hdr *h, int32_t idx) {
  return INT64_C(1) << bucket_at(h, idx);
}

/* Counters needed by a valid layout (the index of `highest`, plus one). */
static int64_t layout_len(const kb_hdr_config *cfg) {
  int half = sub_half_magnitude(cfg->digits);
  int64_t mask = (INT64_C(1) << (half + 1)) - 1;
  int b = bucket_of(half, mask, cfg->highest);
  return ((int64_t)b << half) + (cfg->highest >> b) + 1;
}

const char *kb_hdr_config_problem(const kb_hdr_config *cfg) {
  if (cfg->digits < 1 || cfg->digits > KB_HDR_MAX_DIGITS)
    return "digits must be an integer from 1 to 5";
  if (cfg->highest < 2) return "highest must be at least 2 units";
  if (cfg->highest > KB_HDR_MAX_HIGHEST) return "highest must be at most 2^62 units";
  if (!(cfg->unit > 0) || !isfinite(cfg->unit)) return "unit must be a finite number > 0";
  if (layout_len(cfg) > KB_HDR_MAX_COUNTS)
    return "layout needs more than 2^22 counters: lower digits or highest";
  return NULL;
}

size_t kb_hdr_counts_size(const kb_hdr_config *cfg) {
  if (kb_hdr_config_problem(cfg)) return 0;
  return (size_t)layout_len(cfg) * sizeof(int64_t);
}

const char *kb_hdr_strerror(int code) {
  switch (code) {
  case KB_HDR_OK: return "ok";
  case KB_HDR_EINVAL: return "invalid argument";
  case KB_HDR_ENOMEM: return "out of memory";
  case KB_HDR_EOVERFLOW: return "total count overflow";
  case KB_HDR_ELAYOUT: return "histogram layouts differ";
  case KB_HDR_ECORRUPT: return "corrupt histogram encoding";
  default: return "unknown error";
  }
}

/* ---- lifetime ------------------------------------------------------------- */

int kb_hdr_init_in(kb_hdr *h, const kb_hdr_config *cfg, int64_t *counts) {
  memset(h, 0, sizeof *h);
  if (kb_hdr_config_problem(cfg)) return KB_HDR_EINVAL;
  h->cfg = *cfg;
  h->sub_half_magnitude = sub_half_magnitude(cfg->digits);
  h->sub_mask = (INT64_C(1) << (h->sub_half_magnitude + 1)) - 1;
  h->counts_len = (int32_t)layout_len(cfg);
  h->counts = counts;
  kb_hdr_reset(h);
  return KB_HDR_OK;
}

int kb_hdr_init(kb_hdr *h, const kb_hdr_config *cfg) {
  size_t size = kb_hdr_counts_size(cfg);
  if (size == 0) {
    memset(h, 0, sizeof *h);
    return KB_HDR_EINVAL;
  }
  int64_t *counts = malloc(size);
  if (!counts) {
    memset(h, 0, sizeof *h);
    return KB_HDR_ENOMEM;
  }
  kb_hdr_init_in(h, cfg, counts);
  h->owns_counts = 1;
  return KB_HDR_OK;
}

void kb_hdr_release(kb_hdr *h) {
  if (h->owns_counts) free(h->counts);
  h->counts = NULL;
  h->owns_counts = 0;
  h->counts_len = 0;
}

kb_hdr *kb_hdr_new(const kb_hdr_config *cfg, int *err) {
  kb_hdr *h = malloc(sizeof *h);
  int rc = h ? kb_hdr_init(h, cfg) : KB_HDR_ENOMEM;
  if (rc != KB_HDR_OK) {
    free(h);
    h = NULL;
  }
  if (err) *err = rc;
  return h;
}

void kb_hdr_free(kb_hdr *h) {
  if (!h) return;
  kb_hdr_release(h);
  free(h);
}

void kb_hdr_reset(kb_hdr *h) {
  if (h->counts) memset(h->counts, 0, (size_t)h->counts_len * sizeof *h->counts);
  h->total = 0;
  h->saturated = 0;
  h->min = INT64_MAX;
  h->max = -1;
}

/* ---- recording ------------------------------------------------------------ */

int kb_hdr_record(kb_hdr *h, int64_t value, int64_t count) {
  if (value < 0 || count < 0) return KB_HDR_EINVAL;
  if (count == 0) return KB_HDR_OK;
  if (count > INT64_MAX - h->total) return KB_HDR_EOVERFLOW;
  if (value > h->cfg.highest) {
    value = h->cfg.highest;
    h->saturated += count;
  }
  h->counts[index_of(h, value)] += count;
  h->total += count;
  if (value < h->min) h->min = value;
  if (value > h->max) h->max = value;
  return KB_HDR_OK;
}

/* Adds `count` to every value v - j * interval, j = 1 .. k, bucket by bucket:
 * within a bucket [lo, hi] those are the j with (v - hi) / i <= j <= (v - lo) / i. */
static void backfill(kb_hdr *h, int64_t v, int64_t count, int64_t interval, int64_t k) {
  int64_t first = v - k * interval, last = v - interval;
  int32_t end = index_of(h, last);
  for (int32_t idx = index_of(h, first); idx <= end; idx++) {
    int64_t lo = low_at(h, idx), hi = lo + width_at(h, idx) - 1;
    if (lo < first) lo = first;
    if (hi > last) hi = last;
    int64_t jmin = (v - hi + interval - 1) / interval, jmax = (v - lo) / interval;
    if (jmax >= jmin) h->counts[idx] += (jmax - jmin + 1) * count;
  }
  h->total += k * count;
  if (first < h->min) h->min = first;
}

int kb_hdr_record_corrected(kb_hdr *h, int64_t value, int64_t count, int64_t interval) {
  if (value < 0 || count < 0 || interval < 0) return KB_HDR_EINVAL;
  int64_t v = value > h->cfg.highest ? h->cfg.highest : value;
  int64_t k = (interval > 0 && count > 0) ? v / interval - 1 : 0;
  if (k < 0) k = 0;
  /* Check the whole addition up front so that a failure records nothing. */
  if (count > INT64_MAX - h->total) return KB_HDR_EOVERFLOW;
  if (k > 0 && count > (INT64_MAX - h->total - count) / k) return KB_HDR_EOVERFLOW;
  kb_hdr_record(h, value, count);
  if (k <= 32) {
    for (int64_t j = 1; j <= k; j++) kb_hdr_record(h, v - j * interval, count);
  } else {
    backfill(h, v, count, interval, k);
  }
  return KB_HDR_OK;
}

/* ---- statistics ----------------------------------------------------------- */

int64_t kb_hdr_min(const kb_hdr *h) { return h->total ? h->min : 0; }
int64_t kb_hdr_max(const kb_hdr *h) { return h->total ? h->max : 0; }

int64_t kb_hdr_lowest_equivalent(const kb_hdr *h, int64_t value) {
  return low_at(h, index_of(h, value));
}

int64_t kb_hdr_highest_equivalent(const kb_hdr *h, int64_t value) {
  int32_t idx = index_of(h, value);
  return low_at(h, idx) + width_at(h, idx) - 1;
}

/* The value a bucket's counts stand for: the middle of the bucket, clipped to
 * [min, max] (which makes a histogram of one repeated value exact). */
static inline double mid_at(const kb_hdr *h, int32_t idx) {
  int64_t lo = low_at(h, idx), hi = lo + width_at(h, idx) - 1;
  if (lo < h->min) lo = h->min;
  if (hi > h->max) hi = h->max;
  return ((double)lo + (double)hi) / 2;
}

double kb_hdr_mean(const kb_hdr *h) {
  if (h->total == 0) return 0.0;
  double sum = 0.0;
  kb_hdr_iter it;
  kb_hdr_iter_init(&it, h);
  while (kb_hdr_iter_next(&it)) sum += (double)it.count * mid_at(h, it.next - 1);
  return sum / (double)h->total;
}

double kb_hdr_stddev(const kb_hdr *h) {
  if (h->total == 0) return 0.0;
  double mean = kb_hdr_mean(h), sq = 0.0;
  kb_hdr_iter it;
  kb_hdr_iter_init(&it, h);
  while (kb_hdr_iter_next(&it)) {
    double d = mid_at(h, it.next - 1) - mean;
    sq += (double)it.count * d * d;
  }
  return sqrt(sq / (double)h->total);
}

int64_t kb_hdr_value_at_percentile(const kb_hdr *h, double p) {
  if (h->total == 0) return 0;
  if (!(p > 0)) p = 0; /* also NaN */
  if (p > 100) p = 100;
  double x = p / 100.0 * (double)h->total;
  double r = ceil(x - x * 1e-12);
  int64_t rank = r < 1 ? 1 : r >= (double)h->total ? h->total : (int64_t)r;
  int64_t seen = 0;
  kb_hdr_iter it;
  kb_hdr_iter_init(&it, h);
  while (kb_hdr_iter_next(&it)) {
    seen += it.count;
    if (seen >= rank) return it.high < h->max ? it.high : h->max;
  }
  return h->max; /* not reached: the counters add up to total */
}

/* ---- merge and iteration -------------------------------------------------- */

int kb_hdr_same_layout(const kb_hdr *a, const kb_hdr *b) {
  return a->cfg.digits == b->cfg.digits && a->cfg.highest == b->cfg.highest &&
         a->cfg.unit == b->cfg.unit;
}

int kb_hdr_merge(kb_hdr *dst, const kb_hdr *src) {
  if (!kb_hdr_same_layout(dst, src)) return KB_HDR_ELAYOUT;
  if (src->total == 0) return KB_HDR_OK;
  if (src->total > INT64_MAX - dst->total) return KB_HDR_EOVERFLOW;
  int32_t end = index_of(src, src->max);
  for (int32_t i = index_of(src, src->min); i <= end; i++) dst->counts[i] += src->counts[i];
  dst->total += src->total;
  dst->saturated += src->saturated;
  if (src->min < dst->min) dst->min = src->min;
  if (src->max > dst->max) dst->max = src->max;
  return KB_HDR_OK;
}

void kb_hdr_iter_init(kb_hdr_iter *it, const kb_hdr *h) {
  memset(it, 0, sizeof *it);
  it->h = h;
  if (h->total == 0) return;
  it->next = index_of(h, h->min);
  it->end = index_of(h, h->max) + 1;
}

int kb_hdr_iter_next(kb_hdr_iter *it) {
  const kb_hdr *h = it->h;
  while (it->next < it->end) {
    int32_t idx = it->next++;
    if (h->counts[idx] == 0) continue;
    it->count = h->counts[idx];
    it->low = low_at(h, idx);
    it->high = it->low + width_at(h, idx) - 1;
    return 1;
  }
  return 0;
}

/* ---- base64 --------------------------------------------------------------- */

static char *b64_encode(const uint8_t *in, size_t n, size_t *outlen) {
  char *out = malloc(KB_BASE64_LEN(n) + 1);
  if (!out) return NULL;
  *outlen = kb_base64_encode(in, n, out);
  return out;
}

static int set_err(char *err, size_t errlen, int code, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return code;
}

/* Strict: padded, canonical (unused bits zero), nothing but the alphabet. */
static int b64_decode(const char *s, size_t len, uint8_t **out, size_t *outlen, char *err,
                      size_t errlen) {
  *out = NULL;
  if (len == 0 || len % 4 != 0)
    return set_err(err, errlen, KB_HDR_ECORRUPT, "base64 length %zu is not a positive multiple of 4", len);
  size_t pad = s[len - 1] != '=' ? 0 : s[len - 2] == '=' ? 2 : 1;
  uint8_t *buf = malloc(len / 4 * 3);
  if (!buf) return set_err(err, errlen, KB_HDR_ENOMEM, "out of memory");
  size_t n = 0;
  for (size_t i = 0; i < len; i += 4) {
    uint32_t v = 0;
    for (size_t j = 0; j < 4; j++) {
      int d = (i + j >= len - pad) ? 0 : kb_base64_value((unsigned char)s[i + j]);
      if (d < 0) {
        free(buf);
        return set_err(err, errlen, KB_HDR_ECORRUPT, "invalid base64 character at offset %zu", i + j);
      }
      v = v << 6 | (uint32_t)d;
    }
    buf[n++] = (uint8_t)(v >> 16);
    buf[n++] = (uint8_t)(v >> 8);
    buf[n++] = (uint8_t)v;
  }
  n -= pad;
  if (pad && buf[n] != 0) { /* bits of the last character beyond the data */
    free(buf);
    return set_err(err, errlen, KB_HDR_ECORRUPT, "non-canonical base64 padding");
  }
  *out = buf;
  *outlen = n;
  return KB_HDR_OK;
}

/* ---- encoding ------------------------------------------------------------- */

static const uint8_t magic[4] = {'K', 'B', 'H', 1};

static size_t put_varint(uint8_t *p, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  p[n++] = (uint8_t)v;
  return n;
}

int kb_hdr_encode(const kb_hdr *h, char **out, size_t *len) {
  *out = NULL;
  *len = 0;
  int64_t n = 0;
  kb_hdr_iter it;
  kb_hdr_iter_init(&it, h);
  while (kb_hdr_iter_next(&it)) n++;
  /* magic + 7 varints + unit, then two varints per bucket; 10 bytes a varint */
  uint8_t *buf = malloc(4 + 7 * 10 + 8 + (size_t)n * 20), *p = buf;
  if (!buf) return KB_HDR_ENOMEM;
  memcpy(p, magic, 4);
  p += 4;
  p += put_varint(p, (uint64_t)h->cfg.digits);
  p += put_varint(p, (uint64_t)h->cfg.highest);
  uint64_t bits;
  memcpy(&bits, &h->cfg.unit, 8);
  for (int i = 0; i < 8; i++) *p++ = (uint8_t)(bits >> (8 * i));
  p += put_varint(p, (uint64_t)h->total);
  p += put_varint(p, (uint64_t)h->saturated);
  if (h->total) {
    p += put_varint(p, (uint64_t)h->min);
    p += put_varint(p, (uint64_t)h->max);
  }
  p += put_varint(p, (uint64_t)n);
  int32_t prev = -1;
  kb_hdr_iter_init(&it, h);
  while (kb_hdr_iter_next(&it)) {
    int32_t idx = it.next - 1;
    p += put_varint(p, (uint64_t)(idx - prev - 1));
    p += put_varint(p, (uint64_t)it.count);
    prev = idx;
  }
  *out = b64_encode(buf, (size_t)(p - buf), len);
  free(buf);
  return *out ? KB_HDR_OK : KB_HDR_ENOMEM;
}

/* ---- decoding ------------------------------------------------------------- */

typedef struct reader {
  const uint8_t *p;
  size_t n, pos;
  char *err;
  size_t errlen;
} reader;

typedef struct header {
  kb_hdr_config cfg;
  int64_t total, saturated, min, max, buckets;
} header;

#define CORRUPT(r, ...) set_err((r)->err, (r)->errlen, KB_HDR_ECORRUPT, __VA_ARGS__)

/* An unsigned LEB128 varint that must be minimal and fit in 63 bits. */
static int read_varint(reader *r, const char *what, int64_t *out) {
  uint64_t v = 0;
  size_t start = r->pos;
  for (int shift = 0;; shift += 7) {
    if (r->pos >= r->n) return CORRUPT(r, "truncated in %s at byte %zu", what, start);
    uint8_t b = r->p[r->pos++];
    uint64_t bits = b & 0x7f;
    if (shift == 63 ? bits != 0 : shift > 56 && (bits >> (63 - shift)) != 0)
      return CORRUPT(r, "%s at byte %zu does not fit in 63 bits", what, start);
    v |= bits << shift;
    if (!(b & 0x80)) {
      if (b == 0 && shift > 0) return CORRUPT(r, "non-minimal varint in %s at byte %zu", what, start);
      break;
    }
  }
  *out = (int64_t)v;
  return KB_HDR_OK;
}

static int read_header(reader *r, header *hd) {
  int rc;
  if (r->n < 4 || memcmp(r->p, magic, 3) != 0) return CORRUPT(r, "not a kbrun histogram (bad magic)");
  if (r->p[3] != magic[3]) return CORRUPT(r, "unsupported histogram encoding version %u", r->p[3]);
  r->pos = 4;
  int64_t digits;
  if ((rc = read_varint(r, "digits", &digits)) || (rc = read_varint(r, "highest", &hd->cfg.highest)))
    return rc;
  hd->cfg.digits = digits > KB_HDR_MAX_DIGITS ? 0 : (int)digits;
  if (r->n - r->pos < 8) return CORRUPT(r, "truncated in unit at byte %zu", r->pos);
  uint64_t bits = 0;
  for (int i = 0; i < 8; i++) bits |= (uint64_t)r->p[r->pos++] << (8 * i);
  memcpy(&hd->cfg.unit, &bits, 8);
  const char *problem = kb_hdr_config_problem(&hd->cfg);
  if (problem) return CORRUPT(r, "invalid layout: %s", problem);
  if ((rc = read_varint(r, "total", &hd->total)) || (rc = read_varint(r, "saturated", &hd->saturated)))
    return rc;
  if (hd->saturated > hd->total) return CORRUPT(r, "saturated count exceeds total");
  hd->min = INT64_MAX;
  hd->max = -1;
  if (hd->total) {
    if ((rc = read_varint(r, "min", &hd->min)) || (rc = read_varint(r, "max", &hd->max))) return rc;
    if (hd->min > hd->max || hd->max > hd->cfg.highest) return CORRUPT(r, "min/max out of range");
  }
  if ((rc = read_varint(r, "bucket count", &hd->buckets))) return rc;
  /* Each bucket takes at least two bytes: bound the loop by the input. */
  if (hd->buckets > (int64_t)((r->n - r->pos) / 2) || (hd->total == 0) != (hd->buckets == 0))
    return CORRUPT(r, "bucket count %lld does not match the data", (long long)hd->buckets);
  return KB_HDR_OK;
}

static int read_buckets(reader *r, const header *hd, kb_hdr *h) {
  int rc;
  int64_t prev = -1, sum = 0, gap, count;
  for (int64_t i = 0; i < hd->buckets; i++) {
    if ((rc = read_varint(r, "bucket gap", &gap)) || (rc = read_varint(r, "bucket count", &count)))
      return rc;
    if (gap >= h->counts_len - prev - 1) return CORRUPT(r, "bucket index out of range");
    if (count == 0) return CORRUPT(r, "empty bucket listed");
    if (count > hd->total - sum) return CORRUPT(r, "bucket counts exceed the total");
    prev += gap + 1;
    h->counts[prev] = count;
    sum += count;
    if (i == 0 && prev != index_of(h, hd->min)) return CORRUPT(r, "min is not in the first bucket");
  }
  if (r->pos != r->n) return CORRUPT(r, "%zu unexpected bytes after the last bucket", r->n - r->pos);
  if (sum != hd->total) return CORRUPT(r, "bucket counts add up to less than the total");
  if (hd->total && prev != index_of(h, hd->max)) return CORRUPT(r, "max is not in the last bucket");
  if (hd->saturated && (hd->max != hd->cfg.highest || h->counts[prev] < hd->saturated))
    return CORRUPT(r, "saturated count without values at highest");
  h->total = hd->total;
  h->saturated = hd->saturated;
  h->min = hd->min;
  h->max = hd->max;
  return KB_HDR_OK;
}

static int open_reader(reader *r, const char *s, size_t len, char *err, size_t errlen) {
  uint8_t *buf;
  size_t n;
  int rc = b64_decode(s, len, &buf, &n, err, errlen);
  *r = (reader){buf, n, 0, err, errlen};
  return rc;
}

int kb_hdr_decode_config(const char *s, size_t len, kb_hdr_config *cfg, char *err,
                         size_t errlen) {
  reader r;
  header hd;
  int rc = open_reader(&r, s, len, err, errlen);
  if (rc == KB_HDR_OK && (rc = read_header(&r, &hd)) == KB_HDR_OK) *cfg = hd.cfg;
  free((void *)r.p);
  return rc;
}

int kb_hdr_decode_into(kb_hdr *h, const char *s, size_t len, char *err, size_t errlen) {
  reader r;
  header hd;
  kb_hdr_reset(h);
  int rc = open_reader(&r, s, len, err, errlen);
  if (rc == KB_HDR_OK) rc = read_header(&r, &hd);
  if (rc == KB_HDR_OK) {
    kb_hdr shape = {.cfg = hd.cfg};
    if (!kb_hdr_same_layout(h, &shape))
      rc = set_err(err, errlen, KB_HDR_ELAYOUT, "histogram layouts differ");
    else
      rc = read_buckets(&r, &hd, h);
  }
  if (rc != KB_HDR_OK) kb_hdr_reset(h);
  free((void *)r.p);
  return rc;
}

kb_hdr *kb_hdr_decode(const char *s, size_t len, char *err, size_t errlen) {
  kb_hdr_config cfg;
  if (kb_hdr_decode_config(s, len, &cfg, err, errlen) != KB_HDR_OK) return NULL;
  int rc;
  kb_hdr *h = kb_hdr_new(&cfg, &rc);
  if (!h) {
    set_err(err, errlen, rc, "%s", kb_hdr_strerror(rc));
    return NULL;
  }
  if (kb_hdr_decode_into(h, s, len, err, errlen) != KB_HDR_OK) {
    kb_hdr_free(h);
    return NULL;
  }
  return h;
}
