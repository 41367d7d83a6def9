#include "agent/records/sink_writer.h"

#include <signal.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace oomsnap {

namespace {

using Clock = SinkWriter::Clock;
using std::chrono::milliseconds;

std::string seconds_since(Clock::time_point start, Clock::time_point now) {
  const auto ms = std::chrono::duration_cast<milliseconds>(now - start).count();
  return std::to_string(ms / 1000) + "." + std::to_string(ms % 1000 / 100) + " s";
}

}  // namespace

// One sink and the records waiting for it.
struct SinkWriter::SinkState {
  std::unique_ptr<RecordSink> sink;
  std::string name;
  std::deque<Record> backlog;  // front: the next to write (possibly failed before)
  size_t backlog_bytes = 0;
  uint64_t written = 0, errors = 0, lost = 0;
  // Failures in a row, for backoff and for reporting once, not per attempt.
  uint64_t failures = 0;
  milliseconds backoff{0};
  Clock::time_point next_try{};
  Clock::time_point failing_since{}, last_report{};
  uint64_t lost_while_failing = 0;
  std::string last_error;
};

uint64_t SinkWriterCounters::sink_errors() const {
  uint64_t n = removed_sinks_errors;
  for (const auto& s : sinks) n += s.errors;
  return n;
}

uint64_t SinkWriterCounters::lost() const {
  uint64_t n = dropped + removed_sinks_lost;
  for (const auto& s : sinks) n += s.lost;
  return n;
}

SinkWriter::SinkWriter(SinkSet sinks, SinkWriterOptions options) : options_(std::move(options)) {
  for (auto& sink : sinks.release()) {
    auto s = std::make_unique<SinkState>();
    s->name = sink->name();
    s->sink = std::move(sink);
    sinks_.push_back(std::move(s));
  }
  sink_count_ = sinks_.size();
  thread_ = std::thread([this] { run(); });
}

SinkWriter::~SinkWriter() { stop(Clock::now()); }

bool SinkWriter::post(std::string line, std::string* reason) {
  // Checked here, on the caller's thread, so the caller hears why at once.
  const char* bad = nullptr;
  size_t len = line.size();
  if (len > 0 && line[len - 1] == '\n') --len;
  if (len == 0) bad = "empty record; dropped";
  else if (std::memchr(line.data(), '\n', len)) bad = "record contains a raw newline; dropped";
  auto record = bad ? nullptr : std::make_shared<const std::string>(std::move(line));

  std::unique_lock<std::mutex> lock(mu_);
  auto refuse = [&](std::string why) {
    ++dropped_;
    if (reason) *reason = std::move(why);
    return false;
  };
  if (bad) return refuse(bad);
  if (stopping_) return refuse("record writer stopped; record dropped");
  if (sink_count_ == 0) return refuse("no record sinks configured; record dropped");
  // One record is always accepted into an empty queue, however large.
  if (queue_.size() >= options_.max_queued_records ||
      (!queue_.empty() && queued_bytes_ + record->size() > options_.max_queued_bytes))
    return refuse("record queue full (" + std::to_string(queue_.size()) + " records, " +
                  std::to_string(queued_bytes_) + " bytes waiting for the writer thread); record dropped");
  queued_bytes_ += record->size();
  queue_.push_back(std::move(record));
  ++posted_;
  ++kicks_;
  lock.unlock();
  cv_.notify_one();
  return true;
}

void SinkWriter::replace_sinks(SinkSet sinks) {
  auto list = sinks.release();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      sink_count_ = list.size();
      replacement_ = std::move(list);
      ++kicks_;
    }
  }
  cv_.notify_one();
  // After stop the set is simply closed (here, as `list` goes).
}

size_t SinkWriter::stop(Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) return 0;
    stopping_ = true;
    ++kicks_;
    stop_deadline_ = std::min(stop_deadline_, deadline);
    call_deadline_.bring_forward(stop_deadline_);
  }
  cv_.notify_all();
  thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  return lost_at_stop_;
}

SinkWriterCounters SinkWriter::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  SinkWriterCounters c;
  c.posted = posted_;
  c.dropped = dropped_;
  c.queued = queue_.size();
  c.removed_sinks_errors = removed_errors_;
  c.removed_sinks_lost = removed_lost_;
  for (const auto& s : sinks_)
    c.sinks.push_back({s->name, s->written, s->errors, s->lost, s->backlog.size()});
  return c;
}

