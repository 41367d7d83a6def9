#include "agent/ops/systemd_notify.h"

#include <dlfcn.h>
#include <systemd/sd-daemon.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace oomsnap {

// libsystemd is opened here, only by an agent that systemd started, not
// linked: every other start of oomsnap (the CLI, each capture process) would
// otherwise load it and the five libraries it needs (userspace/CMakeLists.txt).
struct SystemdNotifier::Library {
  void* handle = nullptr;
  decltype(&sd_notify) notify = nullptr;
  decltype(&sd_watchdog_enabled) watchdog_enabled = nullptr;

  std::string error;

  Library() {
    handle = dlopen("libsystemd.so.0", RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      notify = reinterpret_cast<decltype(notify)>(dlsym(handle, "sd_notify"));
      watchdog_enabled = reinterpret_cast<decltype(watchdog_enabled)>(dlsym(handle, "sd_watchdog_enabled"));
    }
    if (!ok()) {
      const char* e = dlerror();
      error = e ? e : "libsystemd.so.0 lacks sd_notify";
    }
  }
  ~Library() {
    if (handle) dlclose(handle);
  }
  bool ok() const { return notify && watchdog_enabled; }
};

SystemdNotifier::SystemdNotifier() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  active_ = socket && *socket;
  if (!active_) return;
  library_ = std::make_unique<Library>();
  if (!library_->ok()) {
    last_error_ = -ELIBACC;
    return;
  }
  uint64_t usec = 0;
  // > 0: systemd watches this process (WATCHDOG_PID, when set, names it).
  if (library_->watchdog_enabled(0, &usec) > 0 && usec > 0)
    watchdog_interval_ = std::chrono::milliseconds(std::max<uint64_t>(usec / 2000, 1));
}

SystemdNotifier::~SystemdNotifier() = default;

std::string SystemdNotifier::library_error() const { return library_ ? library_->error : std::string(); }

void SystemdNotifier::send(const std::string& state) {
  if (!active_ || !library_->ok()) return;
  // unset_environment 0: the capture processes the agent starts are not
  // services; they never notify (their environment is cleared anyway).
  const int r = library_->notify(0, state.c_str());
  if (r < 0) last_error_ = r;
}

void SystemdNotifier::ready(const std::string& status) { send("READY=1\nSTATUS=" + one_line_status(status)); }

void SystemdNotifier::status(const std::string& status) { send("STATUS=" + one_line_status(status)); }

void SystemdNotifier::watchdog() { send("WATCHDOG=1"); }

void SystemdNotifier::reloading() {
  // systemd 253+ wants MONOTONIC_USEC with RELOADING=1 (Type=notify-reload);
  // older ones ignore the extra field.
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const uint64_t usec = static_cast<uint64_t>(ts.tv_sec) * 1'000'000u + static_cast<uint64_t>(ts.tv_nsec) / 1000u;
  send("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec));
}

void SystemdNotifier::stopping() { send("STOPPING=1"); }

std::string one_line_status(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r' || static_cast<unsigned char>(c) < 0x20) c = ' ';
  if (s.size() > 400) s.resize(400);
  return s;
}

}  // namespace oomsnap
