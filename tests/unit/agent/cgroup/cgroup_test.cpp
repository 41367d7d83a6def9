#include <gtest/gtest.h>

#include "temp_tree.h"
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

#include "agent/cgroup/cgroup.h"
#include "core/proc_info.h"

using namespace oomsnap;
namespace fs = std::filesystem;

namespace {

// This host's style: v1 controllers each on their own mount, plus an empty cgroup2.
const char* kMountinfoV1 =
    "10:30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "11:31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "14:34 30 0:31 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n"
    "19:39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
    "20:40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

const char* kMountinfoV2 =
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n";

// Fake file reader for the v2 cgroup.controllers check.
FileReader fake_files(std::map<std::string, std::string> files) {
  return [files](const std::string& path) -> std::optional<std::string> {
    auto it = files.find(path);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
}

using oomsnap_test::TempTree;

const std::string kHex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

}  // namespace

TEST(CgroupMountinfo, FindsV1MemoryMount) {
  // The reader must not be consulted for v1; a v2 mount that would also
  // qualify loses because memory is bound to v1.
  auto fsys = find_memory_cgroupfs(kMountinfoV1, "",
                                   fake_files({{"/sys/fs/cgroup/unified/cgroup.controllers", "memory\n"}}));
  ASSERT_TRUE(fsys);
  EXPECT_EQ(fsys->version, 1);
  EXPECT_EQ(fsys->mount, "/sys/fs/cgroup/memory");
}

TEST(CgroupMountinfo, FindsV2WhenControllersListMemory) {
  auto fsys = find_memory_cgroupfs(
      kMountinfoV2, "", fake_files({{"/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n"}}));
  ASSERT_TRUE(fsys);
  EXPECT_EQ(fsys->version, 2);
  EXPECT_EQ(fsys->mount, "/sys/fs/cgroup");
}

TEST(CgroupMountinfo, V2WithoutMemoryControllerIsNotUsed) {
  EXPECT_FALSE(find_memory_cgroupfs(kMountinfoV2, "",
                                    fake_files({{"/sys/fs/cgroup/cgroup.controllers", "cpu io pids\n"}})));
  EXPECT_FALSE(find_memory_cgroupfs(kMountinfoV2, "", fake_files({})));  // unreadable
  // "memory_recursiveprot" in cgroup2's super options is not the controller,
  // and a v1 "memory" must be a whole option.
  EXPECT_FALSE(find_memory_cgroupfs("14 30 0:31 / /x rw - cgroup cgroup rw,memoryish\n", "", fake_files({})));
  EXPECT_FALSE(find_memory_cgroupfs("", "", fake_files({})));
}

TEST(CgroupMountinfo, UnescapesMountPoint) {
  auto fsys = find_memory_cgroupfs(
      "14 30 0:31 / /mnt/cg\\040mem rw - cgroup cgroup rw,memory,nosuid\n", "", fake_files({}));
  ASSERT_TRUE(fsys);
  EXPECT_EQ(fsys->mount, "/mnt/cg mem");
}

TEST(CgroupMountinfo, RootOverrideDetectsVersionByFiles) {
  TempTree v1, v2, none;
  v1.write("memory.usage_in_bytes", "1\n");
  v2.write("memory.current", "1\n");
  auto a = find_memory_cgroupfs(kMountinfoV2, v1.root + "/");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->version, 1);
  EXPECT_EQ(a->mount, v1.root);
  auto b = find_memory_cgroupfs(kMountinfoV1, v2.root);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->version, 2);
  EXPECT_EQ(b->mount, v2.root);
  EXPECT_FALSE(find_memory_cgroupfs(kMountinfoV1, none.root));
}

TEST(CgroupProcFile, V1PicksMemoryLine) {
  std::string text =
      "9:name=systemd:/user.slice\n8:pids:/\n4:memory:/process_api/f6ec\n"
      "3:cpu,cpuacct:/other\n0::/\n";
  EXPECT_EQ(memcg_path_of(text, 1).value(), "/process_api/f6ec");
  // Joint controller lists count too.
  EXPECT_EQ(memcg_path_of("5:blkio,memory:/a/b\n", 1).value(), "/a/b");
  // "memory" must be a whole controller name.
  EXPECT_FALSE(memcg_path_of("5:name=memoryish:/x\n0::/\n", 1));
}

