#include "agent/agent.h"
#include "agent/privileges.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>

#include <boost/asio/post.hpp>

#include "agent/collect.h"
#include "agent/incident_book.h"
#include "agent/incident_metrics.h"
#include "agent/version.h"
#include "agent/no_snapshot_reason.h"
#include "agent/pod_identity.h"
#include "base/text.h"
#include "core/log_escape.h"
#include "core/proc_info.h"

namespace oomsnap {

namespace asio = boost::asio;

namespace {

std::string host_name() {
  if (const char* n = std::getenv("OOMSNAP_NODE_NAME"); n && *n) return n;
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::chrono::nanoseconds until(MonoNs deadline) {
  MonoNs now = monotonic_now_ns();
  return std::chrono::nanoseconds(deadline > now ? deadline - now : 0);
}

double unix_now() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// "file:/var/log/oomsnap/oomsnap.jsonl" -> "file": a sink label names its
// kind, never a path.
std::string sink_kind(const std::string& name) { return name.substr(0, name.find(':')); }

// How often the loop proves it turns (AgentHealth allows 5 s without).
constexpr std::chrono::seconds kHeartbeat{1};

// How long the record writer may take to write what is pending at shutdown
// (each sink operation is bounded by 1 s; SIGTERM must stop within 2 s).
constexpr std::chrono::milliseconds kSinkStopWait{1000};

// The pod's and container's names for a record (pod_identity.h), looked up
// once per record, never per event. This runs on the loop: a scan of the
// kubelet's directories on the node's own disk, bounded at kPodLogMaxEntries
// entries, that opens no FIFO and follows no symlink a target may plant.
void name_pod(IncidentContainer& c, const std::string& log_root, uint64_t incident, spdlog::logger& log) {
  if (log_root.empty() || !c.ref || c.ref->pod_uid.empty()) return;
  PodLookupNotes notes;
  c.pod = lookup_pod_identity(log_root, c.ref->pod_uid, c.ref->id, &notes);
  if (!notes.why.empty()) log.debug("incident {}: pod names: {}", incident, printable(notes.why));
}

}  // namespace

Agent::Agent(asio::io_context& io, AgentOptions options, std::shared_ptr<spdlog::logger> log)
    : io_(io),
      options_(std::move(options)),
      log_(std::move(log)),
      node_(options_.node_name.empty() ? host_name() : options_.node_name),
      policy_(PolicyOptions{}),
      signals_(io),
      rescan_timer_(io),
      policy_timer_(io),
      heartbeat_timer_(io),
      watchdog_timer_(io),
      book_timer_(io),
      metrics_(kOomsnapVersion),
      sandbox_(std::make_unique<CaptureSandbox>(SandboxOptions{})),
      worker_(std::make_unique<SerialWorker>(16)) {}

Agent::~Agent() {
  http_.reset();  // its thread reads metrics_ and health_: stopped first
  sandbox_->cancel();  // a running capture ends now rather than at its deadline
  if (worker_) worker_->stop();
}

bool Agent::blacklisted(const std::string& trigger) const {
  const auto& b = options_.config.trigger_blacklist;
  return std::find(b.begin(), b.end(), trigger) != b.end();
}

CgroupTriggerOptions Agent::trigger_options() const {
  CgroupTriggerOptions to;
  to.scope = options_.config.cgroup_scope;
  to.threshold_percent = options_.config.threshold_percent;
  to.threshold = !blacklisted("threshold");
  to.memory_events = !blacklisted("memory_events");
  to.psi = !blacklisted("psi");
  return to;
}

CaptureOptions Agent::capture_options() const {
  CaptureOptions o;
  o.max_entries = options_.config.max_memory_object_entries;
  o.budget = options_.config.run_tracing_tool_timeout;
  // The record carries the census total and its 5 largest groups (issue 15):
  // enough to name a goroutine leak without bloating every incident.
  o.max_goroutine_groups = 5;
  return o;
}

SandboxOptions Agent::sandbox_options() const {
  const AgentConfig& c = options_.config;
  SandboxOptions o;
  o.grace = c.capture_grace;
  o.memory_bytes = c.capture_memory_max;
  o.result_max_bytes = c.capture_result_max;
  o.max_budget = c.run_tracing_tool_timeout;
  return o;
}

nlohmann::json Agent::counters() const {
  const SinkWriterCounters s = sink_writer_ ? sink_writer_->counters() : SinkWriterCounters{};
  return {{"bpf_ring_drops", bpf_ ? bpf_->dropped() : 0},
          {"bpf_oom_ring_drops", bpf_ ? bpf_->dropped_oom() : 0},
          {"exit_events_suppressed", suppressed_exit_events_},
          {"exit_records_suppressed", suppressed_exit_records_},
          {"queue_overflows", queue_overflows_},
          {"events", events_seen_},
          {"pressure_events_suppressed", suppressed_pressure_},
          {"unknown_cgroup_events", unknown_cgroup_events_},
          {"records_written", records_written_},
          {"sink_errors", s.sink_errors()},
          {"records_lost", s.lost()}};
}

void Agent::apply_config() {
  const AgentConfig& c = options_.config;
  PolicyOptions p;
  p.threshold_percent = c.threshold_percent;
  p.interval = c.interval_tracing;
  p.max_per_minute = c.node_max_captures_per_minute;
  p.batch_window = c.batch_window;
  policy_.set_options(p);
  // The worker is the sandbox's only user: it takes the new limits there and
  // starts the next capture process ahead of the first capture.
  worker_->post([box = sandbox_.get(), so = sandbox_options(), log = log_] {
    box->set_options(so);
    std::string error;
    if (!box->prestart(error)) log->warn("capture process not pre-started (will retry at capture): {}", error);
  });
}

bool Agent::open_sinks(std::string& error) {
  SinkSet sinks;
  const AgentConfig& c = options_.config;
  if (c.stdout_sink) sinks.add(make_stream_sink(STDOUT_FILENO, "stdout"));
  if (c.file_sink) {
    RotatingFileOptions fo;
    fo.dir = c.storage_path;
    fo.max_bytes = c.storage_max_bytes;
    fo.max_files = c.storage_max_files;
    auto f = make_rotating_file_sink(std::move(fo), error);  // refuses a store others can write
    if (!f) return false;
    sinks.add(std::move(f));
  }
  if (sinks.size() == 0) {
    error = "no sink: both storage.Stdout and storage.LocalFile are off";
    return false;
  }
  if (sink_writer_) {
    sink_writer_->replace_sinks(std::move(sinks));  // SIGHUP: waiting records follow their sink
  } else {
    SinkWriterOptions wo;
    // Called on the writer thread: hand the messages to the loop to log.
    wo.on_message = [this] { asio::post(io_, [this] { log_sink_messages(); }); };
    sink_writer_ = std::make_unique<SinkWriter>(std::move(sinks), std::move(wo));
  }
  return true;
}

void Agent::log_sink_messages() {
  if (!sink_writer_) return;
  for (const auto& m : sink_writer_->take_messages()) log_->warn("record sink: {}", m);
}

// Names every capability the agent lacks with what it costs; only a missing
// BPF capability stops the start (nothing would be recorded).
bool Agent::check_privileges(std::string& error) {
  const PrivilegeFacts facts = current_privilege_facts();
  const auto missing = missing_privileges(facts);
  for (const auto& m : missing) {
    if (m.fatal) continue;
    log_->warn("missing capability {}: {}", m.capabilities, m.consequence);
  }
  for (const auto& m : missing) {
    if (!m.fatal) continue;
    error = "missing capability " + m.capabilities + ": " + m.consequence +
            " (run as root, or grant: " + needed_capabilities(facts) + ")";
    return false;
  }
  if (missing.empty()) log_->debug("capabilities: all needed are effective ({})", needed_capabilities(facts));
  return true;
}

bool Agent::start(std::string& error) {
  const AgentConfig& c = options_.config;
  apply_config();

  std::string mountinfo;
  read_text_file("/proc/self/mountinfo", mountinfo);
  auto fs = find_memory_cgroupfs(mountinfo, c.cgroup_root);
  if (!fs) {
    error = c.cgroup_root.empty()
                ? "no memory cgroup controller found in /proc/self/mountinfo (neither v1 'memory' nor a cgroup2 "
                  "mount with 'memory' in cgroup.controllers)"
                : "cgroup.Root '" + c.cgroup_root + "' is not a memory cgroup directory";
    return false;
  }
  if (list_memcgs(*fs, c.cgroup_scope, 1).empty()) {
    error = "cgroup.Scope '" + c.cgroup_scope + "' does not exist under " + fs->mount;
    return false;
  }

  if (!check_privileges(error)) return false;
  declare_incident_series(metrics_);
  health_.beat(monotonic_now_ns());
  if (!start_http(error)) return false;

  BpfEventOptions bo;
  bo.mode = options_.bpf_mode;
  bpf_ = BpfEventSource::open(bo, [this](const oomsnap_event& e) { on_bpf_event(e); }, error);
  if (!bpf_) return false;
  log_->info("BPF attached: {}", bpf_->description());
  health_.set_bpf_attached(true);

  if (!open_sinks(error)) return false;

  cgroups_ = std::make_unique<CgroupTriggers>(
      io_, *fs, trigger_options(), [this](const std::string& memcg, Trigger t) { offer(memcg, std::move(t)); }, log_);

  int bpf_fd = ::dup(bpf_->fd());
  if (bpf_fd < 0) {
    error = "dup of the ring-buffer fd failed";
    return false;
  }
  bpf_desc_ = std::make_unique<asio::posix::stream_descriptor>(io_, bpf_fd);
  arm_bpf();
  signals_.add(SIGTERM);
  signals_.add(SIGINT);
  signals_.add(SIGHUP);
  if (options_.test_stall_on_sigusr2.count() > 0) signals_.add(SIGUSR2);
  arm_signals();
  cgroups_->rescan();
  arm_rescan();
  arm_heartbeat();
  health_.set_ready(true);
  log_->info("ready: node {}; {}; threshold {}%, interval {}s per container, at most {} captures/min, batch window {}ms, OOM-kill window {}ms; "
             "blacklist [{}]; sinks: {}{}; captures {} (budget {}ms, killed at +{}ms, memory cap {} MiB)",
             node_, cgroups_->describe(), c.threshold_percent, c.interval_tracing.count(),
             c.node_max_captures_per_minute, c.batch_window.count(),
             c.oom_kill_window.count(), join(c.trigger_blacklist, ","), c.stdout_sink ? "stdout " : "",
             c.file_sink ? c.storage_path : "",
             options_.capture_in_process ? "IN THE AGENT (--capture-in-process, benchmarks only)" : "in a capture process",
             c.run_tracing_tool_timeout.count(), c.capture_grace.count(), c.capture_memory_max >> 20);
  systemd_.ready(systemd_status());
  systemd_status_ = systemd_status();
  if (systemd_.active()) {
    if (auto w = systemd_.watchdog_interval()) {
      log_->info("systemd: READY=1 sent; WATCHDOG=1 every {} ms", w->count());
      arm_watchdog();
    } else {
      log_->info("systemd: READY=1 sent (no watchdog)");
    }
  }
  return true;
}

std::string Agent::http_listen() const {
  return options_.http_listen ? *options_.http_listen : options_.config.http_listen;
}

bool Agent::start_http(std::string& error) {
  http_running_ = http_listen();
  if (http_running_.empty()) {
    log_->info("http: off ([http] Listen = \"\")");
    return true;
  }
  std::string why;
  auto address = parse_listen_address(http_running_, why);
  if (!address) {
    error = "http: bad listen address '" + http_running_ + "': " + why;
    return false;
  }
  const auto text = [](HealthVerdict v) {
    return HttpResponse{v.ok ? 200u : 503u, "text/plain; charset=utf-8", v.reason + "\n"};
  };
  std::map<std::string, HttpHandler> routes;
  routes["/metrics"] = [this] {
    return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", metrics_.render()};
  };
  routes["/healthz"] = [this, text] { return text(health_.live(monotonic_now_ns())); };
  routes["/readyz"] = [this, text] { return text(health_.ready()); };
  HttpServerOptions ho;
  ho.address = *address;
  http_ = HttpServer::start(ho, std::move(routes), error);
  if (!http_) {
    const bool in_use = error.find("in use") != std::string::npos;
    error = "http: " + error + " (" + (options_.http_listen ? "--http-listen" : "[http] Listen") +
            (in_use ? "; another agent or program has the port" : "") + ")";
    return false;
  }
  log_->info("http: listening on {} (/metrics, /healthz, /readyz)", to_string(http_->bound()));
  return true;
}

void Agent::arm_watchdog() {
  systemd_.watchdog();
  watchdog_timer_.expires_after(*systemd_.watchdog_interval());
  watchdog_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopping_) return;
    arm_watchdog();
  });
}

