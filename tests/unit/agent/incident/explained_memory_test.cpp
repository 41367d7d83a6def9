// Where the container's charge went: the processes' kinds, tmpfs no process
// maps, page cache, kernel memory and the rest, each class at most what
// memory.stat charges for it, from v1's and v2's memory.stat alike.
#include <gtest/gtest.h>

#include <fstream>
#include <tuple>

#include "agent/incident/explained_memory.h"
#include "agent/incident/incident.h"
#include "record_schema.h"

using namespace oomsnap;

namespace {

constexpr uint64_t kMiB = 1 << 20;

MemoryBreakdown breakdown(uint64_t heap, uint64_t native, uint64_t file, uint64_t shmem) {
  MemoryBreakdown b;
  b.status = "complete";
  b.at(MemoryKind::kHeap) = heap;
  b.at(MemoryKind::kHeapFree) = 2 * kMiB;
  b.at(MemoryKind::kRuntime) = 3 * kMiB;
  b.at(MemoryKind::kStacks) = 1 * kMiB;
  b.at(MemoryKind::kNative) = native;
  b.at(MemoryKind::kFile) = file;
  b.at(MemoryKind::kShmem) = shmem;
  return b;
}

ProcessMemory rss(uint64_t anon, uint64_t file, uint64_t shmem) {
  ProcessMemory m;
  m.rss_anon_bytes = anon;
  m.rss_file_bytes = file;
  m.rss_shmem_bytes = shmem;
  m.rss_bytes = anon + file + shmem;
  return m;
}

ProcessCharge by_breakdown(pid_t pid, const MemoryBreakdown& b) {
  ProcessCharge p;
  p.pid = pid;
  p.breakdown = &b;
  return p;
}

ProcessCharge by_rss(pid_t pid, const ProcessMemory& m) {
  ProcessCharge p;
  p.pid = pid;
  p.memory = m;
  return p;
}

uint64_t kind(const ExplainedMemory& e, ChargeKind k) { return e.at(k); }

}  // namespace

// One Go process (100 MiB heap, 40 MiB native, 8 MiB of mapped binary), a
// 30 MiB tmpfs file nobody maps and 50 MiB of page cache, on cgroup v2.
TEST(ExplainedMemory, V2OneProcessTmpfsPageCacheAndKernel) {
  const MemoryBreakdown b = breakdown(100 * kMiB, 40 * kMiB, 8 * kMiB, 0);
  const uint64_t anon = 146 * kMiB, shmem = 30 * kMiB, file = shmem + 8 * kMiB + 50 * kMiB, kernel = 5 * kMiB;
  const std::string text = "anon " + std::to_string(anon) + "\nfile " + std::to_string(file) + "\nkernel " +
                           std::to_string(kernel) + "\nshmem " + std::to_string(shmem) + "\nfile_mapped " +
                           std::to_string(8 * kMiB) + "\n";
  const MemoryStat stat = parse_memory_stat(2, text, std::nullopt, 0);
  const uint64_t usage = anon + file + kernel + 3 * kMiB;  // 3 MiB memory.stat does not name
  const ExplainedMemory e = explain_memory(usage, stat, {by_breakdown(10, b)});
  EXPECT_EQ(kind(e, ChargeKind::kHeap), 100 * kMiB);
  EXPECT_EQ(kind(e, ChargeKind::kNative), 40 * kMiB);
  EXPECT_EQ(kind(e, ChargeKind::kFile), 8 * kMiB);
  EXPECT_EQ(kind(e, ChargeKind::kShmem), 0u);
  EXPECT_EQ(kind(e, ChargeKind::kTmpfs), 30 * kMiB);
  EXPECT_EQ(kind(e, ChargeKind::kPageCache), 50 * kMiB);
  EXPECT_EQ(kind(e, ChargeKind::kKernel), 5 * kMiB);
  EXPECT_EQ(e.explained_bytes, anon + file + kernel);
  EXPECT_EQ(e.unexplained_bytes, 3 * kMiB);
  EXPECT_EQ(e.over_bytes, 0u);
  EXPECT_EQ(e.shared_bytes, 0u);
  EXPECT_EQ(e.processes_by_breakdown, 1u);
  EXPECT_TRUE(e.notes.empty()) << e.notes[0];
}

