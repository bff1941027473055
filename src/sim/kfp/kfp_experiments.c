/* Experiments (v2beta1 and v1beta1). The "Default" experiment exists from
 * the start (as the server creates it at start-up) and cannot be deleted.
 * Archiving an experiment archives its runs, as KFP does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kfp_internal.h"

static const char *jstr(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const char *v1s(const kfp_req *r) {
  return r->ver == 1 ? " (v1beta1)" : "";
}

void kb_kfp_h_create_experiment(kfp_req *r) {
  kb_sim_kfp *kfp = r->kfp;
  const cJSON *b = r->body;
  const char *name = r->ver == 1 ? jstr(b, "name") : jstr(b, "display_name");
  if (!name && r->ver == 2) name = jstr(b, "displayName");
  char wrap[100];
  snprintf(wrap, sizeof wrap, "Failed to create an experiment%s", v1s(r));
  if (!name || !*name) {
    const char *ext = "Experiment name is empty. Please specify a valid experiment name";
    kb_kfp_error(r, KFP_INVALID_ARGUMENT, ext, "%s: Invalid input error: %s", wrap, ext);
    return;
  }
  if (kb_kfp_experiment_by_name(kfp, name, "")) {
    char ext[400];
    snprintf(ext, sizeof ext,
             "Failed to create a new experiment. The name %s already exists. Please specify a "
             "new name",
             name);
    kb_kfp_error(r, KFP_ALREADY_EXISTS, ext, "%s: Already exist error: %s", wrap, ext);
    return;
  }
  kfp_experiment *e = calloc(1, sizeof *e);
  if (!e) goto oom;
  e->id = kb_kfp_uuid(kfp);
  e->name = kb_kfp_strdup(name);
  e->description = kb_kfp_strdup(jstr(b, "description"));
  e->created_at = kb_kfp_now_unix(kfp);
  e->seq = ++kfp->seq;
  if (!e->id || !e->name || kb_kfp_store_add(kfp, KFP_EXPERIMENT, e->id, e)) {
    free(e->id), free(e->name), free(e->description), free(e);
    goto oom;
  }
  kb_kfp_reply(r, r->ver == 1 ? kb_kfp_j_v1_experiment(kfp, e) : kb_kfp_j_v2_experiment(kfp, e));
  return;
oom:
  kb_kfp_error(r, KFP_INTERNAL, "Internal Server Error", "%s: out of memory", wrap);
}

static kfp_experiment *find(kfp_req *r, const char *what) {
  const char *id = r->params[0];
  kfp_experiment *e = kb_kfp_lookup(r->kfp, id, KFP_EXPERIMENT);
  if (!e) {
    char wrap[200];
    snprintf(wrap, sizeof wrap, "Failed to %s an experiment%s", what, v1s(r));
    kb_kfp_not_found(r, wrap, "Experiment", id);
  }
  return e;
}

void kb_kfp_h_get_experiment(kfp_req *r) {
  kfp_experiment *e = find(r, "get");
  if (e) kb_kfp_reply(r, r->ver == 1 ? kb_kfp_j_v1_experiment(r->kfp, e) : kb_kfp_j_v2_experiment(r->kfp, e));
}

static cJSON *render_v2(const kb_sim_kfp *k, const void *o) { return kb_kfp_j_v2_experiment(k, o); }
static cJSON *render_v1(const kb_sim_kfp *k, const void *o) { return kb_kfp_j_v1_experiment(k, o); }

void kb_kfp_h_list_experiments(kfp_req *r) {
  kb_sim_kfp *kfp = r->kfp;
  kfp_vec cand = {0};
  for (size_t i = 0; i < kfp->experiments.n; i++) {
    kfp_experiment *e = kfp->experiments.items[i];
    if (!e->deleted) kb_kfp_vec_push(&cand, e);
  }
  r->stored_rows = cand.n;
  char wrap[100];
  snprintf(wrap, sizeof wrap, "Failed to list experiments%s", v1s(r));
  kb_kfp_reply_list(r, &kb_kfp_list_experiments, &cand, wrap, "experiments",
                    r->ver == 1 ? render_v1 : render_v2);
}

void kb_kfp_h_delete_experiment(kfp_req *r) {
  kfp_experiment *e = find(r, "delete");
  if (!e) return;
  if (!strcmp(e->id, r->kfp->default_experiment_id)) {
    char ext[300];
    snprintf(ext, sizeof ext,
             "Failed to delete experiment %s. The default experiment cannot be deleted", e->id);
    kb_kfp_error(r, KFP_ABORTED, ext,
              "Failed to delete an experiment%s: BadRequestError: %s: Invalid input error: "
              "Experiment id cannot be equal to the default id %s",
              v1s(r), ext, e->id);
    return;
  }
  kb_kfp_mark_deleted(r->kfp, KFP_EXPERIMENT, e);
  kb_kfp_reply_empty(r);
}

static void set_archived(kfp_req *r, int archived) {
  kfp_experiment *e = find(r, archived ? "archive" : "unarchive");
  if (!e) return;
  e->archived = archived;
  if (archived)
    for (size_t i = 0; i < r->kfp->runs.n; i++) {
      kfp_run *run = r->kfp->runs.items[i];
      if (!run->deleted && run->experiment_id && !strcmp(run->experiment_id, e->id))
        run->archived = 1;
    }
  kb_kfp_reply_empty(r);
}

void kb_kfp_h_archive_experiment(kfp_req *r) {
  set_archived(r, 1);
}

void kb_kfp_h_unarchive_experiment(kfp_req *r) {
  set_archived(r, 0);
}
