#include "agent/incident/incident.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "agent/incident/explained_memory.h"
#include "agent/records/time_format.h"
#include "core/snapshot.h"

namespace oomsnap {

const char* to_string(CollectionOutcome o) {
  switch (o) {
    case CollectionOutcome::kNotAttempted: return "not_attempted";
    case CollectionOutcome::kCollected: return "collected";
    case CollectionOutcome::kFailed: return "failed";
    case CollectionOutcome::kNoVictim: return "no_victim";
    case CollectionOutcome::kVictimGone: return "victim_gone";
    case CollectionOutcome::kDiscarded: return "discarded";
    case CollectionOutcome::kQueueFull: return "queue_full";
  }
  return "?";
}

bool OomKillInfo::add_killed(KilledProcess k) {
  if (killed_pid(k.pid)) return false;
  killed.push_back(std::move(k));
  if (killed.size() > 1) group_kill = true;
  return true;
}

bool OomKillInfo::killed_pid(pid_t p) const {
  for (const auto& k : killed)
    if (k.pid == p) return true;
  return false;
}

std::optional<double> lead_ms(const Incident& inc) {
  if (!inc.timeline.oom_kill || !inc.timeline.snapshot_complete || inc.outcome != CollectionOutcome::kCollected)
    return std::nullopt;
  return (static_cast<double>(inc.timeline.oom_kill) - static_cast<double>(inc.timeline.snapshot_complete)) / 1e6;
}

ClockPair ClockPair::now() {
  // Two reads as close together as possible; the error is their distance.
  timespec mono{}, real{};
  clock_gettime(CLOCK_MONOTONIC, &mono);
  clock_gettime(CLOCK_REALTIME, &real);
  ClockPair p;
  p.mono_ns = static_cast<MonoNs>(mono.tv_sec) * 1'000'000'000ull + static_cast<MonoNs>(mono.tv_nsec);
  p.realtime_ns = static_cast<int64_t>(real.tv_sec) * 1'000'000'000ll + real.tv_nsec;
  return p;
}

namespace {

std::string wall(const ClockPair& clocks, MonoNs mono) {
  return rfc3339_ms(std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::nanoseconds(clocks.to_realtime_ns(mono)))));
}

nlohmann::json container_json(const IncidentContainer& c) {
  nlohmann::json j;
  j["cgroup_path"] = c.cgroup_path;
  j["cgroup_inode"] = c.inode;
  if (c.ref) {
    if (!c.ref->runtime.empty()) j["runtime"] = c.ref->runtime;
    j["container_id"] = c.ref->id;
    if (!c.ref->pod_uid.empty()) j["pod_uid"] = c.ref->pod_uid;
  }
  if (c.pod) {
    j["pod_namespace"] = c.pod->pod_namespace;
    j["pod_name"] = c.pod->pod_name;
    if (c.pod->container_name) j["container_name"] = *c.pod->container_name;
  }
  if (c.stats.usage_bytes) j["usage_bytes"] = *c.stats.usage_bytes;
  j["limit_bytes"] = c.stats.limit_bytes ? nlohmann::json(*c.stats.limit_bytes) : nlohmann::json(nullptr);
  if (c.stats.high_bytes) j["high_bytes"] = *c.stats.high_bytes;
  if (c.stats.swap_bytes) j["swap_bytes"] = *c.stats.swap_bytes;
  if (!c.stats.events.empty()) j["events"] = c.stats.events;
  if (c.memory_stat) j["memory_stat"] = to_json(*c.memory_stat);
  if (c.tasks_total) {
    nlohmann::json tasks = nlohmann::json::array();
    for (const VictimCandidate& t : c.tasks) {
      nlohmann::json e;
      e["pid"] = t.pid;
      e["comm"] = t.comm;
      // The columns of the kernel's OOM task dump (mm/oom_kill.c dump_task).
      if (t.memory.rss_bytes) e["rss_bytes"] = *t.memory.rss_bytes;
      if (t.memory.swap_bytes) e["swap_bytes"] = *t.memory.swap_bytes;
      if (t.memory.page_table_bytes) e["page_table_bytes"] = *t.memory.page_table_bytes;
      e["oom_score_adj"] = t.oom_score_adj;
      tasks.push_back(std::move(e));
    }
    j["tasks"] = std::move(tasks);
    j["tasks_total"] = c.tasks_total;
  }
  if (!c.tasks_cut.empty()) j["tasks_cut"] = c.tasks_cut;
  return j;
}

