// What the agent does with each event, on its loop: a trigger goes through the
// policy to a collection; OOM kills and exits join their incidents (the
// IncidentBook); an incident that is due becomes a record. The loop's set-up,
// timers and shutdown are in agent.cpp.
#include "agent/agent.h"

#include <unistd.h>

#include <ctime>

#include <boost/asio/post.hpp>

#include "agent/incident/collect.h"
#include "agent/incident/incident_book.h"
#include "agent/incident/incident_metrics.h"
#include "agent/incident/no_snapshot_reason.h"
#include "base/text.h"
#include "base/log_escape.h"
#include "core/proc_info.h"

namespace oomsnap {

namespace asio = boost::asio;

namespace {

std::chrono::nanoseconds until(MonoNs deadline) {
  MonoNs now = monotonic_now_ns();
  return std::chrono::nanoseconds(deadline > now ? deadline - now : 0);
}

double unix_now() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

}  // namespace

std::optional<std::string> Agent::memcg_of_event(uint64_t cgroup_id, pid_t pid) {
  auto path = cgroups_->path_of_inode(cgroup_id);
  if (!path) {
    // A cgroup created since the last rescan: look again, at most every 200 ms.
    MonoNs now = monotonic_now_ns();
    if (now - last_unknown_rescan_ > 200'000'000ull) {
      last_unknown_rescan_ = now;
      rescan_cgroups();
      path = cgroups_->path_of_inode(cgroup_id);
    }
  }
  if (!path && pid > 0) path = memcg_of_pid(cgroups_->fs(), pid);
  if (!path) {
    ++unknown_cgroup_events_;
    return std::nullopt;
  }
  if (!cgroups_->in_scope(*path)) return std::nullopt;
  return path;
}

void Agent::on_bpf_event(const oomsnap_event& e) {
  ++events_seen_;
  last_event_unix_ = unix_now();
  switch (e.type) {
    case OOMSNAP_EV_MEMCG_PRESSURE: on_pressure(e); break;
    case OOMSNAP_EV_OOM_KILL: on_oom_kill(e); break;
    case OOMSNAP_EV_PROCESS_EXIT: on_exit(e); break;
    case OOMSNAP_EV_USAGE_THRESHOLD: on_usage_threshold(e); break;
    default: log_->warn("unknown BPF event type {}", e.type);
  }
}

// A trigger from a BPF event: its kernel timestamp, the task it names, and
// which program (and attach mode) saw `what`.
Trigger Agent::bpf_trigger(const oomsnap_event& e, const char* type, const std::string& what) const {
  Trigger t;
  t.type = type;
  t.source = std::string("bpf ") + to_string(bpf_->mode_of(e.type)) + ": " + what;
  t.kernel_ns = e.ktime_ns;
  t.from_bpf_clock = true;
  t.received_ns = monotonic_now_ns();
  t.pid = static_cast<pid_t>(e.tgid);
  return t;
}

void Agent::on_pressure(const oomsnap_event& e) {
  suppressed_pressure_ += e.suppressed;
  if (blacklisted("memcg_pressure")) return;
  auto memcg = memcg_of_event(e.cgroup_id, static_cast<pid_t>(e.tgid));
  if (!memcg) return;
  auto container = cgroups_->limited_container_of(*memcg);
  if (!container) return;  // no finite limit anywhere above: never a candidate
  Trigger t = bpf_trigger(e, "memcg_pressure", "mm_vmscan_memcg_reclaim_begin");
  t.counters = {{"reclaiming_memcg", *memcg}, {"order", e.order}, {"gfp_flags", e.gfp_flags},
                {"suppressed_since_last", e.suppressed}};
  offer(*container, std::move(t));
}

// The kernel saw a watched container's usage at or above its threshold (the
// event names the container itself, not the charging task's memcg).
void Agent::on_usage_threshold(const oomsnap_event& e) {
  if (blacklisted("threshold")) return;
  auto memcg = memcg_of_event(e.cgroup_id, 0);
  if (!memcg) return;
  const uint64_t page = static_cast<uint64_t>(::getpagesize());
  Trigger t = bpf_trigger(e, "threshold", "rss_stat: usage at or above the threshold");
  t.counters = {{"threshold_bytes", e.threshold_pages * page}, {"usage_bytes", e.usage_pages * page}};
  offer(*memcg, std::move(t));
}

void Agent::offer(const std::string& memcg, Trigger trigger) {
  if (stopping_) return;
  last_event_unix_ = unix_now();
  if (!trigger.received_ns) trigger.received_ns = monotonic_now_ns();
  // An incident is an episode of one container: while it is open (collecting,
  // or waiting for the kill within OomKillWindow), the container's triggers
  // belong to its timeline, not to new incidents.
  if (book_.merge_trigger(memcg, {trigger.type, trigger.kernel_ns, trigger.source})) {
    log_->debug("trigger {} ({}) for {}: part of its open incident", trigger.type, trigger.source, printable(memcg));
    return;
  }
  MemcgStats stats = read_memcg(cgroups_->fs(), memcg);
  OfferResult r = policy_.offer(memcg, trigger, stats, monotonic_now_ns());
  const auto deferral = policy_.deferral(memcg);
  log_->debug("trigger {} ({}) for {}: {}{}{}", trigger.type, trigger.source, printable(memcg), to_string(r),
              r == OfferResult::kDeferred && deferral ? ": " : "",
              r == OfferResult::kDeferred && deferral ? to_string(*deferral) : "");
  last_offer_[memcg] = r;
  if (r == OfferResult::kOpenedBatch || r == OfferResult::kDeferred) arm_policy_timer();
}

void Agent::arm_policy_timer() {
  auto deadline = policy_.next_deadline();
  if (!deadline) {
    policy_timer_.cancel();
    return;
  }
  policy_timer_.expires_after(until(*deadline));
  policy_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopping_) return;
    on_policy_deadline();
  });
}

