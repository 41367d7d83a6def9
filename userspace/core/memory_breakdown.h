// A process's RSS by kind (issue #24 item 2): what its mappings hold
// (smaps_breakdown.h reads them) and what its runtime says of them (claims,
// moved out of `native` for the mappings they lie in), so that the kinds
// still sum to the resident bytes smaps counted.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/remote_memory.h"  // AddressRange

namespace oomsnap {

enum class MemoryKind : uint8_t { kHeap, kHeapFree, kRuntime, kStacks, kNative, kFile, kShmem };
inline constexpr size_t kMemoryKinds = 7;
// "heap", "heap_free", "runtime", "stacks", "native", "file", "shmem".
const char* memory_kind_name(MemoryKind k);

// One of the largest contributors: {"kind":"shmem","what":"/dev/shm/x","bytes":...}.
struct BreakdownDetail {
  MemoryKind kind = MemoryKind::kNative;
  std::string what;  // at most kMaxDetailWhat bytes
  uint64_t bytes = 0;
};

// The regular files on the tmpfs mounts a process sees (core/tmpfs_files.h),
// mapped or not: what a container's tmpfs (emptyDir of medium Memory,
// /dev/shm) holds, by path, and how much; the walk is bounded.
struct TmpfsFiles {
  static constexpr size_t kMaxFiles = 12;
  static constexpr size_t kMaxPath = 200;
  struct File {
    std::string path;  // as the process sees it, at most kMaxPath bytes
    uint64_t bytes = 0;
  };
  uint64_t bytes = 0;        // every regular file's allocated bytes found
  uint64_t files = 0;        // regular files found
  std::vector<File> largest;  // largest first, at most kMaxFiles
  std::string reason;        // set when the walk was cut or a mount not read
  double duration_ms = 0;    // the walk's time (apart from the breakdown's own)
};

struct MemoryBreakdown {
  static constexpr size_t kMaxDetail = 12;
  static constexpr size_t kMaxDetailWhat = 200;

  std::string status = "failed";  // "complete", "partial" (cut: reason says where), "failed"
  std::string reason;
  std::array<uint64_t, kMemoryKinds> bytes{};  // resident bytes per MemoryKind
  uint64_t mappings = 0;                       // mappings read from smaps
  // How resident bytes were counted: "pagemap_scan" (/proc/PID/maps and the
  // PAGEMAP_SCAN ioctl, Linux 6.7+) or "smaps" (its fallback); empty in a
  // record from before either.
  std::string source;
  double duration_ms = 0;                      // the mount table, smaps (or maps and scan) and the build; not the tmpfs walk
  std::vector<BreakdownDetail> detail;         // largest first, at most kMaxDetail
  std::optional<TmpfsFiles> tmpfs;             // when the tmpfs mounts were walked

  uint64_t& at(MemoryKind k) { return bytes[static_cast<size_t>(k)]; }
  uint64_t at(MemoryKind k) const { return bytes[static_cast<size_t>(k)]; }
  uint64_t total() const;
  // Adds to the detail (strings cut to kMaxDetailWhat); call finish_detail once.
  void add_detail(MemoryKind k, std::string what, uint64_t bytes);
  // Largest first, then by name for stable output; keeps kMaxDetail.
  void finish_detail();
};

// What a runtime says it owns: `bytes` of `kind` lying in `ranges` (the
// goroutine stacks, a Java heap space). The bytes move out of `native` of
// the mappings the ranges lie in, never more than those mappings' native
// resident bytes (a claim is of address space, residency is smaps's word).
//
// Claims are applied in order, each taking what the ones before left. With
// `max_bytes` a claim takes at most that many: the runtime's own count of a
// part it cannot place by address (live objects inside the heap's spans), so
// that a later claim of the same ranges takes the rest (free heap). A claim
// with no ranges and a `max_bytes` takes from the unnamed anonymous memory
// and the brk `[heap]` (the runtime's metadata, objects malloc'd outside its
// own heap: allocated anywhere), in address order.
struct MemoryClaim {
  MemoryKind kind = MemoryKind::kHeap;
  std::string what;
  std::vector<AddressRange> ranges;  // need not be sorted; may overlap nothing
  std::optional<uint64_t> max_bytes;
};

nlohmann::json to_json(const MemoryBreakdown& b);
nlohmann::json to_json(const TmpfsFiles& t);
// From the capture process (untrusted): false, with why, past the bounds.
bool tmpfs_files_from_json(const nlohmann::json& j, TmpfsFiles& out, std::string& why);
// The inverse, for a breakdown from the capture process (untrusted): false,
// with why, for a wrong type, an unknown kind or past the bounds.
bool memory_breakdown_from_json(const nlohmann::json& j, MemoryBreakdown& out, std::string& why);

}  // namespace oomsnap
