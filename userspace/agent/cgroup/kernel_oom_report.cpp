#include "agent/cgroup/kernel_oom_report.h"

#include <algorithm>
#include <charconv>

#include <nlohmann/json.hpp>

namespace oomsnap {
namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

template <typename T>
std::optional<T> number(std::string_view s) {
  T v{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// "usage 32768kB, limit 32768kB, failcnt 71": the kB figure after `key `, in bytes.
std::optional<uint64_t> kb_field(std::string_view s, std::string_view key) {
  const size_t at = s.find(key);
  if (at == std::string_view::npos) return std::nullopt;
  s.remove_prefix(at + key.size());
  const size_t kb = s.find("kB");
  if (kb == std::string_view::npos) return std::nullopt;
  auto v = number<uint64_t>(s.substr(0, kb));
  if (!v || *v > (~uint64_t{0} >> 10)) return std::nullopt;
  return *v << 10;
}

std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && s[i] == ' ') ++i;
    const size_t b = i;
    while (i < s.size() && s[i] != ' ') ++i;
    if (i > b) out.push_back(s.substr(b, i - b));
  }
  return out;
}

// A memory.stat line: a lower-case key and a decimal count.
bool stat_line(std::string_view s) {
  const size_t sp = s.find(' ');
  if (sp == 0 || sp == std::string_view::npos || sp > 64) return false;
  for (char c : s.substr(0, sp))
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return number<uint64_t>(s.substr(sp + 1)).has_value();
}

// The value of `,key=` in an oom-kill line, up to `end` (the next field's
// start). Searched from the right: paths and names may hold commas.
std::string_view field_before(std::string_view s, std::string_view key, size_t end, size_t& at) {
  at = s.rfind(key, end);
  if (at == std::string_view::npos) return {};
  const size_t b = at + key.size();
  return end >= b ? s.substr(b, end - b) : std::string_view{};
}

void add_pages(std::optional<uint64_t>& sum, const std::optional<uint64_t>& v) {
  if (v) sum = sum.value_or(0) + *v;
}

}  // namespace

void KernelOomReports::feed(std::string_view record) {
  const size_t semi = record.find(';');
  if (semi == std::string_view::npos) return;
  // "prio,seq,usec,flags": split on commas.
  std::string_view h = record.substr(0, semi);
  std::string_view part[4];
  for (int i = 0; i < 4; ++i) {
    const size_t c = h.find(',');
    part[i] = h.substr(0, c);
    h = c == std::string_view::npos ? std::string_view{} : h.substr(c + 1);
  }
  const auto prio = number<uint32_t>(part[0]);
  const auto seq = number<uint64_t>(part[1]);
  const auto usec = number<uint64_t>(part[2]);
  if (!prio || !seq || !usec) return;
  std::string_view text = record.substr(semi + 1);
  feed_text(*prio, *seq, *usec, text.substr(0, text.find('\n')));
}

void KernelOomReports::feed_text(uint32_t prio, uint64_t seq, uint64_t usec, std::string_view text) {
  if ((prio >> 3) != 0) return;  // not the kernel's own: a user may write to /dev/kmsg
  line(seq, usec, text.substr(0, kMaxLine), text.size() > kMaxLine);
}

void KernelOomReports::line(uint64_t seq, uint64_t usec, std::string_view text, bool cut) {
  if (const size_t at = text.find(" invoked oom-killer: "); at != std::string_view::npos) {
    open_.emplace();
    open_->first_seq = seq;
    open_->kernel_us = usec;
    open_->invoker = std::string(text.substr(0, std::min<size_t>(at, 64)));
    section_ = Section::kHeader;
    open_lines_ = stat_lines_ = 0;
    columns_ = {};
    return;
  }
  if (!open_) return;
  if (++open_lines_ > kMaxReportLines) {  // never finished: the rest of it was lost
    open_.reset();
    return;
  }
  KernelOomReport& r = *open_;
  if (starts_with(text, "memory: ")) {
    r.usage_bytes = kb_field(text, "usage ");
    r.limit_bytes = kb_field(text, "limit ");
  } else if (starts_with(text, "memory+swap: ")) {
    r.memsw_usage_bytes = kb_field(text, "usage ");
  } else if (starts_with(text, "swap: ")) {
    r.swap_usage_bytes = kb_field(text, "usage ");
  } else if (starts_with(text, "kmem: ")) {
    r.kmem_usage_bytes = kb_field(text, "usage ");
  } else if (starts_with(text, "Memory cgroup stats for ") && text.back() == ':') {
    constexpr std::string_view kLead = "Memory cgroup stats for ";
    r.stat_memcg = std::string(text.substr(kLead.size(), text.size() - kLead.size() - 1));
    section_ = Section::kStats;
  } else if (starts_with(text, "Tasks state")) {
    section_ = Section::kTasks;
  } else if (starts_with(text, "oom-kill:")) {
    finish(text);
  } else if (section_ == Section::kStats) {
    // Before 6.3 the kernel printed memory.stat as one record, its lines
    // joined by newlines, which /dev/kmsg escapes as "\x0a".
    for (size_t from = 0; from <= text.size();) {
      const size_t nl = text.find("\\x0a", from);
      const std::string_view one = text.substr(from, nl == std::string_view::npos ? std::string_view::npos : nl - from);
      if (nl == std::string_view::npos && cut) break;  // its number may be cut short
      if (stat_line(one)) {
        if (++stat_lines_ > kMaxStatLines)
          r.stat_cut = true;
        else
          r.stat_text.append(one).push_back('\n');
      }
      if (nl == std::string_view::npos) break;
      from = nl + 4;
    }
  } else if (section_ == Section::kTasks && starts_with(text, "[")) {
    task_line(text);
  }
}

