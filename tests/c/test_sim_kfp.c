/* The KFP REST API of the simulator, over real HTTP on loopback: the
 * benchmark notebook's v1 flow, the v2 flow with uploads, paging, errors,
 * terminate/archive, recurring runs, metrics and healthz, and the store
 * freeing what is deleted (bounded through long create/delete storms). */
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "kb/multipart.h"
#include "kbtest.h"
#include "kfp_test_util.h"

#define SPEED 6000.0
#define TAXI "../scenarios/pipelines/taxi_updated_pool.yaml"
#define HELLO "../specs/kfp/pipelines/v2ir_hello_world.yaml"

/* internals of src/sim/kfp_*.c */
double kb_sim_cron_next(const char *expr, double after);
int64_t kb_kfp_time_parse(const char *s);

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

/* run_details.task_details of a finished v2 run: every task finished,
 * ids unique and stable (tests/lua/test_kfp_task_details.lua checks them
 * against the run's pods in the Kubernetes view). */
static void check_task_details(kt_server *s, const cJSON *run) {
  const char *run_id = kt_str(run, "run_id");
  const cJSON *tasks = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(run, "run_details"), "task_details");
  KB_CHECK(cJSON_GetArraySize(tasks) >= 2);
  int echo = 0;
  const cJSON *t;
  cJSON_ArrayForEach(t, tasks) {
    KB_CHECK_STR(kt_str(t, "run_id"), run_id);
    KB_CHECK_STR(kt_str(t, "state"), "SUCCEEDED");
    const char *st = kt_str(t, "start_time"), *en = kt_str(t, "end_time");
    KB_CHECK(st && en && strcmp(st, en) <= 0);
    KB_CHECK(kt_str(t, "task_id") && strlen(kt_str(t, "task_id")) == 36);
    const cJSON *u;
    int same_id = 0;
    cJSON_ArrayForEach(u, tasks) same_id += !strcmp(kt_str(u, "task_id"), kt_str(t, "task_id"));
    KB_CHECK(same_id == 1);
    echo += kt_str(t, "display_name") && !strcmp(kt_str(t, "display_name"), "echo");
  }
  KB_CHECK(echo == 1); /* the pipeline's one task, by its taskInfo name */
  char path[400];
  /* the same ids on the next GetRun, as real KFP's stored task rows */
  snprintf(path, sizeof path, "/apis/v2beta1/runs/%s", run_id);
  kt_resp again = kt_json(s, "GET", path, NULL);
  KB_CHECK_STR(kt_str(again.json, "run_details.task_details.0.task_id"),
               kt_str(run, "run_details.task_details.0.task_id"));
  kt_free(&again);
}

/* A page token for a query string: base64 may hold '+', '/' and '='. */
static void escape_token(const char *tok, char *out, size_t cap) {
  char *o = out;
  for (const char *c = tok ? tok : ""; *c && o < out + cap - 4; c++)
    o += (*c == '+' || *c == '/' || *c == '=') ? sprintf(o, "%%%02X", *c) : (*o = *c, 1);
  *o = 0;
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
    int64_t c = kb_kfp_time_parse(kt_str(r.json, "run.created_at"));
    int64_t f = kb_kfp_time_parse(kt_str(r.json, "run.finished_at"));
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
  check_task_details(s, got.json);
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
    escape_token(next, token, sizeof token);
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
              "{\"name\":\"web\",\"url\":{\"pipeline_url\":\"ftp://example.com/p.yaml\"}}");
  KB_CHECK(r.status == 400);
  KB_CHECK_STR(kt_str(r.json, "details.0.message"),
               "error fetching pipeline spec from ftp://example.com/p.yaml - unsupported URL "
               "scheme: use an http(s) URL, or upload the file");
  kt_free(&r);
  /* more on pipeline URLs: test_sim_pipeline_urls.c */
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
  /* the canceled model run stays beside the retry until the run is
   * deleted; then both go */
  t = kt_json(s, "GET", "/kt/store", NULL);
  KB_CHECK(kt_num(t.json, "model_runs") == 2);
  kt_free(&t);
  t = kt_json(s, "DELETE", path, NULL);
  KB_CHECK(t.status == 200);
  kt_free(&t);
  t = kt_json(s, "GET", "/kt/store", NULL);
  KB_CHECK(kt_num(t.json, "model_runs") == 0);
  KB_CHECK(kt_num(t.json, "live_runs") == 0);
  KB_CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(t.json, "run_ids")) == 0);
  kt_free(&t);
  t = kt_json(s, "GET", path, NULL);
  KB_CHECK(t.status == 404);
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

