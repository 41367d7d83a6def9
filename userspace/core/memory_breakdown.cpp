#include "core/memory_breakdown.h"

#include <algorithm>
#include <tuple>

#include <nlohmann/json.hpp>

#include "base/text.h"
#include "core/json_fields.h"

namespace oomsnap {
namespace {

constexpr const char* kKindNames[kMemoryKinds] = {"heap", "heap_free", "runtime", "stacks", "native", "file", "shmem"};

bool kind_from_name(const std::string& name, MemoryKind& k) {
  for (size_t i = 0; i < kMemoryKinds; ++i)
    if (name == kKindNames[i]) return k = static_cast<MemoryKind>(i), true;
  return false;
}

// The items of the array `a` (what `where` names), at most `max`, each
// decoded by item(JsonFields&, T&) into `out`: false, with why, otherwise.
template <typename T, typename Item>
bool bounded_items(const nlohmann::json& a, const std::string& where, size_t max, std::vector<T>& out,
                   std::string& why, Item item) {
  if (!a.is_array() || a.size() > max) {
    why = where + " is not an array of at most " + std::to_string(max);
    return false;
  }
  out.clear();
  for (const auto& e : a) {
    JsonFields ef(e, where, why);
    T x;
    if (!item(ef, x) || !ef.ok()) return false;
    out.push_back(std::move(x));
  }
  return true;
}

}  // namespace

const char* memory_kind_name(MemoryKind k) {
  const auto i = static_cast<size_t>(k);
  return i < kMemoryKinds ? kKindNames[i] : "?";
}

uint64_t MemoryBreakdown::total() const {
  uint64_t t = 0;
  for (uint64_t b : bytes) t += b;
  return t;
}

void MemoryBreakdown::add_detail(MemoryKind k, std::string what, uint64_t n) {
  // Names are a target's bytes (file names): valid UTF-8 within the bound
  // here, so that the JSON encoder's replacements cannot lengthen them past
  // what the parent accepts.
  detail.push_back({k, utf8_prefix(what, kMaxDetailWhat), n});
  // Keep the list short while it grows (a process with many mappings adds
  // one entry per mapping): trim to the largest once it doubles.
  if (detail.size() >= 4 * kMaxDetail) finish_detail();
}

void MemoryBreakdown::finish_detail() {
  std::sort(detail.begin(), detail.end(), [](const BreakdownDetail& a, const BreakdownDetail& b) {
    return std::tie(b.bytes, a.kind, a.what) < std::tie(a.bytes, b.kind, b.what);
  });
  if (detail.size() > kMaxDetail) detail.resize(kMaxDetail);
}

nlohmann::json to_json(const MemoryBreakdown& b) {
  nlohmann::json j;
  j["status"] = b.status;
  if (!b.reason.empty()) j["reason"] = b.reason;
  j["mappings"] = b.mappings;
  if (!b.source.empty()) j["source"] = b.source;
  j["duration_ms"] = b.duration_ms;
  for (size_t i = 0; i < kMemoryKinds; ++i) j[kKindNames[i]] = b.bytes[i];
  nlohmann::json d = nlohmann::json::array();
  for (const auto& e : b.detail) d.push_back({{"kind", memory_kind_name(e.kind)}, {"what", e.what}, {"bytes", e.bytes}});
  j["detail"] = std::move(d);
  if (b.tmpfs) j["tmpfs"] = to_json(*b.tmpfs);
  return j;
}

nlohmann::json to_json(const TmpfsFiles& t) {
  nlohmann::json j{{"bytes", t.bytes}, {"files", t.files}};
  nlohmann::json l = nlohmann::json::array();
  for (const auto& f : t.largest) l.push_back({{"path", f.path}, {"bytes", f.bytes}});
  j["largest"] = std::move(l);
  if (!t.reason.empty()) j["reason"] = t.reason;
  j["duration_ms"] = t.duration_ms;
  return j;
}

bool tmpfs_files_from_json(const nlohmann::json& j, TmpfsFiles& out, std::string& why) {
  JsonFields f(j, "breakdown.tmpfs", why);
  out.bytes = f.u64("bytes");
  out.files = f.u64("files");
  out.reason = f.str("reason", false);
  out.duration_ms = f.num("duration_ms", false);  // not in records before it
  if (f.ok() && !(out.duration_ms >= 0 && out.duration_ms < 1e9)) f.fail("duration_ms out of range");
  const nlohmann::json* l = f.get("largest", true);
  if (!f.ok()) return false;
  return bounded_items(*l, "breakdown.tmpfs.largest", TmpfsFiles::kMaxFiles, out.largest, why,
                       [](JsonFields& ef, TmpfsFiles::File& x) {
                         x.path = ef.str("path");
                         x.bytes = ef.u64("bytes");
                         if (ef.ok() && x.path.size() > TmpfsFiles::kMaxPath)
                           ef.fail("a path longer than " + std::to_string(TmpfsFiles::kMaxPath));
                         return ef.ok();
                       });
}

bool memory_breakdown_from_json(const nlohmann::json& j, MemoryBreakdown& out, std::string& why) {
  JsonFields f(j, "breakdown", why);
  out.status = f.str("status");
  if (f.ok() && out.status != "complete" && out.status != "partial" && out.status != "failed")
    f.fail("unknown status");
  out.reason = f.str("reason", false);
  out.mappings = f.u64("mappings");
  out.source = f.str("source", false);
  if (f.ok() && !out.source.empty() && out.source != "smaps" && out.source != "pagemap_scan")
    f.fail("unknown source");
  out.duration_ms = f.num("duration_ms");
  if (f.ok() && !(out.duration_ms >= 0 && out.duration_ms < 1e9)) f.fail("duration_ms out of range");
  for (size_t i = 0; i < kMemoryKinds; ++i) out.bytes[i] = f.u64(kKindNames[i]);
  const nlohmann::json* d = f.get("detail", true);
  if (!f.ok()) return false;
  const bool detail_ok = bounded_items(*d, "breakdown.detail", MemoryBreakdown::kMaxDetail, out.detail, why,
                                       [](JsonFields& ef, BreakdownDetail& x) {
                                         const std::string kind = ef.str("kind");
                                         x.what = ef.str("what");
                                         x.bytes = ef.u64("bytes");
                                         if (ef.ok() && (!kind_from_name(kind, x.kind) ||
                                                         x.what.size() > MemoryBreakdown::kMaxDetailWhat))
                                           ef.fail("unknown kind or a name longer than " +
                                                   std::to_string(MemoryBreakdown::kMaxDetailWhat));
                                         return ef.ok();
                                       });
  if (!detail_ok) return false;
  out.tmpfs.reset();
  if (const auto it = j.find("tmpfs"); it != j.end()) {
    TmpfsFiles t;
    if (!tmpfs_files_from_json(*it, t, why)) return false;
    out.tmpfs = std::move(t);
  }
  return true;
}

}  // namespace oomsnap
