#include "go/go_collector.h"

#include <elf.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_map>

#include "elf/module_map.h"
#include "go/go_g_layout.h"
#include "go/go_goroutine_census.h"
#include "go/go_goroutines.h"
#include "go/go_contention_collector.h"
#include "go/go_heap_reader.h"
#include "go/go_mem_accounting.h"
#include "go/go_pclntab.h"
#include "go/go_pprof.h"
#include "go/go_site_name.h"
#include "go/go_stripped.h"

namespace oomsnap {
namespace {

using Summaries = std::vector<GoBucketSummary, HugePageAllocator<GoBucketSummary>>;

// Groups the (already unsampled) rows by raw PC stack (the stack hash) in
// place, summing their inuse_* and sampled_* fields, and drops empty rows.
// An open-addressing table of indices (linear, no sort): a stack's total goes
// into the first free slot of the same array, always at or before the row
// being read.
void group_by_stack(Summaries& sums) {
  size_t cap = 16;
  while (cap < sums.size() * 2) cap <<= 1;
  constexpr uint32_t kEmpty = ~uint32_t{0};
  std::vector<uint32_t, HugePageAllocator<uint32_t>> slot_of(cap, kEmpty);
  size_t n = 0;
  for (size_t i = 0; i < sums.size(); ++i) {
    const GoBucketSummary b = sums[i];
    if (b.inuse_objects == 0 && b.inuse_bytes == 0) continue;
    size_t k = b.stack_hash & (cap - 1);
    while (slot_of[k] != kEmpty && sums[slot_of[k]].stack_hash != b.stack_hash) k = (k + 1) & (cap - 1);
    if (slot_of[k] == kEmpty) {
      slot_of[k] = static_cast<uint32_t>(n);
      sums[n++] = b;
    } else {
      GoBucketSummary& a = sums[slot_of[k]];
      a.inuse_objects += b.inuse_objects;
      a.inuse_bytes += b.inuse_bytes;
      a.sampled_objects += b.sampled_objects;
      a.sampled_bytes += b.sampled_bytes;
    }
  }
  sums.resize(n);
}

// Groups the rows by stack, ranks them by inuse bytes and symbolizes only the
// max_entries that are printed, re-reading their PCs. Consumes the rows.
// Sets `truncated` when groups were left out.
std::vector<SnapshotEntry> top_sites(Summaries& sums, const GoPclntab& tab, RemoteMemory& mem, uint64_t bias,
                                     size_t max_entries, bool& truncated, Snapshot& snap) {
  group_by_stack(sums);
  auto by_bytes = [](const GoBucketSummary& x, const GoBucketSummary& y) {
    return x.inuse_bytes != y.inuse_bytes ? x.inuse_bytes > y.inuse_bytes : x.inuse_objects > y.inuse_objects;
  };
  size_t keep = std::min(max_entries, sums.size());
  std::partial_sort(sums.begin(), sums.begin() + static_cast<std::ptrdiff_t>(keep), sums.end(), by_bytes);
  std::vector<const GoBucketSummary*> top;
  for (size_t i = 0; i < keep; ++i) top.push_back(&sums[i]);
  auto stacks = read_bucket_stacks(mem, top);
  std::vector<SnapshotEntry> out;
  for (size_t i = 0; i < keep; ++i) {
    SnapshotEntry e;
    e.kind = "allocation_site";
    e.bytes = sums[i].inuse_bytes;
    e.objects = sums[i].inuse_objects;
    // The size of the objects actually recorded; unsampled totals divided
    // would carry the truncation of the unsampling.
    if (sums[i].sampled_objects) e.average_bytes = sums[i].sampled_bytes / sums[i].sampled_objects;
    if (stacks[i].empty()) {
      e.name = "?";
      snap.set_status(SnapshotStatus::kPartial, "target exited before the top stacks were read");
    } else {
      for (uint64_t& pc : stacks[i]) pc -= bias;
      std::vector<std::string> names;
      for (auto& f : tab.symbolize_stack(tab.expand_final_inline_frame(stacks[i])))
        names.push_back(std::move(f.function));
      GoSite site = name_go_site(std::move(names));
      e.stack = std::move(site.stack);
      e.name = std::move(site.name);
    }
    out.push_back(std::move(e));
  }
  truncated = Snapshot::sort_and_truncate(out, max_entries) || sums.size() > max_entries;
  return out;
}

// The in-use entries. Consumes rd.summaries.
void build_entries(GoHeapReadResult& rd, const GoPclntab& tab, RemoteMemory& mem, uint64_t bias,
                   size_t max_entries, Snapshot& snap) {
  bool truncated = false;
  snap.entries = top_sites(rd.summaries, tab, mem, bias, max_entries, truncated, snap);
  if (truncated) snap.output_truncated = true;
}

// snapshot.recent from the rows' recent_* counters (still sampled): each
// bucket unsampled by itself as runtime/pprof would, then grouped and ranked
// like the in-use entries. Only buckets with recent allocations are copied.
void build_recent(const GoHeapReadResult& rd, const GoPclntab& tab, RemoteMemory& mem, uint64_t bias,
                  size_t max_entries, Snapshot& snap) {
  const int64_t rate = rd.profile.mem_profile_rate;
  const int minor = rd.profile.go_minor;
  SnapshotRecent recent;
  Summaries rows;
  size_t n = 0;  // reserve once: every growth of a huge-page vector is an mmap and a copy
  for (const GoBucketSummary& b : rd.summaries) n += (b.recent_objects || b.recent_bytes) ? 1 : 0;
  rows.reserve(n);
  for (const GoBucketSummary& b : rd.summaries) {
    if (b.recent_objects == 0 && b.recent_bytes == 0) continue;
    // 1.27 keeps counts only: its bytes are objects × size, so this is exact.
    const uint64_t size = b.recent_objects ? b.recent_bytes / b.recent_objects : 0;
    auto [o, by] = scale_heap_sample(static_cast<int64_t>(b.recent_objects), static_cast<int64_t>(b.recent_bytes),
                                     rate, minor, size);
    GoBucketSummary r = b;
    r.inuse_objects = o > 0 ? static_cast<uint64_t>(o) : 0;
    r.inuse_bytes = by > 0 ? static_cast<uint64_t>(by) : 0;
    r.sampled_objects = b.recent_objects;
    r.sampled_bytes = b.recent_bytes;
    recent.objects += r.inuse_objects;
    recent.bytes += r.inuse_bytes;
    rows.push_back(r);
  }
  bool truncated = false;
  recent.entries = top_sites(rows, tab, mem, bias, max_entries, truncated, snap);
  if (truncated) snap.output_truncated = true;
  snap.recent = std::move(recent);
}

int64_t now_nanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

// The goroutine census (snapshot.goroutines) and, for --profile goroutine,
// its pprof. Never fails the heap snapshot: its trouble is its own status.
void collect_goroutines(Target& target, const ElfFile& elf, const GoPclntab& tab, const GoVersion& ver,
                        uint64_t bias, const CaptureOptions& opts, const Deadline& deadline, CaptureResult& out) {
  GoroutineCensus failed;
  auto layout = go_g_layout_for(ver.minor);
  if (ver.major != 1 || !layout) {
    failed.status = SnapshotStatus::kUnavailable;
    failed.reason = "no runtime.g layout for " + ver.text;
    out.snapshot.goroutines = std::move(failed);
    return;
  }
  GoGoroutineAddrs addrs;
  auto len = elf.symbol("runtime.allglen");
  auto ptr = elf.symbol("runtime.allgptr");
  if (len && ptr) {
    addrs = {len->value + bias, ptr->value + bias};
  } else {
    GoAllgsRecovery rec = recover_go_allgs(elf, tab, ver);
    if (!rec.allglen || !rec.allgptr) {
      failed.status = SnapshotStatus::kUnavailable;
      failed.reason = "stripped binary: cannot locate runtime.allglen/allgptr: " + rec.error;
      out.snapshot.goroutines = std::move(failed);
      return;
    }
    addrs = {*rec.allglen + bias, *rec.allgptr + bias};
  }
  GoGoroutineRead rd = read_go_goroutines(target.memory(), addrs, *layout, tab, bias, opts, deadline);
  out.memory_claims.push_back(goroutine_stack_claim(rd));
  const size_t max_groups = opts.max_goroutine_groups ? opts.max_goroutine_groups : opts.max_entries;
  out.snapshot.goroutines = build_goroutine_census(rd, tab, bias, ver.minor, max_groups);
  if (opts.want_pprof && opts.profile == ProfileKind::kGoroutine && !rd.goroutines.empty()) {
    auto samples = goroutine_profile_samples(rd, tab, bias);
    GoPprofInput in;
    in.pclntab = &tab;
    in.load_bias = bias;
    in.mappings = go_exe_mappings(target, elf);
    in.time_nanos = now_nanos();
    in.counts = &samples;
    in.count_name = "goroutine";
    out.pprof = encode_go_count_pprof(in);
  }
}

// The runtime's own accounting (runtime.memstats, mheap_'s arenas) as the
// memory breakdown's claims, after the goroutine stacks' (which lie in the
// arenas too and must not count twice). Never fails the snapshot: without
// it the Go heap stays `native`, and the breakdown's reason says why.
void collect_mem_accounting(Target& target, const ElfFile& elf, const GoPclntab& tab, const GoVersion& ver,
                            uint64_t bias, CaptureResult& out) {
  const char* const fallback = "; the Go heap and runtime are counted as native";
  auto layout = go_memstats_layout_for(ver.minor);
  if (ver.major != 1 || !layout) {
    out.memory_claims_reason = "no runtime.memstats layout for " + ver.text + fallback;
    return;
  }
  uint64_t memstats = 0, mheap = 0;
  auto memstats_sym = elf.symbol("runtime.memstats");
  auto mheap_sym = elf.symbol("runtime.mheap_");
  if (memstats_sym && mheap_sym) {
    memstats = memstats_sym->value, mheap = mheap_sym->value;
  } else {
    GoMemGlobalsRecovery rec = recover_go_mem_globals(elf, tab, ver, layout->stacks_sys);
    if (!rec.memstats || !rec.mheap) {
      out.memory_claims_reason = "stripped binary: cannot locate runtime.memstats/mheap_: " + rec.error + fallback;
      return;
    }
    memstats = *rec.memstats, mheap = *rec.mheap;
  }
  std::string why;
  auto acc = read_go_mem_accounting(target.memory(), memstats + bias, mheap + bias, *layout, why);
  if (!acc) {
    out.memory_claims_reason = "Go runtime accounting: " + why + fallback;
    return;
  }
  for (MemoryClaim& c : go_memory_claims(*acc, target.maps())) out.memory_claims.push_back(std::move(c));
}

}  // namespace

std::optional<GoHeapAddrs> locate_go_heap(const ElfFile& elf, const GoPclntab& tab, const GoVersion& ver,
                                          uint64_t bias, std::string& why) {
  GoHeapAddrs addrs;
  auto mb = elf.symbol("runtime.mbuckets");
  auto rate = elf.symbol("runtime.MemProfileRate");
  auto cyc = elf.symbol("runtime.mProfCycle");
  if (cyc) addrs.mprof_cycle = cyc->value + bias;
  if (!mb || !rate || !cyc) {
    GoGlobalsRecovery rec = recover_go_globals(elf, tab, ver);
    if (!cyc && rec.mprof_cycle) addrs.mprof_cycle = *rec.mprof_cycle + bias;
    if (!mb && rec.mbuckets) mb = ElfFile::Symbol{"runtime.mbuckets", *rec.mbuckets, 8, 0};
    if (!rate && rec.mem_profile_rate) rate = ElfFile::Symbol{"runtime.MemProfileRate", *rec.mem_profile_rate, 8, 0};
    if (!mb || !rate) {
      why = "stripped binary: cannot locate heap profile globals: " + rec.error;
      return std::nullopt;
    }
  }
  addrs.mbuckets = mb->value + bias;
  addrs.mem_profile_rate = rate->value + bias;
  return addrs;
}

std::vector<GoMapping> go_exe_mappings(Target& target, const ElfFile& elf) {
  std::vector<GoMapping> out;
  struct stat st {};
  if (fstat(target.exe_fd(), &st) != 0) return out;
  for (const auto& m : target.maps()) {
    if (m.inode == st.st_ino && m.perms.find('x') != std::string::npos) {
      // The GNU build id as runtime/pprof writes it; Go-linked binaries usually
      // have none, and then the Go build id identifies the file.
      out.push_back({m.start, m.end, m.offset, m.path, elf.gnu_build_id().value_or(elf.go_build_id().value_or(""))});
      break;
    }
  }
  return out;
}

std::optional<uint64_t> exe_load_bias(const ElfFile& elf, const std::vector<Mapping>& maps, int exe_fd) {
  if (elf.elf_type() == ET_EXEC) return 0;
  struct stat st {};
  if (exe_fd < 0 || fstat(exe_fd, &st) != 0) return std::nullopt;
  return module_load_bias(elf, maps, st.st_ino);
}

bool GoCollector::detect(Target& target) {
  elf_ = target.exe_elf();
  buildinfo_.reset();
  if (!elf_) return false;
  try {
    buildinfo_ = read_go_buildinfo(*elf_);
  } catch (const std::exception&) {
    buildinfo_.reset();
  }
  return buildinfo_.has_value();
}

void collect_go_heap(const GoHeapSource& src, const ElfFile& elf, const GoVersion& ver, const GoPclntab& tab,
                     uint64_t bias, const CaptureOptions& opts, CaptureRun& run, bool want_pprof) {
  Snapshot& snap = run.out.snapshot;
  RemoteMemory& mem = src.mem;

  std::string why;
  const std::optional<GoHeapAddrs> located = locate_go_heap(elf, tab, ver, bias, why);
  if (!located) {
    snap.set_status(SnapshotStatus::kUnavailable, why);
    return;
  }
  const GoHeapAddrs& addrs = *located;

  GoHeapReadResult rd =
      read_go_heap(mem, src.maps, addrs, ver.minor, opts, run.deadline, want_pprof || opts.want_recent_pprof);
  snap.sample_rate = rd.profile.mem_profile_rate;
  snap.set_status(rd.status, rd.reason);
  if (rd.status == SnapshotStatus::kUnavailable && rd.profile.mem_profile_rate == 0) {
    // The linker turns profiling off in programs that never reference
    // runtime.MemProfile (no runtime/pprof): say so, it is the usual cause.
    uint8_t disabled = 0;
    auto sym = elf.symbol("runtime.disableMemoryProfiling");
    if (sym && mem.read(sym->value + bias, &disabled, 1) && disabled)
      snap.reason += "; the binary does not use runtime/pprof, so the Go linker disabled memory profiling";
  }
  if (rd.status == SnapshotStatus::kUnavailable || (rd.status == SnapshotStatus::kFailed && rd.summaries.empty()))
    return;
  if (src.still_same && !src.still_same()) {
    snap.set_status(SnapshotStatus::kFailed, "target exited or was replaced during the capture");
    return;
  }
  build_recent(rd, tab, mem, bias, opts.max_entries, snap);  // before build_entries consumes the rows
  build_entries(rd, tab, mem, bias, opts.max_entries, snap);
  if (want_pprof || opts.want_recent_pprof) {
    GoPprofInput in;
    in.profile = &rd.profile;
    in.pclntab = &tab;
    in.load_bias = bias;
    if (src.pprof_mappings) in.mappings = src.pprof_mappings();
    in.time_nanos = now_nanos();
    if (want_pprof) run.out.pprof = encode_go_heap_pprof(in);
    if (opts.want_recent_pprof) run.out.recent_pprof = encode_go_recent_pprof(in);
  }
}

CaptureResult GoCollector::collect(Target& target, const CaptureOptions& opts) {
  CaptureRun run(target, "go", opts);
  Snapshot& snap = run.out.snapshot;
  auto finish = [&run] { return run.finish(); };

  if (!elf_ || !buildinfo_) {
    if (!detect(target)) {
      snap.set_status(SnapshotStatus::kFailed, "not a Go binary (no Go build info)");
      return finish();
    }
  }
  const GoVersion& ver = buildinfo_->version;
  snap.runtime_version = ver.text;
  if (!ver.at_least(1, 19)) {
    snap.set_status(SnapshotStatus::kUnavailable, "unsupported Go version " + ver.text + " (need 1.19+)");
    return finish();
  }
  try {
    auto bias = exe_load_bias(*elf_, target.maps(), target.exe_fd());
    if (!bias) {
      snap.set_status(SnapshotStatus::kFailed, "cannot find the executable's mapping in /proc/PID/maps");
      return finish();
    }
    // Text start and go:func.* come from the file (symbols, or the moduledata
    // image and its relocations in stripped binaries).
    GoPclntab tab = GoPclntab::from_elf(*elf_);
    {
      // The census runs first on half the budget, so a huge goroutine count
      // cannot starve the heap read, the snapshot's main result.
      const Deadline census_deadline(opts.budget / 2);
      collect_goroutines(target, *elf_, tab, ver, *bias, opts, census_deadline, run.out);
    }
    collect_mem_accounting(target, *elf_, tab, ver, *bias, run.out);
    // The heap snapshot always; a block/mutex profile besides it on request
    // (the pprof output is then that profile's).
    const GoHeapSource live{target.memory(), target.maps(), [&target] { return target.still_same(); },
                            [&target, this] { return go_exe_mappings(target, *elf_); }};
    collect_go_heap(live, *elf_, ver, tab, *bias, opts, run, opts.want_pprof && opts.profile == ProfileKind::kHeap);
    if (opts.profile == ProfileKind::kBlock || opts.profile == ProfileKind::kMutex) {
      const auto kind = opts.profile == ProfileKind::kBlock ? GoContentionKind::kBlock : GoContentionKind::kMutex;
      GoContentionTarget in{elf_, &tab, &ver, *bias, {}};
      if (opts.want_pprof) in.mappings = go_exe_mappings(target, *elf_);
      ContentionProfile p =
          collect_go_contention(target, in, kind, opts, run.deadline, opts.want_pprof ? &run.out.pprof : nullptr);
      (kind == GoContentionKind::kBlock ? snap.block : snap.mutex) = std::move(p);
    }
  } catch (const std::exception& e) {
    snap.set_status(SnapshotStatus::kFailed, std::string("cannot decode the Go binary: ") + e.what());
  }
  return finish();
}

}  // namespace oomsnap
