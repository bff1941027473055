/* The KFP REST API of the simulator, over real HTTP on loopback: the
 * benchmark notebook's v1 flow, the v2 flow with uploads, paging, errors,
 * terminate/archive, recurring runs, metrics and healthz. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "kb/multipart.h"
#include "kbtest.h"
#include "kfp_test_util.h"

#define SPEED 6000.0
#define TAXI "../scenarios/pipelines/taxi_updated_pool.yaml"
#define HELLO "../../shared/specs/kfp/pipelines/v2ir_hello_world.yaml"

/* internals of src/sim/kfp_*.c */
double kfp_cron_next(const char *expr, double after);
int64_t kfp_time_parse(const char *s);

static char *file_url(const char *rel) {
  static char buf[PATH_MAX + 8];
  char path[PATH_MAX];
  if (!realpath(rel, path)) return NULL;
  snprintf(buf, sizeof buf, "file://%s", path);
  return buf;
}

static int finished_v1(const char *status) {
  return status && (!strcmp(status, "Succeeded") || !strcmp(status, "Failed") ||
                    !strcmp(status, "Skipped") || !strcmp(status, "Error"));
}

static int finished_v2(const char *state) {
  return state && (!strcmp(state, "SUCCEEDED") || !strcmp(state, "FAILED") ||
                   !strcmp(state, "SKIPPED") || !strcmp(state, "CANCELED"));
}

/* Polls a v2 run until it is finished (bounded); returns its final state. */
static char *wait_v2(kt_server *s, const char *id) {
  char path[200], *state = NULL;
  snprintf(path, sizeof path, "/apis/v2beta1/runs/%s", id);
  for (int i = 0; i < 1500 && !state; i++) {
    kt_resp r = kt_json(s, "GET", path, NULL);
    const char *st = kt_str(r.json, "state");
    if (finished_v2(st)) state = strdup(st);
    kt_free(&r);
    if (!state) kt_sleep_ms(10);
  }
  return state;
}

static void test_healthz(void) {
  kt_server *s = kt_start("fast", SPEED);
  KB_CHECK(s != NULL);
  if (!s) return;
  kt_resp r = kt_json(s, "GET", "/apis/v2beta1/healthz", NULL);
  KB_CHECK(r.status == 200);
  KB_CHECK_STR(r.body, "{\"commit_sha\":\"7b70c7b95f6832772efd6fd0029a4024491a0f44\","
                       "\"tag_name\":\"2.17.0\",\"multi_user\":false,\"pipeline_store\":\"database\"}");
  kt_free(&r);
  r = kt_json(s, "GET", "/apis/v1beta1/healthz", NULL);
  KB_CHECK(r.status == 200);
  KB_CHECK(cJSON_IsFalse(cJSON_GetObjectItem(r.json, "multi_user")));
  KB_CHECK(cJSON_GetObjectItem(r.json, "pipeline_store") == NULL);
  kt_free(&r);
  kt_stop(s);
}

