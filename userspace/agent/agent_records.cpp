// What becomes a record, and how it is written: the per-container bounds on
// exit records and on OOM-kill records without a snapshot (ContainerRecordLimiter),
// the pod names looked up off the loop, the line handed to the sinks.
#include "agent/agent.h"

#include <unistd.h>

#include <cstring>

#include <boost/asio/post.hpp>

#include "agent/cgroup/pod_identity.h"
#include "agent/incident/incident_metrics.h"
#include "base/log_escape.h"
#include "core/proc_info.h"

namespace oomsnap {

namespace {

// The span of the events a record's suppressed count covers: from the first
// one held back to this record's own event (kernel times, ms).
uint64_t span_ms(const SuppressedEvents& s, MonoNs record_ns) {
  return s.first_ns && record_ns > s.first_ns ? (record_ns - s.first_ns) / 1'000'000 : 0;
}

}  // namespace

// The bound is per container: the nearest memcg with a limit, so a container
// that can create child cgroups does not get a fresh budget in each.
std::string Agent::record_limit_key(const std::string& memcg) const {
  return cgroups_->limited_container_of(memcg).value_or(memcg);
}

void Agent::write_exit_record(const HeldEvent& held, const SuppressedEvents& suppressed, bool held_back) {
  const oomsnap_event& e = held.event;
  Incident& inc = open_kernel_incident(e, "process_exit", "sched_process_exit", monotonic_now_ns());
  inc.trigger.counters = {{"comm", std::string(e.comm, strnlen(e.comm, sizeof e.comm))},
                          {"exit_code", e.exit_code},
                          {"suppressed_exits", suppressed.total},
                          {"suppressed_exits_in_kernel", suppressed.in_kernel}};
  // Written when the container's window ended, not when it exited.
  if (held_back) inc.trigger.counters["held_until_window_end"] = true;
  describe_container(inc.container, held.container, &held.last_seen);
  inc.exit = ExitInfo{static_cast<pid_t>(e.tgid), e.ktime_ns, e.exit_code};
  inc.timeline.exit = e.ktime_ns;
  finalize(inc.id);
}

OomKillInfo Agent::oom_kill_info(const oomsnap_event& e, const std::string& memcg) {
  OomKillInfo k;
  k.pid = static_cast<pid_t>(e.tgid);
  k.comm = std::string(e.comm, strnlen(e.comm, sizeof e.comm));
  k.memcg = memcg;
  k.kernel_ns = e.ktime_ns;
  k.rss_bytes = (e.rss_anon_pages + e.rss_file_pages + e.rss_shmem_pages) * static_cast<uint64_t>(getpagesize());
  k.invoker = e.oom_invoker;
  k.pid_source = pid_source_name(e.pid_source);
  k.killed.push_back({k.pid, k.comm, k.rss_bytes, k.pid_source});
  return k;
}

// An OOM kill without a snapshot: its record waits for the victim's exit or
// a second; one held back to its window's end is written now (the process
// is long gone).
void Agent::open_kill_record(const HeldEvent& held, const SuppressedEvents& suppressed, bool held_back) {
  const oomsnap_event& e = held.event;
  const MonoNs now = monotonic_now_ns();
  Incident& inc = open_kernel_incident(e, "oom_kill", "mark_victim", held_back ? now : now + IncidentBook::kExitWaitNs);
  inc.trigger.counters = {{"rss_anon_pages", e.rss_anon_pages},
                          {"rss_file_pages", e.rss_file_pages},
                          {"rss_shmem_pages", e.rss_shmem_pages}};
  if (suppressed.total) {
    inc.trigger.counters["suppressed_oom_kills"] = suppressed.total;
    inc.trigger.counters["suppressed_oom_kills_span_ms"] = span_ms(suppressed, e.ktime_ns);
  }
  if (held_back) inc.trigger.counters["held_until_window_end"] = true;
  describe_container(inc.container, held.container, &held.last_seen);
  inc.oom_kill = oom_kill_info(e, held.memcg);
  inc.oom_kill->memory_stat = read_memory_stat(cgroups_->fs(), inc.container.cgroup_path);
  inc.timeline.oom_kill = e.ktime_ns;
  inc.reason = why_no_snapshot(inc.container.cgroup_path, now);
  log_->info("incident {}: OOM kill of {} ({}) in {} without a prior snapshot{}", inc.id, inc.oom_kill->pid,
             printable(inc.oom_kill->comm), printable(held.memcg),
             suppressed.total ? "; " + std::to_string(suppressed.total) + " earlier kill(s) not recorded" : "");
  if (held_back) {
    finalize(inc.id);
    return;
  }
  arm_book_timer();
}

// Containers whose window ended with events unreported get one record now,
// carrying the count. At shutdown a record would break the bound (the window
// has not ended), so what is owed is logged instead.
void Agent::flush_limited_records(bool stopping) {
  const MonoNs now = monotonic_now_ns();
  const auto& c = options_.config;
  for (auto& due : exit_limiter_.take_due(now, stopping)) {
    if (stopping)
      log_owed(due, "exit(s) by a signal", "exit record", "MaxExitRecordsPerMinute", c.max_exit_records_per_minute,
               std::to_string(due.suppressed.in_kernel) + " of them suppressed in the kernel");
    else
      write_exit_record(due.event, due.suppressed, true);
  }
  for (auto& due : kill_limiter_.take_due(now, stopping)) {
    if (stopping)
      log_owed(due, "OOM kill(s) without a snapshot", "OOM-kill record", "MaxOomKillRecordsPerMinute",
               c.max_oom_kill_records_per_minute,
               "over " + std::to_string(span_ms(due.suppressed, due.event.event.ktime_ns)) + " ms");
    else
      open_kill_record(due.event, due.suppressed, true);
  }
}

void Agent::log_owed(const ContainerRecordLimiter::Due& due, const char* events, const char* record,
                     const char* key, uint64_t limit, const std::string& detail) const {
  log_->warn("{}: {} {} since its last {} not recorded ({} = {}), {}", printable(due.container),
             due.suppressed.total + 1, events, record, key, limit, detail);
}

// A container gone: what its bounds still owe is written now.
void Agent::forget_limited_records(const std::string& gone) {
  if (auto owed = exit_limiter_.forget(gone)) write_exit_record(owed->event, owed->suppressed, true);
  if (auto owed = kill_limiter_.forget(gone)) open_kill_record(owed->event, owed->suppressed, true);
}

void Agent::finalize(uint64_t id) {
  std::optional<Incident> taken = book_.take(id);
  if (!taken) return;
  Incident& inc = *taken;
  if (inc.victim && bpf_) bpf_->untrack_pid(inc.victim->pid);
  // A group kill of one process (the others had exited, or were exempt) still
  // shows in the memcg's oom_group_kill counter (v2), against the figure read
  // when the collection was decided.
  if (inc.oom_kill && !inc.oom_kill->group_kill && cgroups_ && inc.container.stats.events.count("oom_group_kill")) {
    const MemcgStats now = read_memcg(cgroups_->fs(), inc.container.cgroup_path);
    inc.oom_kill->group_kill = IncidentBook::group_kill_counter_rose(inc.container.stats.events, now.events);
  }
  if (inc.oom_kill && kernel_log_) attach_kernel_report(*inc.oom_kill);
  if (hold_for_last_gasp(inc)) return;
  name_then_write(std::move(inc));
}

// The kernel printed its report before it marked the victim, so by the
// record (a second later, or at the victim's exit) it is in the log: read
// what is waiting, then look it up by the victim and the time. The kmsg
// clock (local_clock) and the BPF one (CLOCK_MONOTONIC) differ by little
// on a running host; the window only keeps a reused pid from matching.
void Agent::attach_kernel_report(OomKillInfo& k) {
  constexpr uint64_t kReportWindowUs = 30'000'000;
  kernel_log_->drain();
  if (const KernelOomReport* r = kernel_log_->reports().find(k.pid, k.kernel_ns / 1000, kReportWindowUs))
    k.kernel_report = *r;
  else
    log_->debug("OOM kill of {}: no kernel report of it in the kernel's log ({})", k.pid, kernel_log_->source());
}

// The pod's and container's names (pod_identity.h), looked up once per
// record, never per event: a scan of the kubelet's directories, bounded at
// kPodLogMaxEntries entries, that opens no FIFO and follows no symlink a
// target may plant. Bounded is not free — thousands of entries per record,
// in a flood of records — so it runs on namer_, and the loop only writes the
// result. When namer_'s queue is full the record goes without names (and
// says so in the log) rather than wait; at shutdown the scan runs on the
// loop, which has nothing left to delay.
void Agent::name_then_write(Incident inc) {
  const std::string& root = options_.config.pod_log_root;
  if (root.empty() || !inc.container.ref || inc.container.ref->pod_uid.empty()) {
    write_record(inc);
    return;
  }
  const uint64_t id = inc.id;
  const ContainerRef ref = *inc.container.ref;
  if (stopping_) {
    PodLookupNotes notes;
    inc.container.pod = lookup_pod_identity(root, ref.pod_uid, ref.id, &notes);
    if (!notes.why.empty()) log_->debug("incident {}: pod names: {}", id, printable(notes.why));
    write_record(inc);
    return;
  }
  naming_.emplace(id, std::move(inc));
  const bool queued = namer_->post([this, id, root, ref] {
    PodLookupNotes notes;
    auto pod = lookup_pod_identity(root, ref.pod_uid, ref.id, &notes);
    boost::asio::post(io_, [this, id, pod = std::move(pod), why = std::move(notes.why)] { on_named(id, pod, why); });
  });
  if (!queued) {
    log_->warn("incident {}: written without pod names: {} records are already waiting for theirs", id, kNamingQueue);
    on_named(id, std::nullopt, "");
  }
}

void Agent::on_named(uint64_t id, std::optional<PodIdentity> pod, const std::string& why) {
  auto it = naming_.find(id);
  if (it == naming_.end()) return;  // written at shutdown meanwhile
  Incident inc = std::move(it->second);
  naming_.erase(it);
  if (!why.empty()) log_->debug("incident {}: pod names: {}", id, printable(why));
  inc.container.pod = std::move(pod);
  write_record(inc);
}

// namer_ has stopped: the records it had not named get their names here.
void Agent::write_unnamed_at_shutdown() {
  std::map<uint64_t, Incident> waiting = std::move(naming_);
  naming_.clear();
  for (auto& [id, inc] : waiting) name_then_write(std::move(inc));
}

void Agent::write_record(Incident& inc) {
  RecordContext ctx;
  ctx.node = node_;
  ctx.clocks = ClockPair::now();
  ++records_written_;
  ctx.agent = counters();
  std::string why;
  if (!sink_writer_ || !sink_writer_->post(record_line(to_json(inc, ctx)), &why))
    log_->error("incident {}: record not written: {}", inc.id, sink_writer_ ? why : std::string("no record writer"));
  count_incident(metrics_, inc);
  publish_metrics();
  log_->info("incident {} recorded: trigger {}, container {}, victim {}, collection {}{}", inc.id, inc.trigger.type,
             printable(inc.container.cgroup_path), inc.victim ? std::to_string(inc.victim->pid) : "none",
             to_string(inc.outcome), inc.oom_kill ? ", OOM kill of " + std::to_string(inc.oom_kill->pid) : "");
}

}  // namespace oomsnap