/* ---- the store frees what is deleted ---- */

/* The id at `key` of a 200 answer (malloc'd), or NULL. */
static char *create(kt_server *s, const char *path, const char *body, const char *key) {
  kt_resp r = kt_json(s, "POST", path, body);
  KB_CHECK(r.status == 200);
  char *id = r.status == 200 && kt_str(r.json, key) ? strdup(kt_str(r.json, key)) : NULL;
  kt_free(&r);
  return id;
}

static char *create_pipeline(kt_server *s, const char *name) {
  char body[PATH_MAX + 200];
  snprintf(body, sizeof body, "{\"name\":\"%s\",\"url\":{\"pipeline_url\":\"%s\"}}", name,
           file_url(HELLO));
  return create(s, "/apis/v1beta1/pipelines", body, "id");
}

static char *create_experiment(kt_server *s, const char *name) {
  char body[300];
  snprintf(body, sizeof body, "{\"display_name\":\"%s\"}", name);
  return create(s, "/apis/v2beta1/experiments", body, "experiment_id");
}

/* A v2 run of pipeline pid's latest version; msg: its "message" parameter
 * or NULL for the defaults. */
static char *create_run(kt_server *s, const char *name, const char *eid, const char *pid,
                        const char *msg) {
  char body[600], params[100] = "";
  if (msg) snprintf(params, sizeof params, ",\"runtime_config\":{\"parameters\":{\"message\":\"%s\"}}", msg);
  snprintf(body, sizeof body,
           "{\"display_name\":\"%s\",\"experiment_id\":\"%s\",\"pipeline_version_reference\":{"
           "\"pipeline_id\":\"%s\"}%s}",
           name, eid, pid, params);
  return create(s, "/apis/v2beta1/runs", body, "run_id");
}

static long request_status(kt_server *s, const char *method, const char *fmt, const char *id) {
  char path[300];
  snprintf(path, sizeof path, fmt, id ? id : "");
  kt_resp r = kt_json(s, method, path, NULL);
  long st = r.status;
  kt_free(&r);
  return st;
}

/* After a sweep a store vector holds at most twice its live objects plus
 * the sweep's slack: deleted ones exceed half of it by at most 32. */
static int held_bounded(const cJSON *st, const char *kind) {
  char live[40];
  snprintf(live, sizeof live, "live_%s", kind);
  return kt_num(st, kind) >= kt_num(st, live) && kt_num(st, kind) <= 2 * kt_num(st, live) + 64;
}

static void check_store_bounded(kt_server *s) {
  kt_resp r = kt_json(s, "GET", "/kt/store", NULL);
  const cJSON *st = r.json;
  KB_CHECK(held_bounded(st, "runs"));
  KB_CHECK(held_bounded(st, "pipelines"));
  KB_CHECK(held_bounded(st, "versions"));
  KB_CHECK(held_bounded(st, "experiments"));
  /* the index holds exactly the live objects */
  KB_CHECK(kt_num(st, "index_entries") ==
           kt_num(st, "live_runs") + kt_num(st, "live_pipelines") + kt_num(st, "live_versions") +
               kt_num(st, "live_experiments") + kt_num(st, "live_recurring"));
  KB_CHECK(kt_num(st, "index_slots") <= 512);
  /* deleted KFP runs free their model runs, and ids are reused */
  KB_CHECK(kt_num(st, "model_runs") == kt_num(st, "live_runs"));
  KB_CHECK(kt_num(st, "model_run_slots") <= 128);
  KB_CHECK(kt_num(st, "sim_map_slots") <= 256);
  /* freed versions release their model pipelines (3 loads per version
   * here: defaults and two parameter sets) */
  KB_CHECK(kt_num(st, "sim_pipelines") <= 3 * kt_num(st, "versions"));
  KB_CHECK(kt_num(st, "model_pipeline_slots") <= 250);
  kt_free(&r);
}

