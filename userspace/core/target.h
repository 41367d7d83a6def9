// The process a capture reads: its identity, its exe (parsed once), its
// maps, its memory reader, and files opened as the target sees them.
#pragma once
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "core/proc_info.h"
#include "core/remote_memory.h"
#include "elf/elf_file.h"

namespace oomsnap {

// The process being captured. Opened once; the exe fd stays open through
// symbolization so a target that exits mid-capture still has a readable binary.
class Target {
 public:
  // nullopt + error text when the pid does not exist or /proc cannot be read.
  static std::unique_ptr<Target> open(pid_t pid, std::string& error);
  ~Target();
  Target(const Target&) = delete;
  Target& operator=(const Target&) = delete;

  pid_t pid() const { return identity_.pid; }
  const ProcessIdentity& identity() const { return identity_; }
  int exe_fd() const { return exe_fd_; }  // -1 when /proc/PID/exe could not be opened
  // The executable parsed once for every collector that asks; nullptr when
  // it cannot be opened or is not an ELF file (exe_elf_error() says why).
  const ElfFile* exe_elf();
  // Why exe_elf() gave nullptr (e.g. an ELF reader limit); empty otherwise.
  const std::string& exe_elf_error() const { return exe_elf_error_; }
  const std::vector<Mapping>& maps() const { return maps_; }
  // The /proc/PID/maps text maps() was parsed from (empty when not read):
  // the breakdown parses it again rather than have the kernel walk every
  // mapping a second time (pagemap_scan.h checks that it still holds).
  const std::string& maps_text() const { return maps_text_; }
  RemoteMemory& memory() { return memory_; }
  // Still the same process (pid + start time)?
  bool still_same() const;
  // Open a file as the target sees it (its mount namespace), resolved inside
  // /proc/PID/root (base/safe_open.h): the target's symlinks, absolute or
  // relative, and ".." cannot leave its root, magic links are refused, and
  // only a regular file is opened (never a FIFO, socket, device or
  // directory, so nothing it plants can block the open). A read-only fd, or
  // -1 with errno.
  int open_in_root(const std::string& path) const;
  // Open the file behind a mapping: /proc/PID/map_files (works for deleted
  // files and other mount namespaces), else open_in_root(m.path); a regular
  // file only, either way. -1 on failure.
  int open_mapping(const Mapping& m) const;

 private:
  Target(ProcessIdentity id, int exe_fd, std::vector<Mapping> maps, std::string maps_text)
      : identity_(std::move(id)),
        exe_fd_(exe_fd),
        maps_(std::move(maps)),
        maps_text_(std::move(maps_text)),
        memory_(identity_.pid) {}
  ProcessIdentity identity_;
  int exe_fd_ = -1;
  std::vector<Mapping> maps_;
  std::string maps_text_;
  RemoteMemory memory_;
  std::unique_ptr<ElfFile> exe_elf_;
  bool exe_elf_tried_ = false;
  std::string exe_elf_error_;
};

}  // namespace oomsnap
