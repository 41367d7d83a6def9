// `oomsnap watch`: kernel events (BPF ring buffer), cgroup notifications,
// signals and timers in one Boost.Asio loop; collection on a serial worker;
// one JSON line per incident to the sinks.
//
//   BPF memcg_pressure / v1 threshold / v2 memory.events / PSI
//        -> Policy (threshold, batch by ratio, cooldown)
//        -> victim choice + heap capture (worker thread; the capture itself
//           in a sandboxed capture process killed at its hard deadline)
//        -> incident waits up to OomKillWindow for an OOM kill in its container
//        -> record (with oom_kill.lead_ms) to stdout / rotating file
//   BPF oom_kill -> recorded with the pending snapshot if any; without one,
//        at most MaxOomKillRecordsPerMinute per container (the first always),
//        the rest counted into the next
//   BPF process_exit by signal -> recorded (at most MaxExitRecordsPerMinute
//        per container, the rest counted into the next), or folded into its incident
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/logger.h>

#include "agent/events/bpf_events.h"
#include "agent/events/kernel_log.h"
#include "agent/events/cgroup_triggers.h"
#include "agent/config.h"
#include "agent/events/container_record_limit.h"
#include "agent/last_gasp/last_gasp_watch.h"
#include "agent/ops/health.h"
#include "agent/ops/systemd_notify.h"
#include "agent/ops/http_server.h"
#include "agent/incident/incident.h"
#include "agent/incident/incident_book.h"
#include "agent/ops/metrics.h"
#include "agent/incident/no_snapshot_reason.h"
#include "agent/incident/capture_cost.h"
#include "agent/incident/policy.h"
#include "agent/incident/serial_worker.h"
#include "agent/records/sink.h"
#include "agent/records/sink_writer.h"
#include "capture/capture_sandbox.h"

namespace oomsnap {

// What only the tests and the benchmark set. The shipped `oomsnap` binary never
// does: its copy of cli/test_hooks.cpp is compiled without them, and only
// oomsnap-test-hooks (a test executable built from the same sources) fills
// them from the environment. Each of them would weaken a production agent.
struct AgentTestHooks {
  // ($OOMSNAP_TEST_STALL_LOOP_ON_SIGUSR2=N) SIGUSR2 blocks the event loop for N
  // seconds, so a test can see /healthz and the watchdog report the stall
  // and recover. 0: SIGUSR2 is not even handled.
  std::chrono::seconds stall_on_sigusr2{0};
  // ($OOMSNAP_CAPTURE_HELPER=PATH) the executable run as the capture process
  // instead of the agent's own (tests/capture_hooks: one that misbehaves on
  // purpose). It runs with the agent's capabilities, hence test-only.
  std::string capture_helper;
  // ($OOMSNAP_TEST_CAPTURE_IN_PROCESS=1, tools/bench-agent.sh) capture in the
  // agent's own worker thread, without the capture process, to measure what
  // the sandbox costs: a stuck read would hang the agent.
  bool capture_in_process = false;
  // ($OOMSNAP_TEST_KMSG_PATH=PATH) the kernel log device read instead of
  // /dev/kmsg: a path that does not exist makes the agent take syslog(2).
  std::string kmsg_path;
  // ($OOMSNAP_TEST_CONFINEMENT_PROBE_PID=PID) once the agent has confined
  // itself: run on the loop thread and on the capture worker (a thread that
  // was started before the filter), and what it returns (system calls the
  // filter must refuse, with their errno) is logged.
  std::function<std::string()> confinement_probe;
};

struct AgentOptions {
  AgentConfig config;
  std::string config_path;  // re-read on SIGHUP; empty = defaults
  BpfAttachMode bpf_mode = BpfAttachMode::Auto;
  std::string node_name;    // empty: $OOMSNAP_NODE_NAME, else the host name
  // --http-listen: overrides [http] Listen, also across SIGHUP (the
  // DaemonSet passes the pod's IP from the downward API this way).
  std::optional<std::string> http_listen;
  AgentTestHooks test;      // all off outside tests
};

class Agent {
 public:
  Agent(boost::asio::io_context& io, AgentOptions options, std::shared_ptr<spdlog::logger> log);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Finds the memory cgroups, opens the sinks, loads and attaches BPF, starts
  // listening. false + error (naming what and why) when the agent cannot run.
  bool start(std::string& error);
  // Writes every pending incident with what it has, stops the worker and
  // every wait; io.run() then returns.
  void stop();

