// The cgroup side of the agent's triggers: which memory cgroups exist in the
// watched scope (rescanned periodically), their limits, and the kernel
// notifications registered on them — v1 usage thresholds (eventfd at
// ThresholdPercent of the limit), v2 memory.events changes (inotify), v2
// PSI triggers (memory.pressure), and on v2, which has no usage-threshold
// notification, an adaptive poll of memory.current against ThresholdPercent.
// With the predictive trigger on, the poll runs on v1 too: its samples feed
// each container's ClimbForecast, which fires a "forecast" trigger when the
// limit is nearer than a capture's time at the current rate. Every
// notification fd lives in the agent's Boost.Asio loop; each firing becomes
// a Trigger handed to the callback.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/logger.h>

#include "agent/cgroup/cgroup.h"
#include "agent/events/usage_watches.h"
#include "agent/incident/climb_forecast.h"
#include "agent/incident/policy.h"

namespace oomsnap {

class V1ThresholdEvent;
class MemoryEventsWatcher;
class PsiTrigger;

struct CgroupTriggerOptions {
  std::string scope = "/";  // subtree watched, relative to the mount
  int threshold_percent = 90;
  bool threshold = true;      // v1 usage thresholds
  bool memory_events = true;  // v2 memory.events
  bool psi = true;            // v2 memory.pressure
  bool forecast = true;       // the predictive trigger (climb_forecast.h), from the usage poll
  ForecastOptions forecast_options;
  // A container's expected capture time at a usage (CaptureCost); the
  // default (default_capture_seconds) when empty.
  std::function<double(const std::string& memcg, uint64_t usage_bytes)> capture_seconds;
  // PSI trigger: 100 ms of "some" stall within a 1 s window (unprivileged
  // writers need a window that is a multiple of 2 s: tried as the fallback).
  std::chrono::microseconds psi_stall{100000}, psi_window{1000000};
};

class CgroupTriggers {
 public:
  using OnTrigger = std::function<void(const std::string& memcg, Trigger trigger)>;

  CgroupTriggers(boost::asio::io_context& io, CgroupFs fs, CgroupTriggerOptions options, OnTrigger on_trigger,
                 std::shared_ptr<spdlog::logger> log);
  ~CgroupTriggers();
  CgroupTriggers(const CgroupTriggers&) = delete;
  CgroupTriggers& operator=(const CgroupTriggers&) = delete;

  // Re-lists the scope: new cgroups get notifications, removed ones lose
  // them, changed limits re-register thresholds. A cgroup already at or above
  // the threshold when its threshold is (re)registered is reported at once
  // (the kernel only signals crossings). Returns the removed cgroups, each
  // once only: a caller that drops the list loses them.
  [[nodiscard]] std::vector<std::string> rescan();
  // New options (SIGHUP): every registration is redone at the next rescan.
  void set_options(CgroupTriggerOptions options);

  std::optional<std::string> path_of_inode(uint64_t inode) const;
  // The in-kernel usage thresholds for the cgroups of the last rescan (see
  // usage_watches.h); none when the threshold trigger is off.
  std::vector<UsageWatch> usage_watches(uint32_t max_hops, size_t* too_deep = nullptr) const;
  // The nearest cgroup at or above `memcg` (within the scope) with a finite
  // limit, from the last rescan: where a pressure event's container is.
  std::optional<std::string> limited_container_of(const std::string& memcg) const;
  // Every cgroup of the last rescan with a finite limit at it or above it
  // (within the scope): where the processes a container's limit can kill are.
  std::vector<std::string> limited_cgroups() const;
  // The cgroup's usage, limit and inode as of the last rescan (empty if it
  // was not seen): cheap enough for every event of a flood.
  MemcgStats last_stats(const std::string& memcg) const;
  bool in_scope(const std::string& memcg) const;
  const CgroupFs& fs() const { return fs_; }
  size_t watched() const { return nodes_.size(); }
  std::string describe() const;  // for the log: counts by notification kind

 private:
  struct Node;
  void watch_v1_threshold(Node& n);
  void watch_psi(Node& n);
  void arm_threshold(const std::string& memcg);
  void arm_usage_poll();
  void poll_usage();
  void forecast_from(Node& n, uint64_t usage);
  void recheck_threshold(const std::string& memcg, int left);
  void arm_psi(const std::string& memcg);
  void arm_memory_events();
  void report(const std::string& memcg, Trigger t);

  boost::asio::io_context& io_;
  CgroupFs fs_;
  CgroupTriggerOptions options_;
  OnTrigger on_trigger_;
  std::shared_ptr<spdlog::logger> log_;
  std::map<std::string, std::unique_ptr<Node>> nodes_;
  std::map<uint64_t, std::string> by_inode_;
  std::unique_ptr<MemoryEventsWatcher> events_watcher_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> events_desc_;
  bool psi_unavailable_logged_ = false;
  boost::asio::steady_timer poll_timer_;  // v2 usage polls (see poll_usage)
};

}  // namespace oomsnap
