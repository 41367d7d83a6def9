#include "agent/events/kernel_log.h"

#include <fcntl.h>
#include <sys/klog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <vector>

#include "base/syslog_actions.h"

namespace oomsnap {
namespace {
// One read returns one record, formatted by the kernel into at most 8 KiB
// (CONSOLE_EXT_LOG_MAX): a buffer of that size never meets EINVAL.
constexpr size_t kRecordBuffer = 8192;
// Records read per drain(): the loop gets the rest on its next turn.
constexpr int kMaxRecordsPerDrain = 4096;
// The kernel's log buffer is 4 KiB .. 32 MiB (log_buf_len); READ_ALL gives
// its most recent bytes that fit, whole records. A report is printed within
// a second of the record and is ~10 KiB: the last 1 MiB holds it, and the
// agent keeps no bigger buffer for its lifetime.
constexpr size_t kMaxSyslogBuffer = size_t{1} << 20;

// "[ 1234.567890] " at the start of `s`: the time in µs, and the text after it.
bool printk_time(std::string_view s, uint64_t& us, std::string_view& text) {
  if (s.empty() || s[0] != '[') return false;
  const size_t close = s.find("] ");
  const size_t dot = s.find('.');
  if (close == std::string_view::npos || dot == std::string_view::npos || dot > close) return false;
  std::string_view secs = s.substr(1, dot - 1), frac = s.substr(dot + 1, close - dot - 1);
  while (!secs.empty() && secs[0] == ' ') secs.remove_prefix(1);
  uint64_t sec = 0, usec = 0;
  if (frac.size() != 6) return false;
  if (std::from_chars(secs.data(), secs.data() + secs.size(), sec).ptr != secs.data() + secs.size()) return false;
  if (std::from_chars(frac.data(), frac.data() + frac.size(), usec).ptr != frac.data() + frac.size()) return false;
  if (sec > (~uint64_t{0} / 1'000'000) - 1) return false;
  us = sec * 1'000'000 + usec;
  text = s.substr(close + 2);
  return true;
}

}  // namespace

bool feed_syslog_lines(std::string_view text, KernelOomReports& reports, uint64_t& after_us, uint64_t& after_count) {
  uint64_t seen_at_after = 0;
  bool any_time = false;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    // "<prio>" then the printk time.
    if (line.size() < 3 || line[0] != '<') continue;
    const size_t gt = line.find('>');
    if (gt == std::string_view::npos || gt > 6) continue;
    uint32_t prio = 0;
    const std::string_view p = line.substr(1, gt - 1);
    if (p.empty() || std::from_chars(p.data(), p.data() + p.size(), prio).ptr != p.data() + p.size()) continue;
    uint64_t us = 0;
    std::string_view body;
    if (!printk_time(line.substr(gt + 1), us, body)) continue;
    any_time = true;
    if (us < after_us) continue;
    if (us > after_us) {
      after_us = us;
      after_count = 0;
      seen_at_after = 0;
    }
    if (++seen_at_after <= after_count) continue;  // fed in an earlier pass
    ++after_count;
    reports.feed_text(prio, 0, us, body);
  }
  return any_time;
}

std::unique_ptr<KernelLog> KernelLog::open(boost::asio::io_context& io, std::string& why, const Paths& paths) {
  const int fd = ::open(paths.kmsg.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) {
    // From now on: the reports of kills before the agent started are of no use.
    if (::lseek(fd, 0, SEEK_END) >= 0) return std::unique_ptr<KernelLog>(new KernelLog(io, fd));
    why = "cannot seek " + paths.kmsg + ": " + std::strerror(errno);
    ::close(fd);
  } else {
    why = "cannot open " + paths.kmsg + ": " + std::strerror(errno);
  }
  if (!paths.syslog) return nullptr;
  const int size = ::klogctl(static_cast<int>(kSyslogSizeBuffer), nullptr, 0);
  if (size <= 0) {
    why += std::string("; syslog(2): ") + (size < 0 ? std::strerror(errno) : "no buffer");
    return nullptr;
  }
  auto log = std::unique_ptr<KernelLog>(new KernelLog(std::min(static_cast<size_t>(size), kMaxSyslogBuffer)));
  // What is in the buffer now is from before the start: only its position is taken.
  KernelOomReports ignored;
  std::vector<char>& buf = log->syslog_buf_;
  const int n = ::klogctl(static_cast<int>(kSyslogReadAll), buf.data(), static_cast<int>(buf.size()));
  if (n < 0) {
    why += std::string("; syslog(2) read: ") + std::strerror(errno);
    return nullptr;
  }
  if (n > 0 && !feed_syslog_lines(std::string_view(buf.data(), static_cast<size_t>(n)), ignored, log->syslog_after_us_,
                                  log->syslog_after_count_)) {
    why += "; syslog(2): its lines carry no time (printk.time off), so new ones cannot be told apart";
    return nullptr;
  }
  return log;
}

KernelLog::KernelLog(boost::asio::io_context& io, int fd)
    : desc_(std::make_unique<boost::asio::posix::stream_descriptor>(io, fd)), fd_(fd) {}

KernelLog::KernelLog(size_t syslog_size) : syslog_buf_(syslog_size) {}

KernelLog::~KernelLog() = default;  // desc_ closes fd_

void KernelLog::start() {
  if (desc_) arm();
}

void KernelLog::cancel() {
  boost::system::error_code ec;
  if (desc_) desc_->cancel(ec);
}

void KernelLog::arm() {
  desc_->async_wait(boost::asio::posix::stream_descriptor::wait_read, [this](const boost::system::error_code& ec) {
    if (ec) return;
    drain();
    arm();
  });
}

void KernelLog::drain() {
  if (!desc_) {
    drain_syslog();
    return;
  }
  char buf[kRecordBuffer];
  for (int i = 0; i < kMaxRecordsPerDrain; ++i) {
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n > 0) {
      reports_.feed(std::string_view(buf, static_cast<size_t>(n)));
      continue;
    }
    // EPIPE: records overwritten before we read them; the position moved on.
    if (n < 0 && (errno == EPIPE || errno == EINTR)) continue;
    return;  // EAGAIN: nothing more now (EINVAL, a record past the buffer, would not move on either)
  }
}

void KernelLog::drain_syslog() {
  const int n = ::klogctl(static_cast<int>(kSyslogReadAll), syslog_buf_.data(), static_cast<int>(syslog_buf_.size()));
  if (n > 0)
    feed_syslog_lines(std::string_view(syslog_buf_.data(), static_cast<size_t>(n)), reports_, syslog_after_us_,
                      syslog_after_count_);
}

}  // namespace oomsnap
