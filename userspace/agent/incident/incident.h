// One incident: what triggered it, the container, the victim and its heap
// snapshot, and the OOM kill / exit that followed. The agent fills it in
// stages (decision → collection → kill) and writes it once, as one JSON line.
#pragma once
#include <sys/types.h>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/cgroup/cgroup.h"
#include "agent/cgroup/kernel_oom_report.h"
#include "agent/cgroup/memory_stat.h"
#include "agent/cgroup/pod_identity.h"
#include "agent/incident/policy.h"
#include "agent/incident/victim.h"
#include "capture/capture.h"

namespace oomsnap {

struct IncidentContainer {
  std::string cgroup_path;  // relative to the memory cgroup mount
  uint64_t inode = 0;
  MemcgStats stats;         // usage/limit/high when the decision was made
  // memory.stat as the collection started (the agent's worker reads it).
  std::optional<MemoryStat> memory_stat;
  // The container's largest processes (kMaxRecordedTasks, by RSS) as the
  // collection found them, and how many it found.
  std::vector<VictimCandidate> tasks;
  size_t tasks_total = 0;
  // The processes found beyond `tasks`: how many, and their memory summed
  // (rss and its anon / file / shmem split), so the explained charge
  // counts them without listing them.
  struct Unlisted {
    uint32_t count = 0;
    ProcessMemory memory;
  } unlisted_tasks;
  std::string tasks_cut;  // why the scan stopped before the last process (ScanLimits)
  std::optional<ContainerRef> ref;
  // Names from kubelet's log directories, filled as the record is built.
  std::optional<PodIdentity> pod;
};

// One process the kernel killed in an OOM event.
struct KilledProcess {
  pid_t pid = 0;
  std::string comm;
  uint64_t rss_bytes = 0;  // anon + file + shmem at the kill
  std::string pid_source;  // how the kernel's thread became this process id (bpf_events.h pid_source_name)
};

// One OOM event: every mark_victim of one OOM invocation in one container
// (the kernel's chosen victim, the members of a group kill, and the chosen
// victim's second mark during the group kill) is one event. The fields
// outside `killed` describe the kernel's chosen victim (the first mark).
struct OomKillInfo {
  pid_t pid = 0;
  std::string comm;
  std::string memcg;         // the victim's memory cgroup
  MonoNs kernel_ns = 0;      // mark_victim
  uint64_t rss_bytes = 0;    // anon + file + shmem at the kill
  bool matches_victim = false;  // the snapshotted process was among the killed
  std::vector<KilledProcess> killed;  // every process killed in the event, each once, the chosen one first
  bool group_kill = false;   // more than one process killed, or the memcg's oom_group_kill counter rose
  uint32_t invoker = 0;      // thread that ran the OOM killer (the event's identity, with the memcg)
  std::string pid_source;    // how `pid` was obtained: task | current | proc_status | trace_entry
  // The container's memory.stat as the agent took the kill in: read after
  // the kill, so the victim's pages may already be on their way out.
  std::optional<MemoryStat> memory_stat;
  // The kernel's own report of this kill (/dev/kmsg), printed while the OOM
  // killer held the memcg: its usage, memory.stat and task list before the
  // victim died. Absent when the agent cannot read the kernel log.
  std::optional<KernelOomReport> kernel_report;

  // Adds a process killed in this event; false when it was already in it.
  bool add_killed(KilledProcess k);
  bool killed_pid(pid_t p) const;
};

// Every mark of one OOM invocation comes from one call in one thread (the
// invoker): microseconds apart on a host, tens of ms in an emulated guest.
// Marks by the same invoker in the same container within this window are one
// event; another invoker is another event.
constexpr MonoNs kOomEventWindowNs = 1'000'000'000;

// At most this many of a container's processes are listed in its record.
inline constexpr size_t kMaxRecordedTasks = 32;

struct ExitInfo {
  pid_t pid = 0;
  MonoNs kernel_ns = 0;
  uint32_t exit_code = 0;  // as the kernel keeps it: signal in bits 0-6, core flag 0x80, status << 8
};

// CLOCK_MONOTONIC ns of each step; 0 = did not happen.
struct Timeline {
  MonoNs trigger = 0;            // the kernel's timestamp of the first trigger
  MonoNs received = 0;           // the agent took the trigger in
  MonoNs decided = 0;            // the batch closed with this container on top
  MonoNs collection_start = 0;
  MonoNs snapshot_complete = 0;
  MonoNs oom_kill = 0;
  MonoNs exit = 0;
};

// How the collection went, apart from the snapshot's own status.
enum class CollectionOutcome {
  kNotAttempted,  // e.g. an OOM kill with no snapshot before it, or an exit record
  kCollected,     // snapshot taken (its own status says complete/partial/failed)
  kFailed,        // the capture process failed (killed at its deadline, died, over a cap)
  kNoVictim,      // no killable process in the container
  kVictimGone,    // the victim exited (or was replaced) before collection started
  kDiscarded,     // identity or cgroup changed during collection: snapshot dropped
  kQueueFull,     // the collection queue overflowed
};
const char* to_string(CollectionOutcome o);

// A process of the container snapshotted after the victim (MaxProcessesPerIncident).
struct OtherProcess {
  VictimCandidate process;
  std::optional<CaptureRecord> capture;
  CollectionOutcome outcome = CollectionOutcome::kNotAttempted;
  std::string reason;
};

struct Incident {
  uint64_t id = 0;
  Trigger trigger;
  uint64_t merged_triggers = 0;
  // Every trigger seen for the container from the first one until the record
  // is written (capped at kMaxSeenTriggers): the incident's timeline.
  std::vector<SeenTrigger> triggers_seen;
  // The policy's rule that collected it ("threshold" or "forecast"; empty in
  // a record of a kill or exit with no collection of its own), and the
  // container's growth as the policy estimated it then.
  std::string rule;
  Growth growth;
  IncidentContainer container;
  std::optional<VictimCandidate> victim;
  std::optional<CaptureRecord> capture;
  CollectionOutcome outcome = CollectionOutcome::kNotAttempted;
  std::string reason;
  // The container's next processes by badness with a supported runtime, each
  // captured within what is left of the incident's capture budget.
  std::vector<OtherProcess> other_processes;
  uint32_t others_without_runtime = 0;  // skipped: no collector recognised them
  std::string others_reason;            // why fewer were tried than allowed, if so
  std::optional<OomKillInfo> oom_kill;
  std::optional<ExitInfo> exit;
  Timeline timeline;
};

// lead_ms = kill time − snapshot completion (negative: the kill came first);
// nullopt without both.
std::optional<double> lead_ms(const Incident& inc);

// Maps CLOCK_MONOTONIC to wall-clock time (sampled once per conversion).
struct ClockPair {
  MonoNs mono_ns = 0;
  int64_t realtime_ns = 0;
  static ClockPair now();
  int64_t to_realtime_ns(MonoNs mono) const { return realtime_ns - static_cast<int64_t>(mono_ns - mono); }
};

struct RecordContext {
  std::string node;      // host name
  ClockPair clocks;
  nlohmann::json agent;  // agent counters at write time (ring drops, queue overflows, ...)
};

// The record line (issue #3 shape): time, node, trigger, container,
// victim_pid, comm, start_time_ticks, score, process_memory, tracer_data,
// collection, other_processes, oom_kill, exit, timeline, agent.
nlohmann::json to_json(const Incident& inc, const RecordContext& ctx);

}  // namespace oomsnap
