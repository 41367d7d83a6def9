#include "agent/events/memcg_notify.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>

#include "base/text.h"
#include "base/unique_fd.h"

namespace oomsnap {
namespace {

// Whole-file read through open/read so a failure keeps its errno for the
// message (a vanished cgroup reads as ENOENT or ENODEV, not as empty).
bool read_whole_file(const std::string& path, std::string& out, std::string& error) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    error = "open " + path + ": " + errno_text(errno);
    return false;
  }
  out.clear();
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = "read " + path + ": " + errno_text(errno);
      return false;
    }
    if (n == 0) return true;
    out.append(buf, static_cast<size_t>(n));
  }
}

bool has_cap_sys_resource() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capget, &hdr, data) != 0) return false;
  return (data[CAP_TO_INDEX(CAP_SYS_RESOURCE)].effective & CAP_TO_MASK(CAP_SYS_RESOURCE)) != 0;
}

// "avg10=1.23" style value: the whole string must be a finite, non-negative number.
bool parse_double(const std::string& s, double& out) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);  // locale-independent, unlike strtod
  return ec == std::errc() && p == end && std::isfinite(out) && out >= 0;
}

bool parse_u64(const std::string& s, uint64_t& out) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  return !s.empty() && ec == std::errc() && p == end;
}

// One "some ..." / "full ..." line after its first word.
std::optional<PsiLine> parse_psi_fields(std::istringstream& fields) {
  PsiLine line;
  bool seen10 = false, seen60 = false, seen300 = false, seen_total = false;
  std::string token;
  while (fields >> token) {
    auto eq = token.find('=');
    if (eq == std::string::npos) return std::nullopt;
    const std::string key = token.substr(0, eq), value = token.substr(eq + 1);
    bool ok = true;
    if (key == "avg10") ok = seen10 = parse_double(value, line.avg10);
    else if (key == "avg60") ok = seen60 = parse_double(value, line.avg60);
    else if (key == "avg300") ok = seen300 = parse_double(value, line.avg300);
    else if (key == "total") ok = seen_total = parse_u64(value, line.total_us);
    if (!ok) return std::nullopt;
  }
  if (!(seen10 && seen60 && seen300 && seen_total)) return std::nullopt;
  return line;
}

}  // namespace

// ---- v1 eventfds ----

V1EventFd::~V1EventFd() {
  // The last close of the eventfd wakes the kernel's memcg event with
  // EPOLLHUP, which unregisters it; nothing else has to be written.
  if (efd_ >= 0) ::close(efd_);
}

bool V1EventFd::drain() {
  uint64_t count = 0;
  for (;;) {
    ssize_t n = ::read(efd_, &count, sizeof count);
    if (n < 0 && errno == EINTR) continue;
    return n == static_cast<ssize_t>(sizeof count) && count > 0;  // EAGAIN: not fired
  }
}

int V1EventFd::register_event(const CgroupFs& fs, const std::string& rel_path, const char* control_file,
                              const std::string& args, std::string& error) {
  const std::string dir = memcg_dir(fs, rel_path);
  const std::string target = dir + "/" + control_file;
  if (fs.version != 1) {
    error = std::string("cannot register for ") + target + ": cgroup.event_control notifications exist only on " +
            "cgroup v1, this memory controller is v" + std::to_string(fs.version);
    return -1;
  }
  UniqueFd efd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (efd.get() < 0) {
    error = "eventfd for " + target + ": " + errno_text(errno);
    return -1;
  }
  // The kernel only looks the target fd up during the write below (to find
  // which file and cgroup the event is for); it keeps the eventfd and a
  // reference to the cgroup, so both helper fds are closed on return.
  UniqueFd tfd(::open(target.c_str(), O_RDONLY | O_CLOEXEC));
  if (tfd.get() < 0) {
    error = "open " + target + ": " + errno_text(errno);
    return -1;
  }
  const std::string control = dir + "/cgroup.event_control";
  UniqueFd cfd(::open(control.c_str(), O_WRONLY | O_CLOEXEC));
  if (cfd.get() < 0) {
    error = "open " + control + ": " + errno_text(errno);
    return -1;
  }
  std::string line = std::to_string(efd.get()) + " " + std::to_string(tfd.get());
  if (!args.empty()) line += " " + args;
  ssize_t n = ::write(cfd.get(), line.data(), line.size());
  if (n != static_cast<ssize_t>(line.size())) {
    error = "write \"" + line + "\" to " + control + ": " + (n < 0 ? errno_text(errno) : "short write");
    return -1;
  }
  return efd.release();
}

std::unique_ptr<V1ThresholdEvent> V1ThresholdEvent::create(const CgroupFs& fs, const std::string& rel_path,
                                                           uint64_t threshold_bytes, std::string& error) {
  int efd = register_event(fs, rel_path, "memory.usage_in_bytes", std::to_string(threshold_bytes), error);
  if (efd < 0) return nullptr;
  return std::unique_ptr<V1ThresholdEvent>(new V1ThresholdEvent(efd, rel_path, threshold_bytes));
}

