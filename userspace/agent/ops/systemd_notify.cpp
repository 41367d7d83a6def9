#include "agent/ops/systemd_notify.h"

#include <systemd/sd-daemon.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>

namespace oomsnap {

SystemdNotifier::SystemdNotifier() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  active_ = socket && *socket;
  uint64_t usec = 0;
  // > 0: systemd watches this process (WATCHDOG_PID, when set, names it).
  if (active_ && sd_watchdog_enabled(0, &usec) > 0 && usec > 0)
    watchdog_interval_ = std::chrono::milliseconds(std::max<uint64_t>(usec / 2000, 1));
}

void SystemdNotifier::send(const std::string& state) {
  if (!active_) return;
  // unset_environment 0: the capture processes the agent starts are not
  // services; they never notify (their environment is cleared anyway).
  const int r = sd_notify(0, state.c_str());
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