TEST(CgroupProcFile, V2PicksUnifiedLine) {
  EXPECT_EQ(memcg_path_of("0::/system.slice/foo.service\n", 2).value(), "/system.slice/foo.service");
  EXPECT_EQ(memcg_path_of("4:memory:/v1\n0::/v2:with:colons\n", 2).value(), "/v2:with:colons");
  EXPECT_FALSE(memcg_path_of("4:memory:/v1\n", 2));
  EXPECT_FALSE(memcg_path_of("", 1));
}

TEST(CgroupValues, ParsesNumbersAndMax) {
  EXPECT_EQ(parse_memcg_value("12345\n").value(), 12345u);
  EXPECT_EQ(parse_memcg_value("0\n").value(), 0u);  // present zero stays zero
  EXPECT_FALSE(parse_memcg_value("max\n"));
  EXPECT_FALSE(parse_memcg_value(""));
  EXPECT_FALSE(parse_memcg_value("-1"));
  EXPECT_FALSE(parse_memcg_value("12x"));
}

TEST(CgroupFakeTree, V1LimitedAndUnlimited) {
  TempTree t;
  t.write("limited/memory.usage_in_bytes", "104857600\n");
  t.write("limited/memory.limit_in_bytes", "209715200\n");
  t.write("limited/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
  t.write("limited/cgroup.procs", "12\n345\n");
  t.write("unlimited/memory.usage_in_bytes", "4096\n");
  t.write("unlimited/memory.limit_in_bytes", "9223372036854771712\n");  // PAGE_COUNTER_MAX
  CgroupFs cfs{1, t.root};

  auto s = read_memcg(cfs, "/limited");
  EXPECT_EQ(s.usage_bytes.value(), 104857600u);
  EXPECT_EQ(s.limit_bytes.value(), 209715200u);
  EXPECT_FALSE(s.high_bytes);
  EXPECT_FALSE(s.swap_bytes);
  EXPECT_EQ(s.events.at("oom_kill"), 3u);
  struct stat st;
  ASSERT_EQ(::stat((t.root + "/limited").c_str(), &st), 0);
  EXPECT_EQ(s.inode, st.st_ino);
  EXPECT_DOUBLE_EQ(usage_ratio(s).value(), 0.5);
  EXPECT_EQ(cgroup_pids(cfs, "/limited"), (std::vector<pid_t>{12, 345}));

  auto u = read_memcg(cfs, "/unlimited");
  EXPECT_EQ(u.usage_bytes.value(), 4096u);
  EXPECT_FALSE(u.limit_bytes);
  EXPECT_FALSE(usage_ratio(u));
  EXPECT_TRUE(cgroup_pids(cfs, "/unlimited").empty());  // no cgroup.procs

  // The rescan's light read: limits only.
  auto l = read_memcg_limits(cfs, "/limited");
  EXPECT_EQ(l.limit_bytes.value(), 209715200u);
  EXPECT_FALSE(l.usage_bytes);
  EXPECT_FALSE(read_memcg_limits(cfs, "/unlimited").limit_bytes);
}

TEST(CgroupFakeTree, V2LimitedUnlimitedAndEvents) {
  TempTree t;
  t.write("pod/memory.current", "1000\n");
  t.write("pod/memory.max", "4000\n");
  t.write("pod/memory.high", "3000\n");
  t.write("pod/memory.swap.current", "0\n");
  t.write("pod/memory.events", "low 0\nhigh 7\nmax 2\noom 1\noom_kill 1\noom_group_kill 0\n");
  t.write("free/memory.current", "10\n");
  t.write("free/memory.max", "max\n");
  t.write("free/memory.high", "max\n");
  CgroupFs cfs{2, t.root + "/"};

  auto s = read_memcg(cfs, "/pod");
  EXPECT_EQ(s.usage_bytes.value(), 1000u);
  EXPECT_EQ(s.limit_bytes.value(), 4000u);
  EXPECT_EQ(s.high_bytes.value(), 3000u);
  EXPECT_EQ(s.swap_bytes.value(), 0u);
  EXPECT_EQ(s.events.size(), 6u);
  EXPECT_EQ(s.events.at("high"), 7u);
  EXPECT_EQ(s.events.at("max"), 2u);
  EXPECT_EQ(s.events.at("oom_kill"), 1u);
  EXPECT_DOUBLE_EQ(usage_ratio(s).value(), 0.25);

  auto f = read_memcg(cfs, "free");
  EXPECT_EQ(f.usage_bytes.value(), 10u);
  EXPECT_FALSE(f.limit_bytes);
  EXPECT_FALSE(f.high_bytes);
  EXPECT_FALSE(f.swap_bytes);  // missing file: empty, not zero
  EXPECT_TRUE(f.events.empty());

  auto l = read_memcg_limits(cfs, "/pod");
  EXPECT_EQ(l.limit_bytes.value(), 4000u);
  EXPECT_EQ(l.high_bytes.value(), 3000u);
  EXPECT_FALSE(l.usage_bytes);
  EXPECT_FALSE(read_memcg_limits(cfs, "free").limit_bytes);
  EXPECT_FALSE(usage_ratio(f));
}

TEST(CgroupFakeTree, MissingCgroupIsAllEmpty) {
  TempTree t;
  auto s = read_memcg(CgroupFs{2, t.root}, "/gone");
  EXPECT_FALSE(s.usage_bytes);
  EXPECT_FALSE(s.limit_bytes);
  EXPECT_FALSE(s.high_bytes);
  EXPECT_FALSE(s.swap_bytes);
  EXPECT_TRUE(s.events.empty());
  EXPECT_EQ(s.inode, 0u);
}

TEST(CgroupContainer, Docker) {
  auto a = container_of("/docker/" + kHex64);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->runtime, "docker");
  EXPECT_EQ(a->id, kHex64);
  EXPECT_EQ(a->pod_uid, "");
  auto b = container_of("/system.slice/docker-" + kHex64 + ".scope");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->runtime, "docker");
  EXPECT_EQ(b->id, kHex64);
}