/* run_service_api.ipynb, in v1, against the calibrated taxi pipeline. */
static void test_v1_notebook_flow(void) {
  kt_server *s = kt_start("fast", SPEED);
  if (!s) {
    KB_CHECK(0);
    return;
  }
  char body[4096], path[512];
  snprintf(body, sizeof body, "{\"name\":\"pipeline-abc\",\"url\":{\"pipeline_url\":\"%s\"}}",
           file_url(TAXI));
  kt_resp p = kt_json(s, "POST", "/apis/v1beta1/pipelines", body);
  KB_CHECK(p.status == 200);
  const char *pid = kt_str(p.json, "id"), *vid = kt_str(p.json, "default_version.id");
  KB_CHECK(pid && vid);
  KB_CHECK_STR(kt_str(p.json, "name"), "pipeline-abc");
  KB_CHECK_STR(kt_str(p.json, "default_version.resource_references.0.key.type"), "PIPELINE");
  KB_CHECK_STR(kt_str(p.json, "default_version.resource_references.0.key.id"), pid);
  KB_CHECK_STR(kt_str(p.json, "parameters.1.name"), "data-root");
  kt_resp e = kt_json(s, "POST", "/apis/v1beta1/experiments", "{\"name\":\"experiment-abc\"}");
  KB_CHECK(e.status == 200);
  const char *eid = kt_str(e.json, "id");
  KB_CHECK_STR(kt_str(e.json, "storage_state"), "STORAGESTATE_AVAILABLE");
  char ids[5][64];
  for (int i = 0; i < 5; i++) {
    snprintf(body, sizeof body,
             "{\"name\":\"run-%d\",\"resource_references\":[{\"key\":{\"id\":\"%s\",\"type\":"
             "\"EXPERIMENT\"},\"relationship\":\"OWNER\"},{\"key\":{\"id\":\"%s\",\"type\":"
             "\"PIPELINE_VERSION\"},\"relationship\":\"CREATOR\"}],\"pipeline_spec\":{"
             "\"parameters\":[{\"name\":\"pipeline-root\",\"value\":\"gs://x/{{workflow.uid}}\"},"
             "{\"name\":\"data-root\",\"value\":\"gs://x/data\"},{\"name\":\"module-file\","
             "\"value\":\"gs://x/taxi_utils.py\"}]}}",
             i, eid ? eid : "", vid ? vid : "");
    kt_resp r = kt_json(s, "POST", "/apis/v1beta1/runs", body);
    KB_CHECK(r.status == 200);
    snprintf(ids[i], sizeof ids[i], "%s", kt_str(r.json, "run.id") ? kt_str(r.json, "run.id") : "");
    KB_CHECK_STR(kt_str(r.json, "run.status"), "Pending");
    KB_CHECK_STR(kt_str(r.json, "run.finished_at"), "1970-01-01T00:00:00Z");
    KB_CHECK_STR(kt_str(r.json, "run.resource_references.0.key.type"), "EXPERIMENT");
    KB_CHECK_STR(kt_str(r.json, "run.resource_references.0.name"), "experiment-abc");
    KB_CHECK_STR(kt_str(r.json, "run.resource_references.1.key.id"), vid);
    KB_CHECK_STR(kt_str(r.json, "run.pipeline_spec.parameters.1.value"), "gs://x/data");
    KB_CHECK(kt_str(r.json, "pipeline_runtime.workflow_manifest") != NULL);
    kt_free(&r);
  }
  /* the notebook's poll: walk the runs, stop at the first unfinished one */
  int done = 0;
  for (int round = 0; round < 1500 && !done; round++) {
    done = 1;
    for (int i = 0; i < 5 && done; i++) {
      snprintf(path, sizeof path, "/apis/v1beta1/runs/%s", ids[i]);
      kt_resp r = kt_json(s, "GET", path, NULL);
      done = finished_v1(kt_str(r.json, "run.status"));
      kt_free(&r);
    }
    if (!done) kt_sleep_ms(10);
  }
  KB_CHECK(done);
  for (int i = 0; i < 5; i++) {
    snprintf(path, sizeof path, "/apis/v1beta1/runs/%s", ids[i]);
    kt_resp r = kt_json(s, "GET", path, NULL);
    KB_CHECK_STR(kt_str(r.json, "run.status"), "Succeeded");
    /* finished_at is the workflow's finishedAt, in whole seconds */
    const char *wfm = kt_str(r.json, "pipeline_runtime.workflow_manifest");
    cJSON *wf = wfm ? cJSON_Parse(wfm) : NULL;
    KB_CHECK_STR(kt_str(wf, "status.phase"), "Succeeded");
    KB_CHECK_STR(kt_str(r.json, "run.finished_at"), kt_str(wf, "status.finishedAt"));
    int64_t c = kfp_time_parse(kt_str(r.json, "run.created_at"));
    int64_t f = kfp_time_parse(kt_str(r.json, "run.finished_at"));
    KB_CHECK(f - c > 300 && f - c < 2000); /* the taxi DAG's critical path */
    cJSON_Delete(wf);
    kt_free(&r);
  }
  for (int i = 0; i < 5; i++) {
    snprintf(path, sizeof path, "/apis/v1beta1/runs/%s", ids[i]);
    kt_resp r = kt_json(s, "DELETE", path, NULL);
    KB_CHECK(r.status == 200);
    KB_CHECK_STR(r.body, "{}");
    kt_free(&r);
    r = kt_json(s, "GET", path, NULL);
    KB_CHECK(r.status == 404);
    kt_free(&r);
  }
  /* KFP 2.x: DeletePipelineV1 never cascades */
  snprintf(path, sizeof path, "/apis/v1beta1/pipelines/%s", pid);
  kt_resp d = kt_json(s, "DELETE", path, NULL);
  KB_CHECK(d.status == 400);
  KB_CHECK(kt_num(d.json, "code") == 3);
  char want[800];
  snprintf(want, sizeof want,
           "Failed to delete pipeline with id %s as it has existing pipeline versions (e.g. %s). "
           "Set cascade=true to delete all versions",
           pid, vid);
  KB_CHECK_STR(kt_str(d.json, "details.0.message"), want);
  KB_CHECK_STR(kt_str(d.json, "details.0.@type"), "type.googleapis.com/google.rpc.Status");
  kt_free(&d);
  snprintf(path, sizeof path, "/apis/v1beta1/pipeline_versions/%s", vid);
  d = kt_json(s, "DELETE", path, NULL);
  KB_CHECK(d.status == 200);
  kt_free(&d);
  snprintf(path, sizeof path, "/apis/v1beta1/pipelines/%s", pid);
  d = kt_json(s, "DELETE", path, NULL);
  KB_CHECK(d.status == 200);
  kt_free(&d);
  snprintf(path, sizeof path, "/apis/v1beta1/experiments/%s", eid);
  d = kt_json(s, "DELETE", path, NULL);
  KB_CHECK(d.status == 200);
  kt_free(&d);
  d = kt_json(s, "GET", path, NULL);
  KB_CHECK(d.status == 404);
  KB_CHECK(kt_num(d.json, "code") == 5);
  kt_free(&d);
  kt_free(&p);
  kt_free(&e);
  kt_stop(s);
}

