/* Pipelines and pipeline versions (v2beta1 and v1beta1). Every version is
 * expanded by the simulator when it is created (kb_sim_pipeline_load), so
 * a bad template is refused here as the server refuses it, and runs only
 * reference the loaded id. Pipeline URLs are fetched in kfp_fetch.c, the
 * multipart uploads are in kfp_upload.c. */
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

/* ---- creation ---- */

kfp_pipeline *kb_kfp_pipeline_create(kfp_req *r, const char *name, const char *display_name,
                                  const char *description, const char *ns, int upload,
                                  const char *wrap) {
  kb_sim_kfp *kfp = r->kfp;
  if (!name || !*name) {
    kb_kfp_error(r, KFP_INVALID_ARGUMENT, "name is required",
              "%s: Invalid input error: name is required", wrap);
    return NULL;
  }
  if (kb_kfp_pipeline_by_name(kfp, name, ns)) {
    char ext[400];
    snprintf(ext, sizeof ext,
             "Failed to create a new pipeline. The name %s already exists. Please specify a new "
             "name",
             name);
    if (upload) kb_kfp_upload_error(r, 409, "Failed to create a pipeline and a pipeline version");
    else kb_kfp_error(r, KFP_ALREADY_EXISTS, ext, "%s: Already exist error: %s", wrap, ext);
    return NULL;
  }
  kfp_pipeline *p = calloc(1, sizeof *p);
  if (!p) goto oom;
  p->id = kb_kfp_uuid(kfp);
  p->name = kb_kfp_strdup(name);
  p->display_name = kb_kfp_strdup(display_name && *display_name ? display_name : name);
  p->description = kb_kfp_strdup(description);
  p->namespace_ = kb_kfp_strdup(ns);
  p->created_at = kb_kfp_now_unix(kfp);
  p->seq = ++kfp->seq;
  if (!p->id || !p->name || !p->display_name || kb_kfp_store_add(kfp, KFP_PIPELINE, p->id, p)) {
    free(p->id), free(p->name), free(p->display_name), free(p->description);
    free(p->namespace_), free(p);
    goto oom;
  }
  return p;
oom:
  kb_kfp_error(r, KFP_INTERNAL, "Internal Server Error", "%s: out of memory", wrap);
  return NULL;
}

/* KFP's template sniffing: an Argo Workflow or a v2 IR PipelineSpec. */
static const char *template_format(const cJSON *doc) {
  const cJSON *api = cJSON_GetObjectItemCaseSensitive(doc, "apiVersion");
  const cJSON *kind = cJSON_GetObjectItemCaseSensitive(doc, "kind");
  if (cJSON_IsString(api) && !strncmp(api->valuestring, "argoproj.io/", 12) &&
      cJSON_IsString(kind) && !strcmp(kind->valuestring, "Workflow"))
    return "v1";
  const cJSON *info = cJSON_GetObjectItemCaseSensitive(doc, "pipelineInfo");
  if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(info, "name")) &&
      cJSON_GetObjectItemCaseSensitive(doc, "root"))
    return "v2";
  return NULL;
}

static void bad_template(kfp_req *r, int upload, const char *wrap, const char *ext) {
  if (upload) kb_kfp_upload_error(r, 400, ext);
  else kb_kfp_error(r, KFP_INVALID_ARGUMENT, ext, "%s: Invalid input error: %s", wrap, ext);
}

