#include "core/chunk_cache.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/target.h"

namespace oomsnap {

ChunkCache::ChunkCache(Target& target, size_t chunk_bytes, size_t max_cached)
    : ChunkCache(target.memory(), target.maps(), chunk_bytes, max_cached) {
  read_maps_from(target.proc());
}

ChunkCache::ChunkCache(RemoteMemory& mem, const std::vector<Mapping>& maps, size_t chunk_bytes,
                       size_t max_cached)
    : mem_(mem), chunk_(chunk_bytes), nslots_(std::max<size_t>(2, max_cached / chunk_bytes)) {
  set_maps(maps);
  slots_.assign(nslots_, Slot{~uint64_t{0}, ~uint64_t{0}, 0, 0, false, 0});
  index_.reserve(nslots_ * 2);
  if (chunk_ < 64 || (chunk_ & (chunk_ - 1)))  // chunk bases are addresses with the low bits cleared
    throw std::invalid_argument("ChunkCache: a chunk of " + std::to_string(chunk_) + " bytes is no power of two");
  chunk_shift_ = static_cast<unsigned>(__builtin_ctzll(chunk_));
  size_t entries = 64;
  while (entries < nslots_ * 4) entries <<= 1;
  by_chunk_.assign(entries, 0);
  scratch_.resize(chunk_);
}

ChunkCache::~ChunkCache() {
  if (data_) huge_page_free(data_, mapped_bytes_);
}

void ChunkCache::set_maps(const std::vector<Mapping>& maps) {
  readable_.clear();
  for (const auto& m : maps)
    if (!m.perms.empty() && m.perms[0] == 'r' && m.end > m.start) readable_.push_back(m);
  std::sort(readable_.begin(), readable_.end(), [](const Mapping& a, const Mapping& b) { return a.start < b.start; });
  last_mapping_ = 0;
  ++maps_generation_;
}

void ChunkCache::forget_contents() {
  index_.clear();
  std::fill(by_chunk_.begin(), by_chunk_.end(), 0);
  for (Slot& s : slots_) s = Slot{~uint64_t{0}, ~uint64_t{0}, 0, 0, false, 0};
  last_ = nullptr;
}

const Mapping* ChunkCache::find_or_refresh(uint64_t addr) {
  if (const Mapping* m = find_mapping(addr)) return m;
  return refresh_maps() ? find_mapping(addr) : nullptr;
}

bool ChunkCache::refresh_maps() {
  if (gone_ || !may_refresh()) return false;
  std::vector<Mapping> maps;
  if (!maps_source_) {
    maps = read_maps(mem_.pid());
  } else if (std::string text; maps_source_->read(ProcFile::kMaps, text)) {
    maps = parse_proc_maps(text);
  }
  if (maps.empty()) {
    gone_ = true;  // no /proc/PID/maps: the target has exited
    return false;
  }
  set_maps(maps);
  return true;
}

// The maps go stale while the target maps memory as we read, so an address
// in none of them re-reads them; but a hostile word points anywhere, every
// such lookup would re-read them. The first few refreshes come at once, then
// at most one per kRefreshInterval.
bool ChunkCache::may_refresh() {
  const auto now = std::chrono::steady_clock::now();
  if (refreshes_ >= kMaxRefreshes) return false;
  if (refreshes_ >= kPromptRefreshes && now - last_refresh_ < kRefreshInterval) return false;
  ++refreshes_;
  last_refresh_ = now;
  return true;
}

const Mapping* ChunkCache::find_mapping(uint64_t addr) const {
  // A walk asks about the same heap mapping over and over: try the last hit
  // before the binary search.
  if (last_mapping_ < readable_.size()) {
    const Mapping& m = readable_[last_mapping_];
    if (addr >= m.start && addr < m.end) return &m;
  }
  auto it = std::upper_bound(readable_.begin(), readable_.end(), addr,
                             [](uint64_t a, const Mapping& m) { return a < m.start; });
  if (it == readable_.begin()) return nullptr;
  --it;
  if (addr >= it->end) return nullptr;
  last_mapping_ = static_cast<size_t>(it - readable_.begin());
  return &*it;
}

bool ChunkCache::budget_ok(size_t len) {
  if (read_limit_ && mem_.bytes_read() + len > read_limit_) {
    read_limit_hit_ = true;
    return false;
  }
  return true;
}

const ChunkCache::Slot* ChunkCache::chunk_for(uint64_t addr) {
  if (last_ && addr >= last_->lo && addr < last_->hi) return last_;
  last_ = lookup(addr);
  if (last_) last_->used = true;
  return last_;
}

// A chunk read that fails inside a known mapping may mean stale maps: part
// of the mapping was unmapped since they were read (an allocator returning a
// block that the kernel had merged with live memory), and the part holding
// addr is still there. The maps are read again and the chunk clamped anew.
ChunkCache::Slot* ChunkCache::lookup(uint64_t addr) {
  bool read_failed = false;
  Slot* s = lookup_in_maps(addr, read_failed);
  if (!s && read_failed && refresh_maps()) s = lookup_in_maps(addr, read_failed);
  return s;
}

ChunkCache::Slot* ChunkCache::lookup_in_maps(uint64_t addr, bool& read_failed) {
  const uint64_t base = addr & ~(uint64_t{chunk_} - 1);
  // Fast paths: the chunk by its number, or keyed by its aligned base.
  if (const Slot* s = by_chunk(addr)) return &slots_[static_cast<size_t>(s - slots_.data())];
  if (auto it = index_.find(base); it != index_.end()) {
    Slot& s = slots_[it->second];
    if (addr >= s.lo && addr < s.hi) return &s;
  }
  const Mapping* m = find_or_refresh(addr);
  if (!m || gone_) return nullptr;
  // Clamp to the mapping: a chunk never spans two mappings, so one failed
  // read cannot hide the other. When a mapping starts inside the chunk, that
  // part is its own slot, keyed by its (unaligned) start.
  const uint64_t lo = std::max(base, m->start), hi = std::min(base + chunk_, m->end);
  if (auto it = index_.find(lo); it != index_.end()) {
    Slot& s = slots_[it->second];
    if (addr >= s.lo && addr < s.hi) return &s;
    // Unreadable under these maps already: no second syscall for it. Read
    // under older maps: they changed, so read it again.
    if (s.maps_generation == maps_generation_) return nullptr;
    index_.erase(it);
  }
  if (!budget_ok(hi - lo)) return nullptr;
  if (!data_) data_ = static_cast<uint8_t*>(huge_page_alloc(nslots_ * chunk_, mapped_bytes_));
  // CLOCK: pass over recently used slots once (clearing their bit).
  while (slots_[next_victim_].used) {
    slots_[next_victim_].used = false;
    next_victim_ = (next_victim_ + 1) % nslots_;
  }
  const size_t victim = next_victim_;
  next_victim_ = (next_victim_ + 1) % nslots_;
  Slot& s = slots_[victim];
  if (s.key != ~uint64_t{0}) {
    auto it = index_.find(s.key);
    if (it != index_.end() && it->second == victim) index_.erase(it);
    if (uint32_t& e = by_chunk_entry(s.base); e == victim + 1) e = 0;
  }
  s = Slot{lo, base, lo, hi, false, maps_generation_};
  if (!mem_.read(lo, slot_data(victim) + (lo - base), hi - lo)) {
    if (mem_.last_errno() == ESRCH) gone_ = true;
    // Unreadable now: remembered as empty under these maps.
    s.lo = s.hi = 0;
    read_failed = true;
  }
  index_[lo] = static_cast<uint32_t>(victim);
  by_chunk_entry(base) = static_cast<uint32_t>(victim) + 1;
  return addr >= s.lo && addr < s.hi ? &s : nullptr;
}

const uint8_t* ChunkCache::view_slow(uint64_t addr, size_t len) {
  if (len == 0 || len > chunk_ || addr + len < addr) return nullptr;
  const Slot* s = chunk_for(addr);
  if (s && addr + len <= s->hi) return slot_data(static_cast<size_t>(s - slots_.data())) + (addr - s->base);
  // Crosses the end of the chunk (or of the readable part): assemble.
  return read(addr, scratch_.data(), len) ? scratch_.data() : nullptr;
}

bool ChunkCache::read_slow(uint64_t addr, void* out, size_t len) {
  auto* dst = static_cast<uint8_t*>(out);
  if (addr + len < addr) return false;
  while (len > 0) {
    const Slot* s = chunk_for(addr);
    if (!s) {
      // Not in a known mapping (or the chunk failed): one exact read, in
      // case the maps went stale. A hostile word points anywhere, and each
      // such read is a failed syscall: after kMaxFailedExactReads of them,
      // addresses outside the known mappings fail without one.
      if (gone_ || find_mapping(addr) || failed_exact_reads_ >= kMaxFailedExactReads || !budget_ok(len))
        return false;
      if (!mem_.read(addr, dst, len)) {
        if (mem_.last_errno() == ESRCH) gone_ = true;
        ++failed_exact_reads_;
        return false;
      }
      return true;
    }
    size_t n = std::min<uint64_t>(len, s->hi - addr);
    std::memcpy(dst, slot_data(static_cast<size_t>(s - slots_.data())) + (addr - s->base), n);
    dst += n;
    addr += n;
    len -= n;
  }
  return true;
}

}  // namespace oomsnap