static void test_v2_flow(void) {
  kt_server *s = kt_start("fast", SPEED);
  if (!s) {
    KB_CHECK(0);
    return;
  }
  size_t len;
  char *yaml = st_read_file(HELLO, &len);
  KB_CHECK(yaml != NULL);
  if (!yaml) {
    kt_stop(s);
    return;
  }
  kb_multipart_field f = {"uploadfile", "hello.yaml", "application/x-yaml", yaml, len};
  kb_multipart_body mb;
  KB_CHECK(kb_multipart_build(&f, 1, &mb, NULL, 0) == 0);
  kt_resp up = kt_req(s, "POST", "/apis/v2beta1/pipelines/upload?name=hello&display_name=Hello",
                      mb.data, mb.len, mb.content_type);
  KB_CHECK(up.status == 200);
  KB_CHECK_STR(kt_str(up.json, "name"), "hello");
  KB_CHECK_STR(kt_str(up.json, "display_name"), "Hello");
  const char *pid = kt_str(up.json, "pipeline_id");
  /* same name again: the upload endpoint's own error shape */
  kt_resp dup = kt_req(s, "POST", "/apis/v2beta1/pipelines/upload?name=hello", mb.data, mb.len,
                       mb.content_type);
  KB_CHECK(dup.status == 409);
  KB_CHECK_STR(kt_str(dup.json, "error_message"),
               "Failed to create a pipeline and a pipeline version");
  kt_free(&dup);
  /* a second version by upload_version */
  char path[512];
  snprintf(path, sizeof path, "/apis/v2beta1/pipelines/upload_version?pipelineid=%s&name=v2", pid);
  kt_resp uv = kt_req(s, "POST", path, mb.data, mb.len, mb.content_type);
  KB_CHECK(uv.status == 200);
  KB_CHECK_STR(kt_str(uv.json, "name"), "v2");
  KB_CHECK_STR(kt_str(uv.json, "pipeline_spec.pipelineInfo.name"), "echo");
  kb_multipart_body_free(&mb);
  snprintf(path, sizeof path, "/apis/v2beta1/pipelines/%s/versions?sort_by=created_at%%20desc", pid);
  kt_resp vl = kt_json(s, "GET", path, NULL);
  KB_CHECK(kt_num(vl.json, "total_size") == 2);
  kt_free(&vl);
  /* pipelines/create from a local file */
  char body[2048];
  snprintf(body, sizeof body,
           "{\"pipeline\":{\"display_name\":\"hello-2\"},\"pipeline_version\":{\"package_url\":{"
           "\"pipeline_url\":\"%s\"}}}",
           file_url(HELLO));
  kt_resp pc = kt_json(s, "POST", "/apis/v2beta1/pipelines/create", body);
  KB_CHECK(pc.status == 200);
  KB_CHECK_STR(kt_str(pc.json, "name"), "hello-2");
  kt_free(&pc);
  kt_resp byname = kt_json(s, "GET", "/apis/v2beta1/pipelines/names/hello-2", NULL);
  KB_CHECK(byname.status == 200);
  kt_free(&byname);
  /* a run on the latest version, by pipeline id only */
  snprintf(body, sizeof body,
           "{\"display_name\":\"r1\",\"pipeline_version_reference\":{\"pipeline_id\":\"%s\"},"
           "\"runtime_config\":{\"parameters\":{\"message\":\"hi\"}}}",
           pid);
  kt_resp run = kt_json(s, "POST", "/apis/v2beta1/runs", body);
  KB_CHECK(run.status == 200);
  KB_CHECK_STR(kt_str(run.json, "state"), "PENDING");
  KB_CHECK_STR(kt_str(run.json, "storage_state"), "AVAILABLE");
  KB_CHECK_STR(kt_str(run.json, "service_account"), "pipeline-runner");
  KB_CHECK_STR(kt_str(run.json, "pipeline_version_reference.pipeline_version_id"),
               kt_str(uv.json, "pipeline_version_id"));
  KB_CHECK_STR(kt_str(run.json, "runtime_config.parameters.message"), "hi");
  KB_CHECK(kt_str(run.json, "experiment_id") != NULL);
  char *state = wait_v2(s, kt_str(run.json, "run_id") ? kt_str(run.json, "run_id") : "");
  KB_CHECK_STR(state, "SUCCEEDED");
  free(state);
  snprintf(path, sizeof path, "/apis/v2beta1/runs/%s", kt_str(run.json, "run_id"));
  kt_resp got = kt_json(s, "GET", path, NULL);
  KB_CHECK_STR(kt_str(got.json, "state_history.0.state"), "PENDING");
  KB_CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(got.json, "state_history")) >= 3);
  KB_CHECK(strcmp(kt_str(got.json, "finished_at"), "1970-01-01T00:00:00Z") != 0);
  kt_free(&got);
  kt_free(&run);
  /* delete without cascade fails while versions exist; with it, it goes */
  snprintf(path, sizeof path, "/apis/v2beta1/pipelines/%s", pid);
  kt_resp d = kt_json(s, "DELETE", path, NULL);
  KB_CHECK(d.status == 400);
  KB_CHECK(strstr(kt_str(d.json, "message") ? kt_str(d.json, "message") : "",
                  "Check error stack: Invalid input error: Failed to delete pipeline with id") != NULL);
  kt_free(&d);
  snprintf(path, sizeof path, "/apis/v2beta1/pipelines/%s?cascade=true", pid);
  d = kt_json(s, "DELETE", path, NULL);
  KB_CHECK(d.status == 200);
  kt_free(&d);
  snprintf(path, sizeof path, "/apis/v2beta1/pipelines/%s", pid);
  d = kt_json(s, "GET", path, NULL);
  KB_CHECK(d.status == 404);
  char want[300];
  snprintf(want, sizeof want, "Pipeline %s not found", pid);
  KB_CHECK_STR(kt_str(d.json, "details.0.message"), want);
  kt_free(&d);
  kt_free(&uv);
  kt_free(&up);
  free(yaml);
  kt_stop(s);
}

