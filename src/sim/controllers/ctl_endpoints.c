/* The endpoints and endpointslice controllers: for each Service with a
 * selector, the v1 Endpoints of the same name (Ready pods with an IP under
 * addresses, the others under notReadyAddresses, ports resolved from
 * targetPort, named ones through the pods' container ports) and one
 * discovery.k8s.io/v1 EndpointSlice `<svc>-xxxxx` (labels
 * kubernetes.io/service-name and endpointslice.kubernetes.io/managed-by,
 * conditions ready/serving/terminating, owned by the Service). A Service
 * without a selector keeps the Endpoints its user writes. The `kubernetes`
 * Service's Endpoints name the apiserver's own address once known. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_ctl.h"
#include "k8s_internal.h"

#define MANAGED_BY "endpointslice.kubernetes.io/managed-by"
#define SERVICE_NAME "kubernetes.io/service-name"
#define SLICE_MAX 100          /* endpoints per slice */
#define ENDPOINTS_MAX 1000     /* addresses in an Endpoints object */
#define OVER_CAPACITY "endpoints.kubernetes.io/over-capacity"

typedef struct ctl_ep {
  k8s_ctl base;
  kb_k8s_store *st;
  const kb_k8s_res *svc, *pods, *ep, *eps;
  kb_k8s_watch *w_svc, *w_pods;
  char api_ip[64];
  int api_port;
} ctl_ep;

/* The port a service port reaches on this pod; 0 when it has none. */
static int target_port(const cJSON *sp, const cJSON *pod) {
  const cJSON *tp = cJSON_GetObjectItemCaseSensitive(sp, "targetPort");
  if (cJSON_IsNumber(tp)) return tp->valueint;
  if (!cJSON_IsString(tp)) return (int)kb_k8s_path_num(sp, "port", 0);
  const cJSON *ctr, *cp;
  cJSON_ArrayForEach(ctr, kb_k8s_path(pod, "spec.containers"))
    cJSON_ArrayForEach(cp, cJSON_GetObjectItemCaseSensitive(ctr, "ports")) {
      const char *n = kb_k8s_path_str(cp, "name");
      if (n && !strcmp(n, tp->valuestring)) return (int)kb_k8s_path_num(cp, "containerPort", 0);
    }
  char *end;
  long v = strtol(tp->valuestring, &end, 10);
  return *end ? 0 : (int)v;
}

static cJSON *target_ref(const cJSON *pod) {
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "kind", "Pod");
  cJSON_AddStringToObject(r, "namespace", kb_k8s_meta_str(pod, "namespace"));
  cJSON_AddStringToObject(r, "name", kb_k8s_meta_str(pod, "name"));
  cJSON_AddStringToObject(r, "uid", kb_k8s_meta_str(pod, "uid"));
  return r;
}

static cJSON *ports_for(const cJSON *svc, const cJSON *pod) {
  cJSON *ports = cJSON_CreateArray();
  const cJSON *sp;
  cJSON_ArrayForEach(sp, kb_k8s_path(svc, "spec.ports")) {
    int port = target_port(sp, pod);
    if (!port) continue;
    cJSON *p = cJSON_CreateObject();
    if (kb_k8s_path_str(sp, "name")) cJSON_AddStringToObject(p, "name", kb_k8s_path_str(sp, "name"));
    cJSON_AddNumberToObject(p, "port", port);
    cJSON_AddStringToObject(p, "protocol", kb_k8s_path_str(sp, "protocol") ? kb_k8s_path_str(sp, "protocol") : "TCP");
    cJSON_AddItemToArray(ports, p);
  }
  return ports;
}

/* Creates or replaces (only when it differs) an object: `body` carries
 * everything but metadata.resourceVersion. */
