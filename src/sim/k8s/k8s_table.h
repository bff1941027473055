/* Table rendering and discovery/OpenAPI documents of the REST layer
 * (k8s_table.c, k8s_openapi.c). */
#ifndef KB_K8S_TABLE_H
#define KB_K8S_TABLE_H

#include "k8s_internal.h"

typedef enum k8s_table_include {
  K8S_TABLE_NONE,
  K8S_TABLE_METADATA, /* PartialObjectMetadata: the default */
  K8S_TABLE_OBJECT
} k8s_table_include;

/* A meta.k8s.io/v1 Table of objs (borrowed) at time `now` (unix seconds).
 * with_columns 0 omits columnDefinitions (later watch events). */
cJSON *kb_k8s_table(const kb_k8s_res *res, const cJSON *const *objs, size_t n, double now,
                 k8s_table_include inc, int with_columns, const char *rv, const char *cont);
/* A built-in type's column (as printers.go names and describes it). */
typedef struct k8s_col {
  const char *name, *type, *format, *desc;
  int priority;
} k8s_col;
/* The columns and cells of the workload, service and cluster kinds
 * (k8s_table_apps.c): NULL / 0 for the others. Cells after the name. */
const k8s_col *kb_k8s_apps_columns(const kb_k8s_res *r, size_t *n);
int kb_k8s_apps_cells(const kb_k8s_res *r, cJSON *cells, const cJSON *o, double now);

/* "5m", "2d3h", ... as k8s.io/apimachinery duration.HumanDuration. */
void kb_k8s_human_duration(double secs, char *out, size_t n);

/* Discovery documents (kind APIVersions, APIGroupList, APIGroup,
 * APIResourceList); NULL when the group/version is not served. */
cJSON *kb_k8s_discovery_api(const char *server_address);
cJSON *kb_k8s_discovery_groups(const kb_k8s_store *st);
cJSON *kb_k8s_discovery_group(const kb_k8s_store *st, const char *group);
cJSON *kb_k8s_discovery_resources(const kb_k8s_store *st, const char *group, const char *version);

/* OpenAPI v3: the index {"paths":{"api/v1":{"serverRelativeURL":...}}} and
 * one group-version document ("api/v1", "apis/batch/v1"); NULL if unknown. */
cJSON *kb_k8s_openapi_index(const kb_k8s_store *st);
cJSON *kb_k8s_openapi_doc(const kb_k8s_store *st, const char *gv_path);

#endif
