/* Pod logs: a few plausible lines per step, written when its container
 * starts and when it ends, so `kubectl logs` and log-collecting scenarios
 * have something to read. The flavour follows the image (a training
 * framework prints epochs, anything else prints step progress). */
#include <stdio.h>
#include <string.h>

#include "sim_glue.h"

static int is_training(const char *image) {
  return image && (strstr(image, "tensorflow") || strstr(image, "pytorch") ||
                   strstr(image, "torch") || strstr(image, "mpi") || strstr(image, "horovod"));
}

void glue_logs_started(sim_glue *g, const kb_sim_pod_info *pi, const char *ns, const char *pod,
                       const char *container) {
  const char *image = pi->image ? pi->image : "unknown";
  const char *what = pi->template_name ? pi->template_name : pod;
  if (is_training(image)) {
    glue_log(g, ns, pod, container, "INFO: starting %s on %s (image %s)", what,
             pi->node ? pi->node : "?", image);
    glue_log(g, ns, pod, container, "INFO: loading dataset");
    glue_log(g, ns, pod, container, "INFO: epoch 1/3 started");
    return;
  }
  glue_log(g, ns, pod, container, "level=info msg=\"starting step %s\" image=%s", what, image);
  glue_log(g, ns, pod, container, "step %s: running", what);
}

void glue_logs_ended(sim_glue *g, const kb_sim_pod_info *pi, const char *ns, const char *pod,
                     const char *container) {
  const char *what = pi->template_name ? pi->template_name : pod;
  double took = pi->started_at >= 0 && pi->finished_at >= pi->started_at
                    ? pi->finished_at - pi->started_at : 0;
  if (pi->exit_code != 0) {
    glue_log(g, ns, pod, container, "ERROR: step %s failed: %s (exit code %d)", what,
             pi->reason ? pi->reason : "Error", pi->exit_code);
    return;
  }
  if (is_training(pi->image)) {
    glue_log(g, ns, pod, container, "INFO: epoch 3/3 done, loss=0.0421 accuracy=0.9874");
    glue_log(g, ns, pod, container, "INFO: training finished in %.1fs", took);
    return;
  }
  glue_log(g, ns, pod, container, "step %s: done in %.1fs", what, took);
}
