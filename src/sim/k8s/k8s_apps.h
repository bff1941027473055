/* Defaults, validation and seed objects of the workload, service and
 * cluster kinds (k8s_apps.c), beside the built-in ones of k8s_builtin.c. */
#ifndef KB_K8S_APPS_H
#define KB_K8S_APPS_H

#include "k8s_internal.h"

/* 0 or -code for those kinds; 1 when res is none of them. */
int kb_k8s_default_apps(kb_k8s_store *st, const kb_k8s_res *res, cJSON *obj, int create,
                     kb_k8s_error *err);
/* The objects a fresh cluster has: StorageClass `standard` (the default),
 * PriorityClasses system-cluster-critical and system-node-critical, the
 * `kubernetes` Service in default (the first address of the service range). */
int kb_k8s_apps_seed(kb_k8s_store *st);
/* "10.96.0.0/12": base address and size; -1 when malformed. */
int kb_k8s_cidr_parse(const char *cidr, uint32_t *base, uint32_t *size);
void kb_k8s_ip_str(uint32_t ip, char out[16]);

/* Shared with k8s_builtin.c. */
int kb_k8s_check_containers(const kb_k8s_res *res, const cJSON *obj, const cJSON *pod_spec,
                         const char *prefix, kb_k8s_error *err);
void kb_k8s_default_pod_spec(cJSON *spec, const char *restart);

#endif
