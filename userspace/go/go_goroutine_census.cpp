#include "go/go_goroutine_census.h"

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <unordered_map>

#include "go/go_g_layout.h"
#include "go/go_pclntab.h"

namespace oomsnap {
namespace {

// runtime.isSystemGoroutine: the start function is in package runtime, except
// runtime.main. The finalizer and cleanup goroutines count as user goroutines
// only while they run user code, which a reader from outside cannot time;
// they are system here (they are idle in nearly every snapshot).
class StartNames {
 public:
  StartNames(const GoPclntab& tab, uint64_t bias) : tab_(tab), bias_(bias) {}
  const std::string& name(uint64_t startpc) {
    auto it = cache_.find(startpc);
    if (it != cache_.end()) return it->second;
    std::string n = "?";
    if (startpc >= bias_)
      if (auto f = tab_.find_func(startpc - bias_)) n = f->name;
    return cache_.emplace(startpc, std::move(n)).first->second;
  }
  bool system(uint64_t startpc) {
    const std::string& n = name(startpc);
    return n.starts_with("runtime.") && n != "runtime.main" && n != "runtime.corostart";
  }

 private:
  const GoPclntab& tab_;
  uint64_t bias_;
  std::unordered_map<uint64_t, std::string> cache_;
};

// The function holding the go statement: gopc is the return address of the
// call to newproc, so the call is at gopc - 1.
std::string creator(const GoPclntab& tab, uint64_t bias, uint64_t gopc) {
  if (gopc <= bias) return "?";
  auto f = tab.find_func(gopc - 1 - bias);
  return f ? f->name : "?";
}

struct Key {
  const std::vector<uint64_t>* pcs;  // interned: equal stacks, equal pointers
  uint32_t status;
  uint8_t wait_reason;
  uint64_t gopc_func;  // entry of the creating function (gopc within it may differ per go statement)
  uint64_t startpc;    // only for goroutines without a stack
  bool operator<(const Key& o) const {
    if (pcs != o.pcs && *pcs != *o.pcs) return *pcs < *o.pcs;
    if (status != o.status) return status < o.status;
    if (wait_reason != o.wait_reason) return wait_reason < o.wait_reason;
    if (gopc_func != o.gopc_func) return gopc_func < o.gopc_func;
    return startpc < o.startpc;
  }
};

}  // namespace

GoroutineCensus build_goroutine_census(const GoGoroutineRead& read, const GoPclntab& tab, uint64_t bias,
                                       int minor, size_t max_groups) {
  GoroutineCensus c;
  c.status = read.status;
  c.reason = read.reason;
  c.stacks_reread = read.stacks_reread;
  StartNames starts(tab, bias);
  std::map<std::string, uint64_t> by_state;
  struct Acc {
    uint64_t count = 0;
    uint64_t gopc = 0, startpc = 0;
  };
  std::map<Key, Acc> groups;
  static const std::vector<uint64_t> kNoPcs;  // sorts before every stack
  std::unordered_map<uint64_t, uint64_t> func_of_gopc;
  std::array<uint64_t, 6> missing{};  // by GoStackMissing, the user's goroutines only
  static_assert(static_cast<size_t>(GoStackMissing::kFramePointers) + 1 == std::tuple_size_v<decltype(missing)>);
  for (const auto& g : read.goroutines) {
    if (starts.system(g.startpc)) {
      ++c.system;
      continue;
    }
    ++c.total;
    ++missing[static_cast<size_t>(g.missing)];
    ++by_state[std::string(go_g_status_name(minor, g.status))];
    auto [it, fresh] = func_of_gopc.try_emplace(g.gopc, 0);
    if (fresh && g.gopc > bias)
      if (auto f = tab.find_func(g.gopc - 1 - bias)) it->second = f->entry;
    const bool stacked = g.stack < read.stacks.size();
    Key k{stacked ? &read.stacks[g.stack] : &kNoPcs, g.status,
          g.status == static_cast<uint32_t>(GoGStatus::kWaiting) ? g.wait_reason : uint8_t{0}, it->second,
          stacked ? 0 : g.startpc};
    Acc& a = groups[k];
    if (a.count++ == 0) {
      a.gopc = g.gopc;
      a.startpc = g.startpc;
    }
  }
  for (auto& [k, v] : by_state) c.by_state.emplace_back(k, v);
  auto partial = [&c](uint64_t n, const char* what) {
    if (n == 0) return;
    if (c.status == SnapshotStatus::kComplete) c.status = SnapshotStatus::kPartial;
    c.reason += (c.reason.empty() ? "" : "; ") + std::to_string(n) + what;
  };
  auto count = [&missing](GoStackMissing m) { return missing[static_cast<size_t>(m)]; };
  partial(count(GoStackMissing::kChangedState),
          " parked goroutines changed state while being read (counted without a stack)");
  partial(count(GoStackMissing::kStackKeptMoving),
          " parked goroutines' stacks moved under every re-read (copied by the GC; counted without a stack)");
  partial(count(GoStackMissing::kUnreadable), " goroutine stacks could not be read");
  partial(count(GoStackMissing::kUnwindFailed),
          " goroutine stacks could not be unwound (unknown pc or sp out of range)");
  partial(count(GoStackMissing::kFramePointers),
          " goroutine stacks disagree with their frame pointers (counted without a stack)");

  std::vector<std::pair<const Key*, const Acc*>> order;
  order.reserve(groups.size());
  for (const auto& [k, a] : groups) order.emplace_back(&k, &a);
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& x, const auto& y) { return x.second->count > y.second->count; });
  if (order.size() > max_groups) {
    order.resize(max_groups);
    c.groups_truncated = true;
  }
  for (const auto& [k, a] : order) {
    GoroutineGroup g;
    g.count = a->count;
    g.state = std::string(go_g_status_name(minor, k->status));
    g.wait_reason = std::string(go_wait_reason_name(minor, k->wait_reason));
    g.created_by = creator(tab, bias, a->gopc);
    g.start = starts.name(a->startpc);
    if (!k->pcs->empty()) {
      std::vector<uint64_t> pcs;
      pcs.reserve(k->pcs->size());
      for (uint64_t pc : *k->pcs) pcs.push_back(pc - bias);
      for (const auto& fr : tab.symbolize_stack(tab.expand_final_inline_frame(pcs)))
        if (fr.function != "runtime.goexit") g.stack.push_back(fr.function);
    }
    c.groups.push_back(std::move(g));
  }
  return c;
}

