#include "agent/last_gasp/last_gasp_watch.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "base/log_escape.h"
#include "core/proc_info.h"

namespace oomsnap {

namespace asio = boost::asio;

namespace {

// Jobs waiting on the worker: the plans in flight (RosterLimits::max_planning),
// a scan, and the decodes of a group kill.
constexpr size_t kWorkerQueue = 256;

std::optional<RosterProcess> roster_process(pid_t pid) {
  auto id = read_identity(pid);
  if (!id || id->exited()) return std::nullopt;
  return RosterProcess{pid, id->start_time_ticks, id->comm};
}

}  // namespace

std::unique_ptr<LastGaspWatch> LastGaspWatch::open(asio::io_context& io, Options options, OnDecoded on_decoded,
                                                   std::shared_ptr<spdlog::logger> log, std::string& why) {
  auto source = LastGaspSource::open(options.source, why);
  if (!source) return nullptr;
  const int fd = ::dup(source->fd());
  if (fd < 0) {
    why = "dup of the last gasp's ring-buffer fd failed";
    return nullptr;
  }
  std::unique_ptr<LastGaspWatch> w(new LastGaspWatch(io, std::move(options), std::move(on_decoded), std::move(log)));
  w->source_ = std::move(source);
  w->desc_ = std::make_unique<asio::posix::stream_descriptor>(io, fd);
  w->arm_reader();
  return w;
}

LastGaspWatch::LastGaspWatch(asio::io_context& io, Options options, OnDecoded on_decoded,
                             std::shared_ptr<spdlog::logger> log)
    : io_(io),
      options_(std::move(options)),
      on_decoded_(std::move(on_decoded)),
      log_(std::move(log)),
      roster_(options_.roster),
      box_(std::make_unique<CaptureSandbox>(options_.sandbox,
                                            [l = log_](const std::string& line) { l->warn("last gasp: {}", line); })),
      worker_(std::make_unique<SerialWorker>(kWorkerQueue)) {}

LastGaspWatch::~LastGaspWatch() { stop(); }

void LastGaspWatch::stop() {
  if (stopped_) return;
  stopped_ = true;
  if (desc_) desc_->cancel();
  box_->cancel();
  worker_->stop();
}

void LastGaspWatch::arm_reader() {
  desc_->async_wait(asio::posix::stream_descriptor::wait_read, [this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    read_walks();
    arm_reader();
  });
}

void LastGaspWatch::read_walks() {
  for (LastGaspWalk& w : source_->consume()) keep(std::move(w));
  drop_stale_kept();
}

void LastGaspWatch::scan(const CgroupFs& fs, std::vector<std::string> containers) {
  if (scanning_ || stopped_) return;
  scanning_ = true;
  const size_t max_listed = options_.max_listed;
  const bool queued = worker_->post([this, fs, containers = std::move(containers), max_listed] {
    std::vector<RosterProcess> live;
    bool complete = true;
    const pid_t self = ::getpid();
    for (const std::string& c : containers) {
      for (pid_t pid : cgroup_pids(fs, c)) {
        if (live.size() >= max_listed) {
          complete = false;
          break;
        }
        if (pid == self) continue;
        if (auto p = roster_process(pid)) live.push_back(std::move(*p));
      }
      if (!complete) break;
    }
    asio::post(io_, [this, live = std::move(live), complete]() mutable { on_listed(std::move(live), complete); });
  });
  if (!queued) {
    scanning_ = false;
    ++dropped_jobs_;
  }
}

void LastGaspWatch::on_listed(std::vector<RosterProcess> live, bool complete) {
  scanning_ = false;
  if (stopped_) return;
  read_walks();  // a walk of a process that has just died is taken before its entry goes
  const LastGaspRoster::Changes c = roster_.scan(live, complete);
  for (pid_t pid : c.to_disarm) {
    source_->disarm(pid);
    if (!source_->walking(pid)) armed_.erase(pid);  // a walk begun keeps what its decode needs
  }
  if (c.deferred) log_->debug("last gasp: {} new process(es) left for a later scan (limits)", c.deferred);
  for (const RosterProcess& p : c.to_plan) plan(p);
}

void LastGaspWatch::plan(const RosterProcess& p) {
  const CaptureOptions opts = options_.capture;
  const bool queued = worker_->post([this, p, opts] {
    const auto t0 = std::chrono::steady_clock::now();
    std::optional<Armed> armed;
    std::string why;
    const std::string proc = "/proc/" + std::to_string(p.pid);
    auto exe = std::make_shared<UniqueFd>(::open((proc + "/exe").c_str(), O_PATH | O_CLOEXEC));
    auto before = read_identity(p.pid);
    if (exe->get() < 0 || !before || before->start_time_ticks != p.start_time_ticks || before->comm != p.comm) {
      why = "gone or replaced before its plan";
    } else if (auto plan = box_->plan_last_gasp(p.pid, opts, why)) {
      // The descriptor and the plan are of the process listed only if it is
      // still that process now (not exited, not exec'd, pid not reused).
      auto after = read_identity(p.pid);
      if (after && after->start_time_ticks == p.start_time_ticks && after->comm == p.comm && !after->exited())
        armed = Armed{p, *before, std::move(*plan), exe};
      else
        why = "gone or replaced during its plan";
    }
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    asio::post(io_, [this, p, armed = std::move(armed), why, ms]() mutable {
      on_planned(p, std::move(armed), why, ms);
    });
  });
  if (!queued) {
    ++dropped_jobs_;
    roster_.planned(p, false);
  }
}

void LastGaspWatch::on_planned(const RosterProcess& p, std::optional<Armed> armed, const std::string& why,
                               std::chrono::milliseconds took) {
  if (stopped_) return;
  if (!roster_.planned(p, armed.has_value())) {
    ++not_armed_;
    log_->debug("last gasp: {} ({}) not armed: {} (plan {} ms)", p.pid, printable(p.comm),
                armed ? "gone, or the limit of armed processes" : printable(why), took.count());
    return;
  }
  std::string err;
  if (!source_->arm(p.pid, p.start_time_ticks, armed->plan.arm, err)) {
    ++not_armed_;
    log_->warn("last gasp: {} ({}) not armed: {}", p.pid, printable(p.comm), printable(err));
    return;
  }
  log_->debug("last gasp: armed {} ({}, {}; plan {} ms)", p.pid, printable(p.comm),
              printable(armed->plan.version.text), took.count());
  armed_[p.pid] = std::move(*armed);
}

void LastGaspWatch::keep(LastGaspWalk walk) {
  ++walks_;
  auto it = armed_.find(walk.pid);
  if (it == armed_.end()) {
    log_->warn("last gasp: a walk of {} that was not armed here: dropped", walk.pid);
    return;
  }
  const pid_t pid = walk.pid;
  log_->info("last gasp: {} ({}) read at its SIGKILL: {} buckets in {} us, {}{}", pid, printable(it->second.process.comm),
             walk.buckets_received, walk.walk_ns / 1000, to_string(walk.status),
             walk.reason.empty() ? "" : ": " + printable(walk.reason));
  kept_[pid] = Kept{std::move(it->second), std::move(walk)};
  armed_.erase(it);
  if (wanted_.erase(pid)) decode(pid);
}

// Walks no OOM kill's record wanted in time (a SIGKILL of another sender),
// and the wishes for walks that never came, go.
void LastGaspWatch::drop_stale_kept() {
  const MonoNs now = monotonic_now_ns();
  auto drop = [this](std::map<pid_t, Kept>::iterator it) {
    ++not_wanted_;
    log_->debug("last gasp of {} not decoded: no record of an OOM kill of it wanted it", it->first);
    return kept_.erase(it);
  };
  for (auto it = kept_.begin(); it != kept_.end();)
    it = now > it->second.walk.ktime_ns + kKeptNs ? drop(it) : std::next(it);
  while (kept_.size() > kMaxKept)  // the oldest first
    drop(std::min_element(kept_.begin(), kept_.end(), [](const auto& a, const auto& b) {
      return a.second.walk.ktime_ns < b.second.walk.ktime_ns;
    }));
  for (auto it = wanted_.begin(); it != wanted_.end();)
    it = source_->walking(*it) ? std::next(it) : wanted_.erase(it);
}

void LastGaspWatch::decode(pid_t pid) {
  auto it = kept_.find(pid);
  if (it == kept_.end()) return;
  Kept k = std::move(it->second);
  kept_.erase(it);
  decoding_.insert(pid);
  const CaptureOptions opts = options_.capture;
  const bool queued = worker_->post([this, k = std::move(k), opts]() mutable {
    LastGaspDecoded d;
    d.pid = k.walk.pid;
    d.walk_start_ns = k.walk.ktime_ns;
    d.walk_end_ns = k.walk.ktime_ns + k.walk.walk_ns;
    std::shared_ptr<MemoryImage> image = k.walk.image;
    LastGaspDecodeRequest req{std::move(k.armed.plan), k.armed.identity, std::move(k.walk)};
    d.record = box_->decode_last_gasp(req, *image, k.armed.exe->get(), opts);
    asio::post(io_, [this, d = std::move(d)]() mutable {
      decoding_.erase(d.pid);
      if (stopped_) return;
      ++decoded_;
      on_decoded_(std::move(d));
    });
  });
  if (!queued) {
    ++dropped_jobs_;
    decoding_.erase(pid);
    log_->warn("last gasp: the walk of {} not decoded: the worker's queue is full", pid);
  }
}

bool LastGaspWatch::want(pid_t pid) {
  if (stopped_) return false;
  read_walks();
  if (decoding_.count(pid)) return true;
  if (kept_.count(pid)) {
    decode(pid);
    return decoding_.count(pid) != 0;
  }
  if (source_->walking(pid)) {
    wanted_.insert(pid);
    return true;
  }
  return false;
}

void LastGaspWatch::set_options(const SandboxOptions& sandbox, const CaptureOptions& capture) {
  options_.capture = capture;
  worker_->post([box = box_.get(), sandbox] { box->set_options(sandbox); });
}

nlohmann::json LastGaspWatch::counters() const {
  return {{"armed", armed_.size()},
          {"planning", roster_.planning()},
          {"not_armed", not_armed_},
          {"walks", walks_},
          {"decoded", decoded_},
          {"not_wanted", not_wanted_},
          {"dropped_jobs", dropped_jobs_ + source_->dropped_control()}};
}

}  // namespace oomsnap
