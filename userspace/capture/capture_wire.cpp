#include "capture/capture_wire.h"

#include <cstring>
#include <limits>

#include <type_traits>
#include <variant>

#include <nlohmann/json.hpp>

#include "core/json_fields.h"
#include "core/json_stream.h"

namespace oomsnap {
namespace {

using json = nlohmann::json;
using Fields = JsonFields;

constexpr char kMagic[8] = {'O', 'O', 'M', 'S', 'N', 'A', 'P', 'R'};

void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t get_u32(std::string_view s, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}

bool memory_from_json(const json& j, ProcessMemory& m, std::string& why) {
  Fields f(j, "process_memory", why);
  m.status = f.str("status");
  for (const auto& field : kProcessMemoryFields)
    if (f.has(field.name)) m.*field.member = f.u64(field.name);
  const json* b = f.get("breakdown", false);
  if (!f.ok()) return false;
  if (!b) return true;
  m.breakdown.emplace();
  return memory_breakdown_from_json(*b, *m.breakdown, why);
}

bool record_from_json(const json& j, SnapshotDecoder& snapshot, CaptureRecord& r, std::string& why) {
  Fields f(j, "record", why);
  uint64_t pid = f.u64("pid");
  if (f.ok() && (pid == 0 || pid > static_cast<uint64_t>(std::numeric_limits<pid_t>::max()))) f.fail("pid out of range");
  r.identity.pid = static_cast<pid_t>(pid);
  r.identity.start_time_ticks = f.u64("start_time_ticks");
  r.identity.comm = f.str("comm");
  r.result.language = f.str("language");
  if (!f.ok()) return false;
  const std::string& lang = r.result.language;
  if (lang != "go" && lang != "python" && lang != "java" && lang != "node" && lang != "unknown") {
    why = "record: unknown language '" + lang.substr(0, 32) + "'";
    return false;
  }
  const json* pm = f.get("process_memory", true);
  const json* snap = f.get("snapshot", true);
  if (!f.ok()) return false;
  return memory_from_json(*pm, r.process_memory, why) && snapshot.finish(*snap, r.result.snapshot, why);
}

}  // namespace

std::string encode_request(const CaptureRequest& r) {
  const CaptureOptions& o = r.options;
  json j = {{"pid", r.pid}};
  if (r.kind != CaptureKind::kCapture)
    j["kind"] = r.kind == CaptureKind::kLastGaspPlan ? "last_gasp_plan" : "last_gasp_decode";
  if (r.last_gasp) j["last_gasp"] = to_json(*r.last_gasp);
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
  const std::string kind = f.has("kind") ? f.str("kind") : "capture";
  if (kind == "last_gasp_plan") r.kind = CaptureKind::kLastGaspPlan;
  else if (kind == "last_gasp_decode") r.kind = CaptureKind::kLastGaspDecode;
  else if (kind != "capture") f.fail("unknown kind");
  const json* lg = f.get("last_gasp", r.kind == CaptureKind::kLastGaspDecode);
  if (!f.ok()) return std::nullopt;
  if (lg && r.kind != CaptureKind::kLastGaspDecode) {
    why = "request: last_gasp in a request of another kind";
    return std::nullopt;
  }
  if (lg) {
    r.last_gasp = last_gasp_decode_from_json(*lg, why);
    if (!r.last_gasp) return std::nullopt;
    r.last_gasp->identity.pid = r.pid;
    r.last_gasp->walk.pid = r.pid;
  }
  return r;
}

std::string encode_reply(const CaptureReply& reply) {
  json j;
  std::string blob;
  switch (reply.kind) {
    case CaptureReply::Kind::kRecord:
      j["kind"] = "record";
      j["record"] = to_json(*reply.record);
      if (reply.record->result.pprof) blob = *reply.record->result.pprof;
      j["pprof"] = reply.record->result.pprof.has_value();
      if (reply.last_gasp_plan) j["last_gasp_plan"] = to_json(*reply.last_gasp_plan);
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
  // The snapshot's lists are decoded as the text is parsed: the tree holds
  // only the rest, so a crafted result costs about its size, not 35 times it.
  SnapshotDecoder snapshot(bounds);
  JsonStream stream({.max_element_values = snapshot.max_element_values()});
  snapshot.stream_lists(stream, {"record", "snapshot"});
  std::string parse_why;
  std::optional<json> parsed = stream.parse(frame.substr(kResultHeaderBytes, text_len), parse_why);
  if (!parsed) {
    why = "result: " + parse_why;
    return std::nullopt;
  }
  const json& j = *parsed;
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
  if (!record_from_json(*rec, snapshot, record, why)) return std::nullopt;
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
  if (const json* plan = f.get("last_gasp_plan", false)) {
    r.last_gasp_plan = last_gasp_plan_from_json(*plan, why);
    if (!r.last_gasp_plan) return std::nullopt;
  }
  r.record = std::move(record);
  return r;
}

}  // namespace oomsnap
