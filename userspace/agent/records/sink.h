// Where incident records go: one JSON object per line ("JSON Lines") to
// stdout and/or a size-rotated file under the storage directory.
//
// The guarantee every sink keeps: one record is exactly one line, and the
// bytes of two records never interleave — not between threads of the agent,
// and not with another process appending to the same file. Consumers (log
// shippers, `jq`, humans) can then split on '\n' and parse each line alone.
// If a write fails part-way (ENOSPC, a file size limit), the fragment is
// ended with '\n' before any later record is written, so the damage stays a
// single unparsable line and never glues two records together.
//
// Every sink operation is bounded in time (see SinkDeadline and each sink's
// timeout), so a thread writing records — SinkWriter's — can always be
// stopped; stdout to a consumer that stopped reading or a store directory
// whose lock another process holds fails the record (to be retried) instead
// of stalling.
//
// SIGPIPE: a sink writing to a closed pipe gets EPIPE, reported through
// `error`. Sinks block SIGPIPE (and SIGXFSZ, raised past RLIMIT_FSIZE) in the
// writing thread around write(2) and discard the signal that write raised, so
// the agent survives a consumer that went away even if nobody set SIGPIPE to
// SIG_IGN — no process-wide state is touched. main() should still ignore
// SIGPIPE for every other descriptor the agent writes (sockets, exec'd tools).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/records/time_format.h"  // rfc3339_ms, for the records' timestamps

namespace oomsnap {

// When a sink operation has to be over. The thread that owns the operation
// may move it earlier from another thread (SinkWriter::stop does); a sink
// waiting for a lock or for room in a pipe notices within ~10 ms. Each sink
// also applies its own timeout, whichever comes first.
class SinkDeadline {
 public:
  using Clock = std::chrono::steady_clock;
  SinkDeadline() : SinkDeadline(Clock::time_point::max()) {}
  explicit SinkDeadline(Clock::time_point t) : rep_(t.time_since_epoch().count()) {}
  SinkDeadline(const SinkDeadline&) = delete;
  SinkDeadline& operator=(const SinkDeadline&) = delete;

  Clock::time_point get() const {
    return Clock::time_point(Clock::duration(rep_.load(std::memory_order_acquire)));
  }
  void reset(Clock::time_point t) { rep_.store(t.time_since_epoch().count(), std::memory_order_release); }
  // Moves the deadline to `t` if that is earlier; never later.
  void bring_forward(Clock::time_point t);