static void test_list_paging(void) {
  kt_server *s = kt_start("fast", SPEED);
  if (!s) {
    KB_CHECK(0);
    return;
  }
  char body[2048], path[2048];
  snprintf(body, sizeof body, "{\"name\":\"p\",\"url\":{\"pipeline_url\":\"%s\"}}", file_url(HELLO));
  kt_resp p = kt_json(s, "POST", "/apis/v1beta1/pipelines", body);
  kt_resp e = kt_json(s, "POST", "/apis/v2beta1/experiments", "{\"display_name\":\"paging\"}");
  KB_CHECK(e.status == 200);
  KB_CHECK_STR(kt_str(e.json, "storage_state"), "AVAILABLE");
  const char *eid = kt_str(e.json, "experiment_id");
  for (int i = 0; i < 25; i++) {
    snprintf(body, sizeof body,
             "{\"display_name\":\"run-%02d\",\"experiment_id\":\"%s\",\"pipeline_version_reference\":"
             "{\"pipeline_id\":\"%s\"}}",
             i, eid, kt_str(p.json, "id"));
    kt_resp r = kt_json(s, "POST", "/apis/v2beta1/runs", body);
    KB_CHECK(r.status == 200);
    kt_free(&r);
    if (i % 5 == 4) kt_sleep_ms(2); /* spread created_at a little */
  }
  /* 3 pages of 10, 10, 5, following the tokens */
  char token[1024] = "";
  int pages = 0, seen = 0;
  char first_ids[25][40];
  do {
    snprintf(path, sizeof path, "/apis/v2beta1/runs?experiment_id=%s&page_size=10%s%s", eid,
             *token ? "&page_token=" : "", token);
    kt_resp r = kt_json(s, "GET", path, NULL);
    KB_CHECK(r.status == 200);
    KB_CHECK(kt_num(r.json, "total_size") == 25);
    cJSON *runs = cJSON_GetObjectItem(r.json, "runs");
    int n = cJSON_GetArraySize(runs);
    KB_CHECK(n == (pages < 2 ? 10 : 5));
    for (int i = 0; i < n && seen < 25; i++)
      snprintf(first_ids[seen++], 40, "%s", kt_str(cJSON_GetArrayItem(runs, i), "run_id"));
    const char *next = kt_str(r.json, "next_page_token");
    token[0] = 0;
    if (next) {
      /* base64 may hold '+', '/' and '=': escape for the query */
      char *o = token;
      for (const char *c = next; *c && o < token + sizeof token - 4; c++)
        o += (*c == '+' || *c == '/' || *c == '=') ? sprintf(o, "%%%02X", *c) : (*o = *c, 1);
      *o = 0;
    }
    pages++;
    kt_free(&r);
  } while (*token && pages < 5);
  KB_CHECK(pages == 3);
  KB_CHECK(seen == 25);
  for (int i = 0; i < seen; i++)
    for (int j = i + 1; j < seen; j++) KB_CHECK(strcmp(first_ids[i], first_ids[j]) != 0);
  /* sort_by created_at desc */
  snprintf(path, sizeof path, "/apis/v2beta1/runs?experiment_id=%s&page_size=200&sort_by=created_at%%20desc", eid);
  kt_resp r = kt_json(s, "GET", path, NULL);
  cJSON *runs = cJSON_GetObjectItem(r.json, "runs");
  KB_CHECK(cJSON_GetArraySize(runs) == 25);
  for (int i = 1; i < cJSON_GetArraySize(runs); i++)
    KB_CHECK(strcmp(kt_str(cJSON_GetArrayItem(runs, i - 1), "created_at"),
                    kt_str(cJSON_GetArrayItem(runs, i), "created_at")) >= 0);
  kt_free(&r);
  /* sort by name asc */
  snprintf(path, sizeof path, "/apis/v2beta1/runs?experiment_id=%s&page_size=3&sort_by=display_name", eid);
  r = kt_json(s, "GET", path, NULL);
  KB_CHECK_STR(kt_str(r.json, "runs.0.display_name"), "run-00");
  KB_CHECK_STR(kt_str(r.json, "runs.2.display_name"), "run-02");
  kt_free(&r);
  /* filter by state, after all finished */
  for (int i = 0; i < 25; i++) {
    char *st = wait_v2(s, first_ids[i]);
    KB_CHECK_STR(st, "SUCCEEDED");
    free(st);
  }
  snprintf(path, sizeof path,
           "/apis/v2beta1/runs?page_size=5&filter=%%7B%%22predicates%%22%%3A%%5B%%7B%%22key%%22%%3A"
           "%%22state%%22%%2C%%22operation%%22%%3A%%22EQUALS%%22%%2C%%22string_value%%22%%3A"
           "%%22SUCCEEDED%%22%%7D%%5D%%7D");
  r = kt_json(s, "GET", path, NULL);
  KB_CHECK(r.status == 200);
  KB_CHECK(kt_num(r.json, "total_size") == 25);
  KB_CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(r.json, "runs")) == 5);
  KB_CHECK(kt_str(r.json, "next_page_token") != NULL);
  kt_free(&r);
  snprintf(path, sizeof path,
           "/apis/v2beta1/runs?filter=%%7B%%22predicates%%22%%3A%%5B%%7B%%22key%%22%%3A"
           "%%22state%%22%%2C%%22operation%%22%%3A%%22NOT_EQUALS%%22%%2C%%22string_value%%22%%3A"
           "%%22SUCCEEDED%%22%%7D%%5D%%7D");
  r = kt_json(s, "GET", path, NULL);
  KB_CHECK(r.status == 200);
  KB_CHECK_STR(r.body, "{}");
  kt_free(&r);
  /* v1: resource_reference_key filters by experiment, status derived */
  snprintf(path, sizeof path,
           "/apis/v1beta1/runs?resource_reference_key.type=EXPERIMENT&resource_reference_key.id=%s"
           "&page_size=2",
           eid);
  r = kt_json(s, "GET", path, NULL);
  KB_CHECK(kt_num(r.json, "total_size") == 25);
  KB_CHECK_STR(kt_str(r.json, "runs.0.status"), "Succeeded");
  kt_free(&r);
  /* bad sort field and bad token */
  r = kt_json(s, "GET", "/apis/v2beta1/runs?sort_by=colour", NULL);
  KB_CHECK(r.status == 400);
  KB_CHECK_STR(kt_str(r.json, "details.0.message"), "Invalid sorting field: \"colour\" on listable type Run");
  kt_free(&r);
  r = kt_json(s, "GET", "/apis/v2beta1/runs?page_token=bm90IGEgdG9rZW4%3D", NULL);
  KB_CHECK(r.status == 400);
  KB_CHECK_STR(kt_str(r.json, "details.0.message"), "Invalid page token");
  kt_free(&r);
  r = kt_json(s, "GET", "/apis/v2beta1/runs?page_size=-1", NULL);
  KB_CHECK(r.status == 400);
  KB_CHECK_STR(kt_str(r.json, "details.0.message"), "The page size should be greater than 0. Got -1");
  kt_free(&r);
  kt_free(&p);
  kt_free(&e);
  kt_stop(s);
}

