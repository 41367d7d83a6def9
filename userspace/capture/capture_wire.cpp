#include "capture/capture_wire.h"

#include <cstring>
#include <limits>

#include <type_traits>
#include <variant>

#include <nlohmann/json.hpp>

namespace oomsnap {
namespace {

using json = nlohmann::json;

constexpr char kMagic[8] = {'O', 'O', 'M', 'S', 'N', 'A', 'P', 'R'};
constexpr size_t kMaxString = 64 * 1024;   // a name, a frame, a reason
constexpr size_t kMaxTotals = 64;
constexpr size_t kMaxInlineFactor = 8;     // frames per stack slot (inlined calls expanded)

void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t get_u32(std::string_view s, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}

// Typed field access that records the first problem and never throws.
class Fields {
 public:
  Fields(const json& j, std::string where, std::string& why) : j_(j), where_(std::move(where)), why_(why) {
    if (!j_.is_object()) fail("not an object");
  }
  bool ok() const { return ok_; }
  bool has(const char* k) const { return ok_ && j_.contains(k); }
  std::string str(const char* k, bool required = true) {
    const json* v = get(k, required);
    if (!v) return {};
    if (!v->is_string()) return fail(std::string(k) + " is not a string"), std::string();
    const auto& s = v->get_ref<const std::string&>();
    if (s.size() > kMaxString) return fail(std::string(k) + " is longer than " + std::to_string(kMaxString)), std::string();
    return s;
  }
  uint64_t u64(const char* k, bool required = true) {
    const json* v = get(k, required);
    if (!v) return 0;
    if (!v->is_number_unsigned()) return fail(std::string(k) + " is not an unsigned integer"), 0;
    return v->get<uint64_t>();
  }
  int64_t i64(const char* k) {
    const json* v = get(k, true);
    if (!v) return 0;
    if (!v->is_number_integer()) return fail(std::string(k) + " is not an integer"), 0;
    return v->get<int64_t>();
  }
  double num(const char* k, bool required = true) {
    const json* v = get(k, required);
    if (!v) return 0;
    if (!v->is_number()) return fail(std::string(k) + " is not a number"), 0;
    return v->get<double>();
  }
  bool boolean(const char* k, bool required = true) {
    const json* v = get(k, required);
    if (!v) return false;
    if (!v->is_boolean()) return fail(std::string(k) + " is not a boolean"), false;
    return v->get<bool>();
  }
  const json* get(const char* k, bool required) {
    if (!ok_) return nullptr;
    auto it = j_.find(k);
    if (it == j_.end()) {
      if (required) fail(std::string("missing ") + k);
      return nullptr;
    }
    return &*it;
  }
  void fail(const std::string& what) {
    if (ok_) why_ = where_ + ": " + what;
    ok_ = false;
  }