TEST(CgroupContainer, ContainerdAndCrioWithPodSlice) {
  auto a = container_of(
      "/kubepods.slice/kubepods-burstable.slice/"
      "kubepods-burstable-pod1a2b3c4d_5e6f_7081_92a3_b4c5d6e7f809.slice/cri-containerd-" +
      kHex64 + ".scope");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->runtime, "containerd");
  EXPECT_EQ(a->id, kHex64);
  EXPECT_EQ(a->pod_uid, "1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809");

  // Guaranteed QoS pods have no class in the slice name.
  auto b = container_of("/kubepods.slice/kubepods-pod0000aaaa_bbbb_cccc_dddd_eeeeffff0000.slice/crio-" +
                        kHex64 + ".scope");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->runtime, "cri-o");
  EXPECT_EQ(b->pod_uid, "0000aaaa-bbbb-cccc-dddd-eeeeffff0000");
}

TEST(CgroupContainer, KubepodsCgroupfsDriver) {
  auto a = container_of("/kubepods/burstable/pod1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809/" + kHex64);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->runtime, "");  // the cgroupfs layout does not name the runtime
  EXPECT_EQ(a->id, kHex64);
  EXPECT_EQ(a->pod_uid, "1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809");
}

TEST(CgroupContainer, NegativeCases) {
  EXPECT_FALSE(container_of("/"));
  EXPECT_FALSE(container_of(""));
  EXPECT_FALSE(container_of("/user.slice/user-1000.slice/session-2.scope"));
  EXPECT_FALSE(container_of("/process_api/f6ec2749cc05e0a5cf272ba52684cc67"));
  EXPECT_FALSE(container_of("/docker/" + kHex64.substr(1)));                 // 63 chars
  EXPECT_FALSE(container_of("/docker/" + kHex64.substr(1) + "g"));           // not hex
  EXPECT_FALSE(container_of("/system.slice/docker-" + kHex64 + ".service"));  // not a scope
  EXPECT_FALSE(container_of("/system.slice/crio-conmon-" + kHex64 + ".scope"));
  // A bare 64-hex directory outside docker/kubepods says nothing about a runtime.
  EXPECT_FALSE(container_of("/" + kHex64));
  // Pod-level cgroup without a container.
  EXPECT_FALSE(container_of("/kubepods/burstable/pod1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809"));
}

