#include "core/proc_info.h"

#include <fcntl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/unique_fd.h"

namespace oomsnap {

bool read_text_file(const std::string& path, std::string& out) {
  bool cut = false;
  return read_text_file(path, out, std::numeric_limits<size_t>::max(), std::chrono::steady_clock::time_point::max(),
                        cut);
}

bool read_text_file(const std::string& path, std::string& out, size_t max_bytes,
                    std::chrono::steady_clock::time_point deadline, bool& cut) {
  cut = false;
  out.clear();
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  return fd.get() >= 0 && read_fd_text(fd.get(), out, max_bytes, deadline, cut);
}

std::optional<ProcessIdentity> parse_proc_stat(pid_t pid, const std::string& text) {
  // "pid (comm) state ppid ..." — comm may hold spaces and parentheses, so
  // split at the LAST ')'.
  auto open = text.find('(');
  auto close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
  ProcessIdentity id;
  id.pid = pid;
  id.comm = text.substr(open + 1, close - open - 1);
  std::istringstream rest(text.substr(close + 1));
  std::string field;
  // After ')' come fields 3.. ; starttime is field 22.
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return std::nullopt;
    if (i == 3 && field.size() == 1) id.state = field[0];
    if (i == 9) id.flags = static_cast<uint32_t>(std::strtoul(field.c_str(), nullptr, 10));
  }
  char* end = nullptr;
  id.start_time_ticks = std::strtoull(field.c_str(), &end, 10);
  if (!end || *end != '\0') return std::nullopt;
  return id;
}

ProcessMemory parse_proc_status(const std::string& text) {
  ProcessMemory m;
  std::istringstream in(text);
  std::string line;
  bool any = false;
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    std::optional<uint64_t>* slot = nullptr;
    if (key == "VmSize") slot = &m.virtual_bytes;
    else if (key == "VmRSS") slot = &m.rss_bytes;
    else if (key == "RssAnon") slot = &m.rss_anon_bytes;
    else if (key == "RssFile") slot = &m.rss_file_bytes;
    else if (key == "RssShmem") slot = &m.rss_shmem_bytes;
    else if (key == "VmSwap") slot = &m.swap_bytes;
    else if (key == "VmPTE") slot = &m.page_table_bytes;
    if (!slot) continue;
    unsigned long long kb = 0;
    char unit[8] = {0};
    if (std::sscanf(line.c_str() + colon + 1, "%llu %7s", &kb, unit) == 2 && std::string(unit) == "kB") {
      *slot = static_cast<uint64_t>(kb) * 1024;
      any = true;
    }
  }
  // Kernel threads and zombies have no Vm* lines: say so instead of zeros.
  m.status = any ? "ok" : "no memory fields (kernel thread or exited process)";
  return m;
}

std::vector<Mapping> parse_proc_maps(const std::string& text) {
  std::vector<Mapping> maps;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    Mapping m;
    unsigned long long start, end, off, inode;
    char perms[8] = {0};
    int path_pos = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %*x:%*x %llu %n", &start, &end, perms, &off,
                    &inode, &path_pos) < 5)
      continue;
    m.start = start;
    m.end = end;
    m.offset = off;
    m.inode = inode;
    m.perms = perms;
    if (path_pos > 0 && static_cast<size_t>(path_pos) <= line.size()) m.path = line.substr(path_pos);
    maps.push_back(std::move(m));
  }
  return maps;
}

std::vector<AddressRange> parse_userfaultfd_ranges(const std::string& text) {
  std::vector<AddressRange> out;
  std::istringstream in(text);
  std::string line;
  AddressRange current;
  while (std::getline(in, line)) {
    unsigned long long start = 0, end = 0;
    char dash = 0;
    if (std::sscanf(line.c_str(), "%llx%c%llx ", &start, &dash, &end) == 3 && dash == '-') {
      current = {start, end};
      continue;
    }
    if (line.rfind("VmFlags:", 0) != 0 || current.end <= current.start) continue;
    std::istringstream flags(line.substr(8));
    for (std::string f; flags >> f;) {
      if (f == "um" || f == "ui") {
        out.push_back(current);
        break;
      }
    }
  }
  return out;
}

static std::string proc_path(pid_t pid, const char* leaf) {
  return "/proc/" + std::to_string(pid) + "/" + leaf;
}

std::optional<ProcessIdentity> read_identity(const ProcFiles& proc) {
  std::string text;
  if (proc.pid() <= 0 || !proc.read(ProcFile::kStat, text)) return std::nullopt;
  return parse_proc_stat(proc.pid(), text);
}

std::optional<ProcessIdentity> read_identity(pid_t pid) { return read_identity(ProcFiles(pid)); }

ProcessMemory read_process_memory(const ProcFiles& proc) {
  std::string text;
  if (!proc.read(ProcFile::kStatus, text)) {
    ProcessMemory m;
    m.status = "cannot read " + proc.path(ProcFile::kStatus);
    return m;
  }
  return parse_proc_status(text);
}

ProcessMemory read_process_memory(pid_t pid) { return read_process_memory(ProcFiles(pid)); }

std::vector<Mapping> read_maps(pid_t pid) {
  std::string text;
  if (!read_text_file(proc_path(pid, "maps"), text)) return {};
  return parse_proc_maps(text);
}

std::vector<AddressRange> read_userfaultfd_ranges(pid_t pid) {
  std::string text;
  if (pid <= 0 || !read_text_file(proc_path(pid, "smaps"), text)) return {};
  return parse_userfaultfd_ranges(text);
}

nlohmann::json to_json(const ProcessMemory& m) {
  nlohmann::json j;
  j["status"] = m.status;
  for (const auto& f : kProcessMemoryFields)
    if (const auto& v = m.*f.member) j[f.name] = *v;
  if (m.breakdown) j["breakdown"] = to_json(*m.breakdown);
  return j;
}

}  // namespace oomsnap