/* docs: the template's YAML documents (owned on success). */
static kfp_version *version_from_docs(kfp_req *r, kfp_pipeline *p, const char *name,
                                      const char *display_name, const char *description,
                                      cJSON *docs, const char *package_url,
                                      const char *code_source_url, int upload,
                                      const char *wrap) {
  kb_sim_kfp *kfp = r->kfp;
  const cJSON *doc = cJSON_GetArrayItem(docs, 0);
  const char *format = template_format(doc);
  if (!format) {
    bad_template(r, upload, wrap, "unknown template format: pipeline spec is invalid");
    return NULL;
  }
  if (!name || !*name) {
    kb_kfp_error(r, KFP_INVALID_ARGUMENT, "name is required",
              "%s: Invalid input error: name is required", wrap);
    return NULL;
  }
  for (size_t i = 0; i < kfp->versions.n; i++) {
    kfp_version *o = kfp->versions.items[i];
    if (!o->deleted && !strcmp(o->pipeline_id, p->id) && !strcmp(o->name, name)) {
      char ext[400];
      snprintf(ext, sizeof ext,
               "Failed to create a new pipeline version. The name %s already exists. Please "
               "specify a new name",
               name);
      if (upload) kb_kfp_upload_error(r, 409, "Failed to create a pipeline version");
      else kb_kfp_error(r, KFP_ALREADY_EXISTS, ext, "%s: Already exist error: %s", wrap, ext);
      return NULL;
    }
  }
  kb_sim_error err = {0};
  int sp = kb_sim_pipeline_load(kfp->sim, cJSON_GetArraySize(docs) > 1 ? docs : doc, NULL, &err);
  if (sp < 0) {
    char ext[400];
    snprintf(ext, sizeof ext, "Failed to create a pipeline version: %s", err.message);
    bad_template(r, upload, wrap, ext);
    return NULL;
  }
  kfp_version *v = calloc(1, sizeof *v);
  if (!v) {
    kb_sim_pipeline_release(kfp->sim, sp);
    goto oom;
  }
  v->id = kb_kfp_uuid(kfp);
  v->pipeline_id = kb_kfp_strdup(p->id);
  v->name = kb_kfp_strdup(name);
  v->display_name = kb_kfp_strdup(display_name && *display_name ? display_name : name);
  v->description = kb_kfp_strdup(description);
  v->package_url = kb_kfp_strdup(package_url);
  v->code_source_url = kb_kfp_strdup(code_source_url);
  v->created_at = kb_kfp_now_unix(kfp);
  v->seq = ++kfp->seq;
  v->format = format;
  v->sim_pipeline = sp;
  if (cJSON_GetArraySize(docs) > 1 && !strcmp(format, "v2")) {
    v->spec = cJSON_CreateObject();
    cJSON_AddItemToObject(v->spec, "pipeline_spec", cJSON_Duplicate(doc, 1));
    cJSON_AddItemToObject(v->spec, "platform_spec", cJSON_Duplicate(cJSON_GetArrayItem(docs, 1), 1));
  } else {
    v->spec = cJSON_Duplicate(doc, 1);
  }
  if (!v->id || !v->pipeline_id || !v->name || !v->display_name || !v->spec ||
      kb_kfp_store_add(kfp, KFP_VERSION, v->id, v)) {
    kb_sim_pipeline_release(kfp->sim, sp);
    free(v->id), free(v->pipeline_id), free(v->name), free(v->display_name);
    free(v->description), free(v->package_url), free(v->code_source_url);
    cJSON_Delete(v->spec), free(v);
    goto oom;
  }
  v->docs = docs;
  return v;
oom:
  kb_kfp_error(r, KFP_INTERNAL, "Internal Server Error", "%s: out of memory", wrap);
  return NULL;
}

kfp_version *kb_kfp_version_create(kfp_req *r, kfp_pipeline *p, const char *name,
                                const char *display_name, const char *description,
                                const char *text, size_t len, const char *package_url,
                                const char *code_source_url, int upload, const char *wrap) {
  cJSON *docs = NULL;
  kb_yaml_error ye;
  if (kb_yaml_parse_all(text, len, &docs, &ye) || !cJSON_GetArraySize(docs)) {
    char ext[400];
    snprintf(ext, sizeof ext, "Failed to parse the pipeline spec: %s",
             docs ? "the file is empty" : ye.message);
    cJSON_Delete(docs);
    bad_template(r, upload, wrap, ext);
    return NULL;
  }
  kfp_version *v = version_from_docs(r, p, name, display_name, description, docs, package_url,
                                     code_source_url, upload, wrap);
  if (!v) cJSON_Delete(docs);
  return v;
}

