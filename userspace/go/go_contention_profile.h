// Block and mutex profiles as runtime/pprof reports them (writeBlock,
// writeMutex → printCountCycleProfile): the per-record numbers, the stack
// symbolization and the JSON summary (the profile.proto: go_contention_pprof.h).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/snapshot.h"
#include "go/go_contention_reader.h"
#include "go/go_pclntab.h"

namespace oomsnap {

struct GoContentionValues {
  int64_t contentions = 0;
  int64_t delay_ns = 0;
};

// One record's (contentions, delay) as runtime/pprof writes it:
//   count = int64(bp.count), and 1 when that is 0 for block records
//   (blockProfileInternal / BlockProfile: "prevent division by zero");
//   delay = int64(float64(cycles) / (float64(cycles_per_second) / 1e9)).
// Go 1.19/1.20 also scale mutex records by the current fraction in pprof
// (scaleMutexProfile: count*period, delay*float64(period)); from 1.21 the
// runtime scales when it records (saveBlockEventStack), so nothing here.
GoContentionValues go_contention_values(double count, int64_t cycles, GoContentionKind kind, int go_minor,
                                        int64_t cycles_per_second, int64_t mutex_fraction);

// The frames runtime/pprof prints for a stored stack (RUNTIME PCs): a leading
// logicalStackSentinel (1.23–1.26 runtime-lock mutex stacks) is dropped;
// logical stacks (<= 1.22) get runtime_expandFinalInlineFrame; then
// CallersFrames' expansion (which also handles the physical frame-pointer
// stacks of 1.23+), without runtime.goexit as pprof prints it. Leaf first.
std::vector<GoFrame> symbolize_go_contention_stack(std::span<const uint64_t> pcs, uint64_t load_bias,
                                                   int go_minor, const GoPclntab& tab);

struct GoContentionSample {
  GoContentionValues values;
  std::vector<GoFrame> frames;  // leaf first, link-time PCs
};

// Fills snap-side summary: totals, and up to max_entries entries sorted by delay.
ContentionProfile summarize_go_contention(const std::vector<GoContentionSample>& samples, size_t max_entries);

}  // namespace oomsnap
