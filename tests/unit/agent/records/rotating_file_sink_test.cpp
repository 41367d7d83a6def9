// The rotating file sink against real files and processes: rotation limits,
// line integrity under threads and concurrent processes, error reporting,
// and a lock held by someone else.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "agent/records/record_limit.h"
#include "agent/records/sink.h"
#include "agent/records/time_format.h"
#include "sink_test_util.h"
#include "sink_records_util.h"

using namespace oomsnap;
using namespace sinktest;
namespace fs = std::filesystem;
using nlohmann::json;

// ------------------------------------------------------------------ rotation

TEST(RotatingFileSink, KeepsMaxFilesAndSizes) {
  TempDir tmp;
  const uint64_t kMax = 1000;
  auto sink = file_sink(tmp.path(), kMax, 3);
  ASSERT_TRUE(sink);
  EXPECT_EQ(sink->name(), "file:" + tmp.path() + "/oomsnap.jsonl");
  const int kRecords = 200;
  for (int i = 0; i < kRecords; ++i) {
    std::string err;
    ASSERT_TRUE(sink->write_line(record_line(rec(0, i, 40 + i % 50)), err)) << err;
  }
  auto files = record_files(tmp.path());
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0], tmp.path() + "/oomsnap.jsonl.2");
  EXPECT_EQ(files[1], tmp.path() + "/oomsnap.jsonl.1");
  for (const auto& f : files) {
    EXPECT_LE(fs::file_size(f), kMax) << f;
    EXPECT_GT(fs::file_size(f), kMax / 2) << f << ": rotated too early";
  }
  // The kept lines are the newest records, contiguous and in order.
  auto lines = all_lines(tmp.path());
  ASSERT_FALSE(lines.empty());
  for (size_t i = 0; i < lines.size(); ++i) {
    ASSERT_TRUE(json::accept(lines[i])) << lines[i];
    EXPECT_EQ(json::parse(lines[i])["seq"].get<int>(),
              kRecords - static_cast<int>(lines.size()) + static_cast<int>(i));
  }
}

TEST(RotatingFileSink, OversizeLineIsWrittenWholeInAFreshFile) {
  TempDir tmp;
  const uint64_t kMax = 200;
  auto sink = file_sink(tmp.path(), kMax, 10);
  ASSERT_TRUE(sink);
  std::string err;
  ASSERT_TRUE(sink->write_line(record_line(rec(0, 0, 10)), err)) << err;
  const std::string big = record_line(rec(0, 1, 1000));
  ASSERT_TRUE(sink->write_line(big, err)) << err;
  ASSERT_TRUE(sink->write_line(record_line(rec(0, 2, 10)), err)) << err;

  auto files = record_files(tmp.path());
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(read_lines(files[0]).size(), 1u);
  EXPECT_EQ(read_all(files[1]), big);  // alone, unsplit
  EXPECT_EQ(read_lines(files[2]).size(), 1u);
  EXPECT_LE(fs::file_size(files[0]), kMax);
  EXPECT_LE(fs::file_size(files[2]), kMax);
  expect_complete(all_lines(tmp.path()), 1, 3);
}

