// What a capture is asked for: the bounds on remote data, the outputs, and
// this attempt's state. One table (kCaptureOptionFields) names every option
// that crosses to the capture process, and drives both the request's
// encoding and its decoding (capture/capture_wire.cpp): a new option is a
// field here and a row there.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "core/remote_memory.h"

namespace oomsnap {

// What a capture in progress shows a watchdog on another thread (the capture
// process's): which collector took the target, and the read in flight.
struct CaptureProgress {
  std::atomic<const char*> language{nullptr};  // a collector's language(): static storage
  ReadInFlight read;
  // When the collector returned and the memory breakdown began (steady
  // clock, ns since its epoch; 0: not yet): the breakdown's page walk comes
  // after the heap read, never before it.
  std::atomic<int64_t> collector_done_ns{0}, breakdown_started_ns{0};
};

// Which profile a capture produces besides the heap snapshot (`oomsnap snapshot
// --profile`): one table of kinds and names, so a new kind is one entry.
enum class ProfileKind { kHeap, kGoroutine, kBlock, kMutex };
inline constexpr std::pair<ProfileKind, const char*> kProfileKinds[] = {
    {ProfileKind::kHeap, "heap"}, {ProfileKind::kGoroutine, "goroutine"}, {ProfileKind::kBlock, "block"}, {ProfileKind::kMutex, "mutex"}};
inline const char* profile_kind_name(ProfileKind k) {
  for (const auto& [kind, name] : kProfileKinds)
    if (kind == k) return name;
  return "heap";
}
inline std::optional<ProfileKind> profile_kind_from_name(std::string_view s) {
  for (const auto& [kind, name] : kProfileKinds)
    if (s == name) return kind;
  return std::nullopt;
}

struct CaptureOptions {
  // Limits: hard bounds on remote data (each loop over target memory has one).
  size_t max_entries = 10;
  std::chrono::milliseconds budget{2000};
  size_t max_records = 2'000'000;   // Go: profile buckets
  // Heap walkers (Python, Java): objects visited. Their seen-marks and
  // reference queues grow with it (~8 bytes per queued reference).
  size_t max_objects = 10'000'000;
  size_t max_stack_depth = 1024;    // Go caps stacks at 1024 (maxProfStackDepth)
  // Go goroutine census: groups kept (0: max_entries); the agent keeps 5.
  size_t max_goroutine_groups = 0;
  size_t max_goroutines = 1'000'000;  // allglen above this is refused as implausible
  uint64_t max_read_bytes = 1ull << 30;

  // Outputs.
  bool want_pprof = false;          // Go: also produce a gzipped profile.proto
  bool want_recent_pprof = false;   // Go: and one of the allocations since the last GC
  ProfileKind profile = ProfileKind::kHeap;  // Go: which profile the pprof (and JSON extra) is

  // Attempt: the capture process's state for this try. Address ranges not
  // to read (where an earlier attempt's read stalled; on the wire as a list
  // of its own), and how long one read may hang before the attempt stops to
  // report it (0: only at the deadline). progress is never sent: it is
  // published to in the process that captures (may be null).
  std::vector<AddressRange> skip_ranges;
  std::chrono::milliseconds stall_after{0};
  CaptureProgress* progress = nullptr;
};

// One option on the request's wire: its name there and its member.
struct CaptureOptionField {
  enum Group { kLimit, kOutput, kAttempt };
  const char* wire_name;
  Group group;
  std::variant<size_t CaptureOptions::*, bool CaptureOptions::*, std::chrono::milliseconds CaptureOptions::*,
               ProfileKind CaptureOptions::*>
      member;
};
static_assert(std::is_same_v<size_t, uint64_t>, "max_read_bytes shares the size_t rows");

// Every option sent to the capture process (all but skip_ranges and progress).
inline const CaptureOptionField kCaptureOptionFields[] = {
    {"max_entries", CaptureOptionField::kLimit, &CaptureOptions::max_entries},
    {"budget_ms", CaptureOptionField::kLimit, &CaptureOptions::budget},
    {"max_records", CaptureOptionField::kLimit, &CaptureOptions::max_records},
    {"max_objects", CaptureOptionField::kLimit, &CaptureOptions::max_objects},
    {"max_stack_depth", CaptureOptionField::kLimit, &CaptureOptions::max_stack_depth},
    {"max_goroutine_groups", CaptureOptionField::kLimit, &CaptureOptions::max_goroutine_groups},
    {"max_goroutines", CaptureOptionField::kLimit, &CaptureOptions::max_goroutines},
    {"max_read_bytes", CaptureOptionField::kLimit, &CaptureOptions::max_read_bytes},
    {"want_pprof", CaptureOptionField::kOutput, &CaptureOptions::want_pprof},
    {"want_recent_pprof", CaptureOptionField::kOutput, &CaptureOptions::want_recent_pprof},
    {"profile", CaptureOptionField::kOutput, &CaptureOptions::profile},
    {"stall_ms", CaptureOptionField::kAttempt, &CaptureOptions::stall_after},
};

}  // namespace oomsnap