static const char *base_name(const char *url) {
  const char *s = url ? strrchr(url, '/') : NULL;
  return s ? s + 1 : url ? url : "";
}

static const char *jstr(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Either proto name or lowerCamelCase JSON name. */
static const cJSON *jget(const cJSON *o, const char *proto, const char *camel) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, proto);
  return v ? v : cJSON_GetObjectItemCaseSensitive(o, camel);
}

static const char *jstr2(const cJSON *o, const char *proto, const char *camel) {
  const cJSON *v = jget(o, proto, camel);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Pipeline + first version from a URL (v1 CreatePipeline, v2
 * CreatePipelineAndVersion). */
static kfp_pipeline *create_with_url(kfp_req *r, const char *name, const char *display_name,
                                     const char *description, const char *url,
                                     const char *wrap) {
  const char *pname = name && *name ? name : display_name && *display_name ? display_name
                                                                         : base_name(url);
  size_t len;
  char *text = kb_kfp_fetch_url(r, url, &len, wrap);
  if (!text) return NULL;
  if (kb_kfp_pipeline_by_name(r->kfp, pname, "")) {
    free(text);
    kb_kfp_pipeline_create(r, pname, display_name, description, "", 0, wrap); /* replies 409 */
    return NULL;
  }
  kfp_pipeline *p = kb_kfp_pipeline_create(r, pname, display_name, description, "", 0, wrap);
  if (p && !kb_kfp_version_create(r, p, pname, p->display_name, description, text, len, url, NULL,
                               0, wrap)) {
    kb_kfp_mark_deleted(r->kfp, KFP_PIPELINE, p);
    p = NULL;
  }
  free(text);
  return p;
}

void kb_kfp_h_create_pipeline(kfp_req *r) {
  const cJSON *b = r->body;
  kfp_pipeline *p;
  if (r->ver == 2) {
    p = kb_kfp_pipeline_create(r, jstr(b, "name") && *jstr(b, "name") ? jstr(b, "name")
                                                                   : jstr2(b, "display_name", "displayName"),
                            jstr2(b, "display_name", "displayName"), jstr(b, "description"),
                            jstr(b, "namespace"), 0,
                            "Failed to create a pipeline due to server error");
    if (p) {
      const cJSON *tags = cJSON_GetObjectItemCaseSensitive(b, "tags");
      if (cJSON_IsObject(tags)) p->tags = cJSON_Duplicate(tags, 1);
      kb_kfp_reply(r, kb_kfp_j_v2_pipeline(r->kfp, p));
    }
    return;
  }
  kb_kfp_metrics_inc(r->kfp->metrics, "pipeline_server_create_version_requests");
  p = create_with_url(r, jstr(b, "name"), NULL, jstr(b, "description"),
                      jstr2(cJSON_GetObjectItemCaseSensitive(b, "url"), "pipeline_url", "pipelineUrl"),
                      "Failed to create a pipeline (v1beta1)");
  if (p) kb_kfp_reply(r, kb_kfp_j_v1_pipeline(r->kfp, p));
}

void kb_kfp_h_create_pipeline_and_version(kfp_req *r) {
  const cJSON *pl = cJSON_GetObjectItemCaseSensitive(r->body, "pipeline");
  const cJSON *pv = jget(r->body, "pipeline_version", "pipelineVersion");
  const char *url = jstr2(jget(pv, "package_url", "packageUrl"), "pipeline_url", "pipelineUrl");
  kfp_pipeline *p = create_with_url(r, jstr(pl, "name"), jstr2(pl, "display_name", "displayName"),
                                    jstr(pl, "description"), url,
                                    "Failed to create a pipeline and a pipeline version");
  if (p) kb_kfp_reply(r, kb_kfp_j_v2_pipeline(r->kfp, p));
}

static kfp_pipeline *find_pipeline(kfp_req *r, const char *id, const char *wrap) {
  kfp_pipeline *p = kb_kfp_lookup(r->kfp, id, KFP_PIPELINE);
  if (!p) kb_kfp_not_found(r, wrap, "Pipeline", id);
  return p;
}

void kb_kfp_h_get_pipeline(kfp_req *r) {
  char wrap[200];
  snprintf(wrap, sizeof wrap, "Failed to get a pipeline%s %s. Check error stack",
           r->ver == 1 ? " (v1beta1)" : "", r->params[0]);
  kfp_pipeline *p = find_pipeline(r, r->params[0], wrap);
  if (p) kb_kfp_reply(r, r->ver == 1 ? kb_kfp_j_v1_pipeline(r->kfp, p) : kb_kfp_j_v2_pipeline(r->kfp, p));
}

void kb_kfp_h_get_pipeline_by_name(kfp_req *r) {
  const char *name = r->ver == 1 ? r->params[1] : r->params[0];
  const char *ns = r->ver == 1 ? r->params[0] : kb_kfp_query(r, "namespace");
  /* single-user mode: every namespace is the empty one */
  kfp_pipeline *p = kb_kfp_pipeline_by_name(r->kfp, name, "");
  if (!p) {
    char wrap[300], id[300];
    snprintf(wrap, sizeof wrap,
             "Failed to get a pipeline%s with name %s and namespace %s. Check error stack.",
             r->ver == 1 ? " (v1beta1)" : "", name, ns ? ns : "");
    snprintf(id, sizeof id, "/%s", name);
    kb_kfp_not_found(r, wrap, "Namespace/Pipeline", id);
    return;
  }
  kb_kfp_reply(r, r->ver == 1 ? kb_kfp_j_v1_pipeline(r->kfp, p) : kb_kfp_j_v2_pipeline(r->kfp, p));
}

static cJSON *render_pipeline_v2(const kb_sim_kfp *k, const void *o) {
  return kb_kfp_j_v2_pipeline(k, o);
}
static cJSON *render_pipeline_v1(const kb_sim_kfp *k, const void *o) {
  return kb_kfp_j_v1_pipeline(k, o);
}
static cJSON *render_version_v2(const kb_sim_kfp *k, const void *o) {
  return kb_kfp_j_v2_version(k, o);
}
static cJSON *render_version_v1(const kb_sim_kfp *k, const void *o) {
  return kb_kfp_j_v1_version(k, o);
}

void kb_kfp_h_list_pipelines(kfp_req *r) {
  kfp_vec cand = {0};
  kb_sim_kfp *kfp = r->kfp;
  for (size_t i = 0; i < kfp->pipelines.n; i++) {
    kfp_pipeline *p = kfp->pipelines.items[i];
    if (!p->deleted) kb_kfp_vec_push(&cand, p);
  }
  r->stored_rows = cand.n;
  kb_kfp_reply_list(r, &kb_kfp_list_pipelines, &cand,
                    r->ver == 1 ? "Failed to list pipelines (v1beta1)" : "Failed to list pipelines",
                    "pipelines", r->ver == 1 ? render_pipeline_v1 : render_pipeline_v2);
}

/* With its versions (cascade). */
static void delete_pipeline(kb_sim_kfp *kfp, kfp_pipeline *p) {
  for (size_t i = 0; i < kfp->versions.n; i++) {
    kfp_version *v = kfp->versions.items[i];
    if (!strcmp(v->pipeline_id, p->id)) kb_kfp_mark_deleted(kfp, KFP_VERSION, v);
  }
  kb_kfp_mark_deleted(kfp, KFP_PIPELINE, p);
}

void kb_kfp_h_delete_pipeline(kfp_req *r) {
  const char *id = r->params[0];
  char wrap[200];
  snprintf(wrap, sizeof wrap, "Failed to delete pipeline%s %s. Check error stack",
           r->ver == 1 ? " (v1beta1)" : "", id);
  kfp_pipeline *p = find_pipeline(r, id, wrap);
  if (!p) return;
  const char *cascade = r->ver == 2 ? kb_kfp_query(r, "cascade") : NULL;
  if (!(cascade && !strcmp(cascade, "true"))) {
    kfp_version *v = kb_kfp_latest_version(r->kfp, id);
    if (v) {
      char ext[400];
      snprintf(ext, sizeof ext,
               "Failed to delete pipeline with id %s as it has existing pipeline versions (e.g. "
               "%s). Set cascade=true to delete all versions",
               id, v->id);
      kb_kfp_error(r, KFP_INVALID_ARGUMENT, ext, "%s: Invalid input error: %s", wrap, ext);
      return;
    }
  }
  delete_pipeline(r->kfp, p);
  kb_kfp_reply_empty(r);
}

/* ---- versions ---- */

void kb_kfp_h_create_version(kfp_req *r) {
  const cJSON *b = r->body;
  const char *pid;
  const char *wrap;
  if (r->ver == 2) {
    pid = r->params[0];
    wrap = "Failed to create a pipeline version. Check error stack";
  } else {
    pid = kb_kfp_v1_ref_id(b, "PIPELINE");
    wrap = "Failed to create a pipeline version (v1beta1)";
    if (!pid) {
      kb_kfp_error(r, KFP_INVALID_ARGUMENT, "Failed to create a pipeline version (v1beta1). Pipeline "
                                         "version is nil or pipeline's URL is empty",
                "%s: Invalid input error: Failed to create a pipeline version (v1beta1) due to "
                "missing pipeline id",
                wrap);
      return;
    }
  }
  kfp_pipeline *p = find_pipeline(r, pid, wrap);
  if (!p) return;
  const char *url = jstr2(jget(b, "package_url", "packageUrl"), "pipeline_url", "pipelineUrl");
  const char *name = jstr(b, "name");
  const char *display = jstr2(b, "display_name", "displayName");
  if (!name || !*name) name = display;
  const cJSON *spec = jget(b, "pipeline_spec", "pipelineSpec");
  kfp_version *v = NULL;
  if (r->ver == 2 && cJSON_IsObject(spec) && !url) {
    cJSON *docs = cJSON_CreateArray();
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(spec, "pipeline_spec");
    cJSON_AddItemToArray(docs, cJSON_Duplicate(ps ? ps : spec, 1));
    const cJSON *plat = cJSON_GetObjectItemCaseSensitive(spec, "platform_spec");
    if (ps && plat) cJSON_AddItemToArray(docs, cJSON_Duplicate(plat, 1));
    v = version_from_docs(r, p, name, display, jstr(b, "description"), docs, NULL,
                          jstr2(b, "code_source_url", "codeSourceUrl"), 0, wrap);
    if (!v) cJSON_Delete(docs);
  } else {
    size_t len;
    char *text = kb_kfp_fetch_url(r, url, &len, wrap);
    if (!text) return;
    v = kb_kfp_version_create(r, p, name, display, jstr(b, "description"), text, len, url,
                           jstr2(b, "code_source_url", "codeSourceUrl"), 0, wrap);
    free(text);
  }
  if (v) kb_kfp_reply(r, r->ver == 1 ? kb_kfp_j_v1_version(r->kfp, v) : kb_kfp_j_v2_version(r->kfp, v));
}

static kfp_version *find_version(kfp_req *r, const char *wrap) {
  const char *vid = r->ver == 1 ? r->params[0] : r->params[1];
  kfp_version *v = kb_kfp_lookup(r->kfp, vid, KFP_VERSION);
  if (v && r->ver == 2 && strcmp(v->pipeline_id, r->params[0])) v = NULL;
  if (!v) kb_kfp_not_found(r, wrap, "PipelineVersion", vid);
  return v;
}

void kb_kfp_h_get_version(kfp_req *r) {
  char wrap[200];
  snprintf(wrap, sizeof wrap, "Failed to get a pipeline version%s %s",
           r->ver == 1 ? " (v1beta1)" : "", r->ver == 1 ? r->params[0] : r->params[1]);
  kfp_version *v = find_version(r, wrap);
  if (v) kb_kfp_reply(r, r->ver == 1 ? kb_kfp_j_v1_version(r->kfp, v) : kb_kfp_j_v2_version(r->kfp, v));
}

void kb_kfp_h_delete_version(kfp_req *r) {
  char wrap[200];
  snprintf(wrap, sizeof wrap, "Failed to delete a pipeline version%s %s",
           r->ver == 1 ? " (v1beta1)" : "", r->ver == 1 ? r->params[0] : r->params[1]);
  kfp_version *v = find_version(r, wrap);
  if (!v) return;
  kb_kfp_mark_deleted(r->kfp, KFP_VERSION, v);
  kb_kfp_reply_empty(r);
}

void kb_kfp_h_list_versions(kfp_req *r) {
  const char *pid = r->ver == 2 ? r->params[0] : kb_kfp_query(r, "resource_key.id");
  const char *wrap = r->ver == 2 ? "Failed to list pipeline versions"
                                 : "Failed to list pipeline versions (v1beta1)";
  if (!pid || !*pid) {
    kb_kfp_error(r, KFP_INVALID_ARGUMENT,
              "Failed to list pipeline versions (v1beta1) due to missing pipeline id",
              "Invalid input error: Failed to list pipeline versions (v1beta1) due to missing "
              "pipeline id");
    return;
  }
  if (!find_pipeline(r, pid, wrap)) return;
  kfp_vec cand = {0};
  kb_sim_kfp *kfp = r->kfp;
  for (size_t i = 0; i < kfp->versions.n; i++) {
    kfp_version *v = kfp->versions.items[i];
    if (!v->deleted && !strcmp(v->pipeline_id, pid)) kb_kfp_vec_push(&cand, v);
  }
  r->stored_rows = cand.n;
  kb_kfp_reply_list(r, &kb_kfp_list_versions, &cand, wrap,
                    r->ver == 1 ? "versions" : "pipeline_versions",
                    r->ver == 1 ? render_version_v1 : render_version_v2);
}

static void reply_template(kfp_req *r, const kfp_version *v) {
  kb_yaml_error ye;
  char *y = kb_yaml_emit_all(v->docs, &ye);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "template", y ? y : "");
  free(y);
  kb_kfp_reply(r, o);
}

