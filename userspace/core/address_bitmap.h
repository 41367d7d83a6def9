// "Seen" marks for remote object addresses (8-byte granularity), one bit per
// address in 1 MiB regions. Objects referenced together usually live close
// together, so marks hit the same few cache lines, where a hash set probes a
// random slot of a large table per object (that cache miss dominated a
// 1M-object CPython walk). Bounded: after max_regions regions, further
// addresses go to a hash set.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/address_set.h"
#include "base/huge_page_allocator.h"

namespace oomsnap {

class AddressBitmap {
 public:
  static constexpr unsigned kRegionShift = 20;                      // 1 MiB
  static constexpr size_t kWordsPerRegion = (size_t{1} << kRegionShift) / 8 / 64;  // 2048 x 64 bits

  explicit AddressBitmap(size_t max_regions = 4096) : max_regions_(max_regions) { recent_.fill({~uint64_t{0}, 0}); }
  ~AddressBitmap() {
    for (auto& [p, bytes] : blocks_) huge_page_free(p, bytes);
  }
  AddressBitmap(const AddressBitmap&) = delete;
  AddressBitmap& operator=(const AddressBitmap&) = delete;

  // Never allocates: a lookup of an address nothing was marked near (a junk
  // word of the target's) costs no memory.
  bool contains(uint64_t addr) {
    if (addr == 0) return false;
    uint64_t* words = region(addr >> kRegionShift, false);
    if (!words) return overflow_.size() && overflow_.contains(addr);
    return words[word_of(addr)] & bit_of(addr);
  }

  // Bitmap regions allocated (16 KiB each).
  size_t regions() const { return index_.size(); }

  // True when addr was not marked before (and is now). Zero is never marked.
  bool insert(uint64_t addr) {
    if (addr == 0) return false;
    uint64_t* words = region(addr >> kRegionShift, true);
    if (!words) return overflow_.insert(addr);
    uint64_t& w = words[word_of(addr)];
    const uint64_t m = bit_of(addr);
    if (w & m) return false;
    w |= m;
    return true;
  }

  // Marks addr only in a bitmap region, never in the fallback set: false
  // (nothing marked) when its region does not exist and no more may be made.
  // For marks that may be dropped, such as work put off for later.
  bool insert_if_room(uint64_t addr) {
    uint64_t* words = addr ? region(addr >> kRegionShift, true) : nullptr;
    if (!words) return false;
    words[word_of(addr)] |= bit_of(addr);
    return true;
  }

  // Calls f(addr) for each address marked in a region (not those in the
  // fallback set), in address order, until f returns false. f must not mark.
  template <typename F>
  void for_each_in_regions(F&& f) const {
    std::vector<std::pair<uint64_t, const uint64_t*>> regions(index_.begin(), index_.end());
    std::sort(regions.begin(), regions.end());
    for (const auto& [r, words] : regions)
      for (size_t i = 0; i < kWordsPerRegion; ++i)
        for (uint64_t w = words[i]; w; w &= w - 1) {
          const uint64_t bit = i * 64 + static_cast<uint64_t>(__builtin_ctzll(w));
          if (!f((r << kRegionShift) | (bit << 3))) return;
        }
  }

 private:
  // addr's word in its region's bitmap, and its bit in that word (one bit per 8 bytes).
  static size_t word_of(uint64_t addr) { return (addr & ((uint64_t{1} << kRegionShift) - 1)) >> 9; }
  static uint64_t bit_of(uint64_t addr) { return uint64_t{1} << ((addr >> 3) & 63); }
  // The bitmap of region r; created when `create` (and the limit allows),
  // else nullptr when it has none.
  // Inlined: a walk asks several times per object, nearly always of a recent
  // region (out of line, the call was a tenth of a CPython walk). A region
  // found not to exist is remembered too: a walk asks about a million
  // objects before it marks the first of their regions.
  [[gnu::always_inline]] uint64_t* region(uint64_t r, bool create) {
    const auto& hot = recent_[r & (recent_.size() - 1)];
    if (hot.first == r && (hot.second || !create)) return hot.second;
    return region_slow(r, create);
  }
  [[gnu::noinline]] uint64_t* region_slow(uint64_t r, bool create) {
    auto& hot = recent_[r & (recent_.size() - 1)];
    uint64_t* words = nullptr;
    if (auto it = index_.find(r); it != index_.end()) {
      words = it->second;
    } else if (!create) {
      hot = {r, nullptr};
      return nullptr;
    } else {
      if (index_.size() >= max_regions_) return nullptr;
      words = allocate_region();
      index_.emplace(r, words);
    }
    hot = {r, words};
    return words;
  }
  uint64_t* allocate_region() {
    constexpr size_t kRegionBytes = kWordsPerRegion * 8;  // 16 KiB
    constexpr size_t kBlockBytes = size_t{2} << 20;       // carve from 2 MiB huge-page blocks
    if (blocks_.empty() || used_in_block_ + kRegionBytes > kBlockBytes) {
      size_t mapped = 0;
      void* p = huge_page_alloc(kBlockBytes, mapped);
      blocks_.push_back({p, mapped});
      used_in_block_ = 0;
    }
    auto* words = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(blocks_.back().first) + used_in_block_);
    used_in_block_ += kRegionBytes;
    return words;  // anonymous mappings are zero-filled
  }

  size_t max_regions_;
  // Direct-mapped by region number: a heap's regions are consecutive, so up
  // to 1 GiB of them never evict each other. With 16 entries the map behind
  // it took 5 % of a 1M-object CPython walk (180 MiB of heap); 16 KiB here.
  std::array<std::pair<uint64_t, uint64_t*>, 1024> recent_;
  std::unordered_map<uint64_t, uint64_t*> index_;
  std::vector<std::pair<void*, size_t>> blocks_;
  size_t used_in_block_ = 0;
  AddressSet overflow_;
};

}  // namespace oomsnap
