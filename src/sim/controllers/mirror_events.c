/* The mirror's Events: the model's (a pod scheduled, pulled, started, a
 * node's conditions) and the controllers' (kb_glue_event), as core/v1
 * Event objects; the newest MAX_EVENT_OBJECTS are kept (events expire). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mirror_internal.h"

static void event_keep(sim_glue *g, const char *ns, const char *name) {
  if (!g->ev_keys && !(g->ev_keys = calloc(MAX_EVENT_OBJECTS, sizeof *g->ev_keys))) return;
  if (g->ev_count == MAX_EVENT_OBJECTS) {
    char *old = g->ev_keys[g->ev_head];
    char *slash = strchr(old, '/');
    *slash = 0;
    kb_glue_write_begin(g);
    kb_k8s_delete(g->st, g->r_events, old, slash + 1, NULL, NULL, NULL);
    kb_glue_write_end(g);
    free(old);
    g->ev_keys[g->ev_head] = NULL;
    g->ev_head = (g->ev_head + 1) % MAX_EVENT_OBJECTS;
    g->ev_count--;
  }
  size_t n = strlen(ns) + strlen(name) + 2;
  char *key = malloc(n);
  if (!key) return;
  snprintf(key, n, "%s/%s", ns, name);
  g->ev_keys[(g->ev_head + g->ev_count++) % MAX_EVENT_OBJECTS] = key;
}

/* The model's message names its own pod and container: say what the store
 * shows (a controller's pod name, the pod's main container). */
static void event_message(const kb_sim_event_info *ev, const char *model_name, const glue_pod *gp,
                          char *out, size_t cap) {
  const char *m = ev->message ? ev->message : "";
  size_t o = 0;
  size_t ml = model_name ? strlen(model_name) : 0;
  while (*m && o + 1 < cap) {
    if (ml && gp && !strncmp(m, model_name, ml)) {
      o += (size_t)snprintf(out + o, cap - o, "%s", gp->name);
      m += ml;
    } else if (gp && !strncmp(m, "container main", 14) && strcmp(gp->container, "main")) {
      o += (size_t)snprintf(out + o, cap - o, "container %s", gp->container);
      m += 14;
    } else {
      out[o++] = *m++;
    }
    if (o >= cap) o = cap - 1;
  }
  out[o] = 0;
}

static void mirror_event(sim_glue *g, const kb_sim_event_info *ev) {
  const char *ns = "default", *name = NULL, *kind = "Node", *host = NULL, *uid = NULL;
  const kb_k8s_res *res = g->r_nodes;
  kb_sim_node_info ni;
  kb_sim_pod_info pi;
  glue_pod *gp = NULL;
  if (ev->object_kind == KB_SIM_KIND_POD) {
    gp = ev->object >= 0 && (size_t)ev->object < g->n_pods ? &g->pods[ev->object] : NULL;
    if (!gp || gp->state != OBJ_LIVE || gp->gen != ev->object_gen ||
        kb_sim_pod_get(g->sim, ev->object, &pi) < 0 || pi.gen != gp->gen)
      return;
    ns = gp->ns;
    name = gp->name;
    kind = "Pod";
    res = g->r_pods;
  } else if (kb_sim_node_get(g->sim, ev->object, &ni) == 0) {
    name = ni.name;
  }
  if (!name) return;
  const cJSON *obj = kb_k8s_peek(g->st, res, ev->object_kind == KB_SIM_KIND_POD ? ns : NULL, name);
  if (obj) uid = kb_k8s_meta_str(obj, "uid");
  if (ev->object_kind == KB_SIM_KIND_POD && obj)
    host = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "spec"), "nodeName"));
  int sched = !strcmp(ev->reason, "Scheduled") || !strcmp(ev->reason, "FailedScheduling");
  const char *component = sched ? "default-scheduler"
                          : ev->object_kind == KB_SIM_KIND_NODE ? "node-controller" : "kubelet";
  char ename[384], ts[32], msg[1024];
  event_message(ev, gp ? pi.name : NULL, gp, msg, sizeof msg);
  snprintf(ename, sizeof ename, "%s.%016llx", name, (unsigned long long)(0x17e0000000000000ull + ev->seq));
  kb_glue_time(g, ev->time, ts);
  cJSON *o = cJSON_CreateObject();
  cJSON *md = cJSON_AddObjectToObject(o, "metadata");
  cJSON_AddStringToObject(md, "name", ename);
  cJSON_AddStringToObject(md, "namespace", ns);
  cJSON *io = cJSON_AddObjectToObject(o, "involvedObject");
  cJSON_AddStringToObject(io, "kind", kind);
  if (ev->object_kind == KB_SIM_KIND_POD) cJSON_AddStringToObject(io, "namespace", ns);
  cJSON_AddStringToObject(io, "name", name);
  if (uid) cJSON_AddStringToObject(io, "uid", uid);
  cJSON_AddStringToObject(io, "apiVersion", "v1");
  if (ev->object_kind == KB_SIM_KIND_POD && !sched) {
    char fp[300];
    snprintf(fp, sizeof fp, "spec.containers{%s}", gp->container);
    cJSON_AddStringToObject(io, "fieldPath", fp);
  }
  cJSON_AddStringToObject(o, "reason", ev->reason);
  cJSON_AddStringToObject(o, "message", msg);
  cJSON *src = cJSON_AddObjectToObject(o, "source");
  cJSON_AddStringToObject(src, "component", component);
  if (host && !sched) cJSON_AddStringToObject(src, "host", host);
  cJSON_AddStringToObject(o, "firstTimestamp", ts);
  cJSON_AddStringToObject(o, "lastTimestamp", ts);
  cJSON_AddNumberToObject(o, "count", 1);
  cJSON_AddStringToObject(o, "type", ev->type);
  cJSON_AddNullToObject(o, "eventTime");
  cJSON_AddStringToObject(o, "reportingComponent", sched ? "default-scheduler" : component);
  cJSON_AddStringToObject(o, "reportingInstance", host && !sched ? host : "");
  kb_glue_ensure_namespace(g, ns);
  kb_glue_write_begin(g);
  int rc = kb_k8s_create(g->st, g->r_events, ns, o, 0, NULL, NULL);
  kb_glue_write_end(g);
  cJSON_Delete(o);
  if (rc == 0) event_keep(g, ns, ename);
}

