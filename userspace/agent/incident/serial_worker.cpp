#include "agent/incident/serial_worker.h"

namespace oomsnap {

SerialWorker::SerialWorker(size_t capacity) : capacity_(capacity), thread_([this] { run(); }) {}

SerialWorker::~SerialWorker() { stop(); }

bool SerialWorker::post(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || jobs_.size() >= capacity_) {
      ++overflows_;
      return false;
    }
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
  return true;
}

size_t SerialWorker::stop() {
  size_t dropped = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      stopping_ = true;
      dropped = jobs_.size();
      jobs_.clear();
    }
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  return dropped;
}

uint64_t SerialWorker::overflows() const {
  std::lock_guard<std::mutex> lock(mu_);
  return overflows_;
}

size_t SerialWorker::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size();
}

void SerialWorker::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace oomsnap
