#include "core/memory_image.h"

#include <cstdint>
#include <cstring>
#include <iterator>

namespace oomsnap {

bool MemoryImage::add(uint64_t addr, std::vector<uint8_t> bytes) {
  if (bytes.size() > UINT64_MAX - addr) return false;
  auto next = pieces_.upper_bound(addr);
  // Whatever starts after addr must start at or past this piece's end, and
  // the piece before (not at addr: that one is replaced) end at or before addr.
  if (next != pieces_.end() && next->first < addr + bytes.size()) return false;
  if (next != pieces_.begin()) {
    auto prev = std::prev(next);
    if (prev->first != addr && prev->second.size() > addr - prev->first) return false;
  }
  auto [it, inserted] = pieces_.try_emplace(addr);
  if (!inserted) bytes_ -= it->second.size();
  bytes_ += bytes.size();
  it->second = std::move(bytes);
  return true;
}

bool MemoryImage::read(uint64_t addr, void* buf, size_t len) const {
  // Pieces do not overlap (add): only the one starting at or below addr can hold it.
  auto it = pieces_.upper_bound(addr);
  if (it == pieces_.begin()) return false;
  --it;
  const uint64_t off = addr - it->first;
  if (off > it->second.size() || len > it->second.size() - off) return false;
  if (len) std::memcpy(buf, it->second.data() + off, len);
  return true;
}

}  // namespace oomsnap
