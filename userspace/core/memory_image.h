// A copy of some of a process's memory, taken when it could still be read
// (the last gasp's buckets, read by BPF in the dying process): the pieces by
// their address, read back like the live memory (RemoteMemory over an image).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace oomsnap {

class MemoryImage {
 public:
  // The bytes at addr. A piece that starts where one already starts replaces
  // it (a bucket sent twice: a looping list); one that overlaps another
  // otherwise is refused (false): no process's memory holds two different
  // bytes at one address, and so a read needs to look at one piece only.
  [[nodiscard]] bool add(uint64_t addr, std::vector<uint8_t> bytes);
  // Copies len bytes at addr when one piece holds them all.
  bool read(uint64_t addr, void* buf, size_t len) const;
  size_t pieces() const { return pieces_.size(); }
  const std::map<uint64_t, std::vector<uint8_t>>& by_address() const { return pieces_; }
  uint64_t bytes() const { return bytes_; }

 private:
  std::map<uint64_t, std::vector<uint8_t>> pieces_;
  uint64_t bytes_ = 0;
};

}  // namespace oomsnap
