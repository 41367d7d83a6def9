// Record sinks against real files, pipes and processes: rotation limits,
// line integrity under threads and concurrent processes, error reporting.
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

#include "agent/record_limit.h"
#include "agent/sink.h"
#include "agent/time_format.h"
#include "sink_test_util.h"

using namespace oomsnap;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using sinktest::read_lines;
using sinktest::TempDir;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Record files in `dir`, oldest first: oomsnap.jsonl.N ... .1, oomsnap.jsonl.
std::vector<std::string> record_files(const std::string& dir) {
  std::map<int, std::string> numbered;  // number -> path
  bool live = false;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (n == kRecordFileName) {
      live = true;
    } else if (n.rfind(std::string(kRecordFileName) + ".", 0) == 0) {
      numbered[std::stoi(n.substr(std::strlen(kRecordFileName) + 1))] = e.path().string();
    } else {
      ADD_FAILURE() << "unexpected file " << n;
    }
  }
  std::vector<std::string> files;
  for (auto it = numbered.rbegin(); it != numbered.rend(); ++it) files.push_back(it->second);
  if (live) files.push_back(dir + "/" + kRecordFileName);
  return files;
}

// All lines of all record files, oldest first.
std::vector<std::string> all_lines(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& f : record_files(dir)) {
    auto l = read_lines(f);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

json rec(int writer, int seq, size_t pad) {
  return json{{"writer", writer}, {"seq", seq}, {"pad", std::string(pad, 'x')}};
}

std::unique_ptr<RecordSink> file_sink(const std::string& dir, uint64_t max_bytes, int max_files) {
  std::string err;
  auto s = make_rotating_file_sink(dir, max_bytes, max_files, err);
  EXPECT_TRUE(s) << err;
  return s;
}

// Checks that every line is a record and each writer's seqs 0..n-1 each appear
// exactly once (no loss, no duplicates, no torn lines).
void expect_complete(const std::vector<std::string>& lines, int writers, int per_writer) {
  std::map<int, std::set<int>> seen;
  size_t bad = 0;
  for (const auto& l : lines) {
    if (!json::accept(l)) {
      if (++bad <= 3) ADD_FAILURE() << "torn line: " << l.substr(0, 200);
      continue;
    }
    json j = json::parse(l);
    EXPECT_TRUE(seen[j.at("writer").get<int>()].insert(j.at("seq").get<int>()).second)
        << "duplicate " << l.substr(0, 80);
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(lines.size(), static_cast<size_t>(writers) * per_writer);
  ASSERT_EQ(seen.size(), static_cast<size_t>(writers));
  for (const auto& [w, seqs] : seen) {
    EXPECT_EQ(seqs.size(), static_cast<size_t>(per_writer)) << "writer " << w;
    EXPECT_EQ(*seqs.begin(), 0);
    EXPECT_EQ(*seqs.rbegin(), per_writer - 1);
  }
}

}  // namespace

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

// ------------------------------------------------------------------ stream

TEST(StreamSink, WritesLinesToAPipe) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  SinkSet set;
  set.add(make_stream_sink(p[1], "pipe"));
  // Larger than the pipe's 64 KiB buffer: needs a reader and several writes.
  const std::string big(300000, 'b');
  std::string got;
  std::thread reader([&] {
    char buf[8192];
    ssize_t n;
    while ((n = ::read(p[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  });
  std::vector<std::string> errors;
  EXPECT_TRUE(set.write(json{{"a", 1}}, errors));
  EXPECT_TRUE(set.write(json{{"big", big}}, errors));
  EXPECT_TRUE(set.write(json{{"s", "x\ny"}}, errors));  // escaped, still one line
  ::close(p[1]);
  reader.join();
  ::close(p[0]);
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(got, "{\"a\":1}\n{\"big\":\"" + big + "\"}\n{\"s\":\"x\\ny\"}\n");
}

TEST(StreamSink, FourThreadsNeverInterleave) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  SinkSet set;
  set.add(make_stream_sink(p[1], "pipe"));
  std::string got;
  std::thread reader([&] {
    char buf[65536];
    ssize_t n;
    while ((n = ::read(p[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  });
  const int kThreads = 4, kPer = 2000;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPer; ++i) {
        std::vector<std::string> errors;
        // Past PIPE_BUF, so the kernel may split them: the sink's lock must
        // keep the pieces together.
        if (!set.write(rec(t, i, 50 + (i * 37 + t * 101) % 9000), errors)) ++failures;
      }
    });
  for (auto& th : threads) th.join();
  ::close(p[1]);
  reader.join();
  ::close(p[0]);
  EXPECT_EQ(failures.load(), 0);
  std::vector<std::string> lines;
  std::istringstream in(got);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  expect_complete(lines, kThreads, kPer);
}

TEST(StreamSink, ClosedPipeIsAnErrorNotADeath) {
  // In a child with SIGPIPE at its default (terminate): if the sink let the
  // signal through, the child dies instead of exiting 0.
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGPIPE, SIG_DFL);
    int p[2];
    if (::pipe(p) != 0) _exit(2);
    ::close(p[0]);
    auto sink = make_stream_sink(p[1], "stdout");
    std::string err;
    for (int i = 0; i < 2; ++i) {  // the sink stays usable after a failure
      if (sink->write_line("{\"a\":1}\n", err)) _exit(3);
      if (err.find("Broken pipe") == std::string::npos) _exit(4);
      if (err.find("stdout") == std::string::npos) _exit(5);
    }
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE)) _exit(6);  // not left to fire later
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(StreamSink, FullDeviceIsReportedAndOtherSinksStillWrite) {
  int fd = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  if (fd < 0) GTEST_SKIP() << "no /dev/full";
  TempDir tmp;
  SinkSet set;
  set.add(make_stream_sink(fd, "full"));
  set.add(file_sink(tmp.path(), 1 << 20, 2));
  std::vector<std::string> errors;
  EXPECT_FALSE(set.write(json{{"a", 1}}, errors));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("full"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("No space left on device"), std::string::npos) << errors[0];
  EXPECT_EQ(read_all(tmp.path() + "/oomsnap.jsonl"), "{\"a\":1}\n");
  ::close(fd);
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

// ------------------------------------------------------------------ who can read and redirect records

namespace {

mode_t mode_of(const std::string& path) {
  struct stat st{};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// Sets the umask for the scope: the sink's modes must not depend on it.
class Umask {
 public:
  explicit Umask(mode_t m) : old_(::umask(m)) {}
  ~Umask() { ::umask(old_); }

 private:
  mode_t old_;
};

std::string refused(const std::string& dir) {
  std::string err;
  auto s = make_rotating_file_sink(dir, 1 << 20, 3, err);
  EXPECT_FALSE(s) << "sink on '" << dir << "' was accepted";
  return err;
}

}  // namespace

TEST(RotatingFileSink, CreatesPrivateDirectoriesAndFiles) {
  TempDir tmp;
  Umask open_umask(0);  // what the sink asks for is what it gets
  const std::string dir = tmp.path() + "/a/b";
  auto sink = file_sink(dir, 200, 3);
  ASSERT_TRUE(sink);
  EXPECT_EQ(mode_of(tmp.path() + "/a"), 0700u);
  EXPECT_EQ(mode_of(dir), 0700u);
  for (int i = 0; i < 20; ++i) {  // several rotations
    std::string err;
    ASSERT_TRUE(sink->write_line(record_line(rec(0, i, 40)), err)) << err;
  }
  auto files = record_files(dir);
  ASSERT_EQ(files.size(), 3u);
  for (const auto& f : files) EXPECT_EQ(mode_of(f), 0600u) << f;
  // Removed and re-created while running: private again.
  fs::remove_all(tmp.path() + "/a");
  std::string err;
  ASSERT_TRUE(sink->write_line(record_line(rec(0, 20, 40)), err)) << err;
  EXPECT_EQ(mode_of(tmp.path() + "/a"), 0700u);
  EXPECT_EQ(mode_of(dir), 0700u);
  EXPECT_EQ(mode_of(dir + "/oomsnap.jsonl"), 0600u);
}

// A live file an older version left world-readable is narrowed.
TEST(RotatingFileSink, NarrowsAWorldReadableLiveFile) {
  TempDir tmp;
  const std::string path = tmp.path() + "/oomsnap.jsonl";
  std::ofstream(path) << "{\"old\":1}\n";
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  auto sink = file_sink(tmp.path(), 1 << 20, 3);
  ASSERT_TRUE(sink);
  EXPECT_EQ(mode_of(path), 0600u);
  EXPECT_EQ(read_all(path), "{\"old\":1}\n");
}

TEST(RotatingFileSink, RefusesAStoreOthersCanWrite) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/store";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);

  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  std::string err = refused(dir);
  EXPECT_NE(err.find("refusing to keep records in '" + dir + "'"), std::string::npos) << err;
  EXPECT_NE(err.find("'" + dir + "' is writable by everyone (mode 0777)"), std::string::npos) << err;

  ASSERT_EQ(::chmod(dir.c_str(), 0770), 0);
  ASSERT_EQ(::chown(dir.c_str(), 0, 65534), 0);
  err = refused(dir);
  EXPECT_NE(err.find("writable by group 65534"), std::string::npos) << err;

  // The sticky bit helps an ancestor, not the store: others could still
  // plant files next to the records.
  ASSERT_EQ(::chmod(dir.c_str(), 01777), 0);
  err = refused(dir);
  EXPECT_NE(err.find("writable by everyone"), std::string::npos) << err;

  // Owned by a non-root user: they can chmod it at will.
  ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  err = refused(dir);
  EXPECT_NE(err.find("'" + dir + "' is owned by uid 65534"), std::string::npos) << err;

  // Fixed: accepted.
  ASSERT_EQ(::chown(dir.c_str(), 0, 0), 0);
  EXPECT_TRUE(file_sink(dir, 1 << 20, 3));
}

TEST(RotatingFileSink, RefusesAParentOthersCanWrite) {
  TempDir tmp;
  const std::string parent = tmp.path() + "/parent";
  const std::string dir = parent + "/store";
  ASSERT_EQ(::mkdir(parent.c_str(), 0755), 0);

  // Others could rename "store" away and put their own directory (or a
  // symlink) in its place.
  ASSERT_EQ(::chmod(parent.c_str(), 0777), 0);
  std::string err = refused(dir);
  EXPECT_NE(err.find("'" + parent + "' is writable by everyone"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir)) << "the refused store was created anyway";

  ASSERT_EQ(::chmod(parent.c_str(), 0755), 0);
  ASSERT_EQ(::chown(parent.c_str(), 65534, 0), 0);
  err = refused(dir);
  EXPECT_NE(err.find("'" + parent + "' is owned by uid 65534"), std::string::npos) << err;

  // A root-owned sticky ancestor, like /tmp: others cannot rename or remove
  // root's entries in it, so it is accepted (the tests' own /tmp relies on it).
  ASSERT_EQ(::chown(parent.c_str(), 0, 0), 0);
  ASSERT_EQ(::chmod(parent.c_str(), 01777), 0);
  EXPECT_TRUE(file_sink(dir, 1 << 20, 3));
}

// A symlink on the way is followed only when root (or we) made it; one a
// user planted (in a sticky directory they can write) is refused.
TEST(RotatingFileSink, RefusesASymlinkOnTheWayOwnedByAnotherUser) {
  TempDir tmp;
  const std::string real = tmp.path() + "/real";
  const std::string link = tmp.path() + "/link";
  ASSERT_EQ(::mkdir(real.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);

  EXPECT_TRUE(file_sink(link + "/store", 1 << 20, 3));  // root's symlink: fine
  EXPECT_TRUE(fs::exists(real + "/store/oomsnap.jsonl"));

  ASSERT_EQ(::lchown(link.c_str(), 65534, 65534), 0);
  std::string err = refused(link + "/store");
  EXPECT_NE(err.find("'" + link + "' is a symbolic link owned by uid 65534"), std::string::npos) << err;
}

// Permissions loosened while running: the next record is refused (and kept
// by its writer for retry), not written into a directory others control.
TEST(RotatingFileSink, StoreMadeUnsafeWhileRunningFailsWrites) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/store";
  auto sink = file_sink(dir, 1 << 20, 3);
  ASSERT_TRUE(sink);
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  std::string err;
  EXPECT_FALSE(sink->write_line(record_line(rec(0, 0, 10)), err));
  EXPECT_NE(err.find("writable by everyone"), std::string::npos) << err;
  EXPECT_NE(err.find("record not written"), std::string::npos) << err;
  ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
  ASSERT_TRUE(sink->write_line(record_line(rec(0, 1, 10)), err)) << err;
  EXPECT_EQ(read_lines(dir + "/oomsnap.jsonl").size(), 1u);
}

namespace {

// A file outside the store that a planted link points at.
struct Victim {
  explicit Victim(const std::string& path) : path(path) {
    std::ofstream(path) << "root:x:0:0:do not touch\n";
  }
  bool unchanged() const { return read_all(path) == "root:x:0:0:do not touch\n"; }
  std::string path;
};

}  // namespace

TEST(RotatingFileSink, SymlinkAtTheLiveFileIsNotFollowed) {
  TempDir tmp;
  Victim victim(tmp.path() + "/victim");
  const std::string dir = tmp.path() + "/store";
  const std::string live = dir + "/oomsnap.jsonl";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);

  // Planted before the start: the agent refuses to start.
  ASSERT_EQ(::symlink(victim.path.c_str(), live.c_str()), 0);
  std::string err = refused(dir);
  EXPECT_NE(err.find("'" + live + "' is a symbolic link; not following it"), std::string::npos) << err;
  EXPECT_TRUE(victim.unchanged());

  // Planted while running (the live file renamed away first, as a rotation
  // by someone else would): the write fails, nothing is appended to the target.
  ASSERT_EQ(::unlink(live.c_str()), 0);
  auto sink = file_sink(dir, 1 << 20, 3);
  ASSERT_TRUE(sink);
  ASSERT_TRUE(sink->write_line(record_line(rec(0, 0, 10)), err)) << err;
  ASSERT_EQ(::rename(live.c_str(), (dir + "/moved").c_str()), 0);
  ASSERT_EQ(::symlink(victim.path.c_str(), live.c_str()), 0);
  EXPECT_FALSE(sink->write_line(record_line(rec(0, 1, 10)), err));
  EXPECT_NE(err.find("symbolic link"), std::string::npos) << err;
  EXPECT_NE(err.find("record not written"), std::string::npos) << err;
  EXPECT_TRUE(victim.unchanged());

  // A dangling one is not created through either.
  ASSERT_EQ(::unlink(live.c_str()), 0);
  const std::string nowhere = tmp.path() + "/created-through-a-link";
  ASSERT_EQ(::symlink(nowhere.c_str(), live.c_str()), 0);
  EXPECT_FALSE(sink->write_line(record_line(rec(0, 2, 10)), err));
  EXPECT_FALSE(fs::exists(nowhere));

  // Removed: writing resumes.
  ASSERT_EQ(::unlink(live.c_str()), 0);
  ASSERT_TRUE(sink->write_line(record_line(rec(0, 3, 10)), err)) << err;
  EXPECT_EQ(read_lines(live).size(), 1u);
}

TEST(RotatingFileSink, HardLinkOrForeignFileAtTheLiveFileIsRefused) {
  TempDir tmp;
  Victim victim(tmp.path() + "/victim");
  const std::string dir = tmp.path() + "/store";
  const std::string live = dir + "/oomsnap.jsonl";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::link(victim.path.c_str(), live.c_str()), 0);
  std::string err = refused(dir);
  EXPECT_NE(err.find("'" + live + "' has 2 hard links"), std::string::npos) << err;
  EXPECT_TRUE(victim.unchanged());

  ASSERT_EQ(::unlink(live.c_str()), 0);
  std::ofstream(live) << "";
  ASSERT_EQ(::chown(live.c_str(), 65534, 65534), 0);
  err = refused(dir);
  EXPECT_NE(err.find("'" + live + "' is owned by uid 65534, not by us"), std::string::npos) << err;
}

// Rotation renames and removes names in the store; a symlink planted at one
// of them stops it (reported, the target untouched, the link left in place)
// and the record still goes into the live file.
TEST(RotatingFileSink, SymlinkAtARotationTargetIsNotFollowed) {
  TempDir tmp;
  Victim victim(tmp.path() + "/victim");
  const std::string dir = tmp.path() + "/store";
  for (const char* planted : {"oomsnap.jsonl.1", "oomsnap.jsonl.2"}) {
    SCOPED_TRACE(planted);
    fs::remove_all(dir);
    auto sink = file_sink(dir, 100, 3);
    ASSERT_TRUE(sink);
    std::string err;
    ASSERT_TRUE(sink->write_line(record_line(rec(0, 0, 40)), err)) << err;
    ASSERT_TRUE(sink->write_line(record_line(rec(0, 1, 40)), err)) << err;  // rotates: .1 exists
    const std::string link = dir + "/" + planted;
    fs::remove(link);
    ASSERT_EQ(::symlink(victim.path.c_str(), link.c_str()), 0);

    EXPECT_FALSE(sink->write_line(record_line(rec(0, 2, 40)), err));
    EXPECT_NE(err.find("rotate: '" + link + "' is a symbolic link, not a record file of ours; not rotating"),
              std::string::npos) << err;
    EXPECT_NE(err.find("record written"), std::string::npos) << err;
    EXPECT_TRUE(victim.unchanged());
    EXPECT_TRUE(fs::is_symlink(link));
    EXPECT_EQ(read_lines(dir + "/oomsnap.jsonl").size(), 2u);  // not dropped
  }
}

// A FIFO at the live file's name must neither be opened blocking nor
// written to (nobody reads it: a large record would block forever).
TEST(RotatingFileSink, FifoAtTheLiveFileDoesNotBlock) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/store";
  const std::string live = dir + "/oomsnap.jsonl";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::mkfifo(live.c_str(), 0600), 0);
  // If the sink did block, a reader draining the FIFO lets it go on.
  auto rescue = [&] {
    int fd = ::open(live.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      sinktest::drain(fd);
      ::close(fd);
    }
  };
  const std::string big = record_line(rec(0, 0, 200000));  // > the FIFO's 64 KiB
  std::string err;
  std::unique_ptr<RecordSink> sink;
  bool wrote = false;
  EXPECT_TRUE(finishes_within(
      milliseconds(3000),
      [&] {
        sink = make_rotating_file_sink(dir, 1 << 30, 3, err);
        if (sink) wrote = sink->write_line(big, err);
      },
      rescue));
  EXPECT_FALSE(sink) << "a FIFO was accepted as the record file";
  EXPECT_FALSE(wrote);
  EXPECT_NE(err.find("'" + live + "' is a FIFO, not a regular file"), std::string::npos) << err;

  // Planted while running.
  ASSERT_EQ(::unlink(live.c_str()), 0);
  sink = file_sink(dir, 1 << 30, 3);
  ASSERT_TRUE(sink);
  ASSERT_TRUE(sink->write_line(record_line(rec(0, 1, 10)), err)) << err;
  ASSERT_EQ(::rename(live.c_str(), (dir + "/moved").c_str()), 0);
  ASSERT_EQ(::mkfifo(live.c_str(), 0600), 0);
  wrote = true;
  EXPECT_TRUE(finishes_within(milliseconds(3000), [&] { wrote = sink->write_line(big, err); }, rescue));
  EXPECT_FALSE(wrote);
  EXPECT_NE(err.find("is a FIFO"), std::string::npos) << err;
}

