// The capture process's result made to fit what a record can hold, before it
// is encoded: a hostile target can name its functions with kilobytes each and
// recurse a thousand frames deep, and a result of tens of MiB would have to
// be held, parsed and copied by the agent, in the agent's own memory cgroup.
// So the child cuts, and says what it cut, instead of having the whole result
// refused (a record is cut to 1 MiB in the end anyway: agent/records).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "capture/capture_record.h"

namespace oomsnap {

struct ResultBudget {
  size_t max_name_bytes = 1024;       // any one name or frame (record_limit cuts names to 1 KiB too)
  size_t max_stack_bytes = 32 << 10;  // the frames of one stack, leaf first (~1000 frames of 32 bytes)
  uint64_t max_bytes = 4 << 20;       // the whole JSON text of the result
};

// Cuts names and stacks everywhere in the snapshot (entries, recent
// allocations, goroutine groups, block and mutex entries), then drops list
// items from the least important end until the record's JSON fits max_bytes:
// entries keep room first, then goroutine groups, block, mutex, and recent
// allocations last. Every part cut says so (output_truncated or
// groups_truncated, and its reason); returns the summary, empty when nothing
// was cut. The estimate of the encoded size is an upper bound (escapes and
// replacement characters counted at their widest), so the result fits.
std::string fit_result_budget(CaptureRecord& record, const ResultBudget& budget);

// The budget of a capture process whose whole result frame may hold
// result_max bytes: what the pprof profiles (sent as they are, compressed)
// leave of it for the JSON.
ResultBudget result_budget_for(const CaptureRecord& record, uint64_t result_max);

}  // namespace oomsnap
