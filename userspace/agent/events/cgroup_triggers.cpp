#include "agent/events/cgroup_triggers.h"

#include <unistd.h>

#include <algorithm>

#include <boost/asio/posix/descriptor_base.hpp>

#include "agent/incident/capture_cost.h"
#include "agent/incident/collect.h"
#include "agent/events/memcg_notify.h"
#include "agent/events/usage_watches.h"
#include "base/log_escape.h"

namespace oomsnap {

namespace asio = boost::asio;
using Descriptor = asio::posix::stream_descriptor;

// One watched cgroup. Descriptors come after the notifiers they wrap (a dup of
// the notifier's fd), so they are destroyed, and their waits cancelled, first.
struct CgroupTriggers::Node {
  std::string path;
  uint64_t inode = 0;
  MemcgStats stats;  // as of the last rescan
  std::unique_ptr<V1ThresholdEvent> threshold;
  std::unique_ptr<Descriptor> threshold_desc;
  std::unique_ptr<asio::steady_timer> recheck;  // see recheck_threshold
  std::unique_ptr<PsiTrigger> psi;
  std::unique_ptr<Descriptor> psi_desc;
  bool psi_failed = false;  // do not retry on every rescan
  bool events_watched = false;
  // v2 usage poll: when to read memory.current next, and which side of the
  // threshold it was on (a trigger is reported on each upward crossing).
  std::chrono::steady_clock::time_point next_poll{};
  bool above_threshold = false;
  ClimbForecast climb;  // the predictive trigger's samples (both versions)
};

namespace {

// The asio descriptor owns (and closes) its fd, the notifier keeps its own.
std::unique_ptr<Descriptor> wrap(asio::io_context& io, int fd) {
  int copy = ::dup(fd);
  if (copy < 0) return nullptr;
  return std::make_unique<Descriptor>(io, copy);
}

// Re-reads after a notification that read below the threshold: 50 at 10 ms
// (the first half second), then 100 at 100 ms (ten more seconds), for a usage
// that wavers around the threshold while a runtime frees and grows.
constexpr int kRechecks = 150;
constexpr int kSlowRechecks = 100;  // the last ones, 100 ms apart

// v2 usage poll interval: the time the headroom to the threshold would last
// at kFastestLeak, kept between 10 ms and 1 s. A cgroup far from its
// threshold costs one read a second; one close to it is read every 10 ms.
constexpr double kFastestLeakBytesPerSec = 1024.0 * 1024 * 1024;
constexpr auto kMinPoll = std::chrono::milliseconds(10);
constexpr auto kMaxPoll = std::chrono::milliseconds(1000);

// The forecast's poll: below its floor, the time the headroom to the floor
// would last at kFastestLeak; at or above it, a quarter of the time the
// headroom to the limit would (so a climb gives the forecast several samples
// before the limit is near), and no more often than every 25 ms: a climb
// that outruns that has no time for a capture either, and a container parked
// close to its limit costs 40 small reads a second at most.
constexpr auto kMinForecastPoll = std::chrono::milliseconds(25);
constexpr double kForecastPollShare = 4;

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

Trigger make_trigger(const char* type, std::string source) {
  Trigger t;
  t.type = type;
  t.source = std::move(source);
  t.kernel_ns = t.received_ns = monotonic_now_ns();
  return t;
}

}  // namespace

CgroupTriggers::CgroupTriggers(asio::io_context& io, CgroupFs fs, CgroupTriggerOptions options, OnTrigger on_trigger,
                               std::shared_ptr<spdlog::logger> log)
    : io_(io),
      fs_(std::move(fs)),
      options_(std::move(options)),
      on_trigger_(std::move(on_trigger)),
      log_(std::move(log)),
      poll_timer_(io) {
  if (fs_.version == 2 && options_.memory_events) {
    std::string error;
    events_watcher_ = MemoryEventsWatcher::create(error);
    if (!events_watcher_) log_->warn("memory.events watching unavailable: {}", error);
    else events_desc_ = wrap(io_, events_watcher_->fd());
    if (events_desc_) arm_memory_events();
  }
}

CgroupTriggers::~CgroupTriggers() = default;

void CgroupTriggers::set_options(CgroupTriggerOptions options) {
  options_ = std::move(options);
  for (auto& [path, n] : nodes_) {
    n->threshold_desc.reset();
    n->threshold.reset();
    n->psi_desc.reset();
    n->psi.reset();
    n->psi_failed = false;
  }
}

bool CgroupTriggers::in_scope(const std::string& memcg) const { return memcg_within(memcg, options_.scope); }

MemcgStats CgroupTriggers::last_stats(const std::string& memcg) const {
  auto it = nodes_.find(memcg);
  if (it == nodes_.end()) return {};
  MemcgStats s = it->second->stats;
  if (!s.inode) s.inode = it->second->inode;
  return s;
}

std::optional<std::string> CgroupTriggers::path_of_inode(uint64_t inode) const {
  auto it = by_inode_.find(inode);
  if (it == by_inode_.end()) return std::nullopt;
  return it->second;
}

std::vector<UsageWatch> CgroupTriggers::usage_watches(uint32_t max_hops, size_t* too_deep) const {
  if (!options_.threshold) return {};
  std::vector<ScannedMemcg> scanned;
  scanned.reserve(nodes_.size());
  for (const auto& [path, n] : nodes_) scanned.push_back({path, n->inode, n->stats.limit_bytes});
  return oomsnap::usage_watches(scanned, options_.scope, options_.threshold_percent, max_hops, too_deep);
}

std::optional<std::string> CgroupTriggers::limited_container_of(const std::string& memcg) const {
  auto up = nearest_limited(memcg, options_.scope, [&](const std::string& p) {
    auto it = nodes_.find(p);
    return it != nodes_.end() && it->second->stats.limit_bytes.has_value();
  });
  if (!up) return std::nullopt;
  return up->path;
}

std::vector<std::string> CgroupTriggers::limited_cgroups() const {
  std::vector<std::string> out;
  for (const auto& [path, n] : nodes_)
    if (limited_container_of(path)) out.push_back(path);
  return out;
}

std::string CgroupTriggers::describe() const {
  size_t thr = 0, psi = 0, ev = 0, limited = 0;
  for (const auto& [path, n] : nodes_) {
    thr += n->threshold ? 1 : 0;
    psi += n->psi ? 1 : 0;
    ev += n->events_watched ? 1 : 0;
    limited += n->stats.limit_bytes ? 1 : 0;
  }
  return "cgroup v" + std::to_string(fs_.version) + " at " + fs_.mount + ", scope " + options_.scope + ": " +
         std::to_string(nodes_.size()) + " memcgs (" + std::to_string(limited) + " with a limit); " +
         std::to_string(thr) + " usage thresholds, " + std::to_string(ev) + " memory.events watches, " +
         std::to_string(psi) + " PSI triggers" +
         (options_.forecast ? "; usage polled for the forecast trigger (floor " +
                                  std::to_string(options_.forecast_options.floor_percent) + "%)"
                            : "");
}

void CgroupTriggers::report(const std::string& memcg, Trigger t) { on_trigger_(memcg, std::move(t)); }

std::vector<std::string> CgroupTriggers::rescan() {
  std::set<std::string> seen;
  for (const auto& found : list_memcgs(fs_, options_.scope)) {
    seen.insert(found.rel_path);
    auto& slot = nodes_[found.rel_path];
    if (!slot) {
      slot = std::make_unique<Node>();
      slot->path = found.rel_path;
    }
    Node& n = *slot;
    if (n.inode != found.inode) {
      if (n.inode) by_inode_.erase(n.inode);
      n.inode = found.inode;
      by_inode_[n.inode] = n.path;
    }
    n.stats = read_memcg_limits(fs_, n.path);
    if (fs_.version == 1) {
      watch_v1_threshold(n);
    } else if (fs_.version == 2) {
      if (events_watcher_ && !n.events_watched && (n.stats.limit_bytes || n.stats.high_bytes)) {
        std::string error;
        n.events_watched = events_watcher_->add(fs_, n.path, error);
        if (!n.events_watched) log_->warn("memory.events of {}: {}", printable(n.path), printable(error));
      }
      watch_psi(n);
    }
  }
  if ((fs_.version == 2 && options_.threshold) || options_.forecast) arm_usage_poll();
  std::vector<std::string> removed;
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    if (seen.count(it->first)) {
      ++it;
      continue;
    }
    removed.push_back(it->first);
    if (events_watcher_ && it->second->events_watched) events_watcher_->remove(it->first);
    by_inode_.erase(it->second->inode);
    it = nodes_.erase(it);
  }
  return removed;
}

