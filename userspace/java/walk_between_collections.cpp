#include "java/walk_between_collections.h"

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

namespace oomsnap {
namespace {

using Clock = std::chrono::steady_clock;

// The counters in one read, and after them the busy flag when asked
// (process_vm_readv copies its ranges in order). A counter that cannot be
// read is unknown; a flag that cannot be read is not busy.
CollectionCounts read_counts(RemoteMemory& live, const CollectionCounters& c, bool* busy = nullptr) {
  uint32_t all = 0;
  int64_t full = 0, remarks = 0;
  uint8_t active = 0;
  std::vector<RemoteMemory::Request> reqs;
  reqs.push_back({c.collections ? c.heap + *c.collections : 0, &all, 4});
  reqs.push_back({c.full_collections.value_or(0), &full, 8});
  reqs.push_back({c.g1_remark_pauses.value_or(0), &remarks, 8});
  reqs.push_back({busy && c.active ? c.heap + *c.active : 0, &active, 1});
  std::erase_if(reqs, [](const RemoteMemory::Request& r) { return r.addr == 0; });
  live.read_batch(reqs);
  CollectionCounts n;
  for (const RemoteMemory::Request& r : reqs) {
    if (!r.ok) continue;
    if (r.buf == &all) n.all = all;
    if (r.buf == &full) n.full = full;
    if (r.buf == &remarks) n.g1_remarks = remarks;
  }
  if (busy) *busy = active != 0;  // unread: 0
  return n;
}

// The counters once no collection runs (waited for up to ~100 ms): read
// with the flag after them, so that a collection they count has ended, and
// one that starts after is counted by the next read. The flag is set before
// a collection counts itself and cleared when it ends.
CollectionCounts settled_counts(RemoteMemory& live, const CollectionCounters& c, const Deadline& deadline) {
  bool busy = false;
  CollectionCounts n = read_counts(live, c, &busy);
  for (int i = 0; busy && i < 100 && !deadline.expired(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    n = read_counts(live, c, &busy);
  }
  return n;
}

}  // namespace

bool only_young_collections_between(HeapKind kind, const CollectionCounts& before, const CollectionCounts& after) {
  if (!before.full || !after.full || *before.full != *after.full) return false;
  if (kind != HeapKind::kG1) return true;
  return after.all - before.all == 1 && before.g1_remarks && after.g1_remarks && *before.g1_remarks == *after.g1_remarks;
}

std::optional<HeapWalks> walk_between_collections(RemoteMemory& live, ChunkCache& mem, const HotSpotVm& vm,
                                                  const CollectionCounters& counters, JavaHeapLayout& L,
                                                  JavaHeapLimits& lim, uint64_t read_budget,
                                                  const Deadline& deadline, std::string& error) {
  // The first walk reads at most read_budget, as one walk always did; the
  // ones after it share one more.
  const uint64_t first_limit = live.bytes_read() + read_budget, walk_limit = first_limit + read_budget;
  // Each name costs a Klass and a Symbol read, two chunks at most: room for
  // dozens of names (usually thousands: Klasses lie together) after a walk
  // that used up the budget.
  lim.name_read_limit = walk_limit + (16u << 20);
  HeapWalks out;
  std::unique_ptr<JavaHeapWalker> walker;
  CollectionCounts last;         // before the last walk
  Clock::duration whole_took{};  // the last whole walk's time
  uint64_t whole_read = 0;       // and its reads
  for (;;) {
    const CollectionCounts before = settled_counts(live, counters, deadline);
    auto holes = read_tlab_holes(mem, vm, deadline, error);
    if (!holes) return std::nullopt;
    L.holes = std::move(*holes);
    mem.set_read_limit(walker ? walk_limit : first_limit);  // naming the classes raised it
    const auto start = Clock::now();
    std::optional<JavaHeapWalk> r;
    if (walker && only_young_collections_between(counters.kind, last, before)) {
      r = walker->walk_young_again();
      out.young_walks += r.has_value();
    }
    if (!r) {
      const uint64_t read0 = live.bytes_read();
      if (walker && (!room_for_another_walk(deadline, whole_took, out.walks, kMaxHeapWalks) ||
                     read0 + whole_read > walk_limit))
        break;  // the last walk stands, overlapped
      walker = std::make_unique<JavaHeapWalker>(mem, L, lim, deadline);
      r = walker->walk();
      whole_took = Clock::now() - start;
      whole_read = live.bytes_read() - read0;
    }
    ++out.walks;
    out.walk = std::move(*r);
    out.moved = counters.collections && read_counts(live, counters).all != before.all;
    last = before;
    if (!out.moved || out.walk.status != SnapshotStatus::kComplete ||
        !room_for_another_walk(deadline, Clock::now() - start, out.walks, kMaxHeapWalks))
      break;
    mem.forget_contents();
  }
  return out;
}

}  // namespace oomsnap