void Agent::on_policy_deadline() {
  const MonoNs now = monotonic_now_ns();
  const CgroupFs& fs = cgroups_->fs();
  Decision d = policy_.on_deadline(now, [&fs](const std::string& m) { return read_memcg(fs, m); });
  for (const auto& [memcg, why] : d.dropped) log_->info("not collecting {}: {}", printable(memcg), printable(why));
  for (auto& c : d.collect) start_collection(std::move(c), now);
  arm_policy_timer();
}

void Agent::start_collection(Candidate c, MonoNs decided) {
  const uint64_t id = next_id_++;
  Incident inc;
  inc.id = id;
  inc.trigger = c.trigger;
  inc.merged_triggers = c.merged;
  inc.triggers_seen = c.seen;
  inc.rule = c.rule;
  inc.growth = c.growth;
  inc.container.cgroup_path = c.memcg;
  inc.container.inode = c.stats.inode;
  inc.container.stats = c.stats;
  inc.container.ref = container_of(c.memcg);
  inc.timeline.trigger = c.trigger.kernel_ns;
  inc.timeline.received = c.trigger.received_ns;
  inc.timeline.decided = decided;
  const MonoNs window_end =
      decided + static_cast<MonoNs>(
                    std::chrono::duration_cast<std::chrono::nanoseconds>(options_.config.oom_kill_window).count());
  log_->info("incident {}: collecting in {} ({:.1f}% of the limit, trigger {}, rule {})", id, printable(c.memcg),
             c.ratio * 100.0, c.trigger.type, c.rule);

  Incident job_inc = book_.open_collection(std::move(inc), window_end);
  CgroupFs fs = cgroups_->fs();
  CaptureOptions opts = capture_options();
  CaptureFn capture = [box = sandbox_.get()](pid_t pid, const CaptureOptions& o, std::string& error) {
    return box->capture(pid, o, error);
  };
  if (options_.test.capture_in_process) capture = capture_process;
  const size_t max_processes = options_.config.max_processes_per_incident;
  bool queued = worker_->post([this, job_inc, fs, opts, capture, max_processes, box = sandbox_.get()]() mutable {
    collect_incident(job_inc, fs, opts, capture, max_processes);
    asio::post(io_, [this, done = std::move(job_inc)]() mutable { on_collected(std::move(done)); });
    // The next capture process starts now, off the next incident's path.
    std::string error;
    if (!box->prestart(error)) log_->warn("capture process not pre-started (will retry at capture): {}", error);
  });
  if (!queued) {
    ++queue_overflows_;
    job_inc.outcome = CollectionOutcome::kQueueFull;  // the lambda that would have filled it was not queued
    job_inc.reason = "the collection queue was full; incident recorded without a snapshot";
    book_.collected(std::move(job_inc), monotonic_now_ns());
    finalize(id);
  }
}