 private:
  using Timer = boost::asio::steady_timer;
  // Records waiting for their pod names: past this, a record goes without
  // them rather than wait (each lookup is bounded: this fills only in a burst).
  static constexpr size_t kNamingQueue = 64;

  void apply_config();
  bool check_privileges(std::string& error);
  // The agent's own seccomp deny-list (agent/ops/self_confinement.h), once
  // its BPF programs are attached; logs what was loaded.
  bool confine(std::string& error);
  bool open_sinks(std::string& error);
  void log_sink_messages();
  void arm_bpf();
  void arm_signals();
  void arm_rescan();
  void rescan_cgroups();  // and forget what it found removed
  void arm_policy_timer();
  // Every second: the heartbeat /healthz checks, and the counters /metrics shows.
  void arm_heartbeat();
  // WATCHDOG=1 at half of systemd's WatchdogSec, from the loop: a stalled
  // loop stops the pings and systemd restarts the agent.
  void arm_watchdog();
  std::string systemd_status() const;
  void notify_status();
  void publish_metrics();
  bool start_http(std::string& error);
  std::string http_listen() const;  // --http-listen, else [http] Listen
  void reload_config();

  void on_bpf_event(const oomsnap_event& e);
  void on_pressure(const oomsnap_event& e);
  void on_usage_threshold(const oomsnap_event& e);
  Trigger bpf_trigger(const oomsnap_event& e, const char* type, const std::string& what) const;
  void update_usage_watches();
  void on_oom_kill(const oomsnap_event& e);
  void on_exit(const oomsnap_event& e);
  // Exit records and OOM-kill records without a snapshot: bounded per
  // container (exit_limiter_, kill_limiter_), written with the counts of the
  // events not recorded before them.
  std::string record_limit_key(const std::string& memcg) const;
  void write_exit_record(const HeldEvent& x, const SuppressedEvents& suppressed, bool held_back);
  void open_kill_record(const HeldEvent& kill, const SuppressedEvents& suppressed, bool held_back);
  static OomKillInfo oom_kill_info(const oomsnap_event& e, const std::string& memcg);
  void flush_limited_records(bool stopping);
  // At shutdown: what a container's bound still owes, in the log.
  void log_owed(const ContainerRecordLimiter::Due& due, const char* events, const char* record, const char* key,
                uint64_t limit, const std::string& detail) const;
  void forget_limited_records(const std::string& gone);
  void offer(const std::string& memcg, Trigger trigger);
  void on_policy_deadline();
  void start_collection(Candidate c, MonoNs decided);
  void on_collected(Incident inc);
  // A pending incident for a kernel event that is its own trigger (an OOM
  // kill without a prior snapshot, an exit by signal).
  // `last_seen` stands in when the cgroup is gone (a record owed at its removal).
  void describe_container(IncidentContainer& c, const std::string& memcg, const MemcgStats* last_seen = nullptr) const;
  Incident& open_kernel_incident(const oomsnap_event& e, const char* type, const char* tracepoint, MonoNs due);
  // The one timer of the open incidents: armed for the book's next due
  // record; finalize_due writes every record due now and re-arms it.
  void arm_book_timer();
  void finalize_due();
  void attach_kernel_report(OomKillInfo& k);  // from kernel_log_, when it holds the kill's report
  void finalize(uint64_t id);
  // The last gasp (agent_last_gasp.cpp): opened at start when [capture]
  // LastGasp (before the deny-list: it loads BPF); each rescan arms the new
  // Go processes of limited containers. A kill's record waits for the last
  // gasps of its killed processes that are being read or decoded (a capture's
  // hard deadline each, kMaxLastGaspWaitNs at most), and carries them
  // (incident/last_gasp_attach.h).
  static constexpr MonoNs kMaxLastGaspWaitNs = 30'000'000'000;
  void open_last_gasp();
  void on_last_gasp(LastGaspDecoded d);
  // Attaches the last gasps decoded for inc's kill; true when it still
  // waits for some (inc is then held, and written when they come).
  bool hold_for_last_gasp(Incident& inc);
  size_t attach_last_gasps(Incident& inc);  // how many of its killed processes are still awaited
  void release_held(bool all);
  void arm_last_gasp_timer();
  // The record's pod and container names come from a scan of the kubelet's
  // directories, done on namer_ (never on the loop); then the record.
  void name_then_write(Incident inc);
  void on_named(uint64_t id, std::optional<PodIdentity> pod, const std::string& why);
  void write_unnamed_at_shutdown();
  void write_record(Incident& inc);
  std::optional<std::string> memcg_of_event(uint64_t cgroup_id, pid_t pid);
  bool blacklisted(const std::string& trigger) const;
  nlohmann::json counters() const;
  CaptureOptions capture_options() const;
  SandboxOptions sandbox_options() const;
  // Why an OOM kill in `container` came without a snapshot, truthfully.
  std::string why_no_snapshot(const std::string& container, MonoNs now) const;
  CgroupTriggerOptions trigger_options() const;

