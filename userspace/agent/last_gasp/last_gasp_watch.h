// The last gasp in the agent: the Go processes of the watched containers are
// armed ahead of time, so that when the kernel kills one its heap profile is
// read in the dying process itself (agent/events/last_gasp_source.h) and
// decoded into the snapshot a live read would have given.
//
//   every rescan: list the containers' processes (on lg's worker, bounded)
//     -> LastGaspRoster: the new ones -> a plan each, in a capture process
//        (is it Go 1.19+, where are its globals) -> armed, its executable
//        held open (O_PATH) for the decode
//     -> gone ones (or a reused pid, an exec) disarmed
//   a walk at a SIGKILL (the source's ring buffers, on the loop): kept
//   the record of an OOM kill of it wants it (want())
//     -> decoded in a capture process that reads no process (the image and
//        the executable go to it as descriptors) -> OnDecoded, to the agent
//
// A SIGKILL that is not the OOM killer's (a pod's grace period run out,
// kill -9) is read too: the program cannot tell them apart in time (the
// killer sends the signal before it marks the victim). Its walk is kept
// unread, kMaxKept at most, for kKeptNs, and then dropped: only a kill the
// agent records costs a decode.
//
// Its own worker thread and capture processes: a plan never waits behind a
// capture racing a kill, nor delays one. A decode waits at most for the
// plans already queued (RosterLimits::max_planning).
//
// Threads: every member function on the loop; the worker only runs the jobs
// it is given and posts their ends back to the loop.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <nlohmann/json_fwd.hpp>
#include <spdlog/logger.h>

#include "agent/cgroup/cgroup.h"
#include "agent/events/last_gasp_source.h"
#include "agent/incident/last_gasp_attach.h"
#include "agent/incident/serial_worker.h"
#include "agent/last_gasp/last_gasp_roster.h"
#include "base/unique_fd.h"
#include "capture/capture_sandbox.h"

namespace oomsnap {

class LastGaspWatch {
 public:
  struct Options {
    LastGaspSource::Limits source;
    RosterLimits roster;
    SandboxOptions sandbox;
    CaptureOptions capture;
    // Processes listed per scan at most (their /proc/PID/stat read each):
    // past it the scan is cut short and forgets nothing.
    size_t max_listed = 20000;
  };
  using OnDecoded = std::function<void(LastGaspDecoded)>;
  // nullptr with why when the kernel cannot run the program (the agent then
  // runs without the last gasp). Before the agent's own seccomp filter: it
  // loads BPF.
  static std::unique_ptr<LastGaspWatch> open(boost::asio::io_context& io, Options options, OnDecoded on_decoded,
                                             std::shared_ptr<spdlog::logger> log, std::string& why);
  ~LastGaspWatch();
  LastGaspWatch(const LastGaspWatch&) = delete;
  LastGaspWatch& operator=(const LastGaspWatch&) = delete;

  const std::string& description() const { return source_->description(); }
  // Lists the containers' processes and plans the new ones (one scan at a
  // time: a call while one runs is skipped).
  void scan(const CgroupFs& fs, std::vector<std::string> containers);
  // The record of pid's OOM kill wants its last gasp: true when one is being
  // read or decoded for it, or kept (then decoded now), so that the record
  // waits for OnDecoded; false when none is coming.
  bool want(pid_t pid);
  // New limits for the capture processes (SIGHUP).
  void set_options(const SandboxOptions& sandbox, const CaptureOptions& capture);
  // Stops the worker (a running plan or decode is killed); the loop's waits end.
  void stop();
  nlohmann::json counters() const;

 private:
  LastGaspWatch(boost::asio::io_context& io, Options options, OnDecoded on_decoded,
                std::shared_ptr<spdlog::logger> log);
  struct Armed {
    RosterProcess process;
    ProcessIdentity identity;
    GoLastGaspPlan plan;
    std::shared_ptr<UniqueFd> exe;  // O_PATH, opened before the plan
  };
  void arm_reader();
  void read_walks();
  void on_listed(std::vector<RosterProcess> live, bool complete);
  void plan(const RosterProcess& p);
  void on_planned(const RosterProcess& p, std::optional<Armed> armed, const std::string& why,
                  std::chrono::milliseconds took);
  void keep(LastGaspWalk walk);
  void decode(pid_t pid);
  void drop_stale_kept();
  struct Kept {
    Armed armed;
    LastGaspWalk walk;
  };
  static constexpr size_t kMaxKept = 16;                 // ~7.7 MB each at the bucket cap
  static constexpr MonoNs kKeptNs = 60'000'000'000;     // past any kill record's wait

  boost::asio::io_context& io_;
  Options options_;
  OnDecoded on_decoded_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<LastGaspSource> source_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> desc_;
  LastGaspRoster roster_;
  std::map<pid_t, Armed> armed_;
  std::map<pid_t, Kept> kept_;  // walks no record has wanted yet
  std::set<pid_t> wanted_;      // wanted while their walk was still being read
  std::set<pid_t> decoding_;
  bool scanning_ = false;
  bool stopped_ = false;
  uint64_t walks_ = 0, decoded_ = 0, not_armed_ = 0, dropped_jobs_ = 0, not_wanted_ = 0;
  std::unique_ptr<CaptureSandbox> box_;   // the worker's only
  std::unique_ptr<SerialWorker> worker_;  // last: joined first
};

}  // namespace oomsnap
