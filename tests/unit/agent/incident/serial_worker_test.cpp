// The agent's collection worker: serial order, bounded queue with counted
// overflow, stop that lets the running job finish and drops the rest.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <vector>

#include "agent/incident/serial_worker.h"

using oomsnap::SerialWorker;

TEST(SerialWorker, RunsJobsInOrder) {
  SerialWorker w(100);
  std::vector<int> seen;
  std::promise<void> done;
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(w.post([&seen, i] { seen.push_back(i); }));
  ASSERT_TRUE(w.post([&] { done.set_value(); }));
  done.get_future().wait();
  ASSERT_EQ(seen.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(seen[i], i);
  EXPECT_EQ(w.overflows(), 0u);
}

TEST(SerialWorker, FullQueueRefusesAndCounts) {
  // Declared before the worker, so they outlive it: its destructor joins the
  // thread that is still in gate.wait() (destroyed first, they were a
  // use-after-free in that thread, found by ASan).
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::promise<void> started;
  SerialWorker w(2);
  ASSERT_TRUE(w.post([&] { started.set_value(); gate.wait(); }));
  started.get_future().wait();  // the blocker runs; the queue is empty again
  EXPECT_TRUE(w.post([] {}));
  EXPECT_TRUE(w.post([] {}));
  EXPECT_FALSE(w.post([] {}));
  EXPECT_FALSE(w.post([] {}));
  EXPECT_EQ(w.overflows(), 2u);
  EXPECT_EQ(w.queued(), 2u);
  release.set_value();
}

TEST(SerialWorker, StopFinishesRunningJobAndDropsQueued) {
  SerialWorker w(10);
  std::atomic<bool> finished{false};
  std::atomic<int> later{0};
  std::promise<void> started;
  ASSERT_TRUE(w.post([&] {
    started.set_value();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    finished = true;
  }));
  started.get_future().wait();
  for (int i = 0; i < 3; ++i) w.post([&] { ++later; });
  EXPECT_EQ(w.stop(), 3u);
  EXPECT_TRUE(finished);
  EXPECT_EQ(later, 0);
  EXPECT_FALSE(w.post([] {}));  // stopped
}