void CgroupTriggers::watch_v1_threshold(Node& n) {
  if (!options_.threshold || !n.stats.limit_bytes) {
    n.threshold_desc.reset();
    n.threshold.reset();
    return;
  }
  const uint64_t want = threshold_of(*n.stats.limit_bytes, options_.threshold_percent);
  if (n.threshold && n.threshold->threshold() == want) return;
  n.threshold_desc.reset();
  n.threshold.reset();
  std::string error;
  n.threshold = V1ThresholdEvent::create(fs_, n.path, want, error);
  if (!n.threshold) {
    log_->warn("usage threshold for {}: {}", printable(n.path), printable(error));
    return;
  }
  n.threshold_desc = wrap(io_, n.threshold->fd());
  if (!n.threshold_desc) {
    n.threshold.reset();
    return;
  }
  arm_threshold(n.path);
  // The kernel signals crossings only: a cgroup already above the new
  // threshold would never be reported.
  const MemcgStats now = read_memcg_usage(fs_, n.path);
  if (now.usage_bytes && *now.usage_bytes >= want) {
    Trigger t = make_trigger("threshold", "registration: usage already above the threshold");
    t.counters = {{"threshold_bytes", want}, {"usage_bytes", *now.usage_bytes}};
    report(n.path, std::move(t));
  }
}