std::unique_ptr<V1OomEvent> V1OomEvent::create(const CgroupFs& fs, const std::string& rel_path,
                                               std::string& error) {
  int efd = register_event(fs, rel_path, "memory.oom_control", "", error);
  if (efd < 0) return nullptr;
  return std::unique_ptr<V1OomEvent>(new V1OomEvent(efd, rel_path));
}

// ---- v2 memory.events ----

std::unique_ptr<MemoryEventsWatcher> MemoryEventsWatcher::create(std::string& error) {
  int ifd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (ifd < 0) {
    error = "inotify_init1: " + errno_text(errno) + " (limit: /proc/sys/fs/inotify/max_user_instances)";
    return nullptr;
  }
  return std::unique_ptr<MemoryEventsWatcher>(new MemoryEventsWatcher(ifd));
}

MemoryEventsWatcher::~MemoryEventsWatcher() {
  if (ifd_ >= 0) ::close(ifd_);  // drops every watch with it
}

bool MemoryEventsWatcher::add(const CgroupFs& fs, const std::string& rel_path, std::string& error) {
  if (wd_of_path_.count(rel_path)) return true;
  const std::string file = memcg_dir(fs, rel_path) + "/memory.events";
  if (fs.version != 2) {
    error = "cannot watch " + file + ": memory.events exists only on cgroup v2, this memory controller is v" +
            std::to_string(fs.version) + " (use V1OomEvent / V1ThresholdEvent)";
    return false;
  }
  // Watch first, then read the baseline: a change in between then shows up
  // as an event (at worst one with no delta), never as a missed one.
  int wd = ::inotify_add_watch(ifd_, file.c_str(), IN_MODIFY);
  if (wd < 0) {
    error = "inotify_add_watch " + file + ": " + errno_text(errno) +
            (errno == ENOSPC ? " (limit: /proc/sys/fs/inotify/max_user_watches)" : "");
    return false;
  }
  if (auto it = watches_.find(wd); it != watches_.end()) {
    // inotify hands out one wd per inode: this is the same file under
    // another spelling, and removing either would silently drop both.
    error = "cannot watch " + file + ": already watched as " + it->second.rel_path;
    return false;
  }
  std::string text;
  if (!read_whole_file(file, text, error)) {
    ::inotify_rm_watch(ifd_, wd);
    return false;
  }
  watches_[wd] = Watch{rel_path, file, parse_flat_keyed(text)};
  wd_of_path_[rel_path] = wd;
  return true;
}

void MemoryEventsWatcher::remove(const std::string& rel_path) {
  auto it = wd_of_path_.find(rel_path);
  if (it == wd_of_path_.end()) return;
  // Events already queued for this wd (and the IN_IGNORED that follows)
  // are skipped by read_changes because the wd is no longer known; wds are
  // allocated cyclically, so a new watch does not reuse it soon.
  ::inotify_rm_watch(ifd_, it->second);
  watches_.erase(it->second);
  wd_of_path_.erase(it);
}

std::optional<MemoryEventsChange> MemoryEventsWatcher::refresh(Watch& w) {
  MemoryEventsChange change;
  change.rel_path = w.rel_path;
  std::string text;
  if (!read_whole_file(w.file, text, change.error)) {
    change.gone = true;
    return change;
  }
  change.counters = parse_flat_keyed(text);
  for (const auto& [key, now] : change.counters) {
    auto prev = w.last.find(key);
    uint64_t before = prev == w.last.end() || prev->second > now ? 0 : prev->second;
    if (now > before) change.delta[key] = now - before;
  }
  w.last = change.counters;
  if (change.delta.empty()) return std::nullopt;
  return change;
}