TEST(RotatingFileSink, SingleFileStartsOver) {
  TempDir tmp;
  auto sink = file_sink(tmp.path(), 300, 1);
  ASSERT_TRUE(sink);
  for (int i = 0; i < 50; ++i) {
    std::string err;
    ASSERT_TRUE(sink->write_line(record_line(rec(0, i, 30)), err)) << err;
  }
  auto files = record_files(tmp.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_LE(fs::file_size(files[0]), 300u);
  auto lines = read_lines(files[0]);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(json::parse(lines.back())["seq"], 49);
}

TEST(RotatingFileSink, RemovesFilesBeyondALoweredLimit) {
  TempDir tmp;
  // Left by an earlier run with MaxFiles = 5.
  for (int i = 1; i <= 4; ++i)
    std::ofstream(tmp.path() + "/oomsnap.jsonl." + std::to_string(i)) << "{\"old\":" << i << "}\n";
  auto sink = file_sink(tmp.path(), 100, 2);
  ASSERT_TRUE(sink);
  for (int i = 0; i < 10; ++i) {
    std::string err;
    ASSERT_TRUE(sink->write_line(record_line(rec(0, i, 20)), err)) << err;
  }
  EXPECT_EQ(record_files(tmp.path()).size(), 2u);
}

TEST(RotatingFileSink, TrailingSlashAndNoTrailingNewline) {
  TempDir tmp;
  auto sink = file_sink(tmp.path() + "/sub/dir/", 1 << 20, 2);
  ASSERT_TRUE(sink);
  std::string err;
  ASSERT_TRUE(sink->write_line("{\"a\":1}", err)) << err;
  ASSERT_TRUE(sink->write_line("{\"a\":2}\n", err)) << err;
  EXPECT_EQ(read_all(tmp.path() + "/sub/dir/oomsnap.jsonl"), "{\"a\":1}\n{\"a\":2}\n");
  // mkdir -p made them private (0700) directories.
  struct stat st{};
  ASSERT_EQ(::stat((tmp.path() + "/sub").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

TEST(RotatingFileSink, RejectsLinesThatAreNotOneLine) {
  TempDir tmp;
  auto sink = file_sink(tmp.path(), 1 << 20, 2);
  ASSERT_TRUE(sink);
  std::string err;
  EXPECT_FALSE(sink->write_line("{\"a\":\n1}\n", err));
  EXPECT_NE(err.find("newline"), std::string::npos) << err;
  EXPECT_NE(err.find(tmp.path()), std::string::npos) << err;
  EXPECT_FALSE(sink->write_line("\n", err));
  EXPECT_EQ(read_all(tmp.path() + "/oomsnap.jsonl"), "");
}

// ------------------------------------------------------------------ integrity

TEST(RotatingFileSink, FourThreadsNeverInterleave) {
  TempDir tmp;
  SinkSet set;
  set.add(file_sink(tmp.path(), 64ull << 20, 2));  // no rotation: one file
  ASSERT_EQ(set.size(), 1u);
  const int kThreads = 4, kPer = 2000;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPer; ++i) {
        std::vector<std::string> errors;
        // Sizes up to ~9 KB: well past PIPE_BUF, several pages.
        if (!set.write(rec(t, i, 50 + (i * 37 + t * 101) % 9000), errors)) ++failures;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(record_files(tmp.path()).size(), 1u);
  expect_complete(read_lines(tmp.path() + "/oomsnap.jsonl"), kThreads, kPer);
}

TEST(RotatingFileSink, FourThreadsWithRotationLoseNothing) {
  TempDir tmp;
  const uint64_t kMax = 256 << 10;
  // Separate sinks on one directory, as two agent components might have:
  // their rotations are ordered by the directory lock, not the sink mutex.
  SinkSet a, b;
  a.add(file_sink(tmp.path(), kMax, 1000));
  b.add(file_sink(tmp.path(), kMax, 1000));
  const int kThreads = 4, kPer = 2000;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      SinkSet& set = t % 2 ? a : b;
      for (int i = 0; i < kPer; ++i) {
        std::vector<std::string> errors;
        if (!set.write(rec(t, i, 50 + (i * 37 + t * 101) % 200), errors)) ++failures;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  auto files = record_files(tmp.path());
  EXPECT_GT(files.size(), 3u);
  for (const auto& f : files) EXPECT_LE(fs::file_size(f), kMax) << f;
  expect_complete(all_lines(tmp.path()), kThreads, kPer);
}

namespace {

// Forked writers, each with its own rotating sink on `dir` (as separate agent
// processes would have), start together and append `per` records each.
void processes_append(const std::string& dir, uint64_t max_bytes, int max_files, int per,
                      int writers) {
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> kids;
  for (int w = 0; w < writers; ++w) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(go[1]);
      char c;
      if (::read(go[0], &c, 1) != 0) _exit(3);  // wait for the start (EOF)
      std::string err;
      auto sink = make_rotating_file_sink(dir, max_bytes, max_files, err);
      if (!sink) _exit(4);
      for (int i = 0; i < per; ++i) {
        // Large, varied lines make a torn or interleaved write likely to show.
        if (!sink->write_line(record_line(rec(w, i, 100 + (i * 131 + w * 17) % 12000)), err))
          _exit(5);
      }
      _exit(0);
    }
    kids.push_back(pid);
  }
  ::close(go[0]);
  ::close(go[1]);  // all children start now
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
}

}  // namespace

TEST(RotatingFileSink, TwoProcessesAppendWithoutInterleaving) {
  TempDir tmp;
  processes_append(tmp.path(), 1ull << 30, 2, 2000, 2);
  EXPECT_EQ(record_files(tmp.path()).size(), 1u);
  expect_complete(read_lines(tmp.path() + "/oomsnap.jsonl"), 2, 2000);
}

// Against a writer that ignores the directory lock only the single O_APPEND
// write(2) per line protects us. The foreign writer keeps appending for as
// long as the sink writes, so the two really overlap.
TEST(RotatingFileSink, ForeignAppenderNeverInterleaves) {
  TempDir tmp;
  const std::string path = tmp.path() + "/oomsnap.jsonl";
  const int kPer = 2000;
  int stop[2];
  ASSERT_EQ(::pipe(stop), 0);
  pid_t foreign = ::fork();
  ASSERT_GE(foreign, 0);
  if (foreign == 0) {
    ::close(stop[1]);
    ::fcntl(stop[0], F_SETFL, O_NONBLOCK);
    int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) _exit(4);
    char c;
    // Until EOF on `stop`; the cap only bounds the file if that never comes.
    for (int i = 0; i < 20000 && ::read(stop[0], &c, 1) < 0; ++i) {
      const std::string line = record_line(rec(1, i, 100 + (i * 131) % 4000));
      if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(5);
    }
    _exit(0);
  }
  ::close(stop[0]);
  // Let the foreign writer get going, then write through a sink meanwhile.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  processes_append(tmp.path(), 1ull << 30, 2, kPer, 1);  // writer 0
  ::close(stop[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(foreign, &status, 0), foreign);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "foreign status " << status;

  // The sink sees the foreign lines half copied into the file now and then;
  // taking one for a fragment and "ending" it would show as an empty line.
  int blank = 0, torn = 0, switches = 0, prev = -1, foreign_next = 0, ours = 0;
  for (const auto& l : read_lines(path)) {
    if (l.empty()) {
      ++blank;
      continue;
    }
    if (!json::accept(l)) {
      if (++torn <= 3) ADD_FAILURE() << "torn line: " << l.substr(0, 200);
      continue;
    }
    json j = json::parse(l);
    int w = j["writer"].get<int>();
    if (prev >= 0 && w != prev) ++switches;
    prev = w;
    if (w == 0) EXPECT_EQ(j["seq"].get<int>(), ours++);
    else EXPECT_EQ(j["seq"].get<int>(), foreign_next++);
  }
  EXPECT_EQ(torn, 0);
  EXPECT_EQ(ours, kPer);
  EXPECT_EQ(blank, 0);
  EXPECT_GT(switches, 0) << "the writers never overlapped; the test proved nothing";
}

TEST(RotatingFileSink, TwoProcessesRotateConsistently) {
  TempDir tmp;
  const uint64_t kMax = 512 << 10;
  processes_append(tmp.path(), kMax, 1000, 2000, 2);
  auto files = record_files(tmp.path());
  EXPECT_GT(files.size(), 5u);
  for (const auto& f : files) EXPECT_LE(fs::file_size(f), kMax) << f;
  expect_complete(all_lines(tmp.path()), 2, 2000);
}

// A write cut short (here by RLIMIT_FSIZE, as ENOSPC would) leaves a fragment;
// the next record, even from another process, starts on a line of its own.
TEST(RotatingFileSink, ShortWriteFragmentIsTerminated) {
  TempDir tmp;
  const std::string first = record_line(rec(0, 0, 60));
  const std::string second = record_line(rec(0, 1, 60));
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // SIGXFSZ keeps its default (core dump) disposition: the sink must block it.
    ::signal(SIGXFSZ, SIG_DFL);
    rlimit lim{first.size() + second.size() / 2, first.size() + second.size() / 2};
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(2);
    std::string err;
    auto sink = make_rotating_file_sink(tmp.path(), 1 << 20, 2, err);
    if (!sink || !sink->write_line(first, err)) _exit(3);
    if (sink->write_line(second, err)) _exit(4);
    if (err.find("short write") == std::string::npos) _exit(5);
    if (err.find("File too large") == std::string::npos) _exit(6);
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGXFSZ)) _exit(7);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status);
  ASSERT_EQ(WEXITSTATUS(status), 0);

  std::string err;
  auto sink = file_sink(tmp.path(), 1 << 20, 2);
  ASSERT_TRUE(sink);
  const std::string third = record_line(rec(0, 2, 10));
  ASSERT_TRUE(sink->write_line(third, err)) << err;
  auto lines = read_lines(tmp.path() + "/oomsnap.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0] + "\n", first);
  EXPECT_FALSE(json::accept(lines[1]));  // the fragment, alone
  EXPECT_EQ(second.substr(0, lines[1].size()), lines[1]);
  EXPECT_EQ(lines[2] + "\n", third);
}

// ------------------------------------------------------------------ errors

TEST(RotatingFileSink, UncreatableDirIsAClearError) {
  TempDir tmp;
  const std::string file = tmp.path() + "/plainfile";
  std::ofstream(file) << "x";
  std::string err;
  auto sink = make_rotating_file_sink(file + "/records", 1000, 3, err);
  EXPECT_FALSE(sink);
  EXPECT_NE(err.find(file + "/records"), std::string::npos) << err;
  EXPECT_NE(err.find("Not a directory"), std::string::npos) << err;

  err.clear();
  EXPECT_FALSE(make_rotating_file_sink(file, 1000, 3, err));
  EXPECT_NE(err.find("not a directory"), std::string::npos) << err;
}

TEST(RotatingFileSink, UnopenableFileIsAClearError) {
  TempDir tmp;
  // Root bypasses permission bits, so make the file name a directory instead.
  fs::create_directory(tmp.path() + "/oomsnap.jsonl");
  std::string err;
  EXPECT_FALSE(make_rotating_file_sink(tmp.path(), 1000, 3, err));
  EXPECT_NE(err.find(tmp.path() + "/oomsnap.jsonl"), std::string::npos) << err;
  EXPECT_NE(err.find("Is a directory"), std::string::npos) << err;
}

TEST(RotatingFileSink, ReadOnlyDirIsAClearError) {
  TempDir tmp;
  const std::string ro = tmp.path() + "/ro";
  ASSERT_EQ(::mkdir(ro.c_str(), 0555), 0);
  ASSERT_EQ(::chmod(tmp.path().c_str(), 0755), 0);  // mkdtemp made it 0700
  // Root ignores permission bits: check as "nobody" in a child.
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(p[0]);
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) _exit(2);
    std::string err;
    if (make_rotating_file_sink(ro, 1000, 3, err)) _exit(3);
    if (::write(p[1], err.data(), err.size()) != static_cast<ssize_t>(err.size())) _exit(4);
    _exit(0);
  }
  ::close(p[1]);
  std::string err;
  char buf[512];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) err.append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  EXPECT_NE(err.find(ro + "/oomsnap.jsonl"), std::string::npos) << err;
  EXPECT_NE(err.find("Permission denied"), std::string::npos) << err;
}

