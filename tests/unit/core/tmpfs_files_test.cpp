// The tmpfs files by path (issue #24): the mount table's tmpfs mounts, and a
// bounded walk that follows no symlink, enters no other mount and keeps the
// largest files, on real directories.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/safe_open.h"
#include "base/unique_fd.h"
#include "core/memory_breakdown.h"
#include "core/tmpfs_files.h"

using namespace oomsnap;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kKiB = 1024;

// A directory on /dev/shm (tmpfs: allocated bytes are what was written),
// removed at scope exit.
struct ShmTree {
  std::string root;
  ShmTree() {
    char tmpl[] = "/dev/shm/oomsnap-test-tmpfs-XXXXXX";
    root = ::mkdtemp(tmpl);
  }
  ~ShmTree() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  void file(const std::string& rel, size_t bytes) const {
    fs::create_directories((fs::path(root) / rel).parent_path());
    std::ofstream(fs::path(root) / rel) << std::string(bytes, 'x');
  }
};

TmpfsFiles walk(const std::string& dir, const TmpfsScanLimits& limits, const std::vector<std::string>& skip = {}) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  struct stat st {};
  ::fstat(fd.get(), &st);
  TmpfsFiles out;
  size_t entries = 0;
  walk_tmpfs_dir(fd.get(), st.st_dev, dir, skip, limits, entries, out);
  std::sort(out.largest.begin(), out.largest.end(),
            [](const TmpfsFiles::File& a, const TmpfsFiles::File& b) { return a.bytes > b.bytes; });
  return out;
}

}  // namespace

TEST(TmpfsMounts, TmpfsMountsOncePerDeviceAndEveryMountPoint) {
  const std::string text =
      "22 1 0:21 / /dev/shm rw,nosuid - tmpfs tmpfs rw\n"
      "23 1 0:22 / /run rw - tmpfs tmpfs rw\n"
      "24 1 0:21 / /var/cache\\040shm rw - tmpfs tmpfs rw\n"  // a bind mount of /dev/shm's device
      "25 1 0:23 / /data rw - fuse.sshfs host:/ rw\n"
      "26 1 0:24 / /dev rw - devtmpfs udev rw\n"
      "27 1 0:25 / /my\\040tmp rw shared:1 - tmpfs none rw\n"
      "garbage line\n";
  const TmpfsMountTable t = parse_tmpfs_mounts(text);
  ASSERT_EQ(t.tmpfs.size(), 3u);
  EXPECT_EQ(t.tmpfs[0].point, "/dev/shm");
  EXPECT_EQ(t.tmpfs[1].point, "/run");
  EXPECT_EQ(t.tmpfs[2].point, "/my tmp");  // \040 undone
  EXPECT_EQ(t.tmpfs[2].dev, (DeviceNumber{0, 25}));
  EXPECT_EQ(t.all_points, (std::vector<std::string>{"/data", "/dev", "/dev/shm", "/my tmp", "/run", "/var/cache shm"}));
  EXPECT_TRUE(t.reason.empty());

  std::string many;
  for (size_t i = 0; i <= kMaxMountEntries; ++i) many += "1 1 0:9 / /m" + std::to_string(i) + " rw - tmpfs t rw\n";
  const TmpfsMountTable cut = parse_tmpfs_mounts(many);
  EXPECT_EQ(cut.all_points.size(), kMaxMountEntries);
  EXPECT_EQ(cut.tmpfs.size(), 1u);  // one device
  EXPECT_NE(cut.reason.find("cut"), std::string::npos);
}

// Files by allocated bytes, the largest first and at most 12 of them, nested
// ones by their path; a symlink to a file or a directory outside is neither
// counted nor followed, and a mount point in the table is not entered.
TEST(TmpfsWalk, LargestFilesByPathNoSymlinkFollowedNoMountEntered) {
  ShmTree outside;
  outside.file("big", 512 * kKiB);
  outside.file("dir/also-big", 512 * kKiB);
  ShmTree t;
  t.file("cache.bin", 96 * kKiB);
  t.file("a/b/nested", 64 * kKiB);
  t.file("mnt/hidden", 256 * kKiB);
  for (int i = 0; i < 20; ++i) t.file("small/" + std::to_string(i), 4 * kKiB);
  fs::create_symlink(outside.root + "/big", fs::path(t.root) / "link-to-file");
  fs::create_directory_symlink(outside.root + "/dir", fs::path(t.root) / "link-to-dir");
  fs::create_directory_symlink("/", fs::path(t.root) / "root");

  const TmpfsFiles w = walk(t.root, TmpfsScanLimits{}, {t.root + "/mnt"});
  EXPECT_EQ(w.files, 22u);
  EXPECT_EQ(w.bytes, (96 + 64 + 20 * 4) * kKiB);
  ASSERT_EQ(w.largest.size(), TmpfsFiles::kMaxFiles);
  EXPECT_EQ(w.largest[0].path, t.root + "/cache.bin");
  EXPECT_EQ(w.largest[0].bytes, 96 * kKiB);
  EXPECT_EQ(w.largest[1].path, t.root + "/a/b/nested");
  for (const auto& f : w.largest) EXPECT_EQ(f.path.find("link"), std::string::npos) << f.path;
  EXPECT_TRUE(w.reason.empty()) << w.reason;
}

