// The snapshot's one JSON codec: to_json for the record and the wire alike,
// and SnapshotDecoder, which takes back what a capture process sent: every
// field checked for type and size against the request's bounds, never trusted,
// and the lists decoded element by element as the text is parsed.
#include <cmath>
#include <functional>
#include <tuple>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/capture_options.h"
#include "core/json_fields.h"
#include "core/json_stream.h"
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
  if (!s.source.empty()) j["source"] = s.source;
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
constexpr size_t kElementFields = 64;   // an element's values besides its stack

// The "status" and optional "reason" every snapshot part carries.
void read_status(Fields& f, SnapshotStatus& status, std::string& reason) {
  const auto known = snapshot_status_from_string(f.str("status"));
  if (known) status = *known;
  if (f.ok() && !known) f.fail("unknown status");
  reason = f.str("reason", false);
}

// A stack (or any list of names): an array of at most max strings, each at
// most kMaxString bytes, moved out of the element.
bool strings_from_json(json& j, size_t max, const std::string& what, std::vector<std::string>& out,
                       std::string& why) {
  if (!j.is_array() || j.size() > max) {
    why = what + " is not an array of at most " + std::to_string(max) + " frames";
    return false;
  }
  out.reserve(j.size());
  for (auto& fr : j) {
    if (!fr.is_string() || fr.get_ref<const std::string&>().size() > kMaxString) {
      why = what + ": a frame is not a string of at most " + std::to_string(kMaxString) + " bytes";
      return false;
    }
    out.push_back(std::move(fr.get_ref<std::string&>()));
  }
  return true;
}

// The stack at key "stack" of an element, if it has one.
bool stack_of(json& element, bool required, size_t max, const std::string& what, std::vector<std::string>& out,
              std::string& why) {
  auto it = element.find("stack");
  if (it == element.end()) {
    if (required) why = what + ": missing stack";
    return !required;
  }
  return strings_from_json(*it, max, what + ": stack", out, why);
}

// One list of a snapshot: at most `max` elements, each decoded by `decode`
// as it arrives (from the stream, or from the tree at finish()).
template <typename T>
class BoundedList {
 public:
  using Decode = std::function<bool(json&, T&, std::string&)>;
  BoundedList(std::string where, size_t max, Decode decode)
      : where_(std::move(where)), max_(max), decode_(std::move(decode)) {}

  bool add(json& element, std::string& why) {
    if (items_.size() >= max_) {
      why = where_ + " is not an array of at most " + std::to_string(max_);
      return false;
    }
    T out;
    if (!decode_(element, out, why)) return false;
    items_.push_back(std::move(out));
    return true;
  }
  // The list's array in the tree: empty when it was streamed.
  bool finish(const json& a, std::vector<T>& out, std::string& why) {
    if (!a.is_array()) {
      why = where_ + " is not an array of at most " + std::to_string(max_);
      return false;
    }
    for (const json& e : a) {
      json copy = e;
      if (!add(copy, why)) return false;
    }
    out = std::move(items_);
    items_.clear();
    return true;
  }
  void stream(JsonStream& stream, std::vector<std::string> path) {
    stream.stream_elements(std::move(path), [this](json& e, std::string& why) { return add(e, why); });
  }

 private:
  std::string where_;
  size_t max_;
  Decode decode_;
  std::vector<T> items_;
};

// A snapshot entry (entries, recent.entries).
bool entry_from_json(json& je, size_t max_frames, SnapshotEntry& out, std::string& why) {
  Fields e(je, "snapshot entry", why);
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
  return stack_of(je, false, max_frames, "snapshot entry", out.stack, why);
}

// A group of the goroutine census.
bool group_from_json(json& jg, size_t max_frames, GoroutineGroup& out, std::string& why) {
  Fields g(jg, "snapshot.goroutines group", why);
  out.count = g.u64("count");
  out.state = g.str("state");
  out.wait_reason = g.str("wait_reason");
  out.created_by = g.str("created_by");
  out.start = g.str("start");
  if (!g.ok()) return false;
  return stack_of(jg, true, max_frames, "snapshot.goroutines group", out.stack, why);
}

// An entry of snapshot.block / snapshot.mutex.
bool contention_entry_from_json(json& je, const std::string& where, size_t max_frames, ContentionEntry& out,
                                std::string& why) {
  Fields e(je, where, why);
  out.name = e.str("name");
  out.contentions = e.i64("contentions");
  out.delay_ns = e.i64("delay_ns");
  if (!e.ok()) return false;
  return stack_of(je, true, max_frames, where + " entry", out.stack, why);
}

// snapshot.goroutines (the Go goroutine census) without its groups.
bool census_from_json(const json& j, GoroutineCensus& c, std::string& why) {
  Fields f(j, "snapshot.goroutines", why);
  read_status(f, c.status, c.reason);
  c.total = f.u64("total");
  c.system = f.u64("system");
  c.groups_truncated = f.boolean("groups_truncated");
  c.stacks_reread = f.u64("stacks_reread");
  const json* by_state = f.get("by_state", true);
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
  return true;
}

