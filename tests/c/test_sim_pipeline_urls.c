/* Pipeline URLs in the simulator's KFP API (src/sim/kfp/kfp_fetch.c): the
 * simulator is not a file server. Local paths and file:// URLs are read
 * only inside the folder it was given, symlinks and ../ cannot lead out,
 * and every refusal has the same text whether the file exists or not;
 * http:// URLs are fetched (here from a loopback server on a thread of
 * the test), as KFP does. */
#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kbtest.h"
#include "kfp_test_util.h"

#define HELLO "../specs/kfp/pipelines/v2ir_hello_world.yaml"
#define SPEED 6000.0

/* The refusal, as details[0].message (the external message). */
static const char REFUSED[] =
    "cannot read the pipeline spec from that path: this simulator reads local pipeline files "
    "only from inside the folder it was given (kbrun sim --pipeline-dir DIR), and that path "
    "names no readable pipeline file there; serve the file over http(s) or upload it";

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  *len = fread(b, 1, (size_t)n, f);
  b[*len] = 0;
  fclose(f);
  return b;
}

static void put(const char *path, const char *data, size_t len) {
  FILE *f = fopen(path, "wb");
  KB_CHECK(f != NULL);
  if (!f) return;
  fwrite(data, 1, len, f);
  fclose(f);
}

/* ---- a loopback file server: answers `count` requests, one per connection ---- */

typedef struct web {
  int fd, port, count;
  const char *body; /* served at /hello.yaml; anything else is a 404 */
  size_t len;
  pthread_t th;
} web;

static void *web_main(void *arg) {
  web *w = arg;
  for (int i = 0; i < w->count; i++) {
    int c = accept(w->fd, NULL, NULL); /* SO_RCVTIMEO bounds the wait */
    if (c < 0) break;
    char req[4096];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof req - 1 && (r = recv(c, req + n, sizeof req - 1 - n, 0)) > 0) {
      n += (size_t)r;
      req[n] = 0;
      if (strstr(req, "\r\n\r\n")) break;
    }
    req[n] = 0;
    char head[256];
    int ok = !strncmp(req, "GET /hello.yaml ", 16);
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                      ok ? "200 OK" : "404 Not Found", ok ? w->len : 10);
    send(c, head, (size_t)hl, MSG_NOSIGNAL);
    send(c, ok ? w->body : "not found\n", ok ? w->len : 10, MSG_NOSIGNAL);
    close(c);
  }
  return NULL;
}

