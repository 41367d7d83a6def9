// Agent configuration from a TOML file. Validation is strict: a typo'd key or
// an out-of-range value is an error naming the key, never silently ignored.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace oomsnap {

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct AgentConfig {
  int threshold_percent = 90;                               // ThresholdPercent, 1..100
  // The predictive trigger (climb_forecast.h): no forecast below this share
  // of the limit, and this added to the expected capture time.
  int forecast_floor_percent = 50;                          // ForecastFloorPercent, 1..100
  std::chrono::milliseconds forecast_margin{200};           // ForecastMargin (s), >= 0
  std::chrono::seconds interval_tracing{300};               // IntervalTracing, >= 0: per container
  unsigned node_max_captures_per_minute = 6;                // NodeMaxCapturesPerMinute, 1..10000: node-wide
  std::chrono::milliseconds run_tracing_tool_timeout{2000}; // RunTracingToolTimeout (s), > 0
  // Processes snapshotted per incident (1..16): the kernel's pick, then the
  // next by badness with a supported runtime, within one RunTracingToolTimeout.
  unsigned max_processes_per_incident = 3;                  // MaxProcessesPerIncident
  size_t max_memory_object_entries = 10;                    // MaxMemoryObjectEntries, 1..100000
  std::string storage_path = "/var/log/oomsnap";            // [storage] Path
  uint64_t storage_max_bytes = 64ull << 20;                 // [storage] MaxBytes, > 0
  int storage_max_files = 5;                                // [storage] MaxFiles, > 0
  std::vector<std::string> trigger_blacklist;               // [triggers] Blacklist
  bool in_kernel_threshold = true;                          // [triggers] InKernelThreshold (read at start)
  std::string cgroup_root;                                  // [cgroup] Root; empty = autodetect
  std::string cgroup_scope = "/";                           // [cgroup] Scope: subtree watched, relative to the mount
  bool stdout_sink = true;                                  // [storage] Stdout
  bool file_sink = true;                                    // [storage] LocalFile: write under Path
  std::chrono::milliseconds batch_window{2};                // BatchWindow (s): candidates merged into one decision
  std::chrono::milliseconds oom_kill_window{60000};         // OomKillWindow (s): how long a record waits for a kill
  std::chrono::milliseconds rescan_interval{2000};          // RescanInterval (s): new cgroups and limit changes
  // Exit records (a process killed by a signal) per container per minute,
  // 1..100000; the exits past it are counted in the container's next one.
  uint64_t max_exit_records_per_minute = 30;                // MaxExitRecordsPerMinute
  // Records of OOM kills with no snapshot of their own (a kill that joins a
  // collection is in that record) per container per minute, 1..100000; a
  // container's first kill always has its full record, the kills past the
  // bound are counted in its next one. A few: a container forking allocators
  // into a tiny limit is OOM-killed hundreds of times a minute.
  uint64_t max_oom_kill_records_per_minute = 5;             // MaxOomKillRecordsPerMinute
  // The capture process (every capture runs in one): killed at
  // RunTracingToolTimeout + Grace, capped in memory, its result in size.
  std::chrono::milliseconds capture_grace{1000};            // [capture] Grace (s), 0.1..600
  uint64_t capture_memory_max = 1ull << 30;               // [capture] MemoryMax (bytes), >= 64 MiB
  uint64_t capture_result_max = 4ull << 20;                 // [capture] ResultMaxBytes, >= 64 KiB
  // The last gasp (read at start): the Go processes of limited containers
  // are armed so that an OOM kill reads their heap profile in the dying
  // process itself (docs/trigger-timing.md).
  bool last_gasp = true;                                    // [capture] LastGasp
  // Where kubelet keeps pods/ and containers/ (pod and container names for
  // the record); empty = no names looked up.
  std::string pod_log_root = "/var/log";                    // [kubernetes] PodLogRoot
  // host:port of /metrics, /healthz and /readyz (an IP address, IPv6 in
  // brackets or not; port 0 = any free one); empty = no HTTP endpoint.
  std::string http_listen = "127.0.0.1:9463";               // [http] Listen
};

// Throws ConfigError naming the key (and line when known).
AgentConfig parse_config(const std::string& toml_text);
// Empty path gives the defaults; an unreadable file is a ConfigError naming it.
AgentConfig load_config(const std::string& path);

}  // namespace oomsnap
