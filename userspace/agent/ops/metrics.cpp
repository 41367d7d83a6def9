#include "agent/ops/metrics.h"

#include <algorithm>
#include <cmath>

#include <spdlog/fmt/fmt.h>  // fmt, bundled or Debian's, as spdlog is built

namespace oomsnap {

namespace {

// Shortest text that reads back as the same double; the format's spelling
// of infinities.
std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  return fmt::format("{}", v);
}

void family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void histogram(std::string& out, std::string_view name, std::string_view labels, const Histogram& h) {
  const std::string sep = labels.empty() ? "" : ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += h.counts[i];
    fmt::format_to(std::back_inserter(out), "{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep, number(h.bounds[i]),
                   cumulative);
  }
  const std::string braces = labels.empty() ? "" : "{" + std::string(labels) + "}";
  fmt::format_to(std::back_inserter(out), "{}_bucket{{{}{}le=\"+Inf\"}} {}\n{}_sum{} {}\n{}_count{} {}\n", name, labels,
                 sep, h.count, name, braces, number(h.sum), name, braces, h.count);
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}

void Histogram::observe(double v) {
  // A bucket counts observations <= its bound ("le").
  const auto it = std::lower_bound(bounds.begin(), bounds.end(), v);
  ++counts[static_cast<size_t>(it - bounds.begin())];
  sum += v;
  ++count;
}

const std::vector<double>& capture_duration_buckets() {
  static const std::vector<double> b = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  return b;
}

