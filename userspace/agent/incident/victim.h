// Which process in a container the kernel's OOM killer would pick: the same
// badness heuristic (mm/oom_kill.c oom_badness), computed from /proc so the
// agent can name the likely victim before the kill happens.
#pragma once
#include <sys/types.h>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/proc_info.h"

namespace oomsnap {

struct VictimCandidate {
  pid_t pid = 0;
  uint64_t start_time_ticks = 0;  // with pid, identifies the process across pid reuse
  std::string comm;
  int oom_score_adj = 0;          // -1000..1000; -1000 = never killed
  int64_t score_pages = 0;        // filled in by pick_victim
  ProcessMemory memory;
};

// Badness in pages: RSS + swap + page tables, plus oom_score_adj thousandths
// of the container limit. nullopt when the kernel would never pick it
// (oom_score_adj -1000, or no mm: kernel thread / zombie).
std::optional<int64_t> badness_pages(const VictimCandidate& c, uint64_t limit_bytes);

// Pure: the candidate with the highest badness; ties go to the larger RSS,
// then the lower pid. limit_bytes is the container's memory limit (pass total
// RAM for an unlimited container, as the kernel does). The returned candidate
// has score_pages set.
std::optional<VictimCandidate> pick_victim(std::vector<VictimCandidate> cands, uint64_t limit_bytes);

// Pure: every candidate the kernel could pick, in the order it would pick
// them (pick_victim's order), score_pages set; the unkillable left out.
std::vector<VictimCandidate> rank_victims(std::vector<VictimCandidate> cands, uint64_t limit_bytes);

// Pure: the n candidates with the largest RSS (then the lower pid), as the
// kernel's OOM report lists a memcg's tasks (rss, swap, page tables,
// oom_score_adj), the unkillable among them.
std::vector<VictimCandidate> largest_tasks(std::vector<VictimCandidate> cands, size_t n);

// How much of a container the victim scan may read. Each process costs four
// /proc reads on the agent's serial worker, outside any capture budget, so a
// container with 100,000 processes would hold the worker for seconds.
struct ScanLimits {
  size_t max_processes = 10000;
  std::chrono::milliseconds max_time{1000};
};

// What a scan read, and why it stopped early (empty when it read every pid).
struct CandidateScan {
  std::vector<VictimCandidate> candidates;
  size_t pids_read = 0;  // pids tried (gone ones included)
  std::string cut;       // e.g. "read 10000 of 100000 processes (the limit of 10000)"
};

// Live: reads identity, /proc/PID/status and /proc/PID/oom_score_adj, in the
// order given, until `limits` stop it. Pids that vanish (or are reused) while
// being read are left out, not reported as errors.
CandidateScan read_candidates(const std::vector<pid_t>& pids, const ScanLimits& limits = {});

// Parses the text of /proc/PID/oom_score_adj; nullopt unless -1000..1000.
std::optional<int> parse_oom_score_adj(const std::string& text);

}  // namespace oomsnap