static void test_errors(void) {
  kt_server *s = kt_start("fast", SPEED);
  if (!s) {
    KB_CHECK(0);
    return;
  }
  kt_resp r = kt_json(s, "POST", "/apis/v2beta1/runs", "{\"foo\":1}");
  KB_CHECK(r.status == 400);
  KB_CHECK(kt_num(r.json, "code") == 3);
  KB_CHECK_STR(kt_str(r.json, "message"), "proto: (line 1:2): unknown field \"foo\"");
  kt_free(&r);
  r = kt_json(s, "POST", "/apis/v2beta1/runs",
              "{\"display_name\":\"x\",\n \"runtime_config\":{\"pipelineRoot\":\"a\",\"bar\":2}}");
  KB_CHECK_STR(kt_str(r.json, "message"), "proto: (line 2:39): unknown field \"bar\"");
  kt_free(&r);
  r = kt_json(s, "POST", "/apis/v2beta1/experiments", "{\"display_name\":5}");
  KB_CHECK(r.status == 400);
  KB_CHECK_STR(kt_str(r.json, "message"),
               "proto: (line 1:17): invalid value for string field displayName: 5");
  kt_free(&r);
  r = kt_json(s, "POST", "/apis/v2beta1/experiments", "{\"display_name\":");
  KB_CHECK(r.status == 400);
  KB_CHECK(strncmp(kt_str(r.json, "message") ? kt_str(r.json, "message") : "",
                   "proto: syntax error (line 1:17)", 31) == 0);
  kt_free(&r);
  r = kt_json(s, "POST", "/apis/v2beta1/runs", "{\"display_name\":\"\"}");
  KB_CHECK(r.status == 400);
  KB_CHECK_STR(kt_str(r.json, "details.0.message"),
               "The run name is empty. Please specify a valid name");
  kt_free(&r);
  r = kt_json(s, "GET", "/apis/v2beta1/runs/nope", NULL);
  KB_CHECK(r.status == 404);
  KB_CHECK(kt_num(r.json, "code") == 5);
  KB_CHECK_STR(kt_str(r.json, "message"),
               "Failed to get a run: Failed to fetch run nope: ResourceNotFoundError: Run nope not found");
  KB_CHECK_STR(kt_str(r.json, "details.0.message"), "Run nope not found");
  kt_free(&r);
  r = kt_json(s, "GET", "/apis/v2beta1/nothing/here", NULL);
  KB_CHECK(r.status == 404);
  KB_CHECK_STR(kt_str(r.json, "message"), "Not Found");
  kt_free(&r);
  r = kt_json(s, "PUT", "/apis/v2beta1/runs", NULL);
  KB_CHECK(r.status == 501);
  KB_CHECK_STR(kt_str(r.json, "message"), "Method Not Allowed");
  kt_free(&r);
  r = kt_json(s, "POST", "/apis/v1beta1/pipelines",
              "{\"name\":\"web\",\"url\":{\"pipeline_url\":\"https://example.com/p.yaml\"}}");
  KB_CHECK(r.status == 400);
  KB_CHECK(strstr(kt_str(r.json, "message") ? kt_str(r.json, "message") : "",
                  "the simulator does not download pipelines") != NULL);
  kt_free(&r);
  r = kt_json(s, "POST", "/apis/v1beta1/pipelines",
              "{\"name\":\"gone\",\"url\":{\"pipeline_url\":\"/nonexistent/p.yaml\"}}");
  KB_CHECK(r.status == 400);
  KB_CHECK_STR(kt_str(r.json, "details.0.message"),
               "error fetching pipeline spec from /nonexistent/p.yaml - No such file or directory");
  kt_free(&r);
  r = kt_req(s, "POST", "/apis/v2beta1/pipelines/upload", "x", 1, "text/plain");
  KB_CHECK(r.status == 400);
  KB_CHECK_STR(kt_str(r.json, "error_message"), "Failed to read pipeline from file");
  kt_free(&r);
  kb_multipart_field f = {"uploadfile", "junk.yaml", NULL, "a: 1\n", 5};
  kb_multipart_body mb;
  kb_multipart_build(&f, 1, &mb, NULL, 0);
  r = kt_req(s, "POST", "/apis/v2beta1/pipelines/upload", mb.data, mb.len, mb.content_type);
  KB_CHECK(r.status == 400);
  KB_CHECK_STR(kt_str(r.json, "error_message"), "unknown template format: pipeline spec is invalid");
  kt_free(&r);
  kb_multipart_body_free(&mb);
  /* the default experiment stays */
  r = kt_json(s, "GET", "/apis/v1beta1/experiments", NULL);
  KB_CHECK_STR(kt_str(r.json, "experiments.0.name"), "Default");
  char path[200];
  snprintf(path, sizeof path, "/apis/v1beta1/experiments/%s", kt_str(r.json, "experiments.0.id"));
  kt_resp d = kt_json(s, "DELETE", path, NULL);
  KB_CHECK(d.status == 409);
  KB_CHECK(kt_num(d.json, "code") == 10);
  kt_free(&d);
  kt_free(&r);
  kt_stop(s);
}