std::vector<MemoryEventsChange> MemoryEventsWatcher::read_changes() {
  std::set<int> modified, dropped;
  bool overflow = false;
  alignas(struct inotify_event) char buf[8192];
  for (;;) {
    ssize_t n = ::read(ifd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EAGAIN: drained
    for (char* p = buf; p < buf + n;) {
      const auto* ev = reinterpret_cast<const struct inotify_event*>(p);
      if (ev->mask & IN_Q_OVERFLOW) overflow = true;
      else if (ev->mask & IN_IGNORED) dropped.insert(ev->wd);  // the kernel removed the watch
      else if (ev->mask & IN_MODIFY) modified.insert(ev->wd);
      p += sizeof(struct inotify_event) + ev->len;
    }
  }
  // Events were lost: which files changed is unknown, so re-read them all.
  if (overflow) {
    for (const auto& [wd, w] : watches_) modified.insert(wd);
  }
  std::vector<MemoryEventsChange> out;
  for (int wd : modified) {
    auto it = watches_.find(wd);
    if (it == watches_.end() || dropped.count(wd)) continue;
    auto change = refresh(it->second);
    if (!change) continue;
    if (change->gone) {
      ::inotify_rm_watch(ifd_, wd);
      wd_of_path_.erase(it->second.rel_path);
      watches_.erase(it);
    }
    out.push_back(std::move(*change));
  }
  for (int wd : dropped) {
    auto it = watches_.find(wd);
    if (it == watches_.end()) continue;  // removed by us: its IN_IGNORED arrives late
    MemoryEventsChange change;
    change.rel_path = it->second.rel_path;
    change.gone = true;
    change.error = "the kernel dropped the watch on " + it->second.file + " (deleted)";
    wd_of_path_.erase(it->second.rel_path);
    watches_.erase(it);
    out.push_back(std::move(change));
  }
  return out;
}

// ---- PSI ----

std::optional<PsiStats> parse_psi(const std::string& text) {
  std::optional<PsiLine> some, full;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string kind;
    if (!(fields >> kind)) continue;  // blank line
    if (kind != "some" && kind != "full") continue;
    std::optional<PsiLine>& slot = kind == "some" ? some : full;
    if (slot) return std::nullopt;  // two "some" lines: not a pressure file
    slot = parse_psi_fields(fields);
    if (!slot) return std::nullopt;
  }
  if (!some) return std::nullopt;
  return PsiStats{*some, full};
}

std::string memory_pressure_file(const CgroupFs& fs, const std::string& rel_path) {
  if (fs.version == 2) return memcg_dir(fs, rel_path) + "/memory.pressure";
  return "/proc/pressure/memory";
}

std::unique_ptr<PsiTrigger> PsiTrigger::create(const std::string& pressure_file, const std::string& kind,
                                               std::chrono::microseconds stall, std::chrono::microseconds window,
                                               std::string& error) {
  if (kind != "some" && kind != "full") {
    error = "PSI trigger on " + pressure_file + ": kind must be \"some\" or \"full\", not \"" + kind + "\"";
    return nullptr;
  }
  if (stall.count() <= 0 || window.count() <= 0 || stall > window) {
    error = "PSI trigger on " + pressure_file + ": need 0 < stall <= window, got stall " +
            std::to_string(stall.count()) + " us, window " + std::to_string(window.count()) + " us";
    return nullptr;
  }
  // O_RDWR: the trigger is created by a write, and the same fd is polled;
  // closing it destroys the trigger.
  UniqueFd fd(::open(pressure_file.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) {
    int err = errno;
    error = "open " + pressure_file + ": " + errno_text(err);
    if (err == ENOENT) error += " (kernel without PSI, booted with psi=0, or the cgroup is gone)";
    return nullptr;
  }
  const std::string spec = kind + " " + std::to_string(stall.count()) + " " + std::to_string(window.count());
  // The terminating NUL is part of the write on purpose: the kernel
  // overwrites the last byte written with NUL before parsing, so without it
  // "some 150000 2000000" would be read as a 200000 us window (rejected).
  ssize_t n = ::write(fd.get(), spec.c_str(), spec.size() + 1);
  if (n != static_cast<ssize_t>(spec.size() + 1)) {
    int err = n < 0 ? errno : EIO;
    error = "write \"" + spec + "\" to " + pressure_file + ": " + errno_text(err);
    if (err == EINVAL) {
      error += " (the kernel accepts 500000 <= window <= 10000000 us";
      error += has_cap_sys_resource()
                   ? ")"
                   : "; this process lacks CAP_SYS_RESOURCE, so the window must also be a multiple of 2 s)";
    } else if (err == EOPNOTSUPP) {
      error += " (PSI is disabled)";
    }
    return nullptr;
  }
  return std::unique_ptr<PsiTrigger>(new PsiTrigger(fd.release(), pressure_file));
}

PsiTrigger::~PsiTrigger() {
  if (fd_ >= 0) ::close(fd_);  // destroys the trigger
}

bool PsiTrigger::fired(int timeout_ms) {
  if (gone_) return true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    pollfd p{fd_, POLLPRI, 0};
    int r = ::poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) {
      if (timeout_ms > 0) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        timeout_ms = left.count() > 0 ? static_cast<int>(left.count()) : 0;
      }
      continue;
    }
    if (r <= 0) return false;
    if (p.revents & (POLLERR | POLLNVAL)) {
      gone_ = true;
      return true;
    }
    return (p.revents & POLLPRI) != 0;
  }
}

std::optional<PsiStats> PsiTrigger::read(std::string& error) const {
  // pread from offset 0 restarts the seq_file each time, so the trigger's
  // own fd serves as a reader too (no second open of a cgroup that may vanish).
  std::string text;
  char buf[1024];
  for (;;) {
    ssize_t n = ::pread(fd_, buf, sizeof buf, static_cast<off_t>(text.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = "read " + path_ + ": " + errno_text(errno);
      return std::nullopt;
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  auto stats = parse_psi(text);
  if (!stats) error = "cannot parse " + path_ + ": \"" + text + "\"";
  return stats;
}

}  // namespace oomsnap
