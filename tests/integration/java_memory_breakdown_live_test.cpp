// process_memory.breakdown of live JVMs with a known truth (issue #24): a JVM
// holding 300 MiB of direct ByteBuffers with -Xmx256m is mostly `native`, and
// one holding 150 MiB of live byte[] is mostly `heap`, each within 15 % of the
// JVM's own count (its BufferPoolMXBean "direct" and MemoryMXBean heap used,
// printed by the target itself: tests/fixtures/java_memory/MemoryHolder.java);
// the kinds sum to VmRSS. The direct buffers are named as the JVM counts
// them (java.nio.Bits's totals, the numbers BufferPoolMXBean reports; JDK 8's
// Bits found through its system dictionary). G1, Serial and Parallel
// on JDK 17 (the host's), G1 and Serial on JDK 21 (trixie root file system,
// chroot'ed as a container), G1 on JDK 8, 11, 25 and 26. The heap is named
// by part: a Serial or Parallel heap's spaces, G1's region types (eden,
// survivor, old, humongous; JDK 9+). A JVM of 20,000 class loaders is mostly
// `runtime`: metaspace, named as the JVM's performance counters count it and
// equal to its "Metaspace" MemoryPoolMXBean.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "breakdown_checks.h"
#include "jdk_command.h"
#include "run_command.h"
#include "test_process.h"

using namespace std::chrono_literals;
using nlohmann::json;
using oomsnap_test::check_breakdown;
using oomsnap_test::kMiB;
using oomsnap_test::names;
using oomsnap_test::Process;
using oomsnap_test::snapshot_of;
namespace fs = std::filesystem;