void CgroupTriggers::arm_threshold(const std::string& memcg) {
  auto it = nodes_.find(memcg);
  if (it == nodes_.end() || !it->second->threshold_desc) return;
  it->second->threshold_desc->async_wait(Descriptor::wait_read, [this, memcg](const boost::system::error_code& ec) {
    if (ec) return;  // cancelled: the node (or the whole object) is gone
    auto it = nodes_.find(memcg);
    if (it == nodes_.end() || !it->second->threshold) return;
    Node& n = *it->second;
    if (n.threshold->drain()) {
      Trigger t = make_trigger("threshold", "eventfd: memory.usage_in_bytes crossed the threshold");
      t.counters = {{"threshold_bytes", n.threshold->threshold()}};
      const MemcgStats now = read_memcg_usage(fs_, memcg);
      report(memcg, std::move(t));
      if (!now.usage_bytes || *now.usage_bytes < n.threshold->threshold()) recheck_threshold(memcg, kRechecks);
    }
    arm_threshold(memcg);
  });
}

// The kernel compares usage with the thresholds only every 128 page events
// and signals a change of side only. If usage dips under the threshold
// between its check and our read (a runtime returning a few pages), the
// notification reads as "below" and the next kernel check, already above
// again, stays silent: the crossing would be lost. So after a notification
// that reads below, usage is re-read every 10 ms for a while and reported
// once it is at or above the threshold. CI once saw a container read below
// at its notification and climb back above later, after the
// half second of fast re-reads: it was never a candidate. So the re-reads go
// on, slower, for ten seconds more (one small file read per 100 ms).
void CgroupTriggers::recheck_threshold(const std::string& memcg, int left) {
  auto it = nodes_.find(memcg);
  if (it == nodes_.end() || !it->second->threshold || left <= 0) return;
  Node& n = *it->second;
  if (!n.recheck) n.recheck = std::make_unique<asio::steady_timer>(io_);
  n.recheck->expires_after(std::chrono::milliseconds(left > kSlowRechecks ? 10 : 100));
  n.recheck->async_wait([this, memcg, left](const boost::system::error_code& ec) {
    if (ec) return;
    auto it = nodes_.find(memcg);
    if (it == nodes_.end() || !it->second->threshold) return;
    const uint64_t want = it->second->threshold->threshold();
    const MemcgStats now = read_memcg_usage(fs_, memcg);
    if (now.usage_bytes && *now.usage_bytes >= want) {
      Trigger t = make_trigger("threshold", "eventfd: crossing read below the threshold, confirmed by re-read");
      t.counters = {{"threshold_bytes", want}, {"usage_bytes", *now.usage_bytes}};
      report(memcg, std::move(t));
      return;
    }
    recheck_threshold(memcg, left - 1);
  });
}

void CgroupTriggers::arm_usage_poll() {
  auto next = std::chrono::steady_clock::time_point::max();
  for (const auto& [path, n] : nodes_)
    if (n->stats.limit_bytes) next = std::min(next, n->next_poll);
  if (next == std::chrono::steady_clock::time_point::max()) return;
  poll_timer_.expires_at(next);
  poll_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    poll_usage();
    arm_usage_poll();
  });
}

void CgroupTriggers::poll_usage() {
  const auto now = std::chrono::steady_clock::now();
  const bool threshold_poll = fs_.version == 2 && options_.threshold;  // v1 has its eventfd
  for (auto& [path, np] : nodes_) {
    Node& n = *np;
    if (!n.stats.limit_bytes || n.next_poll > now) continue;
    const uint64_t limit = *n.stats.limit_bytes;
    const MemcgStats cur = read_memcg_usage(fs_, n.path);
    const uint64_t usage = cur.usage_bytes.value_or(0);
    auto wait = std::chrono::steady_clock::duration(kMaxPoll);
    if (threshold_poll) {
      const uint64_t want = threshold_of(limit, options_.threshold_percent);
      const bool above = cur.usage_bytes && usage >= want;
      if (above && !n.above_threshold) {
        Trigger t = make_trigger("threshold", "poll: memory.current at or above the threshold");
        t.counters = {{"threshold_bytes", want}, {"usage_bytes", usage}};
        report(n.path, std::move(t));
      }
      n.above_threshold = above;
      const double headroom_s = above ? 0.1 : static_cast<double>(want - usage) / kFastestLeakBytesPerSec;
      wait = std::clamp<std::chrono::steady_clock::duration>(seconds(headroom_s), kMinPoll, kMaxPoll);
    }
    if (options_.forecast && cur.usage_bytes) {
      forecast_from(n, usage);
      const uint64_t floor = threshold_of(limit, options_.forecast_options.floor_percent);
      const double headroom_s =
          usage < floor ? static_cast<double>(floor - usage) / kFastestLeakBytesPerSec
                        : static_cast<double>(limit - std::min(usage, limit)) / kFastestLeakBytesPerSec / kForecastPollShare;
      wait = std::min(wait, std::clamp<std::chrono::steady_clock::duration>(seconds(headroom_s), kMinForecastPoll, kMaxPoll));
    }
    n.next_poll = now + wait;
  }
}

