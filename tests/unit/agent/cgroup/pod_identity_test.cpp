// Pod and container names from fake kubelet log trees: both cgroup drivers'
// paths end to end, containers picked by id, and what a hostile tree cannot
// do (symlinks, FIFOs, bad names, huge directories).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include "agent/cgroup/cgroup.h"
#include "agent/incident/incident.h"
#include "agent/cgroup/pod_identity.h"
#include "temp_tree.h"

using namespace oomsnap;
using oomsnap_test::TempTree;
namespace fs = std::filesystem;

namespace {

const std::string kUid = "0b7c3c4e-1f2a-4c1b-9a7e-2b3c4d5e6f70";
const std::string kUidUnderscores = "0b7c3c4e_1f2a_4c1b_9a7e_2b3c4d5e6f70";
const std::string kOtherUid = "9f8e7d6c-5b4a-4321-8fed-cba987654321";
const std::string kAppId = std::string(32, 'a') + std::string(32, '1');
const std::string kSidecarId = std::string(32, 'b') + std::string(32, '2');
const std::string kSandboxId = std::string(32, 'c') + std::string(32, '3');

// The pod's directory name, as kubelet spells it.
std::string pod_dir(const std::string& ns, const std::string& pod, const std::string& uid) {
  return ns + "_" + pod + "_" + uid;
}

// pods/<ns>_<pod>_<uid>/<container>/0.log for each container.
void make_pod(const TempTree& t, const std::string& ns, const std::string& pod, const std::string& uid,
              const std::vector<std::string>& containers) {
  fs::create_directories(fs::path(t.root) / "pods" / pod_dir(ns, pod, uid));
  for (const auto& c : containers) t.write("pods/" + pod_dir(ns, pod, uid) + "/" + c + "/0.log", "log line\n");
}

// containers/<pod>_<ns>_<container>-<id>.log -> its 0.log, as kubelet links it.
void link_container(const TempTree& t, const std::string& ns, const std::string& pod, const std::string& uid,
                    const std::string& container, const std::string& id) {
  fs::create_directories(fs::path(t.root) / "containers");
  fs::create_symlink("/var/log/pods/" + pod_dir(ns, pod, uid) + "/" + container + "/0.log",
                     fs::path(t.root) / "containers" / (pod + "_" + ns + "_" + container + "-" + id + ".log"));
}

// A pod "web" in "shop" with containers app and sidecar, both linked.
void two_container_pod(const TempTree& t) {
  make_pod(t, "shop", "web", kUid, {"app", "sidecar"});
  link_container(t, "shop", "web", kUid, "app", kAppId);
  link_container(t, "shop", "web", kUid, "sidecar", kSidecarId);
}

void make_fifo(const std::string& path) { ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << path; }

// The lookup in a thread of its own: if it ever waited on a FIFO the test
// would hang, so after a deadline the FIFOs are opened (O_RDWR never waits)
// to release it, and the test fails.
std::optional<PodIdentity> lookup_with_deadline(const std::string& root, const std::string& uid,
                                                const std::string& id, const std::vector<std::string>& fifos) {
  auto f = std::async(std::launch::async, [&] { return lookup_pod_identity(root, uid, id); });
  if (f.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    ADD_FAILURE() << "lookup blocked (opened a FIFO)";
    std::vector<int> fds;
    for (const auto& p : fifos) fds.push_back(::open(p.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
    auto r = f.get();
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
    return r;
  }
  return f.get();
}

// n entries named by `name_of(i)` in dir: hard links of one empty file
// (creating 50,000 inodes takes seconds, 50,000 links a fraction of one).
template <class NameOf>
void fill(const std::string& dir, size_t n, NameOf name_of) {
  fs::create_directories(dir);
  const std::string one = dir + "/.fill";
  const int fd = ::open(one.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << one;
  ::close(fd);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(::link(one.c_str(), (dir + "/" + name_of(i)).c_str()), 0) << name_of(i);
}

std::string uid_of(size_t i) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08zx-0000-4000-8000-%012zx", i, i);
  return buf;
}

std::string hex16(size_t i) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016zx", i);
  return buf;
}

}  // namespace

// ------------------------------------------------------------------ matching

TEST(PodIdentity, CgroupfsDriverPathEndToEnd) {
  TempTree t;
  make_pod(t, "shop", "web-7d9f8c6b5-x2x4q", kUid, {"app"});
  link_container(t, "shop", "web-7d9f8c6b5-x2x4q", kUid, "app", kAppId);
  const auto ref = container_of("/kubepods/burstable/pod" + kUid + "/" + kAppId);
  ASSERT_TRUE(ref);
  ASSERT_EQ(ref->pod_uid, kUid);
  PodLookupNotes notes;
  const auto id = lookup_pod_identity(t.root, ref->pod_uid, ref->id, &notes);
  ASSERT_TRUE(id) << notes.why;
  EXPECT_EQ(id->pod_namespace, "shop");
  EXPECT_EQ(id->pod_name, "web-7d9f8c6b5-x2x4q");
  EXPECT_EQ(id->container_name, "app");
  EXPECT_EQ(notes.why, "");
}

TEST(PodIdentity, SystemdDriverPathEndToEnd) {
  TempTree t;
  make_pod(t, "kube-system", "coredns-5d78c9869d-8xk2p", kUid, {"coredns"});
  link_container(t, "kube-system", "coredns-5d78c9869d-8xk2p", kUid, "coredns", kAppId);
  const auto ref = container_of("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidUnderscores +
                                ".slice/cri-containerd-" + kAppId + ".scope");
  ASSERT_TRUE(ref);
  ASSERT_EQ(ref->pod_uid, kUid);
  const auto id = lookup_pod_identity(t.root, ref->pod_uid, ref->id);
  ASSERT_TRUE(id);
  EXPECT_EQ(id->pod_namespace, "kube-system");
  EXPECT_EQ(id->pod_name, "coredns-5d78c9869d-8xk2p");
  EXPECT_EQ(id->container_name, "coredns");
}

TEST(PodIdentity, TwoContainersResolvedByContainerId) {
  TempTree t;
  two_container_pod(t);
  make_pod(t, "shop", "db", kOtherUid, {"postgres"});  // another pod beside it
  link_container(t, "shop", "db", kOtherUid, "postgres", kSandboxId);
  for (const auto& [cid, want] : {std::pair{kAppId, "app"}, std::pair{kSidecarId, "sidecar"}}) {
    const auto id = lookup_pod_identity(t.root, kUid, cid);
    ASSERT_TRUE(id);
    EXPECT_EQ(id->pod_name, "web");
    EXPECT_EQ(id->pod_namespace, "shop");
    EXPECT_EQ(id->container_name, want);
  }
  // An id the pod's links do not name (its sandbox, or one whose link is
  // gone): the pod, but no container name.
  PodLookupNotes notes;
  const auto id = lookup_pod_identity(t.root, kUid, std::string(64, 'e'), &notes);
  ASSERT_TRUE(id);
  EXPECT_EQ(id->pod_name, "web");
  EXPECT_FALSE(id->container_name);
  EXPECT_NE(notes.why, "");
  // The other pod's link for an id is not this pod's.
  EXPECT_FALSE(lookup_pod_identity(t.root, kUid, kSandboxId)->container_name);
}

TEST(PodIdentity, OnlyContainerDirectoryWithoutLinks) {
  TempTree t;
  make_pod(t, "shop", "web", kUid, {"app"});
  // No containers/ at all: the pod's only container directory is the answer.
  auto id = lookup_pod_identity(t.root, kUid, kAppId);
  ASSERT_TRUE(id);
  EXPECT_EQ(id->container_name, "app");
  // containers/ lists the pod under another id: this cgroup is a container
  // without logs (the sandbox), not "app".
  link_container(t, "shop", "web", kUid, "app", kAppId);
  id = lookup_pod_identity(t.root, kUid, kSandboxId);
  ASSERT_TRUE(id);
  EXPECT_FALSE(id->container_name);
  // Two directories, and no link names the id: undecided.
  make_pod(t, "shop", "web", kUid, {"init-db"});
  id = lookup_pod_identity(t.root, kUid, kSidecarId);
  ASSERT_TRUE(id);
  EXPECT_FALSE(id->container_name);
}

TEST(PodIdentity, StaticPodUidIsHashNotUuid) {
  TempTree t;
  const std::string hash = "8e5c5bd0c1b6a0f9d2e4c3b2a1908f7e";  // kubelet: the manifest's hash
  make_pod(t, "kube-system", "etcd-node-1", hash, {"etcd"});
  const auto ref = container_of("/kubepods/pod" + hash + "/" + kAppId);
  ASSERT_TRUE(ref);
  const auto id = lookup_pod_identity(t.root, ref->pod_uid, ref->id);
  ASSERT_TRUE(id);
  EXPECT_EQ(id->pod_name, "etcd-node-1");
  EXPECT_EQ(id->container_name, "etcd");
}

TEST(PodIdentity, NoMatchGivesNothing) {
  TempTree t;
  EXPECT_FALSE(lookup_pod_identity(t.root, kUid, kAppId));  // no pods/ at all
  make_pod(t, "shop", "web", kOtherUid, {"app"});
  EXPECT_FALSE(lookup_pod_identity(t.root, kUid, kAppId));  // another pod only
  EXPECT_FALSE(lookup_pod_identity(t.root + "/missing", kUid, kAppId));
  // A uid that is not one matches nothing, not even a directory spelled so.
  make_pod(t, "shop", "odd", "ABC", {"app"});
  EXPECT_FALSE(lookup_pod_identity(t.root, "ABC", kAppId));
  EXPECT_FALSE(lookup_pod_identity(t.root, "", kAppId));
  // Two directories claiming one uid: which is right is unknown.
  make_pod(t, "shop", "web", kUid, {"app"});
  make_pod(t, "shop", "web2", kUid, {"app"});
  PodLookupNotes notes;
  EXPECT_FALSE(lookup_pod_identity(t.root, kUid, kAppId, &notes));
  EXPECT_NE(notes.why.find("2 pod directories"), std::string::npos) << notes.why;
}

TEST(PodIdentity, NameRules) {
  EXPECT_TRUE(is_dns_label("a"));
  EXPECT_TRUE(is_dns_label("kube-system"));
  EXPECT_TRUE(is_dns_label(std::string(63, 'a')));
  EXPECT_FALSE(is_dns_label(std::string(64, 'a')));
  for (const char* bad : {"", "-a", "a-", "A", "a_b", "a.b", "a b", "a\n", "\xc3\xa9"})
    EXPECT_FALSE(is_dns_label(bad)) << bad;
  EXPECT_TRUE(is_dns_subdomain("web-1.canary"));
  std::string long_name = std::string(63, 'a') + "." + std::string(63, 'b') + "." + std::string(63, 'c') + "." +
                          std::string(61, 'd');
  ASSERT_EQ(long_name.size(), 253u);
  EXPECT_TRUE(is_dns_subdomain(long_name));
  EXPECT_FALSE(is_dns_subdomain(long_name + "d"));
  for (const char* bad : {"", ".a", "a.", "a..b", "a.-b", "A.b", "a_b", "a/b"})
    EXPECT_FALSE(is_dns_subdomain(bad)) << bad;
}

// ------------------------------------------------------------------ hostile trees

TEST(PodIdentityHostile, SymlinkedPodDirectoryNotFollowed) {
  TempTree t;
  make_pod(t, "shop", "web", kOtherUid, {"app"});  // a real directory to point at
  fs::create_symlink(t.root + "/pods/" + pod_dir("shop", "web", kOtherUid),
                     t.root + "/pods/" + pod_dir("shop", "evil", kUid));
  PodLookupNotes notes;
  EXPECT_FALSE(lookup_pod_identity(t.root, kUid, kAppId, &notes));
  EXPECT_NE(notes.why.find("skipped"), std::string::npos) << notes.why;
}

TEST(PodIdentityHostile, PodsDirectoryItselfASymlinkNotFollowed) {
  TempTree t;
  make_pod(t, "shop", "web", kUid, {"app"});
  fs::rename(t.root + "/pods", t.root + "/elsewhere");
  fs::create_symlink(t.root + "/elsewhere", t.root + "/pods");
  EXPECT_FALSE(lookup_pod_identity(t.root, kUid, kAppId));
}

TEST(PodIdentityHostile, ContainersDirectoryASymlinkNotFollowed) {
  TempTree t;
  two_container_pod(t);
  fs::rename(t.root + "/containers", t.root + "/links");
  fs::create_symlink(t.root + "/links", t.root + "/containers");
  const auto id = lookup_pod_identity(t.root, kUid, kSidecarId);
  ASSERT_TRUE(id);  // the pod's own directory is real
  EXPECT_FALSE(id->container_name);
}

TEST(PodIdentityHostile, SymlinkedContainerDirectoryIgnored) {
  TempTree t;
  make_pod(t, "shop", "web", kUid, {"app"});
  make_pod(t, "shop", "web", kOtherUid, {"other"});
  fs::create_symlink(t.root + "/pods/" + pod_dir("shop", "web", kOtherUid) + "/other",
                     t.root + "/pods/" + pod_dir("shop", "web", kUid) + "/planted");
  // One real container directory: it is the answer; the link does not count.
  const auto id = lookup_pod_identity(t.root, kUid, kAppId);
  ASSERT_TRUE(id);
  EXPECT_EQ(id->container_name, "app");
}

TEST(PodIdentityHostile, InvalidNamesIgnored) {
  const std::vector<std::pair<std::string, std::string>> bad_pods = {
      {"Shop", "web"},                  // upper case
      {"shop", "web_x"},                // a third '_': the split would be ambiguous
      {"shop", "web\x1b[2J"},           // terminal escape
      {"shop", "web\nfake"},            // a forged log line
      {"shop", ".web"},                 // not a DNS subdomain
      {"shop", "w\xc3\xa9" "b"},        // not ASCII
      {std::string(64, 's'), "web"},    // namespace over 63
      {"shop", std::string(64, 'w')},   // a label of the pod name over 63
  };
  for (const auto& [ns, pod] : bad_pods) {
    TempTree t;
    make_pod(t, ns, pod, kUid, {"app"});
    EXPECT_FALSE(lookup_pod_identity(t.root, kUid, kAppId)) << "namespace '" << ns << "' pod '" << pod << "'";
  }
  for (const std::string& bad : {std::string("App"), std::string(64, 'c'), std::string("a\tb")}) {
    TempTree t;
    make_pod(t, "shop", "web", kUid, {bad});
    const auto id = lookup_pod_identity(t.root, kUid, kAppId);
    ASSERT_TRUE(id);
    EXPECT_FALSE(id->container_name) << "container '" << bad << "'";
  }
}

TEST(PodIdentityHostile, FiftyThousandEntriesBoundedScan) {
  TempTree t;
  // The pod last among 50,000 pod directories (files, as cheap stand-ins:
  // each is read and its name checked like a directory's).
  fill(t.root + "/pods", 50000, [](size_t i) { return "ns_pod-" + std::to_string(i) + "_" + uid_of(i); });
  make_pod(t, "shop", "web", kUid, {"app"});
  PodLookupNotes notes;
  auto start = std::chrono::steady_clock::now();
  auto id = lookup_pod_identity(t.root, kUid, kAppId, &notes);
  auto took = std::chrono::steady_clock::now() - start;
  RecordProperty("pods_lookup_us",
                 static_cast<int>(std::chrono::duration_cast<std::chrono::microseconds>(took).count()));
  RecordProperty("pods_found", id ? "yes" : "no");
  EXPECT_LE(notes.entries_read, kPodLogMaxEntries);
  EXPECT_LT(took, std::chrono::seconds(1));
  if (id) {
    EXPECT_EQ(id->pod_name, "web");  // found within the bound: still right
  } else {
    EXPECT_NE(notes.why.find("budget"), std::string::npos) << notes.why;
  }

  // 50,000 links of this pod in containers/ (another container's): the
  // lookup stops within the bound, with the right name or none.
  TempTree u;
  two_container_pod(u);
  fill(u.root + "/containers", 50000,
       [](size_t i) { return "web_shop_app-" + std::string(48, 'f') + hex16(i) + ".log"; });
  start = std::chrono::steady_clock::now();
  id = lookup_pod_identity(u.root, kUid, kSidecarId, &notes);
  took = std::chrono::steady_clock::now() - start;
  RecordProperty("containers_lookup_us",
                 static_cast<int>(std::chrono::duration_cast<std::chrono::microseconds>(took).count()));
  RecordProperty("container_named", id && id->container_name ? "yes" : "no");
  EXPECT_LE(notes.entries_read, kPodLogMaxEntries);
  EXPECT_LT(took, std::chrono::seconds(1));
  ASSERT_TRUE(id);
  if (id->container_name) {
    EXPECT_EQ(*id->container_name, "sidecar");
  }
}

TEST(PodIdentityHostile, FifoNamedLikeADirectoryIsNotOpened) {
  // A FIFO under a pod directory's name.
  {
    TempTree t;
    fs::create_directories(t.root + "/pods");
    const std::string fifo = t.root + "/pods/" + pod_dir("shop", "web", kUid);
    make_fifo(fifo);
    EXPECT_FALSE(lookup_with_deadline(t.root, kUid, kAppId, {fifo}));
  }
  // pods/ and containers/ themselves FIFOs.
  {
    TempTree t;
    make_fifo(t.root + "/pods");
    EXPECT_FALSE(lookup_with_deadline(t.root, kUid, kAppId, {t.root + "/pods"}));
  }
  {
    TempTree t;
    make_pod(t, "shop", "web", kUid, {"app", "sidecar"});
    make_fifo(t.root + "/containers");
    const auto id = lookup_with_deadline(t.root, kUid, kAppId, {t.root + "/containers"});
    ASSERT_TRUE(id);
    EXPECT_FALSE(id->container_name);
  }
}

// ------------------------------------------------------------------ the record

TEST(PodIdentityRecord, FieldsWhenMatchedOmittedOtherwise) {
  RecordContext ctx;
  ctx.node = "node-1";
  Incident inc;
  inc.id = 1;
  inc.trigger.type = "oom_kill";
  inc.container.cgroup_path = "/kubepods/burstable/pod" + kUid + "/" + kAppId;
  inc.container.ref = container_of(inc.container.cgroup_path);
  const char* fields[] = {"pod_namespace", "pod_name", "container_name"};

  // Not looked up, or no match: none of the three, and no empty strings.
  nlohmann::json c = to_json(inc, ctx)["container"];
  EXPECT_EQ(c["pod_uid"], kUid);
  for (const char* f : fields) EXPECT_FALSE(c.contains(f)) << f;

  TempTree t;
  make_pod(t, "shop", "web", kUid, {"app"});
  inc.container.pod = lookup_pod_identity(t.root, inc.container.ref->pod_uid, inc.container.ref->id);
  c = to_json(inc, ctx)["container"];
  EXPECT_EQ(c["pod_namespace"], "shop");
  EXPECT_EQ(c["pod_name"], "web");
  EXPECT_EQ(c["container_name"], "app");
  EXPECT_EQ(c["pod_uid"], kUid);

  // The pod but not the container: container_name omitted.
  inc.container.pod->container_name.reset();
  c = to_json(inc, ctx)["container"];
  EXPECT_EQ(c["pod_name"], "web");
  EXPECT_FALSE(c.contains("container_name"));
}
