#include "go/go_contention_profile.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "go/go_heap_profile.h"

namespace oomsnap {
namespace {

constexpr uint64_t kLogicalStackSentinel = ~uint64_t{0};
constexpr size_t kMaxProfStackDepth = 1024;  // runtime maxProfStackDepth: expandInlinedFrames' buffer at most

}  // namespace

GoContentionValues go_contention_values(double count, int64_t cycles, GoContentionKind kind, int go_minor,
                                        int64_t cycles_per_second, int64_t mutex_fraction) {
  GoContentionValues v;
  v.contentions = go_f64_to_i64(count);
  if (kind == GoContentionKind::kBlock && v.contentions == 0) v.contentions = 1;
  const double cpu_ghz = static_cast<double>(cycles_per_second) / 1e9;
  double ns = static_cast<double>(cycles) / cpu_ghz;
  if (kind == GoContentionKind::kMutex && go_minor <= 20) {
    // Go's int64 multiplication wraps; do the same without UB.
    v.contentions = static_cast<int64_t>(static_cast<uint64_t>(v.contentions) * static_cast<uint64_t>(mutex_fraction));
    ns *= static_cast<double>(mutex_fraction);
  }
  v.delay_ns = go_f64_to_i64(ns);
  return v;
}

std::vector<GoFrame> symbolize_go_contention_stack(std::span<const uint64_t> pcs, uint64_t load_bias,
                                                   int go_minor, const GoPclntab& tab) {
  if (!pcs.empty() && pcs.front() == kLogicalStackSentinel) pcs = pcs.subspan(1);
  std::vector<uint64_t> link(pcs.begin(), pcs.end());
  for (uint64_t& pc : link) pc -= load_bias;
  if (go_minor <= 22) link = tab.expand_final_inline_frame(link);
  auto frames = tab.symbolize_stack(link);
  // CallersFrames yields nothing for a PC outside every function, and
  // runtime/pprof's allFrames drops runtime.goexit (the bottom of every
  // goroutine's logical stack).
  frames.erase(std::remove_if(frames.begin(), frames.end(),
                              [](const GoFrame& f) { return f.function.empty() || f.function == "runtime.goexit"; }),
               frames.end());
  if (go_minor >= 23 && frames.size() > kMaxProfStackDepth) frames.resize(kMaxProfStackDepth);
  return frames;
}

ContentionProfile summarize_go_contention(const std::vector<GoContentionSample>& samples, size_t max_entries) {
  ContentionProfile p;
  p.status = SnapshotStatus::kComplete;
  p.records = samples.size();
  // Records with the same symbolized stack are one entry (runtime/pprof keeps
  // them apart as samples; pprof tools merge them the same way).
  std::map<std::vector<std::string>, ContentionEntry> by_stack;
  for (const auto& s : samples) {
    p.total_contentions += s.values.contentions;
    p.total_delay_ns += s.values.delay_ns;
    std::vector<std::string> stack;
    stack.reserve(s.frames.size());
    for (const auto& f : s.frames) stack.push_back(f.function);
    ContentionEntry& e = by_stack[stack];
    e.contentions += s.values.contentions;
    e.delay_ns += s.values.delay_ns;
  }
  for (auto& [stack, e] : by_stack) {
    e.stack = stack;
    e.name = stack.empty() ? "?" : stack.front();
    p.entries.push_back(std::move(e));
  }
  std::sort(p.entries.begin(), p.entries.end(), [](const ContentionEntry& a, const ContentionEntry& b) {
    return std::tie(b.delay_ns, b.contentions, a.stack) < std::tie(a.delay_ns, a.contentions, b.stack);
  });
  if (p.entries.size() > max_entries) {
    p.entries.resize(max_entries);
    p.output_truncated = true;
  }
  return p;
}

}  // namespace oomsnap