TEST(RotatingFileSink, BadLimitsAreErrors) {
  TempDir tmp;
  std::string err;
  EXPECT_FALSE(make_rotating_file_sink(tmp.path(), 0, 3, err));
  EXPECT_NE(err.find("max_bytes"), std::string::npos) << err;
  EXPECT_FALSE(make_rotating_file_sink(tmp.path(), 100, 0, err));
  EXPECT_NE(err.find("max_files"), std::string::npos) << err;
  EXPECT_FALSE(make_rotating_file_sink("", 100, 1, err));
}

TEST(RotatingFileSink, RotationFailureStillWritesAndRecovers) {
  TempDir tmp;
  auto sink = file_sink(tmp.path(), 100, 2);
  ASSERT_TRUE(sink);
  std::string err;
  ASSERT_TRUE(sink->write_line(record_line(rec(0, 0, 40)), err)) << err;
  // rename(oomsnap.jsonl -> oomsnap.jsonl.1) fails: .1 is a non-empty directory.
  const std::string blocker = tmp.path() + "/oomsnap.jsonl.1";
  fs::create_directories(blocker + "/x");
  EXPECT_FALSE(sink->write_line(record_line(rec(0, 1, 40)), err));
  EXPECT_NE(err.find("rotate: rename '" + tmp.path() + "/oomsnap.jsonl' -> '" + blocker + "'"),
            std::string::npos) << err;
  EXPECT_NE(err.find("record written"), std::string::npos) << err;
  EXPECT_EQ(read_lines(tmp.path() + "/oomsnap.jsonl").size(), 2u);  // not dropped
  // Once the obstacle is gone the sink rotates normally again.
  fs::remove_all(blocker);
  ASSERT_TRUE(sink->write_line(record_line(rec(0, 2, 40)), err)) << err;
  EXPECT_EQ(read_lines(blocker).size(), 2u);
  EXPECT_EQ(read_lines(tmp.path() + "/oomsnap.jsonl").size(), 1u);
  expect_complete(all_lines(tmp.path()), 1, 3);
}