void kb_kfp_h_get_template(kfp_req *r) {
  const char *wrap = "Failed to get the default template (v1beta1) for pipeline";
  kfp_pipeline *p = find_pipeline(r, r->params[0], wrap);
  if (!p) return;
  kfp_version *v = kb_kfp_latest_version(r->kfp, p->id);
  if (!v) kb_kfp_not_found(r, wrap, "PipelineVersion", "Latest");
  else reply_template(r, v);
}

void kb_kfp_h_get_version_template(kfp_req *r) {
  kfp_version *v = find_version(r, "Failed to get pipeline version template");
  if (v) reply_template(r, v);
}

void kb_kfp_h_update_default_version(kfp_req *r) {
  char wrap[300];
  snprintf(wrap, sizeof wrap,
           "Failed to update (v1beta1) default pipeline version to %s for pipeline %s. Check "
           "error stack",
           r->params[1], r->params[0]);
  if (!find_pipeline(r, r->params[0], wrap)) return;
  kfp_version *v = kb_kfp_lookup(r->kfp, r->params[1], KFP_VERSION);
  if (!v || strcmp(v->pipeline_id, r->params[0])) {
    kb_kfp_not_found(r, wrap, "PipelineVersion", r->params[1]);
    return;
  }
  /* "default" is the newest version since KFP 2.0: make this one newest */
  v->seq = ++r->kfp->seq;
  v->created_at = kb_kfp_now_unix(r->kfp);
  kb_kfp_reply_empty(r);
}

