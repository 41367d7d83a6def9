// How many bytes of an address range of another process are resident
// anonymous pages, from /proc/PID/pagemap (8 bytes per page: present bit 63,
// file-or-shared bit 61). For the runtime's claims in the memory breakdown:
// a goroutine stack of 1 MiB may have 600 KiB of it touched, and only those
// are RSS. Bounded: at most max_pages pages read over the object's life, and
// a deadline; past either, resident_anon says nothing (nullopt).
#pragma once
#include <sys/types.h>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "base/unique_fd.h"
#include "core/proc_files.h"

namespace oomsnap {

class PagemapResidency {
 public:
  static constexpr uint64_t kDefaultMaxPages = uint64_t{1} << 20;  // 4 GiB of address space, 8 MiB read

  PagemapResidency(const ProcFiles& proc, uint64_t max_pages, std::chrono::steady_clock::time_point deadline);
  // Resident anonymous bytes in [start, end); nullopt when pagemap cannot be
  // read, the page budget is spent or the deadline passed (why() says which).
  // A range asked again is answered from what was read (the breakdown's
  // claims walk the same arenas in turn: in-use heap, free heap, runtime),
  // so repeats spend neither the page budget nor reads.
  std::optional<uint64_t> resident_anon(uint64_t start, uint64_t end);
  const std::string& why() const { return why_; }

 private:
  UniqueFd fd_;
  uint64_t pages_left_;
  std::chrono::steady_clock::time_point deadline_;
  std::string why_;
  static constexpr size_t kMaxRemembered = 4096;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> read_;  // [start, end) -> resident bytes
};

}  // namespace oomsnap