void KernelOomReports::task_line(std::string_view text) {
  // "[  pid  ]   uid  tgid ..." names the columns; "[  21308]     0 21308 ..." is a task.
  std::string flat(text);
  std::replace(flat.begin(), flat.end(), '[', ' ');
  std::replace(flat.begin(), flat.end(), ']', ' ');
  const auto w = words(flat);
  if (!w.empty() && w[0] == "pid") {
    columns_.names.assign(w.begin(), w.end());
    return;
  }
  const auto& names = columns_.names;
  if (names.empty() || names.back() != "name" || w.size() < names.size()) return;
  KernelOomTask t;
  for (size_t i = 0; i + 1 < names.size(); ++i) {
    const std::string& n = names[i];
    const std::string_view v = w[i];
    if (n == "pid") t.pid = number<pid_t>(v).value_or(0);
    else if (n == "tgid") t.tgid = number<pid_t>(v).value_or(0);
    else if (n == "uid") t.uid = number<uint32_t>(v).value_or(0);
    else if (n == "total_vm") t.total_vm_pages = number<uint64_t>(v).value_or(0);
    else if (n == "rss") t.rss_pages = number<uint64_t>(v).value_or(0);
    else if (n == "rss_anon") t.rss_anon_pages = number<uint64_t>(v);
    else if (n == "rss_file") t.rss_file_pages = number<uint64_t>(v);
    else if (n == "rss_shmem") t.rss_shmem_pages = number<uint64_t>(v);
    else if (n == "pgtables_bytes") t.pgtables_bytes = number<uint64_t>(v).value_or(0);
    else if (n == "swapents") t.swap_entries = number<uint64_t>(v).value_or(0);
    else if (n == "oom_score_adj") t.oom_score_adj = number<int>(v).value_or(0);
  }
  if (t.pid <= 0) return;
  // The name is the rest of the line: a comm may hold spaces.
  const size_t name_at = static_cast<size_t>(w[names.size() - 1].data() - flat.data());
  t.name = flat.substr(name_at, 16);
  KernelOomReport& r = *open_;
  ++r.tasks_total;
  // Keep the largest; the others go into the sum.
  auto fold = [&r](const KernelOomTask& x) {
    KernelOomTask& s = r.tasks_rest;
    s.total_vm_pages += x.total_vm_pages;
    s.rss_pages += x.rss_pages;
    add_pages(s.rss_anon_pages, x.rss_anon_pages);
    add_pages(s.rss_file_pages, x.rss_file_pages);
    add_pages(s.rss_shmem_pages, x.rss_shmem_pages);
    s.pgtables_bytes += x.pgtables_bytes;
    s.swap_entries += x.swap_entries;
  };
  if (r.tasks.size() < kMaxTasks) {
    r.tasks.push_back(std::move(t));
    return;
  }
  auto smallest = std::min_element(r.tasks.begin(), r.tasks.end(),
                                   [](const KernelOomTask& a, const KernelOomTask& b) { return a.rss_pages < b.rss_pages; });
  if (t.rss_pages > smallest->rss_pages) std::swap(*smallest, t);
  fold(t);
}