static void test_terminate_archive(void) {
  kt_server *s = kt_start("fast", 600);
  if (!s) {
    KB_CHECK(0);
    return;
  }
  char body[2048], path[300];
  snprintf(body, sizeof body, "{\"name\":\"taxi\",\"url\":{\"pipeline_url\":\"%s\"}}", file_url(TAXI));
  kt_resp p = kt_json(s, "POST", "/apis/v1beta1/pipelines", body);
  snprintf(body, sizeof body, "{\"name\":\"long\",\"pipeline_spec\":{\"pipeline_id\":\"%s\"}}",
           kt_str(p.json, "id"));
  kt_resp r = kt_json(s, "POST", "/apis/v1beta1/runs", body);
  KB_CHECK(r.status == 200);
  const char *id = kt_str(r.json, "run.id");
  snprintf(path, sizeof path, "/apis/v1beta1/runs/%s/terminate", id);
  kt_resp t = kt_json(s, "POST", path, NULL);
  KB_CHECK(t.status == 200);
  kt_free(&t);
  char *st = wait_v2(s, id);
  KB_CHECK_STR(st, "CANCELED");
  free(st);
  snprintf(path, sizeof path, "/apis/v1beta1/runs/%s", id);
  t = kt_json(s, "GET", path, NULL);
  KB_CHECK_STR(kt_str(t.json, "run.status"), "Failed");
  kt_free(&t);
  snprintf(path, sizeof path, "/apis/v2beta1/runs/%s:archive", id);
  t = kt_json(s, "POST", path, NULL);
  KB_CHECK(t.status == 200);
  kt_free(&t);
  snprintf(path, sizeof path, "/apis/v2beta1/runs/%s", id);
  t = kt_json(s, "GET", path, NULL);
  KB_CHECK_STR(kt_str(t.json, "storage_state"), "ARCHIVED");
  cJSON *hist = cJSON_GetObjectItem(t.json, "state_history");
  int n_hist = cJSON_GetArraySize(hist);
  KB_CHECK(n_hist >= 3);
  KB_CHECK_STR(kt_str(cJSON_GetArrayItem(hist, n_hist - 2), "state"), "CANCELING");
  KB_CHECK_STR(kt_str(cJSON_GetArrayItem(hist, n_hist - 1), "state"), "CANCELED");
  kt_free(&t);
  snprintf(path, sizeof path, "/apis/v2beta1/runs/%s:unarchive", id);
  t = kt_json(s, "POST", path, NULL);
  kt_free(&t);
  snprintf(path, sizeof path, "/apis/v1beta1/runs/%s", id);
  t = kt_json(s, "GET", path, NULL);
  KB_CHECK_STR(kt_str(t.json, "run.storage_state"), "STORAGESTATE_AVAILABLE");
  kt_free(&t);
  /* retry: a canceled run runs again under the same id */
  snprintf(path, sizeof path, "/apis/v2beta1/runs/%s:retry", id);
  t = kt_json(s, "POST", path, NULL);
  KB_CHECK(t.status == 200);
  kt_free(&t);
  snprintf(path, sizeof path, "/apis/v2beta1/runs/%s", id);
  t = kt_json(s, "GET", path, NULL);
  KB_CHECK(!finished_v2(kt_str(t.json, "state")));
  kt_free(&t);
  kt_free(&r);
  kt_free(&p);
  kt_stop(s);
}