void Agent::on_collected(Incident done) {
  const uint64_t id = done.id;
  if (!book_.collected(std::move(done), monotonic_now_ns())) return;
  const Incident& inc = *book_.find(id);
  last_collection_[inc.container.cgroup_path] = {inc.id, monotonic_now_ns(), inc.outcome, inc.reason};
  // The forecast's expected capture time for this container: from the
  // decision (the batch window's end) to the victim's snapshot.
  if (inc.outcome == CollectionOutcome::kCollected && inc.timeline.snapshot_complete > inc.timeline.decided)
    capture_cost_.learn(inc.container.cgroup_path,
                        static_cast<double>(inc.timeline.snapshot_complete - inc.timeline.decided) / 1e9 +
                            static_cast<double>(options_.config.batch_window.count()) / 1e3,
                        inc.container.stats.usage_bytes.value_or(0));
  log_->info("incident {}: {}{}{} in {} ms", inc.id, to_string(inc.outcome),
             inc.victim ? " victim " + std::to_string(inc.victim->pid) + " (" + printable(inc.victim->comm) + ")" : "",
             inc.capture ? ", snapshot " + std::string(to_string(inc.capture->result.snapshot.status)) : "",
             inc.timeline.snapshot_complete && inc.timeline.collection_start
                 ? (inc.timeline.snapshot_complete - inc.timeline.collection_start) / 1'000'000
                 : 0);
  if (inc.victim && !inc.exit) bpf_->track_pid(inc.victim->pid);
  finalize_due();
}

void Agent::on_oom_kill(const oomsnap_event& e) {
  if (blacklisted("oom_kill")) return;
  const pid_t pid = static_cast<pid_t>(e.tgid);
  auto memcg = memcg_of_event(e.cgroup_id, pid);
  if (!memcg) return;
  const OomKillInfo k = oom_kill_info(e, *memcg);
  const MonoNs now = monotonic_now_ns();
  const IncidentBook::KillMatch m = book_.oom_kill(k, now);
  if (m.kind == IncidentBook::KillMatch::kSameEvent) {
    if (m.added)
      log_->info("incident {}: OOM kill of {} ({}) in {}, same OOM event ({} killed)", m.id, pid, printable(k.comm),
                 printable(*memcg), book_.find(m.id)->oom_kill->killed.size());
    return;
  }
  if (m.kind == IncidentBook::KillMatch::kMarkedAgain) {
    log_->info("OOM kill mark of {} ({}) in {}: killed already, marked again while it exits: not a new kill", pid,
               printable(k.comm), printable(*memcg));
    return;
  }
  if (m.kind == IncidentBook::KillMatch::kAttached) {
    Incident& inc = *book_.find(m.id);
    // A later kill without a snapshot must not read "recorded without a kill".
    if (auto last = last_collection_.find(inc.container.cgroup_path);
        last != last_collection_.end() && last->second.incident == m.id)
      last->second.with_kill = true;
    inc.oom_kill->memory_stat = read_memory_stat(cgroups_->fs(), inc.container.cgroup_path);
    if (m.collecting) {
      log_->info("incident {}: OOM kill of {} arrived during collection", inc.id, pid);
    } else {
      auto lead = lead_ms(inc);
      log_->info("incident {}: OOM kill of {} ({}) in {}; matches victim: {}; lead {} ms", inc.id, pid,
                 printable(k.comm), printable(*memcg), inc.oom_kill->matches_victim,
                 lead ? std::to_string(*lead) : "n/a");
    }
    arm_book_timer();
    return;
  }

  // No snapshot before this kill: the kill is recorded anyway, after the
  // victim's exit or a second, within the container's bound.
  const std::string container = record_limit_key(*memcg);
  HeldEvent held{e, *memcg, container, cgroups_->last_stats(container)};
  auto v = kill_limiter_.admit(container, held, now, options_.config.max_oom_kill_records_per_minute);
  if (!v.write) {
    ++suppressed_oom_kill_records_;
    log_->debug("OOM kill of {} in {}: counted into the container's next OOM-kill record", pid, printable(*memcg));
    return;
  }
  open_kill_record(held, v.suppressed, false);
}

