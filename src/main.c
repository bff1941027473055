/* kbrun: the command line. Parses options, prepares the runtime and hands
 * the scenario to the Lua runner (lua/kb/runner.lua). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <lauxlib.h>
#include <yaml.h>
#include <sqlite3.h>
#include <libpq-fe.h>

#include "cli/cli.h"
#include "kb/lua_modules.h"
#include "kb/rt.h"
#include "kb/version.h"

#define EXIT_USAGE 2

static void usage(FILE *out) {
  fputs(
    "usage: kbrun [options] SCENARIO.lua [key=value ...]   (options may come anywhere)\n"
    "       kbrun SCENARIO.lua --help   the scenario's description, parameters, thresholds\n"
    "\n"
    "Runs a Lua benchmark scenario. key=value pairs and --params set the\n"
    "scenario's parameters (kb.params): the command line wins over the\n"
    "params file, the file over the scenario's defaults.\n"
    "\n"
    "options:\n"
    "  -p, --params FILE.yaml  scenario parameters from a YAML file\n"
    "  -o, --out DIR           experiments folder (default ./experiments)\n"
    "  -q, --quiet             only warnings and errors\n"
    "  -v, --verbose           debug logging\n"
    "      --seed N            random seed (default: from the clock, recorded)\n"
    "      --sim-config FILE   cluster config of the embedded simulator (docs/simulator.md)\n"
    "      --sim-profile NAME  simulator profile: default (calibrated), fast, degraded\n"
    "      --sim-clock KIND    the embedded simulator's clock: events (default: jumps\n"
    "                          over every wait, host overhead costs no time, a seed\n"
    "                          reproduces the figures) or linear (--sim-speed times\n"
    "                          real time; docs/simulator.md)\n"
    "      --sim-speed X       linear clock: simulated seconds per real second (600);\n"
    "                          implies --sim-clock linear\n"
    "      --shard I/N         run shard I of N (0 <= I < N; see kb.shard)\n"
    "      --metrics-listen HOST:PORT  serve live metrics for Prometheus on\n"
    "                          http://HOST:PORT/metrics (port 0: any free port,\n"
    "                          printed on stderr; docs/observability.md)\n"
    "      --results-db URL    where the experiment is also recorded: a SQLite file\n"
    "                          (default OUT/kbrun.db), postgresql://..., or off\n"
    "                          (also KBRUN_RESULTS_DB; docs/results.md)\n"
    "  -h, --help              this help\n"
    "      --version           versions of kbrun and its libraries\n"
    "\n"
    "       kbrun sim [options]     the simulator standalone (kbrun sim --help)\n"
    "       kbrun report DIR...     rebuild report.html of experiment folders\n"
    "       kbrun compare A B       compare two experiments or sweeps (--help)\n"
    "       kbrun merge DIR...      merge the shards of an experiment\n"
    "       kbrun render [--argo] EXPERIMENT.yaml   the Kubebench manifests it would submit\n"
    "       kbrun k8s-job SCENARIO --shards N   an Indexed Kubernetes Job (--help)\n"
    "       kbrun history [--scenario S] [--metric M[:STAT]]   experiments and trends\n"
    "       kbrun db import DIR... | db query SQL   the results database (--help)\n"
    "\n"
    "exit codes: 0 success, 1 scenario error, 2 usage error,\n"
    "            3 results not fully saved, 99 a threshold failed,\n"
    "            130/143 interrupted by SIGINT/SIGTERM\n"
    "            (when several apply: interrupted > scenario error >\n"
    "            results not saved > thresholds failed)\n"
    "environment: KBRUN_PATH adds folders to the Lua module search path\n",
    out);
}

static void print_version(void) {
  curl_version_info_data *cv = curl_version_info(CURLVERSION_NOW);
  printf("kbrun %s\n", KB_VERSION);
  printf("  %s\n", LUA_RELEASE);
  printf("  libuv %s\n", uv_version_string());
  printf("  libcurl %s (%s%s)\n", cv->version, cv->ssl_version ? cv->ssl_version : "no TLS",
         (cv->features & CURL_VERSION_HTTP2) ? ", HTTP/2" : "");
  printf("  cJSON %s\n", cJSON_Version());
  printf("  libyaml %s\n", yaml_get_version_string());
  printf("  SQLite %s, libpq %d\n", sqlite3_libversion(), PQlibVersion());
}

/* More concurrent requests need more descriptors: take all we may. */
static void raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

