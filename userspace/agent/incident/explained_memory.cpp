#include "agent/incident/explained_memory.h"

#include <unistd.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "agent/incident/incident.h"

namespace oomsnap {
namespace {

constexpr const char* kChargeKindNames[kChargeKinds] = {"heap", "heap_free", "runtime", "stacks", "native",    "anon",
                                                        "file", "shmem",     "tmpfs",   "page_cache", "kernel"};

constexpr ChargeKind kAnonKinds[] = {ChargeKind::kHeap,   ChargeKind::kHeapFree, ChargeKind::kRuntime,
                                     ChargeKind::kStacks, ChargeKind::kNative,   ChargeKind::kAnon};

// The breakdown's kinds map one to one onto the first charge kinds.
ChargeKind charge_kind_of(MemoryKind k) {
  switch (k) {
    case MemoryKind::kHeap: return ChargeKind::kHeap;
    case MemoryKind::kHeapFree: return ChargeKind::kHeapFree;
    case MemoryKind::kRuntime: return ChargeKind::kRuntime;
    case MemoryKind::kStacks: return ChargeKind::kStacks;
    case MemoryKind::kNative: return ChargeKind::kNative;
    case MemoryKind::kFile: return ChargeKind::kFile;
    case MemoryKind::kShmem: return ChargeKind::kShmem;
  }
  return ChargeKind::kNative;
}

// A breakdown comes from the capture process, which a target may have
// taken over: its counts may be anything, and a sum must not wrap to a
// small number that passes for the truth.
uint64_t add_saturating(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

std::optional<uint64_t> stat_kind(const MemoryStat* s, const char* kind) {
  if (!s) return std::nullopt;
  auto it = s->bytes.find(kind);
  if (it == s->bytes.end()) return std::nullopt;
  return it->second;
}

template <size_t N>
uint64_t class_total(const std::array<uint64_t, kChargeKinds>& v, const ChargeKind (&kinds)[N]) {
  uint64_t total = 0;
  for (ChargeKind k : kinds) total = add_saturating(total, v[static_cast<size_t>(k)]);
  return total;
}

// Scales the kinds of one class down so they sum to `cap` (each in
// proportion, the rounding remainder to the largest); returns what was
// taken off. Nothing changes when they already fit.
template <size_t N>
uint64_t fit_class(std::array<uint64_t, kChargeKinds>& v, const ChargeKind (&kinds)[N], uint64_t cap) {
  const uint64_t total = class_total(v, kinds);
  if (total <= cap) return 0;
  uint64_t kept = 0;
  size_t largest = static_cast<size_t>(kinds[0]);
  for (ChargeKind k : kinds) {
    const size_t i = static_cast<size_t>(k);
    if (v[i] > v[largest]) largest = i;
    v[i] = static_cast<uint64_t>(static_cast<unsigned __int128>(v[i]) * cap / total);
    kept += v[i];
  }
  v[largest] += cap - kept;
  return total - cap;
}

// Caps one class at memory.stat's count of it plus what memory.stat has not
// counted yet and no class before took (`lag`, the header says why); adds
// what was taken off to shared_bytes and what of the lag the class took to
// `lag_used`.
template <size_t N>
void cap_class(std::array<uint64_t, kChargeKinds>& v, const ChargeKind (&kinds)[N], uint64_t counted, uint64_t lag,
               ExplainedMemory& e, uint64_t& lag_used) {
  const uint64_t total = class_total(v, kinds);
  if (total > counted) lag_used = add_saturating(lag_used, std::min(total - counted, lag));
  e.shared_bytes += fit_class(v, kinds, add_saturating(counted, lag));
}

// One process's RSS by charge kind: its breakdown, or /proc/PID/status's
// anon / file / shmem split (RssAnon is not split further).
void add_process(std::array<uint64_t, kChargeKinds>& v, const ProcessCharge& p, ExplainedMemory& e,
                 uint32_t& unsplit) {
  if (p.breakdown && p.breakdown->status != "failed") {
    for (size_t i = 0; i < kMemoryKinds; ++i) {
      uint64_t& to = v[static_cast<size_t>(charge_kind_of(static_cast<MemoryKind>(i)))];
      to = add_saturating(to, p.breakdown->bytes[i]);
    }
    ++e.processes_by_breakdown;
    return;
  }
  const ProcessMemory& m = p.memory;
  if (!m.rss_bytes) return;  // exited before its /proc reads: nothing to count
  e.processes_by_rss += p.count;
  auto add = [&v](ChargeKind k, uint64_t n) { v[static_cast<size_t>(k)] = add_saturating(v[static_cast<size_t>(k)], n); };
  if (m.rss_anon_bytes && m.rss_file_bytes && m.rss_shmem_bytes) {
    add(ChargeKind::kAnon, *m.rss_anon_bytes);
    add(ChargeKind::kFile, *m.rss_file_bytes);
    add(ChargeKind::kShmem, *m.rss_shmem_bytes);
  } else {
    add(ChargeKind::kAnon, *m.rss_bytes);
    unsplit += p.count;
  }
}

}  // namespace

const char* charge_kind_name(ChargeKind k) {
  const auto i = static_cast<size_t>(k);
  return i < kChargeKinds ? kChargeKindNames[i] : "?";
}

uint64_t ExplainedMemory::parts() const {
  uint64_t t = 0;
  for (const auto& b : bytes) t = add_saturating(t, b.value_or(0));
  return t;
}

ExplainedMemory explain_memory(std::optional<uint64_t> usage, const std::optional<MemoryStat>& stat_in,
                               const std::vector<ProcessCharge>& processes) {
  ExplainedMemory e;
  const MemoryStat* stat = stat_in && stat_in->error.empty() ? &*stat_in : nullptr;
  if (!stat_in) e.notes.push_back("no memory.stat: tmpfs, page cache and kernel memory not known");
  else if (!stat) e.notes.push_back("memory.stat not read (" + stat_in->error + "): tmpfs, page cache and kernel memory not known");

  std::array<uint64_t, kChargeKinds> v{};
  uint32_t unsplit = 0;  // processes whose /proc RSS had no anon / file / shmem split
  for (const ProcessCharge& p : processes) add_process(v, p, e, unsplit);
  if (unsplit) e.notes.push_back(std::to_string(unsplit) + " processes' rss not split by /proc: counted as anon");
  if (processes.empty())
    e.notes.push_back("no process found in the container");
  else if (e.processes_by_breakdown == 0)
    e.notes.push_back("no breakdown of any process (capture failed or not attempted): processes counted by rss only");

  const auto anon = stat_kind(stat, "anon"), file = stat_kind(stat, "file"), shmem = stat_kind(stat, "shmem"),
             mapped = stat_kind(stat, "file_mapped"), kernel = stat_kind(stat, "kernel");

  if (!usage && anon && file && kernel) usage = add_saturating(add_saturating(*anon, *file), *kernel);
  // Charge memory.stat has not counted yet (the header says why).
  uint64_t lag = 0, lag_used = 0;
  if (usage && anon && file && kernel)
    lag = *usage - std::min(*usage, add_saturating(add_saturating(*anon, *file), *kernel));

  // Each class at most what the memcg charges for it (the header says why).
  if (anon) cap_class(v, kAnonKinds, *anon, lag - lag_used, e, lag_used);
  if (shmem) cap_class(v, {ChargeKind::kShmem}, *shmem, lag - lag_used, e, lag_used);
  const uint64_t unshared_file = file ? *file - std::min(*file, shmem.value_or(0)) : 0;
  if (file) {
    // Mapped files are file pages beyond shmem, and (file_mapped counting
    // mapped shmem too) at most file_mapped.
    e.shared_bytes += fit_class(v, {ChargeKind::kFile}, mapped ? std::min(unshared_file, *mapped) : unshared_file);
  }
  if (lag_used)
    e.notes.push_back("memory.stat counted " + std::to_string(lag) +
                      " bytes less than the usage (its per-CPU counters not yet folded in): " +
                      std::to_string(lag_used) + " bytes of the processes' RSS beyond its counts were kept");
  for (size_t i = 0; i <= static_cast<size_t>(ChargeKind::kShmem); ++i) e.bytes[i] = v[i];

  // What the memcg holds of a class beyond the processes' share; with a
  // lagging stat the share can pass the stat's count: then nothing.
  auto beyond = [](uint64_t held, uint64_t mapped_share) { return held - std::min(held, mapped_share); };
  if (shmem) e.bytes[static_cast<size_t>(ChargeKind::kTmpfs)] = beyond(*shmem, v[static_cast<size_t>(ChargeKind::kShmem)]);
  if (file)
    e.bytes[static_cast<size_t>(ChargeKind::kPageCache)] = beyond(unshared_file, v[static_cast<size_t>(ChargeKind::kFile)]);
  if (kernel) e.bytes[static_cast<size_t>(ChargeKind::kKernel)] = *kernel;
  if (stat) {
    for (const char* k : {"anon", "file", "shmem", "kernel"})
      if (!stat_kind(stat, k)) e.notes.push_back(std::string("memory.stat has no ") + k);
  }

  e.usage_bytes = usage;
  const uint64_t parts = e.parts();
  if (usage) {
    e.explained_bytes = std::min(parts, *usage);
    e.unexplained_bytes = *usage - e.explained_bytes;
    e.over_bytes = parts - e.explained_bytes;
  } else {
    e.explained_bytes = parts;
    e.notes.push_back("usage not known: nothing to measure the parts against");
  }
  return e;
}

ExplainedMemory explain_kernel_report(const KernelOomReport& r, uint64_t page_size) {
  std::vector<ProcessCharge> procs;
  auto charge = [page_size](const KernelOomTask& t, uint32_t count) {
    ProcessCharge p;
    p.pid = count == 1 ? t.pid : 0;
    p.count = count;
    auto bytes = [page_size](std::optional<uint64_t> pages) {
      return pages ? std::optional<uint64_t>(*pages * page_size) : std::nullopt;
    };
    p.memory.rss_bytes = t.rss_pages * page_size;
    p.memory.rss_anon_bytes = bytes(t.rss_anon_pages);
    p.memory.rss_file_bytes = bytes(t.rss_file_pages);
    p.memory.rss_shmem_bytes = bytes(t.rss_shmem_pages);
    p.memory.swap_bytes = t.swap_entries * page_size;
    p.memory.page_table_bytes = t.pgtables_bytes;
    p.memory.status = "ok";
    return p;
  };
  for (const KernelOomTask& t : r.tasks) procs.push_back(charge(t, 1));
  if (r.tasks_total > r.tasks.size())
    procs.push_back(charge(r.tasks_rest, static_cast<uint32_t>(r.tasks_total - r.tasks.size())));
  ExplainedMemory e = explain_memory(r.usage_bytes, r.memory_stat, procs);
  e.source = "kernel_oom_report";
  if (r.stat_cut) e.notes.push_back("the kernel's report held more memory.stat lines than were kept");
  return e;
}

std::optional<ExplainedMemory> explain_incident(const Incident& inc) {
  const IncidentContainer& c = inc.container;
  if (!inc.capture && inc.oom_kill && inc.oom_kill->kernel_report)
    return explain_kernel_report(*inc.oom_kill->kernel_report, static_cast<uint64_t>(getpagesize()));
  if (!c.memory_stat && c.tasks_total == 0) return std::nullopt;
  std::vector<ProcessCharge> procs;
  auto counted = [&procs](pid_t pid) {
    return std::any_of(procs.begin(), procs.end(), [pid](const ProcessCharge& p) { return p.pid == pid; });
  };
  auto add = [&procs](pid_t pid, const ProcessMemory& m) {
    ProcessCharge p;
    p.pid = pid;
    p.breakdown = m.breakdown ? &*m.breakdown : nullptr;
    p.memory = m;
    p.memory.breakdown.reset();
    procs.push_back(std::move(p));
  };
  if (inc.victim) add(inc.victim->pid, inc.capture ? inc.capture->process_memory : inc.victim->memory);
  for (const OtherProcess& o : inc.other_processes)
    if (!counted(o.process.pid)) add(o.process.pid, o.capture ? o.capture->process_memory : o.process.memory);
  for (const VictimCandidate& t : c.tasks)
    if (!counted(t.pid)) add(t.pid, t.memory);
  // The processes past the listed ones, by their RSS summed at the scan,
  // less the captured ones among them (a victim by oom_score_adj may have
  // too small an RSS to be listed): the same scan's figures come off.
  IncidentContainer::Unlisted rest = c.unlisted_tasks;
  auto take_off = [&](const VictimCandidate& p) {
    const bool listed = std::any_of(c.tasks.begin(), c.tasks.end(), [&p](const VictimCandidate& t) { return t.pid == p.pid; });
    if (listed || !p.memory.rss_bytes || rest.count == 0) return;
    --rest.count;
    for (const auto& f : kProcessMemoryFields)
      if (auto& sum = rest.memory.*f.member; sum && (p.memory.*f.member))
        *sum -= std::min(*sum, *(p.memory.*f.member));
  };
  if (inc.victim) take_off(*inc.victim);
  for (const OtherProcess& o : inc.other_processes) take_off(o.process);
  if (rest.count) {
    ProcessCharge r;
    r.count = rest.count;
    r.memory = rest.memory;
    procs.push_back(std::move(r));
  }
  const auto usage = c.memory_stat && c.memory_stat->usage_bytes ? c.memory_stat->usage_bytes : c.stats.usage_bytes;
  ExplainedMemory e = explain_memory(usage, c.memory_stat, procs);
  // The tmpfs files by name, as the first captured process (the victim
  // first) sees its mounts.
  for (const ProcessCharge& p : procs)
    if (p.breakdown && p.breakdown->tmpfs) {
      e.tmpfs_files = p.breakdown->tmpfs;
      break;
    }
  return e;
}

nlohmann::json to_json(const ExplainedMemory& e) {
  nlohmann::json j;
  if (e.usage_bytes) j["usage_bytes"] = *e.usage_bytes;
  j["source"] = e.source;
  j["explained_bytes"] = e.explained_bytes;
  if (e.usage_bytes) j["unexplained_bytes"] = e.unexplained_bytes;
  nlohmann::json kinds = nlohmann::json::object();
  for (size_t i = 0; i < kChargeKinds; ++i)
    if (e.bytes[i]) kinds[kChargeKindNames[i]] = *e.bytes[i];
  j["kinds"] = std::move(kinds);
  if (e.shared_bytes) j["shared_bytes"] = e.shared_bytes;
  if (e.over_bytes) j["over_bytes"] = e.over_bytes;
  j["processes_by_breakdown"] = e.processes_by_breakdown;
  j["processes_by_rss"] = e.processes_by_rss;
  if (!e.notes.empty()) j["notes"] = e.notes;
  if (e.tmpfs_files) j["tmpfs_files"] = to_json(*e.tmpfs_files);
  return j;
}

}  // namespace oomsnap