// v1's hierarchical total_* keys and its kmem counter read the same way; a
// process mapping part of a tmpfs file leaves only the rest as tmpfs.
TEST(ExplainedMemory, V1VocabularyAndMappedShmem) {
  const MemoryBreakdown b = breakdown(60 * kMiB, 20 * kMiB, 4 * kMiB, 10 * kMiB);
  const std::string text = "cache 4096\nrss 8192\ntotal_rss " + std::to_string(86 * kMiB) + "\ntotal_cache " +
                           std::to_string(64 * kMiB) + "\ntotal_shmem " + std::to_string(25 * kMiB) +
                           "\ntotal_mapped_file " + std::to_string(14 * kMiB) + "\n";
  const MemoryStat stat = parse_memory_stat(1, text, 2 * kMiB, std::nullopt);
  const ExplainedMemory e = explain_memory(152 * kMiB, stat, {by_breakdown(10, b)});
  EXPECT_EQ(kind(e, ChargeKind::kShmem), 10 * kMiB);
  EXPECT_EQ(kind(e, ChargeKind::kTmpfs), 15 * kMiB);               // 25 of shmem, 10 mapped
  EXPECT_EQ(kind(e, ChargeKind::kPageCache), (64 - 25 - 4) * kMiB);  // file beyond shmem and mapped files
  EXPECT_EQ(kind(e, ChargeKind::kKernel), 2 * kMiB);                 // memory.kmem.usage_in_bytes
  EXPECT_EQ(e.explained_bytes, 152 * kMiB);
  EXPECT_EQ(e.unexplained_bytes, 0u);
}

// Forked workers share their copy-on-write heap and every one maps the same
// 30 MiB library: their RSS sums past what the memcg charges. Each class is
// scaled to the memcg's count, the page cache behind the library still
// shows, and shared_bytes says how much was taken off.
TEST(ExplainedMemory, PagesSharedBetweenProcessesAreCountedOnce) {
  std::vector<ProcessCharge> workers;
  for (pid_t pid = 100; pid < 104; ++pid) workers.push_back(by_rss(pid, rss(50 * kMiB, 30 * kMiB, 0)));
  const std::string text = "anon " + std::to_string(120 * kMiB) + "\nfile " + std::to_string(130 * kMiB) +
                           "\nkernel " + std::to_string(4 * kMiB) + "\nshmem 0\nfile_mapped " +
                           std::to_string(30 * kMiB) + "\n";
  const MemoryStat stat = parse_memory_stat(2, text, std::nullopt, 0);
  const ExplainedMemory e = explain_memory(254 * kMiB, stat, workers);
  EXPECT_EQ(kind(e, ChargeKind::kAnon), 120 * kMiB);
  EXPECT_EQ(kind(e, ChargeKind::kFile), 30 * kMiB);
  EXPECT_EQ(kind(e, ChargeKind::kPageCache), 100 * kMiB);
  EXPECT_EQ(e.shared_bytes, (200 - 120 + 120 - 30) * kMiB);
  EXPECT_EQ(e.explained_bytes, 254 * kMiB);
  EXPECT_EQ(e.processes_by_rss, 4u);
}

// Scaled within a class, each kind keeps its share and the class sums to
// the memcg's count exactly.
TEST(ExplainedMemory, AScaledClassKeepsItsSharesAndSumsExactly) {
  const MemoryBreakdown b = breakdown(300 * kMiB, 100 * kMiB, 0, 0);  // 406 MiB anon
  const std::string text = "anon " + std::to_string(203 * kMiB + 1) + "\nfile 0\nshmem 0\nkernel 0\n";
  const ExplainedMemory e = explain_memory(std::nullopt, parse_memory_stat(2, text, std::nullopt, 0),
                                           {by_breakdown(1, b), by_rss(2, rss(0, 0, 0))});
  EXPECT_NEAR(static_cast<double>(kind(e, ChargeKind::kHeap)), 150.0 * kMiB, 2);
  EXPECT_NEAR(static_cast<double>(kind(e, ChargeKind::kNative)), 50.0 * kMiB, 2);
  uint64_t anon = 0;
  for (ChargeKind k : {ChargeKind::kHeap, ChargeKind::kHeapFree, ChargeKind::kRuntime, ChargeKind::kStacks,
                       ChargeKind::kNative, ChargeKind::kAnon})
    anon += kind(e, k);
  EXPECT_EQ(anon, 203 * kMiB + 1);
  EXPECT_EQ(e.usage_bytes, 203 * kMiB + 1);  // no usage given: anon + file + kernel
}