TEST(RotatingFileSink, RecoversWhenDirectoryIsRemoved) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/records";
  auto sink = file_sink(dir, 1 << 20, 3);
  ASSERT_TRUE(sink);
  std::string err;
  ASSERT_TRUE(sink->write_line("{\"n\":1}", err)) << err;
  fs::remove_all(dir);
  ASSERT_TRUE(sink->write_line("{\"n\":2}", err)) << err;
  EXPECT_EQ(read_all(dir + "/oomsnap.jsonl"), "{\"n\":2}\n");
}

TEST(RotatingFileSink, FollowsAFileRotatedByOthers) {
  TempDir tmp;
  auto sink = file_sink(tmp.path(), 1 << 20, 3);
  ASSERT_TRUE(sink);
  std::string err;
  ASSERT_TRUE(sink->write_line("{\"n\":1}", err)) << err;
  fs::rename(tmp.path() + "/oomsnap.jsonl", tmp.path() + "/elsewhere");  // e.g. logrotate
  ASSERT_TRUE(sink->write_line("{\"n\":2}", err)) << err;
  EXPECT_EQ(read_all(tmp.path() + "/elsewhere"), "{\"n\":1}\n");
  EXPECT_EQ(read_all(tmp.path() + "/oomsnap.jsonl"), "{\"n\":2}\n");
}

