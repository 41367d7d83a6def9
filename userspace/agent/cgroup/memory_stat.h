// A memory cgroup's charge as the kernel counts it (memory.stat), in one
// vocabulary for cgroup v1 and v2, so that records from a mixed fleet read
// alike: where the container's bytes were (anon, page cache, shmem, kernel)
// when it was captured and when it was killed, as the kernel's own OOM report
// prints it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "agent/cgroup/cgroup.h"

namespace oomsnap {

struct MemoryStat {
  // Bytes by kind, each present only when this kernel reports it:
  //   anon, file (page cache, shmem included), shmem, file_mapped,
  //   file_dirty, file_writeback, kernel (slab, kernel stacks, page tables,
  //   sock, percpu, vmalloc), swap, active_anon, inactive_anon, active_file,
  //   inactive_file, unevictable.
  // v1 counts the cgroup's whole subtree (its total_* keys), as v2 does.
  std::map<std::string, uint64_t> bytes;
  // memory.stat as the kernel wrote it (bytes and event counts alike), at
  // most kMaxRawKeys keys.
  std::map<std::string, uint64_t> raw;
  bool raw_truncated = false;
  // The usage read with it (v2 memory.current, v1 memory.usage_in_bytes),
  // so the kinds are compared with a usage of the same moment.
  std::optional<uint64_t> usage_bytes;
  std::string error;  // why nothing could be read; empty when read

  static constexpr size_t kMaxRawKeys = 256;
  static constexpr size_t kMaxKeyLength = 64;
};

// The kernel's memory.stat text plus the counters v1 and v2 keep outside it
// (v1: memory.kmem.usage_in_bytes for kernel memory; v2: memory.swap.current),
// in one vocabulary. Pure; version is CgroupFs::version (1 or 2).
MemoryStat parse_memory_stat(int version, const std::string& text, std::optional<uint64_t> v1_kmem_usage,
                             std::optional<uint64_t> v2_swap_current);

// Reads the cgroup's memory.stat (and the counters above, and the usage).
// error says why
// when the cgroup is gone or its files cannot be read.
MemoryStat read_memory_stat(const CgroupFs& fs, const std::string& rel_path);

// {"anon": ..., "file": ..., ..., "usage": ..., "raw": {...}} or {"error": ...}.
nlohmann::json to_json(const MemoryStat& s);

}  // namespace oomsnap
