// Where the container's charge went (issue #24 item 3): the record's
// `container.explained`, the bytes of the memcg's usage it can name (the
// processes' RSS by kind, tmpfs no process maps, page cache, kernel memory)
// and what is left. Pure: built from what the collection already read.
//
// The arithmetic, so that no byte is counted twice. The memcg's charge is
// anon + file + kernel (memory.stat; file holds shmem). Each class is split
// between what the processes map and what only the memcg knows of:
//   anon   the processes' anonymous kinds (heap, heap_free, runtime, stacks,
//          native from a breakdown; `anon` for a process known only by its
//          /proc/PID/status RssAnon);
//   shmem  the processes' mapped shmem, and `tmpfs`: memory.stat shmem
//          beyond it (tmpfs and /dev/shm files, memfds no process maps);
//   file   the processes' mapped files, and `page_cache`: memory.stat file
//          beyond its shmem and beyond the mapped files;
//   kernel memory.stat kernel.
// A page mapped by several processes is in each one's RSS (shared libraries,
// forked copy-on-write heaps), and a page one maps may be charged to another
// cgroup, so the processes' sum of a class can exceed the memcg's own count
// of it (anon; shmem; file_mapped for mapped files). Then the class's kinds
// are scaled down to that count, as PSS shares a page between its mappers,
// and `shared_bytes` says how much was taken off: the page cache and tmpfs
// are what the memcg holds beyond the processes' share, never less than 0.
// memory.stat folds its per-CPU counters in batches and at least every 2 s,
// while the usage is exact: a process growing fast (the very case at OOM
// time) is charged in the usage seconds before memory.stat counts it (an
// 120 MiB Go heap missing from v1's anon was seen). When anon + file +
// kernel fall short of the usage, the difference is charge of a class not
// known: anon and shmem (in that order; where a growing process's and a
// tmpfs writer's pages go) may hold that much more between them before they
// are scaled, and a note says by how much. Mapped files keep their cap:
// what passes it is mostly pages charged to another cgroup (shared
// libraries), and more of it would only be taken from the page cache. `unexplained_bytes` is the usage minus the parts (never
// negative); parts above the usage are `over_bytes`.
#pragma once
#include <sys/types.h>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "agent/cgroup/kernel_oom_report.h"
#include "agent/cgroup/memory_stat.h"
#include "core/proc_info.h"

namespace oomsnap {

struct Incident;

// The kinds of the container's charge, in the order the record, `oomsnap
// show` and the metrics list them.
enum class ChargeKind : uint8_t {
  kHeap, kHeapFree, kRuntime, kStacks, kNative,  // the breakdown's anonymous kinds
  kAnon,                                          // anonymous RSS of a process without a breakdown
  kFile, kShmem,                                  // mapped files, mapped shmem
  kTmpfs, kPageCache, kKernel,                    // what only memory.stat knows of
};
inline constexpr size_t kChargeKinds = 11;
// "heap", "heap_free", "runtime", "stacks", "native", "anon", "file",
// "shmem", "tmpfs", "page_cache", "kernel".
const char* charge_kind_name(ChargeKind k);

// One process of the container as the collection saw it: its breakdown when
// the capture process built one, else its /proc/PID/status memory.
struct ProcessCharge {
  pid_t pid = 0;       // 0 for the sum of several (count)
  uint32_t count = 1;  // processes summed in `memory`
  const MemoryBreakdown* breakdown = nullptr;  // not owned; null or "failed": by memory
  ProcessMemory memory;                        // breakdown is not read from here
};

struct ExplainedMemory {
  std::optional<uint64_t> usage_bytes;  // what the parts are measured against
  // Bytes per ChargeKind; absent when its source is missing (tmpfs,
  // page_cache and kernel without memory.stat).
  std::array<std::optional<uint64_t>, kChargeKinds> bytes{};
  uint64_t explained_bytes = 0;    // the parts, at most the usage
  uint64_t unexplained_bytes = 0;  // the usage minus the parts, never negative
  uint64_t over_bytes = 0;         // the parts beyond the usage
  uint64_t shared_bytes = 0;       // the processes' RSS beyond what the memcg charges for it
  uint32_t processes_by_breakdown = 0, processes_by_rss = 0;
  std::vector<std::string> notes;  // missing pieces, in words
  // The files on the tmpfs mounts a captured process sees (the victim's
  // first), largest first: which files the `tmpfs` kind is.
  std::optional<TmpfsFiles> tmpfs_files;
  // Where the figures come from: "collection" (what the agent and the
  // capture read) or "kernel_oom_report" (the kernel's report of the kill).
  std::string source = "collection";

  uint64_t at(ChargeKind k) const { return bytes[static_cast<size_t>(k)].value_or(0); }
  uint64_t parts() const;
};

// Pure: the arithmetic above. `usage` is the memcg's usage read with
// `stat` (memory.current / memory.usage_in_bytes); without it, the record's
// usage; without either, anon + file + kernel of `stat`. A `stat` with an
// error counts as missing.
ExplainedMemory explain_memory(std::optional<uint64_t> usage, const std::optional<MemoryStat>& stat,
                               const std::vector<ProcessCharge>& processes);

// The kernel's report of a kill, for explain_memory: its usage, its
// memory.stat (v1 or v2, told by its keys; v1's kernel memory from its
// "kmem:" line) and its tasks by their anon/file/shmem RSS (rss as anon on
// kernels that print no split), the tasks past the kept ones as one sum.
ExplainedMemory explain_kernel_report(const KernelOomReport& r, uint64_t page_size);

// The incident's pieces for explain_memory: the victim and the other
// captured processes by their breakdown (or /proc memory when the capture
// gave none), the container's other listed tasks and the unlisted rest by
// their RSS. A kill with no capture before it is explained by the kernel's
// report of it when there is one (the exact pre-kill view). nullopt when
// neither the collection nor the kernel said anything of the container.
std::optional<ExplainedMemory> explain_incident(const Incident& inc);

// {"usage_bytes", "explained_bytes", "unexplained_bytes", "kinds": {...},
//  "shared_bytes"?, "over_bytes"?, "processes_by_breakdown",
//  "processes_by_rss", "notes"?, "tmpfs_files"?}
nlohmann::json to_json(const ExplainedMemory& e);

}  // namespace oomsnap
