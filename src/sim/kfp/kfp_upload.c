/* The multipart upload endpoints of pipelines and versions (hand-written
 * HTTP handlers: grpc-gateway does not route them). */
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

static int file_ok(const char *filename, const char *data, size_t len) {
  const char *dot = filename ? strrchr(filename, '.') : NULL;
  if (dot && (!strcmp(dot, ".yaml") || !strcmp(dot, ".yml") || !strcmp(dot, ".json")))
    return len <= KFP_MAX_FILE;
  (void)data;
  return 0; /* archives (zip, tar.gz) are not supported by the simulator */
}

static const kb_multipart_part *upload_file(kfp_req *r, kb_multipart *mp, const char **body) {
  size_t len;
  *body = kb_httpd_req_body(r->http, &len);
  const char *ct = kb_httpd_req_header(r->http, "Content-Type");
  if (!ct || kb_multipart_parse(mp, ct, *body, len, 0, NULL, 0)) {
    memset(mp, 0, sizeof *mp);
    kb_kfp_upload_error(r, 400, "Failed to read pipeline from file");
    return NULL;
  }
  for (size_t i = 0; i < mp->nparts; i++)
    if (mp->parts[i].name && !strcmp(mp->parts[i].name, "uploadfile")) {
      const kb_multipart_part *part = &mp->parts[i];
      if (!file_ok(part->filename, part->data, part->len)) {
        kb_kfp_upload_error(r, 400, "Failed to read a pipeline spec file");
        return NULL;
      }
      return part;
    }
  kb_kfp_upload_error(r, 400, "Failed to read pipeline from file");
  return NULL;
}

void kb_kfp_h_upload_pipeline(kfp_req *r) {
  kb_multipart mp;
  const char *body;
  const kb_multipart_part *part = upload_file(r, &mp, &body);
  if (!part) {
    kb_multipart_free(&mp);
    return;
  }
  const char *qname = kb_kfp_query(r, "name"), *qdisplay = kb_kfp_query(r, "display_name");
  const char *name = qname && *qname ? qname : qdisplay && *qdisplay ? qdisplay
                                        : part->filename ? part->filename : "";
  const char *display = qdisplay && *qdisplay ? qdisplay : name;
  const char *desc = kb_kfp_query(r, "description");
  const char *wrap = "Failed to create a pipeline and a pipeline version";
  if (kb_kfp_pipeline_by_name(r->kfp, name, "")) {
    kb_kfp_upload_error(r, 409, wrap);
    kb_multipart_free(&mp);
    return;
  }
  kfp_pipeline *p = kb_kfp_pipeline_create(r, name, display, desc, "", 1, wrap);
  if (p && !kb_kfp_version_create(r, p, name, display, desc, part->data, part->len, NULL,
                               kb_kfp_query(r, "code_source_url"), 1, wrap)) {
    kb_kfp_mark_deleted(r->kfp, KFP_PIPELINE, p);
    p = NULL;
  }
  kb_multipart_free(&mp);
  if (!p) {
    if (r->status == 200 || !r->out.len) kb_kfp_upload_error(r, 500, wrap);
    return;
  }
  const char *tags = kb_kfp_query(r, "tags");
  if (tags && *tags) p->tags = cJSON_Parse(tags);
  kb_kfp_reply(r, r->ver == 1 ? kb_kfp_j_v1_pipeline(r->kfp, p) : kb_kfp_j_v2_pipeline(r->kfp, p));
}

void kb_kfp_h_upload_version(kfp_req *r) {
  kb_multipart mp;
  const char *body;
  const kb_multipart_part *part = upload_file(r, &mp, &body);
  if (!part) {
    kb_multipart_free(&mp);
    return;
  }
  const char *pid = kb_kfp_query(r, "pipelineid");
  kfp_pipeline *p = pid && *pid ? kb_kfp_lookup(r->kfp, pid, KFP_PIPELINE) : NULL;
  if (!pid || !*pid) {
    kb_kfp_upload_error(r, 400, "Please specify a pipeline id when creating versions");
  } else if (!p) {
    kb_kfp_upload_error(r, 500, "Failed to create a pipeline version");
  } else {
    const char *qname = kb_kfp_query(r, "name"), *qdisplay = kb_kfp_query(r, "display_name");
    const char *name = qname && *qname ? qname : qdisplay && *qdisplay ? qdisplay
                                          : part->filename ? part->filename : "";
    kfp_version *v = kb_kfp_version_create(r, p, name, qdisplay && *qdisplay ? qdisplay : name,
                                        kb_kfp_query(r, "description"), part->data, part->len,
                                        NULL, kb_kfp_query(r, "code_source_url"), 1,
                                        "Failed to create a pipeline version");
    if (v) kb_kfp_reply(r, r->ver == 1 ? kb_kfp_j_v1_version(r->kfp, v) : kb_kfp_j_v2_version(r->kfp, v));
  }
  kb_multipart_free(&mp);
}