void CgroupTriggers::forecast_from(Node& n, uint64_t usage) {
  const uint64_t limit = *n.stats.limit_bytes;
  n.climb.add(monotonic_now_ns(), usage);
  const double expected =
      options_.capture_seconds ? options_.capture_seconds(n.path, usage) : default_capture_seconds(usage);
  auto f = n.climb.due(limit, expected, options_.forecast_options);
  if (!f) return;
  Trigger t = make_trigger("forecast", "poll: at the current rate the limit is nearer than a capture's time");
  t.counters = {{"usage_bytes", usage},
                {"limit_bytes", limit},
                {"bytes_per_second", static_cast<uint64_t>(f->bytes_per_second)},
                {"seconds_to_limit", f->seconds_to_limit},
                {"expected_capture_seconds", expected},
                {"needed_seconds", f->needed_seconds}};
  report(n.path, std::move(t));
}

void CgroupTriggers::watch_psi(Node& n) {
  if (!options_.psi || !n.stats.limit_bytes || n.psi || n.psi_failed) return;
  const std::string file = memory_pressure_file(fs_, n.path);
  std::string error;
  n.psi = PsiTrigger::create(file, "some", options_.psi_stall, options_.psi_window, error);
  if (!n.psi) {
    // Without CAP_SYS_RESOURCE the kernel only accepts windows that are
    // multiples of 2 s.
    std::string error2;
    n.psi = PsiTrigger::create(file, "some", options_.psi_stall * 2, std::chrono::microseconds(2000000), error2);
    if (!n.psi) {
      n.psi_failed = true;
      if (!psi_unavailable_logged_)
        log_->warn("PSI trigger unavailable ({}); memory.events and BPF remain", printable(error));
      psi_unavailable_logged_ = true;
      return;
    }
  }
  n.psi_desc = wrap(io_, n.psi->fd());
  if (!n.psi_desc) {
    n.psi.reset();
    return;
  }
  arm_psi(n.path);
}

void CgroupTriggers::arm_psi(const std::string& memcg) {
  auto it = nodes_.find(memcg);
  if (it == nodes_.end() || !it->second->psi_desc) return;
  // PSI signals with POLLPRI: Asio's "error" wait is the EPOLLPRI condition.
  it->second->psi_desc->async_wait(Descriptor::wait_error, [this, memcg](const boost::system::error_code& ec) {
    if (ec) return;
    auto it = nodes_.find(memcg);
    if (it == nodes_.end() || !it->second->psi) return;
    Trigger t = make_trigger("psi", "poll: memory.pressure trigger");
    std::string error;
    if (auto st = it->second->psi->read(error)) {
      auto line = [](const PsiLine& l) {
        return nlohmann::json{{"avg10", l.avg10}, {"avg60", l.avg60}, {"avg300", l.avg300}, {"total_us", l.total_us}};
      };
      t.counters["some"] = line(st->some);
      if (st->full) t.counters["full"] = line(*st->full);
    }
    report(memcg, std::move(t));
    arm_psi(memcg);
  });
}

void CgroupTriggers::arm_memory_events() {
  events_desc_->async_wait(Descriptor::wait_read, [this](const boost::system::error_code& ec) {
    if (ec) return;
    for (auto& ch : events_watcher_->read_changes()) {
      if (ch.gone) continue;  // the cgroup was removed; the next rescan forgets it
      uint64_t pressure = 0;
      for (const char* key : {"high", "max", "oom", "oom_kill", "oom_group_kill"}) {
        auto d = ch.delta.find(key);
        if (d != ch.delta.end()) pressure += d->second;
      }
      if (!pressure) continue;  // e.g. only "low" moved
      Trigger t = make_trigger("memory_events", "inotify: memory.events changed");
      t.counters = {{"delta", ch.delta}, {"counters", ch.counters}};
      report(ch.rel_path, std::move(t));
    }
    arm_memory_events();
  });
}

}  // namespace oomsnap
