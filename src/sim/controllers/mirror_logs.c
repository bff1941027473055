/* Pod logs: a few plausible lines per step, written when its container
 * starts and when it ends, so `kubectl logs` and log-collecting scenarios
 * have something to read. The flavour follows the image and the
 * container's command and args, as the real programs would print:
 *
 *   tf_cnn_benchmarks (a tf-cnn image, an image named tensorflow-benchmarks
 *   running tf_cnn_benchmarks.py, or --num_batches among the flags):
 *     its header (model, batch size, --num_batches), then at the end a
 *     "N\timages/sec: ..." line at step 1 and every --display_every steps
 *     (default 10) up to --num_batches (default 100), and "total
 *     images/sec: X" with X = batch_size * num_batches / the container's
 *     running time (--batch_size, default 32); a parameter server
 *     (replica type ps) only serves.
 *   other training images (tensorflow, pytorch, torch, mpi, horovod):
 *     "training for N epochs" at the start, then one "epoch i/N done,
 *     loss=... accuracy=..." line per epoch, N from --epochs (also
 *     --num_epochs, --num-epochs; "--epochs N" too), default 3; the batch
 *     size from --batch_size / --batch-size when given.
 *   anything else: step progress.
 *
 * At most MAX_LINES step or epoch lines are written (the rest are counted
 * in one line), so a typo like --num_batches=1e9 cannot fill the memory. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb/k8s_store.h"
#include "sim_glue.h"

#define MAX_LINES 10000

static int is_training(const char *image) {
  return image && (strstr(image, "tensorflow") || strstr(image, "pytorch") ||
                   strstr(image, "torch") || strstr(image, "mpi") || strstr(image, "horovod") ||
                   strstr(image, "tf-cnn") || strstr(image, "tf_cnn"));
}

/* What the container was told (command and args), as far as logs go. */
typedef struct train_args {
  int tf_cnn;        /* runs tf_cnn_benchmarks */
  int ps;            /* a parameter server replica */
  long epochs;       /* 0: not given */
  long batch_size;   /* 0: not given */
  long num_batches;  /* 0: not given */
  long display_every;
  char model[64];
} train_args;

/* The value of flag `name` in `s` ("--name=V"), or in `next` for "--name V". */
static const char *flag_value(const char *s, const char *next, const char *name) {
  size_t n = strlen(name);
  if (strncmp(s, "--", 2) || strncmp(s + 2, name, n)) return NULL;
  if (s[2 + n] == '=') return s + 3 + n;
  if (s[2 + n] == 0) return next;
  return NULL;
}

static void number_flag(const char *s, const char *next, const char *name, long *out) {
  const char *v = flag_value(s, next, name);
  if (!v) return;
  char *end;
  double d = strtod(v, &end);
  if (end != v && d >= 1 && d < 1e12) *out = (long)d;
}

static void read_words(const cJSON *arr, train_args *a) {
  if (!cJSON_IsArray(arr)) return;
  for (const cJSON *w = arr->child; w; w = w->next) {
    if (!cJSON_IsString(w)) continue;
    const char *s = w->valuestring;
    const char *next = w->next && cJSON_IsString(w->next) ? w->next->valuestring : NULL;
    if (strstr(s, "tf_cnn_benchmarks")) a->tf_cnn = 1;
    number_flag(s, next, "epochs", &a->epochs);
    number_flag(s, next, "num_epochs", &a->epochs);
    number_flag(s, next, "num-epochs", &a->epochs);
    number_flag(s, next, "batch_size", &a->batch_size);
    number_flag(s, next, "batch-size", &a->batch_size);
    number_flag(s, next, "display_every", &a->display_every);
    long nb = 0;
    number_flag(s, next, "num_batches", &nb);
    if (nb) a->num_batches = nb, a->tf_cnn = 1;
    const char *m = flag_value(s, next, "model");
    if (m) snprintf(a->model, sizeof a->model, "%s", m);
  }
}

/* The pod's container as stored in the API (command, args, replica type). */
static void train_args_of(sim_glue *g, const char *image, const char *ns, const char *pod,
                          const char *container, train_args *a) {
  memset(a, 0, sizeof *a);
  if (image && (strstr(image, "tf-cnn") || strstr(image, "tf_cnn"))) a->tf_cnn = 1;
  const cJSON *o = kb_k8s_peek(kb_glue_store(g), kb_glue_res(g, "", "pods"), ns, pod);
  if (o) {
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(o, "metadata"), "labels");
    const cJSON *rt = cJSON_GetObjectItemCaseSensitive(labels, "training.kubeflow.org/replica-type");
    if (cJSON_IsString(rt) && !strcmp(rt->valuestring, "ps")) a->ps = 1;
    const cJSON *cs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "spec"),
                                                       "containers");
    const cJSON *c = NULL, *first = cJSON_IsArray(cs) ? cs->child : NULL;
    for (const cJSON *x = first; x && !c; x = x->next) {
      const cJSON *name = cJSON_GetObjectItemCaseSensitive(x, "name");
      if (container && cJSON_IsString(name) && !strcmp(name->valuestring, container)) c = x;
    }
    if (!c) c = first;
    if (c) {
      read_words(cJSON_GetObjectItemCaseSensitive(c, "command"), a);
      read_words(cJSON_GetObjectItemCaseSensitive(c, "args"), a);
    }
  }
  if (!a->model[0]) snprintf(a->model, sizeof a->model, "resnet50");
  if (a->tf_cnn) {
    if (!a->batch_size) a->batch_size = 32;
    if (!a->num_batches) a->num_batches = 100;
    if (!a->display_every) a->display_every = 10;
  } else if (!a->epochs) {
    a->epochs = 3;
  }
}