// ------------------------------------------------------------------ bounded: the store's lock

using sinktest::finishes_within;
using sinktest::LockHolder;
using sinktest::ms_between;
using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

std::unique_ptr<RecordSink> file_sink_with(const std::string& dir, milliseconds lock_timeout,
                                           uint64_t max_bytes = 1 << 20, int max_files = 3) {
  RotatingFileOptions o;
  o.dir = dir;
  o.max_bytes = max_bytes;
  o.max_files = max_files;
  o.lock_timeout = lock_timeout;
  std::string err;
  auto s = make_rotating_file_sink(o, err);
  EXPECT_TRUE(s) << err;
  return s;
}

}  // namespace

// Anyone who can open the store directory can flock it. The sink must give
// up after its lock timeout (saying who holds the lock), not wait for them.
TEST(RotatingFileSink, LockHeldByAnotherProcessTimesOut) {
  TempDir tmp;
  auto sink = file_sink_with(tmp.path(), milliseconds(200));
  ASSERT_TRUE(sink);
  std::string err;
  ASSERT_TRUE(sink->write_line(record_line(rec(0, 0, 10)), err)) << err;

  LockHolder holder(tmp.path(), milliseconds(5000));
  ASSERT_TRUE(holder.locked());
  bool ok = true;
  long long took = 0;
  EXPECT_TRUE(finishes_within(
      milliseconds(1500),
      [&] {
        const auto t0 = Steady::now();
        ok = sink->write_line(record_line(rec(0, 1, 10)), err);
        took = ms_between(t0, Steady::now());
      },
      [&] { holder.release(); }))
      << "write_line waited for the lock instead of timing out";
  EXPECT_FALSE(ok);
  EXPECT_GE(took, 190);
  EXPECT_LT(took, 1000);
  EXPECT_NE(err.find("lock on '" + tmp.path() + "' held by pid " + std::to_string(holder.pid())),
            std::string::npos) << err;
  EXPECT_NE(err.find("record not written"), std::string::npos) << err;
  EXPECT_EQ(read_lines(tmp.path() + "/oomsnap.jsonl").size(), 1u);

  holder.release();
  ASSERT_TRUE(sink->write_line(record_line(rec(0, 1, 10)), err)) << err;
  expect_complete(read_lines(tmp.path() + "/oomsnap.jsonl"), 1, 2);
}

// A caller's deadline (SinkWriter::stop) cuts the wait short, also when it
// is brought forward from another thread while the sink waits.
TEST(RotatingFileSink, DeadlineCutsTheLockWait) {
  TempDir tmp;
  auto sink = file_sink_with(tmp.path(), milliseconds(20000));
  ASSERT_TRUE(sink);
  LockHolder holder(tmp.path(), milliseconds(20000));
  ASSERT_TRUE(holder.locked());

  SinkDeadline deadline;  // none yet
  WriteResult r;
  long long took = 0;
  std::thread cutter([&] {
    std::this_thread::sleep_for(milliseconds(150));
    deadline.bring_forward(Steady::now());
  });
  EXPECT_TRUE(finishes_within(
      milliseconds(2000),
      [&] {
        const auto t0 = Steady::now();
        r = sink->write_record(record_line(rec(0, 0, 10)), deadline);
        took = ms_between(t0, Steady::now());
      },
      [&] { holder.release(); }));
  cutter.join();
  EXPECT_EQ(r.status, WriteStatus::failed);
  EXPECT_GE(took, 140);
  EXPECT_LT(took, 600);
  EXPECT_NE(r.error.find("writer's deadline"), std::string::npos) << r.error;
  // bring_forward never moves a deadline later.
  SinkDeadline d(Steady::now());
  const auto before = d.get();
  d.bring_forward(before + std::chrono::hours(1));
  EXPECT_EQ(d.get(), before);
}
