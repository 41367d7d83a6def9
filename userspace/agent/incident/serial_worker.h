// One background thread that runs jobs in order, so heap collection (which
// can take up to RunTracingToolTimeout) never blocks the event loop. The queue
// is bounded: a job that does not fit is refused and counted, never blocking
// the caller.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace oomsnap {

class SerialWorker {
 public:
  explicit SerialWorker(size_t capacity);
  ~SerialWorker();  // stop()
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  // False (and counted) when the queue is full or the worker is stopped.
  bool post(std::function<void()> job);
  // Lets the running job finish, drops the queued ones, joins the thread.
  // Returns how many queued jobs were dropped.
  size_t stop();

  uint64_t overflows() const;
  size_t queued() const;

 private:
  void run();

  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  uint64_t overflows_ = 0;
  std::thread thread_;  // last: starts after the members it uses exist
};

}  // namespace oomsnap
