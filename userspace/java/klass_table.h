// What the Java heap walk keeps per distinct klass (Walker, heap_walk.cpp):
// its counts and what was decided at first sight, in a table that never
// moves an entry and never grows past its cap.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "java/java_heap.h"

namespace oomsnap::java_walk {

struct Counts {
  uint64_t objects = 0, bytes = 0;
  void add(uint64_t size) {
    ++objects;
    bytes += size;
  }
};

// What the walk keeps per distinct klass: decided once from the Klass at
// first sight, the name included, but not the name itself (a walk can meet a
// million classes; only the top few are named, at the end).
struct KlassEntry {
  enum : uint8_t { kValid = 1, kArray = 2, kMirror = 4, kFiller = 8, kUnsizable = 16, kPastCap = 32 };
  uint64_t addr = 0;
  Counts exact;    // counted exactly (full walk, humongous)
  Counts sampled;  // seen in sampled windows, scaled at the end
  int32_t lh = 0;
  // A hash of the name read at first sight: the name read again at the end
  // must match, or the Klass was unloaded and its memory reused meanwhile.
  uint16_t name_check = 0;
  uint8_t flags = 0;
  bool has(uint8_t f) const { return (flags & f) != 0; }
};
// With its index slots (4 bytes each, at least 3/8 full), under 64 bytes per klass.
static_assert(sizeof(KlassEntry) <= 48);

// The klasses met, in pages of entries that never move (the walk holds
// pointers to them) and an open-addressing index of entry numbers: no
// allocation per klass, and a bounded size (the cap).
class KlassTable {
 public:
  explicit KlassTable(size_t cap) : cap_(std::min(cap, JavaHeapLimits::kMaxKlasses)) {}
  size_t size() const { return size_; }
  size_t cap() const { return cap_; }
  KlassEntry& at(size_t i) { return pages_[i >> kPageBits][i & (kPage - 1)]; }
  KlassEntry* find(uint64_t addr) {
    if (index_.empty()) return nullptr;
    for (size_t s = slot_of(addr);; s = (s + 1) & (index_.size() - 1)) {
      if (index_[s] == kEmpty) return nullptr;
      KlassEntry& e = at(index_[s]);
      if (e.addr == addr) return &e;
    }
  }
  // A new zeroed entry for addr (not in the table); nullptr once the table
  // holds cap() entries.
  KlassEntry* insert(uint64_t addr) {
    if (size_ >= cap_) return nullptr;
    // Grown at 3/4 full: linear probing stays short.
    if ((size_ + 1) * 4 > index_.size() * 3) grow_index();
    if ((size_ >> kPageBits) == pages_.size()) pages_.push_back(std::make_unique<KlassEntry[]>(kPage));
    const uint32_t n = static_cast<uint32_t>(size_++);
    KlassEntry& e = at(n);
    e.addr = addr;
    place(addr, n);
    return &e;
  }

 private:
  static constexpr size_t kPageBits = 12, kPage = size_t{1} << kPageBits;
  static constexpr uint32_t kEmpty = UINT32_MAX;
  size_t slot_of(uint64_t addr) const {
    return static_cast<size_t>(((addr >> 3) * 0x9E3779B97F4A7C15ull) >> (64 - index_bits_));
  }
  void place(uint64_t addr, uint32_t n) {
    size_t s = slot_of(addr);
    while (index_[s] != kEmpty) s = (s + 1) & (index_.size() - 1);
    index_[s] = n;
  }
  void grow_index() {
    index_bits_ = index_.empty() ? 10 : index_bits_ + 1;
    index_.assign(size_t{1} << index_bits_, kEmpty);
    for (size_t i = 0; i < size_; ++i) place(at(i).addr, static_cast<uint32_t>(i));
  }

  size_t cap_;
  size_t size_ = 0;
  unsigned index_bits_ = 0;
  std::vector<std::unique_ptr<KlassEntry[]>> pages_;
  std::vector<uint32_t> index_;
};

// 16 bits of FNV-1a over the name.
inline uint16_t name_check(std::string_view name) {
  uint32_t h = 2166136261u;
  for (unsigned char c : name) h = (h ^ c) * 16777619u;
  return static_cast<uint16_t>(h ^ (h >> 16));
}

}  // namespace oomsnap::java_walk