static void test_recurring(void) {
  kt_server *s = kt_start("fast", SPEED);
  if (!s) {
    KB_CHECK(0);
    return;
  }
  char body[2048], path[2048];
  snprintf(body, sizeof body, "{\"name\":\"p\",\"url\":{\"pipeline_url\":\"%s\"}}", file_url(HELLO));
  kt_resp p = kt_json(s, "POST", "/apis/v1beta1/pipelines", body);
  snprintf(body, sizeof body,
           "{\"display_name\":\"every-minute\",\"pipeline_version_reference\":{\"pipeline_id\":"
           "\"%s\"},\"trigger\":{\"periodic_schedule\":{\"interval_second\":\"60\"}},"
           "\"max_concurrency\":\"2\"}",
           kt_str(p.json, "id"));
  kt_resp rr = kt_json(s, "POST", "/apis/v2beta1/recurringruns", body);
  KB_CHECK(rr.status == 200);
  KB_CHECK_STR(kt_str(rr.json, "trigger.periodic_schedule.interval_second"), "60");
  KB_CHECK_STR(kt_str(rr.json, "max_concurrency"), "2");
  KB_CHECK_STR(kt_str(rr.json, "status"), "ENABLED");
  KB_CHECK_STR(kt_str(rr.json, "mode"), "ENABLE");
  const char *rid = kt_str(rr.json, "recurring_run_id");
  /* wait for the schedule to start runs on the virtual clock */
  snprintf(path, sizeof path,
           "/apis/v2beta1/runs?filter=%%7B%%22predicates%%22%%3A%%5B%%7B%%22key%%22%%3A"
           "%%22recurring_run_id%%22%%2C%%22operation%%22%%3A%%22EQUALS%%22%%2C%%22string_value"
           "%%22%%3A%%22%s%%22%%7D%%5D%%7D",
           rid);
  double n = 0;
  for (int i = 0; i < 500 && n < 3; i++) {
    kt_resp l = kt_json(s, "GET", path, NULL);
    n = kt_num(l.json, "total_size");
    if (n >= 3) KB_CHECK_STR(kt_str(l.json, "runs.0.recurring_run_id"), rid);
    kt_free(&l);
    if (n < 3) kt_sleep_ms(10);
  }
  KB_CHECK(n >= 3);
  kt_resp l = kt_json(s, "GET", "/apis/v2beta1/recurringruns", NULL);
  KB_CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(l.json, "recurringRuns")) == 1);
  kt_free(&l);
  snprintf(path, sizeof path, "/apis/v1beta1/jobs/%s/disable", rid);
  l = kt_json(s, "POST", path, NULL);
  KB_CHECK(l.status == 200);
  kt_free(&l);
  snprintf(path, sizeof path, "/apis/v1beta1/jobs/%s", rid);
  l = kt_json(s, "GET", path, NULL);
  KB_CHECK_STR(kt_str(l.json, "mode"), "DISABLED");
  KB_CHECK(cJSON_GetObjectItem(l.json, "enabled") == NULL);
  kt_free(&l);
  l = kt_json(s, "DELETE", path, NULL);
  KB_CHECK(l.status == 200);
  kt_free(&l);
  l = kt_json(s, "GET", path, NULL);
  KB_CHECK(l.status == 404);
  kt_free(&l);
  snprintf(body, sizeof body,
           "{\"display_name\":\"bad\",\"pipeline_version_reference\":{\"pipeline_id\":\"%s\"},"
           "\"trigger\":{\"cron_schedule\":{\"cron\":\"61 * * * *\"}}}",
           kt_str(p.json, "id"));
  l = kt_json(s, "POST", "/apis/v2beta1/recurringruns", body);
  KB_CHECK(l.status == 400);
  kt_free(&l);
  kt_free(&rr);
  kt_free(&p);
  kt_stop(s);
}

static void test_cron(void) {
  double t0 = 1704067200; /* 2024-01-01T00:00:00Z, a Monday */
  KB_CHECK(kfp_cron_next("0 * * * * *", t0) == t0 + 60);
  KB_CHECK(kfp_cron_next("*/15 * * * *", t0) == t0 + 900);
  KB_CHECK(kfp_cron_next("0 30 2 * * *", t0) == t0 + 2 * 3600 + 1800);
  KB_CHECK(kfp_cron_next("0 0 0 * * 0", t0) == t0 + 6 * 86400); /* next Sunday */
  KB_CHECK(kfp_cron_next("@hourly", t0) == t0 + 3600);
  KB_CHECK(kfp_cron_next("0 0 0 1 3 *", t0) == t0 + (31 + 29) * 86400.0);
  KB_CHECK(kfp_cron_next("61 * * * *", t0) == -1);
  KB_CHECK(kfp_cron_next("* *", t0) == -1);
}

