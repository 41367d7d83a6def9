// The last gasp in the agent: a Go process of a limited container, armed
// ahead of time (agent/last_gasp/last_gasp_watch.h), is read in its own
// context when the kernel kills it, and its record of the kill carries what
// was read (agent/incident/last_gasp_attach.h). A kill's record is written
// after the victim's exit (or a second); the walk is over by then, its decode
// in a capture process may not be: the record waits for it, a few seconds at
// most.
#include "agent/agent.h"

#include "base/log_escape.h"
#include "core/proc_info.h"

namespace oomsnap {

namespace {

// Decoded last gasps kept for a record that has not asked for them yet (the
// kill's record is written after them): at most this many, this long.
constexpr size_t kMaxUnclaimedLastGasps = 64;
constexpr MonoNs kUnclaimedLastGaspNs = 60'000'000'000;

}  // namespace

void Agent::open_last_gasp() {
  if (!options_.config.last_gasp) {
    log_->info("last gasp: off ([capture] LastGasp = false)");
    return;
  }
  LastGaspWatch::Options o;
  o.sandbox = sandbox_options();
  o.capture = capture_options();
  std::string why;
  last_gasp_ = LastGaspWatch::open(io_, std::move(o), [this](LastGaspDecoded d) { on_last_gasp(std::move(d)); },
                                   log_, why);
  if (last_gasp_)
    log_->info("last gasp: on ({}): the Go processes of limited containers are armed, and read at their kill",
               last_gasp_->description());
  else
    log_->warn("last gasp: off ({}): a Go process killed before a snapshot gets none", why);
}

void Agent::on_last_gasp(LastGaspDecoded d) {
  const pid_t pid = d.pid;
  log_->info("last gasp: {} decoded: snapshot {}{}", pid, to_string(d.record.result.snapshot.status),
             d.record.result.snapshot.reason.empty() ? "" : ": " + printable(d.record.result.snapshot.reason));
  // Forget what no record claimed in time, then keep this one.
  const MonoNs now = monotonic_now_ns();
  for (auto it = last_gasps_.begin(); it != last_gasps_.end();)
    it = now > it->second.walk_end_ns + kUnclaimedLastGaspNs ? last_gasps_.erase(it) : std::next(it);
  if (last_gasps_.size() >= kMaxUnclaimedLastGasps) last_gasps_.erase(last_gasps_.begin());
  last_gasps_[pid] = std::move(d);
  // The records waiting for it, and any other open incident of its kill.
  for (auto& [id, held] : held_for_last_gasp_) attach_last_gasps(held.inc);
  release_held(false);
}

// Attaches the decoded last gasps of inc's killed processes; how many of
// them are still being read or decoded.
size_t Agent::attach_last_gasps(Incident& inc) {
  if (!inc.oom_kill) return 0;
  size_t waiting = 0;
  for (const KilledProcess& k : inc.oom_kill->killed) {
    auto it = last_gasps_.find(k.pid);
    if (it != last_gasps_.end() && last_gasp_of_kill(inc, it->second)) {
      const std::string what =
          attach_last_gasp(inc, std::move(it->second), kMaxLastGaspOthers);
      last_gasps_.erase(it);
      log_->info("incident {}: {}", inc.id, what);
    } else if (last_gasp_ && last_gasp_->want(k.pid)) {
      ++waiting;
    }
  }
  return waiting;
}

bool Agent::hold_for_last_gasp(Incident& inc) {
  if (!last_gasp_ || !inc.oom_kill) return false;
  const size_t waiting = attach_last_gasps(inc);
  if (!waiting || stopping_) return false;
  // The decodes run one after another, each killed at the capture's hard
  // deadline at worst.
  const auto& c = options_.config;
  const auto per_decode = std::chrono::duration_cast<std::chrono::nanoseconds>(c.run_tracing_tool_timeout + c.capture_grace);
  const MonoNs wait =
      std::min<MonoNs>(kMaxLastGaspWaitNs, waiting * static_cast<MonoNs>(per_decode.count()) + 1'000'000'000);
  log_->debug("incident {}: its record waits up to {} ms for the last gasp of {} killed process(es)", inc.id,
              wait / 1'000'000, waiting);
  const uint64_t id = inc.id;
  held_for_last_gasp_[id] = {std::move(inc), monotonic_now_ns() + wait};
  arm_last_gasp_timer();
  return true;
}

// Writes the held records whose last gasps are in (all: every one, at
// their deadline or at shutdown, with what they have).
void Agent::release_held(bool all) {
  const MonoNs now = monotonic_now_ns();
  for (auto it = held_for_last_gasp_.begin(); it != held_for_last_gasp_.end();) {
    HeldForLastGasp& h = it->second;
    const bool waiting = attach_last_gasps(h.inc);
    if (waiting && !all && now < h.until) {
      ++it;
      continue;
    }
    if (waiting) log_->warn("incident {}: written without the last gasp it waited for", h.inc.id);
    Incident inc = std::move(h.inc);
    it = held_for_last_gasp_.erase(it);
    name_then_write(std::move(inc));
  }
  arm_last_gasp_timer();
}

void Agent::arm_last_gasp_timer() {
  last_gasp_timer_.cancel();
  if (held_for_last_gasp_.empty() || stopping_) return;
  MonoNs next = UINT64_MAX;
  for (const auto& [id, h] : held_for_last_gasp_) next = std::min(next, h.until);
  const MonoNs now = monotonic_now_ns();
  last_gasp_timer_.expires_after(std::chrono::nanoseconds(next > now ? next - now : 0));
  last_gasp_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) release_held(false);
  });
}

}  // namespace oomsnap
