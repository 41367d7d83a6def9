// Benchmark (not a test): the memory breakdown of a live process counted
// both ways, smaps and maps + PAGEMAP_SCAN, in turn (A B A B ...) in one run,
// each timed from the mount table's read to the built breakdown, as the
// capture process does it. Prints the medians side by side, the ranges, and
// how far each way's kinds sum from VmRSS. tools/bench-breakdown.sh runs it.
//
// Usage: breakdown_bench PID [RUNS [WAY]]   WAY: smaps, scan, known or
// known-file, only that one (for a profiler)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/pagemap_scan.h"
#include "core/proc_info.h"

using namespace oomsnap;

namespace {

struct Way {
  const char* name;
  BreakdownSource source;
  std::vector<double> ms;
  std::string used, reason;
  double off_pct = 0;
  uint64_t mappings = 0;
  PagemapScanLimits scan{};
};

}  // namespace

int main(int argc, char** argv) {
  const auto args = bench::pid_and_runs(argc, argv, "PID [RUNS [smaps|scan|known|known-file]]");
  if (!args) return 2;
  const pid_t pid = args->pid;
  const int runs = args->runs;
  const std::string only = argc > 3 ? argv[3] : "";
  std::vector<Way> ways;
  auto wanted = [&](const char* way) { return only.empty() || only == way; };
  if (wanted("smaps")) ways.push_back({"smaps", BreakdownSource::kSmaps, {}, {}, {}, 0, 0});
  if (wanted("scan")) ways.push_back({"maps + PAGEMAP_SCAN", BreakdownSource::kAuto, {}, {}, {}, 0, 0});
  // As the capture does it: the maps text read before (at Target::open),
  // untimed, so only its parse, the scan and its staleness check count.
  if (wanted("known")) ways.push_back({"maps read before + PAGEMAP_SCAN", BreakdownSource::kAuto, {}, {}, {}, 0, 0});
  // The same, asking PAGE_IS_FILE of every page (before it was left out in
  // long runs of private anonymous mappings).
  if (wanted("known-file")) {
    ways.push_back({"maps read before + PAGEMAP_SCAN, file asked everywhere", BreakdownSource::kAuto, {}, {}, {}, 0, 0});
    ways.back().scan.file_everywhere = true;
  }
  for (int i = 0; i < runs + 1; ++i) {  // the first round warms up
    for (Way& w : ways) {
      const ProcessMemory status = read_process_memory(pid);
      std::string known_maps;
      const bool known = std::string(w.name).rfind("maps read before", 0) == 0;
      if (known) read_text_file("/proc/" + std::to_string(pid) + "/maps", known_maps);
      const auto start = std::chrono::steady_clock::now();
      SmapsLimits limits;
      limits.deadline = start + std::chrono::milliseconds(250);
      const SmapsRead read = read_resident_by_mapping(ProcFiles(pid), limits, status, read_tmpfs_devices(ProcFiles(pid), limits.deadline),
                                                      w.source, w.scan, known_maps);
      const MemoryBreakdown b = build_breakdown(read, {}, status);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (i == 0) continue;
      w.ms.push_back(ms);
      w.used = read.source;
      w.reason = b.reason;
      w.mappings = b.mappings;
      if (status.rss_bytes && *status.rss_bytes)
        w.off_pct = 100.0 * (static_cast<double>(b.total()) - static_cast<double>(*status.rss_bytes)) /
                    static_cast<double>(*status.rss_bytes);
    }
  }
  std::printf("| way (source) | mappings | median | min .. max | kinds sum - VmRSS (last) |\n");
  std::printf("| --- | --- | --- | --- | --- |\n");
  for (const Way& w : ways) {
    const auto [lo, hi] = std::minmax_element(w.ms.begin(), w.ms.end());
    std::printf("| %s (%s) | %llu | %.2f ms | %.2f .. %.2f ms | %+.3f %% |\n", w.name, w.used.c_str(),
                static_cast<unsigned long long>(w.mappings), bench::median(w.ms), *lo, *hi, w.off_pct);
    if (!w.reason.empty()) std::printf("  %s: %s\n", w.name, w.reason.c_str());
  }
  std::printf("runs: %d of each, alternating\n", runs);
  return 0;
}