/* Folder of the running executable, for the installed Lua library. */
static void exe_dir(char *buf, size_t len) {
  ssize_t n = readlink("/proc/self/exe", buf, len - 1);
  if (n <= 0) {
    buf[0] = '\0';
    return;
  }
  buf[n] = '\0';
  char *slash = strrchr(buf, '/');
  if (slash) *slash = '\0';
}

static int dir_exists(const char *path) { return access(path, R_OK | X_OK) == 0; }

/* package.path: KBRUN_PATH, the scenario's folder, the in-tree lua/ (when
 * run from a build tree), the installed library, then Lua's defaults. */
static void set_lua_path(lua_State *L, const char *scenario) {
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path"); /* package, defaults */
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  const char *extra = getenv("KBRUN_PATH");
  /* Walked in place: no copy to allocate (and to leak if a push raises). */
  for (const char *dir = extra; dir && *dir;) {
    size_t n = strcspn(dir, ":");
    if (n > 0) {
      luaL_addlstring(&b, dir, n);
      luaL_addstring(&b, "/?.lua;");
      luaL_addlstring(&b, dir, n);
      luaL_addstring(&b, "/?/init.lua;");
    }
    dir += n;
    if (*dir == ':') dir++;
  }
  if (scenario) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", scenario);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;", dir, dir);
    luaL_addvalue(&b);
  }
  char exe[PATH_MAX], installed[PATH_MAX + 32];
  exe_dir(exe, sizeof exe);
  snprintf(installed, sizeof installed, "%s/../share/kbrun/lua", exe);
  const char *dirs[] = {KB_LUA_SOURCE_DIR, installed, KB_LUA_INSTALL_DIR};
  for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
    if (!dir_exists(dirs[i])) continue;
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;", dirs[i], dirs[i]);
    luaL_addvalue(&b);
  }
  luaL_pushresult(&b);           /* package, defaults, ours */
  lua_insert(L, -2);
  lua_concat(L, 2);
  lua_setfield(L, -2, "path");
  lua_pop(L, 1);
}

typedef struct {
  const char *params_file;
  const char *out;
  const char *seed;
  const char *sim_config, *sim_profile, *sim_speed, *sim_clock;
  const char *shard;
  const char *metrics_listen; /* kb.prometheus exporter, started by the runner */
  const char *results_db;     /* kb.results.db: a file, postgresql://..., or off */
  int quiet, verbose;
  int help; /* -h: kbrun's help, or the scenario's when one is named */
} options;

/* Pushes the argument table the runner receives. */
static void push_args(lua_State *L, const options *o, int argc, char **argv, int first) {
  lua_newtable(L);
  lua_pushstring(L, argv[first]);
  lua_setfield(L, -2, "scenario");
  if (o->params_file) {
    lua_pushstring(L, o->params_file);
    lua_setfield(L, -2, "params_file");
  }
  lua_pushstring(L, o->out ? o->out : "experiments");
  lua_setfield(L, -2, "out");
  const char *strings[][2] = {{"seed", o->seed}, {"sim_config", o->sim_config},
                              {"sim_profile", o->sim_profile}, {"sim_speed", o->sim_speed},
                              {"sim_clock", o->sim_clock},
                              {"shard", o->shard}, {"metrics_listen", o->metrics_listen},
                              {"results_db", o->results_db}};
  for (size_t i = 0; i < sizeof strings / sizeof *strings; i++) {
    if (!strings[i][1]) continue;
    lua_pushstring(L, strings[i][1]);
    lua_setfield(L, -2, strings[i][0]);
  }
  lua_pushboolean(L, o->quiet);
  lua_setfield(L, -2, "quiet");
  lua_pushboolean(L, o->verbose);
  lua_setfield(L, -2, "verbose");
  lua_pushboolean(L, o->help);
  lua_setfield(L, -2, "help");
  lua_newtable(L);
  for (int i = first + 1; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - first);
  }
  lua_setfield(L, -2, "assignments");
  lua_pushboolean(L, isatty(STDOUT_FILENO));
  lua_setfield(L, -2, "tty");
}

