// A set of non-zero 64-bit addresses (open addressing, linear probing), for
// "count each remote object once" and cycle checks over millions of objects
// without a node allocation per entry. A large table is huge-page backed:
// first touch of fresh pages dominated a 1M-object walk otherwise (see
// huge_page_allocator.h); a small one comes from malloc, or an empty
// fallback set would fault in (and zero) a 2 MiB page of its own.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/huge_page_allocator.h"

namespace oomsnap {

class AddressSet {
 public:
  explicit AddressSet(size_t expected = 1024) {
    size_t cap = 16;
    while (cap < expected * 2) cap <<= 1;
    slots_.assign(cap, 0);
  }
  // True when addr was not in the set (and is now). Zero is never stored.
  bool insert(uint64_t addr) {
    if (addr == 0) return false;
    if ((size_ + 1) * 2 > slots_.size()) grow();
    return place(slots_, addr);
  }
  bool contains(uint64_t addr) const {
    if (addr == 0) return false;
    const size_t mask = slots_.size() - 1;
    for (size_t i = hash(addr) & mask;; i = (i + 1) & mask) {
      if (slots_[i] == addr) return true;
      if (slots_[i] == 0) return false;
    }
  }
  size_t size() const { return size_; }

 private:
  // murmur3's fmix64: every input bit moves every output bit, so the low bits
  // used as the slot index are well mixed for strided heap addresses.
  static size_t hash(uint64_t a) {
    a ^= a >> 33;
    a *= 0xff51afd7ed558ccdull;
    a ^= a >> 33;
    a *= 0xc4ceb9fe1a85ec53ull;
    a ^= a >> 33;
    return static_cast<size_t>(a);
  }
  using Table = ScratchVector<uint64_t>;
  bool place(Table& table, uint64_t addr) {
    const size_t mask = table.size() - 1;
    for (size_t i = hash(addr) & mask;; i = (i + 1) & mask) {
      if (table[i] == addr) return false;
      if (table[i] == 0) {
        table[i] = addr;
        ++size_;
        return true;
      }
    }
  }
  void grow() {
    Table bigger(slots_.size() * 2, 0);
    size_ = 0;
    for (uint64_t a : slots_)
      if (a) place(bigger, a);
    slots_.swap(bigger);
  }
  Table slots_;
  size_t size_ = 0;
};

}  // namespace oomsnap
