#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/target.h"

#include "base/safe_open.h"

namespace oomsnap {

std::unique_ptr<Target> Target::open(pid_t pid, std::string& error) {
  auto id = read_identity(pid);
  if (!id) {
    error = "no process with pid " + std::to_string(pid) + " (cannot read /proc/" + std::to_string(pid) + "/stat)";
    return nullptr;
  }
  std::string exe = "/proc/" + std::to_string(pid) + "/exe";
  // Opening the exe through /proc works across mount namespaces and keeps the
  // inode alive even if the target exits or the file is replaced.
  int fd = ::open(exe.c_str(), O_RDONLY | O_CLOEXEC);
  std::string maps_text;
  std::vector<Mapping> maps;
  if (read_text_file("/proc/" + std::to_string(pid) + "/maps", maps_text)) maps = parse_proc_maps(maps_text);
  else maps_text.clear();
  if (fd < 0 && maps.empty()) {
    const int err = errno;
    auto now = read_identity(pid);
    if (!now || now->start_time_ticks != id->start_time_ticks || now->exited())
      error = "no process with pid " + std::to_string(pid) + " (it exited as the capture began)";
    else
      error = "cannot read process " + std::to_string(pid) + ": " + std::strerror(err) +
              " (need root or CAP_SYS_PTRACE + CAP_DAC_READ_SEARCH)";
    return nullptr;
  }
  return std::unique_ptr<Target>(new Target(std::move(*id), fd, std::move(maps), std::move(maps_text)));
}

Target::~Target() {
  if (exe_fd_ >= 0) ::close(exe_fd_);
}

const ElfFile* Target::exe_elf() {
  if (!exe_elf_tried_) {
    exe_elf_tried_ = true;
    if (exe_fd_ >= 0) {
      try {
        exe_elf_ = ElfFile::open_fd(exe_fd_, "/proc/" + std::to_string(identity_.pid) + "/exe");
      } catch (const std::exception& e) {
        exe_elf_.reset();
        exe_elf_error_ = e.what();
      }
    } else {
      exe_elf_error_ = "/proc/" + std::to_string(identity_.pid) + "/exe could not be opened";
    }
  }
  return exe_elf_.get();
}

bool Target::still_same() const {
  auto now = read_identity(identity_.pid);
  return now && now->start_time_ticks == identity_.start_time_ticks;
}

int Target::open_mapping(const Mapping& m) const {
  char mf[96];
  std::snprintf(mf, sizeof mf, "/proc/%d/map_files/%llx-%llx", identity_.pid, static_cast<unsigned long long>(m.start),
                static_cast<unsigned long long>(m.end));
  int fd = open_regular_file(mf);
  return fd >= 0 ? fd : open_in_root(m.path);
}

int Target::open_in_root(const std::string& path) const {
  const int root = open_proc_root(identity_.pid);
  if (root < 0) return -1;
  const int fd = open_regular_in_root(root, path);
  const int err = errno;
  ::close(root);
  errno = err;
  return fd;
}

}  // namespace oomsnap
