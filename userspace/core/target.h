// The process a capture reads: its identity, its exe (parsed once), its
// maps, its memory reader, its /proc files, and the files it maps.
#pragma once
#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "core/proc_files.h"
#include "core/proc_info.h"
#include "core/remote_memory.h"
#include "elf/elf_file.h"

namespace oomsnap {

// The process being captured. Opened once, with every file a collector may
// read: its /proc files (ProcFiles, all opened here) and the files of its
// mappings. So nothing is opened by path once it is open, which is what lets
// the capture process give file opens up before it reads the target
// (sandbox_policy.h). The exe fd stays open through symbolization so a
// target that exits mid-capture still has a readable binary.
class Target {
 public:
  // At most this many mapped files are opened (the capture process's
  // descriptor limit is above it); the files of executable mappings first.
  static constexpr size_t kMaxMappedFiles = 384;
  // Which mappings' files to open (their first mapping, offset 0, is asked);
  // empty: every file.
  using MappedFileFilter = std::function<bool(const Mapping&)>;

  // nullptr + error text when the pid does not exist or /proc cannot be read.
  static std::unique_ptr<Target> open(pid_t pid, std::string& error, const MappedFileFilter& wanted = {});
  Target(const Target&) = delete;
  Target& operator=(const Target&) = delete;

  pid_t pid() const { return identity_.pid; }
  const ProcessIdentity& identity() const { return identity_; }
  const ProcFiles& proc() const { return proc_; }
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
  // Still the same process (its /proc files still answer, with the same
  // start time)?
  bool still_same() const;
  // The file behind a mapping of maps() with offset 0 and an inode, as
  // opened by open(): a new read-only fd of it (the caller closes it), or -1
  // with errno (EMFILE: past kMaxMappedFiles; ENOENT: not such a mapping, or
  // one open()'s filter left out).
  // Opened through /proc/PID/map_files (deleted files and other mount
  // namespaces work), else by its path inside the target's root
  // (base/safe_open.h: the target's symlinks and ".." cannot leave it, magic
  // links are refused); a regular file only, either way (never a FIFO,
  // socket, device or directory, so nothing it plants can block the open).
  int open_mapping(const Mapping& m) const;

 private:
  Target(ProcessIdentity id, ProcFiles proc, std::vector<Mapping> maps, std::string maps_text)
      : identity_(std::move(id)),
        proc_(std::move(proc)),
        exe_fd_(proc_.fd(ProcFile::kExe)),
        maps_(std::move(maps)),
        maps_text_(std::move(maps_text)),
        memory_(identity_.pid) {}
  void open_mapped_files(const MappedFileFilter& wanted);

  ProcessIdentity identity_;
  ProcFiles proc_;
  int exe_fd_ = -1;  // owned by proc_
  std::vector<Mapping> maps_;
  std::string maps_text_;
  RemoteMemory memory_;
  std::unique_ptr<ElfFile> exe_elf_;
  bool exe_elf_tried_ = false;
  std::string exe_elf_error_;
  // Mapped files by the start of their offset-0 mapping: an index into
  // mapped_files_, or the errno of the open that failed (negated).
  std::map<uint64_t, int> mapped_by_start_;
  std::vector<UniqueFd> mapped_files_;
};

// How open() opens the file behind mapping m of process pid: through
// /proc/PID/map_files, else by m.path inside root_fd (the target's
// /proc/PID/root), a regular file only. An fd, or -1 with errno.
int open_mapped_file(pid_t pid, int root_fd, const Mapping& m);

}  // namespace oomsnap
