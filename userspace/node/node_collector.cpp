#include "node/node_collector.h"

#include <map>

#include "core/chunk_cache.h"
#include "core/proc_info.h"
#include "node/v8_heap_layout.h"
#include "node/v8_heap_walk.h"
#include "node/v8_maps.h"
#include "node/v8_pages.h"
#include "node/v8_types.h"

namespace oomsnap {
namespace {

// Gone, or dying (a zombie keeps its /proc entry a while): its memory
// stopped reading.
bool target_gone(const Target& target) {
  const auto now = read_identity(target.proc());
  return !now || now->start_time_ticks != target.identity().start_time_ticks || now->exited();
}

constexpr unsigned kMaxV8Walks = 4;

// Every heap's pages walked once (a worker has a heap of its own), summed.
struct HeapsWalked {
  std::string error;               // why the objects cannot be read at all
  std::vector<std::string> names;  // index -> name
  std::vector<std::pair<uint64_t, uint64_t>> by_name;  // objects, bytes per name index
  std::map<std::string, V8SpaceUse> used;              // by space
  uint64_t area = 0, walked = 0, pages = 0, complete = 0, unlocated = 0, unlocated_bytes = 0;
  uint64_t buffers = 0, buffer_bytes = 0;  // ArrayBuffer backing stores (each heap's once)
  bool buffers_known = false;
  std::vector<std::string> stops;
  std::string cut;
  bool moved = false;  // a collection ran meanwhile
  unsigned walks = 0;
};

HeapsWalked walk_heaps(Target& target, const NodeRuntime& rt, const V8TypeIds& types, const V8HeapLayout& layout,
                       const V8PageScan& scan, uint64_t read_budget, const Deadline& deadline) {
  HeapsWalked out;
  if (auto why = v8_types_mismatch(types, *rt.metadata)) {
    out.error = "this build numbers V8's instance types unlike the official " + layout.version() + " build (" +
                *why + "): its objects are not read";
    return out;
  }
  std::string missing;
  const V8NamingFacts facts = v8_naming_facts(*rt.metadata, types, rt.v8_version->major, missing);
  if (!missing.empty()) {
    out.error = "V8's metadata lacks what naming needs: " + missing;
    return out;
  }
  ChunkCache cache(target);
  V8MapReader maps(cache, *rt.metadata, types, facts);
  V8WalkLimits limits;
  limits.max_read_bytes = read_budget;
  for (const auto& heap : scan.heaps) {
    V8HeapWalk w = walk_v8_heap(target.memory(), cache, heap, layout, maps, deadline, limits);
    if (w.tally.by_name.size() > out.by_name.size()) out.by_name.resize(w.tally.by_name.size());
    for (size_t i = 0; i < w.tally.by_name.size(); ++i) {
      out.by_name[i].first += w.tally.by_name[i].objects;
      out.by_name[i].second += w.tally.by_name[i].bytes;
    }
    for (const auto& [name, u] : w.by_space) {
      V8SpaceUse& to = out.used[name];
      to.objects += u.objects;
      to.bytes += u.bytes;
      to.free_bytes += u.free_bytes;
    }
    out.area += w.area_bytes, out.walked += w.area_bytes_walked, out.pages += w.pages;
    out.complete += w.pages_complete;
    out.unlocated += w.unlocated_areas, out.unlocated_bytes += w.unlocated_area_bytes;
    out.buffers += w.tally.buffers, out.buffer_bytes += w.tally.buffer_bytes;
    out.moved = out.moved || w.collection_ran;
    for (auto& s : w.stops)
      if (out.stops.size() < 8) out.stops.push_back(std::move(s));
    if (!w.cut.empty()) {
      out.cut = w.cut;
      break;
    }
  }
  out.names = maps.names();
  out.buffers_known = facts.js_array_buffer != 0;
  return out;
}

}  // namespace

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
  const V8TypeIds* types = v8_type_ids_for(rt.v8_version->major, rt.v8_version->minor);
  // The pages, then their objects; again when a collection ran meanwhile.
  V8PageScan scan;
  HeapsWalked walked;
  // The first walk may read the whole read budget; the ones after it share
  // one more.
  const uint64_t read0 = target.memory().bytes_read();
  uint64_t budget = opts.max_read_bytes;
  for (unsigned walks = 1;; ++walks) {
    const auto start = std::chrono::steady_clock::now();
    const uint64_t before = target.memory().bytes_read();
    scan = scan_v8_pages(target.memory(), target.maps(), *layout, run.deadline);
    if (scan.heaps.empty() || !types) break;
    walked = walk_heaps(target, rt, *types, *layout, scan, budget, run.deadline);
    walked.walks = walks;
    const uint64_t took = target.memory().bytes_read() - before, spent = target.memory().bytes_read() - read0;
    const uint64_t left = spent < 2 * opts.max_read_bytes ? 2 * opts.max_read_bytes - spent : 0;
    if (!walked.error.empty() || !walked.moved || left < took ||
        !room_for_another_walk(run.deadline, std::chrono::steady_clock::now() - start, walks, kMaxV8Walks))
      break;
    budget = left;
  }
  if (scan.heaps.empty()) {
    snap.set_status(SnapshotStatus::kFailed,
                    std::string(target_gone(target) ? "target exited during the capture: " : "") +
                        "no V8 heap page found among " + std::to_string(scan.candidates) + " aligned addresses" +
                        (scan.cut.empty() ? "" : " (" + scan.cut + ")"));
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
  if (!types) {
    snap.set_status(SnapshotStatus::kUnavailable, "no instance-type table for V8 " + layout->version());
    return run.finish();
  }
  if (!walked.error.empty()) {
    snap.set_status(SnapshotStatus::kUnavailable, walked.error);
    return run.finish();
  }
  // The objects, by name.
  const auto& by_name = walked.by_name;
  uint64_t objects = 0, bytes = 0;
  for (size_t i = 0; i < by_name.size(); ++i) {
    if (by_name[i].first == 0) continue;
    snap.entries.push_back({"object_type", walked.names[i], by_name[i].second, by_name[i].first, {}, std::nullopt});
    objects += by_name[i].first;
    bytes += by_name[i].second;
  }
  snap.sort_and_truncate(opts.max_entries);
  const HeapsWalked& w = walked;
  for (const auto& [name, u] : w.used) snap.totals.emplace_back(name + ".used_bytes", u.bytes);
  snap.totals.emplace_back("objects", objects);
  snap.totals.emplace_back("bytes", bytes);
  snap.totals.emplace_back("pages_walked", w.pages);
  snap.totals.emplace_back("walks", w.walks);
  if (w.unlocated) {
    snap.totals.emplace_back("unlocated_allocation_areas", w.unlocated);
    snap.totals.emplace_back("unlocated_allocation_area_bytes", w.unlocated_bytes);
  }
  // Memory the heap's ArrayBuffers hold outside it (Buffers too): where a
  // process with a small heap keeps its bytes.
  if (w.buffers_known) {
    snap.totals.emplace_back("external.array_buffers", w.buffers);
    snap.totals.emplace_back("external.array_buffer_bytes", w.buffer_bytes);
    if (w.buffer_bytes)
      run.out.memory_claims.push_back({MemoryKind::kNative,
                                       "ArrayBuffer backing stores (" + std::to_string(w.buffers) +
                                           (w.buffers == 1 ? " buffer)" : " buffers)"),
                                       {},
                                       w.buffer_bytes});
  }
  snap.scope = "v8_heap_objects";  // every object in the pages, collected or not yet
  snap.coverage = w.area ? static_cast<double>(w.walked) / static_cast<double>(w.area) : 1.0;
  std::string why = w.cut;
  for (const auto& s : w.stops) why += (why.empty() ? "" : "; ") + s;
  if (target_gone(target)) {
    // Its memory went while it was read: what was counted stays, said so.
    snap.set_status(objects ? SnapshotStatus::kPartial : SnapshotStatus::kFailed,
                    "target exited during the walk, after " + std::to_string(w.complete) + " of " +
                        std::to_string(w.pages) + " pages");
  } else if (w.moved) {
    // Each walk overlapped a collection, which moves the new space's objects
    // and frees the old space's: counts may miss or double what it moved.
    snap.set_status(SnapshotStatus::kPartial,
                    std::string("V8 collected garbage during ") +
                        (w.walks == 1 ? "the walk" : "each of " + std::to_string(w.walks) + " walks") +
                        (why.empty() ? "" : ": " + why));
  } else if (why.empty() && w.complete == w.pages) {
    snap.set_status(SnapshotStatus::kComplete, "");
  } else {
    snap.set_status(SnapshotStatus::kPartial, std::to_string(w.pages - w.complete) + " of " +
                                                  std::to_string(w.pages) + " pages not walked to their end: " + why);
  }
  return run.finish();
}

}  // namespace oomsnap
