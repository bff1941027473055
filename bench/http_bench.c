/* http_bench: closed-loop HTTP GET load over kb_http_client in C, no Lua:
 * the floor of kbrun's client path (bench/http/run.sh runs it as "kb_c"
 * beside wrk and kbrun_load.lua). `connections` loops each start the next
 * GET from the done callback of the previous one, for `duration` seconds;
 * prints one summary line in the format of bench/http/kbrun_load.lua:
 *
 *   http_bench requests=812345 errors=0 seconds=10.00 rps=81234 p50_ms=0.71 p99_ms=1.90
 *
 *   build/bench/http_bench URL [connections=64] [duration=10]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "kb/hdr.h"
#include "kb/http_client.h"

typedef struct {
  kb_http_client *c;
  const char *url;
  uint64_t stop_ns;
  uint64_t requests, errors;
  kb_hdr *lat; /* microseconds */
} bench;

typedef struct {
  bench *b;
  uint64_t t0;
} loop_slot;

static void start_one(loop_slot *s);

static void on_done(kb_http_request *r, const kb_http_response *resp, void *ud) {
  loop_slot *s = ud;
  bench *b = s->b;
  uint64_t t1 = uv_hrtime();
  if (!resp->error && resp->status == 200) {
    b->requests++;
    kb_hdr_record(b->lat, (int64_t)((t1 - s->t0) / 1000), 1);
  } else if (b->errors++ == 0) {
    fprintf(stderr, "http_bench: first error: %s (status %ld)\n",
            resp->error ? resp->message : "", resp->status);
  }
  kb_http_request_free(r);
  if (t1 < b->stop_ns) start_one(s);
}

static void start_one(loop_slot *s) {
  bench *b = s->b;
  kb_http_request *r = kb_http_request_new(b->c, "GET", b->url);
  s->t0 = uv_hrtime();
  if (!r || kb_http_request_start(r, on_done, s) != 0) {
    fprintf(stderr, "http_bench: cannot start a request\n");
    if (r) kb_http_request_free(r);
    b->errors++;
  }
}

static long arg_long(int argc, char **argv, const char *key, long def) {
  size_t n = strlen(key);
  for (int i = 2; i < argc; i++)
    if (strncmp(argv[i], key, n) == 0 && argv[i][n] == '=') return strtol(argv[i] + n + 1, NULL, 10);
  return def;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: http_bench URL [connections=64] [duration=10]\n");
    return 2;
  }
  long conns = arg_long(argc, argv, "connections", 64);
  long duration = arg_long(argc, argv, "duration", 10);
  if (conns < 1 || duration < 1) {
    fprintf(stderr, "http_bench: connections and duration must be >= 1\n");
    return 2;
  }
  kb_hdr_config cfg = {.highest = 60 * 1000 * 1000, .digits = 3, .unit = 1e-6};
  int err = 0;
  bench b = {.url = argv[1], .lat = kb_hdr_new(&cfg, &err)};
  uv_loop_t loop;
  uv_loop_init(&loop);
  if (!b.lat || !(b.c = kb_http_client_new(&loop, NULL))) {
    fprintf(stderr, "http_bench: out of memory\n");
    return 1;
  }
  loop_slot *slots = calloc((size_t)conns, sizeof *slots);
  if (!slots) return 1;
  uint64_t started = uv_hrtime();
  b.stop_ns = started + (uint64_t)duration * 1000000000u;
  for (long i = 0; i < conns; i++) {
    slots[i].b = &b;
    start_one(&slots[i]);
  }
  uv_run(&loop, UV_RUN_DEFAULT); /* ends when the last loop stops */
  double seconds = (double)(uv_hrtime() - started) / 1e9;
  kb_http_client_free(b.c);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  printf("http_bench requests=%llu errors=%llu seconds=%.2f rps=%.0f p50_ms=%.3f p99_ms=%.3f\n",
         (unsigned long long)b.requests, (unsigned long long)b.errors, seconds,
         (double)b.requests / seconds, (double)kb_hdr_value_at_percentile(b.lat, 50) / 1e3,
         (double)kb_hdr_value_at_percentile(b.lat, 99) / 1e3);
  kb_hdr_free(b.lat);
  free(slots);
  return b.requests ? 0 : 1;
}
