// One interface for every language runtime (Go, CPython, HotSpot Java).
// A collector reads the target from outside: never writes, stops or attaches.
#pragma once
#include <sys/types.h>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/capture_options.h"
#include "core/proc_info.h"
#include "core/remote_memory.h"
#include "core/snapshot.h"
#include "elf/elf_file.h"

namespace oomsnap {

// Cooperative deadline: loops check it between batches.
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Deadline(std::chrono::milliseconds budget) : end_(Clock::now() + budget) {}
  bool expired() const { return Clock::now() >= end_; }
 private:
  Clock::time_point end_;
};

// Measures one capture: its duration and the reads it cost, from construction
// to finish(), written into the snapshot (every collector reports both).
class CaptureMeter {
 public:
  explicit CaptureMeter(const RemoteMemory& mem)
      : mem_(mem), t0_(std::chrono::steady_clock::now()), syscalls0_(mem.syscalls()), bytes0_(mem.bytes_read()) {}
  void finish(Snapshot& s) const {
    s.duration_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
    s.read_syscalls = mem_.syscalls() - syscalls0_;
    s.bytes_read = mem_.bytes_read() - bytes0_;
  }

 private:
  const RemoteMemory& mem_;
  std::chrono::steady_clock::time_point t0_;
  uint64_t syscalls0_, bytes0_;
};

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
  Target(ProcessIdentity id, int exe_fd, std::vector<Mapping> maps)
      : identity_(std::move(id)), exe_fd_(exe_fd), maps_(std::move(maps)), memory_(identity_.pid) {}
  ProcessIdentity identity_;
  int exe_fd_ = -1;
  std::vector<Mapping> maps_;
  RemoteMemory memory_;
  std::unique_ptr<ElfFile> exe_elf_;
  bool exe_elf_tried_ = false;
  std::string exe_elf_error_;
};

struct CaptureResult {
  std::string language = "unknown";  // "go", "java", "python", "unknown"
  Snapshot snapshot;
  std::optional<std::string> pprof;  // gzipped profile.proto when asked for and possible
  std::optional<std::string> recent_pprof;  // the same for snapshot.recent (Go)
};

// The result a collect() builds, with its meter and deadline: every
// collector's collect() starts with one and returns finish().
struct CaptureRun {
  CaptureRun(Target& target, const char* language, const CaptureOptions& opts);
  CaptureResult finish() {
    meter.finish(out.snapshot);
    return std::move(out);
  }
  CaptureResult out;
  CaptureMeter meter;
  Deadline deadline;
};

inline CaptureRun::CaptureRun(Target& target, const char* language, const CaptureOptions& opts)
    : meter(target.memory()), deadline(opts.budget) {
  out.language = language;
}

class Collector {
 public:
  virtual ~Collector() = default;
  virtual const char* language() const = 0;
  // Cheap: is this the collector's runtime? Must not throw.
  virtual bool detect(Target& target) = 0;
  // Never throws for target-side trouble: it becomes status + reason.
  virtual CaptureResult collect(Target& target, const CaptureOptions& options) = 0;
};

}  // namespace oomsnap