// The container's charge by kind, once the collection looked at it.
void put_explained(nlohmann::json& container, const Incident& inc) {
  if (auto e = explain_incident(inc)) container["explained"] = to_json(*e);
}

nlohmann::json exit_json(const ExitInfo& e, const ClockPair& clocks) {
  nlohmann::json j;
  j["pid"] = e.pid;
  j["time"] = wall(clocks, e.kernel_ns);
  j["kernel_ts_ns"] = e.kernel_ns;
  const uint32_t sig = e.exit_code & 0x7f;
  if (sig) {
    j["signal"] = sig;
    const char* name = sigabbrev_np(static_cast<int>(sig));
    if (name) j["signal_name"] = std::string("SIG") + name;
    j["core_dumped"] = (e.exit_code & 0x80) != 0;
  } else {
    j["exit_status"] = (e.exit_code >> 8) & 0xff;
  }
  return j;
}

nlohmann::json tracer_data_json(const CaptureRecord& c) {
  return {{"language", c.result.language}, {"snapshot", to_json(c.result.snapshot)}};
}

bool snapshot_kept(CollectionOutcome o) { return o == CollectionOutcome::kCollected || o == CollectionOutcome::kFailed; }

nlohmann::json other_process_json(const OtherProcess& o, const std::optional<OomKillInfo>& kill) {
  nlohmann::json j;
  j["pid"] = o.process.pid;
  j["comm"] = o.process.comm;
  j["start_time_ticks"] = o.process.start_time_ticks;
  j["score"] = o.process.score_pages;
  j["oom_score_adj"] = o.process.oom_score_adj;
  j["process_memory"] = to_json(o.capture ? o.capture->process_memory : o.process.memory);
  if (o.capture && snapshot_kept(o.outcome)) j["tracer_data"] = tracer_data_json(*o.capture);
  j["collection"] = {{"status", to_string(o.outcome)}};
  if (!o.reason.empty()) j["collection"]["reason"] = o.reason;
  if (kill) j["killed"] = kill->killed_pid(o.process.pid);
  return j;
}

void put_ns(nlohmann::json& j, const char* key, MonoNs v) {
  if (v) j[key] = v;
}

}  // namespace

