#include "core/remote_memory.h"

#include <sys/uio.h>
#include <time.h>

#include <cerrno>
#include <climits>
#include <vector>

#include "core/memory_image.h"

namespace oomsnap {
namespace {

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

bool RemoteMemory::read(uint64_t addr, void* buf, size_t len) {
  if (len == 0) return true;
  Request r{addr, buf, len, false};
  return read_batch(std::span<Request>(&r, 1)) == 1;
}

size_t RemoteMemory::read_batch(std::span<Request> requests) {
  const size_t done = read_batch_now(requests);
  if (after_batch_) after_batch_(requests);
  return done;
}

size_t RemoteMemory::read_batch_from_image(std::span<Request> requests) {
  size_t done = 0;
  for (Request& r : requests) {
    r.ok = image_->read(r.addr, r.buf, r.len);
    if (r.ok) {
      ++done;
      bytes_read_ += r.len;
    } else {
      last_errno_ = EFAULT;  // as process_vm_readv says of memory it cannot read
    }
  }
  return done;
}

size_t RemoteMemory::read_batch_now(std::span<Request> requests) {
  if (image_) return read_batch_from_image(requests);
  constexpr size_t kMaxIov = IOV_MAX;  // 1024 on Linux
  size_t done = 0;
  size_t i = 0;
  std::vector<iovec> local, remote;
  local.reserve(kMaxIov);
  remote.reserve(kMaxIov);
  while (i < requests.size()) {
    local.clear();
    remote.clear();
    if (!skip_.empty() && skipped(requests[i].addr, requests[i].len)) {
      requests[i++].ok = false;
      ++skipped_reads_;
      last_errno_ = EFAULT;
      continue;
    }
    size_t first = i;
    for (size_t j = i; j < requests.size() && local.size() < kMaxIov; ++j) {
      // A skipped range ends the batch: it is failed on its own above.
      if (j > i && !skip_.empty() && skipped(requests[j].addr, requests[j].len)) break;
      requests[j].ok = false;
      local.push_back({requests[j].buf, requests[j].len});
      remote.push_back({reinterpret_cast<void*>(requests[j].addr), requests[j].len});
    }
    ++syscalls_;
    if (watch_) {
      watch_->addr.store(requests[first].addr, std::memory_order_relaxed);
      watch_->len.store(requests[first].len, std::memory_order_relaxed);
      watch_->since_ns.store(monotonic_ns(), std::memory_order_release);
    }
    ssize_t n = process_vm_readv(pid_, local.data(), local.size(), remote.data(), remote.size(), 0);
    if (watch_) watch_->since_ns.store(0, std::memory_order_release);
    if (n < 0) {
      last_errno_ = errno;
      if (errno == ESRCH || errno == EPERM) {
        // The target is gone or forbidden: nothing after this can succeed.
        return done;
      }
      n = 0;  // EFAULT on the first iovec: treat as zero bytes transferred
    }
    bytes_read_ += static_cast<uint64_t>(n);
    // The kernel stops at the first remote iovec it cannot read entirely;
    // everything before it is complete.
    size_t left = static_cast<size_t>(n);
    size_t j = first;
    for (; j < first + local.size(); ++j) {
      if (left >= requests[j].len) {
        left -= requests[j].len;
        requests[j].ok = true;
        ++done;
      } else {
        break;
      }
    }
    if (j < first + local.size()) {
      // requests[j] failed (or was cut short): skip it and go on after it.
      if (last_errno_ == 0) last_errno_ = EFAULT;
      i = j + 1;
    } else {
      i = j;
    }
  }
  return done;
}

}  // namespace oomsnap
