#include "cli/record_text.h"

#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "base/text.h"
#include "cli/terminal_text.h"

namespace oomsnap {
namespace {

using json = nlohmann::json;

// Cuts for text a record supplies: a record may be 1 MiB, almost all of it
// one name, and a screen line should stay a line.
constexpr size_t kMaxWordBytes = 256;    // comm, node, runtime version, type names
constexpr size_t kMaxTextBytes = 1024;   // cgroup paths, reasons
constexpr size_t kMaxNameBytes = 160;    // the name column of an entry table
constexpr size_t kVictimEntries = 20;    // entries shown for the victim (the agent keeps 10 by default)
constexpr size_t kRecentEntries = 5;     // the victim's allocations since the last GC (Go)
constexpr size_t kOtherEntries = 3;      // ... for each other process
constexpr size_t kGoroutineGroups = 5;   // the census's groups (the agent keeps 5)
constexpr size_t kMaxListed = 16;        // other processes, killed processes, trigger kinds
constexpr size_t kLabelWidth = 12;       // "collection  "

// ---------------------------------------------------------- reading fields
// Every accessor answers "absent" for a missing field or one of the wrong
// type, so a damaged record renders what it can instead of throwing.

const json* field(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

const json* object_at(const json& j, const char* key) {
  const json* v = field(j, key);
  return v && v->is_object() ? v : nullptr;
}

const json* array_at(const json& j, const char* key) {
  const json* v = field(j, key);
  return v && v->is_array() ? v : nullptr;
}

std::optional<std::string> text_at(const json& j, const char* key, size_t max_bytes = kMaxWordBytes) {
  const json* v = field(j, key);
  if (!v || !v->is_string()) return std::nullopt;
  return terminal_safe(v->get_ref<const std::string&>(), max_bytes);
}

std::optional<uint64_t> u64_at(const json& j, const char* key) {
  const json* v = field(j, key);
  if (!v) return std::nullopt;
  if (v->is_number_unsigned()) return v->get<uint64_t>();
  if (v->is_number_integer() && v->get<int64_t>() >= 0) return static_cast<uint64_t>(v->get<int64_t>());
  return std::nullopt;
}

std::optional<int64_t> i64_at(const json& j, const char* key) {
  const json* v = field(j, key);
  if (!v) return std::nullopt;
  if (v->is_number_integer() && !v->is_number_unsigned()) return v->get<int64_t>();
  if (v->is_number_unsigned() && v->get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX))
    return static_cast<int64_t>(v->get<uint64_t>());
  return std::nullopt;
}

std::optional<double> number_at(const json& j, const char* key) {
  const json* v = field(j, key);
  if (!v || !v->is_number()) return std::nullopt;
  return v->get<double>();
}

std::optional<bool> bool_at(const json& j, const char* key) {
  const json* v = field(j, key);
  if (!v || !v->is_boolean()) return std::nullopt;
  return v->get<bool>();
}

// ------------------------------------------------------------- formatting

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

// 1234567 -> "1,234,567": object counts are read, not parsed.
std::string grouped(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string ms_text(double ms) { return format("%.1f ms", ms); }

// "1 process", "4 processes": counts in sentences.
std::string count_of(uint64_t n, const char* one, const char* many) {
  return grouped(n) + " " + (n == 1 ? one : many);
}

// Lines of a block: a label column, then the text; continuation lines
// leave the label column blank so a block reads as a form.
class Block {
 public:
  void line(std::string_view label, const std::string& text) {
    std::string l(label);
    l.resize(kLabelWidth, ' ');
    out_ += l + text + "\n";
  }
  void more(const std::string& text) { line("", text); }
  void raw(const std::string& text) { out_ += text + "\n"; }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// ------------------------------------------------------------- the parts

// memory.stat's kinds that add up to the charge, and shmem (part of file),
// in that order; the kinds the record lacks are left out.
std::string charge_text(const json& stat) {
  if (auto error = text_at(stat, "error")) return "memory.stat not read: " + *error;
  std::string t;
  for (const char* kind : {"anon", "file", "shmem", "kernel", "swap"}) {
    auto v = u64_at(stat, kind);
    if (!v) continue;
    if (!t.empty()) t += ", ";
    t += std::string(kind) + " " + human_bytes(*v);
  }
  return t.empty() ? "(no memory.stat kinds)" : t;
}

// The charge kinds of container.explained, in the record's order, as a
// person reads them.
constexpr std::pair<const char*, const char*> kChargeKinds[] = {
    {"heap", "heap"},     {"heap_free", "heap free"}, {"runtime", "runtime"},       {"stacks", "stacks"},
    {"native", "native"}, {"anon", "anon"},           {"file", "file"},             {"shmem", "shmem"},
    {"tmpfs", "tmpfs"},   {"page_cache", "page cache"}, {"kernel", "kernel"}};
constexpr size_t kBarKinds = 5;       // kinds named on the line; the rest as "+N more"
constexpr double kPercentPerCell = 5;  // a full line of kinds is 20 cells

// "▕███▏" on a terminal, "[###]" elsewhere: one cell per 5 %, at least one.
std::string bar_cells(double percent, bool unicode) {
  const size_t n = std::max<size_t>(1, static_cast<size_t>(percent / kPercentPerCell + 0.5));
  std::string cells;
  for (size_t i = 0; i < n; ++i) cells += unicode ? "\xE2\x96\x88" : "#";  // U+2588 full block
  return unicode ? "\xE2\x96\x95" + cells + "\xE2\x96\x8F" : "[" + cells + "]";  // U+2595, U+258F
}

// Where the container's memory went, on one line: the kinds of at least
// 1 % of the usage, largest first, then what the record explains of it.
void render_memory_bar(Block& b, const json& rec, bool unicode) {
  const json* c = object_at(rec, "container");
  const json* e = c ? object_at(*c, "explained") : nullptr;
  const json* kinds = e ? object_at(*e, "kinds") : nullptr;
  if (!kinds) return;
  const auto explained = u64_at(*e, "explained_bytes");
  const auto usage = u64_at(*e, "usage_bytes");
  const uint64_t total = usage.value_or(explained.value_or(0));
  if (total == 0) return;
  auto percent = [total](uint64_t v) { return 100.0 * static_cast<double>(v) / static_cast<double>(total); };
  std::vector<std::pair<uint64_t, const char*>> shown;
  for (const auto& [key, name] : kChargeKinds)
    if (auto v = u64_at(*kinds, key); v && percent(*v) >= 0.5) shown.emplace_back(*v, name);
  std::stable_sort(shown.begin(), shown.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  std::vector<std::string> parts;
  for (size_t i = 0; i < shown.size() && i < kBarKinds; ++i)
    parts.push_back(format("%s %.0f%% ", shown[i].second, percent(shown[i].first)) +
                    bar_cells(percent(shown[i].first), unicode));
  if (shown.size() > kBarKinds) {
    uint64_t rest = 0;
    for (size_t i = kBarKinds; i < shown.size(); ++i) rest += shown[i].first;
    parts.push_back(format("+%zu more %.0f%%", shown.size() - kBarKinds, percent(rest)));
  }
  if (auto u = u64_at(*e, "unexplained_bytes"); u && percent(*u) >= 0.5)
    parts.push_back(format("unexplained %.0f%% ", percent(*u)) + bar_cells(percent(*u), unicode));
  std::string t = join(parts, "  ") + (parts.empty() ? "" : "  | ");
  if (usage && explained) t += format("%.0f%% explained of ", percent(*explained)) + human_bytes(*usage);
  else t += human_bytes(explained.value_or(0)) + " explained, usage not known";
  if (auto over = u64_at(*e, "over_bytes"); over && *over)
    t += ", the parts exceed it by " + human_bytes(*over);
  if (text_at(*e, "source") == std::optional<std::string>("kernel_oom_report")) t += ", from the kernel's OOM report";
  b.line("memory", t);
  // Which files the tmpfs is, when it is a part worth naming.
  const json* files = object_at(*e, "tmpfs_files");
  const json* largest = files ? array_at(*files, "largest") : nullptr;
  if (auto tmpfs = u64_at(*kinds, "tmpfs"); tmpfs && percent(*tmpfs) >= 5 && largest && !largest->empty()) {
    std::vector<std::string> named;
    for (const json& f : *largest) {
      if (named.size() == 3) break;
      const auto path = f.is_object() ? f.find("path") : f.end();
      if (path == f.end() || !path->is_string()) continue;
      named.push_back(terminal_safe(path->get_ref<const std::string&>(), kMaxTextBytes) + " " +
                      human_bytes(u64_at(f, "bytes").value_or(0)));
    }
    const uint64_t count = u64_at(*files, "files").value_or(0);
    b.more("tmpfs files: " + join(named, ", ") +
           (count > named.size() ? " (of " + std::to_string(count) + " files)" : ""));
  }
  if (const json* notes = array_at(*e, "notes")) {
    size_t n = 0;
    for (const json& note : *notes)
      if (note.is_string() && n++ < 3) b.more("(" + terminal_safe(note.get_ref<const std::string&>(), kMaxTextBytes) + ")");
  }
}

// The container's largest processes, as the kernel's OOM report lists them.
void render_tasks(Block& b, const json& c) {
  const json* tasks = array_at(c, "tasks");
  if (!tasks) return;
  constexpr size_t kShown = 3;
  size_t shown = 0;
  for (const json& task : *tasks) {
    if (shown == kShown || !task.is_object()) break;
    std::string t = "pid " + std::to_string(i64_at(task, "pid").value_or(0)) + " " +
                    text_at(task, "comm", kMaxTextBytes).value_or("?") + ", rss " +
                    human_bytes(u64_at(task, "rss_bytes").value_or(0));
    if (auto adj = i64_at(task, "oom_score_adj"); adj && *adj) t += ", oom_score_adj " + std::to_string(*adj);
    b.line(shown++ ? "" : "processes", t);
  }
  if (auto total = u64_at(c, "tasks_total"); total && *total > shown)
    b.more("and " + count_of(*total - shown, "more process", "more processes"));
  if (auto cut = text_at(c, "tasks_cut", kMaxTextBytes)) b.more("scan cut: " + *cut);
}

void render_container(Block& b, const json& rec) {
  const json* c = object_at(rec, "container");
  if (!c) {
    b.line("container", "(not recorded)");
    return;
  }
  b.line("container", text_at(*c, "cgroup_path", kMaxTextBytes).value_or("(no cgroup path)"));
  auto ns = text_at(*c, "pod_namespace"), pod = text_at(*c, "pod_name"), name = text_at(*c, "container_name");
  if (pod) {
    std::string t = "pod " + (ns ? *ns + "/" : "") + *pod;
    if (name) t += ", container " + *name;
    b.more(t);
  } else if (name) {
    b.more("container " + *name);
  }
  if (auto id = text_at(*c, "container_id")) {
    auto runtime = text_at(*c, "runtime");
    b.more((runtime ? *runtime + " " : "") + "container id " + *id);
  }

  auto usage = u64_at(*c, "usage_bytes"), limit = u64_at(*c, "limit_bytes");
  std::string t = usage ? human_bytes(*usage) : "?";
  if (limit && *limit) {
    t += " of " + human_bytes(*limit) + " limit";
    if (usage) t += format(" (%.1f%%)", 100.0 * static_cast<double>(*usage) / static_cast<double>(*limit));
  } else {
    t += ", no limit";
  }
  if (auto high = u64_at(*c, "high_bytes")) t += ", high " + human_bytes(*high);
  if (auto swap = u64_at(*c, "swap_bytes"); swap && *swap) t += ", swap " + human_bytes(*swap);
  b.line("usage", t);
  if (const json* stat = object_at(*c, "memory_stat")) b.line("charge", charge_text(*stat));
  render_tasks(b, *c);
}

void render_trigger(Block& b, const json& rec, bool exit_record) {
  const json* t = object_at(rec, "trigger");
  if (!t) return;
  std::string line = text_at(*t, "type").value_or("?");
  if (auto src = text_at(*t, "source")) line += " from " + *src;
  if (auto pid = i64_at(*t, "pid")) line += format(", pid %lld", static_cast<long long>(*pid));
  b.line("trigger", line);
  if (auto merged = u64_at(*t, "merged"); merged && *merged)
    b.more(count_of(*merged, "more trigger", "more triggers") + " merged within the batch window");

  // What else fired while the incident was open, by kind and count, in
  // the order first seen.
  if (const json* seen = array_at(rec, "triggers_seen")) {
    std::vector<std::pair<std::string, uint64_t>> kinds;
    for (const auto& s : *seen) {
      std::string type = text_at(s, "type").value_or("?");
      auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == type; });
      if (it != kinds.end()) ++it->second;
      else if (kinds.size() < kMaxListed) kinds.emplace_back(type, 1);
    }
    std::vector<std::string> parts;
    for (const auto& [type, n] : kinds) parts.push_back(n > 1 ? type + format(" x%llu", static_cast<unsigned long long>(n)) : type);
    if (!parts.empty()) b.more("triggers seen: " + join(parts, ", "));
  }

  const json* counters = object_at(*t, "counters");
  if (!counters) return;
  if (!exit_record) {
    // An OOM-kill record without a snapshot, bounded per container
    // (MaxOomKillRecordsPerMinute): the kills before it that have none.
    if (auto n = u64_at(*counters, "suppressed_oom_kills"); n && *n) {
      std::string s = count_of(*n, "earlier OOM kill", "earlier OOM kills") + " in this container not recorded";
      if (auto ms = u64_at(*counters, "suppressed_oom_kills_span_ms"))
        s += ", over " + format("%.1f", static_cast<double>(*ms) / 1000.0) + " s";
      b.more(s);
    }
    if (bool_at(*counters, "held_until_window_end").value_or(false))
      b.more("written when the container's OOM-kill-record minute ended, not at the kill");
    return;
  }
  if (auto n = u64_at(*counters, "suppressed_exits"); n && *n) {
    std::string s = count_of(*n, "earlier exit", "earlier exits") + " in this container not recorded";
    if (auto k = u64_at(*counters, "suppressed_exits_in_kernel"); k && *k)
      s += format(" (%llu never sent by the kernel)", static_cast<unsigned long long>(*k));
    b.more(s);
  }
  if (bool_at(*counters, "held_until_window_end").value_or(false))
    b.more("written when the container's exit-record minute ended, not at the exit");
}

// Relative to the first trigger: where the time went in this incident.
void render_timeline(Block& b, const json& rec) {
  const json* tl = object_at(rec, "timeline");
  if (!tl) return;
  const char* base_key = u64_at(*tl, "trigger_ns") ? "trigger_ns" : "received_ns";
  auto base = u64_at(*tl, base_key);
  if (!base) return;
  static constexpr std::pair<const char*, const char*> kSteps[] = {
      {"trigger_ns", "first trigger"},          {"decided_ns", "decision"},
      {"collection_start_ns", "collection start"}, {"snapshot_complete_ns", "snapshot complete"},
      {"oom_kill_ns", "OOM kill"},              {"exit_ns", "exit"}};
  std::vector<std::pair<std::string, const char*>> rows;
  if (std::string_view(base_key) == "received_ns") rows.emplace_back("+0.0 ms", "received (no kernel time)");
  for (const auto& [key, what] : kSteps) {
    auto ns = u64_at(*tl, key);
    if (!ns) continue;
    const double ms = (static_cast<double>(*ns) - static_cast<double>(*base)) / 1e6;
    rows.emplace_back((ms < 0 ? "" : "+") + ms_text(ms), what);
  }
  if (rows.size() < 2) return;  // a lone "+0.0 ms first trigger" says nothing
  size_t width = 0;
  for (const auto& r : rows) width = std::max(width, r.first.size());
  bool first = true;
  for (const auto& [when, what] : rows) {
    std::string t = std::string(width - when.size(), ' ') + when + "  " + what;
    first ? b.line("timeline", t) : b.more(t);
    first = false;
  }
}

std::string process_memory_text(const json& pm) {
  std::vector<std::string> parts;
  if (auto rss = u64_at(pm, "rss_bytes")) {
    std::vector<std::string> split;
    if (auto v = u64_at(pm, "rss_anon_bytes")) split.push_back("anon " + human_bytes(*v));
    if (auto v = u64_at(pm, "rss_file_bytes")) split.push_back("file " + human_bytes(*v));
    if (auto v = u64_at(pm, "rss_shmem_bytes")) split.push_back("shmem " + human_bytes(*v));
    parts.push_back("rss " + human_bytes(*rss) + (split.empty() ? "" : " (" + join(split, ", ") + ")"));
  }
  if (auto v = u64_at(pm, "swap_bytes")) parts.push_back("swap " + human_bytes(*v));
  if (auto v = u64_at(pm, "page_table_bytes")) parts.push_back("page tables " + human_bytes(*v));
  if (auto v = u64_at(pm, "virtual_bytes")) parts.push_back("virtual " + human_bytes(*v));
  auto status = text_at(pm, "status", kMaxTextBytes);
  if (status && *status != "ok") parts.push_back("memory: " + *status);
  return join(parts, ", ");
}

// process_memory.breakdown on one line: the kinds that hold anything,
// largest first, and the largest contributor by name.
std::optional<std::string> breakdown_text(const json& pm) {
  const json* b = object_at(pm, "breakdown");
  if (!b) return std::nullopt;
  const std::string status = text_at(*b, "status").value_or("?");
  if (status == "failed")
    return "rss by kind: not read (" + text_at(*b, "reason", kMaxTextBytes).value_or("no reason") + ")";
  std::vector<std::pair<uint64_t, const char*>> kinds;
  for (const char* k : {"heap", "heap_free", "runtime", "stacks", "native", "file", "shmem"})
    if (auto v = u64_at(*b, k); v && *v) kinds.emplace_back(*v, k);
  std::stable_sort(kinds.begin(), kinds.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  std::vector<std::string> parts;
  for (const auto& [v, k] : kinds) parts.push_back(std::string(k) + " " + human_bytes(v));
  std::string t = "rss by kind: " + (parts.empty() ? std::string("nothing resident") : join(parts, ", "));
  const json* detail = array_at(*b, "detail");
  if (detail && !detail->empty() && (*detail)[0].is_object()) {
    const json& d = (*detail)[0];
    t += "; largest: " + text_at(d, "what", kMaxTextBytes).value_or("?") + " (" +
         text_at(d, "kind").value_or("?") + ", " + human_bytes(u64_at(d, "bytes").value_or(0)) + ")";
  }
  if (status != "complete") t += " [" + status + ": " + text_at(*b, "reason", kMaxTextBytes).value_or("") + "]";
  return t;
}

std::string process_head(const json& p, const char* pid_key) {
  auto pid = i64_at(p, pid_key);
  std::string t = pid ? format("pid %lld", static_cast<long long>(*pid)) : "pid ?";
  if (auto comm = text_at(p, "comm")) t += " " + *comm;
  if (auto score = i64_at(p, "score")) t += format(", score %lld", static_cast<long long>(*score));
  if (auto adj = i64_at(p, "oom_score_adj")) t += format(", oom_score_adj %lld", static_cast<long long>(*adj));
  return t;
}

// "go go1.26.1, complete in 12.3 ms" and what qualifies it.
std::string snapshot_head(const json& tracer, const json& snap) {
  std::string t = text_at(tracer, "language").value_or("?");
  // A version that names its runtime ("node v22.23.5, V8 12.4") stands alone.
  if (auto v = text_at(snap, "runtime_version"); v && !v->empty()) t = v->starts_with(t + " ") ? *v : t + " " + *v;
  t += ", " + text_at(snap, "status").value_or("?");
  if (auto d = number_at(snap, "duration_ms")) t += " in " + ms_text(*d);
  if (auto rate = u64_at(snap, "sample_rate")) t += ", sample rate " + human_bytes(*rate);
  return t;
}

// The totals the Python and Java readers report, the ones a person asks
// about first; the JSON has the rest.
std::string scope_text(const json& snap) {
  std::vector<std::string> parts;
  if (auto scope = text_at(snap, "scope")) parts.push_back("scope " + *scope);
  if (auto cov = number_at(snap, "coverage")) parts.push_back(format("coverage %.2f%%", *cov * 100.0));
  return join(parts, ", ");
}

std::string totals_text(const json& snap) {
  const json* t = object_at(snap, "totals");
  std::vector<std::string> parts;
  if (t) {
    auto tracked = u64_at(*t, "gc_tracked_objects"), untracked = u64_at(*t, "referenced_untracked_objects");
    if (tracked && untracked)
      parts.push_back(grouped(*tracked) + " gc-tracked + " + grouped(*untracked) + " referenced untracked objects");
    if (auto v = u64_at(*t, "objects")) parts.push_back(grouped(*v) + " objects");
    if (auto v = u64_at(*t, "bytes")) parts.push_back(human_bytes(*v) + " in all");
    if (auto v = u64_at(*t, "used_bytes")) parts.push_back("heap used " + human_bytes(*v));
    if (auto v = u64_at(*t, "parsed_bytes")) parts.push_back("parsed " + human_bytes(*v));
    if (auto v = u64_at(*t, "unparsed_bytes"); v && *v) parts.push_back("unparsed " + human_bytes(*v));
    if (auto v = u64_at(*t, "humongous_objects"); v && *v) parts.push_back(grouped(*v) + " humongous");
    if (auto v = u64_at(*t, "sample_stride"); v && *v > 1)
      parts.push_back(format("sampled 1 of every %llu windows", static_cast<unsigned long long>(*v)));
  }
  return join(parts, ", ");
}

// The top entries as a table under the text column. Go's name is the leaf
// frame of the allocation stack; its caller says which path allocated.
void render_entry_table(Block& b, const json* entries, size_t max_rows);

void render_entries(Block& b, const json& snap, size_t max_rows) {
  const json* entries = array_at(snap, "entries");
  if (!entries || entries->empty()) {
    // A failed snapshot has none, and its reason says why.
    if (text_at(snap, "status") != "failed") b.more("(no entries)");
    return;
  }
  render_entry_table(b, entries, max_rows);
  if (bool_at(snap, "output_truncated").value_or(false)) b.more("(the target had more entries; the record keeps these)");
}

// Go: what was allocated since the last GC, which the in-use view above does
// not have yet (snapshot.recent) — at OOM time often the part that kills.
void render_recent(Block& b, const json& snap, size_t max_rows) {
  const json* recent = object_at(snap, "recent");
  if (!recent) return;
  auto bytes = u64_at(*recent, "bytes"), objects = u64_at(*recent, "objects");
  b.line("since GC", format("%s in %s objects allocated since the last GC, not in the view above (net of frees)",
                            bytes ? human_bytes(*bytes).c_str() : "?", objects ? grouped(*objects).c_str() : "?"));
  if (const json* entries = array_at(*recent, "entries"); entries && !entries->empty())
    render_entry_table(b, entries, max_rows);
}

// Go: the goroutine census (snapshot.goroutines) — a goroutine leak shows as
// one large group parked at the same place. Each group is named by its first
// frame outside package runtime (the leaf is nearly always runtime.gopark;
// the wait reason already says what it waits for) and its caller.
void render_goroutines(Block& b, const json& snap, size_t max_rows) {
  // A group's line stays a line whatever the target named its functions.
  constexpr size_t kState = 40, kFrame = 120, kCaller = 80, kCreator = 80;
  const json* g = object_at(snap, "goroutines");
  if (!g) return;
  std::string head = u64_at(*g, "total") ? grouped(*u64_at(*g, "total")) : "?";
  std::vector<std::string> states;
  if (const json* by = object_at(*g, "by_state")) {
    std::vector<std::pair<uint64_t, std::string>> sorted;
    for (const auto& [k, v] : by->items())
      if (v.is_number_unsigned() && sorted.size() < kMaxListed)
        sorted.emplace_back(v.get<uint64_t>(), terminal_safe(k, kState));
    std::stable_sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
    for (const auto& [n, k] : sorted) states.push_back(k + " " + grouped(n));
  }
  if (!states.empty()) head += " (" + join(states, ", ") + ")";
  if (auto sys = u64_at(*g, "system"); sys && *sys) head += ", " + count_of(*sys, "runtime goroutine", "runtime goroutines") + " apart";
  b.line("goroutines", head);
  if (auto status = text_at(*g, "status"); status && *status != "complete") {
    std::string t = "census " + *status;
    if (auto r = text_at(*g, "reason", kMaxTextBytes); r && !r->empty()) t += ": " + *r;
    b.more(t);
  }
  const json* groups = array_at(*g, "groups");
  if (!groups || groups->empty()) return;
  b.more(format("%10s  %-24s %s", "COUNT", "STATE", "PARKED IN (<- CALLER), CREATED BY"));
  size_t shown = 0;
  for (const auto& grp : *groups) {
    if (shown == max_rows) break;
    ++shown;
    auto count = u64_at(grp, "count");
    std::string state = text_at(grp, "state", kState).value_or("?");
    if (auto w = text_at(grp, "wait_reason", kState); w && !w->empty()) state += ": " + *w;
    std::string where;
    if (const json* stack = array_at(grp, "stack"); stack && !stack->empty()) {
      size_t at = 0;
      for (size_t i = 0; i < stack->size(); ++i) {
        const json& f = (*stack)[i];
        if (f.is_string() && f.get_ref<const std::string&>().rfind("runtime.", 0) != 0) {
          at = i;
          break;
        }
      }
      if ((*stack)[at].is_string()) where = terminal_safe((*stack)[at].get_ref<const std::string&>(), kFrame);
      if (at + 1 < stack->size() && (*stack)[at + 1].is_string())
        where += " <- " + terminal_safe((*stack)[at + 1].get_ref<const std::string&>(), kCaller);
    } else {
      where = text_at(grp, "start", kFrame).value_or("?") + " (started there; no stack: on a CPU, or moved while read)";
    }
    if (auto c = text_at(grp, "created_by", kCreator); c && !c->empty()) where += ", by " + *c;
    b.more(format("%10s  %-24s ", count ? grouped(*count).c_str() : "?", state.c_str()) + where);
  }
  if (groups->size() > shown || bool_at(*g, "groups_truncated").value_or(false))
    b.more("(more groups in the record or with oomsnap snapshot --profile goroutine)");
}

void render_entry_table(Block& b, const json* entries, size_t max_rows) {
  const bool sites = text_at(entries->front(), "kind").value_or("") == "allocation_site";
  b.more(format("%10s %11s  %s", "BYTES", "OBJECTS", sites ? "ALLOCATED IN (<- CALLER)" : "TYPE"));
  size_t shown = 0;
  for (const auto& e : *entries) {
    if (shown == max_rows) break;
    ++shown;
    auto bytes = u64_at(e, "bytes"), objects = u64_at(e, "objects");
    std::string name = text_at(e, "name", kMaxNameBytes).value_or("?");
    if (const json* stack = array_at(e, "stack"); stack && stack->size() > 1 && (*stack)[1].is_string())
      name += " <- " + terminal_safe((*stack)[1].get_ref<const std::string&>(), kMaxNameBytes);
    b.more(format("%10s %11s  ", bytes ? human_bytes(*bytes).c_str() : "?", objects ? grouped(*objects).c_str() : "?") +
           name);
  }
  if (entries->size() > shown) b.more(format("(%zu more entries in the record)", entries->size() - shown));
}

// Reason of the snapshot unless the collection's says the same thing.
void render_snapshot_reason(Block& b, const json& snap, const json* collection) {
  auto reason = text_at(snap, "reason", kMaxTextBytes);
  if (!reason || reason->empty()) return;
  auto creason = collection ? text_at(*collection, "reason", kMaxTextBytes) : std::nullopt;
  if (creason != reason) b.more("reason: " + *reason);
}

void render_victim(Block& b, const json& rec) {
  const json* pid = field(rec, "victim_pid");
  if (!pid || pid->is_null()) {
    b.line("victim", "none chosen");
  } else {
    b.line("victim", process_head(rec, "victim_pid"));
    if (const json* pm = object_at(rec, "process_memory")) {
      b.more(process_memory_text(*pm));
      if (auto t = breakdown_text(*pm)) b.more(*t);
    }
  }

  const json* coll = object_at(rec, "collection");
  if (coll) {
    std::string t = text_at(*coll, "status").value_or("?");
    if (auto r = text_at(*coll, "reason", kMaxTextBytes); r && !r->empty()) t += ": " + *r;
    b.line("collection", t);
    if (auto n = u64_at(*coll, "processes_without_runtime"); n && *n)
      b.more(count_of(*n, "other process", "other processes") + " without a supported runtime skipped");
    if (auto r = text_at(*coll, "other_processes_reason", kMaxTextBytes)) b.more("other processes: " + *r);
  }

  const json* tracer = object_at(rec, "tracer_data");
  const json* snap = tracer ? object_at(*tracer, "snapshot") : nullptr;
  if (!snap) return;
  b.line("snapshot", snapshot_head(*tracer, *snap));
  render_snapshot_reason(b, *snap, coll);
  if (auto t = scope_text(*snap); !t.empty()) b.more(t);
  if (auto t = totals_text(*snap); !t.empty()) b.more(t);
  render_entries(b, *snap, kVictimEntries);
  render_recent(b, *snap, kRecentEntries);
  render_goroutines(b, *snap, kGoroutineGroups);
}

void render_other(Block& b, const json& p) {
  std::string head = process_head(p, "pid");
  if (auto killed = bool_at(p, "killed")) head += *killed ? ", killed in the OOM kill" : ", not killed";
  b.line("other", head);
  if (const json* pm = object_at(p, "process_memory")) {
    b.more(process_memory_text(*pm));
    if (auto t = breakdown_text(*pm)) b.more(*t);
  }
  const json* coll = object_at(p, "collection");
  const json* tracer = object_at(p, "tracer_data");
  const json* snap = tracer ? object_at(*tracer, "snapshot") : nullptr;
  std::string t = coll ? text_at(*coll, "status").value_or("?") : "?";
  if (auto r = coll ? text_at(*coll, "reason", kMaxTextBytes) : std::nullopt; r && !r->empty()) t += ": " + *r;
  if (snap) t += "; snapshot " + snapshot_head(*tracer, *snap);
  b.more(t);
  if (!snap) return;
  render_snapshot_reason(b, *snap, coll);
  render_entries(b, *snap, kOtherEntries);
}

void render_oom_kill(Block& b, const json& rec) {
  const json* k = object_at(rec, "oom_kill");
  if (!k) return;
  std::string t = process_head(*k, "pid");
  if (auto rss = u64_at(*k, "rss_bytes")) t += ", rss " + human_bytes(*rss);
  if (auto when = text_at(*k, "time")) t += " at " + *when;
  b.line("oom kill", t);
  auto path = text_at(*k, "cgroup_path", kMaxTextBytes);
  const json* c = object_at(rec, "container");
  if (path && (!c || text_at(*c, "cgroup_path", kMaxTextBytes) != path)) b.more("in " + *path);
  // The kernel's own report: its task list's largest, as it printed them.
  if (const json* kr = object_at(*k, "kernel_report")) {
    std::vector<std::string> tasks;
    if (const json* list = array_at(*kr, "tasks"))
      for (const json& task : *list) {
        if (tasks.size() == 3) break;
        if (!task.is_object()) continue;
        tasks.push_back(terminal_safe(text_at(task, "name").value_or("?"), kMaxTextBytes) + " (" +
                        std::to_string(u64_at(task, "pid").value_or(0)) + ") " +
                        human_bytes(u64_at(task, "rss_bytes").value_or(0)));
      }
    const uint64_t total = u64_at(*kr, "tasks_total").value_or(tasks.size());
    std::string r = "kernel's report: " + std::to_string(total) + (total == 1 ? " task" : " tasks");
    if (!tasks.empty()) r += ", largest " + join(tasks, ", ");
    b.more(r);
  }

  const json* victim = field(rec, "victim_pid");
  const bool had_victim = victim && !victim->is_null();
  if (had_victim) {
    std::string m = bool_at(*k, "matches_victim").value_or(false) ? "the snapshotted process was killed"
                                                                  : "the snapshotted process was not killed";
    if (auto lead = number_at(*k, "lead_ms"))
      m += *lead >= 0 ? ", " + ms_text(*lead) + " after the snapshot completed"
                      : ", " + ms_text(-*lead) + " before the snapshot completed";
    b.more(m);
  }
  const json* killed = array_at(*k, "killed");
  const bool group = bool_at(*k, "group_kill").value_or(false);
  if (!killed || (!group && killed->size() <= 1)) return;
  b.more(std::string(group ? "group kill: " : "") + count_of(killed->size(), "process", "processes") + " killed");
  size_t shown = 0;
  for (const auto& p : *killed) {
    if (shown++ == kMaxListed) {
      b.more(format("  (%zu more)", killed->size() - kMaxListed));
      break;
    }
    std::string line = "  " + process_head(p, "pid");
    if (auto rss = u64_at(p, "rss_bytes")) line += ", rss " + human_bytes(*rss);
    b.more(line);
  }
}

// The name of the process that exited, wherever the record has it: an exit
// record's trigger counters, or the killed/victim process with that pid.
std::optional<std::string> exit_comm(const json& rec, int64_t pid) {
  if (const json* t = object_at(rec, "trigger"))
    if (const json* c = object_at(*t, "counters"))
      if (auto comm = text_at(*c, "comm")) return comm;
  if (i64_at(rec, "victim_pid") == pid) return text_at(rec, "comm");
  if (const json* k = object_at(rec, "oom_kill"))
    if (i64_at(*k, "pid") == pid) return text_at(*k, "comm");
  return std::nullopt;
}

void render_exit(Block& b, const json& rec) {
  const json* x = object_at(rec, "exit");
  if (!x) return;
  auto pid = i64_at(*x, "pid");
  std::string t = pid ? format("pid %lld", static_cast<long long>(*pid)) : "pid ?";
  if (pid)
    if (auto comm = exit_comm(rec, *pid)) t += " " + *comm;
  if (auto sig = i64_at(*x, "signal")) {
    t += " killed by " + text_at(*x, "signal_name").value_or("signal") + format(" (signal %lld)", static_cast<long long>(*sig));
  } else if (auto st = i64_at(*x, "exit_status")) {
    t += format(" exited with status %lld", static_cast<long long>(*st));
  }
  if (auto when = text_at(*x, "time")) t += " at " + *when;
  if (bool_at(*x, "core_dumped").value_or(false)) t += ", core dumped";
  b.line("exit", t);
}

// Only the counters that say something was lost or held back, and only
// when nonzero: the rest are for monitoring, not for reading an incident.
void render_agent(Block& b, const json& rec) {
  const json* a = object_at(rec, "agent");
  if (!a) return;
  static constexpr const char* kLosses[] = {"bpf_ring_drops",  "bpf_oom_ring_drops", "queue_overflows",
                                            "records_lost",    "sink_errors",        "exit_events_suppressed",
                                            "exit_records_suppressed", "oom_kill_records_suppressed"};
  std::vector<std::string> parts;
  for (const char* key : kLosses)
    if (auto v = u64_at(*a, key); v && *v) parts.push_back(std::string(key) + " " + grouped(*v));
  if (!parts.empty()) b.line("agent", join(parts, ", "));
}

}  // namespace

bool is_agent_record(const json& j) {
  const json* id = field(j, "incident_id");
  return id && id->is_number_integer() && object_at(j, "trigger") != nullptr;
}

std::string human_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes) / 1024.0;
  size_t u = 0;
  // Switch units at 1023.95 so "1024.0 KiB" is shown as "1.0 MiB".
  while (v >= 1023.95 && u + 1 < std::size(kUnits)) {
    v /= 1024.0;
    ++u;
  }
  return format("%.1f %s", v, kUnits[u]);
}

std::string render_record(const json& rec, const RenderOptions& options) {
  Block b;
  std::string head = "== incident " + (u64_at(rec, "incident_id") ? std::to_string(*u64_at(rec, "incident_id")) : "?");
  if (auto t = text_at(rec, "time")) head += " at " + *t;
  if (auto n = text_at(rec, "node")) head += " on node " + *n;
  b.raw(head);
  // Where the memory went leads: it says what to look for in the rest.
  render_memory_bar(b, rec, options.unicode);

  const json* trig = object_at(rec, "trigger");
  const bool exit_record = trig && text_at(*trig, "type") == "process_exit";
  render_container(b, rec);
  render_trigger(b, rec, exit_record);
  // An exit record's timeline is the exit alone: nothing to relate.
  if (!exit_record) render_timeline(b, rec);
  if (exit_record) {
    // An exit record has no victim and no collection: the exit is the news.
    render_exit(b, rec);
    const json* coll = object_at(rec, "collection");
    if (auto r = coll ? text_at(*coll, "reason", kMaxTextBytes) : std::nullopt) b.line("collection", *r);
  } else {
    render_victim(b, rec);
    if (const json* others = array_at(rec, "other_processes")) {
      size_t shown = 0;
      for (const auto& p : *others) {
        if (shown++ == kMaxListed) {
          b.line("other", format("(%zu more)", others->size() - kMaxListed));
          break;
        }
        render_other(b, p);
      }
    }
    render_oom_kill(b, rec);
    render_exit(b, rec);
  }
  render_agent(b, rec);
  return b.take();
}

}  // namespace oomsnap