 private:
  const json& j_;
  std::string where_;
  std::string& why_;
  bool ok_ = true;
};

std::optional<SnapshotStatus> status_from(const std::string& s) {
  for (auto st : {SnapshotStatus::kComplete, SnapshotStatus::kPartial, SnapshotStatus::kUnavailable,
                  SnapshotStatus::kFailed})
    if (s == to_string(st)) return st;
  return std::nullopt;
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
  auto status = status_from(f.str("status"));
  if (f.ok() && !status) f.fail("unknown status");
  if (status) c.status = *status;
  c.reason = f.str("reason", false);
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
  auto status = status_from(f.str("status"));
  if (f.ok() && !status) f.fail("unknown status");
  if (status) p.status = *status;
  p.reason = f.str("reason", false);
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

bool memory_from_json(const json& j, ProcessMemory& m, std::string& why) {
  Fields f(j, "process_memory", why);
  m.status = f.str("status");
  for (const auto& field : kProcessMemoryFields)
    if (f.has(field.name)) m.*field.member = f.u64(field.name);
  return f.ok();
}

bool record_from_json(const json& j, const CaptureOptions& bounds, CaptureRecord& r, std::string& why) {
  Fields f(j, "record", why);
  uint64_t pid = f.u64("pid");
  if (f.ok() && (pid == 0 || pid > static_cast<uint64_t>(std::numeric_limits<pid_t>::max()))) f.fail("pid out of range");
  r.identity.pid = static_cast<pid_t>(pid);
  r.identity.start_time_ticks = f.u64("start_time_ticks");
  r.identity.comm = f.str("comm");
  r.result.language = f.str("language");
  if (!f.ok()) return false;
  const std::string& lang = r.result.language;
  if (lang != "go" && lang != "python" && lang != "java" && lang != "unknown") {
    why = "record: unknown language '" + lang.substr(0, 32) + "'";
    return false;
  }
  const json* pm = f.get("process_memory", true);
  const json* snap = f.get("snapshot", true);
  if (!f.ok()) return false;
  return memory_from_json(*pm, r.process_memory, why) && snapshot_from_json(*snap, bounds, r.result.snapshot, why);
}

}  // namespace

std::string encode_request(const CaptureRequest& r) {
  const CaptureOptions& o = r.options;
  json j = {{"pid", r.pid}};
  for (const CaptureOptionField& field : kCaptureOptionFields) {
    std::visit(
        [&](auto member) {
          const auto& v = o.*member;
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::chrono::milliseconds>)
            j[field.wire_name] = v.count();
          else if constexpr (std::is_same_v<T, ProfileKind>)
            j[field.wire_name] = profile_kind_name(v);
          else
            j[field.wire_name] = v;
        },
        field.member);
  }
  json skip = json::array();
  for (const auto& r : o.skip_ranges) skip.push_back({r.start, r.end});
  j["skip"] = std::move(skip);
  return j.dump() + "\n";
}

std::optional<CaptureRequest> decode_request(std::string_view line, std::string& why) {
  json j = json::parse(line, nullptr, false);
  if (j.is_discarded()) {
    why = "request is not JSON";
    return std::nullopt;
  }
  Fields f(j, "request", why);
  CaptureRequest r;
  uint64_t pid = f.u64("pid");
  r.pid = static_cast<pid_t>(pid);
  // The child is the agent's own binary: every option is required.
  for (const CaptureOptionField& field : kCaptureOptionFields) {
    std::visit(
        [&](auto member) {
          auto& v = r.options.*member;
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::chrono::milliseconds>) {
            v = std::chrono::milliseconds(f.u64(field.wire_name));
          } else if constexpr (std::is_same_v<T, ProfileKind>) {
            const std::string kind = f.str(field.wire_name);
            auto k = profile_kind_from_name(kind);
            if (f.ok() && !k) f.fail("unknown " + std::string(field.wire_name) + " '" + kind.substr(0, 32) + "'");
            if (k) v = *k;
          } else if constexpr (std::is_same_v<T, bool>) {
            v = f.boolean(field.wire_name);
          } else {
            v = f.u64(field.wire_name);
          }
        },
        field.member);
  }
  if (const json* skip = f.get("skip", true)) {
    if (!skip->is_array() || skip->size() > kMaxSkipRanges) {
      f.fail("skip is not an array of at most " + std::to_string(kMaxSkipRanges) + " ranges");
    } else {
      for (const auto& e : *skip) {
        if (!e.is_array() || e.size() != 2 || !e[0].is_number_unsigned() || !e[1].is_number_unsigned() ||
            e[0].get<uint64_t>() >= e[1].get<uint64_t>()) {
          f.fail("skip range is not [start, end)");
          break;
        }
        r.options.skip_ranges.push_back({e[0].get<uint64_t>(), e[1].get<uint64_t>()});
      }
    }
  }
  if (f.ok() && (pid == 0 || pid > static_cast<uint64_t>(std::numeric_limits<pid_t>::max())))
    f.fail("pid out of range");
  if (!f.ok()) return std::nullopt;
  return r;
}

namespace {
// A list of snapshot entries (entries, recent.entries), bounded by the request.
bool entries_from_json(const json& entries, const CaptureOptions& bounds, const char* where,
                       std::vector<SnapshotEntry>& list, std::string& why);
}  // namespace

