// The snapshot's one JSON codec: to_json for the record and the wire alike,
// and snapshot_from_json, which takes back what a capture process sent: every
// field checked for type and size against the request's bounds, never trusted.
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/capture_options.h"
#include "core/json_fields.h"
#include "core/snapshot.h"

namespace oomsnap {

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

namespace {

using json = nlohmann::json;
using Fields = JsonFields;

constexpr size_t kMaxString = JsonFields::kMaxString;
constexpr size_t kMaxTotals = 64;
constexpr size_t kMaxInlineFactor = 8;  // frames per stack slot (inlined calls expanded)

// The "status" and optional "reason" every snapshot part carries.
void read_status(Fields& f, SnapshotStatus& status, std::string& reason) {
  const std::string s = f.str("status");
  bool known = false;
  for (auto st : {SnapshotStatus::kComplete, SnapshotStatus::kPartial, SnapshotStatus::kUnavailable,
                  SnapshotStatus::kFailed})
    if (s == to_string(st)) status = st, known = true;
  if (f.ok() && !known) f.fail("unknown status");
  reason = f.str("reason", false);
}

// A stack (or any list of names): an array of at most max strings, each at
// most kMaxString bytes.
bool strings_from_json(const json& j, size_t max, const char* what, std::vector<std::string>& out,
                       std::string& why) {
  if (!j.is_array() || j.size() > max) {
    why = std::string(what) + " is not an array of at most " + std::to_string(max) + " frames";
    return false;
  }
  for (const auto& fr : j) {
    if (!fr.is_string() || fr.get_ref<const std::string&>().size() > kMaxString) {
      why = std::string(what) + ": a frame is not a string of at most " + std::to_string(kMaxString) + " bytes";
      return false;
    }
    out.push_back(fr.get<std::string>());
  }
  return true;
}

// snapshot.goroutines (the Go goroutine census), bounded like the entries:
// at most max_goroutine_groups (else max_entries) groups, stacks as deep as
// the entries' stacks, at most kMaxTotals states.
bool census_from_json(const json& j, const CaptureOptions& bounds, GoroutineCensus& c, std::string& why) {
  Fields f(j, "snapshot.goroutines", why);
  read_status(f, c.status, c.reason);
  c.total = f.u64("total");
  c.system = f.u64("system");
  c.groups_truncated = f.boolean("groups_truncated");
  c.stacks_reread = f.u64("stacks_reread");
  const json* by_state = f.get("by_state", true);
  const json* groups = f.get("groups", true);
  if (!f.ok()) return false;
  if (!by_state->is_object() || by_state->size() > kMaxTotals) {
    why = "snapshot.goroutines: by_state is not an object of at most " + std::to_string(kMaxTotals) + " states";
    return false;
  }
  for (const auto& [k, v] : by_state->items()) {
    if (!v.is_number_unsigned() || k.size() > 128) {
      why = "snapshot.goroutines: by_state." + k.substr(0, 64) + " is not a counter";
      return false;
    }
    c.by_state.emplace_back(k, v.get<uint64_t>());
  }
  const size_t max_groups = bounds.max_goroutine_groups ? bounds.max_goroutine_groups : bounds.max_entries;
  if (!groups->is_array() || groups->size() > max_groups) {
    why = "snapshot.goroutines: groups is not an array of at most " + std::to_string(max_groups);
    return false;
  }
  for (const auto& jg : *groups) {
    Fields g(jg, "snapshot.goroutines group", why);
    GoroutineGroup out;
    out.count = g.u64("count");
    out.state = g.str("state");
    out.wait_reason = g.str("wait_reason");
    out.created_by = g.str("created_by");
    out.start = g.str("start");
    const json* st = g.get("stack", true);
    if (!g.ok()) return false;
    if (!strings_from_json(*st, bounds.max_stack_depth * kMaxInlineFactor, "snapshot.goroutines group: stack",
                           out.stack, why))
      return false;
    c.groups.push_back(std::move(out));
  }
  return true;
}

// snapshot.block / snapshot.mutex: same bounds as the entries (count, frames, strings).
bool contention_from_json(const json& j, const char* where, const CaptureOptions& bounds, ContentionProfile& p,
                          std::string& why) {
  Fields f(j, where, why);
  read_status(f, p.status, p.reason);
  if (f.has("rate")) p.rate = f.i64("rate");
  p.cycles_per_second = f.i64("cycles_per_second");
  p.total_contentions = f.i64("total_contentions");
  p.total_delay_ns = f.i64("total_delay_ns");
  p.records = f.u64("records");
  p.output_truncated = f.boolean("output_truncated");
  const json* entries = f.get("entries", true);
  if (!f.ok()) return false;
  if (!entries->is_array() || entries->size() > bounds.max_entries) {
    why = std::string(where) + ": entries is not an array of at most " + std::to_string(bounds.max_entries);
    return false;
  }
  const size_t max_frames = bounds.max_stack_depth * kMaxInlineFactor;
  for (const auto& je : *entries) {
    Fields e(je, where, why);
    ContentionEntry out;
    out.name = e.str("name");
    out.contentions = e.i64("contentions");
    out.delay_ns = e.i64("delay_ns");
    const json* st = e.get("stack", true);
    if (!e.ok()) return false;
    if (!strings_from_json(*st, max_frames, (std::string(where) + " entry: stack").c_str(), out.stack, why))
      return false;
    p.entries.push_back(std::move(out));
  }
  return true;
}

// A list of snapshot entries (entries, recent.entries), bounded by the request.
bool entries_from_json(const json& entries, const CaptureOptions& bounds, const char* where,
                       std::vector<SnapshotEntry>& list, std::string& why) {
  if (!entries.is_array() || entries.size() > bounds.max_entries) {
    why = std::string(where) + " is not an array of at most " + std::to_string(bounds.max_entries);
    return false;
  }
  const size_t max_frames = bounds.max_stack_depth * kMaxInlineFactor;
  for (const auto& je : entries) {
    Fields e(je, "snapshot entry", why);
    SnapshotEntry out;
    out.kind = e.str("kind");
    out.name = e.str("name");
    out.bytes = e.u64("bytes");
    out.objects = e.u64("objects");
    out.average_bytes = e.u64("average_bytes");
    if (!e.ok()) return false;
    if (out.kind != "allocation_site" && out.kind != "object_type") {
      why = "snapshot entry: unknown kind";
      return false;
    }
    if (const json* st = e.get("stack", false)) {
      if (!strings_from_json(*st, max_frames, "snapshot entry: stack", out.stack, why)) return false;
    }
    list.push_back(std::move(out));
  }
  return true;
}

}  // namespace

bool snapshot_from_json(const json& j, const CaptureOptions& bounds, Snapshot& s, std::string& why) {
  Fields f(j, "snapshot", why);
  s.runtime_version = f.str("runtime_version");
  read_status(f, s.status, s.reason);
  s.duration_ms = f.num("duration_ms");
  if (f.has("sample_rate")) s.sample_rate = f.i64("sample_rate");
  s.output_truncated = f.boolean("output_truncated");
  s.scope = f.str("scope", false);
  if (f.has("coverage")) s.coverage = f.num("coverage");
  s.read_syscalls = f.u64("read_syscalls");
  s.bytes_read = f.u64("bytes_read");
  if (const json* t = f.get("totals", false)) {
    if (!t->is_object() || t->size() > kMaxTotals) {
      f.fail("totals is not an object of at most " + std::to_string(kMaxTotals) + " counters");
    } else {
      for (const auto& [k, v] : t->items()) {
        if (!v.is_number_unsigned() || k.size() > 128) {
          f.fail("totals." + k.substr(0, 64) + " is not a counter");
          break;
        }
        s.totals.emplace_back(k, v.get<uint64_t>());
      }
    }
  }
  const json* entries = f.get("entries", true);
  const json* recent = f.get("recent", false);
  if (!f.ok()) return false;
  if (!entries_from_json(*entries, bounds, "snapshot: entries", s.entries, why)) return false;
  if (recent) {
    // Go's allocations since the last GC: same bounds as entries.
    Fields r(*recent, "snapshot: recent", why);
    SnapshotRecent out;
    out.bytes = r.u64("bytes");
    out.objects = r.u64("objects");
    const json* list = r.get("entries", true);
    if (!r.ok()) return false;
    if (!entries_from_json(*list, bounds, "snapshot: recent.entries", out.entries, why)) return false;
    for (const auto& e : out.entries) {
      if (e.kind != "allocation_site") {
        why = "snapshot: recent entry is not an allocation_site";
        return false;
      }
    }
    s.recent = std::move(out);
  }
  if (const json* g = f.get("goroutines", false)) {
    GoroutineCensus census;
    if (!census_from_json(*g, bounds, census, why)) return false;
    s.goroutines = std::move(census);
  }
  for (auto [key, member] : {std::pair{"block", &Snapshot::block}, std::pair{"mutex", &Snapshot::mutex}}) {
    auto it = j.find(key);
    if (it == j.end()) continue;
    ContentionProfile p;
    if (!contention_from_json(*it, (std::string("snapshot.") + key).c_str(), bounds, p, why)) return false;
    s.*member = std::move(p);
  }
  return true;
}

}  // namespace oomsnap
