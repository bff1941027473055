/* Fuzz target: kubeconfig parsing (lua/kb/k8s/kubeconfig.lua over kb.yaml
 * and kb.fs), run in an embedded runtime as kbrun runs it.
 *
 * Each input is written to a scratch file and loaded with kc.load. The
 * property: it returns a connection config with a server URL, or raises a
 * kb error object with a class and a message, never a bare Lua error ("attempt
 * to index a nil value") and never a crash. Paths an input names are only
 * tested for existence; nothing is executed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_lua.h"
#include "kb/rt.h"

static const char *CHECKER =
    "local kc = require 'kb.k8s.kubeconfig'\n"
    "return function(path)\n"
    "  local ok, cfg = pcall(kc.load, { kubeconfig = path })\n"
    "  if ok then\n"
    "    assert(type(cfg) == 'table' and type(cfg.server) == 'string', 'no server')\n"
    "    assert(type(cfg.namespace) == 'string', 'no namespace')\n"
    "    return\n"
    "  end\n"
    "  assert(type(cfg) == 'table' and type(cfg.class) == 'string'\n"
    "    and type(cfg.message) == 'string', 'kc.load raised ' .. tostring(cfg))\n"
    "  local ok2, merged = pcall(kc.read, { kubeconfig = path })\n"
    "  assert(ok2 or (type(merged) == 'table' and merged.class), 'kc.read raised ' .. tostring(merged))\n"
    "end\n";

static kb_rt *rt;
static int checker;
static char dir[64], path[96];

static void cleanup(void) {
  unlink(path);
  rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  rt = kb_rt_new();
  if (!rt) abort();
  lua_State *L = kb_rt_lua(rt);
  kb_lua_preload(L);
  fuzz_lua_path(L);
  checker = fuzz_lua_checker(L, CHECKER);
  snprintf(dir, sizeof dir, "/tmp/kb-fuzz-kubeconfig-XXXXXX");
  if (!mkdtemp(dir)) abort();
  snprintf(path, sizeof path, "%s/config", dir);
  atexit(cleanup);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
  lua_State *L = kb_rt_lua(rt);
  fuzz_lua_check(L, checker, path, strlen(path));
  return 0;
}
