#include "core/memory_breakdown.h"

#include <algorithm>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/json_fields.h"

namespace oomsnap {
namespace {

constexpr const char* kKindNames[kMemoryKinds] = {"heap", "heap_free", "runtime", "stacks", "native", "file", "shmem"};

bool kind_from_name(const std::string& name, MemoryKind& k) {
  for (size_t i = 0; i < kMemoryKinds; ++i)
    if (name == kKindNames[i]) return k = static_cast<MemoryKind>(i), true;
  return false;
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
  if (what.size() > kMaxDetailWhat) what.resize(kMaxDetailWhat);
  detail.push_back({k, std::move(what), n});
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
  return j;
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
  if (!d->is_array() || d->size() > MemoryBreakdown::kMaxDetail) {
    why = "breakdown: detail is not an array of at most " + std::to_string(MemoryBreakdown::kMaxDetail);
    return false;
  }
  out.detail.clear();
  for (const auto& e : *d) {
    JsonFields ef(e, "breakdown.detail", why);
    BreakdownDetail x;
    const std::string kind = ef.str("kind");
    x.what = ef.str("what");
    x.bytes = ef.u64("bytes");
    if (!ef.ok()) return false;
    if (!kind_from_name(kind, x.kind) || x.what.size() > MemoryBreakdown::kMaxDetailWhat) {
      why = "breakdown.detail: unknown kind or a name longer than " + std::to_string(MemoryBreakdown::kMaxDetailWhat);
      return false;
    }
    out.detail.push_back(std::move(x));
  }
  return true;
}

}  // namespace oomsnap
