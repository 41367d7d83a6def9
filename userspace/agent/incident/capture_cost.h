// How long a container's capture is expected to take, for the predictive
// trigger (climb_forecast.h): what its last collection took, scaled by how
// much bigger the container is now, or, before any, a default sized for the
// slowest reader. The default comes from docs/benchmarks.md: the HotSpot walk
// reads ~3.5 GiB/s but a JVM's heap is most of its container, Go takes ~50 ms
// whatever the heap, CPython ~200 ms per million objects. So: 100 ms, plus
// 350 ms per GiB the container uses, which covers a JVM filling it.
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace oomsnap {

constexpr double kDefaultCaptureBaseSeconds = 0.1;
constexpr double kDefaultCaptureSecondsPerGiB = 0.35;
constexpr double kMinCaptureSeconds = 0.02;  // nothing learned counts as faster
constexpr double kMaxCaptureSeconds = 10.0;  // nor slower: a runaway figure must not make every climb a trigger

class CaptureCost {
 public:
  // A collection of `memcg`, with the container at `usage_bytes`, took
  // `seconds` from the decision to the snapshot's end.
  void learn(const std::string& memcg, double seconds, uint64_t usage_bytes);
  double expected_seconds(const std::string& memcg, uint64_t usage_bytes) const;
  void forget(const std::string& memcg) { learned_.erase(memcg); }
  size_t size() const { return learned_.size(); }

 private:
  struct Learned {
    double seconds;
    uint64_t usage;
  };
  std::map<std::string, Learned> learned_;  // one per container collected (the agent forgets removed ones)
};

// The default before anything is learned.
double default_capture_seconds(uint64_t usage_bytes);

}  // namespace oomsnap
