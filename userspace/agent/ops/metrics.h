// The agent's Prometheus metrics: a registry the agent's loop writes and the
// HTTP server's thread renders (text exposition format 0.0.4). One small
// mutex guards it: the loop takes it a few times per incident and once per
// heartbeat, a scrape once per render, so neither side waits on the other
// for long. Label values come from fixed sets (incident_metrics.h maps an
// incident onto them): no pid or cgroup path ever becomes a label.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace oomsnap {

// Cumulative-on-render histogram: counts per bucket, their upper bounds
// ascending, +Inf implied.
struct Histogram {
  explicit Histogram(std::vector<double> upper_bounds = {});
  void observe(double v);
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // per bucket, not cumulative; last = above every bound
  double sum = 0;
  uint64_t count = 0;
};

// Bucket bounds, in seconds: a capture runs within RunTracingToolTimeout
// (2 s by default) + Grace; the lead of a snapshot over its kill within
// OomKillWindow (60 s by default).
const std::vector<double>& capture_duration_buckets();
const std::vector<double>& capture_lead_buckets();

// What the loop publishes at every heartbeat and record (the counters it
// already keeps for the records' "agent" object).
struct SinkTotals {
  std::string sink;  // "stdout" | "file"
  uint64_t written = 0, errors = 0;
};
struct LoopTotals {
  uint64_t bpf_ring_drops = 0;
  uint64_t pressure_events_suppressed = 0;
  uint64_t queue_overflows = 0;
  uint64_t watched_cgroups = 0;
  double last_event_unix_seconds = 0;  // 0: no event yet
  std::vector<SinkTotals> sinks;
};

class MetricsRegistry {
 public:
  explicit MetricsRegistry(std::string version);

  // n = 0 declares the series (so it is scraped as 0 before its first event
  // and a rate() over the first one is right).
  void count_incident(std::string_view trigger, std::string_view status, uint64_t n = 1);
  void count_oom_kill(std::string_view snapshot, uint64_t n = 1);       // before_kill | after_kill | none
  void count_capture_failure(std::string_view reason, uint64_t n = 1);  // timeout | crashed | ...
  void observe_capture_duration(std::string_view language, double seconds);
  void declare_capture_language(std::string_view language);
  void observe_capture_lead(double seconds);
  void publish(const LoopTotals& totals);

  std::string render() const;

 private:
  mutable std::mutex mu_;
  const std::string version_;
  std::map<std::pair<std::string, std::string>, uint64_t> incidents_;  // (trigger, status)
  std::map<std::string, uint64_t> oom_kills_, capture_failures_;
  std::map<std::string, Histogram> capture_duration_;                  // by language
  Histogram capture_lead_;
  LoopTotals totals_;
};

// A label value as the exposition format quotes it: \ " and newline escaped.
std::string escape_label_value(std::string_view v);

}  // namespace oomsnap
