#include "core/memory_image.h"

#include <cstring>

namespace oomsnap {

void MemoryImage::add(uint64_t addr, std::vector<uint8_t> bytes) {
  auto [it, inserted] = pieces_.try_emplace(addr);
  if (!inserted) bytes_ -= it->second.size();
  bytes_ += bytes.size();
  it->second = std::move(bytes);
}

bool MemoryImage::read(uint64_t addr, void* buf, size_t len) const {
  // The pieces that start at or below addr, nearest first: a short piece may
  // sit between addr and a longer one that holds the range (overlapping
  // pieces are rare: buckets do not overlap), so look at a few.
  auto it = pieces_.upper_bound(addr);
  for (int tries = 0; tries < 4 && it != pieces_.begin(); ++tries) {
    --it;
    const uint64_t off = addr - it->first;
    if (off <= it->second.size() && len <= it->second.size() - off) {
      if (len) std::memcpy(buf, it->second.data() + off, len);
      return true;
    }
  }
  return false;
}

}  // namespace oomsnap