typedef struct {
  const options *o;
  int argc, first;
  char **argv;
} entry_args;

/* Subcommands implemented in Lua get their arguments as a list. */
static void push_argv(lua_State *L, const entry_args *a) {
  lua_newtable(L);
  lua_newtable(L);
  for (int i = a->first; i < a->argc; i++) {
    lua_pushstring(L, a->argv[i]);
    lua_rawseti(L, -2, i - a->first + 1);
  }
  lua_setfield(L, -2, "argv");
  lua_pushboolean(L, isatty(STDOUT_FILENO));
  lua_setfield(L, -2, "tty");
}

static void push_scenario_args(lua_State *L, const entry_args *a) {
  push_args(L, a->o, a->argc, a->argv, a->first);
}

/* Runs module.fn(args) as the first task of a fresh runtime and returns the
 * exit code it stops the loop with. */
static int run_lua(const char *module, const char *fn, const char *scenario,
                   void (*push)(lua_State *, const entry_args *), const entry_args *a) {
  kb_rt *rt = kb_rt_new();
  if (!rt) {
    fprintf(stderr, "kbrun: cannot create the runtime (out of memory?)\n");
    return 1;
  }
  lua_State *L = kb_rt_lua(rt);
  kb_lua_preload(L);
  set_lua_path(L, scenario);
  kb_rt_signals_start(rt);
  const char *profile = getenv("KBRUN_LUA_PROFILE"); /* for kbrun's own tuning: bench/ */
  const char *every = getenv("KBRUN_LUA_PROFILE_EVERY");
  if (profile && *profile && kb_rt_profile_start(rt, profile, every ? atoi(every) : 0))
    fprintf(stderr, "kbrun: KBRUN_LUA_PROFILE: cannot start the profiler: %s\n", strerror(errno));

  /* The runner itself runs as the first task: kb.core.spawn(runner.main, args) */
  int code = 1;
  lua_getglobal(L, "require");
  lua_pushliteral(L, "kb.core");
  if (kb_rt_pcall(rt, 1, 1) != LUA_OK) goto done;
  lua_getfield(L, -1, "spawn");
  lua_remove(L, -2);
  lua_getglobal(L, "require");
  lua_pushstring(L, module);
  if (kb_rt_pcall(rt, 1, 1) != LUA_OK) {
    fprintf(stderr, "kbrun: the Lua library was not found or is broken; "
                    "set KBRUN_PATH to the folder holding kb/runner.lua\n");
    goto done;
  }
  lua_getfield(L, -1, fn);
  lua_remove(L, -2);
  push(L, a);
  if (kb_rt_pcall(rt, 2, 0) != LUA_OK) goto done;
  code = kb_rt_run(rt);
  if (!kb_rt_stopping(rt)) {
    fprintf(stderr, "kbrun: the scenario is stuck: %d task(s) wait for something that can "
                    "no longer happen (a semaphore never released, a task waiting on itself "
                    "through others?)\n", kb_task_count_live(rt));
    code = 1;
  }
done:
  if (profile && *profile && kb_rt_profile_stop())
    fprintf(stderr, "kbrun: KBRUN_LUA_PROFILE: cannot write %s: %s\n", profile, strerror(errno));
  kb_rt_free(rt);
  return code;
}

/* kbrun SUBCOMMAND ...: Lua subcommands live in lua/kb/cli/init.lua. */
static const char *lua_subcommands[] = {"report", "render", "compare", "merge", "k8s-job",
                                        "history", "db", NULL};

