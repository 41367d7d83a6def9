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
// SIGPIPE: a sink writing to a closed pipe gets EPIPE, reported through
// `error`. Sinks block SIGPIPE (and SIGXFSZ, raised past RLIMIT_FSIZE) in the
// writing thread around write(2) and discard the signal that write raised, so
// the agent survives a consumer that went away even if nobody set SIGPIPE to
// SIG_IGN — no process-wide state is touched. main() should still ignore
// SIGPIPE for every other descriptor the agent writes (sockets, exec'd tools).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/time_format.h"  // rfc3339_ms, for the records' timestamps

namespace oomsnap {

class RecordSink {
 public:
  virtual ~RecordSink() = default;
  // Writes one line. `json_line` is one record with no '\n' inside; a trailing
  // '\n' is optional (added when missing). Thread-safe. Returns false and sets
  // `error` (naming the sink, the path and strerror) when something failed;
  // the message says whether the record itself was written (e.g. written but
  // rotation failed). A failure never disables the sink: the next call
  // reopens what it needs and tries again.
  virtual bool write_line(const std::string& json_line, std::string& error) = 0;
  // "stdout", "file:/var/log/oomsnap/oomsnap.jsonl", ...: for error messages.
  virtual std::string name() const = 0;
};

// Writes to an existing descriptor (stdout: fd 1) that the sink does not own
// or close. Short writes and EINTR are retried until the line is complete
// (pipes and terminals may accept part of a line); the sink's mutex is held
// through the retries, so no other thread's record can get in between. If a
// write fails with part of the line out, the sink remembers the open
// fragment and starts its next record with '\n'. A non-blocking descriptor
// that stays full for 5 s fails the record rather than stalling the agent.
// Lines up to PIPE_BUF (4096) bytes are also atomic against other processes
// writing the same pipe; longer ones only against this sink.
std::unique_ptr<RecordSink> make_stream_sink(int fd, std::string name);

// File name of the live file in a rotating sink's directory.
inline constexpr const char* kRecordFileName = "oomsnap.jsonl";

// Appends to <dir>/oomsnap.jsonl, rotated by size: when appending a line would
// make the file exceed max_bytes, oomsnap.jsonl -> .1 -> .2 ... with at most
// max_files files in total (the oldest is deleted; max_files = 1 keeps only
// the live file). A line longer than max_bytes is written whole, alone in a
// fresh file. `dir` is created (mkdir -p, 0755) here, and again if it
// vanishes later; returns nullptr and sets `error` if it cannot be created or
// the file cannot be opened for append.
//
// How lines stay whole:
// - each line is ONE write(2) on an O_APPEND descriptor: the kernel appends
//   it at the end of the file as a unit, even with other appenders (Linux
//   holds the inode lock for the whole write). A short write is never
//   completed by a second write(2) — the tail could land after another
//   process's bytes; the fragment is ended with '\n' instead.
// - size check, rotation and write happen under flock(2) on the directory,
//   so several agents (or a restarted one overlapping the old) sharing a
//   directory rotate consistently and never lose each other's lines.
// - a file that does not end in '\n' before a write (a fragment from a
//   failed write, possibly another agent's) gets the '\n' prepended to the
//   record in the same write(2); see inspect() in sink.cpp for how a line
//   an unrelated program is writing at that moment is told apart.
// - the file is reopened when another process (logrotate, another agent)
//   renamed it away, and after any write error.
std::unique_ptr<RecordSink> make_rotating_file_sink(std::string dir, uint64_t max_bytes,
                                                    int max_files, std::string& error);

// The set of sinks one agent writes every record to.
class SinkSet {
 public:
  // Call during setup, before write() runs on any thread: the set itself is
  // not locked (each sink is).
  void add(std::unique_ptr<RecordSink> sink);
  size_t size() const { return sinks_.size(); }

  // Serialises `record` once (compact, invalid UTF-8 replaced by U+FFFD rather
  // than throwing: strings from /proc and target memory are not guaranteed
  // UTF-8), appends '\n' and writes it to every sink, even after one failed.
  // Returns true when every sink wrote it; otherwise appends one message per
  // failing sink to `errors`. An empty set is an error too: a record written
  // nowhere should not pass unnoticed.
  bool write(const nlohmann::json& record, std::vector<std::string>& errors);

 private:
  std::vector<std::unique_ptr<RecordSink>> sinks_;
};

// The exact line SinkSet writes for `record`, '\n' included.
std::string record_line(const nlohmann::json& record);

}  // namespace oomsnap
