#include "capture/result_budget.h"

#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/text.h"

namespace oomsnap {
namespace {

// Keys, punctuation and numbers of one list item around its strings, at
// their widest (each number 20 digits).
constexpr uint64_t kEntryFrame = 160;       // {"kind","name","bytes","objects","average_bytes","stack"}
constexpr uint64_t kGroupFrame = 128;       // {"count","state","wait_reason","stack","created_by","start"}
constexpr uint64_t kContentionFrame = 128;  // {"name","stack","contentions","delay_ns"}
// The reply around the record ("kind", "pprof", "recent_pprof_bytes") and
// the reasons this cut adds.
constexpr uint64_t kReplyFrame = 2048;

// The JSON text of `s` at its widest: a byte that is not valid UTF-8 becomes
// U+FFFD (3 bytes), a control character \u00XX, a quote or backslash two.
uint64_t json_string_bytes(const std::string& s) {
  uint64_t n = 3;  // the quotes, and a comma
  for (unsigned char c : s) n += c >= 0x80 ? 3 : c < 0x20 ? 6 : (c == '"' || c == '\\') ? 2 : 1;
  return n;
}

uint64_t stack_bytes(const std::vector<std::string>& stack) {
  uint64_t n = 2;
  for (const auto& f : stack) n += json_string_bytes(f);
  return n;
}

// What was cut, counted over the whole snapshot for one reason line.
struct Cuts {
  uint64_t names = 0, stacks = 0, frames = 0;
};

void cut_name(std::string& s, const ResultBudget& b, Cuts& cuts) {
  if (s.size() <= b.max_name_bytes) return;
  size_t n = b.max_name_bytes;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // not inside a UTF-8 sequence
  s.resize(n);
  s += "...";
  ++cuts.names;
}

// Names first (a frame is a name), then the frames past the stack's bytes
// from the root end: the leaf frames say where the memory went.
bool cut_stack(std::vector<std::string>& stack, const ResultBudget& b, Cuts& cuts) {
  for (auto& f : stack) cut_name(f, b, cuts);
  uint64_t used = 2;
  size_t keep = 0;
  for (; keep < stack.size(); ++keep) {
    const uint64_t add = json_string_bytes(stack[keep]);
    if (used + add > b.max_stack_bytes) break;
    used += add;
  }
  if (keep == stack.size()) return false;
  cuts.frames += stack.size() - keep;
  ++cuts.stacks;
  stack.resize(keep);
  return true;
}

uint64_t entry_bytes(const SnapshotEntry& e) {
  return kEntryFrame + json_string_bytes(e.kind) + json_string_bytes(e.name) + stack_bytes(e.stack);
}
uint64_t group_bytes(const GoroutineGroup& g) {
  return kGroupFrame + json_string_bytes(g.state) + json_string_bytes(g.wait_reason) + json_string_bytes(g.created_by) +
         json_string_bytes(g.start) + stack_bytes(g.stack);
}
uint64_t contention_bytes(const ContentionEntry& e) {
  return kContentionFrame + json_string_bytes(e.name) + stack_bytes(e.stack);
}

// Keeps the items of `list` (most important first) that fit in what is
// left of the budget; returns how many were dropped.
template <typename T, typename Size>
size_t keep_what_fits(std::vector<T>& list, uint64_t& left, Size size) {
  size_t keep = 0;
  for (; keep < list.size(); ++keep) {
    const uint64_t need = size(list[keep]);
    if (need > left) break;
    left -= need;
  }
  const size_t dropped = list.size() - keep;
  list.resize(keep);
  return dropped;
}

void add_reason(std::string& reason, const std::string& what) { reason = reason.empty() ? what : reason + "; " + what; }

std::string counted(uint64_t kept, uint64_t of, const char* what) {
  return std::to_string(kept) + " of " + std::to_string(of) + " " + what + " kept";
}

}  // namespace

ResultBudget result_budget_for(const CaptureRecord& record, uint64_t result_max) {
  uint64_t blobs = 0;
  for (const auto* p : {&record.result.pprof, &record.result.recent_pprof})
    if (*p) blobs += (*p)->size();
  ResultBudget b;
  b.max_bytes = result_max > blobs ? result_max - blobs : 0;
  return b;
}

std::string fit_result_budget(CaptureRecord& record, const ResultBudget& b) {
  Snapshot& s = record.result.snapshot;
  Cuts cuts;
  bool census_cut = false, block_cut = false, mutex_cut = false;
  for (auto& e : s.entries) {
    cut_name(e.name, b, cuts);
    cut_stack(e.stack, b, cuts);
  }
  if (s.recent)
    for (auto& e : s.recent->entries) {
      cut_name(e.name, b, cuts);
      cut_stack(e.stack, b, cuts);  // recent allocations have no flag of their own: the snapshot's says it
    }
  if (s.goroutines)
    for (auto& g : s.goroutines->groups) {
      for (std::string* name : {&g.state, &g.wait_reason, &g.created_by, &g.start}) cut_name(*name, b, cuts);
      census_cut |= cut_stack(g.stack, b, cuts);
    }
  for (auto [profile, cut] : {std::pair{&s.block, &block_cut}, std::pair{&s.mutex, &mutex_cut}})
    if (*profile)
      for (auto& e : (*profile)->entries) {
        cut_name(e.name, b, cuts);
        *cut |= cut_stack(e.stack, b, cuts);
      }

  // Everything but the lists, measured as encoded; the lists share the rest.
  std::vector<SnapshotEntry> entries, recent;
  std::vector<GoroutineGroup> groups;
  std::vector<ContentionEntry> block, mutex;
  entries.swap(s.entries);
  if (s.recent) recent.swap(s.recent->entries);
  if (s.goroutines) groups.swap(s.goroutines->groups);
  if (s.block) block.swap(s.block->entries);
  if (s.mutex) mutex.swap(s.mutex->entries);
  const uint64_t fixed =
      to_json(record).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size() + kReplyFrame;
  uint64_t left = b.max_bytes > fixed ? b.max_bytes - fixed : 0;
  const size_t n_entries = entries.size(), n_groups = groups.size(), n_block = block.size(),
               n_mutex = mutex.size(), n_recent = recent.size();
  const size_t dropped_entries = keep_what_fits(entries, left, entry_bytes);
  const size_t dropped_groups = keep_what_fits(groups, left, group_bytes);
  const size_t dropped_block = keep_what_fits(block, left, contention_bytes);
  const size_t dropped_mutex = keep_what_fits(mutex, left, contention_bytes);
  const size_t dropped_recent = keep_what_fits(recent, left, entry_bytes);
  s.entries.swap(entries);
  if (s.recent) s.recent->entries.swap(recent);
  if (s.goroutines) s.goroutines->groups.swap(groups);
  if (s.block) s.block->entries.swap(block);
  if (s.mutex) s.mutex->entries.swap(mutex);

  const std::string cap = "the " + std::to_string(b.max_bytes >> 10) + " KiB result cap";
  std::vector<std::string> what;
  if (cuts.names) what.push_back(std::to_string(cuts.names) + " names cut to " + std::to_string(b.max_name_bytes) + " bytes");
  if (cuts.stacks)
    what.push_back(std::to_string(cuts.stacks) + " stacks cut to " + std::to_string(b.max_stack_bytes >> 10) +
                   " KiB (" + std::to_string(cuts.frames) + " root-side frames left out)");
  if (dropped_entries) what.push_back(counted(n_entries - dropped_entries, n_entries, "entries"));
  if (dropped_recent) what.push_back(counted(n_recent - dropped_recent, n_recent, "recent entries"));
  if (dropped_groups) what.push_back(counted(n_groups - dropped_groups, n_groups, "goroutine groups"));
  if (dropped_block) what.push_back(counted(n_block - dropped_block, n_block, "block entries"));
  if (dropped_mutex) what.push_back(counted(n_mutex - dropped_mutex, n_mutex, "mutex entries"));
  if (what.empty()) return {};
  const std::string summary = "result cut to fit " + cap + ": " + join(what, ", ");
  s.output_truncated = true;
  add_reason(s.reason, summary);
  // The parts with lists of their own say so where a reader of that part looks.
  if (s.goroutines && (census_cut || dropped_groups)) {
    s.goroutines->groups_truncated = true;
    add_reason(s.goroutines->reason, summary);
  }
  for (auto [profile, cut, dropped] : {std::tuple{&s.block, block_cut, dropped_block}, std::tuple{&s.mutex, mutex_cut, dropped_mutex}})
    if (*profile && (cut || dropped)) {
      (*profile)->output_truncated = true;
      add_reason((*profile)->reason, summary);
    }
  return summary;
}

}  // namespace oomsnap
