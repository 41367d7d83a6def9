// Reads another process's memory in aligned chunks and serves small reads from
// them, for readers that chase pointers through a heap (CPython GC lists,
// HotSpot regions). Neighbouring objects usually share a chunk, so a walk over
// N objects costs about (bytes touched / chunk size) syscalls instead of N.
// Chunks are clamped to the target's readable mappings; an address outside
// them (stale maps, hostile pointer) falls back to one exact read (at most
// 256 that fail per cache: a hostile word costs no syscall after); a chunk
// that fails to read inside one re-reads the maps once (part of the mapping
// may have gone since), and is not read again under the same maps. Bounded:
// at most `max_cached` bytes are held; eviction is CLOCK (second chance), so
// chunks still in use by a second stream of reads are kept.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "base/huge_page_allocator.h"
#include "core/proc_info.h"
#include "core/remote_memory.h"

namespace oomsnap {

class Target;

class ChunkCache {
 public:
  static constexpr size_t kDefaultChunk = size_t{128} << 10;
  static constexpr size_t kDefaultMaxCached = size_t{32} << 20;
  // A collector's cache of its target: its memory, its maps, and its kept
  // /proc/PID/maps descriptor to read them again (see read_maps_from), so no
  // collector can forget the last. `target` must outlive the cache.
  explicit ChunkCache(Target& target, size_t chunk_bytes = kDefaultChunk, size_t max_cached = kDefaultMaxCached);
  ChunkCache(RemoteMemory& mem, const std::vector<Mapping>& maps, size_t chunk_bytes = kDefaultChunk,
             size_t max_cached = kDefaultMaxCached);
  ~ChunkCache();
  ChunkCache(const ChunkCache&) = delete;
  ChunkCache& operator=(const ChunkCache&) = delete;

  // Copies len bytes at addr into out. False when any byte cannot be read.
  bool read(uint64_t addr, void* out, size_t len) {
    if (const uint8_t* p = in_last(addr, len)) {
      std::memcpy(out, p, len);
      return true;
    }
    return read_slow(addr, out, len);
  }
  template <typename T>
  bool get(uint64_t addr, T& v) { return read(addr, &v, sizeof(T)); }
  // A pointer to len (<= chunk size) bytes at addr, valid until the next call;
  // nullptr when unreadable. Copies into a scratch buffer when the range
  // crosses a chunk boundary.
  const uint8_t* view(uint64_t addr, size_t len) {
    if (const uint8_t* p = in_last(addr, len)) return p;
    return view_slow(addr, len);
  }
  // The bytes from addr to the end of the chunk holding it (at least
  // min_len of them, else nullptr), and in end the address that ends them:
  // a run of small records is then read without a call per record. Valid
  // until the next call.
  const uint8_t* span(uint64_t addr, size_t min_len, uint64_t& end) {
    const Slot* s = chunk_for(addr);
    if (!s || addr + min_len > s->hi || addr + min_len < addr) return nullptr;
    end = s->hi;
    return data_ + static_cast<size_t>(s - slots_.data()) * chunk_ + (addr - s->base);
  }
  // Are the bytes at addr in the cache now (no read is made to tell)? A walk
  // may then put off what would cost a read out of order.
  bool holds(uint64_t addr) const {
    if (last_ && addr >= last_->lo && addr < last_->hi) return true;
    return by_chunk(addr) != nullptr;
  }
  // Is addr inside a readable mapping of the target (as of the maps snapshot)?
  bool mapped(uint64_t addr) { return find_or_refresh(addr) != nullptr; }
  // Bytes from addr to the end of the readable mapping holding it (0 when
  // none): the most an object or buffer at addr can span.
  uint64_t readable_room(uint64_t addr) {
    const Mapping* m = find_or_refresh(addr);
    return m ? m->end - addr : 0;
  }

  // Forgets the bytes read so far, so that a walk which saw the target change
  // under it starts again on fresh ones; the maps and the read budget stay.
  void forget_contents();

  // Where the maps are read again: the target's kept descriptor
  // (Target::proc), which a capture process can still read once it opens no
  // file (capture/sandbox_policy.h). Without it, /proc/PID/maps by path.
  // `proc` must outlive the cache.
  void read_maps_from(const ProcFiles& proc) { maps_source_ = &proc; }