  boost::asio::io_context& io_;
  AgentOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  std::string node_;
  Policy policy_;
  // What each container's last collection took: the forecast trigger's
  // expected capture time (before cgroups_, whose poll asks it).
  CaptureCost capture_cost_;
  std::unique_ptr<CgroupTriggers> cgroups_;
  std::unique_ptr<BpfEventSource> bpf_;
  std::unique_ptr<KernelLog> kernel_log_;  // null when neither /dev/kmsg nor syslog(2) can be read
  std::unique_ptr<boost::asio::posix::stream_descriptor> bpf_desc_;
  boost::asio::signal_set signals_;
  Timer rescan_timer_, policy_timer_, heartbeat_timer_, watchdog_timer_, book_timer_;
  IncidentBook book_;  // the open incidents and which one each event belongs to
  uint64_t next_id_ = 1;
  MonoNs last_unknown_rescan_ = 0;
  std::string usage_watch_error_;  // the last failure of update_usage_watches, logged once
  size_t usage_watches_set_ = 0;
  // Per container: what the policy said to its last trigger, and how its
  // last collection ended (for the reason of a kill without a snapshot).
  // Entries go when the cgroup goes.
  std::map<std::string, OfferResult> last_offer_;
  std::map<std::string, LastCollection> last_collection_;
  bool stopping_ = false;
  // Counters reported in every record and in the log.
  uint64_t events_seen_ = 0, unknown_cgroup_events_ = 0, records_written_ = 0, suppressed_pressure_ = 0,
           queue_overflows_ = 0;
  // Exits the BPF rate limit did not send; exit records the per-container
  // bound did not write.
  uint64_t suppressed_exit_events_ = 0, suppressed_exit_records_ = 0;
  ContainerRecordLimiter exit_limiter_;
  // OOM-kill records without a snapshot the per-container bound did not write.
  uint64_t suppressed_oom_kill_records_ = 0;
  ContainerRecordLimiter kill_limiter_;
  // Incidents whose pod names namer_ is looking up, by id: written when the
  // names come back, or at shutdown (named then on the loop).
  std::map<uint64_t, Incident> naming_;
  double last_event_unix_ = 0;  // the last kernel or cgroup event taken in (metrics)
  // Written by the loop, read by the HTTP server's thread (which they outlive).
  MetricsRegistry metrics_;
  AgentHealth health_;
  // Under systemd (Type=notify): READY/STATUS/WATCHDOG/RELOADING/STOPPING.
  SystemdNotifier systemd_;
  std::string systemd_status_;  // the last STATUS= sent
  std::unique_ptr<HttpServer> http_;
  std::string http_running_;  // the address it was started with, for SIGHUP's warning
  // Writes records off the loop: every sink operation is bounded, a record
  // a sink could not take waits for retry (in order), none blocks the loop.
  std::unique_ptr<SinkWriter> sink_writer_;
  std::unique_ptr<CaptureSandbox> sandbox_;  // used by the worker's jobs; cancel() from the loop
  // The pod-name scans (name_then_write): a thread of their own, so that a
  // record waits for no capture and a flood of records cannot fill the
  // collection queue.
  std::unique_ptr<SerialWorker> namer_;
  // The last gasp: null when off or when the kernel cannot run it. Its
  // decoded records not attached yet, by pid (bounded, aged out), and the
  // records held for theirs, by incident id.
  std::unique_ptr<LastGaspWatch> last_gasp_;
  std::map<pid_t, LastGaspDecoded> last_gasps_;
  struct HeldForLastGasp {
    Incident inc;
    MonoNs until = 0;
  };
  std::map<uint64_t, HeldForLastGasp> held_for_last_gasp_;
  Timer last_gasp_timer_;
  std::unique_ptr<SerialWorker> worker_;  // last: joined first, before what its jobs post to
};

}  // namespace oomsnap
