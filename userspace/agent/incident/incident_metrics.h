// An incident's record, counted into the metrics registry: which fixed label
// value each of its facts maps to (trigger, collection status, language,
// snapshot before/after the kill, capture failure reason).
#pragma once
#include <optional>
#include <string>

#include "agent/incident/incident.h"
#include "agent/ops/metrics.h"

namespace oomsnap {

// Every series the counting below can touch, at 0: scraped from the start.
void declare_incident_series(MetricsRegistry& m);

// Called once per record written (Agent::finalize): the counters, and the
// container's charge (container_charge) as its last incident's gauges.
void count_incident(MetricsRegistry& m, const Incident& inc);

// Pure: the incident's explained charge (explained_memory.h) as its
// container's gauges: labelled by the pod's namespace, name and container
// name, or for a container kubelet does not name by its cgroup's last path
// component; `unix_seconds` its time. nullopt without an explained charge.
std::optional<ContainerCharge> container_charge(const Incident& inc, double unix_seconds);

// "go" | "python" | "java" | "node" | "unknown".
std::string language_label(const std::string& language);

// timeout | crashed | memory_cap | target_exited | unavailable, or nullopt
// when the capture gave a snapshot (complete or partial) or none was tried.
// From the snapshot's status and the reason the capture process or the
// collector gave (capture/capture_sandbox.cpp words them).
std::optional<std::string> capture_failure_reason(CollectionOutcome outcome, const CaptureRecord* capture);

// before_kill | after_kill | none, for an incident with an OOM kill.
std::string oom_kill_snapshot_label(const Incident& inc);

}  // namespace oomsnap
