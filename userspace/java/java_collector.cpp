#include "java/java_collector.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "base/reason.h"
#include "core/chunk_cache.h"
#include "java/direct_buffers.h"
#include "java/java_heap.h"
#include "java/generational_heap.h"
#include "java/hotspot_vmstructs.h"
#include "java/java_memory_claims.h"
#include "java/perf_data.h"
#include "java/walk_between_collections.h"

namespace oomsnap {
namespace {

bool flag_set(ChunkCache& mem, const std::map<std::string, uint64_t>& flags, const char* name) {
  uint8_t v = 0;
  auto it = flags.find(name);
  return it != flags.end() && mem.get(it->second, v) && v;
}

// The collector the flags select, when its heap is walked. JDK 8's default
// (ergonomics) is Parallel; -XX:+UseParallelOldGC (8, 11) is Parallel too.
std::optional<HeapKind> walked_collector(ChunkCache& mem, const std::map<std::string, uint64_t>& flags) {
  if (flag_set(mem, flags, "UseG1GC")) return HeapKind::kG1;
  if (flag_set(mem, flags, "UseSerialGC")) return HeapKind::kSerial;
  if (flag_set(mem, flags, "UseParallelGC") || flag_set(mem, flags, "UseParallelOldGC")) return HeapKind::kParallel;
  return std::nullopt;
}

// The collector the flags select among those not walked, or nullptr.
const char* other_collector(ChunkCache& mem, const std::map<std::string, uint64_t>& flags) {
  for (const char* gc : {"UseZGC", "UseShenandoahGC", "UseEpsilonGC", "UseConcMarkSweepGC"})
    if (flag_set(mem, flags, gc)) return gc;
  return nullptr;
}

const char* collector_name(HeapKind kind) {
  switch (kind) {
    case HeapKind::kSerial:
      return "Serial";
    case HeapKind::kParallel:
      return "Parallel";
    case HeapKind::kG1:
      break;
  }
  return "G1";
}

// Where the heap and the code cache lie, read before the walk (they do not
// move, and the walk may use up the read budget); what cannot be read is
// said in `why`.
JavaMemoryAccount read_memory_account(ChunkCache& mem, const HotSpotVm& vm, HeapKind kind, uint64_t heap,
                                      std::string& why) {
  JavaMemoryAccount a;
  a.collector = collector_name(kind);
  std::string err;
  a.heap = read_heap_reserved(mem, vm, heap, err);
  if (!a.heap) why = "the Java heap is not claimed: " + err;
  a.code_cache = read_code_cache_bounds(mem, vm, err);
  if (!a.code_cache) append_reason(why, "the code cache is not claimed: " + err);
  return a;
}

// What the direct buffers hold (java.nio.Bits's totals), into `a`. Read
// after the walk, with the read allowance the naming of its classes has
// above the walk's budget: finding Bits reads a few MiB of class metadata,
// which must not come out of the budget that decides whether the heap is
// walked whole or sampled.
void read_direct_buffer_account(ChunkCache& mem, const HotSpotVm& vm, const JavaHeapLayout& L, bool compressed_oops,
                                const Deadline& deadline, JavaMemoryAccount& a, std::string& why) {
  std::string err;
  auto classes = HotSpotClasses::resolve(mem, vm, L, compressed_oops, err);
  if (classes) a.direct_buffers = read_direct_buffers(mem, *classes, deadline, err);
  if (!a.direct_buffers) append_reason(why, "java.nio direct buffers are not named: " + err);
}

// The JVM's performance counters (perf_data.h), their buffer read once:
// Metaspace's use into the account, and where the collection counters lie,
// which the walks read again around each one.
void read_perf_data(ChunkCache& mem, const HotSpotVm& vm, HeapKind kind, JavaMemoryAccount& a, std::string& why,
                    CollectionCounters& counters) {
  std::string err;
  std::map<std::string, uint64_t> at;
  auto found = read_perf_counters(
      mem, vm, {kMetaspaceUsedCounter, kMetaspaceCommittedCounter, kFullCollectionsCounter, kG1RemarkPausesCounter},
      err, &at);
  if (found) a.metaspace = metaspace_use(*found, err);
  if (!a.metaspace) append_reason(why, "metaspace is not named: " + err);
  if (auto it = at.find(std::string(kFullCollectionsCounter)); it != at.end()) counters.full_collections = it->second;
  if (auto it = at.find(std::string(kG1RemarkPausesCounter)); it != at.end() && kind == HeapKind::kG1)
    counters.g1_remark_pauses = it->second;
}

// The claims on the process's memory, with the heap's used bytes as the walk
// counted them (a walk that failed counted nothing to trust).
void claim_memory(JavaMemoryAccount a, std::string why, const JavaHeapWalk& walk, const Target& target,
                  CaptureResult& out) {
  if (walk.status == SnapshotStatus::kFailed && a.heap) {
    a.heap.reset();
    append_reason(why, "the Java heap is not claimed: the walk failed");
  }
  a.heap_used = walk.used_bytes;
  a.spaces = walk.spaces;
  JavaMemoryClaims c = java_memory_claims(a, target.maps());
  out.memory_claims = std::move(c.claims);
  if (!c.reason.empty()) append_reason(why, c.reason);
  out.memory_claims_reason = std::move(why);
}

const char* scope_of(HeapKind kind, bool sampled) {
  switch (kind) {
    case HeapKind::kSerial:
      return sampled ? "serial_heap_sampled" : "serial_heap";
    case HeapKind::kParallel:
      return sampled ? "parallel_heap_sampled" : "parallel_heap";
    case HeapKind::kG1:
      break;
  }
  return sampled ? "g1_heap_sampled" : "g1_heap";
}

// An optional CollectedHeap field, the first of `names` that VMStructs
// describes: its offset (checked like every other against CollectedHeap's
// size), nullopt when none is described; false + error when one is
// described out of its type.
bool optional_heap_field(const HotSpotVm& vm, std::initializer_list<const char*> names, uint64_t bytes,
                         std::optional<uint64_t>& offset, std::string& error) {
  for (const char* name : names) {
    if (!vm.field("CollectedHeap", name)) continue;
    offset = vm.field_offset({"CollectedHeap"}, name, bytes, error);
    return offset.has_value();
  }
  return true;
}

}  // namespace

bool JavaCollector::reads_mapped_file(const Mapping& m) const { return is_libjvm_mapping(m); }

bool JavaCollector::detect(Target& target) {
  jvm_ = find_libjvm(target);
  return jvm_.has_value();
}

CaptureResult JavaCollector::collect(Target& target, const CaptureOptions& opts) {
  CaptureRun run(target, "java", opts);
  Snapshot& snap = run.out.snapshot;
  const Deadline& deadline = run.deadline;
  auto finish = [&run] { return run.finish(); };
  if (!jvm_ && !detect(target)) {
    snap.set_status(SnapshotStatus::kFailed, "not a HotSpot JVM (no libjvm.so with gHotSpotVMStructs mapped)");
    return finish();
  }
  // A small cache: the heap walk reads each chunk once, front to back, and
  // the klasses it meets are decoded once into the walker's own table, so
  // 2 MiB keeps every chunk that is read again. The default 32 MiB costs
  // more than it saves: each capture touches it fresh, and zeroing new pages
  // took ~13% of a 1 GiB walk (perf, JDK 17 Serial; median 587 vs 716 ms).
  ChunkCache mem(target, ChunkCache::kDefaultChunk, size_t{2} << 20);
  const uint64_t read_limit = target.memory().bytes_read() + opts.max_read_bytes + (64u << 20);
  mem.set_read_limit(read_limit);
  std::string err;
  auto vm = HotSpotVm::read(mem, jvm_->symbols, deadline, err);
  if (!vm) {
    snap.set_status(SnapshotStatus::kFailed, "cannot read HotSpot's VMStructs: " + err);
    return finish();
  }
  auto found_flags = read_jvm_flags(mem, *vm,
                                    {"UseG1GC", "UseParallelGC", "UseParallelOldGC", "UseSerialGC", "UseZGC",
                                     "UseShenandoahGC", "UseEpsilonGC", "UseConcMarkSweepGC",
                                     "UseCompressedClassPointers", "UseCompressedOops", "UseCompactObjectHeaders",
                                     "ObjectAlignmentInBytes"},
                                    deadline, err);
  if (!found_flags) {
    snap.set_status(SnapshotStatus::kFailed, "cannot read the JVM's flags: " + err);
    return finish();
  }
  auto& flags = *found_flags;
  // The JDK's version (java -version's build line), else the VM's release.
  if (auto info = read_static<uint64_t>(mem, vm->field("Abstract_VM_Version", "_s_internal_vm_info_string")))
    snap.runtime_version = jre_version_of(read_remote_c_string(mem, *info, 512));
  if (snap.runtime_version.empty())
    if (auto vsym = read_static<uint64_t>(mem, vm->field("Abstract_VM_Version", "_s_vm_release")))
      snap.runtime_version = read_remote_c_string(mem, *vsym, 64);
  const std::optional<HeapKind> kind = walked_collector(mem, flags);
  if (!kind) {
    const char* gc = other_collector(mem, flags);
    snap.set_status(SnapshotStatus::kUnavailable,
                    std::string("the JVM's collector is not walked (") + (gc ? gc : "collector unknown") +
                        "); only G1, Serial and Parallel heaps are");
    return finish();
  }
  JavaHeapLayout L;
  uint64_t heap = 0;  // the CollectedHeap
  if (auto bad = *kind == HeapKind::kG1 ? resolve_g1_layout(mem, *vm, flags, L, heap)
                                        : resolve_generational_layout(mem, *vm, flags, *kind, L, heap)) {
    snap.set_status(SnapshotStatus::kFailed, *bad);
    return finish();
  }
  std::string account_why;
  JavaMemoryAccount account = read_memory_account(mem, *vm, *kind, heap, account_why);
  // A stop-the-world pause moves objects: wait it out briefly, and notice one
  // that starts during the walk by the collection counters.
  CollectionCounters counters;
  counters.heap = heap;
  counters.kind = *kind;
  if (!optional_heap_field(*vm, {"_is_gc_active", "_is_stw_gc_active"}, 1, counters.active, err) ||
      !optional_heap_field(*vm, {"_total_collections"}, 4, counters.collections, err)) {
    snap.set_status(SnapshotStatus::kFailed, err);
    return finish();
  }
  read_perf_data(mem, *vm, *kind, account, account_why, counters);
  // Klasses outside Metaspace (anonymous memory) come from a mapped CDS
  // archive: the file-backed mappings, for naming its hidden classes.
  for (const Mapping& m : target.maps())
    if (!m.path.empty() && m.path[0] != '[') L.archive_ranges.emplace_back(m.start, m.end);
  std::sort(L.archive_ranges.begin(), L.archive_ranges.end());
  JavaHeapLimits lim;
  lim.max_walk_bytes = opts.max_read_bytes;
  lim.max_entries = opts.max_entries;  // only these are named: a name costs a read and a string
  auto walked = walk_between_collections(target.memory(), mem, *vm, counters, L, lim,
                                         opts.max_read_bytes + (64u << 20), deadline, err);
  if (!walked) {
    snap.set_status(SnapshotStatus::kFailed, "cannot read the threads' TLABs: " + err);
    return finish();
  }
  JavaHeapWalk& r = walked->walk;
  const unsigned walks = walked->walks;
  const bool moved = walked->moved;
  mem.set_read_limit(lim.name_read_limit);
  read_direct_buffer_account(mem, *vm, L, flag_set(mem, flags, "UseCompressedOops"), deadline, account, account_why);
  snap.set_status(r.status, r.reason);
  if (moved && r.status == SnapshotStatus::kComplete)
    snap.set_status(SnapshotStatus::kPartial,
                    walks == 1 ? std::string("a garbage collection ran during the walk: objects may have moved")
                               : "a garbage collection ran during each of the " + std::to_string(walks) +
                                     " walks: objects may have moved");
  claim_memory(std::move(account), std::move(account_why), r, target, run.out);
  snap.scope = scope_of(*kind, r.sample_stride > 1);
  snap.coverage = r.coverage;
  if (*kind == HeapKind::kG1) {
    snap.totals = {{"regions", r.regions},         {"regions_walked", r.regions_walked},
                   {"used_bytes", r.used_bytes},   {"parsed_bytes", r.parsed_bytes},
                   {"unparsed_bytes", r.unparsed_bytes}, {"filler_bytes", r.filler_bytes},
                   {"objects", r.objects},         {"sample_stride", r.sample_stride},
                   {"humongous_objects", r.humongous_objects}, {"humongous_bytes", r.humongous_bytes},
                   {"region_bytes", L.grain_bytes}, {"classes", r.class_count}};
  } else {
    // Serial and Parallel have no regions and no humongous objects: the
    // spaces (eden, from, to, old) and the non-empty ones walked.
    snap.totals = {{"spaces", r.regions},          {"spaces_walked", r.regions_walked},
                   {"used_bytes", r.used_bytes},   {"parsed_bytes", r.parsed_bytes},
                   {"unparsed_bytes", r.unparsed_bytes}, {"filler_bytes", r.filler_bytes},
                   {"objects", r.objects},         {"sample_stride", r.sample_stride},
                   {"classes", r.class_count}};
  }
  snap.totals.emplace_back("walks", static_cast<uint64_t>(walks));  // > 1: collections overlapped the first
  // Of those, the ones after young collections only, of what they changed.
  snap.totals.emplace_back("young_walks", static_cast<uint64_t>(walked->young_walks));
  if (r.klass_cap_reached) {
    snap.totals.emplace_back("past_cap_objects", r.past_cap_objects);
    snap.totals.emplace_back("past_cap_bytes", r.past_cap_bytes);
  }
  for (auto& c : r.classes) {
    SnapshotEntry e;
    e.kind = "object_type";
    e.name = std::move(c.name);
    e.bytes = c.bytes;
    e.objects = c.objects;
    snap.entries.push_back(std::move(e));
  }
  // The walk returns the top max_entries already in this order; the classes
  // it left out (and those past its klass cap) make the output truncated.
  snap.sort_and_truncate(opts.max_entries);
  if (r.class_count > r.classes.size() || r.klass_cap_reached) snap.output_truncated = true;
  if (!target.still_same() && snap.status != SnapshotStatus::kFailed)
    snap.set_status(SnapshotStatus::kPartial, (snap.reason.empty() ? std::string() : snap.reason + "; ") +
                                                  "the target exited during the walk");
  return finish();
}

}  // namespace oomsnap