static int run_subcommand(int argc, char **argv) {
  const char *name = argv[1];
  if (strcmp(name, "sim") == 0) return kb_cli_sim(argc - 1, argv + 1);
  for (const char **c = lua_subcommands; *c; c++) {
    if (strcmp(name, *c) != 0) continue;
    entry_args a = {NULL, argc, 2, argv};
    return run_lua("kb.cli", name, NULL, push_argv, &a);
  }
  return -1;
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();
  curl_global_init(CURL_GLOBAL_DEFAULT);
  /* `kbrun help SCENARIO.lua` is `kbrun --help SCENARIO.lua` */
  static char help_opt[] = "--help";
  if (argc > 1 && strcmp(argv[1], "help") == 0) argv[1] = help_opt;
  int code = argc > 1 ? run_subcommand(argc, argv) : -1;
  if (code >= 0) {
    curl_global_cleanup();
    return code;
  }
  static const struct option longopts[] = {
    {"params", required_argument, NULL, 'p'},
    {"out", required_argument, NULL, 'o'},
    {"quiet", no_argument, NULL, 'q'},
    {"verbose", no_argument, NULL, 'v'},
    {"seed", required_argument, NULL, 'S'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {"sim-config", required_argument, NULL, 'C'},
    {"sim-profile", required_argument, NULL, 'P'},
    {"sim-speed", required_argument, NULL, 'X'},
    {"sim-clock", required_argument, NULL, 'K'},
    {"shard", required_argument, NULL, 'I'},
    {"metrics-listen", required_argument, NULL, 'M'},
    {"results-db", required_argument, NULL, 'R'},
    {NULL, 0, NULL, 0}
  };
  options o = {0};
  int c;
  opterr = 0;
  /* Options anywhere (GNU getopt permutes): the non-options left at
   * argv[optind..] are the scenario file, then key=value parameters, in
   * their order; "--" ends the options. Subcommands were dispatched above. */
  while ((c = getopt_long(argc, argv, "p:o:qvh", longopts, NULL)) != -1) {
    switch (c) {
    case 'p': o.params_file = optarg; break;
    case 'o': o.out = optarg; break;
    case 'q': o.quiet = 1; break;
    case 'v': o.verbose = 1; break;
    case 'S': {
      char *end;
      errno = 0;
      (void)strtoull(optarg, &end, 10);
      if (errno || *end || !*optarg) {
        fprintf(stderr, "kbrun: --seed wants a non-negative integer, got '%s'\n", optarg);
        return EXIT_USAGE;
      }
      o.seed = optarg;
      break;
    }
    case 'h': o.help = 1; break;
    case 'V': print_version(); return 0;
    case 'C': o.sim_config = optarg; break;
    case 'P': o.sim_profile = optarg; break;
    case 'I': o.shard = optarg; break; /* validated by kb.shard (runner) */
    case 'K':
      if (strcmp(optarg, "events") != 0 && strcmp(optarg, "linear") != 0) {
        fprintf(stderr, "kbrun: --sim-clock wants 'events' or 'linear', got '%s'\n", optarg);
        return EXIT_USAGE;
      }
      o.sim_clock = optarg;
      break;
    case 'M': o.metrics_listen = optarg; break; /* validated by kb.prometheus (runner) */
    case 'R': o.results_db = optarg; break; /* kb.results.db (runner) */
    case 'X': {
      char *end;
      double speed = strtod(optarg, &end);
      if (*end || !(speed > 0)) {
        fprintf(stderr, "kbrun: --sim-speed wants a positive number, got '%s'\n", optarg);
        return EXIT_USAGE;
      }
      o.sim_speed = optarg;
      break;
    }
    default:
      if (optopt && optopt != '?')
        fprintf(stderr, "kbrun: option -%c needs a value or is unknown\n", optopt);
      else
        fprintf(stderr, "kbrun: unknown option '%s'\n", argv[optind - 1]);
      fputs("try 'kbrun --help'\n", stderr);
      return EXIT_USAGE;
    }
  }
  if (optind >= argc && o.help) {
    usage(stdout);
    return 0;
  }
  if (optind >= argc) {
    usage(stderr);
    return EXIT_USAGE;
  }
  entry_args a = {&o, argc, optind, argv};
  code = run_lua("kb.runner", "main", argv[optind], push_scenario_args, &a);
  curl_global_cleanup();
  return code;
}