// The capture failed: the victim counts by its /proc RSS split, as `anon`,
// file and shmem, and a note says there was no breakdown.
TEST(ExplainedMemory, NoBreakdownCountsTheProcessByItsRss) {
  MemoryBreakdown failed;
  failed.status = "failed";
  ProcessCharge victim = by_breakdown(7, failed);
  victim.memory = rss(90 * kMiB, 6 * kMiB, 0);
  const std::string text = "anon " + std::to_string(90 * kMiB) + "\nfile " + std::to_string(6 * kMiB) +
                           "\nkernel " + std::to_string(1 * kMiB) + "\nshmem 0\n";
  const ExplainedMemory e = explain_memory(100 * kMiB, parse_memory_stat(2, text, std::nullopt, 0), {victim});
  EXPECT_EQ(kind(e, ChargeKind::kAnon), 90 * kMiB);
  EXPECT_EQ(kind(e, ChargeKind::kHeap), 0u);
  EXPECT_EQ(kind(e, ChargeKind::kFile), 6 * kMiB);
  EXPECT_EQ(kind(e, ChargeKind::kPageCache), 0u);
  EXPECT_EQ(e.unexplained_bytes, 3 * kMiB);
  EXPECT_EQ(e.processes_by_breakdown, 0u);
  EXPECT_EQ(e.processes_by_rss, 1u);
  ASSERT_EQ(e.notes.size(), 1u);
  EXPECT_NE(e.notes[0].find("no breakdown"), std::string::npos) << e.notes[0];
}

// Without memory.stat nothing caps the processes and tmpfs, page cache and
// kernel are not known (absent, not 0); parts above the usage are said.
TEST(ExplainedMemory, NoMemoryStatKeepsTheProcessesAndSaysWhatIsMissing) {
  const MemoryBreakdown b = breakdown(100 * kMiB, 40 * kMiB, 8 * kMiB, 0);
  const ExplainedMemory e = explain_memory(150 * kMiB, std::nullopt, {by_breakdown(1, b), by_rss(2, rss(5 * kMiB, 1 * kMiB, 0))});
  EXPECT_FALSE(e.bytes[static_cast<size_t>(ChargeKind::kTmpfs)].has_value());
  EXPECT_FALSE(e.bytes[static_cast<size_t>(ChargeKind::kPageCache)].has_value());
  EXPECT_FALSE(e.bytes[static_cast<size_t>(ChargeKind::kKernel)].has_value());
  EXPECT_EQ(e.parts(), 160 * kMiB);
  EXPECT_EQ(e.explained_bytes, 150 * kMiB);
  EXPECT_EQ(e.unexplained_bytes, 0u);
  EXPECT_EQ(e.over_bytes, 10 * kMiB);
  ASSERT_FALSE(e.notes.empty());
  EXPECT_NE(e.notes[0].find("no memory.stat"), std::string::npos);
  MemoryStat gone;
  gone.error = "cannot read /x/memory.stat";
  const ExplainedMemory g = explain_memory(150 * kMiB, gone, {by_breakdown(1, b)});
  EXPECT_FALSE(g.bytes[static_cast<size_t>(ChargeKind::kTmpfs)].has_value());
  EXPECT_NE(g.notes[0].find("cannot read /x/memory.stat"), std::string::npos);
}

