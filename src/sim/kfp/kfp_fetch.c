/* Pipeline URLs: the spec of a pipeline created from a URL.
 *
 * As KFP does, an http(s) URL is downloaded (kb_kfp_fetch_intercept holds the
 * request until it is). A local path or a file:// URL is read only from
 * inside the folder the simulator was given (kbrun sim --pipeline-dir; the
 * scenario's folder for the embedded one). Whatever the reason a local
 * file is not read (none given, missing, unreadable, outside the folder, a
 * symlink out of it, not a regular file, too large) the answer is the same
 * text, so that the API tells nothing about the file system. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kb/http_client.h"

#include "kb/multipart.h"
#include "kb/yaml.h"
#include "kfp_internal.h"

#define LOCAL_REFUSED                                                                        \
  "cannot read the pipeline spec from that path: this simulator reads local pipeline "     \
  "files only from inside the folder it was given (kbrun sim --pipeline-dir DIR), and "    \
  "that path names no readable pipeline file there; serve the file over http(s) or "       \
  "upload it"
#define FETCH_TIMEOUT_MS 60000

typedef struct kfp_fetch {
  struct kfp_fetch *next;
  kb_sim_kfp *kfp;
  kb_httpd_req *req;
  char *url, *path;    /* the pipeline URL; the API path to handle again */
  kb_http_request *hr; /* in flight; NULL once done */
  char *body;          /* done: the file (owned until kb_kfp_fetch_url takes it) */
  size_t len;
  char *error;         /* done: why there is no file */
} kfp_fetch;

static int is_http(const char *url) {
  return !strncasecmp(url, "http://", 7) || !strncasecmp(url, "https://", 8);
}

int kb_sim_kfp_set_pipeline_dir(kb_sim_kfp *kfp, const char *dir) {
  char real[PATH_MAX];
  struct stat st;
  if (!dir) {
    free(kfp->pipeline_dir);
    kfp->pipeline_dir = NULL;
    return 0;
  }
  if (!realpath(dir, real)) return -errno;
  if (stat(real, &st) != 0) return -errno;
  if (!S_ISDIR(st.st_mode)) return -ENOTDIR;
  char *copy = strdup(real);
  if (!copy) return -ENOMEM;
  free(kfp->pipeline_dir);
  kfp->pipeline_dir = copy;
  return 0;
}

/* The file at path (relative paths from dir) if it resolves to a regular
 * file inside dir; NULL otherwise, whatever the reason. */
static char *read_local(const char *dir, const char *path, size_t *len) {
  char joined[PATH_MAX], real[PATH_MAX];
  if (!dir || !*path) return NULL;
  int n = path[0] == '/' ? snprintf(joined, sizeof joined, "%s", path)
                         : snprintf(joined, sizeof joined, "%s/%s", dir, path);
  if (n < 0 || (size_t)n >= sizeof joined || !realpath(joined, real)) return NULL;
  size_t dl = strlen(dir);
  if (!(dl == 1 && dir[0] == '/') && (strncmp(real, dir, dl) || real[dl] != '/')) return NULL;
  /* realpath resolved every link; O_NOFOLLOW refuses one swapped in since,
   * O_NONBLOCK a FIFO that would hold the loop */
  int fd = open(real, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat st;
  char *buf = NULL;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= (off_t)KFP_MAX_FILE &&
      (buf = malloc((size_t)st.st_size + 1))) {
    size_t got = 0, want = (size_t)st.st_size;
    ssize_t r = 1;
    while (got < want && (r = read(fd, buf + got, want - got)) > 0) got += (size_t)r;
    if (r < 0) {
      free(buf);
      buf = NULL;
    } else {
      buf[got] = 0;
      *len = got;
    }
  }
  close(fd);
  return buf;
}

static kfp_fetch *fetch_of(kb_sim_kfp *kfp, const kb_httpd_req *req) {
  for (kfp_fetch *f = kfp->fetches; f; f = f->next)
    if (f->req == req) return f;
  return NULL;
}

static void fetch_unlink_free(kfp_fetch *f) {
  kfp_fetch **pp = &f->kfp->fetches;
  while (*pp && *pp != f) pp = &(*pp)->next;
  if (*pp) *pp = f->next;
  free(f->url), free(f->path), free(f->body), free(f->error), free(f);
}

/* Replies on error. The result is the caller's. */
char *kb_kfp_fetch_url(kfp_req *r, const char *url, size_t *len, const char *wrap) {
  char ext[900];
  if (!url || !*url) {
    snprintf(ext, sizeof ext, "invalid pipeline spec URL: %s", url ? url : "");
    kb_kfp_error(r, KFP_INVALID_ARGUMENT, ext, "%s: Invalid input error: %s", wrap, ext);
    return NULL;
  }
  if (is_http(url)) {
    kfp_fetch *f = fetch_of(r->kfp, r->http);
    char safe[600];
    kb_http_url_redact(url, safe, sizeof safe);
    if (f && !f->hr && !strcmp(f->url, url) && f->body) {
      char *text = f->body;
      *len = f->len;
      f->body = NULL;
      return text;
    }
    snprintf(ext, sizeof ext, "error fetching pipeline spec from %s - %s", safe,
             f && f->error ? f->error : "the download did not start");
    kb_kfp_error(r, KFP_INVALID_ARGUMENT, ext, "%s: Invalid input error: %s", wrap, ext);
    return NULL;
  }
  const char *path = url;
  if (!strncmp(url, "file://", 7)) {
    path = url + 7;
  } else if (strstr(url, "://")) {
    snprintf(ext, sizeof ext,
             "error fetching pipeline spec from %.300s - unsupported URL scheme: use an http(s) "
             "URL, or upload the file",
             url);
    kb_kfp_error(r, KFP_INVALID_ARGUMENT, ext, "%s: Invalid input error: %s", wrap, ext);
    return NULL;
  }
  char *buf = read_local(r->kfp->pipeline_dir, path, len);
  if (!buf)
    kb_kfp_error(r, KFP_INVALID_ARGUMENT, LOCAL_REFUSED, "%s: Invalid input error: %s", wrap,
              LOCAL_REFUSED);
  return buf;
}

