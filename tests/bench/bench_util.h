// What the benchmark programs under tests/bench share: the median, and the
// PID [RUNS ...] arguments they all start with.
#pragma once
#include <sys/types.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

namespace oomsnap::bench {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

struct PidRuns {
  pid_t pid = 0;
  int runs = 15;
};

// argv[1] the target's pid, argv[2] (optional) the runs, at least 1; prints
// "usage: PROGRAM <usage>" and gives nullopt without a pid.
inline std::optional<PidRuns> pid_and_runs(int argc, char** argv, const char* usage) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s %s\n", argv[0], usage);
    return std::nullopt;
  }
  PidRuns a;
  a.pid = static_cast<pid_t>(std::atoi(argv[1]));
  if (argc > 2) a.runs = std::max(1, std::atoi(argv[2]));
  return a;
}

}  // namespace oomsnap::bench