// A breakdown from a capture process a target took over may hold any
// counts: kinds that sum past 2^64 must not wrap to a small sum that passes
// for the truth and escapes the memcg's cap.
TEST(ExplainedMemory, CraftedBreakdownCountsDoNotWrap) {
  MemoryBreakdown b = breakdown(uint64_t{1} << 63, uint64_t{1} << 63, 0, 0);
  b.at(MemoryKind::kHeapFree) = b.at(MemoryKind::kRuntime) = b.at(MemoryKind::kStacks) = 0;
  const std::string text = "anon " + std::to_string(100 * kMiB) + "\nfile 0\nshmem 0\nkernel 0\n";
  const ExplainedMemory e = explain_memory(100 * kMiB, parse_memory_stat(2, text, std::nullopt, 0), {by_breakdown(1, b)});
  EXPECT_EQ(kind(e, ChargeKind::kHeap) + kind(e, ChargeKind::kNative), 100 * kMiB);
  EXPECT_NEAR(static_cast<double>(kind(e, ChargeKind::kHeap)), 50.0 * kMiB, 2);
  EXPECT_EQ(e.explained_bytes, 100 * kMiB);
  EXPECT_EQ(e.over_bytes, 0u);
  // Without memory.stat nothing caps them: the parts saturate, never wrap.
  const ExplainedMemory u = explain_memory(100 * kMiB, std::nullopt, {by_breakdown(1, b)});
  EXPECT_EQ(u.parts(), UINT64_MAX);
  EXPECT_EQ(u.explained_bytes, 100 * kMiB);
}

// A group kill: the victim by its breakdown, the container's other
// processes by their RSS from the task list (the victim's own entry not
// again), and those past the listed ones by their summed RSS; validated
// against the record's schema.
TEST(ExplainedMemory, GroupKillCountsEveryProcessOnce) {
  Incident inc;
  inc.id = 1;
  inc.trigger.type = "oom_kill";
  inc.container.cgroup_path = "/pod";
  inc.container.stats.usage_bytes = 400 * kMiB;
  inc.container.stats.limit_bytes = 400 * kMiB;
  VictimCandidate v;
  v.pid = 10;
  v.comm = "java";
  v.memory = rss(200 * kMiB, 10 * kMiB, 0);
  inc.victim = v;
  CaptureRecord rec;
  rec.identity.pid = 10;
  rec.process_memory = rss(200 * kMiB, 10 * kMiB, 0);
  rec.process_memory.breakdown = breakdown(150 * kMiB, 44 * kMiB, 10 * kMiB, 0);
  inc.capture = rec;
  inc.outcome = CollectionOutcome::kCollected;
  VictimCandidate w1, w2;
  w1.pid = 11, w1.comm = "worker", w1.memory = rss(80 * kMiB, 2 * kMiB, 0);
  w2.pid = 12, w2.comm = "worker", w2.memory = rss(60 * kMiB, 2 * kMiB, 0);
  inc.container.tasks = {v, w1, w2};
  inc.container.tasks_total = 5;
  inc.container.unlisted_tasks.count = 2;
  inc.container.unlisted_tasks.memory = rss(20 * kMiB, 1 * kMiB, 0);
  inc.container.memory_stat = parse_memory_stat(
      2,
      "anon " + std::to_string(360 * kMiB) + "\nfile " + std::to_string(30 * kMiB) + "\nshmem 0\nkernel " +
          std::to_string(6 * kMiB) + "\nfile_mapped " + std::to_string(12 * kMiB) + "\n",
      std::nullopt, 0);
  inc.container.memory_stat->usage_bytes = 398 * kMiB;
  inc.oom_kill = OomKillInfo{};
  inc.oom_kill->pid = 10;
  inc.oom_kill->comm = "java";
  const std::tuple<pid_t, const char*, uint64_t> killed[] = {
      {10, "java", 210 * kMiB}, {11, "worker", 82 * kMiB}, {12, "worker", 62 * kMiB}};
  for (const auto& [pid, comm, bytes] : killed) {
    KilledProcess k;
    k.pid = pid;
    k.comm = comm;
    k.rss_bytes = bytes;
    inc.oom_kill->add_killed(k);
  }

  const auto e = explain_incident(inc);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->usage_bytes, 398 * kMiB);  // read with memory.stat, not at the decision
  EXPECT_EQ(e->processes_by_breakdown, 1u);
  EXPECT_EQ(e->processes_by_rss, 4u);  // two listed workers, two unlisted
  EXPECT_EQ(e->at(ChargeKind::kHeap), 150 * kMiB);
  EXPECT_EQ(e->at(ChargeKind::kAnon), (80 + 60 + 20) * kMiB);
  EXPECT_EQ(e->at(ChargeKind::kFile), 12 * kMiB);  // 15 MiB mapped, 12 charged here
  EXPECT_EQ(e->shared_bytes, 3 * kMiB);
  EXPECT_EQ(e->at(ChargeKind::kPageCache), 18 * kMiB);
  EXPECT_EQ(e->explained_bytes, 396 * kMiB);
  EXPECT_EQ(e->unexplained_bytes, 2 * kMiB);

  RecordContext ctx;
  ctx.node = "n";
  const nlohmann::json j = to_json(inc, ctx);
  const auto& x = j["container"]["explained"];
  EXPECT_EQ(x["kinds"]["anon"], 160 * kMiB);
  EXPECT_EQ(x["unexplained_bytes"], 2 * kMiB);
  EXPECT_EQ(j["container"]["memory_stat"]["usage"], 398 * kMiB);
  EXPECT_EQ(oomsnap_test::record_schema_errors(j.dump()), "") << j["container"].dump();

  // A victim too small to be listed (picked by its oom_score_adj) was in
  // the unlisted sum: it counts once, by its breakdown.
  inc.container.tasks = {w1, w2};
  inc.container.unlisted_tasks.count = 3;
  inc.container.unlisted_tasks.memory = rss(220 * kMiB, 11 * kMiB, 0);
  const auto small = explain_incident(inc);
  ASSERT_TRUE(small);
  EXPECT_EQ(small->processes_by_rss, 4u);
  EXPECT_EQ(small->at(ChargeKind::kAnon), (80 + 60 + 20) * kMiB);
  EXPECT_EQ(small->explained_bytes, 396 * kMiB);

  // Before the collection looked at the container there is nothing to say.
  Incident bare;
  bare.trigger.type = "oom_kill";
  EXPECT_FALSE(explain_incident(bare));
  EXPECT_FALSE(to_json(bare, ctx)["container"].contains("explained"));
}