std::vector<std::string> SinkWriter::take_messages() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out(std::make_move_iterator(messages_.begin()),
                               std::make_move_iterator(messages_.end()));
  messages_.clear();
  if (messages_suppressed_) {
    out.push_back(std::to_string(messages_suppressed_) + " more record sink messages suppressed (more than " +
                  std::to_string(options_.max_messages) + " waiting)");
    messages_suppressed_ = 0;
  }
  return out;
}

void SinkWriter::message_locked(std::string m) {
  if (messages_.size() >= options_.max_messages) {
    ++messages_suppressed_;
    return;
  }
  messages_.push_back(std::move(m));
  new_messages_ = true;
}

bool SinkWriter::all_written_locked() const {
  if (!queue_.empty() || replacement_) return false;
  for (const auto& s : sinks_)
    if (!s->backlog.empty()) return false;
  return true;
}

// Moves the queued records to every sink's backlog, dropping the oldest of a
// backlog past its limits (the newest record is always kept).
void SinkWriter::take_queue_locked() {
  if (queue_.empty()) return;
  if (sinks_.empty()) {  // replaced by an empty set after these were posted
    dropped_ += queue_.size();
    message_locked(std::to_string(queue_.size()) + " record(s) dropped: no record sinks configured");
  }
  for (auto& sp : sinks_) {
    SinkState& s = *sp;
    uint64_t dropped = 0;
    for (const auto& r : queue_) {
      s.backlog.push_back(r);
      s.backlog_bytes += r->size();
    }
    while (s.backlog.size() > 1 && (s.backlog.size() > options_.max_backlog_records ||
                                    s.backlog_bytes > options_.max_backlog_bytes)) {
      s.backlog_bytes -= s.backlog.front()->size();
      s.backlog.pop_front();
      ++dropped;
    }
    if (dropped) {
      s.lost += dropped;
      const bool first = s.lost_while_failing == 0;
      s.lost_while_failing += dropped;
      if (first)
        message_locked(s.name + ": retry backlog full (" + std::to_string(options_.max_backlog_records) +
                       " records / " + std::to_string(options_.max_backlog_bytes) + " bytes): oldest " +
                       std::to_string(dropped) + " record(s) dropped, lost for this sink" +
                       (s.last_error.empty() ? "" : "; it fails with: " + s.last_error));
    }
  }
  queue_.clear();
  queued_bytes_ = 0;
}

void SinkWriter::apply_replacement_locked(std::vector<std::unique_ptr<RecordSink>>& retired) {
  std::vector<std::unique_ptr<SinkState>> next;
  for (auto& sink : *replacement_) {
    auto s = std::make_unique<SinkState>();
    s->name = sink->name();
    for (auto& old : sinks_) {
      if (old && old->name == s->name) {
        s = std::move(old);  // backlog, counters and failure state go on
        retired.push_back(std::move(s->sink));
        break;
      }
    }
    s->sink = std::move(sink);
    next.push_back(std::move(s));
  }
  for (auto& old : sinks_) {
    if (!old) continue;
    if (!old->backlog.empty()) {
      old->lost += old->backlog.size();
      message_locked(old->name + ": removed by a configuration reload with " +
                     std::to_string(old->backlog.size()) + " record(s) still unwritten; lost for it");
    }
    removed_errors_ += old->errors;
    removed_lost_ += old->lost;
    retired.push_back(std::move(old->sink));
  }
  sinks_ = std::move(next);
  replacement_.reset();
}

void SinkWriter::handle_result_locked(SinkState& s, const WriteResult& r, Clock::time_point now) {
  auto pop = [&] {
    s.backlog_bytes -= s.backlog.front()->size();
    s.backlog.pop_front();
  };
  auto recovered = [&] {
    if (s.failures == 0) return;
    message_locked(s.name + ": writing again after " + std::to_string(s.failures) + " failed attempt(s) over " +
                   seconds_since(s.failing_since, now) +
                   (s.lost_while_failing ? "; " + std::to_string(s.lost_while_failing) + " record(s) lost meanwhile"
                                         : "; no record lost"));
    s.failures = 0;
    s.backoff = milliseconds(0);
    s.lost_while_failing = 0;
    s.last_error.clear();
  };
  switch (r.status) {
    case WriteStatus::written:
      pop();
      ++s.written;
      recovered();
      s.next_try = now;
      return;
    case WriteStatus::written_with_error:
      pop();
      ++s.written;
      ++s.errors;
      recovered();
      message_locked(r.error);
      s.next_try = now;
      return;
    case WriteStatus::rejected:
      pop();
      ++s.lost;
      ++s.errors;
      message_locked(r.error + " (record dropped)");
      return;
    case WriteStatus::failed:
      break;
  }
  ++s.errors;
  s.last_error = r.error;
  if (s.failures++ == 0) {
    s.failing_since = s.last_report = now;
    message_locked(r.error + "; keeping it to retry (" + std::to_string(s.backlog.size()) + " waiting)");
  } else if (now - s.last_report >= options_.repeat_report) {
    s.last_report = now;
    message_locked(s.name + ": still failing after " + std::to_string(s.failures) + " attempts over " +
                   seconds_since(s.failing_since, now) + " (" + std::to_string(s.backlog.size()) +
                   " waiting, " + std::to_string(s.lost_while_failing) + " lost): " + r.error);
  }
  s.backoff = s.backoff.count() == 0 ? options_.retry_initial : std::min(s.backoff * 2, options_.retry_max);
  s.next_try = now + s.backoff;
}