bool snapshot_from_json(const json& j, const CaptureOptions& bounds, Snapshot& s, std::string& why) {
  Fields f(j, "snapshot", why);
  s.runtime_version = f.str("runtime_version");
  auto status = status_from(f.str("status"));
  if (f.ok() && !status) f.fail("unknown status");
  if (status) s.status = *status;
  s.reason = f.str("reason", false);
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

namespace {
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

std::string encode_reply(const CaptureReply& reply) {
  json j;
  std::string blob;
  switch (reply.kind) {
    case CaptureReply::Kind::kRecord:
      j["kind"] = "record";
      j["record"] = to_json(*reply.record);
      if (reply.record->result.pprof) blob = *reply.record->result.pprof;
      j["pprof"] = reply.record->result.pprof.has_value();
      // The recent-allocations profile follows the heap profile in the blob.
      if (reply.record->result.recent_pprof) {
        blob += *reply.record->result.recent_pprof;
        j["recent_pprof_bytes"] = reply.record->result.recent_pprof->size();
      }
      break;
    case CaptureReply::Kind::kNoTarget:
      j["kind"] = "no_target";
      j["message"] = reply.message;
      break;
    case CaptureReply::Kind::kStalled:
      j["kind"] = "stalled";
      j["message"] = reply.message;
      j["language"] = reply.language;
      j["addr"] = reply.stalled_addr;
      break;
  }
  // Strings from the target are not guaranteed UTF-8: replace, never throw.
  std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string frame(kMagic, sizeof kMagic);
  put_u32(frame, static_cast<uint32_t>(text.size()));
  put_u32(frame, static_cast<uint32_t>(blob.size()));
  frame += text;
  frame += blob;
  return frame;
}

size_t declared_frame_size(std::string_view bytes) {
  if (bytes.size() < kResultHeaderBytes || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return 0;
  return kResultHeaderBytes + static_cast<size_t>(get_u32(bytes, 8)) + static_cast<size_t>(get_u32(bytes, 12));
}

std::optional<CaptureReply> decode_reply(std::string_view frame, const CaptureOptions& bounds, std::string& why) {
  if (frame.size() < kResultHeaderBytes || std::memcmp(frame.data(), kMagic, sizeof kMagic) != 0) {
    why = frame.empty() ? "no result" : "result does not start with the frame header";
    return std::nullopt;
  }
  const uint64_t text_len = get_u32(frame, 8), blob_len = get_u32(frame, 12);
  if (kResultHeaderBytes + text_len + blob_len != frame.size()) {
    why = "result frame of " + std::to_string(frame.size()) + " bytes does not match its header (" +
          std::to_string(text_len) + " + " + std::to_string(blob_len) + ")";
    return std::nullopt;
  }
  json j = json::parse(frame.substr(kResultHeaderBytes, text_len), nullptr, false);
  if (j.is_discarded()) {
    why = "result is not JSON";
    return std::nullopt;
  }
  Fields f(j, "result", why);
  std::string kind = f.str("kind");
  if (!f.ok()) return std::nullopt;
  CaptureReply r;
  if (kind == "no_target" || kind == "stalled") {
    r.kind = kind == "stalled" ? CaptureReply::Kind::kStalled : CaptureReply::Kind::kNoTarget;
    r.message = f.str("message");
    if (r.kind == CaptureReply::Kind::kStalled) {
      r.language = f.str("language");
      r.stalled_addr = f.u64("addr");
    }
    if (!f.ok()) return std::nullopt;
    if (blob_len != 0) {
      why = "result: unexpected blob";
      return std::nullopt;
    }
    return r;
  }
  if (kind != "record") {
    why = "result: unknown kind";
    return std::nullopt;
  }
  const json* rec = f.get("record", true);
  bool has_pprof = f.boolean("pprof");
  const bool has_recent = f.has("recent_pprof_bytes");
  const uint64_t recent_len = has_recent ? f.u64("recent_pprof_bytes") : 0;
  if (!f.ok()) return std::nullopt;
  CaptureRecord record;
  if (!record_from_json(*rec, bounds, record, why)) return std::nullopt;
  if (recent_len > blob_len) {
    why = "result: recent_pprof_bytes is larger than the blob";
    return std::nullopt;
  }
  const uint64_t heap_len = blob_len - recent_len;
  if (!has_pprof && heap_len != 0) {
    why = "result: a blob without pprof";
    return std::nullopt;
  }
  if (has_pprof) record.result.pprof = std::string(frame.substr(kResultHeaderBytes + text_len, heap_len));
  if (has_recent)
    record.result.recent_pprof = std::string(frame.substr(kResultHeaderBytes + text_len + heap_len, recent_len));
  r.record = std::move(record);
  return r;
}

}  // namespace oomsnap