static double metric(const char *text, const char *line_prefix) {
  const char *p = text;
  size_t n = strlen(line_prefix);
  while ((p = strstr(p, line_prefix))) {
    if ((p == text || p[-1] == '\n') && p[n] == ' ') return strtod(p + n + 1, NULL);
    p += n;
  }
  return -1;
}

static void test_metrics_latency(void) {
  /* default profile at a slow clock: answers wait on uv timers */
  kt_server *s = kt_start("default", 60);
  if (!s) {
    KB_CHECK(0);
    return;
  }
  for (int i = 0; i < 3; i++) {
    char body[100];
    snprintf(body, sizeof body, "{\"display_name\":\"e%d\"}", i);
    kt_resp r = kt_json(s, "POST", "/apis/v2beta1/experiments", body);
    KB_CHECK(r.status == 200);
    kt_free(&r);
  }
  char body[2048];
  snprintf(body, sizeof body, "{\"name\":\"p\",\"url\":{\"pipeline_url\":\"%s\"}}",
           file_url(HELLO));
  kt_resp p = kt_json(s, "POST", "/apis/v1beta1/pipelines", body);
  KB_CHECK(p.status == 200);
  snprintf(body, sizeof body, "{\"name\":\"r\",\"pipeline_spec\":{\"pipeline_id\":\"%s\"}}",
           kt_str(p.json, "id"));
  kt_resp r = kt_json(s, "POST", "/apis/v1beta1/runs", body);
  KB_CHECK(r.status == 200);
  kt_free(&r);
  kt_free(&p);
  r = kt_json(s, "GET", "/apis/v1beta1/runs/none", NULL);
  KB_CHECK(r.status == 404);
  kt_free(&r);
  r = kt_json(s, "GET", "/apis/v2beta1/runs", NULL);
  kt_free(&r);
  kt_resp m = kt_json(s, "GET", "/metrics", NULL);
  KB_CHECK(m.status == 200);
  const char *t = m.body;
  KB_CHECK(metric(t, "experiment_server_create_requests") == 3);
  KB_CHECK(metric(t, "run_server_get_requests") == 1);
  KB_CHECK(metric(t, "run_server_list_requests") == 1);
  KB_CHECK(metric(t, "run_server_create_requests") == 1);
  KB_CHECK(metric(t, "pipeline_server_create_requests") == 1);
  KB_CHECK(metric(t, "pipeline_server_create_version_requests") == 1);
  KB_CHECK(metric(t, "pipeline_upload_requests") == 0);
  KB_CHECK(metric(t, "experiment_server_run_count") == 4); /* with Default */
  KB_CHECK(metric(t, "run_server_run_count") == 1);
  KB_CHECK(metric(t, "pipeline_server_pipeline_count") == 1);
  KB_CHECK(strstr(t, "# TYPE run_server_create_requests counter\n") != NULL);
  KB_CHECK(strstr(t, "# TYPE pipeline_server_pipeline_count gauge\n") != NULL);
  KB_CHECK(metric(t, "grpc_server_handled_total{grpc_code=\"OK\",grpc_method=\"CreateExperiment\","
                     "grpc_service=\"kubeflow.pipelines.backend.api.v2beta1.ExperimentService\","
                     "grpc_type=\"unary\"}") == 3);
  KB_CHECK(metric(t, "grpc_server_handled_total{grpc_code=\"NotFound\",grpc_method=\"GetRunV1\","
                     "grpc_service=\"api.RunService\",grpc_type=\"unary\"}") == 1);
  KB_CHECK(metric(t, "grpc_server_handling_seconds_count{grpc_method=\"CreateExperiment\","
                     "grpc_service=\"kubeflow.pipelines.backend.api.v2beta1.ExperimentService\","
                     "grpc_type=\"unary\"}") == 3);
  KB_CHECK(metric(t, "grpc_server_handling_seconds_bucket{grpc_method=\"CreateExperiment\","
                     "grpc_service=\"kubeflow.pipelines.backend.api.v2beta1.ExperimentService\","
                     "grpc_type=\"unary\",le=\"+Inf\"}") == 3);
  KB_CHECK(metric(t, "grpc_server_handling_seconds_sum{grpc_method=\"CreateExperiment\","
                     "grpc_service=\"kubeflow.pipelines.backend.api.v2beta1.ExperimentService\","
                     "grpc_type=\"unary\"}") > 0);
  KB_CHECK(strstr(t, "# TYPE grpc_server_handling_seconds histogram\n") != NULL);
  kt_free(&m);
  kt_stop(s);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  KB_RUN(test_cron);
  KB_RUN(test_healthz);
  KB_RUN(test_v1_notebook_flow);
  KB_RUN(test_v2_flow);
  KB_RUN(test_list_paging);
  KB_RUN(test_errors);
  KB_RUN(test_terminate_archive);
  KB_RUN(test_recurring);
  KB_RUN(test_metrics_latency);
  curl_global_cleanup();
  return kb_test_report();
}
