// The stream sink against real pipes, FIFOs, sockets and terminals: lines
// whole under threads, closed and stalled readers, deadlines.
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
using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

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
