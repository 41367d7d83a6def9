#include "agent/incident/victim.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <tuple>

namespace oomsnap {

namespace {

constexpr int kOomScoreAdjMin = -1000;  // OOM_SCORE_ADJ_MIN: exempt from the OOM killer
constexpr int kOomScoreAdjMax = 1000;

uint64_t page_size() {
  long ps = sysconf(_SC_PAGESIZE);
  return ps > 0 ? static_cast<uint64_t>(ps) : 4096;
}

}  // namespace

std::optional<int> parse_oom_score_adj(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || errno != 0) return std::nullopt;
  while (*end == '\n' || *end == ' ') ++end;
  if (*end != '\0' || v < kOomScoreAdjMin || v > kOomScoreAdjMax) return std::nullopt;
  return static_cast<int>(v);
}

std::optional<int64_t> badness_pages(const VictimCandidate& c, uint64_t limit_bytes) {
  if (c.oom_score_adj <= kOomScoreAdjMin) return std::nullopt;
  // Kernel threads and zombies have no mm and hence no VmRSS line; the kernel
  // skips them too.
  if (!c.memory.rss_bytes) return std::nullopt;
  const uint64_t ps = page_size();
  // A missing VmSwap/VmPTE (e.g. no swap configured) counts as zero.
  uint64_t bytes = *c.memory.rss_bytes + c.memory.swap_bytes.value_or(0) +
                   c.memory.page_table_bytes.value_or(0);
  auto points = static_cast<int64_t>(bytes / ps);
  // limit/ps < 2^52, times |adj| <= 1000 stays below 2^62: no overflow.
  auto limit_pages = static_cast<int64_t>(limit_bytes / ps);
  points += static_cast<int64_t>(c.oom_score_adj) * limit_pages / 1000;
  return points;
}

std::vector<VictimCandidate> rank_victims(std::vector<VictimCandidate> cands, uint64_t limit_bytes) {
  std::vector<VictimCandidate> ranked;
  ranked.reserve(cands.size());
  for (auto& c : cands) {
    auto score = badness_pages(c, limit_bytes);
    if (!score) continue;
    c.score_pages = *score;
    ranked.push_back(std::move(c));
  }
  // Higher score first, then larger RSS, then lower pid (deterministic).
  auto key = [](const VictimCandidate& v) {
    return std::make_tuple(v.score_pages, v.memory.rss_bytes.value_or(0), -static_cast<int64_t>(v.pid));
  };
  std::sort(ranked.begin(), ranked.end(),
            [&](const VictimCandidate& a, const VictimCandidate& b) { return key(a) > key(b); });
  return ranked;
}

std::vector<VictimCandidate> largest_tasks(std::vector<VictimCandidate> cands, size_t n) {
  auto larger = [](const VictimCandidate& a, const VictimCandidate& b) {
    const uint64_t ra = a.memory.rss_bytes.value_or(0), rb = b.memory.rss_bytes.value_or(0);
    return ra != rb ? ra > rb : a.pid < b.pid;
  };
  if (cands.size() > n) {
    std::partial_sort(cands.begin(), cands.begin() + static_cast<std::ptrdiff_t>(n), cands.end(), larger);
    cands.resize(n);
  } else {
    std::sort(cands.begin(), cands.end(), larger);
  }
  return cands;
}

std::optional<VictimCandidate> pick_victim(std::vector<VictimCandidate> cands, uint64_t limit_bytes) {
  auto ranked = rank_victims(std::move(cands), limit_bytes);
  if (ranked.empty()) return std::nullopt;
  return std::move(ranked.front());
}

CandidateScan read_candidates(const std::vector<pid_t>& pids, const ScanLimits& limits) {
  CandidateScan scan;
  std::vector<VictimCandidate>& out = scan.candidates;
  out.reserve(std::min(pids.size(), limits.max_processes));
  const auto t0 = std::chrono::steady_clock::now();
  for (pid_t pid : pids) {
    std::string limit_text;
    if (scan.pids_read == limits.max_processes) {
      limit_text = "the limit of " + std::to_string(limits.max_processes) + " processes";
    } else if (std::chrono::steady_clock::now() - t0 >= limits.max_time) {
      limit_text = "the scan's time limit of " + std::to_string(limits.max_time.count()) + " ms";
    }
    if (!limit_text.empty()) {
      scan.cut = "read " + std::to_string(scan.pids_read) + " of " + std::to_string(pids.size()) +
                 " processes (" + limit_text + "): the victim was chosen among those read";
      break;
    }
    ++scan.pids_read;
    auto id = read_identity(pid);
    if (!id) continue;  // already gone
    VictimCandidate c;
    c.pid = pid;
    c.start_time_ticks = id->start_time_ticks;
    c.comm = id->comm;
    c.memory = read_process_memory(pid);
    std::string adj_text;
    if (!read_text_file("/proc/" + std::to_string(pid) + "/oom_score_adj", adj_text)) continue;
    auto adj = parse_oom_score_adj(adj_text);
    if (!adj) continue;
    c.oom_score_adj = *adj;
    // The pid may have exited and been reused between the reads above; only
    // keep the numbers if they all belong to the same process.
    auto again = read_identity(pid);
    if (!again || again->start_time_ticks != c.start_time_ticks) continue;
    out.push_back(std::move(c));
  }
  return scan;
}

}  // namespace oomsnap