// memory.stat lags the exact usage while a process grows fast (seen on v1:
// a Go heap of 120 MiB charged in the usage, v1's rss still 19 MB). The
// processes' RSS beyond the stat's counts is kept up to what the stat has
// not counted yet, taken once across the classes, and a note says so; tmpfs
// and page cache never go below 0.
TEST(ExplainedMemory, AStatLaggingTheUsageDoesNotScaleAwayWhatItHasNotCounted) {
  const MemoryBreakdown go = breakdown(120 * kMiB, 0, 2 * kMiB, 0);  // + 6 MiB heap_free, runtime, stacks
  const std::vector<ProcessCharge> procs = {by_breakdown(1, go), by_rss(2, rss(8 * kMiB, 3 * kMiB, 0)),
                                            by_rss(3, rss(8 * kMiB, 3 * kMiB, 0))};
  const std::string text = "total_rss " + std::to_string(19 * kMiB) + "\ntotal_cache " + std::to_string(260 * kMiB) +
                           "\ntotal_shmem " + std::to_string(100 * kMiB) + "\ntotal_mapped_file " +
                           std::to_string(8 * kMiB) + "\n";
  const MemoryStat stat = parse_memory_stat(1, text, 5 * kMiB, std::nullopt);
  const uint64_t usage = (19 + 260 + 5 + 130) * kMiB;  // the Go heap's pages not yet in rss
  const ExplainedMemory e = explain_memory(usage, stat, procs);
  EXPECT_EQ(kind(e, ChargeKind::kHeap), 120 * kMiB);  // 142 MiB of anon kept: 19 counted, 123 of the 130 not yet
  EXPECT_EQ(kind(e, ChargeKind::kAnon), 16 * kMiB);
  EXPECT_EQ(kind(e, ChargeKind::kFile), 8 * kMiB);
  EXPECT_EQ(kind(e, ChargeKind::kTmpfs), 100 * kMiB);
  EXPECT_EQ(kind(e, ChargeKind::kPageCache), 152 * kMiB);  // 160 of file, 8 mapped
  EXPECT_EQ(e.explained_bytes, usage - 7 * kMiB);
  EXPECT_EQ(e.shared_bytes, 0u);
  ASSERT_EQ(e.notes.size(), 1u);
  EXPECT_NE(e.notes[0].find(std::to_string(130 * kMiB) + " bytes less than the usage"), std::string::npos)
      << e.notes[0];
  EXPECT_NE(e.notes[0].find(std::to_string(123 * kMiB) + " bytes of the processes"), std::string::npos) << e.notes[0];

  // The lag is taken once: mapped shmem beyond the stat's count takes the
  // 24 MiB anon left of 26, and tmpfs is 0, not a wrapped count.
  const MemoryBreakdown shm = breakdown(0, 0, 0, 150 * kMiB);  // 6 MiB anon
  const std::string v2 = "anon " + std::to_string(4 * kMiB) + "\nfile " + std::to_string(100 * kMiB) +
                         "\nshmem " + std::to_string(100 * kMiB) + "\nkernel 0\n";
  const ExplainedMemory s = explain_memory(130 * kMiB, parse_memory_stat(2, v2, std::nullopt, 0), {by_breakdown(1, shm)});
  EXPECT_EQ(kind(s, ChargeKind::kHeapFree) + kind(s, ChargeKind::kRuntime) + kind(s, ChargeKind::kStacks), 6 * kMiB);
  EXPECT_EQ(kind(s, ChargeKind::kShmem), 124 * kMiB);
  EXPECT_EQ(kind(s, ChargeKind::kTmpfs), 0u);
  EXPECT_EQ(s.shared_bytes, 26 * kMiB);
  EXPECT_EQ(s.explained_bytes, 130 * kMiB);
  EXPECT_EQ(s.over_bytes, 0u);
}

