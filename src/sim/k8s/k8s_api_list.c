/* JSON lists written out in slices (kb_k8s_list_snap): a list of 100,000
 * pods is 360 MB of JSON, and the loop serves nobody while one slice is
 * matched or printed, so each loop turn does one slice of LIST_SLICE objects
 * and the others' requests are answered in between. A list of one slice or
 * less is answered at once with a Content-Length, as every list was; a
 * longer one is streamed (chunked), waiting for the client when more than
 * LIST_QUEUE bytes are queued for it. The snapshot holds the states, not
 * copies: the list is the store as of its arrival. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "k8s_api_internal.h"
#include "kb/buf.h"

#define LIST_SLICE 500          /* objects matched or written per loop turn */
#define LIST_QUEUE (4u << 20)   /* bytes queued for the client before we wait */

struct klist {
  kb_k8s_api *api;
  kb_httpd_req *req;
  kb_k8s_list_snap *snap;
  uv_idle_t idle;
  kb_buf buf;
  int matched, begun, waiting, ended;
  klist *prev, *next;
};

static const kb_httpd_header list_headers[] = {{"Content-Type", "application/json"},
                                               {"Cache-Control", "no-cache, private"}};

static void list_closed(uv_handle_t *h) {
  klist *l = h->data;
  kb_k8s_api *api = l->api;
  free(l);
  api->handles--;
  kb_k8s_api_maybe_free(api);
}

/* Ends the job: the response is finished (end), cut (reset) or the client
 * is gone (neither). */
static void list_finish(klist *l, int how) {
  if (l->ended) return;
  l->ended = 1;
  kb_k8s_api *api = l->api;
  if (how != 0) {
    kb_httpd_req_on_abort(l->req, NULL, NULL);
    if (how > 0) kb_httpd_stream_end(l->req);
    else kb_httpd_reset(l->req, NULL, 0);
  }
  kb_k8s_list_snap_free(l->snap);
  l->snap = NULL;
  kb_buf_free(&l->buf);
  if (l->prev) l->prev->next = l->next;
  else api->lists = l->next;
  if (l->next) l->next->prev = l->prev;
  uv_idle_stop(&l->idle);
  uv_close((uv_handle_t *)&l->idle, list_closed);
}

static void list_gone(kb_httpd_req *req, void *ud) {
  (void)req;
  list_finish(ud, 0);
}

static void list_turn(uv_idle_t *h);

static void list_drained(kb_httpd_req *req, void *ud) {
  (void)req;
  klist *l = ud;
  if (l->ended || !l->waiting) return;
  l->waiting = 0;
  uv_idle_start(&l->idle, list_turn);
}

static double thread_cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void list_slice(klist *l);

/* One slice, its CPU time kept when the longest (kb_k8s_api_longest_slice). */
static void list_turn(uv_idle_t *h) {
  klist *l = h->data;
  kb_k8s_api *api = l->api;
  double t0 = thread_cpu();
  list_slice(l);
  double dt = thread_cpu() - t0;
  if (dt > api->longest_slice) api->longest_slice = dt;
}

/* Matching, or writing. */
static void list_slice(klist *l) {
  l->api->list_slices++;
  if (!l->matched) {
    int rc = kb_k8s_list_snap_match(l->snap, LIST_SLICE);
    if (rc < 0) return list_finish(l, -1);
    l->matched = rc == 1;
    return;
  }
  int rc = kb_k8s_list_snap_write(l->snap, &l->buf, LIST_SLICE);
  if (rc < 0) return list_finish(l, -1);
  if (!l->begun) {
    if (kb_httpd_stream_begin(l->req, 200, list_headers, 2)) return list_finish(l, -1);
    l->begun = 1;
  }
  if (l->buf.len && kb_httpd_stream_write(l->req, l->buf.data, l->buf.len))
    return list_finish(l, -1);
  kb_buf_clear(&l->buf);
  if (rc == 1) return list_finish(l, 1);
  if (kb_httpd_req_write_queue(l->req) > LIST_QUEUE &&
      kb_httpd_req_on_drain(l->req, list_drained, l) == 1) {
    l->waiting = 1;
    uv_idle_stop(&l->idle);
  }
}

/* 1 when answered at once (a short list, an error), 0 when the rest is
 * left to a job. */
static int answer_now(kb_k8s_api *api, kb_httpd_req *req, kb_k8s_list_snap *s) {
  int rc = kb_k8s_list_snap_match(s, LIST_SLICE);
  if (rc == 0) return 0;
  if (rc < 0) {
    kb_k8s_fail(req, NULL, 500, "InternalError", "out of memory");
    return 1;
  }
  if (kb_k8s_list_snap_items(s) > LIST_SLICE) return 0;
  kb_buf b = KB_BUF_INIT;
  if (kb_k8s_list_snap_write(s, &b, LIST_SLICE) != 1)
    kb_k8s_fail(req, NULL, 500, "InternalError", "out of memory");
  else
    kb_httpd_respond(req, 200, list_headers, 2, b.data, b.len);
  kb_buf_free(&b);
  (void)api;
  return 1;
}

void kb_k8s_list_sliced(kb_k8s_api *api, kb_httpd_req *req, const kb_k8s_res *res,
                        const kb_k8s_list_opts *opts) {
  kb_k8s_error err;
  kb_k8s_list_snap *s = kb_k8s_list_snapshot(api->st, res, opts, &err);
  if (!s) {
    kb_k8s_send_error(req, &err, res);
    return;
  }
  int matched = 0;
  if (answer_now(api, req, s)) {
    kb_k8s_list_snap_free(s);
    return;
  }
  matched = kb_k8s_list_snap_match(s, 0) == 1;
  klist *l = calloc(1, sizeof *l);
  if (!l || uv_idle_init(api->loop, &l->idle)) {
    free(l);
    kb_k8s_list_snap_free(s);
    kb_k8s_fail(req, res, 500, "InternalError", "out of memory");
    return;
  }
  l->api = api;
  l->req = req;
  l->snap = s;
  l->matched = matched;
  kb_buf_init(&l->buf);
  l->idle.data = l;
  api->handles++;
  l->next = api->lists;
  if (api->lists) api->lists->prev = l;
  api->lists = l;
  if (kb_httpd_req_on_abort(req, list_gone, l)) {
    list_finish(l, 0);
    return;
  }
  uv_idle_start(&l->idle, list_turn);
}

void kb_k8s_lists_end(kb_k8s_api *api) {
  while (api->lists) list_finish(api->lists, -1);
}
