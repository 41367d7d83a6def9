// Test utility: decode a pprof profile (gzipped or raw profile.proto) and
// reduce it to comparable per-stack totals.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace oomsnap::testutil {

// Function names, leaf first; each Location's Lines contribute innermost-first.
using Stack = std::vector<std::string>;
// Heap: alloc_objects, alloc_space, inuse_objects, inuse_space; block/mutex:
// contentions, delay (the last two 0); a count profile (goroutine) uses [0] only.
using Values = std::array<int64_t, 4>;
using StackMap = std::map<Stack, Values>;

struct PprofSummary {
  int64_t period = 0;
  std::string period_type, period_unit;
  std::vector<std::string> sample_types;  // e.g. {"alloc_objects", ...}
  std::vector<std::string> sample_units;  // e.g. {"count", "bytes", ...}
  size_t num_samples = 0, num_locations = 0, num_functions = 0, num_mappings = 0;
  StackMap stacks;  // summed values per distinct stack
};

// Gunzips when the data starts with the gzip magic, otherwise returns it as is.
std::string maybe_gunzip(const std::string& data);

// Throws std::runtime_error on malformed input (bad gzip, bad proto, dangling ids,
// or a sample-type count other than 4 (heap), 2 (block/mutex) or 1 (goroutine)).
PprofSummary summarize_pprof_bytes(const std::string& data);
PprofSummary summarize_pprof_file(const std::string& path);

// The stacks containing at least one function whose name starts with prefix.
StackMap filter_stacks(const StackMap& stacks, std::string_view prefix);
inline StackMap filter_stacks(const PprofSummary& s, std::string_view prefix) {
  return filter_stacks(s.stacks, prefix);
}

// Sum of all values over a stack map.
Values total(const StackMap& stacks);

// Compares `got` to `want` stack by stack: every stack in want must be in got
// with each value within rel_tol (fraction, e.g. 0.005) of want's, and vice
// versa. Returns human-readable differences; empty means equal.
std::vector<std::string> compare_stacks(const StackMap& got, const StackMap& want, double rel_tol);

std::string format_stack(const Stack& s);

}  // namespace oomsnap::testutil
