#include "capture/capture.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/pagemap_residency.h"
#include "core/smaps_breakdown.h"
#include "go/go_collector.h"
#include "java/java_collector.h"
#include "python/python_collector.h"

namespace oomsnap {
namespace {

// The most the smaps read may take of the budget: ~45 ms of kernel time
// writes the 16 MiB SmapsLimits allows.
constexpr std::chrono::milliseconds kSmapsBudget{250};

// Gone: no /proc entry, a zombie, or another process under the same pid.
bool target_gone(const ProcessIdentity& id) {
  auto now = read_identity(id.pid);
  return !now || now->start_time_ticks != id.start_time_ticks || now->exited();
}

}  // namespace

std::vector<std::unique_ptr<Collector>> make_collectors() {
  std::vector<std::unique_ptr<Collector>> v;
  v.push_back(std::make_unique<GoCollector>());
  v.push_back(std::make_unique<PythonCollector>());
  v.push_back(std::make_unique<JavaCollector>());
  return v;
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
  auto target = Target::open(pid, error);
  if (!target) return std::nullopt;
  if (options.progress) target->memory().set_read_watch(&options.progress->read);
  target->memory().set_skip(options.skip_ranges);
  CaptureRecord rec;
  rec.identity = target->identity();
  rec.process_memory = read_process_memory(pid);
  // Right after the status counters it is compared with; the runtime's
  // claims are applied once the collector has read them.
  using Clock = std::chrono::steady_clock;
  const auto smaps_start = Clock::now();
  SmapsLimits smaps_limits;
  smaps_limits.deadline = smaps_start + std::min(options.budget / 4, kSmapsBudget);
  const SmapsRead smaps = read_smaps(pid, smaps_limits);
  const auto smaps_read_time = Clock::now() - smaps_start;
  // The collector has what is left of the budget, so that the capture as a
  // whole still ends by it (the capture process's watchdog counts from the
  // request).
  const auto capture_end = smaps_start + options.budget;
  CaptureOptions collect_options = options;
  collect_options.budget =
      std::max(std::chrono::duration_cast<std::chrono::milliseconds>(options.budget - smaps_read_time),
               std::chrono::milliseconds(1));
  bool detected = false;
  for (auto& c : make_collectors()) {
    if (c->detect(*target)) {
      if (options.progress) options.progress->language.store(c->language(), std::memory_order_release);
      rec.result = c->collect(*target, collect_options);
      detected = true;
      break;
    }
  }
  if (!detected) {
    rec.result.language = "unknown";
    std::string why = "no collector recognises this process's runtime (supported: Go, CPython, HotSpot Java)";
    // A Go binary the ELF reader refused (a limit, a crafted header) is not
    // "some other runtime": say what stopped the reading.
    if (!target->exe_elf_error().empty()) why += "; the executable was not read: " + target->exe_elf_error();
    rec.result.snapshot.set_status(SnapshotStatus::kUnavailable, why);
  }
  target->memory().set_read_watch(nullptr);
  const auto build_start = Clock::now();
  // What of the claimed ranges is resident (a grown goroutine stack is
  // seldom touched whole).
  std::optional<PagemapResidency> pagemap;
  if (!rec.result.memory_claims.empty())
    pagemap.emplace(pid, PagemapResidency::kDefaultMaxPages, std::min(build_start + kSmapsBudget, capture_end));
  rec.process_memory.breakdown = build_breakdown(
      smaps, rec.result.memory_claims, rec.process_memory, [&](uint64_t start, uint64_t end) -> std::optional<uint64_t> {
        if (!pagemap) return std::nullopt;
        return pagemap->resident_anon(start, end);
      });
  if (const std::string& note = rec.result.memory_claims_note; !note.empty()) {
    std::string& reason = rec.process_memory.breakdown->reason;
    reason = reason.empty() ? note : reason + "; " + note;
  }
  rec.process_memory.breakdown->duration_ms =
      std::chrono::duration<double, std::milli>(smaps_read_time + (Clock::now() - build_start)).count();
  if (target_gone(rec.identity)) mark_target_exited(rec.result.snapshot);
  return rec;
}

}  // namespace oomsnap