 private:
  std::atomic<Clock::rep> rep_;
};

enum class WriteStatus {
  written,             // the record is in the sink; nothing to report
  written_with_error,  // the record is in the sink, something else failed (rotation): see error
  failed,              // not written, or cut short (the fragment is ended with '\n'):
                       // writing the same record again later may succeed
  rejected,            // can never be written (empty, or a raw newline inside): don't retry
};

struct WriteResult {
  WriteStatus status = WriteStatus::failed;
  std::string error;  // names the sink, the path and why; empty only for `written`
  bool record_written() const {
    return status == WriteStatus::written || status == WriteStatus::written_with_error;
  }
};

class RecordSink {
 public:
  virtual ~RecordSink() = default;
  // Writes one line. `json_line` is one record with no '\n' inside; a trailing
  // '\n' is optional (added when missing). Thread-safe. Returns by `deadline`
  // or the sink's own timeout, whichever is first (give or take ~10 ms; a
  // write(2) to a regular file is the one step that is not bounded: a disk or
  // NFS server that stops answering stalls it). A failure never disables the
  // sink: the next call reopens what it needs and tries again.
  virtual WriteResult write_record(const std::string& json_line, const SinkDeadline& deadline) = 0;
  // write_record bounded by the sink's own timeouts only. Returns true when
  // the record was written and nothing failed; otherwise sets `error`
  // (naming the sink, the path and strerror, and saying whether the record
  // itself was written, e.g. "written but rotation failed").
  bool write_line(const std::string& json_line, std::string& error);
  // "stdout", "file:/var/log/oomsnap/oomsnap.jsonl", ...: for error messages.
  virtual std::string name() const = 0;
};

struct StreamSinkOptions {
  // How long one record may wait for room (a consumer not reading) before
  // it fails; a record cut at that point leaves a fragment ended later.
  std::chrono::milliseconds write_timeout{1000};
};

// Writes to an existing descriptor (stdout: fd 1) that the sink does not own
// or close, and whose file status flags it never changes (they are shared
// with whoever else holds the descriptor). How a write stays bounded depends
// on what the descriptor is, looked at once, here:
// - pipe or FIFO, terminal: each record goes through a private open file
//   description of the same pipe/terminal, opened from /proc/self/fd/N with
//   O_NONBLOCK (and O_NOCTTY), so a full pipe or a stopped terminal returns
//   EAGAIN instead of blocking; the sink polls for room until the timeout.
//   A pipe without a reader is "Broken pipe" as a write would say. Should
//   that open fail otherwise (no /proc), the record fails unless the shared
//   descriptor is non-blocking already: a blocking write is never risked.
// - socket (journald's stdout stream): send(2) with MSG_DONTWAIT |
//   MSG_NOSIGNAL, polling for room until the timeout.
// - anything else (regular file, /dev/null): write(2) as is; a descriptor
//   that is already non-blocking is polled until the timeout.
// Short writes and EINTR are retried until the line is complete (pipes and
// terminals may accept part of a line); the sink's mutex is held through the
// retries, so no other thread's record can get in between. If a write fails
// with part of the line out (timeout, EPIPE), the sink remembers the open
// fragment and starts its next record with '\n'. Lines up to PIPE_BUF (4096)
// bytes are also atomic against other processes writing the same pipe;
// longer ones only against this sink.
std::unique_ptr<RecordSink> make_stream_sink(int fd, std::string name, StreamSinkOptions options = {});

// File name of the live file in a rotating sink's directory.
inline constexpr const char* kRecordFileName = "oomsnap.jsonl";

struct RotatingFileOptions {
  std::string dir;
  uint64_t max_bytes = 64ull << 20;
  int max_files = 5;
  // How long a write waits for the directory lock another process holds
  // (retrying every 5 ms) before the record fails with "lock held".
  std::chrono::milliseconds lock_timeout{1000};
};

// Appends to <dir>/oomsnap.jsonl, rotated by size: when appending a line would
// make the file exceed max_bytes, oomsnap.jsonl -> .1 -> .2 ... with at most
// max_files files in total (the oldest is deleted; max_files = 1 keeps only
// the live file). A line longer than max_bytes is written whole, alone in a
// fresh file. Returns nullptr and sets `error` if the directory is unsafe
// (below), cannot be created, or the file cannot be opened for append.
//
// Who can read and redirect the records (they name other tenants' functions,
// classes, cgroups and pods):
// - missing directories are created 0700, files 0600 (an existing live file
//   with wider permissions, e.g. from an older version, is narrowed to 0600).
// - `dir` is resolved one component at a time from "/" (symlinks followed by
//   hand) and refused when anyone but root (or our euid) could replace a
//   component or plant files in it: every directory on the way must be owned
//   by root/us and not group- or other-writable, except that an ancestor
//   with the sticky bit (/tmp) may be, since there others cannot rename or
//   remove what root owns; the store directory itself may not be writable by
//   others even with the sticky bit; a symlink on the way must be owned by
//   root/us. Checked at open and again at every write (a record found
//   unsafe then fails, to be retried).
// - the live file is opened with O_NOFOLLOW | O_NONBLOCK relative to the
//   checked directory and must be a regular file, owned by our euid, with
//   one link: a symlink, FIFO, device or hard link planted there is refused
//   (never followed, never blocked on) and the write fails saying so.
//   Rotation checks every name it renames or removes the same way (a
//   directory still makes rename(2) fail with its own error); a foreign entry
//   stops the rotation and the record goes into the live file, reported.
//
// How lines stay whole:
// - each line is ONE write(2) on an O_APPEND descriptor: the kernel appends
//   it at the end of the file as a unit, even with other appenders (Linux
//   holds the inode lock for the whole write). A short write is never
//   completed by a second write(2) — the tail could land after another
//   process's bytes; the fragment is ended with '\n' instead.
// - size check, rotation and write happen under flock(2) on the directory,
//   so several agents (or a restarted one overlapping the old) sharing a
//   directory rotate consistently and never lose each other's lines. The
//   lock is taken with LOCK_NB, retried every 5 ms up to lock_timeout (or the
//   caller's deadline): another process holding it fails the record with
//   "lock held by pid N (comm)" (from /proc/locks), never stalls the writer.
//   flock failing otherwise (ENOLCK) writes unlocked and says so.
// - a file that does not end in '\n' before a write (a fragment from a
//   failed write, possibly another agent's) gets the '\n' prepended to the
//   record in the same write(2); see inspect() in sink.cpp for how a line
//   an unrelated program is writing at that moment is told apart.
// - the file is reopened when another process (logrotate, another agent)
//   renamed it away, and after any write error.
std::unique_ptr<RecordSink> make_rotating_file_sink(RotatingFileOptions options, std::string& error);
// Same, with the default lock timeout.
std::unique_ptr<RecordSink> make_rotating_file_sink(std::string dir, uint64_t max_bytes,
                                                    int max_files, std::string& error);

// The set of sinks one agent writes every record to.
class SinkSet {
 public:
  // Call during setup, before write() runs on any thread: the set itself is
  // not locked (each sink is).
  void add(std::unique_ptr<RecordSink> sink);
  size_t size() const { return sinks_.size(); }
  // Hands the sinks over (to a SinkWriter); the set is empty afterwards.
  std::vector<std::unique_ptr<RecordSink>> release() { return std::move(sinks_); }

  // Serialises `record` once (compact, invalid UTF-8 replaced by U+FFFD rather
  // than throwing: strings from /proc and target memory are not guaranteed
  // UTF-8), appends '\n' and writes it to every sink, even after one failed.
  // Returns true when every sink wrote it; otherwise appends one message per
  // failing sink to `errors`. An empty set is an error too: a record written
  // nowhere should not pass unnoticed. Runs on the calling thread (each sink
  // bounded by its own timeouts); an event loop should use SinkWriter.
  bool write(const nlohmann::json& record, std::vector<std::string>& errors);

 private:
  std::vector<std::unique_ptr<RecordSink>> sinks_;
};

// The exact line SinkSet writes for `record`, '\n' included.
std::string record_line(const nlohmann::json& record);

}  // namespace oomsnap