/* 200 storms of a pipeline, an experiment and 10 runs, all deleted again,
 * among 50 runs that stay: the store stays bounded, and the runs that stay
 * are found by id, kept in creation order and paged with a token taken
 * before the storms. */
static void test_store_sweep(void) {
  kt_server *s = kt_start("fast", SPEED);
  if (!s) {
    KB_CHECK(0);
    return;
  }
  enum { STORMS = 200, RUNS = 10, KEEP_FIRST = 25, KEEP = 50 };
  char *keep_pid = create_pipeline(s, "keep");
  char *keep_eid = create_experiment(s, "keep");
  char *keep[KEEP] = {0};
  size_t n_keep = 0;
  char name[64], path[2048];
  for (; n_keep < KEEP_FIRST; n_keep++) {
    snprintf(name, sizeof name, "keep-%02zu", n_keep);
    keep[n_keep] = create_run(s, name, keep_eid, keep_pid, NULL);
  }
  /* the first page of the runs that stay, by name */
  snprintf(path, sizeof path,
           "/apis/v2beta1/runs?experiment_id=%s&page_size=10&sort_by=display_name", keep_eid);
  kt_resp first = kt_json(s, "GET", path, NULL);
  KB_CHECK_STR(kt_str(first.json, "runs.0.display_name"), "keep-00");
  KB_CHECK_STR(kt_str(first.json, "runs.9.display_name"), "keep-09");
  char token[1024];
  escape_token(kt_str(first.json, "next_page_token"), token, sizeof token);
  KB_CHECK(token[0] != 0);
  kt_free(&first);
  char *gone_runs[3] = {0}, *gone_pid = NULL, *gone_eid = NULL;
  for (int i = 0; i < STORMS; i++) {
    snprintf(name, sizeof name, "storm-%03d", i);
    char *pid = create_pipeline(s, name), *eid = create_experiment(s, name);
    char *ids[RUNS];
    for (int j = 0; j < RUNS; j++) {
      char rname[80];
      snprintf(rname, sizeof rname, "%s-%02d", name, j);
      ids[j] = create_run(s, rname, eid ? eid : "", pid ? pid : "",
                          j % 3 == 0 ? NULL : j % 3 == 1 ? "a" : "b");
    }
    if (i % 8 == 7 && n_keep < KEEP) {
      snprintf(name, sizeof name, "keep-%02zu", n_keep);
      keep[n_keep++] = create_run(s, name, keep_eid, keep_pid, NULL);
    }
    for (int j = 0; j < RUNS; j++) {
      KB_CHECK(request_status(s, "DELETE", "/apis/v2beta1/runs/%s", ids[j]) == 200);
      int slot = i == 0 && j == 0 ? 0 : i == STORMS / 2 && j == 5 ? 1 : i == STORMS - 1 && j == RUNS - 1 ? 2 : -1;
      if (slot >= 0) gone_runs[slot] = ids[j];
      else free(ids[j]);
    }
    KB_CHECK(request_status(s, "DELETE", "/apis/v2beta1/pipelines/%s?cascade=true", pid) == 200);
    KB_CHECK(request_status(s, "DELETE", "/apis/v2beta1/experiments/%s", eid) == 200);
    if (i == 0) {
      gone_pid = pid, gone_eid = eid;
    } else {
      free(pid), free(eid);
    }
    if (i % 10 == 9) check_store_bounded(s);
  }
  KB_CHECK(n_keep == KEEP);
  kt_resp st = kt_json(s, "GET", "/kt/store", NULL);
  KB_CHECK(kt_num(st.json, "compactions") >= 10);
  KB_CHECK(kt_num(st.json, "live_runs") == KEEP);
  KB_CHECK(kt_num(st.json, "runs") < 2 * KEEP + 64);
  /* the runs that stay, in creation order */
  const cJSON *ids = cJSON_GetObjectItem(st.json, "run_ids");
  KB_CHECK(cJSON_GetArraySize(ids) == KEEP);
  for (int i = 0; i < KEEP && i < cJSON_GetArraySize(ids); i++)
    KB_CHECK_STR(cJSON_GetArrayItem(ids, i)->valuestring, keep[i]);
  kt_free(&st);
  /* found by id */
  for (int i = 0; i < KEEP; i++) {
    snprintf(path, sizeof path, "/apis/v2beta1/runs/%s", keep[i] ? keep[i] : "");
    kt_resp r = kt_json(s, "GET", path, NULL);
    KB_CHECK(r.status == 200);
    snprintf(name, sizeof name, "keep-%02d", i);
    KB_CHECK_STR(kt_str(r.json, "display_name"), name);
    kt_free(&r);
  }
  /* the token from before the storms goes on where it stopped */
  int next = 10, pages = 0;
  while (token[0] && pages++ < 10) {
    snprintf(path, sizeof path, "/apis/v2beta1/runs?experiment_id=%s&page_size=10&page_token=%s",
             keep_eid, token);
    kt_resp r = kt_json(s, "GET", path, NULL);
    KB_CHECK(r.status == 200);
    KB_CHECK(kt_num(r.json, "total_size") == KEEP);
    const cJSON *runs = cJSON_GetObjectItem(r.json, "runs");
    for (int i = 0; i < cJSON_GetArraySize(runs); i++, next++) {
      snprintf(name, sizeof name, "keep-%02d", next);
      KB_CHECK_STR(kt_str(cJSON_GetArrayItem(runs, i), "display_name"), name);
    }
    escape_token(kt_str(r.json, "next_page_token"), token, sizeof token);
    kt_free(&r);
  }
  KB_CHECK(next == KEEP);
  /* what was deleted stays gone */
  for (int i = 0; i < 3; i++) {
    KB_CHECK(gone_runs[i] != NULL);
    KB_CHECK(request_status(s, "GET", "/apis/v2beta1/runs/%s", gone_runs[i]) == 404);
    KB_CHECK(request_status(s, "GET", "/apis/v1beta1/runs/%s", gone_runs[i]) == 404);
    KB_CHECK(request_status(s, "DELETE", "/apis/v2beta1/runs/%s", gone_runs[i]) == 404);
    free(gone_runs[i]);
  }
  KB_CHECK(request_status(s, "GET", "/apis/v2beta1/pipelines/%s", gone_pid) == 404);
  KB_CHECK(request_status(s, "GET", "/apis/v2beta1/experiments/%s", gone_eid) == 404);
  kt_resp l = kt_json(s, "GET", "/apis/v2beta1/pipelines", NULL);
  KB_CHECK(kt_num(l.json, "total_size") == 1);
  KB_CHECK_STR(kt_str(l.json, "pipelines.0.pipeline_id"), keep_pid);
  kt_free(&l);
  l = kt_json(s, "GET", "/apis/v2beta1/experiments", NULL);
  KB_CHECK(kt_num(l.json, "total_size") == 2); /* Default and keep */
  kt_free(&l);
  l = kt_json(s, "GET", "/apis/v2beta1/runs?page_size=1", NULL);
  KB_CHECK(kt_num(l.json, "total_size") == KEEP);
  kt_free(&l);
  /* a wave of 400 live runs grows the index; once they are deleted it
   * shrinks again, and rehashing keeps every live id */
  enum { WAVE = 400 };
  char **wave = calloc(WAVE, sizeof *wave);
  for (int i = 0; i < WAVE; i++) {
    snprintf(name, sizeof name, "wave-%03d", i);
    wave[i] = create_run(s, name, keep_eid, keep_pid, NULL);
  }
  st = kt_json(s, "GET", "/kt/store", NULL);
  KB_CHECK(kt_num(st.json, "index_slots") >= 1024);
  kt_free(&st);
  for (int i = 0; i < WAVE; i++) {
    KB_CHECK(request_status(s, "DELETE", "/apis/v2beta1/runs/%s", wave[i]) == 200);
    free(wave[i]);
  }
  free(wave);
  st = kt_json(s, "GET", "/kt/store", NULL);
  KB_CHECK(kt_num(st.json, "index_slots") <= 256);
  KB_CHECK(kt_num(st.json, "live_runs") == KEEP);
  ids = cJSON_GetObjectItem(st.json, "run_ids");
  KB_CHECK(cJSON_GetArraySize(ids) == KEEP);
  for (int i = 0; i < KEEP && i < cJSON_GetArraySize(ids); i++)
    KB_CHECK_STR(cJSON_GetArrayItem(ids, i)->valuestring, keep[i]);
  kt_free(&st);
  for (int i = 0; i < KEEP; i++)
    KB_CHECK(request_status(s, "GET", "/apis/v2beta1/runs/%s", keep[i]) == 200);
  free(gone_pid), free(gone_eid);
  for (int i = 0; i < KEEP; i++) free(keep[i]);
  free(keep_pid), free(keep_eid);
  kt_stop(s);
}

