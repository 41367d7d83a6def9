#include "agent/incident/incident_metrics.h"

#include <algorithm>

#include "agent/incident/explained_memory.h"
#include "agent/incident/policy.h"

namespace oomsnap {

namespace {

constexpr CollectionOutcome kOutcomes[] = {
    CollectionOutcome::kNotAttempted, CollectionOutcome::kCollected, CollectionOutcome::kFailed,
    CollectionOutcome::kNoVictim,     CollectionOutcome::kVictimGone, CollectionOutcome::kDiscarded,
    CollectionOutcome::kQueueFull};
constexpr const char* kLanguages[] = {"go", "python", "java", "node", "unknown"};
constexpr const char* kFailureReasons[] = {"timeout", "crashed", "memory_cap", "target_exited", "unavailable"};
constexpr const char* kKillSnapshots[] = {"before_kill", "after_kill", "none"};

std::string trigger_label(const std::string& type) {
  const auto& known = known_triggers();
  return std::find(known.begin(), known.end(), type) != known.end() ? type : "other";
}

bool has_evidence(const CaptureRecord& c) {
  const SnapshotStatus s = c.result.snapshot.status;
  return s == SnapshotStatus::kComplete || s == SnapshotStatus::kPartial;
}

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

void count_capture(MetricsRegistry& m, CollectionOutcome outcome, const CaptureRecord* capture, double seconds) {
  if (capture && seconds > 0) m.observe_capture_duration(language_label(capture->result.language), seconds);
  if (auto why = capture_failure_reason(outcome, capture)) m.count_capture_failure(*why);
}

}  // namespace

std::string language_label(const std::string& language) {
  for (const char* l : kLanguages)
    if (language == l) return language;
  return "unknown";
}

std::optional<std::string> capture_failure_reason(CollectionOutcome outcome, const CaptureRecord* capture) {
  if (outcome == CollectionOutcome::kVictimGone) return "target_exited";
  if (!capture || has_evidence(*capture)) return std::nullopt;
  const Snapshot& s = capture->result.snapshot;
  // mark_target_exited (capture.cpp) words every runtime's "target exited" the same.
  if (contains(s.reason, "exited")) return "target_exited";
  if (s.status == SnapshotStatus::kUnavailable) return "unavailable";
  const std::string& pf = capture->process_failure;
  if (pf.empty()) return "unavailable";  // a collector could not read the runtime's data
  if (contains(pf, "memory cap")) return "memory_cap";
  // Killed at the hard deadline (or at shutdown), over its CPU time cap, or
  // stopped by a read that stalled past the budget.
  if (contains(pf, "killed after") || contains(pf, "CPU time cap") || contains(pf, "stopped after")) return "timeout";
  return "crashed";  // died by a signal, wrote an invalid or oversized result, did not start
}

std::string oom_kill_snapshot_label(const Incident& inc) {
  const auto lead = lead_ms(inc);
  if (!lead || !inc.capture || !has_evidence(*inc.capture)) return "none";
  return *lead >= 0 ? "before_kill" : "after_kill";
}

void declare_incident_series(MetricsRegistry& m) {
  for (const auto& t : known_triggers())
    for (CollectionOutcome o : kOutcomes) m.count_incident(t, to_string(o), 0);
  for (const char* s : kKillSnapshots) m.count_oom_kill(s, 0);
  for (const char* r : kFailureReasons) m.count_capture_failure(r, 0);
  for (const char* l : kLanguages) m.declare_capture_language(l);
  for (size_t i = 0; i < kChargeKinds; ++i) m.declare_largest_kind(charge_kind_name(static_cast<ChargeKind>(i)));
  m.declare_largest_kind("unexplained");
}

std::optional<ContainerCharge> container_charge(const Incident& inc, double unix_seconds) {
  const auto e = explain_incident(inc);
  if (!e || !e->usage_bytes) return std::nullopt;
  ContainerCharge c;
  const IncidentContainer& ic = inc.container;
  if (ic.pod) {
    c.pod_namespace = ic.pod->pod_namespace;
    c.pod = ic.pod->pod_name;
    c.container = ic.pod->container_name.value_or("");
  } else {
    const size_t slash = ic.cgroup_path.find_last_of('/');
    c.container = slash == std::string::npos ? ic.cgroup_path : ic.cgroup_path.substr(slash + 1);
  }
  c.unix_seconds = unix_seconds;
  c.usage_bytes = *e->usage_bytes;
  uint64_t largest = 0;
  auto add = [&](const char* kind, uint64_t bytes) {
    c.kinds.emplace_back(kind, bytes);
    if (bytes > largest) largest = bytes, c.largest_kind = kind;
  };
  for (size_t i = 0; i < kChargeKinds; ++i)
    if (e->bytes[i]) add(charge_kind_name(static_cast<ChargeKind>(i)), *e->bytes[i]);
  add("unexplained", e->unexplained_bytes);
  return c;
}

void count_incident(MetricsRegistry& m, const Incident& inc) {
  m.count_incident(trigger_label(inc.trigger.type), to_string(inc.outcome));
  const ClockPair clocks = ClockPair::now();
  const MonoNs when = inc.timeline.trigger ? inc.timeline.trigger : inc.timeline.received;
  const double unix_seconds = static_cast<double>(when ? clocks.to_realtime_ns(when) : clocks.realtime_ns) / 1e9;
  if (auto charge = container_charge(inc, unix_seconds)) m.publish_charge(std::move(*charge));
  if (inc.oom_kill) {
    const std::string which = oom_kill_snapshot_label(inc);
    m.count_oom_kill(which);
    if (which == "before_kill") m.observe_capture_lead(*lead_ms(inc) / 1000.0);
  }
  // The victim's capture as the agent timed it (sandbox included); the
  // other processes' as their collectors did.
  const auto& t = inc.timeline;
  const double victim_s = t.snapshot_complete > t.collection_start && t.collection_start
                              ? static_cast<double>(t.snapshot_complete - t.collection_start) / 1e9
                              : 0;
  count_capture(m, inc.outcome, inc.capture ? &*inc.capture : nullptr, victim_s);
  for (const auto& o : inc.other_processes)
    count_capture(m, o.outcome, o.capture ? &*o.capture : nullptr,
                  o.capture ? o.capture->result.snapshot.duration_ms / 1000.0 : 0);
}

}  // namespace oomsnap
