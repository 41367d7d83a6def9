// What the record sinks share (agent/records/stream_sink.cpp, agent/records/rotating_file_sink.cpp):
// one record as one line, writes that cannot raise SIGPIPE or SIGXFSZ, and
// waits bounded by a sink's own deadline and the writer's.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <cerrno>
#include <string>

#include "agent/records/sink.h"

namespace oomsnap::sink_io {

using Clock = SinkDeadline::Clock;


// `json_line` as exactly one '\n'-terminated line, or false when it is empty
bool prepare_line(const std::string& json_line, std::string& line, std::string& error);
// prepare_line, or false with `r` set to rejected, its error naming the sink.
bool prepare_or_reject(const std::string& json_line, const std::string& sink, std::string& line, WriteResult& r);

// Blocks SIGPIPE and SIGXFSZ in the calling thread for the lifetime of the
// object. A write(2) to a closed pipe raises SIGPIPE, and one past
// RLIMIT_FSIZE raises SIGXFSZ, at the writing thread; both default to killing
// the process, which must not be what a sink failure does. Blocked, the
// signal stays pending on this thread and the write returns EPIPE/EFBIG, which
// we report; discard() then removes the pending signal so it is not delivered
// when the mask is restored. A signal already pending before we blocked
// (someone else's) is left alone.
class WriteSignalGuard {
 public:
  WriteSignalGuard() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGPIPE);
    sigaddset(&set_, SIGXFSZ);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    pipe_was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    fsize_was_pending_ = sigismember(&pending, SIGXFSZ) == 1;
  }
  ~WriteSignalGuard() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  WriteSignalGuard(const WriteSignalGuard&) = delete;
  WriteSignalGuard& operator=(const WriteSignalGuard&) = delete;

  // After a write failed with `err`: drops the signal that failure raised.
  void discard(int err) {
    int sig = 0;
    if (err == EPIPE && !pipe_was_pending_) sig = SIGPIPE;
    if (err == EFBIG && !fsize_was_pending_) sig = SIGXFSZ;
    if (sig == 0) return;
    const int saved = errno;
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    const timespec zero{0, 0};
    // Zero timeout: if the signal is ignored it was never queued (EAGAIN).
    while (sigtimedwait(&one, nullptr, &zero) < 0 && errno == EINTR) {
    }
    errno = saved;
  }

 private:
  sigset_t set_{}, old_{};
  bool pipe_was_pending_ = false, fsize_was_pending_ = false;
};

// The earlier of a sink's own deadline and the writer's (brought forward at shutdown).
Clock::time_point earliest(Clock::time_point own, const SinkDeadline& deadline);
long long ms_since(Clock::time_point start);
// Waits until `fd` has room (or an error/hangup a write will report), in
// slices of at most 10 ms so a deadline brought forward by another thread is
// seen. False when min(own, deadline) passed first.
bool wait_writable(int fd, Clock::time_point own, const SinkDeadline& deadline);
// "a FIFO", "a symbolic link", ... for error messages.
const char* file_kind(mode_t mode);
// "0644".
std::string octal_mode(mode_t mode);

}  // namespace oomsnap::sink_io