  // Stop reading once this many bytes came from the target (0 = no limit).
  void set_read_limit(uint64_t bytes) { read_limit_ = bytes; }
  bool read_limit_hit() const { return read_limit_hit_; }
  // The target's memory could not be read at all any more (exited, ESRCH).
  bool target_gone() const { return gone_; }

 private:
  struct Slot {
    uint64_t key = 0;       // index_ key: lo (== base unless a mapping starts mid-chunk); ~0 when empty
    uint64_t base = 0;      // chunk-aligned address
    uint64_t lo = 0, hi = 0;  // readable part [lo, hi) within the chunk
    bool used = false;        // CLOCK bit: touched since the hand last passed
    uint32_t maps_generation = 0;  // the maps it was clamped to (set_maps counts them)
  };
  // The bytes when [addr, addr+len) lies in the chunk of the previous access
  // (the common case of a sequential walk), else nullptr.
  const uint8_t* in_last(uint64_t addr, size_t len) const {
    if (last_ && addr >= last_->lo && addr + len <= last_->hi && addr + len >= addr)
      return data_ + static_cast<size_t>(last_ - slots_.data()) * chunk_ + (addr - last_->base);
    return nullptr;
  }
  bool read_slow(uint64_t addr, void* out, size_t len);
  const uint8_t* view_slow(uint64_t addr, size_t len);
  const Mapping* find_mapping(uint64_t addr) const;
  // find_mapping, re-reading /proc/PID/maps when the address is in none
  // (may_refresh: a few at once, then at most one per 10 ms): the target
  // maps new heap while we read.
  const Mapping* find_or_refresh(uint64_t addr);
  bool refresh_maps();  // re-reads the maps when may_refresh allows; false if not
  void set_maps(const std::vector<Mapping>& maps);
  const Slot* chunk_for(uint64_t addr);  // last_ or lookup
  Slot* lookup(uint64_t addr);
  Slot* lookup_in_maps(uint64_t addr, bool& read_failed);
  uint8_t* slot_data(size_t i) { return data_ + i * chunk_; }
  // The slot holding addr by its chunk number, direct-mapped: no hash map
  // (whose modulo was most of a CPython walk's question, per reference, of
  // whether its bytes are cached). nullptr also when another chunk took the
  // entry: then index_ still finds it.
  const Slot* by_chunk(uint64_t addr) const {
    const uint32_t i = by_chunk_[(addr >> chunk_shift_) & (by_chunk_.size() - 1)];
    return i && addr >= slots_[i - 1].lo && addr < slots_[i - 1].hi ? &slots_[i - 1] : nullptr;
  }
  uint32_t& by_chunk_entry(uint64_t addr) { return by_chunk_[(addr >> chunk_shift_) & (by_chunk_.size() - 1)]; }
  bool budget_ok(size_t len);

  RemoteMemory& mem_;
  std::vector<Mapping> readable_;  // sorted by start
  mutable size_t last_mapping_ = 0;  // index in readable_ of find_mapping's last hit
  uint32_t maps_generation_ = 0;
  size_t chunk_;
  size_t nslots_;
  uint8_t* data_ = nullptr;
  size_t mapped_bytes_ = 0;
  std::vector<Slot> slots_;
  std::unordered_map<uint64_t, uint32_t> index_;  // chunk base -> slot
  std::vector<uint32_t> by_chunk_;                // chunk number mod its size -> slot + 1 (0: none)
  unsigned chunk_shift_ = 0;
  size_t next_victim_ = 0;
  Slot* last_ = nullptr;  // the slot of the previous access
  std::vector<uint8_t> scratch_;
  uint64_t read_limit_ = 0;
  bool read_limit_hit_ = false;
  bool gone_ = false;
  bool may_refresh();
  static constexpr unsigned kPromptRefreshes = 8, kMaxRefreshes = 256;
  static constexpr std::chrono::milliseconds kRefreshInterval{10};
  unsigned refreshes_ = 0;
  const ProcFiles* maps_source_ = nullptr;
  std::chrono::steady_clock::time_point last_refresh_{};
  static constexpr unsigned kMaxFailedExactReads = 256;
  unsigned failed_exact_reads_ = 0;
};

}  // namespace oomsnap