// ------------------------------------------------------------------ bounded: stdout

namespace {

// A stream a consumer stopped reading: `write_fd` for the sink (blocking, as
// an inherited stdout is), `read_fd` for the test to drain.
struct Stalled {
  int write_fd = -1, read_fd = -1;
  std::string fifo;  // path, for the FIFO case
  ~Stalled() {
    if (write_fd >= 0) ::close(write_fd);
    if (read_fd >= 0) ::close(read_fd);
    if (!fifo.empty()) ::unlink(fifo.c_str());
  }
};

enum class StreamKind { pipe, fifo, tty, socket };

std::string kind_name(const testing::TestParamInfo<StreamKind>& info) {
  switch (info.param) {
    case StreamKind::pipe: return "Pipe";
    case StreamKind::fifo: return "Fifo";
    case StreamKind::tty: return "Tty";
    case StreamKind::socket: return "Socket";
  }
  return "Unknown";
}

bool make_stalled(StreamKind kind, Stalled& s) {
  switch (kind) {
    case StreamKind::pipe: {
      int p[2];
      if (::pipe2(p, O_CLOEXEC) != 0) return false;
      s.read_fd = p[0];
      s.write_fd = p[1];
      return true;
    }
    case StreamKind::fifo: {
      char tmpl[] = "/tmp/oomsnap-fifo-XXXXXX";
      if (!::mkdtemp(tmpl)) return false;
      ::rmdir(tmpl);
      s.fifo = tmpl;
      if (::mkfifo(s.fifo.c_str(), 0600) != 0) return false;
      s.read_fd = ::open(s.fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
      s.write_fd = ::open(s.fifo.c_str(), O_WRONLY | O_CLOEXEC);  // blocking
      return s.read_fd >= 0 && s.write_fd >= 0;
    }
    case StreamKind::tty: {
      int master = -1, slave = -1;
      if (::openpty(&master, &slave, nullptr, nullptr, nullptr) != 0) return false;
      termios t{};
      ::tcgetattr(slave, &t);
      ::cfmakeraw(&t);  // bytes as written: no "\n" -> "\r\n"
      ::tcsetattr(slave, TCSANOW, &t);
      ::fcntl(master, F_SETFD, FD_CLOEXEC);
      ::fcntl(slave, F_SETFD, FD_CLOEXEC);
      s.read_fd = master;
      s.write_fd = slave;
      return true;
    }
    case StreamKind::socket: {
      int sv[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return false;
      s.write_fd = sv[0];
      s.read_fd = sv[1];
      return true;
    }
  }
  return false;
}

}  // namespace

class StreamSinkStalled : public testing::TestWithParam<StreamKind> {};

// The consumer stopped reading: the record fails after the write timeout
// (cut, as much as fitted is out), the shared descriptor's flags are left
// alone, and once the consumer reads again the fragment is ended and the
// next record is whole on its own line.
TEST_P(StreamSinkStalled, WriteTimesOutInsteadOfBlocking) {
  Stalled s;
  ASSERT_TRUE(make_stalled(GetParam(), s));
  const int flags_before = ::fcntl(s.write_fd, F_GETFL);
  ASSERT_EQ(flags_before & O_NONBLOCK, 0) << "the test needs a blocking descriptor";
  StreamSinkOptions o;
  o.write_timeout = milliseconds(200);
  auto sink = make_stream_sink(s.write_fd, "stdout", o);

  // Larger than any kernel buffer (and than record_line's 1 MiB limit: a sink
  // takes whatever line it is given).
  const std::string big = serialise_record(rec(0, 0, 4 << 20), SIZE_MAX) + "\n";
  std::string err, got;
  bool ok = true;
  long long took = 0;
  EXPECT_TRUE(finishes_within(
      milliseconds(3000),
      [&] {
        const auto t0 = Steady::now();
        ok = sink->write_line(big, err);
        took = ms_between(t0, Steady::now());
      },
      [&] { got += sinktest::drain(s.read_fd); }))
      << "the write blocked on a consumer that does not read";
  EXPECT_FALSE(ok);
  EXPECT_GE(took, 190);
  EXPECT_LT(took, 1500);
  EXPECT_NE(err.find("stdout (fd " + std::to_string(s.write_fd) + "): write: consumer not reading"),
            std::string::npos) << err;
  EXPECT_NE(err.find("record cut after"), std::string::npos) << err;
  EXPECT_EQ(::fcntl(s.write_fd, F_GETFL), flags_before) << "the shared descriptor's flags changed";

  // The consumer is back.
  got += sinktest::drain(s.read_fd);
  const std::string small = record_line(rec(0, 1, 10));
  ASSERT_TRUE(sink->write_line(small, err)) << err;
  got += sinktest::drain(s.read_fd);
  ASSERT_GT(got.size(), small.size() + 1);
  EXPECT_EQ(got.substr(got.size() - small.size() - 1), "\n" + small);
  const std::string fragment = got.substr(0, got.size() - small.size() - 1);
  EXPECT_EQ(fragment, big.substr(0, fragment.size()));  // the head of the cut record, alone
  EXPECT_LT(fragment.size(), big.size());
}

INSTANTIATE_TEST_SUITE_P(Kinds, StreamSinkStalled,
                         testing::Values(StreamKind::pipe, StreamKind::fifo, StreamKind::tty,
                                         StreamKind::socket),
                         kind_name);

TEST(StreamSink, DeadlineCutsTheWait) {
  Stalled s;
  ASSERT_TRUE(make_stalled(StreamKind::pipe, s));
  StreamSinkOptions o;
  o.write_timeout = milliseconds(20000);
  auto sink = make_stream_sink(s.write_fd, "stdout", o);
  SinkDeadline deadline;
  std::thread cutter([&] {
    std::this_thread::sleep_for(milliseconds(150));
    deadline.bring_forward(Steady::now());
  });
  WriteResult r;
  long long took = 0;
  EXPECT_TRUE(finishes_within(
      milliseconds(2000),
      [&] {
        const auto t0 = Steady::now();
        r = sink->write_record(serialise_record(rec(0, 0, 1 << 20), SIZE_MAX) + "\n", deadline);
        took = ms_between(t0, Steady::now());
      },
      [&] { sinktest::drain(s.read_fd); }));
  cutter.join();
  EXPECT_EQ(r.status, WriteStatus::failed);
  EXPECT_GE(took, 140);
  EXPECT_LT(took, 600);
  EXPECT_NE(r.error.find("writer's deadline"), std::string::npos) << r.error;
}

// Each record opens its own non-blocking description of the FIFO: a reader
// that left is "Broken pipe" (never a blocked open), one that came back is
// written to again. (Not keeping that description open between records is
// what lets WritesLinesToAPipe's reader see EOF.)
TEST(StreamSink, FifoReaderLeavesAndComesBack) {
  Stalled s;
  ASSERT_TRUE(make_stalled(StreamKind::fifo, s));
  auto sink = make_stream_sink(s.write_fd, "stdout");
  std::string err;
  ASSERT_TRUE(sink->write_line("{\"n\":1}", err)) << err;
  EXPECT_EQ(sinktest::drain(s.read_fd), "{\"n\":1}\n");
  ::close(s.read_fd);
  s.read_fd = -1;
  EXPECT_FALSE(sink->write_line("{\"n\":2}", err));
  EXPECT_NE(err.find("Broken pipe"), std::string::npos) << err;
  s.read_fd = ::open(s.fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(s.read_fd, 0);
  ASSERT_TRUE(sink->write_line("{\"n\":3}", err)) << err;
  EXPECT_EQ(sinktest::drain(s.read_fd), "{\"n\":3}\n");
}

// Without /proc (no private description can be opened) a blocking pipe is
// never written blocking: the record fails, saying why; a shared descriptor
// that is non-blocking already is still used.
TEST(StreamSink, WithoutProcABlockingPipeIsNotRisked) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::unshare(CLONE_NEWNS) != 0) _exit(77);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(77);
    if (::mount("none", "/proc", "tmpfs", 0, nullptr) != 0) _exit(77);
    int p[2];
    if (::pipe(p) != 0) _exit(2);
    auto sink = make_stream_sink(p[1], "stdout");
    std::string err;
    if (sink->write_line("{\"a\":1}", err)) _exit(3);
    if (err.find("cannot get a non-blocking descriptor") == std::string::npos) _exit(4);
    if (err.find("record not written") == std::string::npos) _exit(5);
    ::fcntl(p[1], F_SETFL, ::fcntl(p[1], F_GETFL) | O_NONBLOCK);
    if (!sink->write_line("{\"a\":2}", err)) _exit(6);
    char buf[64];
    const ssize_t n = ::read(p[0], buf, sizeof buf);
    if (n != 8 || std::string(buf, 8) != "{\"a\":2}\n") _exit(7);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot hide /proc here (needs CAP_SYS_ADMIN)";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(StreamSink, ClosedSocketIsAnErrorNotADeath) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGPIPE, SIG_DFL);
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) _exit(2);
    ::close(sv[1]);
    auto sink = make_stream_sink(sv[0], "stdout");
    std::string err;
    if (sink->write_line("{\"a\":1}\n", err)) _exit(3);
    if (err.find("Broken pipe") == std::string::npos) _exit(4);
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE)) _exit(6);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(StreamSink, RejectedLinesSayTheyAreNeverWritable) {
  int fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto sink = make_stream_sink(fd, "null");
  SinkDeadline none;
  EXPECT_EQ(sink->write_record("{\"a\":\n1}", none).status, WriteStatus::rejected);
  EXPECT_EQ(sink->write_record("", none).status, WriteStatus::rejected);
  EXPECT_EQ(sink->write_record("{\"a\":1}", none).status, WriteStatus::written);
  ::close(fd);
}

