#include "agent/records/record_limit.h"

#include <algorithm>
#include <vector>

namespace oomsnap {

std::string dump_printable_json(const nlohmann::json& j) {
  std::string s = j.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
  // ensure_ascii escapes everything past 0x7f and below 0x20, not DEL. DEL
  // is never JSON syntax, so each one is inside a string: escape it there.
  if (s.find('\x7f') == std::string::npos) return s;
  std::string out;
  out.reserve(s.size() + 16);
  for (char c : s) {
    if (c == '\x7f') out += "\\u007f";
    else out += c;
  }
  return out;
}

namespace {

using nlohmann::json;

std::string dump(const json& j) { return dump_printable_json(j); }

// The snapshot of `holder` (the record, or one of its other_processes), if
// it has one with entries.
json* snapshot_of(json& holder) {
  auto td = holder.find("tracer_data");
  if (td == holder.end() || !td->is_object()) return nullptr;
  auto snap = td->find("snapshot");
  if (snap == td->end() || !snap->is_object()) return nullptr;
  auto entries = snap->find("entries");
  return entries != snap->end() && entries->is_array() ? &*snap : nullptr;
}

// Every snapshot in the record, least important first: the other processes'
// from the last to the first, then the victim's.
std::vector<json*> snapshots_least_important_first(json& record) {
  std::vector<json*> out;
  auto others = record.find("other_processes");
  if (others != record.end() && others->is_array())
    for (auto it = others->rbegin(); it != others->rend(); ++it)
      if (it->is_object())
        if (json* s = snapshot_of(*it)) out.push_back(s);
  if (json* s = snapshot_of(record)) out.push_back(s);
  return out;
}

// Every string longer than `max_chars` cut (at a UTF-8 boundary) with a
// marker, every array longer than `max_items` cut; returns whether anything was.
bool clamp_everywhere(json& j, size_t max_chars, size_t max_items) {
  bool cut = false;
  if (j.is_string()) {
    auto& s = j.get_ref<std::string&>();
    if (s.size() > max_chars) {
      size_t n = max_chars;
      while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // not inside a UTF-8 sequence
      s.resize(n);
      s += "...";
      cut = true;
    }
  } else if (j.is_array()) {
    if (j.size() > max_items) {
      j.erase(j.begin() + static_cast<std::ptrdiff_t>(max_items), j.end());
      cut = true;
    }
    for (auto& v : j) cut |= clamp_everywhere(v, max_chars, max_items);
  } else if (j.is_object()) {
    for (auto& [k, v] : j.items()) cut |= clamp_everywhere(v, max_chars, max_items);
  }
  return cut;
}

// Keeps the most entries (they are ordered by bytes, largest first) that
// let `record` fit in `max_bytes`; returns how many. Each entry is measured
// once, so a record of 100k entries costs one pass, not a dump per guess.
size_t fit_entries(json& record, json& entries, size_t max_bytes) {
  json all = json::array();
  all.swap(entries);
  size_t size = dump(record).size();  // with an empty entries array
  size_t kept = 0;
  for (; kept < all.size(); ++kept) {
    const size_t add = dump(all[kept]).size() + (kept ? 1 : 0);  // the comma
    if (size + add > max_bytes) break;
    size += add;
  }
  all.erase(all.begin() + static_cast<std::ptrdiff_t>(kept), all.end());
  entries.swap(all);
  return kept;
}

// What is left when even clamped the record is too big: the fields that say
// what happened, where and to whom.
json essentials(const json& record) {
  json out = json::object();
  for (const char* k : {"time", "node", "victim_pid", "comm", "score"})
    if (record.contains(k)) out[k] = record[k];
  if (record.contains("container") && record["container"].is_object())
    for (const char* k : {"cgroup_path", "usage_bytes", "limit_bytes"})
      if (record["container"].contains(k)) out["container"][k] = record["container"][k];
  clamp_everywhere(out, 256, 8);
  return out;
}

// The entry lists of those snapshots in the order they give way: per
// snapshot its recent allocations (Go) before its in-use entries.
struct EntryList {
  json* snapshot;
  json* entries;
};
std::vector<EntryList> entry_lists(const std::vector<json*>& snapshots) {
  std::vector<EntryList> out;
  for (json* s : snapshots) {
    auto recent = s->find("recent");
    if (recent != s->end() && recent->is_object()) {
      auto list = recent->find("entries");
      if (list != recent->end() && list->is_array()) out.push_back({s, &*list});
    }
    out.push_back({s, &(*s)["entries"]});
  }
  return out;
}

}  // namespace

std::string serialise_record(const json& record, size_t max_bytes) {
  std::string line = dump(record);
  if (line.size() <= max_bytes) return line;
  const size_t original = line.size();
  // Room for the two fields that say what was cut.
  const size_t budget = max_bytes > 2048 ? max_bytes - 512 : max_bytes / 2;
  json r = record;
  std::string what;
  // Stacks first get a sane depth (names of 1 KiB, 64 frames) everywhere.
  const auto snapshots = snapshots_least_important_first(r);
  const auto lists = entry_lists(snapshots);
  for (const auto& l : lists) {
    bool clamped = false;
    for (auto& e : *l.entries) clamped |= clamp_everywhere(e, 1024, 64);
    if (clamped) (*l.snapshot)["output_truncated"] = true;
  }
  // Then entries go, the least important snapshot's first: each keeps what
  // fits while the more important ones are still whole.
  size_t before = 0, kept = 0;
  for (const auto& l : lists) {
    const size_t n = l.entries->size();
    const size_t k = fit_entries(r, *l.entries, budget);
    before += n;
    kept += k;
    if (k < n) (*l.snapshot)["output_truncated"] = true;
  }
  if (!snapshots.empty()) what = std::to_string(kept) + " of " + std::to_string(before) + " snapshot entries kept";
  line = dump(r);
  if (line.size() > budget) {
    for (size_t chars = 1024, items = 64; line.size() > budget && chars >= 16; chars /= 4, items /= 4) {
      clamp_everywhere(r, chars, std::max<size_t>(items, 1));
      line = dump(r);
    }
    what += std::string(what.empty() ? "" : "; ") + "strings and lists cut";
  }
  auto mark = [&](json& j) {
    j["output_truncated"] = true;
    j["output_truncated_reason"] = "record of " + std::to_string(original) + " bytes over the " +
                                   std::to_string(max_bytes) + "-byte limit: " + what;
    return dump(j);
  };
  line = mark(r);
  if (line.size() > max_bytes) {
    r = essentials(record);
    what = "only the essentials kept";
    line = mark(r);
  }
  return line;
}

}  // namespace oomsnap
