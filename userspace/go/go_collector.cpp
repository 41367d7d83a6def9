#include "go/go_collector.h"

#include <elf.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_map>

#include "core/module_map.h"
#include "go/go_heap_reader.h"
#include "go/go_pclntab.h"
#include "go/go_pprof.h"
#include "go/go_stripped.h"

namespace oomsnap {
namespace {

bool is_runtime_frame(const std::string& fn) {
  return fn.rfind("runtime.", 0) == 0 || fn.rfind("internal/runtime/", 0) == 0;
}


// Aggregates the (already unsampled) buckets by raw PC stack (the stack hash),
// ranks by bytes and symbolizes only the entries that are printed, re-reading
// their PCs. Consumes rd.summaries.
void build_entries(GoHeapReadResult& rd, const GoPclntab& tab, RemoteMemory& mem, uint64_t bias,
                   size_t max_entries, Snapshot& snap) {
  auto& sums = rd.summaries;
  // Group by stack hash in place with an open-addressing table of indices
  // (linear, no sort): a stack's total goes into the first free slot of the
  // same array, which is always at or before the bucket being read.
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
  auto by_bytes = [](const GoBucketSummary& x, const GoBucketSummary& y) {
    return x.inuse_bytes != y.inuse_bytes ? x.inuse_bytes > y.inuse_bytes : x.inuse_objects > y.inuse_objects;
  };
  size_t keep = std::min(max_entries, sums.size());
  std::partial_sort(sums.begin(), sums.begin() + static_cast<std::ptrdiff_t>(keep), sums.end(), by_bytes);
  std::vector<const GoBucketSummary*> top;
  for (size_t i = 0; i < keep; ++i) top.push_back(&sums[i]);
  auto stacks = read_bucket_stacks(mem, top);
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
      auto frames = tab.symbolize_stack(tab.expand_final_inline_frame(stacks[i]));
      // Leading allocator frames are hidden as pprof hides them; a stack that
      // is runtime all the way down is kept whole (pprof does the same).
      size_t k = 0;
      while (k < frames.size() && is_runtime_frame(frames[k].function)) ++k;
      if (k == frames.size()) k = 0;
      for (size_t j = k; j < frames.size(); ++j) e.stack.push_back(frames[j].function);
      e.name = e.stack.empty() ? "?" : e.stack.front();
    }
    snap.entries.push_back(std::move(e));
  }
  snap.sort_and_truncate(max_entries);
  if (sums.size() > max_entries) snap.output_truncated = true;
}

}  // namespace

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

CaptureResult GoCollector::collect(Target& target, const CaptureOptions& opts) {
  CaptureRun run(target, "go", opts);
  Snapshot& snap = run.out.snapshot;
  const Deadline& deadline = run.deadline;
  RemoteMemory& mem = target.memory();
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
  const int minor = ver.minor;
  try {
    auto bias = exe_load_bias(*elf_, target.maps(), target.exe_fd());
    if (!bias) {
      snap.set_status(SnapshotStatus::kFailed, "cannot find the executable's mapping in /proc/PID/maps");
      return finish();
    }
    // Text start and go:func.* come from the file (symbols, or the moduledata
    // image and its relocations in stripped binaries).
    GoPclntab tab = GoPclntab::from_elf(*elf_);

    GoHeapAddrs addrs;
    auto mb = elf_->symbol("runtime.mbuckets");
    auto rate = elf_->symbol("runtime.MemProfileRate");
    if (auto cyc = elf_->symbol("runtime.mProfCycle")) addrs.mprof_cycle = cyc->value + *bias;
    if (!mb || !rate) {
      GoGlobalsRecovery rec = recover_go_globals(*elf_, tab, ver);
      if (!mb && rec.mbuckets) mb = ElfFile::Symbol{"runtime.mbuckets", *rec.mbuckets, 8, 0};
      if (!rate && rec.mem_profile_rate)
        rate = ElfFile::Symbol{"runtime.MemProfileRate", *rec.mem_profile_rate, 8, 0};
      if (!mb || !rate) {
        snap.set_status(SnapshotStatus::kUnavailable,
                        "stripped binary: cannot locate heap profile globals: " + rec.error);
        return finish();
      }
    }
    addrs.mbuckets = mb->value + *bias;
    addrs.mem_profile_rate = rate->value + *bias;

    GoHeapReadResult rd = read_go_heap(mem, target.maps(), addrs, minor, opts, deadline, opts.want_pprof);
    snap.sample_rate = rd.profile.mem_profile_rate;
    snap.set_status(rd.status, rd.reason);
    if (rd.status == SnapshotStatus::kUnavailable && rd.profile.mem_profile_rate == 0) {
      // The linker turns profiling off in programs that never reference
      // runtime.MemProfile (no runtime/pprof): say so, it is the usual cause.
      uint8_t disabled = 0;
      auto sym = elf_->symbol("runtime.disableMemoryProfiling");
      if (sym && mem.read(sym->value + *bias, &disabled, 1) && disabled)
        snap.reason += "; the binary does not use runtime/pprof, so the Go linker disabled memory profiling";
    }
    if (rd.status == SnapshotStatus::kUnavailable ||
        (rd.status == SnapshotStatus::kFailed && rd.summaries.empty()))
      return finish();
    if (!target.still_same()) {
      snap.set_status(SnapshotStatus::kFailed, "target exited or was replaced during the capture");
      return finish();
    }
    build_entries(rd, tab, mem, *bias, opts.max_entries, snap);
    if (opts.want_pprof) {
      GoPprofInput in;
      in.profile = &rd.profile;
      in.pclntab = &tab;
      in.load_bias = *bias;
      struct stat st {};
      fstat(target.exe_fd(), &st);
      for (const auto& m : target.maps()) {
        if (m.inode == st.st_ino && m.perms.find('x') != std::string::npos) {
          // The GNU build id as runtime/pprof writes it; Go-linked binaries usually
          // have none, and then the Go build id identifies the file.
          GoMapping gm{m.start, m.end, m.offset, m.path,
                       elf_->gnu_build_id().value_or(elf_->go_build_id().value_or(""))};
          in.mappings.push_back(gm);
          break;
        }
      }
      in.time_nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
      run.out.pprof = encode_go_heap_pprof(in);
    }
  } catch (const std::exception& e) {
    snap.set_status(SnapshotStatus::kFailed, std::string("cannot decode the Go binary: ") + e.what());
  }
  return finish();
}

}  // namespace oomsnap
