// The agent's loop: its set-up (config, sinks, privileges, BPF, HTTP, systemd),
// its timers and signals, and its shutdown. What it does with each event is
// in agent_events.cpp.
#include "agent/agent.h"
#include "agent/ops/privileges.h"
#include "agent/ops/self_confinement.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>

#include <boost/asio/post.hpp>

#include "agent/incident/collect.h"
#include "agent/incident/incident_book.h"
#include "agent/incident/incident_metrics.h"
#include "agent/ops/version.h"
#include "agent/incident/no_snapshot_reason.h"
#include "agent/cgroup/pod_identity.h"
#include "base/text.h"
#include "base/log_escape.h"
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

// "file:/var/log/oomsnap/oomsnap.jsonl" -> "file": a sink label names its
// kind, never a path.
std::string sink_kind(const std::string& name) { return name.substr(0, name.find(':')); }

// How often the loop proves it turns (AgentHealth allows 5 s without).
constexpr std::chrono::seconds kHeartbeat{1};

// How long the record writer may take to write what is pending at shutdown
// (each sink operation is bounded by 1 s; SIGTERM must stop within 2 s).
constexpr std::chrono::milliseconds kSinkStopWait{1000};

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
      // The capture processes' stderr, capped and escaped, as warnings.
      sandbox_(std::make_unique<CaptureSandbox>(SandboxOptions{},
                                                [log = log_](const std::string& line) { log->warn("{}", line); })),
      namer_(std::make_unique<SerialWorker>(kNamingQueue)),
      last_gasp_timer_(io),
      worker_(std::make_unique<SerialWorker>(16)) {}

Agent::~Agent() {
  http_.reset();  // its thread reads metrics_ and health_: stopped first
  sandbox_->cancel();  // a running capture ends now rather than at its deadline
  if (worker_) worker_->stop();
  if (namer_) namer_->stop();
  if (last_gasp_) last_gasp_->stop();
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
  to.forecast = !blacklisted("forecast");
  to.forecast_options.floor_percent = options_.config.forecast_floor_percent;
  to.forecast_options.margin_ns = static_cast<MonoNs>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.config.forecast_margin).count());
  to.capture_seconds = [this](const std::string& memcg, uint64_t usage) {
    return capture_cost_.expected_seconds(memcg, usage);
  };
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
  o.helper_path = options_.test.capture_helper;  // empty (outside tests): the agent's own executable
  return o;
}

nlohmann::json Agent::counters() const {
  const SinkWriterCounters s = sink_writer_ ? sink_writer_->counters() : SinkWriterCounters{};
  nlohmann::json c = {{"bpf_ring_drops", bpf_ ? bpf_->dropped() : 0},
          {"bpf_oom_ring_drops", bpf_ ? bpf_->dropped_oom() : 0},
          {"exit_events_suppressed", suppressed_exit_events_},
          {"exit_records_suppressed", suppressed_exit_records_},
          {"oom_kill_records_suppressed", suppressed_oom_kill_records_},
          {"queue_overflows", queue_overflows_},
          {"events", events_seen_},
          {"pressure_events_suppressed", suppressed_pressure_},
          {"unknown_cgroup_events", unknown_cgroup_events_},
          {"records_written", records_written_},
          {"sink_errors", s.sink_errors()},
          {"records_lost", s.lost()}};
  if (last_gasp_) {
    const nlohmann::json lg = last_gasp_->counters();  // items() holds a reference: not of a temporary
    for (const auto& [k, v] : lg.items()) c["last_gasp_" + k] = v;
  }
  return c;
}