std::string Agent::systemd_status() const {
  const size_t watched = cgroups_ ? cgroups_->watched() : 0;
  return "watching " + std::to_string(watched) + " memory cgroups; " + std::to_string(records_written_) +
         " records written; " + std::to_string(book_.size()) + " incidents open";
}

// STATUS= only when it changed (every heartbeat otherwise).
void Agent::notify_status() {
  if (!systemd_.active()) return;
  std::string s = systemd_status();
  if (s == systemd_status_) return;
  systemd_.status(s);
  systemd_status_ = std::move(s);
  if (const int e = systemd_.last_error()) log_->debug("systemd: sd_notify failed: {}", std::strerror(-e));
}

void Agent::arm_heartbeat() {
  health_.beat(monotonic_now_ns());
  publish_metrics();
  notify_status();
  heartbeat_timer_.expires_after(kHeartbeat);
  heartbeat_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopping_) return;
    arm_heartbeat();
  });
}

void Agent::publish_metrics() {
  LoopTotals t;
  t.bpf_ring_drops = bpf_ ? bpf_->dropped() : 0;
  t.pressure_events_suppressed = suppressed_pressure_;
  t.queue_overflows = queue_overflows_;
  t.watched_cgroups = cgroups_ ? cgroups_->watched() : 0;
  t.last_event_unix_seconds = last_event_unix_;
  if (sink_writer_)
    for (const auto& s : sink_writer_->counters().sinks) t.sinks.push_back({sink_kind(s.name), s.written, s.errors});
  metrics_.publish(t);
}