// snapshot.block / snapshot.mutex without their entries.
bool contention_from_json(const json& j, const char* where, ContentionProfile& p, std::string& why) {
  Fields f(j, where, why);
  read_status(f, p.status, p.reason);
  if (f.has("rate")) p.rate = f.i64("rate");
  p.cycles_per_second = f.i64("cycles_per_second");
  p.total_contentions = f.i64("total_contentions");
  p.total_delay_ns = f.i64("total_delay_ns");
  p.records = f.u64("records");
  p.output_truncated = f.boolean("output_truncated");
  return f.ok();
}

}  // namespace

struct SnapshotDecoder::Lists {
  explicit Lists(const CaptureOptions& b)
      : max_frames(b.max_stack_depth * kMaxInlineFactor),
        entries("snapshot: entries", b.max_entries,
                [this](json& e, SnapshotEntry& out, std::string& why) {
                  return entry_from_json(e, max_frames, out, why);
                }),
        recent("snapshot: recent.entries", b.max_entries,
               [this](json& e, SnapshotEntry& out, std::string& why) {
                 if (!entry_from_json(e, max_frames, out, why)) return false;
                 if (out.kind == "allocation_site") return true;
                 why = "snapshot: recent entry is not an allocation_site";
                 return false;
               }),
        groups("snapshot.goroutines: groups", b.max_goroutine_groups ? b.max_goroutine_groups : b.max_entries,
               [this](json& e, GoroutineGroup& out, std::string& why) {
                 return group_from_json(e, max_frames, out, why);
               }),
        block("snapshot.block: entries", b.max_entries,
              [this](json& e, ContentionEntry& out, std::string& why) {
                return contention_entry_from_json(e, "snapshot.block", max_frames, out, why);
              }),
        mutex("snapshot.mutex: entries", b.max_entries, [this](json& e, ContentionEntry& out, std::string& why) {
          return contention_entry_from_json(e, "snapshot.mutex", max_frames, out, why);
        }) {}

  size_t max_frames;
  BoundedList<SnapshotEntry> entries, recent;
  BoundedList<GoroutineGroup> groups;
  BoundedList<ContentionEntry> block, mutex;
};

SnapshotDecoder::SnapshotDecoder(const CaptureOptions& bounds) : lists_(std::make_unique<Lists>(bounds)) {}
SnapshotDecoder::~SnapshotDecoder() = default;

size_t SnapshotDecoder::max_element_values() const { return lists_->max_frames + kElementFields; }

void SnapshotDecoder::stream_lists(JsonStream& stream, const std::vector<std::string>& at) {
  auto path = [&](std::initializer_list<const char*> keys) {
    std::vector<std::string> p = at;
    p.insert(p.end(), keys.begin(), keys.end());
    return p;
  };
  lists_->entries.stream(stream, path({"entries"}));
  lists_->recent.stream(stream, path({"recent", "entries"}));
  lists_->groups.stream(stream, path({"goroutines", "groups"}));
  lists_->block.stream(stream, path({"block", "entries"}));
  lists_->mutex.stream(stream, path({"mutex", "entries"}));
}

bool SnapshotDecoder::finish(const json& j, Snapshot& s, std::string& why) {
  Lists& lists = *lists_;
  Fields f(j, "snapshot", why);
  s.runtime_version = f.str("runtime_version");
  read_status(f, s.status, s.reason);
  s.duration_ms = f.num("duration_ms");
  s.source = f.str("source", false);
  if (f.ok() && !s.source.empty() && s.source != "last_gasp") f.fail("unknown source");
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
  if (!lists.entries.finish(*entries, s.entries, why)) return false;
  if (recent) {
    // Go's allocations since the last GC: same bounds as entries.
    Fields r(*recent, "snapshot: recent", why);
    SnapshotRecent out;
    out.bytes = r.u64("bytes");
    out.objects = r.u64("objects");
    const json* list = r.get("entries", true);
    if (!r.ok() || !lists.recent.finish(*list, out.entries, why)) return false;
    s.recent = std::move(out);
  }
  if (const json* g = f.get("goroutines", false)) {
    GoroutineCensus census;
    Fields gf(*g, "snapshot.goroutines", why);
    const json* groups = gf.get("groups", true);
    if (!gf.ok() || !census_from_json(*g, census, why) || !lists.groups.finish(*groups, census.groups, why))
      return false;
    s.goroutines = std::move(census);
  }
  for (auto [key, member, list] : {std::tuple{"block", &Snapshot::block, &lists.block},
                                   std::tuple{"mutex", &Snapshot::mutex, &lists.mutex}}) {
    auto it = j.find(key);
    if (it == j.end()) continue;
    const std::string where = std::string("snapshot.") + key;
    ContentionProfile p;
    Fields pf(*it, where, why);
    const json* list_json = pf.get("entries", true);
    if (!pf.ok() || !contention_from_json(*it, where.c_str(), p, why) || !list->finish(*list_json, p.entries, why))
      return false;
    s.*member = std::move(p);
  }
  return true;
}

}  // namespace oomsnap