static void on_fetched(kb_http_request *hr, const kb_http_response *resp, void *ud) {
  kfp_fetch *f = ud;
  char msg[700];
  f->hr = NULL;
  if (resp->error) {
    f->error = strdup(resp->message);
  } else if (resp->status != 200) {
    snprintf(msg, sizeof msg, "the server answered HTTP %ld", resp->status);
    f->error = strdup(msg);
  } else if ((f->body = malloc(resp->body_len + 1))) {
    memcpy(f->body, resp->body, resp->body_len);
    f->body[resp->body_len] = 0;
    f->len = resp->body_len;
  }
  if (!f->error && !f->body) f->error = strdup("out of memory");
  kb_http_request_free(hr);
  kb_sim_kfp_handle_path(f->kfp, f->req, f->path); /* answers; kb_kfp_fetch_url takes the body */
  fetch_unlink_free(f);
}

/* The pipeline URL of a create request (v1 CreatePipeline, v2
 * CreatePipelineAndVersion, v1/v2 CreatePipelineVersion), or NULL. */
static const char *body_url(const cJSON *b) {
  static const char *const holders[][2] = {{"url", NULL}, {"package_url", "packageUrl"}};
  const cJSON *pv = cJSON_GetObjectItemCaseSensitive(b, "pipeline_version");
  if (!pv) pv = cJSON_GetObjectItemCaseSensitive(b, "pipelineVersion");
  const cJSON *objs[2] = {b, pv};
  for (int o = 0; o < 2; o++)
    for (int h = 0; h < 2; h++) {
      const cJSON *u = cJSON_GetObjectItemCaseSensitive(objs[o], holders[h][0]);
      if (!u && holders[h][1]) u = cJSON_GetObjectItemCaseSensitive(objs[o], holders[h][1]);
      const cJSON *s = cJSON_GetObjectItemCaseSensitive(u, "pipeline_url");
      if (!s) s = cJSON_GetObjectItemCaseSensitive(u, "pipelineUrl");
      if (cJSON_IsString(s)) return s->valuestring;
    }
  return NULL;
}

int kb_kfp_fetch_intercept(kb_sim_kfp *kfp, kb_httpd_req *req, const char *path) {
  if (fetch_of(kfp, req)) return 0; /* fetched: handled now */
  if (strcmp(kb_httpd_req_method(req), "POST") || !strstr(path, "pipeline")) return 0;
  size_t blen;
  const char *text = kb_httpd_req_body(req, &blen);
  cJSON *b = blen ? cJSON_ParseWithLength(text, blen) : NULL;
  const char *url = body_url(b);
  if (!url || !is_http(url) || kfp->closing) {
    cJSON_Delete(b);
    return 0;
  }
  kfp_fetch *f = calloc(1, sizeof *f);
  if (!f) {
    cJSON_Delete(b);
    return 0; /* kb_kfp_fetch_url answers "the download did not start" */
  }
  f->kfp = kfp;
  f->req = req;
  f->url = strdup(url);
  f->path = strdup(path);
  cJSON_Delete(b);
  f->next = kfp->fetches;
  kfp->fetches = f;
  if (!kfp->fetcher && (kfp->fetcher = kb_http_client_new(kfp->loop, NULL)) &&
      kb_sim_clock(kfp->sim))
    kb_http_client_set_clock(kfp->fetcher, kb_sim_clock(kfp->sim));
  kb_http_options o = KB_HTTP_OPTIONS_INIT;
  o.timeout_ms = FETCH_TIMEOUT_MS;
  o.follow_redirects = 1; /* as Go's http.Get in KFP's server */
  kb_http_request *hr = f->url && f->path && kfp->fetcher
                            ? kb_http_request_new(kfp->fetcher, "GET", f->url)
                            : NULL;
  if (hr && !kb_http_request_set_options(hr, &o) && !kb_http_request_set_max_body(hr, KFP_MAX_FILE) &&
      !kb_http_request_start(hr, on_fetched, f)) {
    f->hr = hr;
    return 1;
  }
  if (hr) kb_http_request_free(hr);
  fetch_unlink_free(f);
  return 0; /* handled now: kb_kfp_fetch_url answers "the download did not start" */
}

void kb_kfp_fetch_free(kb_sim_kfp *kfp) {
  static const char body[] = "{\"code\":14,\"message\":\"the simulator is shutting down\"}";
  static const kb_httpd_header h[] = {{"Content-Type", "application/json"}};
  while (kfp->fetches) {
    kfp_fetch *f = kfp->fetches;
    if (f->hr) kb_http_request_cancel(f->hr);
    kb_httpd_respond(f->req, 503, h, 1, body, sizeof body - 1);
    fetch_unlink_free(f);
  }
  if (kfp->fetcher) kb_http_client_free(kfp->fetcher);
  kfp->fetcher = NULL;
  free(kfp->pipeline_dir);
  kfp->pipeline_dir = NULL;
}

