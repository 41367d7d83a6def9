#include "node/node_collector.h"

#include <map>

#include "node/v8_heap_layout.h"
#include "node/v8_pages.h"

namespace oomsnap {

bool NodeCollector::detect(Target& target) {
  runtime_ = find_node_runtime(target);
  return runtime_.has_value();
}

CaptureResult NodeCollector::collect(Target& target, const CaptureOptions& opts) {
  CaptureRun run(target, "node", opts);
  Snapshot& snap = run.out.snapshot;
  if (!runtime_ && !detect(target)) {
    snap.set_status(SnapshotStatus::kFailed, "not a Node.js process (no module exports V8's v8dbg_ symbols)");
    return run.finish();
  }
  const NodeRuntime& rt = *runtime_;
  const auto node_version = read_node_version(target.memory(), rt);
  snap.runtime_version = "node " + (node_version ? "v" + *node_version : std::string("(version unknown)")) +
                         ", V8 " + (rt.v8_version ? rt.v8_version->text() : std::string("(version unknown)"));
  if (!rt.metadata) {
    snap.set_status(SnapshotStatus::kUnavailable, "V8's postmortem metadata in " + rt.module +
                                                      " cannot be used: " + rt.metadata_error);
    return run.finish();
  }
  if (auto why = unsupported_tagging(*rt.metadata)) {
    snap.set_status(SnapshotStatus::kUnavailable, *why + " (" + rt.module + ")");
    return run.finish();
  }
  const V8HeapLayout* layout = rt.v8_version ? v8_heap_layout_for(rt.v8_version->major, rt.v8_version->minor) : nullptr;
  if (!layout) {
    snap.set_status(SnapshotStatus::kUnavailable,
                    "no heap layout for V8 " +
                        (rt.v8_version ? rt.v8_version->text() : std::string("of an unknown version")) +
                        " (known: " + known_v8_heap_layouts() + ")");
    return run.finish();
  }
  V8PageScan scan = scan_v8_pages(target.memory(), target.maps(), *layout, run.deadline);
  if (scan.heaps.empty()) {
    snap.set_status(SnapshotStatus::kFailed, "no V8 heap page found among " + std::to_string(scan.candidates) +
                                                 " aligned addresses" + (scan.cut.empty() ? "" : " (" + scan.cut + ")"));
    return run.finish();
  }
  // Per space over every heap (a worker has its own); the new space's two
  // semispaces are two owners of one name, counted together as V8 does.
  std::map<std::string, std::pair<uint64_t, uint64_t>> committed;  // name -> (committed, pages)
  for (const auto& heap : scan.heaps)
    for (const auto& space : heap.spaces) {
      auto& c = committed[space.name->name];
      c.first += space.committed;
      c.second += space.pages.size();
    }
  // The process's memory that the pages are (process_memory.breakdown):
  // per space; the semispace being evacuated from holds no live object.
  std::map<std::pair<std::string, bool>, std::vector<AddressRange>> claimed;  // (space, from-semispace)
  for (const auto& heap : scan.heaps)
    for (const auto& space : heap.spaces)
      for (uint32_t i : space.pages) {
        const V8Page& p = heap.pages[i];
        claimed[{space.name->name, (p.flags & layout->from_page_flag) != 0}].push_back({p.addr, p.addr + p.size});
      }
  for (auto& [key, ranges] : claimed)
    run.out.memory_claims.push_back(
        {key.second ? MemoryKind::kHeapFree : MemoryKind::kHeap,
         "V8 heap (" + key.first + (key.second ? ", the semispace evacuated from)" : ")"), std::move(ranges),
         std::nullopt});
  for (const auto& [name, c] : committed) {
    snap.totals.emplace_back(name + ".committed_bytes", c.first);
    snap.totals.emplace_back(name + ".pages", c.second);
  }
  snap.set_status(SnapshotStatus::kUnavailable,
                  "the V8 heap's pages were found (totals, breakdown); its objects are not read yet (issue #26)");
  return run.finish();
}

}  // namespace oomsnap