/* Deletes pipelines until the versions vector has been compacted. */
static void churn_pipelines(kt_server *s, const char *prefix) {
  kt_resp r = kt_json(s, "GET", "/kt/store", NULL);
  double before = kt_num(r.json, "compactions");
  kt_free(&r);
  for (int i = 0; i < 200; i++) {
    char name[64];
    snprintf(name, sizeof name, "%s-%03d", prefix, i);
    char *pid = create_pipeline(s, name);
    KB_CHECK(request_status(s, "DELETE", "/apis/v2beta1/pipelines/%s?cascade=true", pid) == 200);
    free(pid);
    r = kt_json(s, "GET", "/kt/store", NULL);
    double after = kt_num(r.json, "compactions"), versions = kt_num(r.json, "versions");
    kt_free(&r);
    if (after > before && versions <= 2) return;
  }
  KB_CHECK(0); /* never compacted */
}

static double recurring_runs(kt_server *s, const char *rid, cJSON **runs) {
  char path[600];
  snprintf(path, sizeof path,
           "/apis/v2beta1/runs?page_size=200&filter=%%7B%%22predicates%%22%%3A%%5B%%7B%%22key%%22"
           "%%3A%%22recurring_run_id%%22%%2C%%22operation%%22%%3A%%22EQUALS%%22%%2C%%22string_value"
           "%%22%%3A%%22%s%%22%%7D%%5D%%7D",
           rid);
  kt_resp r = kt_json(s, "GET", path, NULL);
  double n = kt_num(r.json, "total_size");
  if (runs) *runs = cJSON_DetachItemFromObject(r.json, "runs");
  kt_free(&r);
  return n;
}

