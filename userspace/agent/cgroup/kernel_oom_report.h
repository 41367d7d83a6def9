// The kernel's own OOM report, as /dev/kmsg carries it (issue #24): the
// memcg's usage and limit, its memory.stat and the task list, printed while
// the OOM killer holds the memcg, before the victim dies. It is the exact
// pre-kill view that a record of a kill without a snapshot lacks: memory.stat
// read after the kill races the victim's exit.
//
// A report on 6.x (older kernels print fewer task columns; the header names
// them, so columns are found by name):
//   <comm> invoked oom-killer: gfp_mask=..., order=0, oom_score_adj=0
//   (stack dump)
//   memory: usage 32768kB, limit 32768kB, failcnt 71
//   memory+swap: usage ...   (v1)   swap: usage ...   (v2)
//   kmem: usage 204kB, ...   (v1)
//   Memory cgroup stats for /path:
//   <memory.stat, one "key value" record per line>
//   Tasks state (memory values in pages):
//   [  pid  ]   uid  tgid total_vm      rss rss_anon rss_file rss_shmem pgtables_bytes swapents oom_score_adj name
//   [  21308]     0 21308    20526     9782     8064     1718         0   135168        0             0 python3
//   oom-kill:constraint=CONSTRAINT_MEMCG,...,oom_memcg=/path,task_memcg=/path,task=python3,pid=21308,uid=0
//
// Only records of the kernel facility count: a local user may write to
// /dev/kmsg, but the kernel files every such line under the user facility.
// Before 6.3 memory.stat came as one record, its lines joined by newlines
// (escaped "\x0a" in /dev/kmsg); both forms are read.
// Bounded: lines are cut at kMaxLine, a report keeps at most kMaxStatLines
// of memory.stat and its kMaxTasks largest tasks (the rest summed), a report
// not finished within kMaxReportLines records is dropped, and at most
// kMaxReports finished ones are kept.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "agent/cgroup/memory_stat.h"

namespace oomsnap {

// One line of the report's task list; memory in pages as the kernel prints it.
struct KernelOomTask {
  pid_t pid = 0;
  pid_t tgid = 0;
  uint32_t uid = 0;
  uint64_t total_vm_pages = 0;
  uint64_t rss_pages = 0;
  std::optional<uint64_t> rss_anon_pages, rss_file_pages, rss_shmem_pages;  // 6.x columns
  uint64_t pgtables_bytes = 0;
  uint64_t swap_entries = 0;
  int oom_score_adj = 0;
  std::string name;
};

struct KernelOomReport {
  uint64_t first_seq = 0;        // kmsg sequence number of the "invoked oom-killer" line
  uint64_t kernel_us = 0;        // its kmsg timestamp (µs since boot)
  std::string invoker;           // the task that ran the OOM killer
  std::optional<uint64_t> usage_bytes, limit_bytes;  // "memory: usage ..kB, limit ..kB"
  std::optional<uint64_t> memsw_usage_bytes;          // v1 "memory+swap: usage"
  std::optional<uint64_t> swap_usage_bytes;           // v2 "swap: usage"
  std::optional<uint64_t> kmem_usage_bytes;           // v1 "kmem: usage"
  std::string stat_memcg;        // "Memory cgroup stats for <path>:"
  std::string stat_text;         // the memory.stat lines, '\n'-separated, as memory.stat reads
  bool stat_cut = false;         // more than kMaxStatLines
  MemoryStat memory_stat;        // stat_text parsed once, when the report ends (report_memory_stat)
  std::vector<KernelOomTask> tasks;  // the largest kMaxTasks by rss, largest first
  size_t tasks_total = 0;            // task lines in the report
  KernelOomTask tasks_rest;          // the tasks past `tasks`, summed (pid 0)
  std::string constraint, oom_memcg, task_memcg, victim_comm;
  pid_t victim_pid = 0;          // from the oom-kill line; 0 until it came
};

// The report's memory.stat in the vocabulary of memory_stat.h (v1 or v2,
// told by its keys; v1's kernel memory from the "kmem:" line), with the
// report's usage.
MemoryStat report_memory_stat(const KernelOomReport& r);

// The record's oom_kill.kernel_report: the figures in bytes.
nlohmann::json to_json(const KernelOomReport& r, uint64_t page_size);

class KernelOomReports {
 public:
  static constexpr size_t kMaxLine = 8192;  // a kmsg record's most (CONSOLE_EXT_LOG_MAX)
  static constexpr size_t kMaxStatLines = 256;
  static constexpr size_t kMaxTasks = 32;  // as many as a record lists of a container's tasks
  static constexpr size_t kMaxReportLines = 8192;
  static constexpr size_t kMaxReports = 16;

  // One /dev/kmsg record, "prio,seq,usec,flags;text" (the dictionary lines
  // after the first '\n' are ignored).
  void feed(std::string_view record);
  // One record's parts, as syslog(2) gives them too (seq 0 there): lines of
  // another facility than the kernel's are dropped, text is cut at kMaxLine.
  void feed_text(uint32_t prio, uint64_t seq, uint64_t usec, std::string_view text);

  // The finished report whose victim is `pid`, printed within `window_us`
  // of `kernel_us` (pids are reused); newest first.
  const KernelOomReport* find(pid_t pid, uint64_t kernel_us, uint64_t window_us) const;
  size_t finished() const { return done_.size(); }

 private:
  enum class Section { kHeader, kStats, kTasks };
  struct TaskColumns {
    std::vector<std::string> names;  // from the header, "[ pid ]" as "pid"
  };
  void line(uint64_t seq, uint64_t usec, std::string_view text, bool cut);
  void task_line(std::string_view text);
  void finish(std::string_view oom_kill_line);

  std::optional<KernelOomReport> open_;
  Section section_ = Section::kHeader;
  size_t open_lines_ = 0, stat_lines_ = 0;
  TaskColumns columns_;
  std::deque<KernelOomReport> done_;
};

}  // namespace oomsnap