void KernelOomReports::finish(std::string_view s) {
  KernelOomReport r = std::move(*open_);
  open_.reset();
  // "...,oom_memcg=P,task_memcg=P,task=COMM,pid=N,uid=N", taken from the right.
  size_t end = s.size(), at = 0;
  field_before(s, ",uid=", end, at);
  if (at != std::string_view::npos) end = at;
  const std::string_view pid = field_before(s, ",pid=", end, at);
  if (at == std::string_view::npos) return;
  end = at;
  const std::string_view task = field_before(s, ",task=", end, at);
  if (at == std::string_view::npos) return;
  end = at;
  const std::string_view tmem = field_before(s, ",task_memcg=", end, at);
  if (at == std::string_view::npos) return;
  end = at;
  const std::string_view omem = field_before(s, ",oom_memcg=", end, at);
  const bool have_omem = at != std::string_view::npos;
  const auto victim = number<pid_t>(pid);
  if (!victim || *victim <= 0) return;
  r.victim_pid = *victim;
  r.victim_comm = std::string(task.substr(0, 64));
  r.task_memcg = std::string(tmem.substr(0, 4096));
  if (have_omem) r.oom_memcg = std::string(omem.substr(0, 4096));
  if (starts_with(s, "oom-kill:constraint=")) {
    const std::string_view c = s.substr(20);
    r.constraint = std::string(c.substr(0, std::min<size_t>(c.find(','), 64)));
  }
  r.memory_stat = report_memory_stat(r);
  std::sort(r.tasks.begin(), r.tasks.end(),
            [](const KernelOomTask& a, const KernelOomTask& b) { return a.rss_pages > b.rss_pages; });
  done_.push_back(std::move(r));
  if (done_.size() > kMaxReports) done_.pop_front();
}

const KernelOomReport* KernelOomReports::find(pid_t pid, uint64_t kernel_us, uint64_t window_us) const {
  for (auto it = done_.rbegin(); it != done_.rend(); ++it) {
    const uint64_t d = it->kernel_us > kernel_us ? it->kernel_us - kernel_us : kernel_us - it->kernel_us;
    if (it->victim_pid == pid && d <= window_us) return &*it;
  }
  return nullptr;
}

MemoryStat report_memory_stat(const KernelOomReport& r) {
  const bool v1 = r.stat_text.rfind("cache ", 0) == 0 || r.stat_text.find("\ntotal_rss ") != std::string::npos;
  MemoryStat stat = parse_memory_stat(v1 ? 1 : 2, r.stat_text, r.kmem_usage_bytes, r.swap_usage_bytes);
  stat.usage_bytes = r.usage_bytes;
  return stat;
}

nlohmann::json to_json(const KernelOomReport& r, uint64_t page_size) {
  nlohmann::json j;
  j["kmsg_seq"] = r.first_seq;
  j["invoker"] = r.invoker;
  j["constraint"] = r.constraint;
  j["oom_memcg"] = r.oom_memcg;
  j["task_memcg"] = r.task_memcg;
  auto put = [&j](const char* k, const std::optional<uint64_t>& v) {
    if (v) j[k] = *v;
  };
  put("usage_bytes", r.usage_bytes);
  put("limit_bytes", r.limit_bytes);
  put("memsw_usage_bytes", r.memsw_usage_bytes);
  put("swap_usage_bytes", r.swap_usage_bytes);
  put("kmem_usage_bytes", r.kmem_usage_bytes);
  if (!r.stat_text.empty()) j["memory_stat"] = to_json(r.memory_stat);
  nlohmann::json tasks = nlohmann::json::array();
  auto pages = [page_size](uint64_t n) { return n * page_size; };
  for (const KernelOomTask& t : r.tasks) {
    nlohmann::json tj = {{"pid", t.pid},
                         {"tgid", t.tgid},
                         {"uid", t.uid},
                         {"name", t.name},
                         {"rss_bytes", pages(t.rss_pages)},
                         {"pgtables_bytes", t.pgtables_bytes},
                         {"swap_bytes", pages(t.swap_entries)},
                         {"oom_score_adj", t.oom_score_adj}};
    if (t.rss_anon_pages) tj["rss_anon_bytes"] = pages(*t.rss_anon_pages);
    if (t.rss_file_pages) tj["rss_file_bytes"] = pages(*t.rss_file_pages);
    if (t.rss_shmem_pages) tj["rss_shmem_bytes"] = pages(*t.rss_shmem_pages);
    tasks.push_back(std::move(tj));
  }
  j["tasks"] = std::move(tasks);
  j["tasks_total"] = r.tasks_total;
  if (r.tasks_total > r.tasks.size()) j["tasks_rest_rss_bytes"] = pages(r.tasks_rest.rss_pages);
  return j;
}

}  // namespace oomsnap