/* A deleted version stays while a recurring run (or a run) refers to it,
 * and goes with the last reference. */
static void test_version_pins(void) {
  kt_server *s = kt_start("fast", SPEED);
  if (!s) {
    KB_CHECK(0);
    return;
  }
  char *pid = create_pipeline(s, "pinned");
  char body[600];
  snprintf(body, sizeof body,
           "{\"display_name\":\"pins\",\"pipeline_version_reference\":{\"pipeline_id\":\"%s\"},"
           "\"runtime_config\":{\"parameters\":{\"message\":\"pinned\"}},"
           "\"trigger\":{\"periodic_schedule\":{\"interval_second\":\"600\"}},\"max_concurrency\":\"10\"}",
           pid ? pid : "");
  char *rid = create(s, "/apis/v2beta1/recurringruns", body, "recurring_run_id");
  KB_CHECK(request_status(s, "DELETE", "/apis/v2beta1/pipelines/%s?cascade=true", pid) == 200);
  churn_pipelines(s, "churn");
  kt_resp st = kt_json(s, "GET", "/kt/store", NULL);
  KB_CHECK(kt_num(st.json, "kept_versions") == 1);
  KB_CHECK(kt_num(st.json, "live_versions") == 0);
  kt_free(&st);
  /* the schedule still starts runs of the deleted version */
  double n0 = recurring_runs(s, rid, NULL), n = n0;
  for (int i = 0; i < 500 && n < n0 + 3; i++) {
    kt_sleep_ms(10);
    n = recurring_runs(s, rid, NULL);
  }
  KB_CHECK(n >= n0 + 3);
  /* the last references go: the recurring run, then its runs */
  KB_CHECK(request_status(s, "DELETE", "/apis/v2beta1/recurringruns/%s", rid) == 200);
  for (int page = 0; page < 20 && recurring_runs(s, rid, NULL) > 0; page++) {
    cJSON *runs = NULL;
    recurring_runs(s, rid, &runs);
    const cJSON *run;
    cJSON_ArrayForEach(run, runs) {
      KB_CHECK(request_status(s, "DELETE", "/apis/v2beta1/runs/%s", kt_str(run, "run_id")) == 200);
    }
    cJSON_Delete(runs);
  }
  KB_CHECK(recurring_runs(s, rid, NULL) <= 0);
  churn_pipelines(s, "again");
  st = kt_json(s, "GET", "/kt/store", NULL);
  KB_CHECK(kt_num(st.json, "kept_versions") == 0);
  KB_CHECK(kt_num(st.json, "live_runs") == 0);
  KB_CHECK(kt_num(st.json, "model_runs") == 0);
  kt_free(&st);
  free(rid);
  free(pid);
  kt_stop(s);
}

