#include "core/snapshot.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace oomsnap {

const char* to_string(SnapshotStatus s) {
  switch (s) {
    case SnapshotStatus::kComplete: return "complete";
    case SnapshotStatus::kPartial: return "partial";
    case SnapshotStatus::kUnavailable: return "unavailable";
    case SnapshotStatus::kFailed: return "failed";
  }
  return "failed";
}

bool Snapshot::sort_and_truncate(std::vector<SnapshotEntry>& entries, size_t max_entries) {
  std::sort(entries.begin(), entries.end(), [](const SnapshotEntry& a, const SnapshotEntry& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    if (a.objects != b.objects) return a.objects > b.objects;
    return a.name < b.name;
  });
  if (entries.size() <= max_entries) return false;
  entries.resize(max_entries);
  return true;
}

void Snapshot::sort_and_truncate(size_t max_entries) {
  if (sort_and_truncate(entries, max_entries)) output_truncated = true;
}

namespace {

nlohmann::json entries_to_json(const std::vector<SnapshotEntry>& list) {
  auto entries = nlohmann::json::array();
  for (const auto& e : list) {
    nlohmann::json je;
    je["kind"] = e.kind;
    je["name"] = e.name;
    je["bytes"] = e.bytes;
    je["objects"] = e.objects;
    je["average_bytes"] = e.average_bytes ? *e.average_bytes : (e.objects ? e.bytes / e.objects : 0);
    if (e.kind == "allocation_site") je["stack"] = e.stack;
    entries.push_back(std::move(je));
  }
  return entries;
}

}  // namespace

nlohmann::json to_json(const Snapshot& s) {
  nlohmann::json j;
  j["runtime_version"] = s.runtime_version;
  j["status"] = to_string(s.status);
  if (s.status != SnapshotStatus::kComplete || !s.reason.empty()) j["reason"] = s.reason;
  j["duration_ms"] = std::round(s.duration_ms * 1000.0) / 1000.0;
  if (s.sample_rate) j["sample_rate"] = *s.sample_rate;
  j["output_truncated"] = s.output_truncated;
  if (!s.scope.empty()) j["scope"] = s.scope;
  if (s.coverage) j["coverage"] = std::round(*s.coverage * 10000.0) / 10000.0;
  if (!s.totals.empty()) {
    nlohmann::json t = nlohmann::json::object();
    for (const auto& [k, v] : s.totals) t[k] = v;
    j["totals"] = std::move(t);
  }
  j["read_syscalls"] = s.read_syscalls;
  j["bytes_read"] = s.bytes_read;
  j["entries"] = entries_to_json(s.entries);
  if (s.recent)
    j["recent"] = {{"bytes", s.recent->bytes}, {"objects", s.recent->objects},
                   {"entries", entries_to_json(s.recent->entries)}};
  if (s.goroutines) j["goroutines"] = to_json(*s.goroutines);
  if (s.block) j["block"] = to_json(*s.block);
  if (s.mutex) j["mutex"] = to_json(*s.mutex);
  return j;
}

nlohmann::json to_json(const GoroutineCensus& c) {
  nlohmann::json j;
  j["status"] = to_string(c.status);
  if (c.status != SnapshotStatus::kComplete || !c.reason.empty()) j["reason"] = c.reason;
  j["total"] = c.total;
  j["system"] = c.system;
  nlohmann::json by_state = nlohmann::json::object();
  for (const auto& [k, v] : c.by_state) by_state[k] = v;
  j["by_state"] = std::move(by_state);
  auto groups = nlohmann::json::array();
  for (const auto& g : c.groups) {
    nlohmann::json jg;
    jg["count"] = g.count;
    jg["state"] = g.state;
    jg["wait_reason"] = g.wait_reason;
    jg["stack"] = g.stack;
    jg["created_by"] = g.created_by;
    jg["start"] = g.start;
    groups.push_back(std::move(jg));
  }
  j["groups"] = std::move(groups);
  j["groups_truncated"] = c.groups_truncated;
  j["stacks_reread"] = c.stacks_reread;
  return j;
}

nlohmann::json to_json(const ContentionProfile& p) {
  nlohmann::json j;
  j["status"] = to_string(p.status);
  if (p.status != SnapshotStatus::kComplete || !p.reason.empty()) j["reason"] = p.reason;
  if (p.rate) j["rate"] = *p.rate;
  j["cycles_per_second"] = p.cycles_per_second;
  j["total_contentions"] = p.total_contentions;
  j["total_delay_ns"] = p.total_delay_ns;
  j["records"] = p.records;
  j["output_truncated"] = p.output_truncated;
  auto entries = nlohmann::json::array();
  for (const auto& e : p.entries)
    entries.push_back({{"name", e.name}, {"stack", e.stack}, {"contentions", e.contentions}, {"delay_ns", e.delay_ns}});
  j["entries"] = std::move(entries);
  return j;
}

}  // namespace oomsnap