static void put(ctl_ep *c, const kb_k8s_res *res, const char *ns, const char *name, cJSON *body) {
  const cJSON *cur = name ? kb_k8s_peek(c->st, res, ns, name) : NULL;
  if (!cur) {
    kb_k8s_create(c->st, res, ns, body, 0, NULL, NULL);
    return;
  }
  int same = 1;
  for (const cJSON *f = body->child; f && same; f = f->next) {
    if (!strcmp(f->string, "metadata")) {
      const cJSON *l = cJSON_GetObjectItemCaseSensitive(f, "labels");
      const cJSON *a = cJSON_GetObjectItemCaseSensitive(f, "annotations");
      const cJSON *ca = kb_k8s_path(cur, "metadata.annotations");
      same = (!l || cJSON_Compare(l, kb_k8s_path(cur, "metadata.labels"), 1)) &&
             (a ? ca && cJSON_Compare(a, ca, 1) : !cJSON_GetObjectItemCaseSensitive(ca, OVER_CAPACITY));
    } else {
      const cJSON *o = cJSON_GetObjectItemCaseSensitive(cur, f->string);
      same = o && cJSON_Compare(o, f, 1);
    }
  }
  /* Endpoints whose last address went: "subsets" is absent from body */
  if (same && !strcmp(res->resource, "endpoints") &&
      !cJSON_GetObjectItemCaseSensitive(body, "subsets"))
    same = !cJSON_GetObjectItemCaseSensitive(cur, "subsets");
  if (same) return;
  cJSON *md = cJSON_GetObjectItemCaseSensitive(body, "metadata");
  cJSON_DeleteItemFromObjectCaseSensitive(md, "generateName");
  cJSON_DeleteItemFromObjectCaseSensitive(md, "name");
  cJSON_AddStringToObject(md, "name", name);
  const cJSON *keep = kb_k8s_path(cur, "metadata.ownerReferences");
  if (keep && !cJSON_GetObjectItemCaseSensitive(md, "ownerReferences"))
    cJSON_AddItemToObject(md, "ownerReferences", cJSON_Duplicate(keep, 1));
  kb_k8s_update(c->st, res, ns, name, body, 0, NULL, NULL);
}

static void sync_endpoints(ctl_ep *c, const cJSON *svc, const cJSON **pods, size_t n) {
  const char *ns = kb_k8s_meta_str(svc, "namespace"), *name = kb_k8s_meta_str(svc, "name");
  cJSON *ep = cJSON_CreateObject();
  cJSON *md = cJSON_AddObjectToObject(ep, "metadata");
  cJSON_AddStringToObject(md, "name", name);
  const cJSON *sl = kb_k8s_path(svc, "metadata.labels");
  if (cJSON_GetArraySize(sl)) cJSON_AddItemToObject(md, "labels", cJSON_Duplicate(sl, 1));
  cJSON *subsets = cJSON_CreateArray();
  /* one subset: the pods of a Deployment share their ports */
  cJSON *ready = cJSON_CreateArray(), *not_ready = cJSON_CreateArray(), *ports = NULL;
  size_t kept = 0, total = 0;
  for (size_t i = 0; i < n; i++) {
    const cJSON *p = pods[i];
    const char *ip = kb_k8s_path_str(p, "status.podIP");
    if (!ip || kb_k8s_meta_str(p, "deletionTimestamp") || !kb_ctl_pod_active(p)) continue;
    if (total++, kept == ENDPOINTS_MAX) continue; /* the controller truncates at 1000 */
    kept++;
    cJSON *a = cJSON_CreateObject();
    cJSON_AddStringToObject(a, "ip", ip);
    if (kb_k8s_path_str(p, "spec.nodeName")) cJSON_AddStringToObject(a, "nodeName", kb_k8s_path_str(p, "spec.nodeName"));
    cJSON_AddItemToObject(a, "targetRef", target_ref(p));
    cJSON_AddItemToArray(kb_ctl_pod_ready(p) ? ready : not_ready, a);
    if (!ports) ports = ports_for(svc, p);
  }
  if (ports && (cJSON_GetArraySize(ready) || cJSON_GetArraySize(not_ready))) {
    cJSON *s = cJSON_CreateObject();
    if (cJSON_GetArraySize(ready)) cJSON_AddItemToObject(s, "addresses", ready);
    else cJSON_Delete(ready);
    if (cJSON_GetArraySize(not_ready)) cJSON_AddItemToObject(s, "notReadyAddresses", not_ready);
    else cJSON_Delete(not_ready);
    cJSON_AddItemToObject(s, "ports", ports);
    cJSON_AddItemToArray(subsets, s);
  } else {
    cJSON_Delete(ready);
    cJSON_Delete(not_ready);
    cJSON_Delete(ports);
  }
  if (cJSON_GetArraySize(subsets)) cJSON_AddItemToObject(ep, "subsets", subsets);
  else cJSON_Delete(subsets);
  if (total > kept)
    cJSON_AddStringToObject(cJSON_AddObjectToObject(md, "annotations"), OVER_CAPACITY, "truncated");
  put(c, c->ep, ns, name, ep);
  cJSON_Delete(ep);
}

