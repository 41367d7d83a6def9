// Benchmark (not a test): the Go heap profile's bucket walk of a live
// process, RUNS times in one process, each a whole read_go_heap as the
// capture runs it (fresh summaries every time), without the process start,
// the census and the encoding around it. Prints the median and range, and
// the reads one walk took. Two builds compare with farm-bench --vs, each
// pair of runs in turn (tools/bench-go-snapshot.sh's whole-command figures
// are too noisy on a VM to see a change of a few milliseconds in the walk).
//
// Usage: go_heap_bench PID [RUNS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/target.h"
#include "go/go_buildinfo.h"
#include "go/go_collector.h"
#include "go/go_heap_reader.h"

using namespace oomsnap;

int main(int argc, char** argv) {
  const auto args = bench::pid_and_runs(argc, argv, "PID [RUNS]");
  if (!args) return 2;
  const pid_t pid = args->pid;
  const int runs = args->runs;
  std::string error;
  // The executable only (ProcFiles holds it): no other mapped file is read.
  auto target = Target::open(pid, error, [](const Mapping&) { return false; });
  if (!target) {
    std::fprintf(stderr, "go_heap_bench: %s\n", error.c_str());
    return 1;
  }
  const ElfFile* elf = target->exe_elf();
  auto info = elf ? read_go_buildinfo(*elf) : std::nullopt;
  auto bias = elf ? exe_load_bias(*elf, target->maps(), target->exe_fd()) : std::nullopt;
  if (!info || !bias) {
    std::fprintf(stderr, "go_heap_bench: %d is not a Go program\n", pid);
    return 1;
  }
  const GoPclntab tab = GoPclntab::from_elf(*elf);
  const auto addrs = locate_go_heap(*elf, tab, info->version, *bias, error);
  if (!addrs) {
    std::fprintf(stderr, "go_heap_bench: %s\n", error.c_str());
    return 1;
  }

  std::vector<double> ms;
  uint64_t syscalls = 0, bytes = 0;
  size_t buckets = 0;
  const CaptureOptions opts;
  for (int r = 0; r < runs; ++r) {
    RemoteMemory& mem = target->memory();
    const uint64_t s0 = mem.syscalls(), b0 = mem.bytes_read();
    const auto t0 = std::chrono::steady_clock::now();
    const Deadline deadline(std::chrono::seconds(10));
    GoHeapReadResult res = read_go_heap(mem, target->maps(), *addrs, info->version.minor, opts, deadline, false);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    syscalls = mem.syscalls() - s0;
    bytes = mem.bytes_read() - b0;
    buckets = res.summaries.size();
    if (res.status != SnapshotStatus::kComplete) std::fprintf(stderr, "go_heap_bench: %s\n", res.reason.c_str());
  }
  std::printf("walk median %.2f ms (min %.2f, max %.2f, %d runs); %zu buckets, %llu read syscalls, %.1f MB read\n",
              bench::median(ms), *std::min_element(ms.begin(), ms.end()), *std::max_element(ms.begin(), ms.end()), runs,
              buckets, static_cast<unsigned long long>(syscalls), static_cast<double>(bytes) / 1e6);
  return 0;
}