const std::vector<double>& capture_lead_buckets() {
  static const std::vector<double> b = {0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
  return b;
}

std::string escape_label_value(std::string_view v) {
  std::string s;
  s.reserve(v.size());
  for (char c : v) {
    if (c == '\\') s += "\\\\";
    else if (c == '"') s += "\\\"";
    else if (c == '\n') s += "\\n";
    else s += c;
  }
  return s;
}

MetricsRegistry::MetricsRegistry(std::string version) : version_(std::move(version)), capture_lead_(capture_lead_buckets()) {}

void MetricsRegistry::count_incident(std::string_view trigger, std::string_view status, uint64_t n) {
  std::lock_guard lock(mu_);
  incidents_[{std::string(trigger), std::string(status)}] += n;
}

void MetricsRegistry::count_oom_kill(std::string_view snapshot, uint64_t n) {
  std::lock_guard lock(mu_);
  oom_kills_[std::string(snapshot)] += n;
}

void MetricsRegistry::count_capture_failure(std::string_view reason, uint64_t n) {
  std::lock_guard lock(mu_);
  capture_failures_[std::string(reason)] += n;
}

void MetricsRegistry::declare_capture_language(std::string_view language) {
  std::lock_guard lock(mu_);
  capture_duration_.try_emplace(std::string(language), capture_duration_buckets());
}

void MetricsRegistry::observe_capture_duration(std::string_view language, double seconds) {
  std::lock_guard lock(mu_);
  capture_duration_.try_emplace(std::string(language), capture_duration_buckets()).first->second.observe(seconds);
}

void MetricsRegistry::observe_capture_lead(double seconds) {
  std::lock_guard lock(mu_);
  capture_lead_.observe(seconds);
}

void MetricsRegistry::publish(const LoopTotals& totals) {
  std::lock_guard lock(mu_);
  totals_ = totals;
}

void MetricsRegistry::declare_largest_kind(std::string_view kind) {
  std::lock_guard lock(mu_);
  largest_kinds_.try_emplace(std::string(kind), 0);
}

void MetricsRegistry::publish_charge(ContainerCharge charge) {
  for (std::string* l : {&charge.pod_namespace, &charge.pod, &charge.container})
    if (l->size() > kMaxLabelBytes) l->resize(kMaxLabelBytes);
  std::lock_guard lock(mu_);
  if (!charge.largest_kind.empty()) ++largest_kinds_[charge.largest_kind];
  auto same = [&charge](const ContainerCharge& c) {
    return c.pod_namespace == charge.pod_namespace && c.pod == charge.pod && c.container == charge.container;
  };
  charges_.erase(std::remove_if(charges_.begin(), charges_.end(), same), charges_.end());
  if (charges_.size() == kMaxChargedContainers) charges_.erase(charges_.begin());
  charges_.push_back(std::move(charge));
}

std::string MetricsRegistry::render() const {
  std::lock_guard lock(mu_);
  std::string out;
  auto out_it = [&out] { return std::back_inserter(out); };
  auto line = [&](std::string_view name, std::string_view labels, auto value) {
    if (labels.empty()) fmt::format_to(out_it(), "{} {}\n", name, value);
    else fmt::format_to(out_it(), "{}{{{}}} {}\n", name, labels, value);
  };
  auto label = [](std::string_view k, std::string_view v) { return fmt::format("{}=\"{}\"", k, escape_label_value(v)); };

  family(out, "oomsnap_build_info", "gauge", "The running agent's version (always 1).");
  line("oomsnap_build_info", label("version", version_), 1);

  family(out, "oomsnap_incidents_total", "counter", "Incident records written, by first trigger and collection status.");
  for (const auto& [k, n] : incidents_) line("oomsnap_incidents_total", label("trigger", k.first) + "," + label("status", k.second), n);

  family(out, "oomsnap_oom_kills_total", "counter",
         "OOM kills recorded, by whether the container's snapshot completed before the kill.");
  for (const auto& [k, n] : oom_kills_) line("oomsnap_oom_kills_total", label("snapshot", k), n);

  family(out, "oomsnap_capture_duration_seconds", "histogram", "Wall time of one heap capture, by language.");
  for (const auto& [lang, h] : capture_duration_) histogram(out, "oomsnap_capture_duration_seconds", label("language", lang), h);

  family(out, "oomsnap_capture_lead_seconds", "histogram",
         "Time from a completed snapshot to the OOM kill of its container (kills after their snapshot only).");
  histogram(out, "oomsnap_capture_lead_seconds", "", capture_lead_);

  family(out, "oomsnap_capture_failures_total", "counter", "Heap captures that gave no complete or partial snapshot, by reason.");
  for (const auto& [k, n] : capture_failures_) line("oomsnap_capture_failures_total", label("reason", k), n);

  family(out, "oomsnap_incident_largest_kind_total", "counter",
         "Incident records by the kind that held the most of the container's usage (heap, native, page_cache, ...).");
  for (const auto& [k, n] : largest_kinds_) line("oomsnap_incident_largest_kind_total", label("kind", k), n);
  family(out, "oomsnap_last_incident_memory_bytes", "gauge",
         "Where the container's memory went at its last incident, by kind (the record's container.explained).");
  auto container_labels = [&label](const ContainerCharge& c) {
    return label("namespace", c.pod_namespace) + "," + label("pod", c.pod) + "," + label("container", c.container);
  };
  for (const auto& c : charges_)
    for (const auto& [kind, bytes] : c.kinds)
      line("oomsnap_last_incident_memory_bytes", container_labels(c) + "," + label("kind", kind), bytes);
  family(out, "oomsnap_last_incident_usage_bytes", "gauge", "The container's memory usage at its last incident.");
  for (const auto& c : charges_) line("oomsnap_last_incident_usage_bytes", container_labels(c), c.usage_bytes);
  family(out, "oomsnap_last_incident_timestamp_seconds", "gauge", "Unix time of the container's last incident.");
  for (const auto& c : charges_) line("oomsnap_last_incident_timestamp_seconds", container_labels(c), number(c.unix_seconds));

  family(out, "oomsnap_bpf_ring_drops_total", "counter", "BPF events lost because a ring buffer was full.");
  line("oomsnap_bpf_ring_drops_total", "", totals_.bpf_ring_drops);
  family(out, "oomsnap_pressure_events_suppressed_total", "counter",
         "Memory cgroup reclaim events the BPF per-memcg rate limit did not send.");
  line("oomsnap_pressure_events_suppressed_total", "", totals_.pressure_events_suppressed);
  family(out, "oomsnap_queue_overflows_total", "counter", "Collections refused because the capture queue was full.");
  line("oomsnap_queue_overflows_total", "", totals_.queue_overflows);

  family(out, "oomsnap_records_written_total", "counter", "Records written, by sink.");
  for (const auto& s : totals_.sinks) line("oomsnap_records_written_total", label("sink", s.sink), s.written);
  family(out, "oomsnap_sink_errors_total", "counter", "Failed record writes (each attempt), by sink.");
  for (const auto& s : totals_.sinks) line("oomsnap_sink_errors_total", label("sink", s.sink), s.errors);

  family(out, "oomsnap_watched_cgroups", "gauge", "Memory cgroups the agent watches.");
  line("oomsnap_watched_cgroups", "", totals_.watched_cgroups);
  family(out, "oomsnap_last_event_timestamp_seconds", "gauge",
         "Unix time of the last kernel or cgroup event the agent took in (0: none yet).");
  line("oomsnap_last_event_timestamp_seconds", "", number(totals_.last_event_unix_seconds));
  return out;
}

}  // namespace oomsnap