// A tree larger than the entry bound, deeper than the depth bound, or past
// its deadline is cut, with the reason, and what was seen is kept.
TEST(TmpfsWalk, EntriesDepthAndDeadlineCutTheWalkWithAReason) {
  ShmTree t;
  for (int i = 0; i < 3000; ++i) t.file("f" + std::to_string(i), 0);
  TmpfsScanLimits few;
  few.max_entries = 1000;
  const TmpfsFiles cut = walk(t.root, few);
  EXPECT_LE(cut.files, 1000u);
  EXPECT_NE(cut.reason.find("1000 entries"), std::string::npos) << cut.reason;

  std::string deep;
  for (int i = 0; i < 24; ++i) deep += "d/";
  t.file(deep + "bottom", 4 * kKiB);
  TmpfsScanLimits shallow;
  shallow.max_depth = 8;
  const TmpfsFiles d = walk(t.root, shallow);
  EXPECT_NE(d.reason.find("8 directories"), std::string::npos) << d.reason;
  EXPECT_EQ(d.bytes, 0u);  // the only file with bytes is below the bound

  TmpfsScanLimits late;
  late.deadline = std::chrono::steady_clock::now();
  const TmpfsFiles l = walk(t.root, late);
  EXPECT_NE(l.reason.find("deadline"), std::string::npos) << l.reason;
  EXPECT_LT(l.files, 3000u);
}

// A mount point resolved in a target's root: an absolute symlink planted on
// the way names the root's own path, never the host's; one planted as the
// mount point itself is not followed at all (the table names no symlink).
TEST(TmpfsWalk, AMountPointIsOpenedInsideTheTargetsRoot) {
  ShmTree root;
  root.file("real/shm/x", 4 * kKiB);
  fs::create_directories(fs::path(root.root) / "dev");
  fs::create_directory_symlink("/etc", fs::path(root.root) / "dev/shm");  // the host's /etc if followed outside
  UniqueFd r(::open(root.root.c_str(), O_PATH | O_CLOEXEC));
  errno = 0;
  UniqueFd escaped(open_directory_in_root(r.get(), "/dev/shm/ssl"));
  EXPECT_LT(escaped.get(), 0);  // resolves to <root>/etc/ssl, which is not there
  EXPECT_EQ(errno, ENOENT);
  errno = 0;
  EXPECT_LT(UniqueFd(open_directory_in_root(r.get(), "/dev/shm")).get(), 0);
  EXPECT_TRUE(errno == ENOTDIR || errno == ELOOP) << std::strerror(errno);
  UniqueFd inside(open_directory_in_root(r.get(), "/real/shm"));
  EXPECT_GE(inside.get(), 0);
  errno = 0;
  EXPECT_LT(UniqueFd(open_directory_in_root(r.get(), "/real/shm/x")).get(), 0);
  EXPECT_EQ(errno, ENOTDIR);
}

// From the capture process: untrusted, so past its bounds it is refused.
TEST(TmpfsFilesJson, RoundTripsAndRefusesWhatItNeverWrites) {
  MemoryBreakdown b;
  b.status = "complete";
  b.tmpfs = TmpfsFiles{};
  b.tmpfs->bytes = 3 * kKiB;
  b.tmpfs->files = 2;
  b.tmpfs->largest = {{"/dev/shm/a", 2 * kKiB}, {"/dev/shm/b", kKiB}};
  b.tmpfs->reason = "tmpfs walk cut at its deadline";
  b.tmpfs->duration_ms = 1.5;
  MemoryBreakdown back;
  std::string why;
  ASSERT_TRUE(memory_breakdown_from_json(to_json(b), back, why)) << why;
  ASSERT_TRUE(back.tmpfs);
  EXPECT_EQ(to_json(*back.tmpfs), to_json(*b.tmpfs));

  nlohmann::json many = to_json(b);
  for (int i = 0; i < 12; ++i) many["tmpfs"]["largest"].push_back({{"path", "/x"}, {"bytes", 1}});
  EXPECT_FALSE(memory_breakdown_from_json(many, back, why));
  nlohmann::json long_path = to_json(b);
  long_path["tmpfs"]["largest"][0]["path"] = std::string(201, 'p');
  EXPECT_FALSE(memory_breakdown_from_json(long_path, back, why));
  nlohmann::json wrong = to_json(b);
  wrong["tmpfs"]["bytes"] = -1;
  EXPECT_FALSE(memory_breakdown_from_json(wrong, back, why));
  nlohmann::json negative = to_json(b);
  negative["tmpfs"]["duration_ms"] = -1;
  EXPECT_FALSE(memory_breakdown_from_json(negative, back, why));
  // A record from before the walk had its own duration.
  nlohmann::json older = to_json(b);
  older["tmpfs"].erase("duration_ms");
  EXPECT_TRUE(memory_breakdown_from_json(older, back, why)) << why;
}