/* Runs and recurring runs with an inline pipeline_spec load a model
 * pipeline each; the model keeps it while the run exists, no longer. */
static void test_inline_release(void) {
  kt_server *s = kt_start("fast", SPEED);
  size_t len;
  char *yaml = st_read_file(HELLO, &len);
  kb_yaml_error ye;
  cJSON *spec = yaml ? kb_yaml_parse(yaml, len, &ye) : NULL;
  char *spec_json = spec ? cJSON_PrintUnformatted(spec) : NULL;
  KB_CHECK(s && spec_json);
  if (!s || !spec_json) {
    kt_stop(s);
    free(yaml), cJSON_Delete(spec), cJSON_free(spec_json);
    return;
  }
  size_t cap = strlen(spec_json) + 400;
  char *body = malloc(cap);
  for (int i = 0; i < 40; i++) {
    snprintf(body, cap, "{\"display_name\":\"inline-%d\",\"pipeline_spec\":%s}", i, spec_json);
    char *id = create(s, "/apis/v2beta1/runs", body, "run_id");
    KB_CHECK(request_status(s, "DELETE", "/apis/v2beta1/runs/%s", id) == 200);
    free(id);
    snprintf(body, cap,
             "{\"display_name\":\"inline-%d\",\"pipeline_spec\":%s,\"mode\":\"DISABLE\","
             "\"trigger\":{\"periodic_schedule\":{\"interval_second\":\"60\"}}}",
             i, spec_json);
    id = create(s, "/apis/v2beta1/recurringruns", body, "recurring_run_id");
    KB_CHECK(request_status(s, "DELETE", "/apis/v2beta1/recurringruns/%s", id) == 200);
    free(id);
  }
  kt_resp st = kt_json(s, "GET", "/kt/store", NULL);
  KB_CHECK(kt_num(st.json, "model_pipeline_slots") <= 2);
  KB_CHECK(kt_num(st.json, "model_runs") == 0);
  kt_free(&st);
  free(body);
  cJSON_free(spec_json);
  cJSON_Delete(spec);
  free(yaml);
  kt_stop(s);
}

static void test_cron(void) {
  double t0 = 1704067200; /* 2024-01-01T00:00:00Z, a Monday */
  KB_CHECK(kb_sim_cron_next("0 * * * * *", t0) == t0 + 60);
  KB_CHECK(kb_sim_cron_next("*/15 * * * *", t0) == t0 + 900);
  KB_CHECK(kb_sim_cron_next("0 30 2 * * *", t0) == t0 + 2 * 3600 + 1800);
  KB_CHECK(kb_sim_cron_next("0 0 0 * * 0", t0) == t0 + 6 * 86400); /* next Sunday */
  KB_CHECK(kb_sim_cron_next("@hourly", t0) == t0 + 3600);
  KB_CHECK(kb_sim_cron_next("0 0 0 1 3 *", t0) == t0 + (31 + 29) * 86400.0);
  KB_CHECK(kb_sim_cron_next("61 * * * *", t0) == -1);
  KB_CHECK(kb_sim_cron_next("* *", t0) == -1);
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
  KB_RUN(test_store_sweep);
  KB_RUN(test_version_pins);
  KB_RUN(test_inline_release);
  curl_global_cleanup();
  return kb_test_report();
}