void Agent::arm_bpf() {
  bpf_desc_->async_wait(asio::posix::stream_descriptor::wait_read, [this](const boost::system::error_code& ec) {
    if (ec || stopping_) return;
    int n = bpf_->consume();
    if (n < 0) log_->warn("ring buffer consume failed: {}", n);
    arm_bpf();
  });
}

void Agent::arm_signals() {
  signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    if (sig == SIGHUP) {
      reload_config();
      arm_signals();
      return;
    }
    if (sig == SIGUSR2) {  // only registered for tests (AgentOptions::test_stall_on_sigusr2)
      log_->warn("test hook: blocking the event loop for {} s", options_.test_stall_on_sigusr2.count());
      std::this_thread::sleep_for(options_.test_stall_on_sigusr2);
      log_->warn("test hook: event loop running again");
      arm_signals();
      return;
    }
    log_->info("signal {}: stopping", sig);
    stop();
  });
}

void Agent::arm_rescan() {
  rescan_timer_.expires_after(options_.config.rescan_interval);
  rescan_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopping_) return;
    flush_exit_records(false);
    for (const auto& gone : cgroups_->rescan()) {
      policy_.forget(gone);
      last_offer_.erase(gone);
      last_collection_.erase(gone);
      if (auto owed = exit_limiter_.forget(gone)) write_exit_record(owed->exit, owed->suppressed, true);
    }
    arm_rescan();
  });
}