std::vector<std::pair<std::vector<uint64_t>, int64_t>> goroutine_profile_samples(const GoGoroutineRead& read,
                                                                                 const GoPclntab& tab,
                                                                                 uint64_t bias) {
  StartNames starts(tab, bias);
  std::map<std::vector<uint64_t>, int64_t> counts;
  for (const auto& g : read.goroutines) {
    if (starts.system(g.startpc)) continue;
    if (g.stack < read.stacks.size())
      ++counts[read.stacks[g.stack]];
    else
      ++counts[std::vector<uint64_t>{g.startpc + 1}];
  }
  // The runtime's tracebackPCs stores one PC per inlined frame (the call
  // site + 1 of each inlined body, then the physical return PC); runtime/pprof
  // builds its locations from that form, so ours are expanded the same way.
  std::vector<std::pair<std::vector<uint64_t>, int64_t>> out;
  out.reserve(counts.size());
  for (const auto& [pcs, n] : counts) {
    std::vector<uint64_t> expanded;
    for (uint64_t pc : pcs) {
      const uint64_t one = pc - bias;
      for (uint64_t q : tab.expand_final_inline_frame(std::span<const uint64_t>(&one, 1)))
        expanded.push_back(q + bias);
    }
    out.emplace_back(std::move(expanded), n);
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

MemoryClaim goroutine_stack_claim(const GoGoroutineRead& read) {
  MemoryClaim c;
  c.kind = MemoryKind::kStacks;
  for (const GoGoroutine& g : read.goroutines)
    if (g.stack_hi > g.stack_lo) c.ranges.push_back({g.stack_lo, g.stack_hi});
  c.what = "goroutine stacks (" + std::to_string(c.ranges.size()) + " goroutines)";
  return c;
}

}  // namespace oomsnap