// The mount table is read once per capture and given to both its users: an
// unreadable one is a reason for each, and the walk opens nothing.
TEST(TmpfsMounts, AMountTableNotReadIsAReasonForTheDevicesAndTheWalk) {
  MountInfoText unread;
  unread.error = "cannot read /proc/1/mountinfo";
  EXPECT_NE(tmpfs_devices_of(unread).reason.find("cannot read /proc/1/mountinfo"), std::string::npos);
  const TmpfsFiles w = scan_tmpfs_files(ProcFiles(::getpid()), unread, TmpfsScanLimits{});
  EXPECT_EQ(w.reason, "cannot read /proc/1/mountinfo");
  EXPECT_EQ(w.files, 0u);

  const MountInfoText mine = read_mountinfo(ProcFiles(::getpid()), std::chrono::steady_clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(mine.error.empty()) << mine.error;
  EXPECT_TRUE(tmpfs_devices_of(mine).reason.empty());
  EXPECT_GE(scan_tmpfs_files(ProcFiles(::getpid()), mine, TmpfsScanLimits{}).duration_ms, 0.0);
}

// A directory swapped for a symlink (to a directory outside the tree, on the
// same tmpfs) between the walk's stat and its open is not followed: the
// open is relative to the parent with O_NOFOLLOW. A tenant can swap names
// this way at will (renameat2 RENAME_EXCHANGE), so the swap runs in a loop
// while the tree is walked again and again; both states must be seen, and
// the file behind the symlink never.
TEST(TmpfsWalk, ADirectorySwappedForASymlinkDuringTheWalkIsNotFollowed) {
  ShmTree t;
  t.file("tree/d/inside", 4 * kKiB);
  t.file("outside/secret", 4 * kKiB);
  fs::create_directories(t.root + "/stage");
  fs::create_symlink(t.root + "/outside", t.root + "/stage/d");
  const std::string a = t.root + "/tree/d", b = t.root + "/stage/d";
  std::atomic<bool> stop{false};
  std::thread swapper([&] {
    while (!stop.load(std::memory_order_relaxed))
      ::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE);
  });
  size_t as_dir = 0, as_link = 0, followed = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (int i = 0; i < 20000 && std::chrono::steady_clock::now() < until; ++i) {
    const TmpfsFiles w = walk(t.root + "/tree", TmpfsScanLimits{});
    bool inside = false;
    for (const auto& f : w.largest) {
      inside |= f.path == a + "/inside";
      followed += f.path.find("secret") != std::string::npos;
    }
    ++(inside ? as_dir : as_link);
  }
  stop = true;
  swapper.join();
  EXPECT_EQ(followed, 0u);
  EXPECT_GT(as_dir, 0u);
  EXPECT_GT(as_link, 0u);
}

// A file name of invalid UTF-8 longer than the bound (a tenant's choice)
// still gives a breakdown the parent accepts after JSON encoding: before,
// the encoder's replacements tripled it past the bound and the whole
// capture result was refused.
TEST(TmpfsWalk, AFileNameOfInvalidUtf8StaysWithinTheBoundAfterEncoding) {
  ShmTree t;
  t.file(std::string(200, '\xC3') + "\xFF", 4 * kKiB);
  const TmpfsFiles w = walk(t.root, TmpfsScanLimits{});
  ASSERT_EQ(w.largest.size(), 1u);
  MemoryBreakdown b;
  b.status = "complete";
  b.tmpfs = w;
  b.add_detail(MemoryKind::kShmem, std::string(250, '\xFE'), 4 * kKiB);
  const std::string encoded = to_json(b).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  MemoryBreakdown back;
  std::string why;
  EXPECT_TRUE(memory_breakdown_from_json(nlohmann::json::parse(encoded), back, why)) << why;
}