void Agent::reload_config() {
  systemd_.reloading();
  try {
    AgentConfig c = load_config(options_.config_path);
    options_.config = std::move(c);
  } catch (const ConfigError& e) {
    log_->error("SIGHUP: configuration not reloaded, keeping the running one: {}", e.what());
    systemd_.ready(systemd_status());
    return;
  }
  apply_config();
  std::string error;
  if (!open_sinks(error)) log_->error("SIGHUP: sinks not reopened, keeping the old ones: {}", error);
  cgroups_->set_options(trigger_options());
  cgroups_->rescan();
  if (http_listen() != http_running_)
    log_->warn("SIGHUP: [http] Listen changed to '{}': takes effect when the agent restarts (still on '{}')",
               http_listen(), http_running_);
  log_->info("SIGHUP: configuration reloaded from {}; {}",
             options_.config_path.empty() ? "(defaults)" : options_.config_path, cgroups_->describe());
  systemd_.ready(systemd_status());
}

std::optional<std::string> Agent::memcg_of_event(uint64_t cgroup_id, pid_t pid) {
  auto path = cgroups_->path_of_inode(cgroup_id);
  if (!path) {
    // A cgroup created since the last rescan: look again, at most every 200 ms.
    MonoNs now = monotonic_now_ns();
    if (now - last_unknown_rescan_ > 200'000'000ull) {
      last_unknown_rescan_ = now;
      cgroups_->rescan();
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
    default: log_->warn("unknown BPF event type {}", e.type);
  }
}

void Agent::on_pressure(const oomsnap_event& e) {
  suppressed_pressure_ += e.suppressed;
  if (blacklisted("memcg_pressure")) return;
  auto memcg = memcg_of_event(e.cgroup_id, static_cast<pid_t>(e.tgid));
  if (!memcg) return;
  auto container = cgroups_->limited_container_of(*memcg);
  if (!container) return;  // no finite limit anywhere above: never a candidate
  Trigger t;
  t.type = "memcg_pressure";
  t.source = std::string("bpf ") + to_string(bpf_->mode_of(e.type)) + ": mm_vmscan_memcg_reclaim_begin";
  t.kernel_ns = e.ktime_ns;
  t.from_bpf_clock = true;
  t.received_ns = monotonic_now_ns();
  t.pid = static_cast<pid_t>(e.tgid);
  t.counters = {{"reclaiming_memcg", *memcg}, {"order", e.order}, {"gfp_flags", e.gfp_flags},
                {"suppressed_since_last", e.suppressed}};
  offer(*container, std::move(t));
}

void Agent::offer(const std::string& memcg, Trigger trigger) {
  if (stopping_) return;
  last_event_unix_ = unix_now();
  if (!trigger.received_ns) trigger.received_ns = monotonic_now_ns();
  // An incident is an episode of one container: while it is open (collecting,
  // or waiting for the kill within OomKillWindow), the container's triggers
  // belong to its timeline, not to new incidents.
  if (book_.merge_trigger(memcg, {trigger.type, trigger.kernel_ns})) {
    log_->debug("trigger {} ({}) for {}: part of its open incident", trigger.type, trigger.source, printable(memcg));
    return;
  }
  MemcgStats stats = read_memcg(cgroups_->fs(), memcg);
  OfferResult r = policy_.offer(memcg, trigger, stats, monotonic_now_ns());
  log_->debug("trigger {} ({}) for {}: {}", trigger.type, trigger.source, printable(memcg), to_string(r));
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
  log_->info("incident {}: collecting in {} ({:.1f}% of the limit, trigger {})", id, printable(c.memcg),
             c.ratio * 100.0, c.trigger.type);

  Incident job_inc = book_.open_collection(std::move(inc), window_end);
  CgroupFs fs = cgroups_->fs();
  CaptureOptions opts = capture_options();
  CaptureFn capture = [box = sandbox_.get()](pid_t pid, const CaptureOptions& o, std::string& error) {
    return box->capture(pid, o, error);
  };
  if (options_.capture_in_process) capture = capture_process;
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
  OomKillInfo k;
  k.pid = pid;
  k.comm = std::string(e.comm, strnlen(e.comm, sizeof e.comm));
  k.memcg = *memcg;
  k.kernel_ns = e.ktime_ns;
  k.rss_bytes = (e.rss_anon_pages + e.rss_file_pages + e.rss_shmem_pages) * static_cast<uint64_t>(getpagesize());
  k.invoker = e.oom_invoker;
  k.pid_source = pid_source_name(e.pid_source);
  k.killed.push_back({k.pid, k.comm, k.rss_bytes, k.pid_source});

  const MonoNs now = monotonic_now_ns();
  const IncidentBook::KillMatch m = book_.oom_kill(k, now);
  if (m.kind == IncidentBook::KillMatch::kSameEvent) {
    if (m.added)
      log_->info("incident {}: OOM kill of {} ({}) in {}, same OOM event ({} killed)", m.id, pid, printable(k.comm),
                 printable(*memcg), book_.find(m.id)->oom_kill->killed.size());
    return;
  }
  if (m.kind == IncidentBook::KillMatch::kAttached) {
    Incident& inc = *book_.find(m.id);
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
  // victim's exit or a second.
  Incident& inc = open_kernel_incident(e, "oom_kill", "mark_victim", now + IncidentBook::kExitWaitNs);
  const uint64_t id = inc.id;
  inc.trigger.counters = {{"rss_anon_pages", e.rss_anon_pages},
                          {"rss_file_pages", e.rss_file_pages},
                          {"rss_shmem_pages", e.rss_shmem_pages}};
  describe_container(inc.container, cgroups_->limited_container_of(*memcg).value_or(*memcg));
  inc.oom_kill = k;
  inc.oom_kill->memory_stat = read_memory_stat(cgroups_->fs(), inc.container.cgroup_path);
  inc.timeline.oom_kill = e.ktime_ns;
  inc.reason = why_no_snapshot(inc.container.cgroup_path, monotonic_now_ns());
  log_->info("incident {}: OOM kill of {} ({}) in {} without a prior snapshot", id, pid, printable(k.comm),
             printable(*memcg));
  arm_book_timer();
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
      exit_limiter_.add_suppressed(exit_record_key(book_.find(m.id)->container.cgroup_path), e.suppressed);
    if (!m.collecting) finalize_due();
    return;
  }
  // A process killed in an OOM event: its exit is part of that event's
  // record, not an exit record of its own.
  if (book_.oom_killed_recently(pid, e.ktime_ns)) return;
  if (!(e.exit_code & 0x7f) || blacklisted("process_exit")) return;
  auto memcg = memcg_of_event(e.cgroup_id, 0);
  if (!memcg) return;
  HeldExit held{e, *memcg};
  auto v = exit_limiter_.admit(exit_record_key(*memcg), held, monotonic_now_ns(),
                               options_.config.max_exit_records_per_minute);
  if (!v.write) {
    ++suppressed_exit_records_;
    return;
  }
  write_exit_record(held, v.suppressed, false);
}

// The bound is per container: the nearest memcg with a limit, so a container
// that can create child cgroups does not get a fresh budget in each.
std::string Agent::exit_record_key(const std::string& memcg) const {
  return cgroups_->limited_container_of(memcg).value_or(memcg);
}

void Agent::write_exit_record(const HeldExit& held, const SuppressedExits& suppressed, bool held_back) {
  const oomsnap_event& e = held.event;
  Incident& inc = open_kernel_incident(e, "process_exit", "sched_process_exit", monotonic_now_ns());
  inc.trigger.counters = {{"comm", std::string(e.comm, strnlen(e.comm, sizeof e.comm))},
                          {"exit_code", e.exit_code},
                          {"suppressed_exits", suppressed.total},
                          {"suppressed_exits_in_kernel", suppressed.in_kernel}};
  // Written when the container's window ended, not when it exited.
  if (held_back) inc.trigger.counters["held_until_window_end"] = true;
  describe_container(inc.container, held.memcg);
  inc.exit = ExitInfo{static_cast<pid_t>(e.tgid), e.ktime_ns, e.exit_code};
  inc.timeline.exit = e.ktime_ns;
  finalize(inc.id);
}

// Containers whose exit-record window ended with exits unreported get one
// record now, carrying the count. At shutdown a record would break the
// bound (the window has not ended), so what is owed is logged instead.
void Agent::flush_exit_records(bool stopping) {
  for (auto& due : exit_limiter_.take_due(monotonic_now_ns(), stopping)) {
    if (!stopping) {
      write_exit_record(due.exit, due.suppressed, true);
      continue;
    }
    log_->warn("{}: {} exit(s) by a signal since its last exit record not recorded (MaxExitRecordsPerMinute = {}), "
               "{} of them suppressed in the kernel",
               printable(due.container), due.suppressed.total + 1, options_.config.max_exit_records_per_minute,
               due.suppressed.in_kernel);
  }
}

std::string Agent::why_no_snapshot(const std::string& container, MonoNs now) const {
  NoSnapshotFacts f;
  f.now = now;
  f.deferred = policy_.is_deferred(container);
  f.deferred_by_budget = policy_.deferred_by_budget(container);
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

void Agent::describe_container(IncidentContainer& c, const std::string& memcg) const {
  c.cgroup_path = memcg;
  c.stats = read_memcg(cgroups_->fs(), memcg);
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
  name_pod(inc.container, options_.config.pod_log_root, id, *log_);
  RecordContext ctx;
  ctx.node = node_;
  ctx.clocks = ClockPair::now();
  ++records_written_;
  ctx.agent = counters();
  std::string why;
  if (!sink_writer_ || !sink_writer_->post(record_line(to_json(inc, ctx)), &why))
    log_->error("incident {}: record not written: {}", id, sink_writer_ ? why : std::string("no record writer"));
  count_incident(metrics_, inc);
  publish_metrics();
  log_->info("incident {} recorded: trigger {}, container {}, victim {}, collection {}{}", id, inc.trigger.type,
             printable(inc.container.cgroup_path), inc.victim ? std::to_string(inc.victim->pid) : "none",
             to_string(inc.outcome), inc.oom_kill ? ", OOM kill of " + std::to_string(inc.oom_kill->pid) : "");
}

void Agent::stop() {
  if (stopping_) return;
  stopping_ = true;
  systemd_.stopping();
  policy_timer_.cancel();
  rescan_timer_.cancel();
  heartbeat_timer_.cancel();
  watchdog_timer_.cancel();
  book_timer_.cancel();
  signals_.cancel();
  if (bpf_desc_) bpf_desc_->cancel();
  // A running capture is killed now (its incident says so); its result is
  // posted before the final step below, which then sees it.
  sandbox_->cancel();
  size_t dropped = worker_->stop();
  if (dropped) log_->warn("{} queued collections dropped at shutdown", dropped);
  asio::post(io_, [this] {
    flush_exit_records(true);  // logs what the exit-record bound still owes
    for (uint64_t id : book_.close_all(monotonic_now_ns(), "the agent stopped before this collection ran")) finalize(id);
    cgroups_.reset();
    bpf_desc_.reset();
    if (sink_writer_) {
      // Bounded: every sink call gives up at the deadline; what is left is counted lost.
      const size_t lost = sink_writer_->stop(SinkWriter::Clock::now() + kSinkStopWait);
      log_sink_messages();
      if (lost) log_->warn("{} record(s) not written by the shutdown deadline", lost);
    }
    log_->info("stopped: {}", counters().dump());
    io_.stop();
  });
}

}  // namespace oomsnap