void kb_glue_event(sim_glue *g, const cJSON *obj, const char *type, const char *reason,
                const char *component, const char *fmt, ...) {
  const char *ns = kb_k8s_meta_str(obj, "namespace"), *name = kb_k8s_meta_str(obj, "name");
  if (!obj || !name) return;
  char msg[512], ename[384], ts[32];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(ename, sizeof ename, "%s.%016llx", name,
           (unsigned long long)(0x1800000000000000ull + ++g->ctl_events));
  kb_glue_time(g, kb_sim_now(g->sim), ts);
  cJSON *o = cJSON_CreateObject();
  cJSON *md = cJSON_AddObjectToObject(o, "metadata");
  cJSON_AddStringToObject(md, "name", ename);
  cJSON_AddStringToObject(md, "namespace", ns ? ns : "default");
  cJSON *io = cJSON_AddObjectToObject(o, "involvedObject");
  const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(obj, "kind"));
  const char *av = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(obj, "apiVersion"));
  cJSON_AddStringToObject(io, "kind", kind ? kind : "");
  if (ns) cJSON_AddStringToObject(io, "namespace", ns);
  cJSON_AddStringToObject(io, "name", name);
  if (kb_k8s_meta_str(obj, "uid")) cJSON_AddStringToObject(io, "uid", kb_k8s_meta_str(obj, "uid"));
  cJSON_AddStringToObject(io, "apiVersion", av ? av : "v1");
  cJSON_AddStringToObject(o, "reason", reason);
  cJSON_AddStringToObject(o, "message", msg);
  cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "source"), "component", component);
  cJSON_AddStringToObject(o, "firstTimestamp", ts);
  cJSON_AddStringToObject(o, "lastTimestamp", ts);
  cJSON_AddNumberToObject(o, "count", 1);
  cJSON_AddStringToObject(o, "type", type);
  cJSON_AddNullToObject(o, "eventTime");
  cJSON_AddStringToObject(o, "reportingComponent", component);
  cJSON_AddStringToObject(o, "reportingInstance", "");
  kb_glue_write_begin(g);
  int rc = kb_k8s_create(g->st, g->r_events, ns ? ns : "default", o, 0, NULL, NULL);
  kb_glue_write_end(g);
  cJSON_Delete(o);
  if (rc == 0) event_keep(g, ns ? ns : "default", ename);
}

size_t kb_glue_mirror_events(sim_glue *g, size_t budget) {
  g->events_dirty = 0;
  uint64_t first = kb_sim_event_first(g->sim), end = kb_sim_event_end(g->sim);
  if (g->ev_next < first) g->ev_next = first;
  /* Of a backlog, only the newest MAX_EVENT_OBJECTS would still be kept
   * once it is mirrored: older ones would be created and deleted unseen
   * (Events expire), so they are not written at all. */
  if (end - g->ev_next > MAX_EVENT_OBJECTS) g->ev_next = end - MAX_EVENT_OBJECTS;
  size_t done = 0;
  for (; g->ev_next < end && done < budget; g->ev_next++, done++) {
    kb_sim_event_info ev;
    if (kb_sim_event_get(g->sim, g->ev_next, &ev) == 0) mirror_event(g, &ev);
  }
  if (g->ev_next < end) g->events_dirty = 1;
  return done;
}
