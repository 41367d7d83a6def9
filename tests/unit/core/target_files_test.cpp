// The files a capture keeps open (core/proc_files.h, core/target.h): what
// lets the capture process give up opening files before it reads a target.
// Each /proc file is read again from its start through the one descriptor,
// and never answers for another process once its own is gone; the mapped
// files Target::open opens are the ones asked for, each file once, up to
// its bound.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/proc_files.h"
#include "core/target.h"

using namespace oomsnap;

TEST(ProcFiles, EachFileIsReadWholeAgainThroughOneDescriptor) {
  ProcFiles self(getpid());
  std::string first, again;
  ASSERT_TRUE(self.read(ProcFile::kStatus, first));
  const int fd = self.fd(ProcFile::kStatus);
  ASSERT_TRUE(self.read(ProcFile::kStatus, again));
  EXPECT_EQ(self.fd(ProcFile::kStatus), fd);  // not opened again
  EXPECT_EQ(first.substr(0, 5), "Name:");
  EXPECT_EQ(again.substr(0, 5), "Name:");
  auto id = read_identity(self);
  ASSERT_TRUE(id);
  EXPECT_EQ(id->pid, getpid());
  // Bounded: a cut read says so.
  bool cut = false;
  std::string head;
  ASSERT_TRUE(self.read(ProcFile::kStatus, head, 16, std::chrono::steady_clock::time_point::max(), cut));
  EXPECT_EQ(head.size(), 16u);
  EXPECT_TRUE(cut);
  // The root is a handle to resolve paths in, not a file to read.
  struct stat st {};
  ASSERT_EQ(::fstat(self.fd(ProcFile::kRoot), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_FALSE(self.read(ProcFile::kRoot, head));
}

// Opened while the process lived, read after it was reaped: the read fails,
// even should the pid be given to another process, which a path opened
// again would then read.
TEST(ProcFiles, AProcessGoneIsNotReadThroughItsFiles) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  ProcFiles files(child);
  files.open_all();
  ASSERT_TRUE(read_identity(files));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_FALSE(read_identity(files));
  std::string text;
  EXPECT_FALSE(files.read(ProcFile::kMaps, text));
  EXPECT_TRUE(text.empty());
}

TEST(ProcFiles, NoSuchProcess) {
  ProcFiles none(0x7ffffff0);
  EXPECT_LT(none.fd(ProcFile::kStat), 0);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_FALSE(read_identity(none));
  EXPECT_NE(read_process_memory(none).status.find("/proc/2147483632/status"), std::string::npos);
}

namespace {

// Files of this process's own, mapped read-only: `n` distinct files.
struct MappedFiles {
  explicit MappedFiles(size_t n) {
    char tmpl[] = "/tmp/oomsnap-mapped-XXXXXX";
    if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp");
    dir = tmpl;
    for (size_t i = 0; i < n; ++i) {
      const std::string path = dir + "/f" + std::to_string(i);
      const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
      if (fd < 0 || ::ftruncate(fd, 4096) != 0) throw std::runtime_error("create " + path);
      void* p = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
      ::close(fd);
      if (p == MAP_FAILED) throw std::runtime_error("mmap " + path);
      maps.push_back(p);
    }
  }
  ~MappedFiles() {
    for (void* p : maps) ::munmap(p, 4096);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string dir;
  std::vector<void*> maps;
};

bool mapped_here(const Mapping& m, const std::string& dir) { return m.path.rfind(dir + "/", 0) == 0; }

}  // namespace

// Only the files the filter asks for are opened, a file mapped twice once;
// another mapping's file is refused (ENOENT), not opened by path then.
TEST(TargetFiles, OnlyTheFilesAskedForAreOpened) {
  MappedFiles files(2);
  // The first file a second time.
  const int fd = ::open((files.dir + "/f0").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  void* twice = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(twice, MAP_FAILED);
  std::string err;
  const std::string f0_path = files.dir + "/f0";
  auto t = Target::open(getpid(), err, [&f0_path](const Mapping& m) { return m.path == f0_path; });
  ASSERT_TRUE(t) << err;
  size_t f0 = 0;
  for (const Mapping& m : t->maps()) {
    if (!mapped_here(m, files.dir)) continue;
    errno = 0;
    const int got = t->open_mapping(m);
    if (m.path == f0_path) {
      ASSERT_GE(got, 0) << std::strerror(errno);
      struct stat st {};
      ASSERT_EQ(::fstat(got, &st), 0);
      EXPECT_EQ(st.st_ino, m.inode);
      ::close(got);  // the caller's own descriptor: closing it takes nothing from Target
      ++f0;
    } else {
      EXPECT_LT(got, 0);
      EXPECT_EQ(errno, ENOENT);
    }
  }
  EXPECT_EQ(f0, 2u);
  ::munmap(twice, 4096);
}

// Past kMaxMappedFiles the rest are refused with EMFILE, executable files
// first (the runtimes' libraries are among them, the data files after).
TEST(TargetFiles, AtMostTheBoundExecutableFilesFirst) {
  MappedFiles files(Target::kMaxMappedFiles + 16);
  std::string err;
  auto t = Target::open(getpid(), err);
  ASSERT_TRUE(t) << err;
  std::set<std::pair<uint64_t, std::string>> opened;
  size_t refused = 0, executable_refused = 0;
  for (const Mapping& m : t->maps()) {
    if (m.offset != 0 || !m.inode || m.path.empty()) continue;
    errno = 0;
    const int got = t->open_mapping(m);
    if (got >= 0) {
      opened.insert({m.inode, m.path});
      ::close(got);
    } else if (errno == EMFILE) {
      ++refused;
      if (!mapped_here(m, files.dir)) {
        for (const Mapping& other : t->maps())
          if (other.inode == m.inode && other.perms.size() > 2 && other.perms[2] == 'x') ++executable_refused;
      }
    }
  }
  EXPECT_GE(refused, 16u);
  EXPECT_EQ(opened.size(), Target::kMaxMappedFiles);
  EXPECT_EQ(executable_refused, 0u);
  // The test binary itself and libc were opened: executable.
  size_t libc = 0;
  for (const Mapping& m : t->maps())
    if (m.offset == 0 && m.path.find("libc.so") != std::string::npos) {
      const int got = t->open_mapping(m);
      EXPECT_GE(got, 0);
      if (got >= 0) ::close(got);
      ++libc;
    }
  if (!libc) GTEST_LOG_(INFO) << "libc is linked statically here";
}
