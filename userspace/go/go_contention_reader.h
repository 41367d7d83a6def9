// Reads the block and mutex profiles (runtime.bbuckets / runtime.xbuckets) out
// of a live Go process with the shared bucket walker, and the runtime's
// cycles-per-second conversion (runtime.ticks) that runtime/pprof applies.
// Block/mutex buckets carry one blockRecord {count float64; cycles int64}
// after the PCs in every Go 1.19–1.27 (no future cycles, unlike memRecord).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/collector.h"

namespace oomsnap {

enum class GoContentionKind { kBlock, kMutex };
const char* to_string(GoContentionKind k);  // "block" | "mutex"

inline constexpr size_t kGoBlockRecordBytes = 16;

struct GoContentionAddrs {                 // RUNTIME addresses in the target
  uint64_t head = 0;                       // &runtime.bbuckets or &runtime.xbuckets
  std::optional<uint64_t> rate;            // &runtime.blockprofilerate / &runtime.mutexprofilerate
  std::optional<uint64_t> ticks;           // &runtime.ticks (the struct)
};

// One block/mutex bucket decoded in place (no copy).
struct GoBlockBucketView {
  uint64_t allnext = 0, typ = 0, nstk = 0;
  const uint8_t* pcs = nullptr;
  double count = 0;    // blockRecord.count (float64: the sampling corrections add fractions)
  int64_t cycles = 0;  // blockRecord.cycles (CPU ticks)
  uint64_t pc(size_t i) const;
};
// nullopt + error when truncated, of another bucket type, or implausible.
std::optional<GoBlockBucketView> decode_go_block_bucket(std::span<const uint8_t> bytes, GoContentionKind kind,
                                                        size_t max_stack_depth, std::string& error);

struct GoContentionRecord {
  double count = 0;
  int64_t cycles = 0;
  std::vector<uint64_t> pcs;  // RUNTIME addresses as stored, leaf first
};

struct GoContentionRead {
  SnapshotStatus status = SnapshotStatus::kComplete;
  std::string reason;
  std::optional<int64_t> rate;               // blockprofilerate (ticks) or mutexprofilerate (1/N)
  int64_t cycles_per_second = 0;             // 0 when unknown
  std::string cycles_per_second_source;      // "runtime.ticks" | "estimated: ..." | ""
  std::vector<GoContentionRecord> records;   // list order
};

// Where runtime.ticks keeps what ticksPerSecond computes, by version
// (runtime/runtime.go ticksType): val, and (1.22+) startTicks/startTime.
struct GoTicksLayout {
  uint64_t val = 0;
  std::optional<uint64_t> start_ticks, start_time;
};
GoTicksLayout go_ticks_layout(int go_minor);

GoContentionRead read_go_contention(RemoteMemory& mem, const std::vector<Mapping>& maps,
                                    const GoContentionAddrs& addrs, GoContentionKind kind, int go_minor,
                                    const CaptureOptions& opts, const Deadline& deadline);

}  // namespace oomsnap
