/* The simulator as a server: its own thread and libuv loop, the model
 * (kb/sim.h) attached to it, and the REST APIs (KFP, Kubernetes, Argo) on
 * one loopback HTTP port, plus /metrics and the admin endpoint /sim/v1/.
 *
 *   kb_sim_server_opts o = {.profile = "default", .speed = 600};
 *   kb_sim_server *s = kb_sim_server_start(&o, &err);   // listening on return
 *   printf("http://127.0.0.1:%d\n", kb_sim_server_port(s));
 *   ...
 *   kb_sim_server_stop(s);                              // joins the thread
 *
 * The only state other threads read is the clock (kb_sim_server_clock),
 * fixed once started. Everything else lives on the server's thread.
 *
 * In-loop: with opts.loop (and opts.clock) the server runs on the caller's
 * loop and clock instead, with no thread: the embedded simulator of a
 * fast-forwarding scenario clock, which must see every party that waits.
 * Then every call, stop included, comes from that loop's thread, and the
 * memory is released on a later iteration of the loop. */
#ifndef KB_SIM_SERVER_H
#define KB_SIM_SERVER_H

#include <stdint.h>
#include <uv.h>

#include "kb/sim.h"

typedef struct kb_sim_server kb_sim_server;

typedef struct kb_sim_server_opts {
  const char *host;        /* NULL: 127.0.0.1 (loopback unless told otherwise) */
  int port;                /* 0: an ephemeral port */
  const char *profile;     /* NULL: "default" (unless config names one) */
  const char *config_yaml; /* optional overlay (docs/simulator.md); also api_faults */
  const char *config_name; /* for error messages, e.g. the file name */
  uint64_t seed;
  double speed;            /* <= 0: 600 */
  const char *admin_token; /* required for /sim/v1 when not bound to loopback */
  uv_loop_t *loop;         /* non-NULL: run in-loop (see above) */
  struct kb_vclock *clock; /* in-loop: the clock to share; NULL: a linear one at speed */
  const char *unix_path;   /* also listen on this Unix socket (removed at stop) */
  const char *pipeline_dir; /* local pipeline URLs are read only inside it; NULL: none */
  /* HTTP limits (kb_httpd_config; 0: its defaults) */
  uint64_t header_timeout_ms, body_timeout_ms, idle_timeout_ms, max_connections;
} kb_sim_server_opts;

/* Starts the server thread and returns once it listens (or failed: NULL
 * with *err filled). */
kb_sim_server *kb_sim_server_start(const kb_sim_server_opts *opts, kb_sim_error *err);
int kb_sim_server_port(const kb_sim_server *s);
const char *kb_sim_server_host(const kb_sim_server *s);
/* Virtual clock: now = (uv_hrtime() - origin_ns) / 1e9 * speed (sim seconds);
 * epoch = unix seconds at sim time 0. */
void kb_sim_server_clock(const kb_sim_server *s, uint64_t *origin_ns, double *speed,
                         double *epoch);
/* The simulator's time now (sim seconds). From any thread, except for an
 * in-loop server (its loop's thread only). */
double kb_sim_server_now(const kb_sim_server *s);
/* Stops serving, joins the thread and frees everything. */
void kb_sim_server_stop(kb_sim_server *s);

/* Writes a kubeconfig for the server to path (atomically). 0 or -errno. */
int kb_sim_server_write_kubeconfig(const kb_sim_server *s, const char *path);

#endif