void kb_glue_logs_started(sim_glue *g, const kb_sim_pod_info *pi, const char *ns, const char *pod,
                       const char *container) {
  const char *image = pi->image ? pi->image : "unknown";
  const char *what = pi->template_name ? pi->template_name : pod;
  if (is_training(image)) {
    train_args a;
    train_args_of(g, image, ns, pod, container, &a);
    kb_glue_log(g, ns, pod, container, "INFO: starting %s on %s (image %s)", what,
             pi->node ? pi->node : "?", image);
    if (a.tf_cnn && a.ps) {
      kb_glue_log(g, ns, pod, container, "INFO: parameter server %s serving variables", what);
    } else if (a.tf_cnn) {
      kb_glue_log(g, ns, pod, container, "Model:       %s", a.model);
      kb_glue_log(g, ns, pod, container, "Batch size:  %ld global", a.batch_size);
      kb_glue_log(g, ns, pod, container, "Num batches: %ld", a.num_batches);
      kb_glue_log(g, ns, pod, container, "Running warm up");
      kb_glue_log(g, ns, pod, container, "Done warm up");
      kb_glue_log(g, ns, pod, container, "Step\tImg/sec\ttotal_loss");
    } else {
      kb_glue_log(g, ns, pod, container, "INFO: loading dataset");
      if (a.batch_size)
        kb_glue_log(g, ns, pod, container, "INFO: training for %ld epochs, batch size %ld", a.epochs,
                 a.batch_size);
      else
        kb_glue_log(g, ns, pod, container, "INFO: training for %ld epochs", a.epochs);
    }
    return;
  }
  kb_glue_log(g, ns, pod, container, "level=info msg=\"starting step %s\" image=%s", what, image);
  kb_glue_log(g, ns, pod, container, "step %s: running", what);
}

static void tf_cnn_ended(sim_glue *g, const train_args *a, const char *ns, const char *pod,
                         const char *container, double took) {
  double ips = took > 0 ? (double)a->batch_size * (double)a->num_batches / took : 0;
  long lines = 0, omitted = 0;
  for (long step = 1; step <= a->num_batches; step++) {
    if (step != 1 && step % a->display_every) continue;
    if (lines == MAX_LINES) {
      omitted++;
      continue;
    }
    lines++;
    double loss = 7.9 - 0.4 * (double)step / (double)a->num_batches;
    kb_glue_log(g, ns, pod, container, "%ld\timages/sec: %.1f +/- 0.0 (jitter = 0.0)\t%.3f", step, ips,
             loss);
  }
  if (omitted) kb_glue_log(g, ns, pod, container, "(%ld step lines not shown)", omitted);
  kb_glue_log(g, ns, pod, container, "----------------------------------------------------------------");
  kb_glue_log(g, ns, pod, container, "total images/sec: %.2f", ips);
  kb_glue_log(g, ns, pod, container, "----------------------------------------------------------------");
}

void kb_glue_logs_ended(sim_glue *g, const kb_sim_pod_info *pi, const char *ns, const char *pod,
                     const char *container) {
  const char *what = pi->template_name ? pi->template_name : pod;
  double took = pi->started_at >= 0 && pi->finished_at >= pi->started_at
                    ? pi->finished_at - pi->started_at : 0;
  if (pi->exit_code != 0) {
    kb_glue_log(g, ns, pod, container, "ERROR: step %s failed: %s (exit code %d)", what,
             pi->reason ? pi->reason : "Error", pi->exit_code);
    return;
  }
  if (is_training(pi->image)) {
    train_args a;
    train_args_of(g, pi->image, ns, pod, container, &a);
    if (a.tf_cnn && a.ps) {
      kb_glue_log(g, ns, pod, container, "INFO: parameter server %s done", what);
    } else if (a.tf_cnn) {
      tf_cnn_ended(g, &a, ns, pod, container, took);
    } else {
      long shown = a.epochs < MAX_LINES ? a.epochs : MAX_LINES;
      for (long i = 1; i <= shown; i++) {
        /* the loss falls to 0.0421 and accuracy rises to 0.9874 at the last epoch */
        double f = (double)(a.epochs - i) / (double)a.epochs;
        kb_glue_log(g, ns, pod, container, "INFO: epoch %ld/%ld done, loss=%.4f accuracy=%.4f", i,
                 a.epochs, 0.0421 + 0.5 * f, 0.9874 - 0.2 * f);
      }
      if (shown < a.epochs)
        kb_glue_log(g, ns, pod, container, "(%ld epoch lines not shown)", a.epochs - shown);
    }
    kb_glue_log(g, ns, pod, container, "INFO: training finished in %.1fs", took);
    return;
  }
  kb_glue_log(g, ns, pod, container, "step %s: done in %.1fs", what, took);
}

void kb_glue_log(sim_glue *g, const char *ns, const char *pod, const char *container,
              const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n > sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  kb_k8s_log_append(kb_glue_store(g), ns, pod, container, line, (size_t)n);
}
