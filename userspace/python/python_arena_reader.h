// Reads a live CPython's obmalloc arena tables out of process and turns them
// into memory claims (python_arena_table.h decodes them): up to 3.11 the
// table is obmalloc.c's static `arenas`/`maxarenas` (found through .symtab),
// from 3.12 each interpreter's obmalloc state holds one (found through the
// interpreter list, states shared between interpreters read once).
//
// Bounded: at most kMaxPyArenaInterpreters interpreters, kMaxPyArenaObjects
// entries per table, the reads within `read_budget` bytes and the deadline.
// A table that cannot be found or does not hold together claims nothing of
// the arenas and says why.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/mapping.h"
#include "core/collector.h"
#include "core/remote_memory.h"
#include "python/python_layout.h"
#include "python/python_runtime.h"

namespace oomsnap {

inline constexpr int kMaxPyArenaInterpreters = 64;

struct PyArenaRead {
  std::vector<MemoryClaim> claims;  // empty when no table was read
  uint64_t arenas = 0;              // allocated arenas found
  uint64_t used_pool_bytes = 0;
  std::string reason;               // why the arenas are not (all) claimed; empty when they are
};

PyArenaRead read_py_arenas(RemoteMemory& mem, const std::vector<Mapping>& maps, const PythonRuntime& rt,
                           const PyLayout& layout, uint64_t read_budget, const Deadline& deadline);

}  // namespace oomsnap
