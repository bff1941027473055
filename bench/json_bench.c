/* Throughput of the JSON codec on a Kubernetes-like list response.
 *
 *   json_bench [items] [seconds-per-measure]
 *
 * Prints MB/s and documents/s for: validation only (SAX with no callbacks),
 * kb.json.decode to Lua tables, kb.json.encode (sorted and unsorted keys),
 * and cJSON_Parse for reference. Not run by ctest. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <lauxlib.h>
#include <lualib.h>

#include "kb/json.h"
#include "kb/lua_modules.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Builds the document in Lua so its shape is easy to read and change. */
static const char *make_doc =
  "local json, n = ...\n"
  "local items = json.array()\n"
  "for i = 1, n do\n"
  "  items[i] = {\n"
  "    metadata = { name = 'run-' .. i .. '-step-train', namespace = 'kubeflow-user',\n"
  "      uid = string.format('%08x-1f2e-4d3c-9b8a-%012x', i, i * 7919),\n"
  "      resourceVersion = tostring(1000000 + i), generation = 9007199254740993,\n"
  "      creationTimestamp = '2024-05-01T12:00:00Z',\n"
  "      labels = { ['app.kubernetes.io/name'] = 'kfp', ['pipeline/runid'] = 'r' .. i,\n"
  "        ['workflows.argoproj.io/completed'] = 'false' },\n"
  "      annotations = { ['pipelines.kubeflow.org/spec'] = string.rep('x', 120) ..\n"
  "        ' \\\"quoted\\\" \\n caf\\u{e9}' } },\n"
  "    spec = { nodeSelector = { pool = 'gpu' }, restartPolicy = 'Never',\n"
  "      containers = { { name = 'main', image = 'ghcr.io/kubeflow/trainer:v2.1',\n"
  "        args = { '--epochs', '10', '--lr', '0.001' },\n"
  "        resources = { requests = { cpu = 0.5, memory = '4Gi' },\n"
  "          limits = { ['nvidia.com/gpu'] = 1 } },\n"
  "        env = { { name = 'RANK', value = tostring(i) }, { name = 'WORLD', value = '8' } } } } },\n"
  "    status = { phase = 'Running', podIP = '10.0.0.' .. (i % 250), ready = true,\n"
  "      startTime = json.null, restarts = i % 3, progress = i / 7 },\n"
  "  }\n"
  "end\n"
  "return json.encode({ apiVersion = 'v1', kind = 'PodList',\n"
  "  metadata = { resourceVersion = '123' }, items = items })\n";

static const char *loop_decode =
  "local json, text, n = ...\n"
  "for _ = 1, n do json.decode(text) end\n";
static const char *loop_encode =
  "local json, text, n, sorted = ...\n"
  "local doc = json.decode(text)\n"
  "local opts = { sort_keys = sorted }\n"
  "for _ = 1, n do json.encode(doc, opts) end\n";

static void check(lua_State *L, int rc) {
  if (rc != LUA_OK) {
    fprintf(stderr, "lua: %s\n", lua_tostring(L, -1));
    exit(1);
  }
}

static void report(const char *what, size_t bytes, long iters, double secs) {
  printf("%-28s %8.1f MB/s %9.0f docs/s\n", what, bytes * (double)iters / secs / 1e6,
         iters / secs);
}

/* Runs a Lua loop with growing counts until it takes `budget` seconds. */
static void time_lua(lua_State *L, const char *what, const char *code, const char *text,
                     size_t len, int extra, int sorted, double budget) {
  long n = 1;
  for (;;) {
    check(L, luaL_loadstring(L, code));
    lua_getfield(L, LUA_REGISTRYINDEX, "bench.json");
    lua_pushlstring(L, text, len);
    lua_pushinteger(L, n);
    if (extra) lua_pushboolean(L, sorted);
    double t0 = now();
    check(L, lua_pcall(L, 3 + extra, 0, 0));
    double dt = now() - t0;
    if (dt >= budget || n > 1000000) {
      report(what, len, n, dt);
      return;
    }
    n = dt < budget / 20 ? n * 10 : (long)(n * budget / dt) + 1;
  }
}

int main(int argc, char **argv) {
  int items = argc > 1 ? atoi(argv[1]) : 50;
  double budget = argc > 2 ? atof(argv[2]) : 0.5;
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  luaL_requiref(L, "kb.json", luaopen_kb_json, 0);
  lua_setfield(L, LUA_REGISTRYINDEX, "bench.json");

  check(L, luaL_loadstring(L, make_doc));
  lua_getfield(L, LUA_REGISTRYINDEX, "bench.json");
  lua_pushinteger(L, items);
  check(L, lua_pcall(L, 2, 1, 0));
  size_t len;
  const char *text = lua_tolstring(L, -1, &len);
  printf("document: %d items, %zu bytes\n", items, len);

  kb_json_handler none = {0};
  long n = 0;
  double t0 = now(), dt;
  do {
    for (int i = 0; i < 100; i++)
      if (kb_json_parse(text, len, &none, NULL, NULL)) return 1;
    n += 100;
  } while ((dt = now() - t0) < budget);
  report("validate (kb_json_parse)", len, n, dt);

  n = 0;
  t0 = now();
  do {
    for (int i = 0; i < 20; i++) cJSON_Delete(cJSON_ParseWithLength(text, len));
    n += 20;
  } while ((dt = now() - t0) < budget);
  report("cJSON_Parse (reference)", len, n, dt);

  time_lua(L, "kb.json.decode", loop_decode, text, len, 0, 0, budget);
  time_lua(L, "kb.json.encode sort_keys", loop_encode, text, len, 1, 1, budget);
  time_lua(L, "kb.json.encode unsorted", loop_encode, text, len, 1, 0, budget);
  lua_close(L);
  return 0;
}