// Live check on this host: v1 memory controller at /sys/fs/cgroup/memory.
TEST(CgroupLive, ReadsOwnMemcgOnThisHost) {
  std::string mountinfo, proc_cgroup;
  ASSERT_TRUE(read_text_file("/proc/self/mountinfo", mountinfo));
  ASSERT_TRUE(read_text_file("/proc/self/cgroup", proc_cgroup));
  auto cfs = find_memory_cgroupfs(mountinfo);
  ASSERT_TRUE(cfs) << mountinfo;
  EXPECT_EQ(cfs->version, 1);
  EXPECT_EQ(cfs->mount, "/sys/fs/cgroup/memory");
  auto path = memcg_path_of(proc_cgroup, cfs->version);
  ASSERT_TRUE(path) << proc_cgroup;
  EXPECT_FALSE(path->empty());
  auto s = read_memcg(*cfs, *path);
  ASSERT_TRUE(s.usage_bytes) << cfs->mount << *path;
  EXPECT_GT(*s.usage_bytes, 0u);
  std::string dir = *path == "/" ? cfs->mount : cfs->mount + *path;
  struct stat st;
  ASSERT_EQ(::stat(dir.c_str(), &st), 0) << dir;
  EXPECT_EQ(s.inode, st.st_ino);
  auto pids = cgroup_pids(*cfs, *path);
  EXPECT_NE(std::find(pids.begin(), pids.end(), ::getpid()), pids.end());
}

// ---- mount roots, parents and tree walks ----

TEST(CgroupMountinfo, RecordsMountRoot) {
  auto host = find_memory_cgroupfs(kMountinfoV1, "", fake_files({}));
  ASSERT_TRUE(host);
  EXPECT_EQ(host->root, "/");
  // Inside a container the cgroupfs is a bind mount of the container's own
  // cgroup: mountinfo's 4th field names it.
  auto inner = find_memory_cgroupfs(
      "1234 1200 0:31 /kubepods/burstable/pod1/" + kHex64 +
          " /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n",
      "", fake_files({}));
  ASSERT_TRUE(inner);
  EXPECT_EQ(inner->mount, "/sys/fs/cgroup/memory");
  EXPECT_EQ(inner->root, "/kubepods/burstable/pod1/" + kHex64);
  auto v2 = find_memory_cgroupfs("30 22 0:26 /kubepods.slice/x.scope/ /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "",
                                 fake_files({{"/sys/fs/cgroup/cgroup.controllers", "memory pids\n"}}));
  ASSERT_TRUE(v2);
  EXPECT_EQ(v2->version, 2);
  EXPECT_EQ(v2->root, "/kubepods.slice/x.scope");  // trailing '/' dropped
  // Escapes in the root are decoded like those in the mount point.
  auto esc = find_memory_cgroupfs("14 30 0:31 /a\\040b /m rw - cgroup cgroup rw,memory\n", "", fake_files({}));
  ASSERT_TRUE(esc);
  EXPECT_EQ(esc->root, "/a b");
  TempTree t;
  t.write("memory.usage_in_bytes", "1\n");
  EXPECT_EQ(find_memory_cgroupfs("", t.root)->root, "/");  // an override is a whole hierarchy
}

TEST(CgroupMountinfo, WholeHierarchyMountBeatsSubtreeBindMount) {
  const std::string text =
      "50 30 0:31 /docker/" + kHex64 + " /mnt/sub rw - cgroup cgroup rw,memory\n" +
      "34 30 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n" +
      "60 30 0:31 /x /mnt/other rw - cgroup cgroup rw,memory\n";
  auto fsys = find_memory_cgroupfs(text, "", fake_files({}));
  ASSERT_TRUE(fsys);
  EXPECT_EQ(fsys->mount, "/sys/fs/cgroup/memory");
  EXPECT_EQ(fsys->root, "/");
  // Only subtree mounts: the one showing the most (shortest root), first on ties.
  auto sub = find_memory_cgroupfs("1 0 0:31 /a/b /m1 rw - cgroup cgroup memory\n"
                                  "2 0 0:31 /c /m2 rw - cgroup cgroup memory\n"
                                  "3 0 0:31 /d /m3 rw - cgroup cgroup memory\n",
                                  "", fake_files({}));
  ASSERT_TRUE(sub);
  EXPECT_EQ(sub->mount, "/m2");
}

