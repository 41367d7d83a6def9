// The kernel's log, read for its OOM reports (agent/cgroup/kernel_oom_report.h).
// Two ways in, the first that works at start:
//   /dev/kmsg   opened once (CAP_SYSLOG where dmesg_restrict is set, checked
//               at open only), positioned at its end, read as the loop finds
//               records waiting: nothing printed after the start is missed
//               unless the ring buffer wraps between two reads;
//   syslog(2)   SYSLOG_ACTION_READ_ALL with CAP_SYSLOG, where no /dev/kmsg is
//               in reach (a pod has no such device, systemd's PrivateDevices
//               hides it): its last MiB read at each record, its lines
//               past the last one taken fed on (they carry no sequence
//               number, so the printk timestamps say which are new).
// Either way the log is read once more just before a kill's record is
// written, so the report printed before the kill is in hand. Without either
// the agent goes on; its kill records then lack the kernel's report.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "agent/cgroup/kernel_oom_report.h"

namespace oomsnap {

// syslog(2)'s "<prio>[ secs.usecs] text" lines past `after_us` (and, at
// that same timestamp, past the first `after_count` of them), fed to
// `reports` (KernelOomReports::feed_text); `after_us`/`after_count` then name the last
// line fed. False when the lines carry no timestamp (printk.time off).
bool feed_syslog_lines(std::string_view text, KernelOomReports& reports, uint64_t& after_us, uint64_t& after_count);

class KernelLog {
 public:
  struct Paths {
    std::string kmsg = "/dev/kmsg";
    bool syslog = true;  // fall back to syslog(2)
  };
  // nullptr and why when neither way can be read.
  static std::unique_ptr<KernelLog> open(boost::asio::io_context& io, std::string& why, const Paths& paths);
  static std::unique_ptr<KernelLog> open(boost::asio::io_context& io, std::string& why) {
    return open(io, why, Paths{});
  }
  ~KernelLog();
  KernelLog(const KernelLog&) = delete;
  KernelLog& operator=(const KernelLog&) = delete;

  // Reads records as they come (until cancel()); /dev/kmsg only.
  void start();
  void cancel();
  // Reads every record waiting now, without blocking; bounded per call.
  void drain();
  const KernelOomReports& reports() const { return reports_; }
  const char* source() const { return desc_ ? "/dev/kmsg" : "syslog(2)"; }

 private:
  KernelLog(boost::asio::io_context& io, int fd);
  explicit KernelLog(size_t syslog_size);
  void arm();
  void drain_syslog();

  std::unique_ptr<boost::asio::posix::stream_descriptor> desc_;  // /dev/kmsg; null: syslog(2)
  int fd_ = -1;
  std::vector<char> syslog_buf_;  // the kernel log's size, taken once at open
  uint64_t syslog_after_us_ = 0, syslog_after_count_ = 0;
  KernelOomReports reports_;
};

}  // namespace oomsnap
