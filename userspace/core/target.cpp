#include "core/target.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <utility>

#include "base/safe_open.h"

namespace oomsnap {

std::unique_ptr<Target> Target::open(pid_t pid, std::string& error, const MappedFileFilter& wanted) {
  ProcFiles proc(pid);
  auto id = read_identity(proc);
  if (!id) {
    error = "no process with pid " + std::to_string(pid) + " (cannot read " + proc.path(ProcFile::kStat) + ")";
    return nullptr;
  }
  // Every /proc file now, read later or not: a capture process cannot open
  // one once its filter is in place.
  proc.open_all();
  const int exe_err = proc.fd(ProcFile::kExe) < 0 ? errno : 0;
  std::string maps_text;
  std::vector<Mapping> maps;
  if (proc.read(ProcFile::kMaps, maps_text)) maps = parse_proc_maps(maps_text);
  else maps_text.clear();
  if (exe_err && maps.empty()) {
    auto now = read_identity(proc);
    if (!now || now->start_time_ticks != id->start_time_ticks || now->exited())
      error = "no process with pid " + std::to_string(pid) + " (it exited as the capture began)";
    else
      error = "cannot read process " + std::to_string(pid) + ": " + std::strerror(exe_err) +
              " (need root or CAP_SYS_PTRACE + CAP_DAC_READ_SEARCH)";
    return nullptr;
  }
  std::unique_ptr<Target> t(new Target(std::move(*id), std::move(proc), std::move(maps), std::move(maps_text)));
  t->open_mapped_files(wanted);
  return t;
}

const ElfFile* Target::exe_elf() {
  if (!exe_elf_tried_) {
    exe_elf_tried_ = true;
    if (exe_fd_ >= 0) {
      try {
        exe_elf_ = ElfFile::open_fd(exe_fd_, proc_.path(ProcFile::kExe));
      } catch (const std::exception& e) {
        exe_elf_.reset();
        exe_elf_error_ = e.what();
      }
    } else {
      exe_elf_error_ = proc_.path(ProcFile::kExe) + " could not be opened";
    }
  }
  return exe_elf_.get();
}

bool Target::still_same() const {
  auto now = read_identity(proc_);
  return now && now->start_time_ticks == identity_.start_time_ticks;
}

void Target::open_mapped_files(const MappedFileFilter& wanted) {
  // Files mapped executable first (the runtimes the collectors look for:
  // libpython, libjvm), then the rest, each file once.
  std::set<std::pair<uint64_t, std::string>> executable;
  for (const Mapping& m : maps_)
    if (m.inode && m.perms.size() > 2 && m.perms[2] == 'x') executable.insert({m.inode, m.path});
  std::map<std::pair<uint64_t, std::string>, int> by_file;
  for (bool exec_pass : {true, false}) {
    for (const Mapping& m : maps_) {
      if (m.offset != 0 || m.inode == 0 || m.path.empty() || (wanted && !wanted(m))) continue;
      const auto key = std::make_pair(m.inode, m.path);
      if (executable.count(key) != static_cast<size_t>(exec_pass)) continue;
      if (auto it = by_file.find(key); it != by_file.end()) {
        mapped_by_start_[m.start] = it->second;
        continue;
      }
      int slot = -EMFILE;
      if (mapped_files_.size() < kMaxMappedFiles) {
        const int fd = open_mapped_file(identity_.pid, proc_.fd(ProcFile::kRoot), m);
        if (fd >= 0) {
          slot = static_cast<int>(mapped_files_.size());
          mapped_files_.emplace_back(fd);
        } else {
          slot = -(errno ? errno : EIO);
        }
      }
      by_file[key] = slot;
      mapped_by_start_[m.start] = slot;
    }
  }
}

int open_mapped_file(pid_t pid, int root_fd, const Mapping& m) {
  char mf[96];
  std::snprintf(mf, sizeof mf, "/proc/%d/map_files/%llx-%llx", pid, static_cast<unsigned long long>(m.start),
                static_cast<unsigned long long>(m.end));
  const int fd = open_regular_file(mf);
  if (fd >= 0) return fd;
  return root_fd >= 0 ? open_regular_in_root(root_fd, m.path) : -1;
}

int Target::open_mapping(const Mapping& m) const {
  const auto it = mapped_by_start_.find(m.start);
  if (it == mapped_by_start_.end()) {
    errno = ENOENT;
    return -1;
  }
  if (it->second < 0) {
    errno = -it->second;
    return -1;
  }
  return ::fcntl(mapped_files_[static_cast<size_t>(it->second)].get(), F_DUPFD_CLOEXEC, 0);
}

}  // namespace oomsnap
