// Who can read and redirect records: the store's modes, owners and planted
// links, files and FIFOs (the rotating file sink against a local user).
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
using std::chrono::milliseconds;

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
