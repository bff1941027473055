/* A log-linear ("HDR") histogram of non-negative integer values.
 *
 * Values are integer counts of a unit the caller chooses (kb.hist uses units
 * of its `lowest`, e.g. microseconds; the simulator can use the same). The
 * layout is fixed at creation by `highest` and `digits`:
 *
 *   - S = the smallest power of two >= 2 * 10^digits sub-buckets, H = S / 2;
 *   - values 0 .. S-1 each get their own counter (exact);
 *   - every further power-of-two range [H * 2^b, S * 2^b) is split into H
 *     counters of width 2^b.
 *
 * So a value is known to within a relative error of 1 / H <= 10^-digits, and
 * memory is about (log2(highest / S) + 2) * H counters, e.g. 23220 counters
 * (181 KiB) for 1 us .. 1 h with 3 digits.
 *
 * Values above `highest` are recorded as `highest` and also counted in
 * `saturated`, so a report can say how much of the tail was cut. min and max
 * are the exact recorded values (after that clamping); mean and stddev are
 * computed from the counters (each counted value taken as the middle of its
 * bucket, clipped to [min, max]), so they are exact for values below S and
 * otherwise within half a bucket (10^-digits / 2). Two histograms with
 * the same layout merge exactly, and encode/decode round-trips every counter.
 *
 * Functions returning int give 0 on success or a negative KB_HDR_E* code.
 * Nothing here is thread-safe: one histogram, one thread at a time. */
#ifndef KB_HDR_H
#define KB_HDR_H

#include <stddef.h>
#include <stdint.h>

enum {
  KB_HDR_OK = 0,
  KB_HDR_EINVAL = -1,    /* bad layout, negative value, count or interval */
  KB_HDR_ENOMEM = -2,
  KB_HDR_EOVERFLOW = -3, /* the total count would exceed INT64_MAX */
  KB_HDR_ELAYOUT = -4,   /* merge/decode into a histogram of another layout */
  KB_HDR_ECORRUPT = -5,  /* decode: malformed or inconsistent encoding */
};

/* Limits of a layout. Anything needing more counters than KB_HDR_MAX_COUNTS
 * (32 MiB) is refused, so a decoded header can never demand a huge array. */
#define KB_HDR_MAX_DIGITS 5
#define KB_HDR_MAX_HIGHEST (INT64_C(1) << 62)
#define KB_HDR_MAX_COUNTS (INT32_C(1) << 22)

typedef struct kb_hdr_config {
  int64_t highest; /* largest value tracked, in units: 2 .. KB_HDR_MAX_HIGHEST */
  int digits;      /* significant decimal digits: 1 .. KB_HDR_MAX_DIGITS */
  double unit;     /* what one unit means (kb.hist: seconds per unit). Not
                      used in arithmetic: carried by encode/decode and compared
                      by merge. Must be finite and > 0. */
} kb_hdr_config;

typedef struct kb_hdr {
  kb_hdr_config cfg;
  int sub_half_magnitude; /* log2(H) */
  int64_t sub_mask;       /* S - 1 */
  int32_t counts_len;     /* index of `highest` + 1 */
  int owns_counts;
  int64_t total;          /* sum of all counters */
  int64_t saturated;      /* how many of them were above `highest` */
  int64_t min, max;       /* exact; min = INT64_MAX, max = -1 when empty */
  int64_t *counts;
} kb_hdr;

/* Why cfg is not a valid layout (a static message), or NULL if it is. */
const char *kb_hdr_config_problem(const kb_hdr_config *cfg);
/* Bytes of counters a layout needs, 0 if the layout is invalid. */
size_t kb_hdr_counts_size(const kb_hdr_config *cfg);

/* Initialises *h with counters it allocates (freed by kb_hdr_release), or in
 * `counts` (kb_hdr_counts_size(cfg) bytes, int64-aligned) owned by the
 * caller, e.g. inside a Lua userdata. */