nlohmann::json to_json(const Incident& inc, const RecordContext& ctx) {
  nlohmann::json j;
  j["time"] = wall(ctx.clocks, inc.timeline.trigger ? inc.timeline.trigger : inc.timeline.received);
  j["node"] = ctx.node;
  j["incident_id"] = inc.id;

  nlohmann::json t;
  t["type"] = inc.trigger.type;
  t["source"] = inc.trigger.source;
  t["kernel_ts_ns"] = inc.trigger.kernel_ns;
  // cgroup-file notifications carry no kernel timestamp: theirs is when the
  // agent read the notification (same clock, a little later).
  t["timestamp"] = inc.trigger.from_bpf_clock ? "bpf_event" : "notification_read";
  if (inc.trigger.pid) t["pid"] = inc.trigger.pid;
  t["counters"] = inc.trigger.counters;
  if (inc.merged_triggers) t["merged"] = inc.merged_triggers;
  if (!inc.rule.empty()) {
    t["rule"] = inc.rule;
    // The predicted time to the limit: the forecast's own, else the policy's
    // trend (over the container's last two minutes) when it saw growth.
    const auto& c = inc.trigger.counters;
    if (inc.trigger.type == "forecast" && c.contains("seconds_to_limit")) {
      t["seconds_to_limit"] = c["seconds_to_limit"];
      t["bytes_per_second"] = c.value("bytes_per_second", uint64_t{0});
    } else if (inc.growth.kind == GrowthKind::kGrowing) {
      t["seconds_to_limit"] = inc.growth.seconds_to_limit;
      t["bytes_per_second"] = static_cast<uint64_t>(inc.growth.bytes_per_second);
    }
  }
  j["trigger"] = std::move(t);
  if (!inc.triggers_seen.empty()) {
    nlohmann::json seen = nlohmann::json::array();
    for (const auto& s : inc.triggers_seen) {
      nlohmann::json one = {{"type", s.type}, {"kernel_ts_ns", s.kernel_ns}};
      if (!s.source.empty()) one["source"] = s.source;
      seen.push_back(std::move(one));
    }
    j["triggers_seen"] = std::move(seen);
  }

  j["container"] = container_json(inc.container);
  put_explained(j["container"], inc);

  if (inc.victim) {
    j["victim_pid"] = inc.victim->pid;
    j["comm"] = inc.victim->comm;
    j["start_time_ticks"] = inc.victim->start_time_ticks;
    j["score"] = inc.victim->score_pages;
    j["oom_score_adj"] = inc.victim->oom_score_adj;
    j["process_memory"] = to_json(inc.capture ? inc.capture->process_memory : inc.victim->memory);
  } else {
    j["victim_pid"] = nullptr;
  }
  if (inc.capture && snapshot_kept(inc.outcome)) j["tracer_data"] = tracer_data_json(*inc.capture);
  j["collection"] = {{"status", to_string(inc.outcome)}};
  if (!inc.reason.empty()) j["collection"]["reason"] = inc.reason;
  if (inc.others_without_runtime) j["collection"]["processes_without_runtime"] = inc.others_without_runtime;
  if (!inc.others_reason.empty()) j["collection"]["other_processes_reason"] = inc.others_reason;
  if (!inc.other_processes.empty()) {
    nlohmann::json others = nlohmann::json::array();
    for (const auto& o : inc.other_processes) others.push_back(other_process_json(o, inc.oom_kill));
    j["other_processes"] = std::move(others);
  }

  if (inc.oom_kill) {
    nlohmann::json k;
    k["pid"] = inc.oom_kill->pid;
    k["comm"] = inc.oom_kill->comm;
    k["cgroup_path"] = inc.oom_kill->memcg;
    k["matches_victim"] = inc.oom_kill->matches_victim;
    k["time"] = wall(ctx.clocks, inc.oom_kill->kernel_ns);
    k["kernel_ts_ns"] = inc.oom_kill->kernel_ns;
    k["rss_bytes"] = inc.oom_kill->rss_bytes;
    if (!inc.oom_kill->pid_source.empty()) k["pid_source"] = inc.oom_kill->pid_source;
    if (inc.oom_kill->memory_stat) k["memory_stat"] = to_json(*inc.oom_kill->memory_stat);
    if (inc.oom_kill->kernel_report)
      k["kernel_report"] = to_json(*inc.oom_kill->kernel_report, static_cast<uint64_t>(getpagesize()));
    auto lead = lead_ms(inc);
    k["lead_ms"] = lead ? nlohmann::json(*lead) : nlohmann::json(nullptr);
    k["group_kill"] = inc.oom_kill->group_kill;
    nlohmann::json killed = nlohmann::json::array();
    for (const auto& kp : inc.oom_kill->killed) {
      nlohmann::json kj = {{"pid", kp.pid}, {"comm", kp.comm}, {"rss_bytes", kp.rss_bytes}};
      if (!kp.pid_source.empty()) kj["pid_source"] = kp.pid_source;
      killed.push_back(std::move(kj));
    }
    k["killed"] = std::move(killed);
    j["oom_kill"] = std::move(k);
  }
  if (inc.exit) j["exit"] = exit_json(*inc.exit, ctx.clocks);

  nlohmann::json tl = nlohmann::json::object();
  put_ns(tl, "trigger_ns", inc.timeline.trigger);
  put_ns(tl, "received_ns", inc.timeline.received);
  put_ns(tl, "decided_ns", inc.timeline.decided);
  put_ns(tl, "collection_start_ns", inc.timeline.collection_start);
  put_ns(tl, "snapshot_complete_ns", inc.timeline.snapshot_complete);
  put_ns(tl, "oom_kill_ns", inc.timeline.oom_kill);
  put_ns(tl, "exit_ns", inc.timeline.exit);
  j["timeline"] = std::move(tl);
  if (!ctx.agent.is_null()) j["agent"] = ctx.agent;
  return j;
}

}  // namespace oomsnap