/* An EndpointSlice of the Service without its endpoints. */
static cJSON *slice_skeleton(const cJSON *svc, const cJSON *ports) {
  const char *name = kb_k8s_meta_str(svc, "name");
  char gen[300];
  cJSON *s = cJSON_CreateObject();
  cJSON *md = cJSON_AddObjectToObject(s, "metadata");
  snprintf(gen, sizeof gen, "%.57s-", name);
  cJSON_AddStringToObject(md, "generateName", gen);
  cJSON *labels = cJSON_AddObjectToObject(md, "labels");
  cJSON_AddStringToObject(labels, MANAGED_BY, "endpointslice-controller.k8s.io");
  cJSON_AddStringToObject(labels, SERVICE_NAME, name);
  cJSON_AddItemToArray(cJSON_AddArrayToObject(md, "ownerReferences"),
                       kb_ctl_owner_ref("v1", "Service", name, kb_k8s_meta_str(svc, "uid")));
  cJSON_AddStringToObject(s, "addressType", "IPv4");
  cJSON_AddArrayToObject(s, "endpoints");
  cJSON_AddItemToObject(s, "ports", ports ? cJSON_Duplicate(ports, 1) : cJSON_CreateArray());
  return s;
}

/* At most SLICE_MAX endpoints a slice (the controller's
 * --max-endpoints-per-slice), in pod order: a pod that changes rewrites
 * only its slice. */
static void sync_slice(ctl_ep *c, const cJSON *svc, const cJSON **pods, size_t n) {
  const char *ns = kb_k8s_meta_str(svc, "namespace"), *name = kb_k8s_meta_str(svc, "name");
  cJSON *all = cJSON_CreateArray(), *ports = NULL;
  for (size_t i = 0; i < n; i++) { /* copies first: the writes below move the pods */
    const cJSON *p = pods[i];
    const char *ip = kb_k8s_path_str(p, "status.podIP");
    if (!ip || !kb_ctl_pod_active(p)) continue;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddItemToObject(e, "addresses", cJSON_CreateStringArray(&ip, 1));
    cJSON *cond = cJSON_AddObjectToObject(e, "conditions");
    int r = kb_ctl_pod_ready(p);
    cJSON_AddBoolToObject(cond, "ready", r);
    cJSON_AddBoolToObject(cond, "serving", r);
    cJSON_AddBoolToObject(cond, "terminating", 0);
    if (kb_k8s_path_str(p, "spec.nodeName")) cJSON_AddStringToObject(e, "nodeName", kb_k8s_path_str(p, "spec.nodeName"));
    cJSON_AddItemToObject(e, "targetRef", target_ref(p));
    cJSON_AddItemToArray(all, e);
    if (!ports) ports = ports_for(svc, p);
  }
  size_t total = (size_t)cJSON_GetArraySize(all);
  size_t chunks = total ? (total + SLICE_MAX - 1) / SLICE_MAX : 1;
  char sel[600];
  snprintf(sel, sizeof sel, SERVICE_NAME "=%s," MANAGED_BY "=endpointslice-controller.k8s.io", name);
  const cJSON *items;
  cJSON *existing = kb_ctl_list(c->st, c->eps, ns, sel, &items);
  size_t have = (size_t)cJSON_GetArraySize(items);
  char (*names)[256] = calloc(have ? have : 1, sizeof *names);
  for (size_t k = 0; names && k < have; k++)
    snprintf(names[k], sizeof names[k], "%s", kb_k8s_meta_str(cJSON_GetArrayItem(items, (int)k), "name"));
  cJSON_Delete(existing);
  for (size_t k = 0; names && k < chunks; k++) {
    cJSON *s = slice_skeleton(svc, ports);
    cJSON *eps = cJSON_GetObjectItemCaseSensitive(s, "endpoints");
    for (int i = 0; i < SLICE_MAX && cJSON_GetArraySize(all); i++)
      cJSON_AddItemToArray(eps, cJSON_DetachItemFromArray(all, 0));
    put(c, c->eps, ns, k < have ? names[k] : NULL, s);
    cJSON_Delete(s);
  }
  for (size_t k = chunks; names && k < have; k++) /* fewer pods: fewer slices */
    kb_k8s_delete(c->st, c->eps, ns, names[k], NULL, NULL, NULL);
  free(names);
  cJSON_Delete(ports);
  cJSON_Delete(all);
}

/* The pods of the namespace the selector matches, borrowed until the next
 * write (no copies: this runs on every pod event). */
static const cJSON **selected(ctl_ep *c, const kb_k8s_selector *sel, const char *ns, size_t *n) {
  size_t all = 0;
  const cJSON **pods = kb_ctl_peek_all(c->st, c->pods, ns, &all);
  *n = 0;
  for (size_t i = 0; pods && i < all; i++)
    if (kb_k8s_selector_match(sel, pods[i])) pods[(*n)++] = pods[i];
  return pods;
}

