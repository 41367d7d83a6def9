#include "capture/capture.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/pagemap_residency.h"
#include "core/pagemap_scan.h"
#include "core/smaps_breakdown.h"
#include "core/tmpfs_files.h"
#include "go/go_collector.h"
#include "java/java_collector.h"
#include "node/node_collector.h"
#include "python/python_collector.h"

namespace oomsnap {
namespace {

// The most the breakdown's read may take of the budget: ~45 ms of kernel
// time writes the 16 MiB of smaps SmapsLimits allows.
constexpr std::chrono::milliseconds kSmapsBudget{250};
// The tmpfs walk: ~4 µs an entry in the capture process (readdir and a
// stat), so 100 ms covers ~25,000 files; a larger tree is cut with a reason
// (200,000 files: cut at 23,000-26,000, the capture 100 ms longer).
constexpr std::chrono::milliseconds kTmpfsWalkBudget{100};
// What the collector leaves it of the budget (a quarter of a smaller one):
// smaps of 10,000 mappings takes ~25 ms on a quiet machine, the page scan
// about half of that (docs/benchmarks.md).
constexpr std::chrono::milliseconds kBreakdownReserve{50};

// Gone: no /proc entry, a zombie, or another process under the same pid.
bool target_gone(const ProcFiles& proc, const ProcessIdentity& id) {
  auto now = read_identity(proc);
  return !now || now->start_time_ticks != id.start_time_ticks || now->exited();
}

// A process that grew (or shrank) while its mappings were read, a leak
// racing the kill above all (smaps of it took 210 ms in the v2 guest's
// emulated CPU): the status counters read after the read replace those read
// before it when the kinds' sum lies nearer to them, so that the record's
// RSS is of the moment its kinds were counted.
void keep_counters_nearest_the_read(const ProcFiles& proc, ProcessMemory& m) {
  if (!m.breakdown || !m.rss_bytes) return;
  ProcessMemory after = read_process_memory(proc);
  if (!after.rss_bytes) return;
  const uint64_t sum = m.breakdown->total();
  auto off = [sum](uint64_t rss) { return sum > rss ? sum - rss : rss - sum; };
  if (off(*after.rss_bytes) >= off(*m.rss_bytes)) return;
  after.breakdown = std::move(m.breakdown);
  m = std::move(after);
}

}  // namespace

std::vector<std::unique_ptr<Collector>> make_collectors() {
  std::vector<std::unique_ptr<Collector>> v;
  v.push_back(std::make_unique<GoCollector>());
  v.push_back(std::make_unique<PythonCollector>());
  v.push_back(std::make_unique<JavaCollector>());
  v.push_back(std::make_unique<NodeCollector>());
  return v;
}

std::unique_ptr<Target> open_capture_target(pid_t pid, std::string& error) {
  const auto collectors = make_collectors();
  return Target::open(pid, error, [&collectors](const Mapping& m) {
    return std::any_of(collectors.begin(), collectors.end(), [&m](const auto& c) { return c->reads_mapped_file(m); });
  });
}

void mark_target_exited(Snapshot& s) {
  static const std::string kExited = "target exited during the capture";
  if (s.status == SnapshotStatus::kComplete) return;  // everything was read before it went
  if (s.reason.find("exited") != std::string::npos) {
    if (s.status == SnapshotStatus::kUnavailable) s.status = SnapshotStatus::kFailed;
    return;
  }
  if (s.status == SnapshotStatus::kUnavailable) s.status = SnapshotStatus::kFailed;
  s.reason = s.reason.empty() ? kExited : kExited + " (" + s.reason + ")";
}

std::optional<CaptureRecord> capture_process(pid_t pid, const CaptureOptions& options, std::string& error) {
  auto target = open_capture_target(pid, error);
  if (!target) return std::nullopt;
  return capture_target(*target, options);
}

CaptureRecord capture_target(Target& target, const CaptureOptions& options) {
  const ProcFiles& proc = target.proc();
  if (options.progress) target.memory().set_read_watch(&options.progress->read);
  target.memory().set_skip(options.skip_ranges);
  CaptureRecord rec;
  rec.identity = target.identity();
  // Read now as well, so that a target gone by the breakdown still has its
  // counters; read again right before the breakdown, which it is held to.
  rec.process_memory = read_process_memory(proc);
  // The heap first: the breakdown (a page walk of the whole address space)
  // is read after the collector, so that it does not delay the heap read
  // the capture is for.
  using Clock = std::chrono::steady_clock;
  const auto capture_start = Clock::now();
  const auto capture_end = capture_start + options.budget;
  // The collector leaves the breakdown a share of the budget, so that the
  // capture as a whole still ends by it (the capture process's watchdog
  // counts from the request).
  const auto breakdown_share = std::min(options.budget / 4, kBreakdownReserve);
  CaptureOptions collect_options = options;
  collect_options.budget = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(options.budget - breakdown_share),
                                    std::chrono::milliseconds(1));
  bool detected = false;
  for (auto& c : make_collectors()) {
    if (c->detect(target)) {
      if (options.progress) options.progress->language.store(c->language(), std::memory_order_release);
      rec.result = c->collect(target, collect_options);
      detected = true;
      break;
    }
  }
  if (!detected) {
    rec.result.language = "unknown";
    std::string why = "no collector recognises this process's runtime (supported: Go, CPython, HotSpot Java, Node.js)";
    // A Go binary the ELF reader refused (a limit, a crafted header) is not
    // "some other runtime": say what stopped the reading.
    if (!target.exe_elf_error().empty()) why += "; the executable was not read: " + target.exe_elf_error();
    rec.result.snapshot.set_status(SnapshotStatus::kUnavailable, why);
  }
  target.memory().set_read_watch(nullptr);
  if (options.progress)
    options.progress->collector_done_ns.store(Clock::now().time_since_epoch().count(), std::memory_order_release);
  const auto build_start = Clock::now();
  if (options.progress)
    options.progress->breakdown_started_ns.store(build_start.time_since_epoch().count(), std::memory_order_release);
  // The status counters right before the mappings they are compared with
  // (when the target is still there to read).
  if (ProcessMemory now = read_process_memory(proc); now.rss_bytes) rec.process_memory = std::move(now);
  SmapsLimits limits;
  // What is left of the budget, at least its share and at most kSmapsBudget.
  limits.deadline = build_start + std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(capture_end - build_start),
                                             std::chrono::milliseconds(breakdown_share), kSmapsBudget);
  // The mount table once, for the tmpfs devices here and the walk below.
  const MountInfoText mountinfo = read_mountinfo(proc, limits.deadline);
  const SmapsRead read = read_resident_by_mapping(proc, limits, rec.process_memory, tmpfs_devices_of(mountinfo),
                                                 BreakdownSource::kAuto, {}, target.maps_text());
  // What of the claimed ranges is resident (a grown goroutine stack is
  // seldom touched whole).
  std::optional<PagemapResidency> pagemap;
  if (!rec.result.memory_claims.empty())
    pagemap.emplace(proc, PagemapResidency::kDefaultMaxPages, std::min(build_start + kSmapsBudget, capture_end));
  rec.process_memory.breakdown = build_breakdown(
      read, rec.result.memory_claims, rec.process_memory, [&](uint64_t start, uint64_t end) -> std::optional<uint64_t> {
        if (!pagemap) return std::nullopt;
        return pagemap->resident_anon(start, end);
      });
  if (const std::string& why = rec.result.memory_claims_reason; !why.empty()) {
    std::string& reason = rec.process_memory.breakdown->reason;
    reason += (reason.empty() ? "" : "; ") + why;
  }
  keep_counters_nearest_the_read(proc, rec.process_memory);
  rec.process_memory.breakdown->duration_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - build_start).count();
  // The files of its tmpfs mounts, mapped or not (what a container's
  // emptyDir of medium Memory or /dev/shm holds), within what is left; its
  // time is its own (a huge tmpfs is not the breakdown's cost).
  TmpfsScanLimits tmpfs_limits;
  tmpfs_limits.deadline = std::min(capture_end, Clock::now() + kTmpfsWalkBudget);
  rec.process_memory.breakdown->tmpfs = scan_tmpfs_files(proc, mountinfo, tmpfs_limits);
  if (target_gone(proc, rec.identity)) mark_target_exited(rec.result.snapshot);
  return rec;
}

}  // namespace oomsnap