int kb_hdr_init(kb_hdr *h, const kb_hdr_config *cfg);
int kb_hdr_init_in(kb_hdr *h, const kb_hdr_config *cfg, int64_t *counts);
void kb_hdr_release(kb_hdr *h);
/* Heap-allocated histogram; NULL with *err set (err may be NULL). */
kb_hdr *kb_hdr_new(const kb_hdr_config *cfg, int *err);
void kb_hdr_free(kb_hdr *h);
void kb_hdr_reset(kb_hdr *h);
const char *kb_hdr_strerror(int code);

/* Adds `count` occurrences of `value` (both >= 0). */
int kb_hdr_record(kb_hdr *h, int64_t value, int64_t count);
/* Coordinated-omission correction, as HdrHistogram's
 * recordValueWithExpectedInterval: records value, then value - interval,
 * value - 2 * interval, ... for as long as the back-filled value is
 * >= interval, each `count` times. interval 0 means no correction. The
 * back-fill costs O(buckets it spans), not O(values). */
int kb_hdr_record_corrected(kb_hdr *h, int64_t value, int64_t count, int64_t interval);

/* Statistics. min/max/percentile are 0 and mean/stddev 0.0 when empty. */
int64_t kb_hdr_min(const kb_hdr *h);
int64_t kb_hdr_max(const kb_hdr *h);
double kb_hdr_mean(const kb_hdr *h);
double kb_hdr_stddev(const kb_hdr *h); /* population standard deviation */
/* The value below which p percent (0..100, clamped) of the values fall:
 * the first bucket where the cumulative count reaches
 * rank = max(1, ceil(p / 100 * total)), reported as that bucket's highest
 * equivalent value, capped at the exact max (so p = 100 gives max).
 * ceil is taken with a relative tolerance of 1e-12, so that a decimal p such
 * as 99.9 that is not exact in binary does not push the rank one too far. */
int64_t kb_hdr_value_at_percentile(const kb_hdr *h, double p);

/* The bucket holding `value` (0 <= value <= highest) covers lowest..highest
 * equivalent values, inclusive. */
int64_t kb_hdr_lowest_equivalent(const kb_hdr *h, int64_t value);
int64_t kb_hdr_highest_equivalent(const kb_hdr *h, int64_t value);
int kb_hdr_same_layout(const kb_hdr *a, const kb_hdr *b);

/* dst += src. Requires the same layout (KB_HDR_ELAYOUT otherwise); on error
 * dst is unchanged. */
int kb_hdr_merge(kb_hdr *dst, const kb_hdr *src);

/* Non-empty buckets in increasing order:
 *   kb_hdr_iter it; kb_hdr_iter_init(&it, h);
 *   while (kb_hdr_iter_next(&it)) use(it.low, it.high, it.count);
 * The histogram must not change during the iteration. */
typedef struct kb_hdr_iter {
  const kb_hdr *h;
  int32_t next, end;  /* counter indices still to visit */
  int64_t low, high;  /* current bucket: values low..high inclusive */
  int64_t count;
} kb_hdr_iter;

void kb_hdr_iter_init(kb_hdr_iter *it, const kb_hdr *h);
int kb_hdr_iter_next(kb_hdr_iter *it);

/* Portable encoding: base64 (RFC 4648, padded) of
 *   "KBH" 0x01, varint digits, varint highest, unit (binary64 little endian),
 *   varint total, varint saturated, [varint min, varint max if total > 0],
 *   varint n, n x (varint gap, varint count)
 * where the pairs are the non-empty counters in order and gap is the number
 * of empty counters skipped since the previous one. Varints are unsigned
 * LEB128. *out is NUL-terminated, malloc'd, freed by the caller. */
int kb_hdr_encode(const kb_hdr *h, char **out, size_t *len);

/* Decoding validates everything (characters, lengths, layout, every count,
 * that counts add up to total, min/max/saturated consistency, no trailing
 * bytes) and on failure writes a one-line reason to err. */
int kb_hdr_decode_config(const char *s, size_t len, kb_hdr_config *cfg, char *err,
                         size_t errlen);
/* h must already have the encoded layout; it is reset, then filled. On
 * error h is left empty. */
int kb_hdr_decode_into(kb_hdr *h, const char *s, size_t len, char *err, size_t errlen);
/* Both steps into a new heap histogram; NULL on error. */
kb_hdr *kb_hdr_decode(const char *s, size_t len, char *err, size_t errlen);

#endif
