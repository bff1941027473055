/* Answers: JSON bodies, gRPC-gateway errors and the upload endpoints'
 * hand-written error shape. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kfp_internal.h"

/* grpc-gateway's HTTPStatusFromCode. */
int kb_kfp_http_status(int code) {
  switch (code) {
  case 0: return 200;
  case 1: return 499;
  case 3: return 400;
  case 4: return 504;
  case 5: return 404;
  case 6: return 409;
  case 7: return 403;
  case 8: return 429;
  case 9: return 400;
  case 10: return 409;
  case 11: return 400;
  case 12: return 501;
  case 14: return 503;
  case 16: return 401;
  default: return 500;
  }
}

const char *kb_kfp_code_name(int code) {
  static const char *const names[] = {
      "OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
      "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
      "Aborted", "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss",
      "Unauthenticated"};
  return code >= 0 && code <= 16 ? names[code] : "Unknown";
}

static void set_body(kfp_req *r, int status, cJSON *obj) {
  kb_buf_clear(&r->out);
  char *text = obj ? cJSON_PrintUnformatted(obj) : NULL;
  if (text) {
    kb_buf_append(&r->out, text, strlen(text));
    cJSON_free(text);
  } else {
    status = 500;
    kb_buf_appendf(&r->out, "{\"code\":13,\"message\":\"out of memory\"}");
  }
  r->status = status;
  cJSON_Delete(obj);
}

void kb_kfp_reply(kfp_req *r, cJSON *obj) {
  r->grpc_code = KFP_OK;
  set_body(r, 200, obj);
}

void kb_kfp_reply_empty(kfp_req *r) {
  kb_kfp_reply(r, cJSON_CreateObject());
}

void kb_kfp_error(kfp_req *r, int code, const char *external, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "code", code);
  cJSON_AddStringToObject(o, "message", msg);
  if (external) {
    cJSON *details = cJSON_AddArrayToObject(o, "details");
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "@type", "type.googleapis.com/google.rpc.Status");
    cJSON_AddNumberToObject(d, "code", code);
    cJSON_AddStringToObject(d, "message", external);
    cJSON_AddItemToArray(details, d);
  }
  r->grpc_code = code;
  set_body(r, kb_kfp_http_status(code), o);
}

void kb_kfp_upload_error(kfp_req *r, int http_status, const char *message) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "error_message", message);
  cJSON_AddStringToObject(o, "error_details", message);
  r->grpc_code = http_status == 409 ? KFP_ALREADY_EXISTS
                 : http_status == 400 ? KFP_INVALID_ARGUMENT
                                      : KFP_INTERNAL;
  set_body(r, http_status, o);
}

void kb_kfp_not_found(kfp_req *r, const char *wrap, const char *type, const char *id) {
  char ext[512];
  snprintf(ext, sizeof ext, "%s %s not found", type, id);
  kb_kfp_error(r, KFP_NOT_FOUND, ext, "%s: ResourceNotFoundError: %s", wrap, ext);
}
