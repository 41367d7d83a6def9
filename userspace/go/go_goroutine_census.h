// From the goroutines read (go_goroutines.h) to what the snapshot reports:
// runtime-internal goroutines set apart as runtime/pprof does, the rest
// counted by state and grouped by stack (the goroutine profile's grouping),
// split further by state, wait reason and creation site; only the printed
// groups are symbolized.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "core/memory_breakdown.h"
#include "core/snapshot.h"
#include "go/go_goroutines.h"

namespace oomsnap {
class GoPclntab;

GoroutineCensus build_goroutine_census(const GoGoroutineRead& read, const GoPclntab& tab, uint64_t load_bias,
                                       int go_minor, size_t max_groups);

// The goroutine profile's samples: one (runtime PCs, count) per distinct
// stack of the user goroutines, inline-expanded as the runtime stores them. A goroutine without a stack (running) is one
// frame, its start function (startpc + 1), so its count is not lost.
std::vector<std::pair<std::vector<uint64_t>, int64_t>> goroutine_profile_samples(const GoGoroutineRead& read,
                                                                                 const GoPclntab& tab,
                                                                                 uint64_t load_bias);

// The goroutines' stacks as the runtime allocated them (g.stack of every
// goroutine read, the runtime's own included), for the process's memory
// breakdown: "goroutine stacks (N goroutines)".
MemoryClaim goroutine_stack_claim(const GoGoroutineRead& read);

}  // namespace oomsnap