// At the stop deadline: what is still waiting will never be written.
void SinkWriter::give_up_locked() {
  if (!queue_.empty()) {
    for (auto& s : sinks_) s->lost += queue_.size();
    lost_at_stop_ += queue_.size() * sinks_.size();
    message_locked("stop: " + std::to_string(queue_.size()) + " queued record(s) not written by the deadline; lost");
    queue_.clear();
    queued_bytes_ = 0;
  }
  for (auto& s : sinks_) {
    if (s->backlog.empty()) continue;
    const size_t n = s->backlog.size();
    s->lost += n;
    lost_at_stop_ += n;
    message_locked("stop: " + std::to_string(n) + " record(s) not written to " + s->name +
                   " by the deadline; lost" + (s->last_error.empty() ? "" : "; it failed with: " + s->last_error));
    s->backlog.clear();
    s->backlog_bytes = 0;
  }
}

void SinkWriter::run() {
  // Process signals (SIGTERM, SIGHUP, ...) are for the owner's thread.
  // (Faults stay unblocked; SIGPIPE/SIGXFSZ are handled around each write.)
  sigset_t all;
  sigfillset(&all);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP}) sigdelset(&all, sig);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);

  std::unique_lock<std::mutex> lock(mu_);
  size_t next_sink = 0;  // round robin, so a failing sink does not starve the others
  for (;;) {
    if (replacement_) {
      std::vector<std::unique_ptr<RecordSink>> retired;
      apply_replacement_locked(retired);
      lock.unlock();
      retired.clear();  // closes files outside the lock
      lock.lock();
    }
    take_queue_locked();
    const auto now = Clock::now();
    if (stopping_ && (all_written_locked() || now >= stop_deadline_)) break;

    SinkState* pick = nullptr;
    auto wake = Clock::time_point::max();
    for (size_t k = 0; k < sinks_.size(); ++k) {
      const size_t i = (next_sink + k) % sinks_.size();
      SinkState& s = *sinks_[i];
      if (s.backlog.empty()) continue;
      if (s.next_try <= now) {
        pick = &s;
        next_sink = i + 1;
        break;
      }
      wake = std::min(wake, s.next_try);
    }
    if (!pick) {
      bool notify = std::exchange(new_messages_, false);
      if (notify && options_.on_message) {
        lock.unlock();
        options_.on_message();
        lock.lock();
        continue;
      }
      if (stopping_) wake = std::min(wake, stop_deadline_);
      // Until a backoff ends, or post()/replace_sinks()/stop() kicks.
      const uint64_t seen = kicks_;
      auto kicked = [&] { return kicks_ != seen; };
      if (wake == Clock::time_point::max()) {
        cv_.wait(lock, kicked);
      } else {
        cv_.wait_until(lock, wake, kicked);
      }
      continue;
    }

    Record record = pick->backlog.front();
    call_deadline_.reset(stopping_ ? stop_deadline_ : Clock::time_point::max());
    lock.unlock();
    WriteResult r = pick->sink->write_record(*record, call_deadline_);
    lock.lock();
    handle_result_locked(*pick, r, Clock::now());
    if (std::exchange(new_messages_, false) && options_.on_message) {
      lock.unlock();
      options_.on_message();
      lock.lock();
    }
  }
  give_up_locked();
  const bool notify = std::exchange(new_messages_, false) && options_.on_message;
  lock.unlock();
  if (notify) options_.on_message();
}

}  // namespace oomsnap
