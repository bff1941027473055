/* `kbrun sim`: the simulator standalone, until Ctrl-C. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kb/sim_server.h"

static void sim_usage(FILE *out) {
  fputs("usage: kbrun sim [--listen HOST:PORT] [--config sim.yaml] [--profile NAME]\n"
        "                 [--speed X] [--seed N] [--kubeconfig-out FILE] [--admin-token T]\n"
        "                 [--pipeline-dir DIR] [--header-timeout S] [--body-timeout S]\n"
        "                 [--idle-timeout S] [--max-connections N]\n"
        "\n"
        "Serves the embedded cluster simulator (KFP, Kubernetes and Argo APIs over a\n"
        "modelled cluster) until Ctrl-C. It listens on 127.0.0.1 unless --listen says\n"
        "otherwise; beyond loopback its admin API (/sim/v1) needs --admin-token.\n"
        "Pipeline URLs: http(s) ones are fetched; local paths and file:// URLs are read\n"
        "only inside --pipeline-dir (none without it). Connections: a request's headers\n"
        "must arrive within --header-timeout (10 s) and its body within --body-timeout\n"
        "(60 s); an idle keep-alive connection closes after --idle-timeout (60 s); at\n"
        "most --max-connections (4096) are open. docs/security.md.\n"
        "Profiles: default (calibrated), fast, degraded. Config: docs/simulator.md.\n",
        out);
}

static char *read_file(const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
    return NULL;
  }
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  size_t n;
  while (buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
    len += n;
    if (len + 1 == cap) {
      char *bigger = realloc(buf, cap * 2);
      if (!bigger) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = bigger;
      cap *= 2;
    }
  }
  fclose(f);
  if (!buf) {
    snprintf(err, errlen, "out of memory reading '%s'", path);
    return NULL;
  }
  buf[len] = '\0';
  return buf;
}

/* "HOST:PORT", ":PORT", "PORT" or "[v6]:PORT". */
static int parse_listen(const char *arg, char *host, size_t hostlen, int *port) {
  const char *colon = strrchr(arg, ':');
  const char *port_text = colon ? colon + 1 : arg;
  char *end;
  long p = strtol(port_text, &end, 10);
  if (*port_text == '\0' || *end || p < 0 || p > 65535) return -1;
  *port = (int)p;
  snprintf(host, hostlen, "127.0.0.1");
  if (colon && colon > arg) {
    size_t n = (size_t)(colon - arg);
    if (arg[0] == '[' && colon[-1] == ']') { /* [::1]:8080 */
      arg++;
      n -= 2;
    }
    if (n >= hostlen) return -1;
    memcpy(host, arg, n);
    host[n] = '\0';
  }
  return 0;
}