static int web_start(web *w) {
  w->fd = socket(AF_INET, SOCK_STREAM, 0);
  struct timeval tv = {10, 0};
  setsockopt(w->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  if (bind(w->fd, (struct sockaddr *)&a, sizeof a) || listen(w->fd, 8) ||
      getsockname(w->fd, (struct sockaddr *)&a, &al))
    return -1;
  w->port = ntohs(a.sin_port);
  return pthread_create(&w->th, NULL, web_main, w);
}

/* ---- helpers ---- */

/* POST /apis/v1beta1/pipelines {name, url: {pipeline_url}}; the reply. */
static kt_resp create_v1(kt_server *s, const char *name, const char *url) {
  char body[PATH_MAX + 200];
  snprintf(body, sizeof body, "{\"name\":\"%s\",\"url\":{\"pipeline_url\":\"%s\"}}", name, url);
  return kt_json(s, "POST", "/apis/v1beta1/pipelines", body);
}

static void expect_refused(kt_server *s, const char *name, const char *url) {
  kt_resp r = create_v1(s, name, url);
  KB_CHECK(r.status == 400);
  KB_CHECK(kt_num(r.json, "code") == 3);
  KB_CHECK_STR(kt_str(r.json, "details.0.message"), REFUSED);
  char want[1024];
  snprintf(want, sizeof want, "Failed to create a pipeline (v1beta1): Invalid input error: %s",
           REFUSED);
  KB_CHECK_STR(kt_str(r.json, "message"), want);
  if (r.status != 400) fprintf(stderr, "  (for %s)\n", url);
  kt_free(&r);
}

static void expect_created(kt_server *s, const char *name, const char *url) {
  kt_resp r = create_v1(s, name, url);
  KB_CHECK(r.status == 200);
  KB_CHECK_STR(kt_str(r.json, "name"), name);
  if (r.status != 200) fprintf(stderr, "  (for %s: %s)\n", url, r.body);
  kt_free(&r);
}

/* ---- tests ---- */

static char dir[64], inside[128], outside[128];

static void make_tree(void) {
  snprintf(dir, sizeof dir, "/tmp/kb_pipeline_urls_XXXXXX");
  KB_CHECK(mkdtemp(dir) != NULL);
  size_t len;
  char *hello = slurp(HELLO, &len);
  KB_CHECK(hello != NULL);
  char p[PATH_MAX];
  snprintf(inside, sizeof inside, "%s/in", dir);
  snprintf(outside, sizeof outside, "%s/out", dir);
  mkdir(inside, 0755);
  mkdir(outside, 0755);
  snprintf(p, sizeof p, "%s/sub", inside);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/hello.yaml", inside);
  put(p, hello, len);
  snprintf(p, sizeof p, "%s/sub/deep.yaml", inside);
  put(p, hello, len);
  snprintf(p, sizeof p, "%s/secret.yaml", outside); /* pipeline-shaped, outside */
  put(p, hello, len);
  char t[PATH_MAX];
  snprintf(p, sizeof p, "%s/escape.yaml", inside); /* a symlink out of the folder */
  snprintf(t, sizeof t, "%s/secret.yaml", outside);
  KB_CHECK(symlink(t, p) == 0);
  snprintf(p, sizeof p, "%s/alias.yaml", inside); /* a symlink that stays inside */
  KB_CHECK(symlink("sub/deep.yaml", p) == 0);
  snprintf(p, sizeof p, "%s/sub/outdir", inside); /* a folder symlink out */
  KB_CHECK(symlink(outside, p) == 0);
  free(hello);
}

static void remove_tree(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  KB_CHECK(system(cmd) == 0);
}

static void test_local_paths(void) {
  kt_server *s = kt_start_dir("fast", SPEED, inside);
  KB_CHECK(s != NULL);
  if (!s) return;
  char url[PATH_MAX + 16];
  /* An existing file outside and a missing one: the same answer. */
  expect_refused(s, "passwd", "/etc/passwd");
  expect_refused(s, "missing", "/nonexistent/p.yaml");
  snprintf(url, sizeof url, "%s/missing.yaml", inside);
  expect_refused(s, "missing-inside", url);
  snprintf(url, sizeof url, "file://%s/secret.yaml", outside);
  expect_refused(s, "outside", url);
  expect_refused(s, "dotdot", "../out/secret.yaml");
  snprintf(url, sizeof url, "%s/sub/../../out/secret.yaml", inside);
  expect_refused(s, "dotdot-abs", url);
  expect_refused(s, "symlink", "escape.yaml");
  expect_refused(s, "symlink-dir", "sub/outdir/secret.yaml");
  expect_refused(s, "a-folder", "sub");
  expect_refused(s, "devnull", "/dev/null");
  /* Inside: absolute, file://, relative to the folder, through a link that stays in. */
  snprintf(url, sizeof url, "%s/hello.yaml", inside);
  expect_created(s, "abs", url);
  snprintf(url, sizeof url, "file://%s/sub/deep.yaml", inside);
  expect_created(s, "file-url", url);
  expect_created(s, "relative", "hello.yaml");
  expect_created(s, "alias", "alias.yaml");
  /* v2 CreatePipelineAndVersion and v2 CreatePipelineVersion refuse alike. */
  kt_resp r = kt_json(s, "POST", "/apis/v2beta1/pipelines/create",
                      "{\"pipeline\":{\"display_name\":\"v2\"},\"pipeline_version\":{"
                      "\"package_url\":{\"pipeline_url\":\"/etc/passwd\"}}}");
  KB_CHECK(r.status == 400);
  KB_CHECK_STR(kt_str(r.json, "details.0.message"), REFUSED);
  kt_free(&r);
  r = kt_json(s, "POST", "/apis/v2beta1/pipelines", "{\"display_name\":\"bare\"}");
  KB_CHECK(r.status == 200);
  char path[256];
  snprintf(path, sizeof path, "/apis/v2beta1/pipelines/%s/versions", kt_str(r.json, "pipeline_id"));
  kt_free(&r);
  r = kt_json(s, "POST", path,
              "{\"display_name\":\"v\",\"package_url\":{\"pipeline_url\":\"../out/secret.yaml\"}}");
  KB_CHECK(r.status == 400);
  KB_CHECK_STR(kt_str(r.json, "details.0.message"), REFUSED);
  kt_free(&r);
  kt_stop(s);

  /* No folder given (the standalone server's default): nothing local is read. */
  s = kt_start_dir("fast", SPEED, NULL);
  KB_CHECK(s != NULL);
  if (!s) return;
  snprintf(url, sizeof url, "%s/hello.yaml", inside);
  expect_refused(s, "no-dir", url);
  kt_stop(s);
}

static void test_http_fetch(void) {
  size_t len;
  char *hello = slurp(HELLO, &len);
  KB_CHECK(hello != NULL);
  web w = {.count = 3, .body = hello, .len = len};
  KB_CHECK(web_start(&w) == 0);
  kt_server *s = kt_start_dir("fast", SPEED, NULL); /* no local files: http only */
  KB_CHECK(s != NULL);
  if (!s) return;
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/hello.yaml", w.port);
  kt_resp r = create_v1(s, "web", url);
  KB_CHECK(r.status == 200);
  char id[64] = "";
  snprintf(id, sizeof id, "%s", kt_str(r.json, "id") ? kt_str(r.json, "id") : "");
  KB_CHECK_STR(kt_str(r.json, "default_version.name"), "web");
  kt_free(&r);
  /* The template is the file the server sent. */
  char path[160];
  snprintf(path, sizeof path, "/apis/v1beta1/pipelines/%s/templates", id);
  r = kt_json(s, "GET", path, NULL);
  KB_CHECK(r.status == 200);
  const char *tpl = kt_str(r.json, "template");
  KB_CHECK(tpl && strstr(tpl, "pipelineInfo:\n  name: echo\n") && strstr(tpl, "comp-echo"));
  kt_free(&r);
  /* v2 CreatePipelineAndVersion from the same URL */
  char body[512];
  snprintf(body, sizeof body,
           "{\"pipeline\":{\"display_name\":\"web2\"},\"pipeline_version\":{\"package_url\":{"
           "\"pipeline_url\":\"%s\"}}}",
           url);
  r = kt_json(s, "POST", "/apis/v2beta1/pipelines/create", body);
  KB_CHECK(r.status == 200);
  KB_CHECK_STR(kt_str(r.json, "display_name"), "web2");
  kt_free(&r);
  /* A 404 from the file server is KFP's fetch error, with the URL. */
  snprintf(url, sizeof url, "http://127.0.0.1:%d/nope.yaml", w.port);
  r = create_v1(s, "web404", url);
  KB_CHECK(r.status == 400);
  char want[256];
  snprintf(want, sizeof want, "error fetching pipeline spec from %s - the server answered HTTP 404",
           url);
  KB_CHECK_STR(kt_str(r.json, "details.0.message"), want);
  kt_free(&r);
  kt_stop(s);
  pthread_join(w.th, NULL);
  close(w.fd);
  free(hello);
}

/* The other C tests' servers read the repository's samples (kt_start). */
static void test_repo_dir(void) {
  kt_server *s = kt_start("fast", SPEED);
  KB_CHECK(s != NULL);
  if (!s) return;
  char real[PATH_MAX], url[PATH_MAX + 16];
  KB_CHECK(realpath(HELLO, real) != NULL);
  snprintf(url, sizeof url, "file://%s", real);
  expect_created(s, "repo", url);
  expect_refused(s, "passwd", "/etc/passwd");
  kt_stop(s);
}

int main(void) {
  (void)kt_sleep_ms;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  KB_RUN(test_repo_dir);
  make_tree();
  KB_RUN(test_local_paths);
  KB_RUN(test_http_fetch);
  remove_tree();
  curl_global_cleanup();
  return kb_test_report();
}
