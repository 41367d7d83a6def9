// Record sinks against real files, pipes and processes: rotation limits,
// line integrity under threads and concurrent processes, error reporting.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

#include "agent/sink.h"
#include "agent/time_format.h"

using namespace oomsnap;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A fresh directory under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/oomsnap-sink-XXXXXX";
    const char* dir = ::mkdtemp(tmpl);
    if (!dir) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
    path_ = dir;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

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
  // mkdir -p made them 0755 (before umask) directories.
  struct stat st{};
  ASSERT_EQ(::stat((tmp.path() + "/sub").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
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