TEST(CgroupMountRelative, StripsTheMountRoot) {
  CgroupFs host{1, "/sys/fs/cgroup/memory", "/"};
  EXPECT_EQ(to_mount_relative(host, "/a/b").value(), "/a/b");
  EXPECT_EQ(to_mount_relative(host, "/").value(), "/");
  EXPECT_EQ(to_mount_relative(host, "/a/b/").value(), "/a/b");

  CgroupFs pod{2, "/sys/fs/cgroup", "/kubepods/pod1"};
  EXPECT_EQ(to_mount_relative(pod, "/kubepods/pod1").value(), "/");
  EXPECT_EQ(to_mount_relative(pod, "/kubepods/pod1/").value(), "/");
  EXPECT_EQ(to_mount_relative(pod, "/kubepods/pod1/c1").value(), "/c1");
  EXPECT_EQ(to_mount_relative(pod, "/kubepods/pod1/c1/sub").value(), "/c1/sub");
  EXPECT_FALSE(to_mount_relative(pod, "/kubepods/pod12"));  // prefix, not a parent
  EXPECT_FALSE(to_mount_relative(pod, "/kubepods"));
  EXPECT_FALSE(to_mount_relative(pod, "/other"));
  EXPECT_FALSE(to_mount_relative(pod, "/"));
  CgroupFs slash_root{2, "/sys/fs/cgroup", "/kubepods/pod1/"};
  EXPECT_EQ(to_mount_relative(slash_root, "/kubepods/pod1/c1").value(), "/c1");

  // Outside the reader's cgroup namespace the kernel prints "/../..": never
  // a path below the mount, whatever the root.
  EXPECT_FALSE(to_mount_relative(host, "/../../system.slice"));
  EXPECT_FALSE(to_mount_relative(host, "/a/../b"));
  EXPECT_FALSE(to_mount_relative(host, ""));
  EXPECT_FALSE(to_mount_relative(host, "relative/path"));
  EXPECT_EQ(to_mount_relative(host, "/a..b/c").value(), "/a..b/c");  // ".." only as a whole component
}

TEST(CgroupMountRelative, MemcgRelPathOfProcFile) {
  const std::string v1_text = "4:memory:/kubepods/pod1/c1\n0::/\n";
  EXPECT_EQ(memcg_rel_path_of(CgroupFs{1, "/m", "/kubepods/pod1"}, v1_text).value(), "/c1");
  EXPECT_EQ(memcg_rel_path_of(CgroupFs{1, "/m", "/"}, v1_text).value(), "/kubepods/pod1/c1");
  EXPECT_FALSE(memcg_rel_path_of(CgroupFs{1, "/m", "/elsewhere"}, v1_text));
  EXPECT_EQ(memcg_rel_path_of(CgroupFs{2, "/sys/fs/cgroup", "/"}, v1_text).value(), "/");
  EXPECT_FALSE(memcg_rel_path_of(CgroupFs{2, "/sys/fs/cgroup", "/"}, "4:memory:/x\n"));
}

TEST(CgroupPaths, ParentOf) {
  EXPECT_EQ(parent_of("/a/b/c"), "/a/b");
  EXPECT_EQ(parent_of("/a/b/"), "/a");
  EXPECT_EQ(parent_of("/a"), "/");
  EXPECT_EQ(parent_of("/"), "/");
  EXPECT_EQ(parent_of(""), "/");
  EXPECT_EQ(parent_of("a"), "/");
}

TEST(CgroupPaths, MemcgDir) {
  EXPECT_EQ(memcg_dir(CgroupFs{1, "/sys/fs/cgroup/memory/", "/"}, "/"), "/sys/fs/cgroup/memory");
  EXPECT_EQ(memcg_dir(CgroupFs{1, "/sys/fs/cgroup/memory", "/"}, "/a/b"), "/sys/fs/cgroup/memory/a/b");
  EXPECT_EQ(memcg_dir(CgroupFs{2, "/sys/fs/cgroup", "/"}, "a"), "/sys/fs/cgroup/a");
  EXPECT_EQ(memcg_dir(CgroupFs{2, "/sys/fs/cgroup", "/"}, ""), "/sys/fs/cgroup");
}