// A kill with no snapshot before it is explained by the kernel's own report
// of it (a real one: 6.18, cgroup v1, a python3 filling 32 MiB), printed
// before the victim died: its usage, memory.stat, kmem and task list.
TEST(ExplainedMemory, AKillWithoutSnapshotIsExplainedByTheKernelsReport) {
  KernelOomReports reports;
  std::ifstream f(std::string(OOMSNAP_SOURCE_DIR) + "/tests/fixtures/kmsg/memcg_v1_oom_6.18.txt");
  for (std::string l; std::getline(f, l);) reports.feed(l);
  const KernelOomReport* r = reports.find(21308, 72560933808, 1'000'000);
  ASSERT_NE(r, nullptr);

  Incident inc;
  inc.id = 9;
  inc.trigger.type = "oom_kill";
  inc.container.cgroup_path = "/process_api/4ecdfe954059a6c42db93e58336f925d/kmsgprobe";
  inc.container.stats.limit_bytes = 32 * kMiB;
  inc.oom_kill = OomKillInfo{};
  inc.oom_kill->pid = 21308;
  inc.oom_kill->comm = "python3";
  inc.oom_kill->memcg = inc.container.cgroup_path;
  inc.oom_kill->kernel_report = *r;
  const auto e = explain_incident(inc);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->source, "kernel_oom_report");
  EXPECT_EQ(e->usage_bytes, 32 * kMiB);
  EXPECT_EQ(e->processes_by_rss, 2u);
  EXPECT_EQ(e->at(ChargeKind::kAnon), (64 + 8064) * 4096u);  // bash and python3, within total_rss
  EXPECT_EQ(e->at(ChargeKind::kKernel), 204 * 1024u);        // the report's kmem line
  EXPECT_EQ(e->at(ChargeKind::kFile), 0u);                   // memory.stat: no page cache charged here
  EXPECT_EQ(e->shared_bytes, (685 + 1718) * 4096u);
  EXPECT_EQ(e->explained_bytes, (64 + 8064) * 4096u + 204 * 1024u);
  EXPECT_LT(e->unexplained_bytes, 64 * 1024u);

  RecordContext ctx;
  ctx.node = "n";
  const nlohmann::json j = to_json(inc, ctx);
  EXPECT_EQ(j["container"]["explained"]["source"], "kernel_oom_report");
  const auto& k = j["oom_kill"]["kernel_report"];
  EXPECT_EQ(k["usage_bytes"], 32 * kMiB);
  EXPECT_EQ(k["tasks"][0]["name"], "python3");
  EXPECT_EQ(k["tasks"][0]["rss_anon_bytes"], 8064 * 4096u);
  EXPECT_EQ(k["memory_stat"]["anon"], 33345536u);
  EXPECT_EQ(oomsnap_test::record_schema_errors(j.dump()), "") << j["oom_kill"].dump();

  // With a capture, the collection's own figures explain it, as before.
  inc.capture = CaptureRecord{};
  const auto c = explain_incident(inc);
  EXPECT_TRUE(!c || c->source == "collection");
}
