// Read-only access to another process's memory with process_vm_readv.
// Never writes, stops or attaches to the target. Every read is counted so the
// collectors can report (and benchmarks can compare) how many syscalls they used.
#pragma once
#include <sys/types.h>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace oomsnap {
class MemoryImage;

// The read in flight, published for a watchdog on another thread: a read of
// a page nobody will serve (userfaultfd, a stalled FUSE or NFS server) never
// returns, and only someone outside the reading thread can say where it hangs.
struct ReadInFlight {
  std::atomic<uint64_t> addr{0};
  std::atomic<uint64_t> len{0};
  std::atomic<uint64_t> since_ns{0};  // CLOCK_MONOTONIC; 0 = no read in flight
};

// [start, end) of the target's address space.
struct AddressRange {
  uint64_t start = 0, end = 0;
  bool overlaps(uint64_t addr, uint64_t len) const { return addr < end && addr + len > start; }
};

class RemoteMemory {
 public:
  explicit RemoteMemory(pid_t pid) : pid_(pid) {}
  // Reads served from a copy taken earlier (core/memory_image.h) instead of a
  // live process: the same readers run over it. pid() is 0; no syscalls.
  explicit RemoteMemory(std::shared_ptr<const MemoryImage> image) : pid_(0), image_(std::move(image)) {}

  // Publish every read's address and start time to `watch` (nullptr: off).
  void set_read_watch(ReadInFlight* watch) { watch_ = watch; }
  // Ranges never to read (a read of them stalled before: a userfaultfd or
  // FUSE mapping nobody serves): a request touching one fails at once, as
  // an unreadable address would.
  void set_skip(std::vector<AddressRange> ranges) { skip_ = std::move(ranges); }
  uint64_t skipped_reads() const { return skipped_reads_; }

  // Reads exactly len bytes at addr. False on any failure (last_errno() says why).
  bool read(uint64_t addr, void* buf, size_t len);

  template <typename T>
  bool read_value(uint64_t addr, T& out) { return read(addr, &out, sizeof(T)); }

  struct Request {
    uint64_t addr = 0;
    void* buf = nullptr;
    size_t len = 0;
    bool ok = false;  // set by read_batch
  };
  // Scatter-gather: as few process_vm_readv calls as the kernel allows
  // (IOV_MAX iovecs each). A request that fails does not stop the others.
  // Returns the number of requests read in full.
  size_t read_batch(std::span<Request> requests);
  // Called after every read_batch with its requests, as read (tests only: a
  // target whose memory changes at a chosen point between two reads, as a
  // GC moving a stack does, without a race).
  using AfterBatch = std::function<void(std::span<const Request>)>;
  void set_after_batch(AfterBatch f) { after_batch_ = std::move(f); }

  pid_t pid() const { return pid_; }
  uint64_t syscalls() const { return syscalls_; }
  uint64_t bytes_read() const { return bytes_read_; }
  int last_errno() const { return last_errno_; }

 private:
  pid_t pid_;
  std::shared_ptr<const MemoryImage> image_;
  ReadInFlight* watch_ = nullptr;
  AfterBatch after_batch_;
  std::vector<AddressRange> skip_;
  uint64_t skipped_reads_ = 0;
  uint64_t syscalls_ = 0;
  uint64_t bytes_read_ = 0;
  int last_errno_ = 0;

  size_t read_batch_now(std::span<Request> requests);
  size_t read_batch_from_image(std::span<Request> requests);
  bool skipped(uint64_t addr, uint64_t len) const {
    for (const auto& r : skip_)
      if (r.overlaps(addr, len)) return true;
    return false;
  }
};

}  // namespace oomsnap
