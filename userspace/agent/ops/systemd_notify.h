// The agent as a systemd service (Type=notify): READY=1 once it watches,
// STATUS= a one-line summary, WATCHDOG=1 from the event loop (so a stalled
// loop stops the pings and systemd restarts it), RELOADING=1 around SIGHUP
// and STOPPING=1 at shutdown. Outside systemd (no NOTIFY_SOCKET) every call
// does nothing; libsystemd's sd_notify does the protocol (opened at run time).
#pragma once
#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace oomsnap {

class SystemdNotifier {
 public:
  // Reads NOTIFY_SOCKET / WATCHDOG_USEC / WATCHDOG_PID once, as systemd set them.
  SystemdNotifier();
  ~SystemdNotifier();
  SystemdNotifier(const SystemdNotifier&) = delete;
  SystemdNotifier& operator=(const SystemdNotifier&) = delete;

  bool active() const { return active_; }
  // How often to send WATCHDOG=1: half of WatchdogSec, as sd_watchdog_enabled(3)
  // advises; nullopt when systemd does not watch this process.
  std::optional<std::chrono::milliseconds> watchdog_interval() const { return watchdog_interval_; }

  void ready(const std::string& status);
  void status(const std::string& status);
  void watchdog();
  void reloading();
  void stopping();

  // Why libsystemd could not be opened under systemd (nothing is then sent,
  // and a Type=notify unit times out); empty when it was, or outside systemd.
  std::string library_error() const;
  // sd_notify's last error (negative errno), 0 when none: for the log.
  int last_error() const { return last_error_; }

 private:
  void send(const std::string& state);

  struct Library;
  std::unique_ptr<Library> library_;  // only while active
  bool active_ = false;
  std::optional<std::chrono::milliseconds> watchdog_interval_;
  int last_error_ = 0;
};

// What systemd shows in `systemctl status` (STATUS=): one line, no newlines.
std::string one_line_status(std::string s);

}  // namespace oomsnap
