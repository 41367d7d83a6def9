// The agent's Prometheus metrics: a registry the agent's loop writes and the
// HTTP server's thread renders (text exposition format 0.0.4). One small
// mutex guards it: the loop takes it a few times per incident and once per
// heartbeat, a scrape once per render, so neither side waits on the other
// for long. Label values come from fixed sets (incident_metrics.h maps an
// incident onto them): no pid or cgroup path ever becomes a label. The one
// exception is bounded by count: the last incident's charge of each of the
// kMaxChargedContainers containers with the latest incidents, labelled by
// pod namespace, pod and container name.
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

// Where the memory of one container's last incident went (the record's
// container.explained), for its gauges. Kinds come from a fixed set of 12
// ("heap" .. "kernel", "unexplained").
struct ContainerCharge {
  std::string pod_namespace, pod, container;  // the labels; at most kMaxLabelBytes each
  double unix_seconds = 0;                    // the incident's time
  uint64_t usage_bytes = 0;
  std::vector<std::pair<std::string, uint64_t>> kinds;  // kind -> bytes, the kinds the record knows
  std::string largest_kind;                             // the kind with the most bytes
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
  // Replaces the container's last charge (same three labels); past
  // kMaxChargedContainers containers, the one with the oldest incident
  // goes. Counts the incident under its largest kind.
  void publish_charge(ContainerCharge charge);
  void declare_largest_kind(std::string_view kind);

  static constexpr size_t kMaxChargedContainers = 32;
  static constexpr size_t kMaxLabelBytes = 128;

  std::string render() const;

 private:
  mutable std::mutex mu_;
  const std::string version_;
  std::map<std::pair<std::string, std::string>, uint64_t> incidents_;  // (trigger, status)
  std::map<std::string, uint64_t> oom_kills_, capture_failures_;
  std::map<std::string, Histogram> capture_duration_;                  // by language
  Histogram capture_lead_;
  LoopTotals totals_;
  std::vector<ContainerCharge> charges_;               // at most kMaxChargedContainers, oldest first
  std::map<std::string, uint64_t> largest_kinds_;     // incidents by their largest kind
};

// A label value as the exposition format quotes it: \ " and newline escaped.
std::string escape_label_value(std::string_view v);

}  // namespace oomsnap