void Agent::on_exit(const oomsnap_event& e) {
  suppressed_exit_events_ += e.suppressed;
  const pid_t pid = static_cast<pid_t>(e.tgid);
  ExitInfo x;
  x.pid = pid;
  x.kernel_ns = e.ktime_ns;
  x.exit_code = e.exit_code;
  if (const IncidentBook::ExitMatch m = book_.exit(x, monotonic_now_ns()); m.id) {
    // The exits the kernel suppressed before this one still belong to the
    // container's next exit record.
    if (e.suppressed)
      exit_limiter_.add_suppressed(record_limit_key(book_.find(m.id)->container.cgroup_path), e.suppressed);
    if (!m.collecting) finalize_due();
    return;
  }
  // A process killed in an OOM event: its exit is part of that event's
  // record, not an exit record of its own.
  if (book_.oom_killed_recently(pid, e.ktime_ns)) return;
  if (!(e.exit_code & 0x7f) || blacklisted("process_exit")) return;
  auto memcg = memcg_of_event(e.cgroup_id, 0);
  if (!memcg) return;
  HeldEvent held{e, *memcg, *memcg, cgroups_->last_stats(*memcg)};
  auto v = exit_limiter_.admit(record_limit_key(*memcg), held, monotonic_now_ns(),
                               options_.config.max_exit_records_per_minute);
  if (!v.write) {
    ++suppressed_exit_records_;
    return;
  }
  write_exit_record(held, v.suppressed, false);
}

std::string Agent::why_no_snapshot(const std::string& container, MonoNs now) const {
  NoSnapshotFacts f;
  f.now = now;
  f.deferred = policy_.deferral(container);
  f.in_batch = policy_.in_batch(container);
  f.interval_until = policy_.interval_until(container, now);
  f.budget_free_at = policy_.budget_free_at(now);
  f.max_per_minute = options_.config.node_max_captures_per_minute;
  if (auto it = last_collection_.find(container); it != last_collection_.end()) f.last = it->second;
  if (auto it = last_offer_.find(container); it != last_offer_.end()) f.last_offer = it->second;
  f.interval_tracing_s = options_.config.interval_tracing.count();
  f.oom_kill_window_ms = options_.config.oom_kill_window.count();
  f.threshold_percent = options_.config.threshold_percent;
  return no_snapshot_reason(f);
}

void Agent::describe_container(IncidentContainer& c, const std::string& memcg, const MemcgStats* last_seen) const {
  c.cgroup_path = memcg;
  c.stats = read_memcg(cgroups_->fs(), memcg);
  if (!c.stats.inode && last_seen) c.stats = *last_seen;
  c.inode = c.stats.inode;
  c.ref = container_of(memcg);
}

Incident& Agent::open_kernel_incident(const oomsnap_event& e, const char* type, const char* tracepoint, MonoNs due) {
  Incident inc;
  inc.id = next_id_++;
  inc.trigger.type = type;
  inc.trigger.source = std::string("bpf ") + to_string(bpf_->mode_of(e.type)) + ": " + tracepoint;
  inc.trigger.kernel_ns = e.ktime_ns;
  inc.trigger.from_bpf_clock = true;
  inc.trigger.received_ns = monotonic_now_ns();
  inc.trigger.pid = static_cast<pid_t>(e.tgid);
  inc.timeline.trigger = e.ktime_ns;
  inc.timeline.received = inc.trigger.received_ns;
  return book_.open_kernel(std::move(inc), due);
}

void Agent::arm_book_timer() {
  book_timer_.cancel();
  auto next = book_.next_due();
  if (!next || stopping_) return;
  book_timer_.expires_after(until(*next));
  book_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) finalize_due();
  });
}

void Agent::finalize_due() {
  for (uint64_t id : book_.due(monotonic_now_ns())) finalize(id);
  arm_book_timer();
}

}  // namespace oomsnap