namespace {

constexpr const char* kJdk17Home = "/usr/lib/jvm/java-17-openjdk-amd64";

struct Case {
  const char* name;
  const char* rootfs;  // "" = host
  const char* home;
  const char* gc_flag;
  const char* collector;  // as the detail names it
};

const Case kCases[] = {
    {"jdk17_g1", "", kJdk17Home, "-XX:+UseG1GC", "G1"},
    {"jdk17_serial", "", kJdk17Home, "-XX:+UseSerialGC", "Serial"},
    {"jdk17_parallel", "", kJdk17Home, "-XX:+UseParallelGC", "Parallel"},
    {"jdk21_g1", "trixie-jdk", "/usr/lib/jvm/java-21-openjdk-amd64", "-XX:+UseG1GC", "G1"},
    {"jdk21_serial", "trixie-jdk", "/usr/lib/jvm/java-21-openjdk-amd64", "-XX:+UseSerialGC", "Serial"},
    {"jdk8_g1", "sid-jdk", "/usr/lib/jvm/java-8-openjdk-amd64", "-XX:+UseG1GC", "G1"},
    {"jdk11_g1", "sid-jdk", "/usr/lib/jvm/java-11-openjdk-amd64", "-XX:+UseG1GC", "G1"},
    {"jdk25_g1", "trixie-jdk", "/usr/lib/jvm/java-25-openjdk-amd64", "-XX:+UseG1GC", "G1"},
    {"jdk26_g1", "sid-jdk", "/usr/lib/jvm/java-26-openjdk-amd64", "-XX:+UseG1GC", "G1"},
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// MemoryHolder compiled once per test process, on first use (--release 8:
// every JDK runs it), into a directory of its own, removed at exit. Never at
// static initialisation or exit of a process that runs no case here: every
// ctest entry is a process of its own, and a javac in each cost the whole
// suite ~0.8 s per test (tests/integration/startup_test.cpp guards this).
class HolderClasses {
 public:
  HolderClasses() {
    char tmpl[] = "/tmp/oomsnap-java-memory-XXXXXX";
    const char* d = mkdtemp(tmpl);
    if (!d) return;
    const std::string src = std::string(OOMSNAP_SOURCE_DIR) + "/tests/fixtures/java_memory/MemoryHolder.java";
    auto r = oomsnap_test::run_command(std::string(kJdk17Home) + "/bin/javac --release 8 -d " + d + " " + src +
                                       " 2>&1");
    if (r.status != 0) std::fprintf(stderr, "javac failed: %s\n", r.out.c_str());
    dir_ = d;
    compiled_ = r.status == 0;
  }
  ~HolderClasses() {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  HolderClasses(const HolderClasses&) = delete;
  HolderClasses& operator=(const HolderClasses&) = delete;
  // "" when javac failed.
  std::string dir() const { return compiled_ ? dir_ : std::string(); }

 private:
  std::string dir_;
  bool compiled_ = false;
};

std::string holder_classes() {
  static const HolderClasses classes;
  return classes.dir();
}

struct Holder {
  std::unique_ptr<Process> proc;
  json said;  // what the JVM printed of itself
};

// A JVM of this case holding `mib` MiB as `mode` says ("direct", "heap").
Holder start_holder(const Case& c, const std::string& mode, int mib) {
  Holder h;
  const std::string rootfs = *c.rootfs ? std::string(OOMSNAP_ROOTFS) + "/" + c.rootfs : "";
  if (!fs::exists(rootfs + c.home + "/bin/java")) {
    ADD_FAILURE() << rootfs + c.home << "/bin/java is missing (run tools/fetch-python-rootfs.sh " << c.rootfs << ")";
    return h;
  }
  const std::string classes = holder_classes();
  if (classes.empty()) {
    ADD_FAILURE() << "MemoryHolder.java did not compile";
    return h;
  }
  // The performance counters (metaspace's) kept in the process's memory, not
  // in a file under the root file system's /tmp.
  const std::vector<std::string> args = {c.gc_flag, "-Xmx256m", "-XX:MaxDirectMemorySize=512m", "-XX:+PerfDisableSharedMem",
                                         "-cp", rootfs.empty() ? classes : "/mnt", "MemoryHolder", mode,
                                         std::to_string(mib)};
  h.proc = std::make_unique<Process>(oomsnap_test::jdk_command(rootfs, c.home, "java", classes, args));
  h.said = json::parse(h.proc->read_line(120s), nullptr, false);
  if (h.said.is_discarded()) {
    ADD_FAILURE() << c.name << ": MemoryHolder printed no JSON line";
    h.proc.reset();
  }
  return h;
}

// A holder's snapshot, its breakdown (checked for what holds of every one)
// and the breakdown's largest kind.
struct Seen {
  json snap;
  const json* b = nullptr;
  std::string largest;
  double kind(const char* k) const { return b->at(k).get<double>(); }
  double rss() const { return snap.at("process_memory").at("rss_bytes").get<double>(); }
};

bool see(const Holder& h, Seen& s) {
  if (!h.proc) return false;
  s.snap = snapshot_of(h.proc->pid());
  if (s.snap.is_discarded()) return false;
  s.largest = check_breakdown(s.snap, s.b);
  return true;
}

// A JVM of this case holding `mib` MiB as `mode` says, seen: `kind` is the
// breakdown's largest kind and within 15 % of what the JVM says of it
// (`said_key` in its line); ours and theirs kept for the report.
struct Measured {
  Holder h;
  Seen s;
  double ours = 0, theirs = 0;
};

bool measure(const Case& c, const char* mode, int mib, const char* kind, const char* said_key, Measured& m) {
  m.h = start_holder(c, mode, mib);
  if (!see(m.h, m.s)) return false;
  EXPECT_EQ(m.s.largest, kind) << m.s.b->dump(1);
  m.theirs = m.h.said.at(said_key).get<double>();
  EXPECT_GE(m.theirs, mib * static_cast<double>(kMiB)) << m.h.said.dump();
  m.ours = m.s.kind(kind);
  EXPECT_NEAR(m.ours, m.theirs, 0.15 * m.theirs) << m.s.b->dump(1) << "\n" << m.h.said.dump();
  return true;
}

class JavaMemoryBreakdownLive : public testing::TestWithParam<Case> {};

// The first example: 300 MiB of direct ByteBuffers beside a small
// heap. They are native memory, and native is most of the process; the heap
// is claimed as the collector's (used, then committed but free).
TEST_P(JavaMemoryBreakdownLive, DirectBuffersAreNative) {
  const Case& c = GetParam();
  Measured m;
  ASSERT_TRUE(measure(c, "direct", 300, "native", "direct_bytes", m));
  const json& b = *m.s.b;
  // The small heap and the code cache are claimed (too small to make the
  // detail's twelve largest).
  EXPECT_GT(m.s.kind("heap"), 0) << b.dump(1);
  EXPECT_GT(m.s.kind("runtime"), 0) << b.dump(1);
  // Named as the JVM counts them: every byte it reserved, every buffer.
  uint64_t named = 0;
  const uint64_t count = m.h.said.at("direct_count").get<uint64_t>();
  EXPECT_TRUE(names(b, "native", "java.nio direct buffers (" + std::to_string(count) + " buffers)", &named))
      << b.dump(1) << "\n" << m.h.said.dump();
  EXPECT_EQ(named, m.theirs) << b.dump(1) << "\n" << m.h.said.dump();
  EXPECT_EQ(b.value("reason", ""), "") << b.dump(1);
  std::printf("[ info ] %s: native %.1f MiB, direct buffers %.1f MiB (%+.1f %%); heap %.1f MiB, heap_free %.1f MiB, "
              "runtime %.1f MiB, rss %.1f MiB\n",
              c.name, m.ours / kMiB, m.theirs / kMiB, (m.ours - m.theirs) / m.theirs * 100, m.s.kind("heap") / kMiB,
              m.s.kind("heap_free") / kMiB, m.s.kind("runtime") / kMiB, m.s.rss() / kMiB);
}

// JDK 8's G1 names no region types: its used bytes are one count.
bool regions_unnamed(const Case& c) { return std::string(c.name) == "jdk8_g1"; }

// Most of the heap kind is the part named `part` ("old": "Java heap (G1
// old, used)"), and every heap detail is of this collector's parts.
void expect_heap_mostly(const Case& c, const json& b, const std::string& part) {
  uint64_t named = 0;
  const uint64_t heap = b.at("heap").get<uint64_t>();
  EXPECT_TRUE(names(b, "heap", std::string("Java heap (") + c.collector + " " + part + ", used)", &named))
      << b.dump(1);
  EXPECT_GE(named, 0.9 * static_cast<double>(heap)) << b.dump(1);
  for (const json& d : b.at("detail"))
    if (d.at("kind") == "heap") {
      EXPECT_EQ(d.at("what").get<std::string>().rfind(std::string("Java heap (") + c.collector + " ", 0), 0u)
          << d.dump();
    }
}

// 150 MiB of live objects: the heap is the largest kind, as large as the
// JVM's own MemoryMXBean says its heap's used bytes are. The heap is named
// by part (a Serial or Parallel heap's spaces, G1's region types), and
// after the holder's System.gc() the live objects are in the old one.
TEST_P(JavaMemoryBreakdownLive, ALiveHeapIsHeap) {
  const Case& c = GetParam();
  Measured m;
  ASSERT_TRUE(measure(c, "heap", 150, "heap", "heap_used", m));
  const json& b = *m.s.b;
  if (regions_unnamed(c)) {
    uint64_t named = 0;
    EXPECT_TRUE(names(b, "heap", "Java heap (G1, used)", &named)) << b.dump(1);
    EXPECT_EQ(named, b.at("heap").get<uint64_t>());
  } else {
    expect_heap_mostly(c, b, "old");
  }
  // A Serial or Parallel heap's committed free memory is named by space
  // (the spaces tile the committed heap: nothing much is left unnamed).
  if (std::string(c.collector) != "G1") {
    uint64_t rest = 0;
    names(b, "heap_free", "Java heap (committed, free)", &rest);
    const double heap_free = b.at("heap_free").get<double>();
    EXPECT_LE(static_cast<double>(rest), 0.1 * heap_free) << b.dump(1);
    for (const json& d : b.at("detail"))
      if (d.at("kind") == "heap_free" && d.at("what") != "Java heap (committed, free)") {
        EXPECT_EQ(d.at("what").get<std::string>().rfind(std::string("Java heap (") + c.collector + " ", 0), 0u)
            << d.dump();
      }
  }
  std::printf("[ info ] %s: heap %.1f MiB, MemoryMXBean used %.1f MiB (%+.1f %%), committed %.1f MiB; heap_free "
              "%.1f MiB, native %.1f MiB, runtime %.1f MiB, rss %.1f MiB\n",
              c.name, m.ours / kMiB, m.theirs / kMiB, (m.ours - m.theirs) / m.theirs * 100,
              m.h.said.at("heap_committed").get<double>() / kMiB, m.s.kind("heap_free") / kMiB,
              m.s.kind("native") / kMiB, m.s.kind("runtime") / kMiB, m.s.rss() / kMiB);
}

// Class metadata of 96 MiB and more (each copy of a class defined by a
// loader of its own, as a leak of class loaders makes): metaspace is named
// as the JVM counts it, its used bytes those of the "Metaspace" pool
// (MemoryPoolMXBean; the JVM's counters are of its last collection, which
// the holder ran after loading), its committed rest beside them; runtime is
// the largest kind, within 15 % of the pool's committed bytes.
TEST_P(JavaMemoryBreakdownLive, MetaspaceIsRuntime) {
  const Case& c = GetParam();
  Measured m;
  ASSERT_TRUE(measure(c, "classes", 96, "runtime", "metaspace_committed", m));
  const json& b = *m.s.b;
  uint64_t used = 0, free_part = 0;
  EXPECT_TRUE(names(b, "runtime", "Metaspace (used, at the last GC)", &used)) << b.dump(1);
  names(b, "runtime", "Metaspace (committed, free, at the last GC)", &free_part);
  const double said_used = m.h.said.at("metaspace_used").get<double>();
  EXPECT_NEAR(static_cast<double>(used), said_used, 0.02 * said_used) << b.dump(1) << "\n" << m.h.said.dump();
  EXPECT_NEAR(static_cast<double>(used + free_part), m.theirs, 0.02 * m.theirs) << b.dump(1) << "\n"
                                                                                << m.h.said.dump();
  // JDK 8 lists its classes only in one system dictionary, with an entry
  // per class of every loader: looking for java.nio.Bits among 20,000
  // loaders' copies runs out of the naming allowance, or on a busy machine
  // the deadline first, and says which.
  if (std::string(c.name) == "jdk8_g1") {
    const std::string why = b.value("reason", "");
    EXPECT_TRUE(why.starts_with("java.nio direct buffers are not named: the read allowance ran out in the system "
                                "dictionary") ||
                why.starts_with("java.nio direct buffers are not named: the deadline passed while looking for "
                                "classes by name in the system dictionary"))
        << b.dump(1);
  } else
    EXPECT_EQ(b.value("reason", ""), "") << b.dump(1);
  std::printf("[ info ] %s: runtime %.1f MiB; metaspace used %.1f MiB (pool %.1f), committed %.1f MiB (pool %.1f); "
              "native %.1f MiB, heap %.1f MiB, rss %.1f MiB\n",
              c.name, m.ours / kMiB, static_cast<double>(used) / kMiB, said_used / kMiB,
              static_cast<double>(used + free_part) / kMiB, m.theirs / kMiB,
              m.s.kind("native") / kMiB, m.s.kind("heap") / kMiB, m.s.rss() / kMiB);
}

INSTANTIATE_TEST_SUITE_P(Jvms, JavaMemoryBreakdownLive, testing::ValuesIn(kCases),
                         [](const testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// 100 MiB of byte[] in 4 MiB arrays, each humongous in G1's 1 MiB regions
// (-Xmx256m): the heap is as large as MemoryMXBean says, and most of it is
// named as humongous regions (JDK 9+: JDK 8 names no types).
class JavaG1RegionsLive : public testing::TestWithParam<Case> {};

TEST_P(JavaG1RegionsLive, HumongousArraysAreInHumongousRegions) {
  const Case& c = GetParam();
  Measured m;
  ASSERT_TRUE(measure(c, "humongous", 100, "heap", "heap_used", m));
  expect_heap_mostly(c, *m.s.b, "humongous");
  std::printf("[ info ] %s: heap %.1f MiB, MemoryMXBean used %.1f MiB (%+.1f %%)\n", c.name, m.ours / kMiB,
              m.theirs / kMiB, (m.ours - m.theirs) / m.theirs * 100);
}

std::vector<Case> named_g1_cases() {
  std::vector<Case> out;
  for (const Case& c : kCases)
    if (std::string(c.collector) == "G1" && !regions_unnamed(c)) out.push_back(c);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Jvms, JavaG1RegionsLive, testing::ValuesIn(named_g1_cases()),
                         [](const testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

}  // namespace
