#include "go/go_last_gasp.h"

#include <algorithm>

#include "go/go_bucket_walk.h"
#include "go/go_collector.h"
#include "go/go_heap_reader.h"
#include "go/go_pclntab.h"

namespace oomsnap {
namespace {

// bpf/last_gasp_events.h's OOMSNAP_LG_MAX_STACK: the program copies no more
// PCs of one bucket.
constexpr uint32_t kMaxLastGaspStack = 256;

}  // namespace

std::optional<GoLastGaspPlan> plan_go_last_gasp(Target& target, const CaptureOptions& opts, std::string& why) {
  const ElfFile* elf = target.exe_elf();
  if (!elf) {
    why = "cannot read the executable: " + target.exe_elf_error();
    return std::nullopt;
  }
  try {
    auto info = read_go_buildinfo(*elf);
    if (!info) {
      why = "not a Go binary (no Go build info)";
      return std::nullopt;
    }
    if (!info->version.at_least(1, 19)) {
      why = "unsupported Go version " + info->version.text + " (need 1.19+)";
      return std::nullopt;
    }
    auto bias = exe_load_bias(*elf, target.maps(), target.exe_fd());
    if (!bias) {
      why = "cannot find the executable's mapping in /proc/PID/maps";
      return std::nullopt;
    }
    GoPclntab tab = GoPclntab::from_elf(*elf);
    auto addrs = locate_go_heap(*elf, tab, info->version, *bias, why);
    if (!addrs) return std::nullopt;
    GoLastGaspPlan plan;
    plan.version = info->version;
    plan.load_bias = *bias;
    plan.mappings = go_exe_mappings(target, *elf);
    plan.arm.mbuckets = addrs->mbuckets;
    plan.arm.mem_profile_rate = addrs->mem_profile_rate;
    plan.arm.mprof_cycle = addrs->mprof_cycle.value_or(0);
    plan.arm.record_bytes = static_cast<uint32_t>(go_bucket_size(info->version.minor, 0) - kGoBucketHeaderSize);
    // The live reader's depth rule (1.26+ stores two allocator frames extra).
    plan.arm.max_stack = static_cast<uint32_t>(std::min<size_t>(opts.max_stack_depth + 2, kMaxLastGaspStack));
    return plan;
  } catch (const std::exception& e) {
    why = std::string("cannot decode the Go binary: ") + e.what();
    return std::nullopt;
  }
}

CaptureResult go_last_gasp_snapshot(const LastGaspWalk& walk, const GoLastGaspPlan& plan, const ElfFile& elf,
                                    const CaptureOptions& opts) {
  RemoteMemory mem{std::shared_ptr<const MemoryImage>(walk.image)};
  CaptureRun run(mem, "go", opts);
  Snapshot& snap = run.out.snapshot;
  snap.source = "last_gasp";
  snap.runtime_version = plan.version.text;
  GoroutineCensus census;
  census.status = SnapshotStatus::kUnavailable;
  census.reason = "not read: the last gasp reads the heap profile only";
  snap.goroutines = std::move(census);
  try {
    GoPclntab tab = GoPclntab::from_elf(elf);
    const std::vector<Mapping> no_maps;  // exact reads: the image holds each bucket as one piece
    const GoHeapSource image{mem, no_maps, {}, [&plan] { return plan.mappings; }};
    collect_go_heap(image, elf, plan.version, tab, plan.load_bias, opts, run, opts.want_pprof);
  } catch (const std::exception& e) {
    snap.set_status(SnapshotStatus::kFailed, std::string("cannot decode the Go binary: ") + e.what());
    return run.finish();
  }
  // The walk's own end says why the list stopped where the image does.
  if (walk.status != SnapshotStatus::kComplete) {
    if (snap.status == SnapshotStatus::kComplete || snap.status == SnapshotStatus::kPartial)
      snap.set_status(snap.entries.empty() && walk.status == SnapshotStatus::kFailed ? SnapshotStatus::kFailed
                                                                                     : SnapshotStatus::kPartial,
                      "last gasp: " + walk.reason);
    else
      snap.reason += "; last gasp: " + walk.reason;
  }
  // Said after the status, which may replace the reason.
  if (walk.zero_tails)
    snap.reason += (snap.reason.empty() ? "" : "; ") + std::string("last gasp: ") + std::to_string(walk.zero_tails) +
                   " bucket(s) had counters in a page not present at the kill (never written, or swapped out), "
                   "read as zeros";
  return run.finish();
}

}  // namespace oomsnap
