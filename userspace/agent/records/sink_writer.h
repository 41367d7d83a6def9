// Writes records to a SinkSet on one thread of its own, so the event loop
// hands a record over and goes on: post() never waits for a sink.
//
//   loop --post(line)--> bounded queue --writer thread--> per-sink backlog --> sink
//
// Every record goes to every sink, in the order posted. A record a sink fails
// to write (its store lock held by another process, a consumer not reading
// stdout, ENOSPC) stays at the head of that sink's backlog and is retried,
// after a backoff, before any newer record for that sink, so records land in
// order once the sink works again; the other sinks go on meanwhile. Nothing
// grows without bound: the queue refuses records past its limits (counted as
// dropped), a backlog past its limits drops its oldest record (counted as
// lost for that sink). Each sink call is bounded in time (see sink.h), so
// stop() always returns, by its deadline.
//
// Messages for the log (first failure of a sink and its recovery, records
// lost, errors of records written anyway) are collected for the owner to
// take; the writer thread never touches the owner's objects, it can only call
// `on_message`, which the owner makes safe (e.g. asio::post to its loop).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent/records/sink.h"

namespace oomsnap {

struct SinkWriterOptions {
  // Records posted but not yet taken by the writer thread (it takes them
  // between two sink calls, so this only fills while one call is slow).
  size_t max_queued_records = 1024;
  size_t max_queued_bytes = 64u << 20;
  // Records waiting for one sink, the failed one at their head. Full: the
  // oldest is dropped and counted as lost for that sink.
  size_t max_backlog_records = 1024;
  size_t max_backlog_bytes = 64u << 20;
  // Wait before retrying a sink that failed: doubles from `retry_initial`
  // after each failure in a row, up to `retry_max`.
  std::chrono::milliseconds retry_initial{50};
  std::chrono::milliseconds retry_max{1000};
  // A sink still failing is reported again this often (first failure and
  // recovery are always reported).
  std::chrono::milliseconds repeat_report{30000};
  // Messages waiting to be taken; more are counted and summarised.
  size_t max_messages = 256;
  // Called on the writer thread, without any lock held, after messages were
  // added. Must be thread-safe and must not block or call back into the
  // writer's stop(); e.g. [&io, this] { asio::post(io, [this] { log_sink_messages(); }); }.
  std::function<void()> on_message;
};

struct SinkWriterCounters {
  struct Sink {
    std::string name;
    uint64_t written = 0;  // records this sink holds now (also those written with an error)
    uint64_t errors = 0;   // failed attempts (a record tried 3 times counts 3) + errors of
                           // records written anyway (rotation failed)
    uint64_t lost = 0;     // records this sink will never get: backlog full, rejected,
                           // left at stop, or its sink removed by replace_sinks
    size_t backlog = 0;    // records waiting for this sink (retried or not yet tried)
  };
  uint64_t posted = 0;   // accepted by post()
  uint64_t dropped = 0;  // refused by post() (queue full, stopped, no sink, bad line): written nowhere
  size_t queued = 0;     // accepted, not yet taken by the writer thread
  std::vector<Sink> sinks;
  // Of sinks replace_sinks() removed (so the totals below never go down).
  uint64_t removed_sinks_errors = 0, removed_sinks_lost = 0;

  // Every sink's errors, removed ones included.
  uint64_t sink_errors() const;
  // dropped + every sink's lost: record-sink pairs that never happen (one
  // record lost by two sinks counts 2; dropped ones count 1).
  uint64_t lost() const;
};

class SinkWriter {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts the writer thread. An empty set is allowed (post() then refuses).
  explicit SinkWriter(SinkSet sinks, SinkWriterOptions options = {});
  // stop(Clock::now()) unless stopped: what is still waiting is lost.
  ~SinkWriter();
  SinkWriter(const SinkWriter&) = delete;
  SinkWriter& operator=(const SinkWriter&) = delete;

  // Queues one record (a line as record_line() makes it; the trailing '\n'
  // is optional). Never blocks: takes a mutex the writer thread only holds
  // for bookkeeping, never during a sink call. False when the record is
  // refused (counted in `dropped`), with a one-line `reason` for the log:
  // queue full, writer stopped, no sink, or a line that is empty or has a
  // raw newline inside.
  bool post(std::string line, std::string* reason = nullptr);

  // SIGHUP: the writer switches to `sinks` between two sink calls. A new
  // sink with the name() of an old one inherits its backlog and counters
  // (records waiting for "file:/x/oomsnap.jsonl" still go there, in order);
  // the backlog of an old sink with no successor is counted lost. The old
  // sinks are closed on the writer thread. Never blocks.
  void replace_sinks(SinkSet sinks);

  // Writes what is queued and retries what failed until everything is
  // written or `deadline` passes, then gives up (what is left is counted
  // lost, and said in a message) and joins the thread. Returns by
  // `deadline` (+ ~10 ms; a sink call in progress is told the deadline) —
  // except a write(2) to a regular file that the kernel itself holds.
  // Returns how many record-sink pairs were lost at stop. post() refuses
  // afterwards. Call from the owner's thread; a second call returns 0.
  size_t stop(Clock::time_point deadline);

  SinkWriterCounters counters() const;

  // The messages collected since the last call, oldest first.
  std::vector<std::string> take_messages();

 private:
  struct SinkState;
  using Record = std::shared_ptr<const std::string>;

  void run();
  void take_queue_locked();
  void apply_replacement_locked(std::vector<std::unique_ptr<RecordSink>>& retired);
  void handle_result_locked(SinkState& s, const WriteResult& r, Clock::time_point now);
  void give_up_locked();
  void message_locked(std::string m);
  bool all_written_locked() const;

  const SinkWriterOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_:
  std::deque<Record> queue_;
  size_t queued_bytes_ = 0;
  std::vector<std::unique_ptr<SinkState>> sinks_;
  std::optional<std::vector<std::unique_ptr<RecordSink>>> replacement_;
  size_t sink_count_ = 0;  // of the set post() feeds (the replacement's, once given)
  uint64_t posted_ = 0, dropped_ = 0;
  uint64_t removed_errors_ = 0, removed_lost_ = 0;
  uint64_t kicks_ = 0;  // post/replace_sinks/stop: wakes the writer from a backoff wait
  std::deque<std::string> messages_;
  uint64_t messages_suppressed_ = 0;
  bool new_messages_ = false;
  bool stopping_ = false;
  Clock::time_point stop_deadline_ = Clock::time_point::max();
  size_t lost_at_stop_ = 0;
  // The deadline of the sink call in progress: stop() brings it forward.
  SinkDeadline call_deadline_;
  std::thread thread_;  // last: starts after the members it uses exist
};

}  // namespace oomsnap
