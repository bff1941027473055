/* FNV-1a (Fowler-Noll-Vo), the one string hash of the tree: hash-table
 * buckets, generated names, ids derived from names. Not for anything an
 * adversary chooses to collide. A hash continues from a previous value:
 *   uint64_t h = kb_fnv64(KB_FNV64_INIT, "run-1");
 *   h = kb_fnv64(h, "/node-3");          // the hash of "run-1/node-3" */
#ifndef KB_FNV_H
#define KB_FNV_H

#include <stdint.h>

#define KB_FNV32_INIT 2166136261u
#define KB_FNV64_INIT 1469598103934665603ull

static inline uint32_t kb_fnv32(uint32_t h, const char *s) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

static inline uint64_t kb_fnv64(uint64_t h, const char *s) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

#endif
