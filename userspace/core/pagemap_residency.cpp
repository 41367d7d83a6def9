#include "core/pagemap_residency.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "base/text.h"

namespace oomsnap {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kPresent = uint64_t{1} << 63;
constexpr uint64_t kFileOrShared = uint64_t{1} << 61;
constexpr size_t kBatch = 8192;  // entries per pread: 64 KiB

}  // namespace

PagemapResidency::PagemapResidency(const ProcFiles& proc, uint64_t max_pages,
                                   std::chrono::steady_clock::time_point deadline)
    : pages_left_(max_pages), deadline_(deadline) {
  // Its own descriptor of the file (read by pread: no shared position).
  const int fd = proc.fd(ProcFile::kPagemap);
  fd_.reset(fd >= 0 ? ::fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1);
  if (fd_.get() < 0) why_ = "cannot open " + proc.path(ProcFile::kPagemap) + ": " + errno_text(errno);
}

std::optional<uint64_t> PagemapResidency::resident_anon(uint64_t start, uint64_t end) {
  if (fd_.get() < 0) return std::nullopt;
  if (end <= start) return 0;
  if (const auto it = read_.find({start, end}); it != read_.end()) return it->second;
  uint64_t first = start / kPage, last = (end + kPage - 1) / kPage;  // [first, last)
  if (last - first > pages_left_) {
    why_ = "pagemap page budget spent";
    return std::nullopt;
  }
  if (std::chrono::steady_clock::now() >= deadline_) {
    why_ = "pagemap read past its deadline";
    return std::nullopt;
  }
  pages_left_ -= last - first;
  uint64_t entries[kBatch];
  uint64_t resident = 0;
  for (uint64_t page = first; page < last;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kBatch, last - page));
    const ssize_t got = ::pread(fd_.get(), entries, n * sizeof(uint64_t), static_cast<off_t>(page * sizeof(uint64_t)));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0 || got % sizeof(uint64_t) != 0) {
      why_ = "pagemap read failed at " + hex(page * kPage);
      return std::nullopt;
    }
    const size_t m = static_cast<size_t>(got) / sizeof(uint64_t);
    for (size_t i = 0; i < m; ++i)
      if ((entries[i] & kPresent) && !(entries[i] & kFileOrShared)) ++resident;
    page += m;
  }
  if (read_.size() < kMaxRemembered) read_[{start, end}] = resident * kPage;
  return resident * kPage;
}

}  // namespace oomsnap