namespace {

uint64_t inode_of(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

std::vector<std::string> rel_paths(const std::vector<MemcgNode>& nodes) {
  std::vector<std::string> out;
  for (const auto& n : nodes) out.push_back(n.rel_path);
  return out;
}

// a/{x/deep/deeper, y}, b, plus files and symlinks that must not be entered.
void build_fake_tree(const TempTree& t) {
  t.write("a/x/deep/deeper/memory.current", "1\n");
  t.write("a/y/memory.current", "1\n");
  t.write("b/memory.current", "1\n");
  t.write("memory.current", "1\n");
  fs::create_symlink(t.root + "/a", t.root + "/b/link-to-a");  // would loop into a/
  fs::create_symlink(t.root + "/a", t.root + "/zz-link");
}

}  // namespace

TEST(CgroupTreeWalk, ListsDirectoriesBreadthFirstWithoutFollowingSymlinks) {
  TempTree t;
  build_fake_tree(t);
  CgroupFs cfs{2, t.root, "/"};
  auto nodes = list_memcgs(cfs, "/");
  EXPECT_EQ(rel_paths(nodes), (std::vector<std::string>{"/", "/a", "/b", "/a/x", "/a/y", "/a/x/deep",
                                                        "/a/x/deep/deeper"}));
  for (const auto& n : nodes) {
    EXPECT_EQ(n.inode, inode_of(memcg_dir(cfs, n.rel_path))) << n.rel_path;
    EXPECT_NE(n.inode, 0u);
  }
  // A subtree, with a trailing slash.
  EXPECT_EQ(rel_paths(list_memcgs(cfs, "/a/")),
            (std::vector<std::string>{"/a", "/a/x", "/a/y", "/a/x/deep", "/a/x/deep/deeper"}));
  // The start itself must not be a symlink either.
  EXPECT_TRUE(list_memcgs(cfs, "/zz-link").empty());
  EXPECT_TRUE(list_memcgs(cfs, "/missing").empty());
  EXPECT_TRUE(list_memcgs(cfs, "/memory.current").empty());  // a file is no cgroup
}

TEST(CgroupTreeWalk, DepthAndNodeBounds) {
  TempTree t;
  build_fake_tree(t);
  CgroupFs cfs{1, t.root, "/"};
  EXPECT_EQ(rel_paths(list_memcgs(cfs, "/", 100000, 0)), (std::vector<std::string>{"/"}));
  EXPECT_EQ(rel_paths(list_memcgs(cfs, "/", 100000, 1)), (std::vector<std::string>{"/", "/a", "/b"}));
  EXPECT_EQ(rel_paths(list_memcgs(cfs, "/", 100000, 2)),
            (std::vector<std::string>{"/", "/a", "/b", "/a/x", "/a/y"}));
  // Depth counts from the start, not from the mount.
  EXPECT_EQ(rel_paths(list_memcgs(cfs, "/a/x", 100000, 1)), (std::vector<std::string>{"/a/x", "/a/x/deep"}));
  // The node cap keeps the shallow part.
  EXPECT_EQ(rel_paths(list_memcgs(cfs, "/", 4)), (std::vector<std::string>{"/", "/a", "/b", "/a/x"}));
  EXPECT_EQ(rel_paths(list_memcgs(cfs, "/", 1)), (std::vector<std::string>{"/"}));
  EXPECT_TRUE(list_memcgs(cfs, "/", 0).empty());
}

TEST(CgroupTreeWalk, WideDirectoryIsCappedToo) {
  TempTree t;
  for (int i = 0; i < 300; ++i) fs::create_directories(fs::path(t.root) / ("c" + std::to_string(1000 + i)));
  CgroupFs cfs{2, t.root, "/"};
  auto nodes = list_memcgs(cfs, "/", 50);
  ASSERT_EQ(nodes.size(), 50u);
  EXPECT_EQ(nodes[1].rel_path, "/c1000");  // siblings in name order
  EXPECT_EQ(nodes[49].rel_path, "/c1048");
  EXPECT_EQ(list_memcgs(cfs, "/").size(), 301u);
}

// Live: the mount root on this host is "/", and the walk sees our own memcg.
TEST(CgroupLive, MountRootAndWalkOnThisHost) {
  std::string mountinfo, proc_cgroup;
  ASSERT_TRUE(read_text_file("/proc/self/mountinfo", mountinfo));
  ASSERT_TRUE(read_text_file("/proc/self/cgroup", proc_cgroup));
  auto cfs = find_memory_cgroupfs(mountinfo);
  ASSERT_TRUE(cfs);
  auto rel = memcg_rel_path_of(*cfs, proc_cgroup);
  ASSERT_TRUE(rel) << proc_cgroup << " root " << cfs->root;
  auto nodes = list_memcgs(*cfs, parent_of(*rel), 10000, 1);
  auto it = std::find_if(nodes.begin(), nodes.end(), [&](const MemcgNode& n) { return n.rel_path == *rel; });
  ASSERT_NE(it, nodes.end()) << *rel;
  EXPECT_EQ(it->inode, read_memcg(*cfs, *rel).inode);
}