// ------------------------------------------------------------------ SinkSet

TEST(SinkSet, InvalidUtf8IsReplacedNotThrown) {
  TempDir tmp;
  SinkSet set;
  set.add(file_sink(tmp.path(), 1 << 20, 2));
  json r{{"comm", std::string("ab\xff\xfe" "c")}, {"ok", "caf\xc3\xa9"}};
  std::vector<std::string> errors;
  EXPECT_NO_THROW(EXPECT_TRUE(set.write(r, errors)));
  auto lines = read_lines(tmp.path() + "/oomsnap.jsonl");
  ASSERT_EQ(lines.size(), 1u);
  ASSERT_TRUE(json::accept(lines[0])) << lines[0];
  json back = json::parse(lines[0]);
  EXPECT_EQ(back["comm"], "ab\xef\xbf\xbd\xef\xbf\xbd" "c");  // U+FFFD per bad byte
  EXPECT_EQ(back["ok"], "caf\xc3\xa9");                       // valid UTF-8 untouched
}

TEST(SinkSet, RecordLineIsCompactAndTerminated) {
  EXPECT_EQ(record_line(json{{"b", {1, 2}}, {"a", json::object()}}), "{\"a\":{},\"b\":[1,2]}\n");
}

TEST(SinkSet, EmptySetIsAnError) {
  SinkSet set;
  std::vector<std::string> errors;
  EXPECT_FALSE(set.write(json{{"a", 1}}, errors));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("no record sinks"), std::string::npos);
}

// ------------------------------------------------------------------ time

TEST(TimeFormat, Rfc3339Milliseconds) {
  using namespace std::chrono;
  using tp = system_clock::time_point;
  EXPECT_EQ(rfc3339_ms(tp{}), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(rfc3339_ms(tp{seconds(1795962111) + milliseconds(123)}), "2026-11-29T14:21:51.123Z");
  // Sub-millisecond parts are cut, never rounded up into the next second.
  EXPECT_EQ(rfc3339_ms(tp{seconds(951868799) + microseconds(999999)}), "2000-02-29T23:59:59.999Z");
  EXPECT_EQ(rfc3339_ms(tp{seconds(2147483648LL) + milliseconds(7)}), "2038-01-19T03:14:08.007Z");
  // Before the epoch the millisecond still counts forward within its second.
  EXPECT_EQ(rfc3339_ms(tp{milliseconds(-1)}), "1969-12-31T23:59:59.999Z");
}
