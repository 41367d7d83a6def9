#include "python/python_collector.h"

#include <chrono>
#include <thread>
#include <vector>

#include "core/chunk_cache.h"
#include "python/python_arena_reader.h"
#include "python/python_arena_table.h"
#include "python/python_heap.h"
#include "python/python_layout.h"

namespace oomsnap {
namespace {
constexpr const char* kFreeThreaded =
    "free-threaded CPython build: objects live in per-thread mimalloc heaps without GC lists; not supported";
}  // namespace

bool PythonCollector::reads_mapped_file(const Mapping& m) const { return is_libpython_mapping(m); }

bool PythonCollector::detect(Target& target) {
  runtime_ = find_python_runtime(target);
  return runtime_.has_value();
}

CaptureResult PythonCollector::collect(Target& target, const CaptureOptions& opts) {
  CaptureRun run(target, "python", opts);
  Snapshot& snap = run.out.snapshot;
  const Deadline& deadline = run.deadline;
  RemoteMemory& mem = target.memory();
  auto finish = [&run] { return run.finish(); };

  if (!runtime_ && !detect(target)) {
    snap.set_status(SnapshotStatus::kFailed, "not a CPython process (no module defines _PyRuntime)");
    return finish();
  }
  const PythonRuntime& rt = *runtime_;
  snap.runtime_version = "cpython" + python_version_text(rt.version_hex, rt.exact_version);
  if (rt.free_threaded_name) {
    snap.set_status(SnapshotStatus::kUnavailable, std::string(kFreeThreaded) + " (" + rt.module + ")");
    return finish();
  }
  auto layout = python_layout_for(rt.version_hex);
  if (!layout) {
    snap.set_status(SnapshotStatus::kUnavailable, "unsupported CPython version " +
                                                      python_version_text(rt.version_hex, rt.exact_version) +
                                                      " (supported: 3.8 to 3.14)");
    return finish();
  }
  if (layout->minor >= 13) {
    std::vector<uint8_t> raw(kPyDebugOffsetsReadSize);
    std::string err;
    if (!mem.read(rt.runtime_addr, raw.data(), raw.size())) {
      snap.set_status(SnapshotStatus::kFailed, "cannot read _PyRuntime of " + rt.module +
                                                   (target.still_same() ? "" : ": the target exited"));
      return finish();
    }
    auto dbg = parse_py_debug_offsets(raw, layout->minor, err);
    if (!dbg) {
      snap.set_status(SnapshotStatus::kFailed, "cannot use the runtime's _Py_DebugOffsets: " + err);
      return finish();
    }
    if (dbg->free_threaded) {
      snap.set_status(SnapshotStatus::kUnavailable, kFreeThreaded);
      return finish();
    }
    if (auto bad = apply_py_debug_offsets(*layout, *dbg)) {
      snap.set_status(SnapshotStatus::kFailed, *bad);
      return finish();
    }
  }

  // Where the objects live (issue #24): obmalloc's arena table, read before
  // the walk (a few KiB, at most 6 MiB) so that a walk cut at the deadline
  // does not leave the arenas unclaimed.
  const uint64_t read_at_start = mem.bytes_read();
  PyArenaRead arenas = read_py_arenas(mem, target.maps(), rt, *layout, opts.max_read_bytes, deadline);
  run.out.memory_claims = std::move(arenas.claims);
  run.out.memory_claims_reason = std::move(arenas.reason);

  // 4 MiB: the walk reads each part of the heap about once, in order
  // (deferred references), so a larger cache mostly costs fresh pages; 2, 4
  // and 8 MiB measured alike, 32 MiB a quarter of a 1M-object profile.
  ChunkCache cache(target, ChunkCache::kDefaultChunk, size_t{4} << 20);
  cache.set_read_limit(read_at_start + opts.max_read_bytes);
  // A collection in progress rewires the lists; it is usually over within
  // milliseconds, so wait a little (bounded by the budget) before walking.
  auto wait_for_collection = [&] {
    uint64_t interp = 0;
    if (!mem.read_value(rt.runtime_addr + layout->interpreters_head, interp) || !interp) return;
    for (int i = 0; i < 50 && !deadline.expired(); ++i) {
      int32_t collecting = 0;
      if (!mem.read_value(py_gc_state(*layout, rt.runtime_addr, interp) + layout->gc_collecting, collecting) ||
          !collecting)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  wait_for_collection();
  PyHeapInput in;
  in.runtime_addr = rt.runtime_addr;
  in.static_ranges.push_back(rt.static_range);
  in.max_objects = opts.max_objects;
  in.before_rewalk = wait_for_collection;
  PyHeapResult res = walk_python_heap(cache, *layout, in, deadline);
  snap.set_status(res.status, res.reason);
  snap.scope = res.scope;
  snap.coverage = res.coverage;
  snap.totals = {{"interpreters", res.interpreters},
                 {"gc_tracked_objects", res.tracked_objects},
                 {"referenced_untracked_objects", res.untracked_objects},
                 {"gc_lists_complete", res.lists_complete},
                 {"gc_lists", res.lists_total}};
  if (res.implausible_sizes) snap.totals.emplace_back("implausible_sizes", res.implausible_sizes);
  if (res.walks > 1) snap.totals.emplace_back("gc_walks", res.walks);  // lists changed under the earlier ones
  uint64_t total_bytes = 0;
  for (auto& t : res.types) {
    SnapshotEntry e;
    e.kind = "object_type";
    e.name = std::move(t.name);
    e.bytes = t.bytes;
    e.objects = t.objects;
    total_bytes = total_bytes > ~uint64_t{0} - t.bytes ? ~uint64_t{0} : total_bytes + t.bytes;  // hostile sizes: saturate
    snap.entries.push_back(std::move(e));
  }
  snap.totals.emplace_back("bytes", total_bytes);
  snap.sort_and_truncate(opts.max_entries);
  // Then what the walk saw of objects too large for the arenas (after their
  // claims, which take the arenas' bytes first).
  if (res.large_object_bytes)
    run.out.memory_claims.push_back(py_large_object_claim(res.large_object_bytes, res.large_objects));
  if (res.status == SnapshotStatus::kPartial && !target.still_same())
    snap.reason += " (the target exited or was replaced)";
  return finish();
}

}  // namespace oomsnap