static void sync_service(ctl_ep *c, const cJSON *svc) {
  char text[2048];
  const cJSON *selector = kb_k8s_path(svc, "spec.selector");
  if (!cJSON_IsObject(selector) || !selector->child) return; /* its user keeps the Endpoints */
  cJSON *wrap = cJSON_CreateObject();
  cJSON_AddItemReferenceToObject(wrap, "matchLabels", (cJSON *)selector);
  int bad = kb_k8s_selector_text(wrap, text, sizeof text);
  cJSON_Delete(wrap);
  kb_k8s_selector *sel = bad ? NULL : kb_k8s_selector_parse(text, NULL, c->pods, NULL);
  if (!sel) return;
  const char *ns = kb_k8s_meta_str(svc, "namespace");
  size_t n;
  const cJSON **pods = selected(c, sel, ns, &n);
  if (pods) sync_endpoints(c, svc, pods, n);
  free(pods);
  pods = selected(c, sel, ns, &n); /* again: the Endpoints write moved things */
  if (pods) sync_slice(c, svc, pods, n);
  free(pods);
  kb_k8s_selector_free(sel);
}

/* Every Service of the namespace that selects pods. */
static void sync_namespace(ctl_ep *c, const char *ns) {
  const cJSON *items, *s;
  cJSON *list = kb_ctl_list(c->st, c->svc, ns, NULL, &items);
  cJSON_ArrayForEach(s, items) sync_service(c, s);
  cJSON_Delete(list);
}

static void apiserver_endpoints(ctl_ep *c) {
  if (!c->api_port) return;
  char json[400];
  snprintf(json, sizeof json,
           "{\"metadata\":{\"name\":\"kubernetes\",\"labels\":{\"endpointslice.kubernetes.io/"
           "skip-mirror\":\"true\"}},\"subsets\":[{\"addresses\":[{\"ip\":\"%s\"}],\"ports\":"
           "[{\"name\":\"https\",\"port\":%d,\"protocol\":\"TCP\"}]}]}",
           c->api_ip, c->api_port);
  cJSON *ep = cJSON_Parse(json);
  if (ep) put(c, c->ep, "default", "kubernetes", ep);
  cJSON_Delete(ep);
}

void kb_k8s_endpoints_set_apiserver(k8s_ctl *base, const char *ip, int port) {
  ctl_ep *c = (ctl_ep *)base;
  snprintf(c->api_ip, sizeof c->api_ip, "%s", ip && *ip ? ip : "127.0.0.1");
  c->api_port = port;
  apiserver_endpoints(c);
}

static void on_svc(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  ctl_ep *c = ud;
  if (type == KB_K8S_DELETED) { /* the slice goes with its owner; Endpoints have none */
    const char *sel = kb_k8s_path(obj, "spec.selector") ? "" : NULL;
    if (sel) kb_k8s_delete(c->st, c->ep, kb_k8s_meta_str(obj, "namespace"), kb_k8s_meta_str(obj, "name"),
                           NULL, NULL, NULL);
    return;
  }
  cJSON *copy = cJSON_Duplicate(obj, 1);
  if (copy) sync_service(c, copy);
  cJSON_Delete(copy);
}

static void on_pod(void *ud, kb_k8s_event_type type, const cJSON *obj) {
  (void)type;
  if (!cJSON_GetArraySize(kb_k8s_path(obj, "metadata.labels"))) return; /* no service selects it */
  /* a pod without an IP is in no Endpoints, before or after: pods get an
   * IP once and keep it (this skips the creations of a scale-up) */
  if (!kb_k8s_path_str(obj, "status.podIP")) return;
  char ns[256];
  snprintf(ns, sizeof ns, "%s", kb_k8s_meta_str(obj, "namespace"));
  sync_namespace(ud, ns);
}

static void ep_free(k8s_ctl *base) {
  ctl_ep *c = (ctl_ep *)base;
  kb_k8s_watch_cancel(c->w_svc);
  kb_k8s_watch_cancel(c->w_pods);
  free(c);
}

k8s_ctl *kb_k8s_endpoints_start(kb_k8s_store *st) {
  ctl_ep *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->base.free = ep_free;
  c->st = st;
  c->svc = kb_k8s_store_lookup(st, "", "v1", "services");
  c->pods = kb_k8s_store_lookup(st, "", "v1", "pods");
  c->ep = kb_k8s_store_lookup(st, "", "v1", "endpoints");
  c->eps = kb_k8s_store_lookup(st, "discovery.k8s.io", "v1", "endpointslices");
  if (c->svc && c->pods && c->ep && c->eps) {
    c->w_svc = kb_k8s_store_on(st, c->svc, on_svc, c);
    c->w_pods = kb_k8s_store_on(st, c->pods, on_pod, c);
  }
  if (!c->w_svc || !c->w_pods) {
    ep_free(&c->base);
    return NULL;
  }
  return &c->base;
}