void Agent::apply_config() {
  const AgentConfig& c = options_.config;
  PolicyOptions p;
  p.threshold_percent = c.threshold_percent;
  p.forecast_floor_percent = c.forecast_floor_percent;
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
  if (last_gasp_) last_gasp_->set_options(sandbox_options(), capture_options());  // its own capture processes
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

bool Agent::confine(std::string& error) {
  Confinement conf;
  if (!confine_agent(conf, error)) return false;
  if (conf.supported)
    log_->info("confined: {}", conf.summary);
  else
    log_->warn("not confined by its own seccomp filter: {}", conf.summary);
  if (options_.test.confinement_probe) {
    log_->warn("test hook: confinement probe on the loop thread: {}", options_.test.confinement_probe());
    worker_->post([probe = options_.test.confinement_probe, log = log_] {
      log->warn("test hook: confinement probe on the capture worker: {}", probe());
    });
  }
  return true;
}

bool Agent::start(std::string& error) {
  const AgentConfig& c = options_.config;

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
  bo.usage_threshold = options_.config.in_kernel_threshold;
  bpf_ = BpfEventSource::open(bo, [this](const oomsnap_event& e) { on_bpf_event(e); }, error);
  if (!bpf_) return false;
  log_->info("BPF attached: {}", bpf_->description());
  if (bpf_->usage_thresholds())
    log_->info("usage thresholds: also checked in the kernel, at each change of a process's page counts (rss_stat)");
  health_.set_bpf_attached(true);
  // Before the deny-list: /dev/kmsg checks CAP_SYSLOG at open only, and the
  // filter lets syslog(2) read only.
  std::string kmsg_why;
  KernelLog::Paths kmsg_paths;
  if (!options_.test.kmsg_path.empty()) kmsg_paths.kmsg = options_.test.kmsg_path;
  kernel_log_ = KernelLog::open(io_, kmsg_why, kmsg_paths);
  if (kernel_log_) {
    kernel_log_->start();
    log_->info("kernel OOM reports: read from {}{}", kernel_log_->source(),
               kmsg_why.empty() ? "" : " (" + kmsg_why + ")");
  } else {
    log_->warn("kernel OOM reports: not read ({}; it needs CAP_SYSLOG where kernel.dmesg_restrict is set): OOM-kill "
               "records carry no kernel report, and those without a snapshot explain no charge",
               kmsg_why);
  }
  open_last_gasp();
  // Nothing below loads BPF, mounts or attaches again (SIGHUP neither): the
  // deny-list goes on now, before the first capture process is started, so
  // that every capture process inherits it.
  if (!confine(error)) return false;
  apply_config();

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
  if (options_.test.stall_on_sigusr2.count() > 0) signals_.add(SIGUSR2);
  arm_signals();
  rescan_cgroups();
  arm_rescan();
  arm_heartbeat();
  health_.set_ready(true);
  log_->info("ready: node {}; {}; threshold {}%, interval {}s per container, at most {} captures/min, batch window {}ms, OOM-kill window {}ms; "
             "blacklist [{}]; sinks: {}{}; captures {} (budget {}ms, killed at +{}ms, memory cap {} MiB)",
             node_, cgroups_->describe(), c.threshold_percent, c.interval_tracing.count(),
             c.node_max_captures_per_minute, c.batch_window.count(),
             c.oom_kill_window.count(), join(c.trigger_blacklist, ","), c.stdout_sink ? "stdout " : "",
             c.file_sink ? c.storage_path : "",
             options_.test.capture_in_process ? "IN THE AGENT (test hook, benchmarks only)" : "in a capture process",
             c.run_tracing_tool_timeout.count(), c.capture_grace.count(), c.capture_memory_max >> 20);
  systemd_.ready(systemd_status());
  systemd_status_ = systemd_status();
  if (const std::string e = systemd_.library_error(); !e.empty())
    log_->warn("systemd: NOTIFY_SOCKET is set, but nothing can be sent: {}", e);
  else if (systemd_.active()) {
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
    if (sig == SIGUSR2) {  // only registered for tests (AgentTestHooks::stall_on_sigusr2)
      log_->warn("test hook: blocking the event loop for {} s", options_.test.stall_on_sigusr2.count());
      std::this_thread::sleep_for(options_.test.stall_on_sigusr2);
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
    flush_limited_records(false);
    rescan_cgroups();
    arm_rescan();
  });
}

// Every rescan goes through here, whichever asked for it (the timer, an event
// from a cgroup not yet known, SIGHUP): a removal is reported by the one
// rescan that finds it, so a caller dropping the list lost it for good (a
// container's owed records and its policy state, about 1 run in 4 of the
// OOM-kill flood test, when an event's rescan came first).
void Agent::rescan_cgroups() {
  for (const auto& gone : cgroups_->rescan()) {
    log_->debug("cgroup {} removed", printable(gone));
    policy_.forget(gone);
    capture_cost_.forget(gone);
    last_offer_.erase(gone);
    last_collection_.erase(gone);
    forget_limited_records(gone);
  }
  update_usage_watches();
  if (last_gasp_) last_gasp_->scan(cgroups_->fs(), cgroups_->limited_cgroups());
}

// The in-kernel usage thresholds follow the cgroups and limits of each
// rescan. What cannot be watched there is still polled (v2) or has its
// eventfd (v1); a failure is logged when it first appears or changes.
void Agent::update_usage_watches() {
  if (!bpf_ || !bpf_->usage_thresholds()) return;
  size_t too_deep = 0;
  std::string error;
  const auto watches = cgroups_->usage_watches(OOMSNAP_MAX_WATCH_HOPS, &too_deep);
  const size_t set = bpf_->set_usage_watches(watches, error);
  if (too_deep && error.empty())
    error = std::to_string(too_deep) + " cgroups more than " + std::to_string(OOMSNAP_MAX_WATCH_HOPS) +
            " levels below their limit are not watched in the kernel";
  if (error != usage_watch_error_) {
    if (!error.empty()) log_->warn("usage thresholds in the kernel: {} (the usage poll stays)", printable(error));
    usage_watch_error_ = error;
  }
  if (set != usage_watches_set_)
    log_->debug("usage thresholds in the kernel: {} cgroups watched", set);
  usage_watches_set_ = set;
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
  rescan_cgroups();
  if (http_listen() != http_running_)
    log_->warn("SIGHUP: [http] Listen changed to '{}': takes effect when the agent restarts (still on '{}')",
               http_listen(), http_running_);
  log_->info("SIGHUP: configuration reloaded from {}; {}",
             options_.config_path.empty() ? "(defaults)" : options_.config_path, cgroups_->describe());
  systemd_.ready(systemd_status());
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
  if (kernel_log_) kernel_log_->cancel();
  // A running capture is killed now (its incident says so); its result is
  // posted before the final step below, which then sees it.
  sandbox_->cancel();
  size_t dropped = worker_->stop();
  if (dropped) log_->warn("{} queued collections dropped at shutdown", dropped);
  namer_->stop();  // the records whose names it had not looked up are written below
  last_gasp_timer_.cancel();
  if (last_gasp_) last_gasp_->stop();  // a decode running is killed: its record goes without it
  asio::post(io_, [this] {
    flush_limited_records(true);  // logs what the per-container record bounds still owe
    for (uint64_t id : book_.close_all(monotonic_now_ns(), "the agent stopped before this collection ran")) finalize(id);
    release_held(true);
    write_unnamed_at_shutdown();
    cgroups_.reset();
    bpf_desc_.reset();
    kernel_log_.reset();
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