int kb_cli_sim(int argc, char **argv) {
  static const struct option longopts[] = {
    {"listen", required_argument, NULL, 'l'},
    {"config", required_argument, NULL, 'c'},
    {"profile", required_argument, NULL, 'P'},
    {"speed", required_argument, NULL, 's'},
    {"seed", required_argument, NULL, 'S'},
    {"kubeconfig-out", required_argument, NULL, 'k'},
    {"admin-token", required_argument, NULL, 'a'},
    {"pipeline-dir", required_argument, NULL, 'D'},
    {"header-timeout", required_argument, NULL, 'H'},
    {"body-timeout", required_argument, NULL, 'B'},
    {"idle-timeout", required_argument, NULL, 'I'},
    {"max-connections", required_argument, NULL, 'M'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0}
  };
  kb_sim_server_opts o = {.speed = 600, .seed = 1};
  char host[256] = "127.0.0.1", err[512];
  const char *config_path = NULL, *kubeconfig = NULL;
  int c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    char *end = NULL;
    switch (c) {
    case 'l':
      if (parse_listen(optarg, host, sizeof host, &o.port) < 0) {
        fprintf(stderr, "kbrun sim: --listen wants HOST:PORT, got '%s'\n", optarg);
        return KB_EXIT_USAGE;
      }
      break;
    case 'c': config_path = optarg; break;
    case 'P': o.profile = optarg; break;
    case 's':
      o.speed = strtod(optarg, &end);
      if (*end || !(o.speed > 0)) {
        fprintf(stderr, "kbrun sim: --speed wants a positive number, got '%s'\n", optarg);
        return KB_EXIT_USAGE;
      }
      break;
    case 'S':
      o.seed = strtoull(optarg, &end, 10);
      if (*end || !*optarg) {
        fprintf(stderr, "kbrun sim: --seed wants a non-negative integer, got '%s'\n", optarg);
        return KB_EXIT_USAGE;
      }
      break;
    case 'k': kubeconfig = optarg; break;
    case 'a': o.admin_token = optarg; break;
    case 'D': o.pipeline_dir = optarg; break;
    case 'H':
    case 'B':
    case 'I': {
      double sec = strtod(optarg, &end);
      if (*end || !*optarg || !(sec > 0) || sec > 86400 * 365) {
        fprintf(stderr, "kbrun sim: %s wants a positive number of seconds, got '%s'\n",
                c == 'H' ? "--header-timeout" : c == 'B' ? "--body-timeout" : "--idle-timeout",
                optarg);
        return KB_EXIT_USAGE;
      }
      uint64_t ms = (uint64_t)(sec * 1000.0 + 0.5);
      if (ms == 0) ms = 1;
      if (c == 'H') o.header_timeout_ms = ms;
      else if (c == 'B') o.body_timeout_ms = ms;
      else o.idle_timeout_ms = ms;
      break;
    }
    case 'M':
      o.max_connections = strtoull(optarg, &end, 10);
      if (*end || !*optarg || *optarg == '-' || o.max_connections == 0) {
        fprintf(stderr, "kbrun sim: --max-connections wants a positive integer, got '%s'\n",
                optarg);
        return KB_EXIT_USAGE;
      }
      break;
    case 'h': sim_usage(stdout); return 0;
    default:
      fprintf(stderr, "kbrun sim: unknown option '%s'\n", argv[optind - 1]);
      sim_usage(stderr);
      return KB_EXIT_USAGE;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "kbrun sim: unexpected argument '%s'\n", argv[optind]);
    return KB_EXIT_USAGE;
  }
  o.host = host;
  char *config = NULL;
  if (config_path) {
    config = read_file(config_path, err, sizeof err);
    if (!config) {
      fprintf(stderr, "kbrun sim: %s\n", err);
      return KB_EXIT_USAGE;
    }
    o.config_yaml = config;
    o.config_name = config_path;
  }

  /* Block the signals before the server thread starts so that only this
   * thread receives them, in sigwait below. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, NULL);

  kb_sim_error serr = {0};
  kb_sim_server *s = kb_sim_server_start(&o, &serr);
  free(config);
  if (!s) {
    fprintf(stderr, "kbrun sim: %s\n", serr.message);
    return 1;
  }
  char default_kubeconfig[512];
  if (!kubeconfig) {
    const char *tmp = getenv("TMPDIR");
    snprintf(default_kubeconfig, sizeof default_kubeconfig, "%s/kbrun-sim-%d.kubeconfig",
             tmp && *tmp ? tmp : "/tmp", kb_sim_server_port(s));
    kubeconfig = default_kubeconfig;
  }
  int kr = kb_sim_server_write_kubeconfig(s, kubeconfig);
  const char *h = kb_sim_server_host(s);
  int v6 = strchr(h, ':') && h[0] != '[';
  printf("http://%s%s%s:%d\n", v6 ? "[" : "", h, v6 ? "]" : "", kb_sim_server_port(s));
  if (kr == 0) printf("kubeconfig: %s\n", kubeconfig);
  else fprintf(stderr, "kbrun sim: cannot write kubeconfig '%s': %s\n", kubeconfig, strerror(-kr));
  printf("speed: x%g, seed %llu; Ctrl-C stops\n", o.speed, (unsigned long long)o.seed);
  fflush(stdout);

  int sig = 0;
  sigwait(&set, &sig);
  fprintf(stderr, "kbrun sim: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  kb_sim_server_stop(s);
  return 0;
}
