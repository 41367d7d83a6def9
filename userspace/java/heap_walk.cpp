// The Java heap walk: every G1 region in use, or every Serial or Parallel
// space, object by object from bottom to top (sampled in windows above the
// read budget), into a class histogram named as jcmd names it.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string_view>

#include "base/text.h"
#include "base/checked_bytes.h"
#include "java/java_heap.h"
#include "java/hotspot_vmstructs.h"
#include "java/klass_table.h"

namespace oomsnap {
namespace {

using java_walk::Counts;
using java_walk::KlassEntry;
using java_walk::KlassTable;
using java_walk::name_check;

// No space is believed larger than this (HotSpot's heaps stay below 32 TiB
// with compressed oops off, far below with them on).
constexpr uint64_t kMaxSpaceBytes = 1ull << 45;
// Symbols longer than this are not believed to be class names.
constexpr size_t kMaxNameBytes = 2048;
// Steps of a loop over heap memory between two looks at the clock.
constexpr uint64_t kDeadlineEvery = 4096;
constexpr int kMaxFailedRecordReads = JavaHeapLimits::kMaxFailedRecordReads;

// The order of Snapshot::sort_and_truncate: by bytes, then objects, both descending.
bool heavier(const Counts& a, const Counts& b) {
  if (a.bytes != b.bytes) return a.bytes > b.bytes;
  return a.objects > b.objects;
}

// ... then by name.
bool ranks_before(const JavaClassTotal& a, const JavaClassTotal& b) {
  if (a.bytes != b.bytes) return a.bytes > b.bytes;
  if (a.objects != b.objects) return a.objects > b.objects;
  return a.name < b.name;
}

bool plausible_name(std::string_view n) {
  if (n.empty()) return false;
  for (unsigned char c : n)
    if (c < 0x20 || c == 0x7f) return false;
  return true;
}

// The bytes of the region and klass records the walk copies: up to their
// farthest field (check_heap_layout keeps that below kMaxRecordBytes).
size_t region_record_bytes(const JavaHeapLayout& L) {
  return static_cast<size_t>(std::max({uint64_t{L.region_bottom} + 8, uint64_t{L.region_end} + 8,
                                       uint64_t{L.region_top} + 8, uint64_t{L.region_tag} + 4}));
}
size_t space_record_bytes(const JavaHeapLayout& L) {
  return static_cast<size_t>(
      std::max({uint64_t{L.space_bottom} + 8, uint64_t{L.space_end} + 8, uint64_t{L.space_top} + 8}));
}
size_t klass_record_bytes(const JavaHeapLayout& L) {
  return static_cast<size_t>(std::max(uint64_t{L.klass_layout_helper} + 4, uint64_t{L.klass_name} + 8));
}

}  // namespace


namespace java_walk {

// What decode() found at an address.
enum class Decoded {
  kObject,      // a plausible object: its klass and size are set
  kNoObject,    // readable, but not the start of a plausible object
  kUnreadable,  // the header cannot be read
};

class Walker {
 public:
  Walker(ChunkCache& mem, const JavaHeapLayout& L, const JavaHeapLimits& lim, const Deadline& d)
      : mem_(mem), L_(L), lim_(lim), deadline_(d), klasses_(lim.max_klasses) {}
  JavaHeapWalk run();
  std::optional<JavaHeapWalk> run_young_again();

 private:
  struct Region {
    enum Kind : uint8_t { kWalkable, kStartsHumongous, kContinuesHumongous };
    uint64_t bottom, top;
    Kind kind;
    const char* space = nullptr;  // G1: g1_region_space's name, when the types are named
    int64_t tag = 0;              // G1: HeapRegionType's tag, when VMStructs describes it
    // A young collection leaves it as it is, but for objects it appends:
    // the old space, G1's old regions and humongous objects (only when the
    // region types are named, JavaHeapLayout::region_spaces).
    bool stable = false;
  };
  // The figures a walk adds up, kept once the stable regions are walked.
  struct Checkpoint {
    std::vector<Counts> klass_counts;  // klasses_' exact counts, by entry number
    Counts past_cap;
    uint64_t regions_walked = 0, parsed_bytes = 0, unparsed_bytes = 0, objects = 0, filler_bytes = 0;
    uint64_t humongous_objects = 0, humongous_bytes = 0;
  };
  // A full walk: the stable regions first (each remembered in stable_), a
  // checkpoint, then the others.
  void walk_whole(const std::vector<Region>& regions);
  // The stable regions not `walked` yet (each remembered in stable_, as far
  // as it was walked), a checkpoint, then every region that is not stable.
  void walk_stable_then_young(const std::vector<Region>& regions, const std::vector<uint8_t>& walked);
  // A sampled walk: 1 of every r.sample_stride windows; the bytes of the
  // windows walked into window_bytes.
  void walk_sampled(const std::vector<Region>& regions, uint64_t& window_bytes);
  // One region of a full walk, whatever its kind.
  void walk_one(const Region& g);
  void save_checkpoint();
  void restore_checkpoint();
  // The end of every walk: sampled counts scaled, the classes chosen and
  // named, the coverage and the status.
  JavaHeapWalk finish(uint64_t walkable_used, uint64_t window_bytes);
  KlassEntry* klass_at(uint64_t klass);
  // The entry of a klass met once the table is full: decoded again unless
  // it is still in the small cache of such klasses, flagged kPastCap.
  KlassEntry* past_cap(uint64_t klass);
  void read_klass(uint64_t klass, KlassEntry& k);
  // The layout helper and the name (internal form, in name_buf_) of the
  // Klass at klass; false when it cannot be read or the name is implausible.
  bool read_klass_name(uint64_t klass, int32_t& lh, std::string_view& name);
  // The name of a counted class as Java prints it, read again now; a
  // placeholder naming the Klass when it no longer reads as it did.
  std::string class_name(const KlassEntry& k);
  // Whether the counted class named `name` (read just now) is a hidden
  // class or an array of one (hotspot_hidden_class_name); reads only for
  // names with a '+'.
  bool hidden(const KlassEntry& k, std::string_view name);
  bool in_archive(uint64_t addr) const;
  // Whether a counted instance class is VM-anonymous (JavaHeapLayout::misc_is_anonymous).
  bool anonymous(const KlassEntry& k);
  void count(KlassEntry& k, uint64_t size, bool sampled) {
    KlassEntry& into = k.has(KlassEntry::kPastCap) ? past_cap_ : k;
    (sampled ? into.sampled : into.exact).add(size);
  }
  // Sampled counts scaled into the exact ones, over every class.
  void scale_sampled(double scale);
  // res_.classes: the top lim_.max_entries classes, named; res_.class_count.
  void select_classes();
  // Of the classes tied at the boundary, the `want` first by name.
  std::vector<JavaClassTotal> first_by_name(const std::vector<uint32_t>& tied, size_t want);
  // The klass the object header at h names, whose mark word is mark; 0 when
  // it names none (a forwarded or marked compact header, a null narrow
  // klass, too few bytes).
  uint64_t header_klass(const ByteView& h, uint64_t mark) const;
  // Remembers a klass whose objects walk_known() may size (a valid instance
  // or array klass, neither mirror, filler, unsizable nor past the cap).
  void remember(KlassEntry& k);
  // walk_region's common case without a call per object: from a, the run of
  // objects, in the chunk already read, of klasses remembered, each fitting
  // below limit, up to end. Returns where the run stopped (a, when it did
  // not start); the general step takes over there and decides what that
  // object is. Every rule of decode() holds; only its lookups are skipped.
  uint64_t walk_known(uint64_t a, uint64_t limit, uint64_t end, uint64_t count_until, bool sampled);
  // Decodes the object at a (below limit): its klass and size. strict: also
  // require an unlocked mark word (for resynchronisation inside unparsable
  // memory).
  Decoded decode(uint64_t a, uint64_t limit, KlassEntry*& k, uint64_t& size, bool strict);
  // Reads the region table: the regions in use, sorted by address, and the
  // bytes in use outside humongous regions. Sets the result's reason when
  // the table itself cannot be read.
  std::vector<Region> read_regions(uint64_t& walkable_used);
  bool region_plausible(const Region& g, int64_t tag, uint64_t end) const;
  // Serial / Parallel: the spaces as regions, sorted by address, the empty
  // ones counted but left out. Sets the result's reason (naming the space
  // and its field) when a record cannot be read or a space is implausible:
  // then nothing is walked.
  std::vector<Region> read_spaces(uint64_t& walkable_used);
  // Without region types (JavaHeapLayout::region_types): the kind of each region
  // (sorted, in use) from the objects at their bottoms.
  void classify_untyped(std::vector<Region>& regions);
  void walk_humongous(const Region& g);
  // Parses [from, top) and counts the objects that start before count_until
  // (a sampling window's end; top for a full walk). from must be an object
  // start unless resync_first, then the walk first finds one.
  void walk_region(uint64_t from, uint64_t top, uint64_t count_until, bool sampled, bool resync_first);
  // The next address in [a, limit) where a plausible object starts, or
  // limit. Sets unreadable (and returns where) when memory there cannot be
  // read: the rest of the range is given up, not stepped through.
  uint64_t resync(uint64_t a, uint64_t limit, bool& unreadable);
  // Called once per step of every loop over heap memory: false once the walk
  // must end (deadline, target gone, read budget).
  bool keep_going();
  void stop(std::string why) {
    if (reason_.empty()) reason_ = std::move(why);
    stopped_ = true;
  }

  ChunkCache& mem_;
  const JavaHeapLayout& L_;
  const JavaHeapLimits& lim_;
  const Deadline& deadline_;
  KlassTable klasses_;
  uint64_t last_klass_addr_ = 0;
  KlassEntry* last_klass_ = nullptr;
  KlassEntry invalid_;
  std::vector<KlassEntry> past_cap_cache_;  // direct-mapped by address, allocated once the table is full
  KlassEntry past_cap_;                     // the counts of every class past the cap
  bool cap_reached_ = false;                // a valid klass found the table full
  std::vector<uint8_t> klass_buf_;  // one Klass record: klass_record_bytes(), sized once the layout is checked
  std::vector<char> name_buf_;      // one Klass name (kMaxNameBytes)
  JavaHeapWalk res_;
  std::string reason_;
  bool stopped_ = false;
  uint64_t steps_ = 0;
  // The remembered klasses, direct-mapped by address: a slot holds the last
  // one met there (a heap's objects mostly come from a few dozen classes).
  struct KnownKlass {
    uint64_t addr = 0;  // 0: empty
    KlassEntry* entry = nullptr;
    uint64_t instance_bytes = 0;  // 0 for arrays
    int32_t lh = 0;
  };
  static constexpr unsigned kKnownBits = 8;
  std::vector<KnownKlass> known_ = std::vector<KnownKlass>(size_t{1} << kKnownBits);
  static size_t known_slot(uint64_t klass) {
    return static_cast<size_t>(((klass >> 3) * 0x9E3779B97F4A7C15ull) >> (64 - kKnownBits));
  }
  size_t hole_ = 0;  // next TLAB hole to consider (holes sorted; found again at each region's start)
  std::vector<Region> stable_;
  Checkpoint checkpoint_;
};

bool Walker::keep_going() {
  if (stopped_) return false;
  if ((++steps_ % kDeadlineEvery) == 0 && deadline_.expired())
    stop("deadline reached");
  else if (mem_.target_gone())
    stop("target exited during the walk");
  else if (mem_.read_limit_hit())
    stop("read budget exhausted");
  return !stopped_;
}

bool Walker::read_klass_name(uint64_t klass, int32_t& lh, std::string_view& name) {
  if (!mem_.read(klass, klass_buf_.data(), klass_buf_.size())) return false;
  const ByteView kv(klass_buf_.data(), klass_buf_.size());
  uint64_t sym = 0;
  if (!kv.read_i32(L_.klass_layout_helper, lh) || !kv.read_u64(L_.klass_name, sym)) return false;
  auto s = read_symbol(mem_, sym, L_.symbol_length, L_.symbol_body, name_buf_);
  if (!s) return false;
  name = *s;
  return plausible_name(name);
}

void Walker::read_klass(uint64_t klass, KlassEntry& k) {
  int32_t lh = 0;
  std::string_view name;
  if (!read_klass_name(klass, lh, name)) return;
  const bool array = lh < 0;
  const int tag = lh >> 30;  // arithmetic: -1 type array, -2 object array
  const unsigned hdr_size = (static_cast<uint32_t>(lh) >> 16) & 0xff, log2 = static_cast<uint32_t>(lh) & 0x3f;
  const bool sane = array ? ((tag == -1 || tag == -2) && hdr_size >= 8 && hdr_size <= 32 && log2 <= 3 &&
                             name[0] == '[')
                          : (lh > 0 && lh < (1 << 24) && name[0] != '[');
  if (!sane) return;
  k.lh = lh;
  k.name_check = name_check(name);
  k.flags |= KlassEntry::kValid;
  if (array) k.flags |= KlassEntry::kArray;
  if (name == "java/lang/Class") k.flags |= KlassEntry::kMirror;
  if (name == "jdk/internal/vm/FillerObject" || name == "[Ljdk/internal/vm/FillerElement;")
    k.flags |= KlassEntry::kFiller;
  // Sized by a Java field SA reads from the class's field table; not exported.
  if (name == "jdk/internal/vm/StackChunk") k.flags |= KlassEntry::kUnsizable;
}

KlassEntry* Walker::klass_at(uint64_t klass) {
  if (klass == last_klass_addr_ && last_klass_) return last_klass_;
  if (!klass || (klass & 7)) return &invalid_;
  KlassEntry* k = klasses_.find(klass);
  if (!k) {
    // Every distinct klass address costs a read, once, while the table has room.
    k = klasses_.insert(klass);
    if (!k) return past_cap(klass);
    read_klass(klass, *k);
  }
  if (!k->has(KlassEntry::kValid)) return &invalid_;
  last_klass_addr_ = klass;
  last_klass_ = k;
  return k;
}

KlassEntry* Walker::past_cap(uint64_t klass) {
  // Past the cap a klass is read again at each object unless it is one of
  // the last few met; a small cache, so memory stays bounded.
  constexpr size_t kSlots = 1024;
  if (past_cap_cache_.empty()) past_cap_cache_.resize(kSlots);
  KlassEntry& e = past_cap_cache_[((klass >> 3) * 0x9E3779B97F4A7C15ull) >> 54];
  static_assert(kSlots == size_t{1} << (64 - 54));
  if (e.addr != klass) {
    e = KlassEntry{};
    e.addr = klass;
    read_klass(klass, e);
    e.flags |= KlassEntry::kPastCap;
  }
  if (!e.has(KlassEntry::kValid)) return &invalid_;
  cap_reached_ = true;
  return &e;
}

std::string Walker::class_name(const KlassEntry& k) {
  int32_t lh = 0;
  std::string_view name;
  if (read_klass_name(k.addr, lh, name) && lh == k.lh && name_check(name) == k.name_check) {
    std::string java = java_class_name(std::string(name), hidden(k, name));
    if (anonymous(k)) {
      char addr[24];
      std::snprintf(addr, sizeof addr, "/0x%016llx", static_cast<unsigned long long>(k.addr));
      java += addr;
    }
    return java;
  }
  char buf[80];
  std::snprintf(buf, sizeof buf, "<unreadable class name: Klass 0x%llx>", static_cast<unsigned long long>(k.addr));
  return buf;
}

bool Walker::hidden(const KlassEntry& k, std::string_view name) {
  if (name.find('+') == std::string_view::npos) return false;
  uint64_t element = k.addr;
  if (k.has(KlassEntry::kArray) &&
      (!L_.objarray_bottom_klass || !mem_.get(k.addr + L_.objarray_bottom_klass, element)))
    element = 0;
  return hotspot_hidden_class_name(name, element, element != 0 && in_archive(element));
}

bool Walker::anonymous(const KlassEntry& k) {
  uint16_t misc = 0;
  return L_.instance_misc_flags && L_.misc_is_anonymous && !k.has(KlassEntry::kArray) &&
         mem_.get(k.addr + L_.instance_misc_flags, misc) && (misc & L_.misc_is_anonymous) != 0;
}

bool Walker::in_archive(uint64_t addr) const {
  const auto& r = L_.archive_ranges;
  auto it = std::upper_bound(r.begin(), r.end(), addr, [](uint64_t a, const auto& m) { return a < m.first; });
  return it != r.begin() && addr < std::prev(it)->second;
}

// The bytes of an array of len elements, header included, per its layout helper.
uint64_t array_bytes(int32_t lh, uint32_t len, uint64_t align) {
  const uint64_t hdr = (static_cast<uint32_t>(lh) >> 16) & 0xff, log2 = static_cast<uint32_t>(lh) & 0x3f;
  return (hdr + (static_cast<uint64_t>(len) << log2) + align - 1) & ~(align - 1);
}

uint64_t Walker::header_klass(const ByteView& h, uint64_t mark) const {
  if (L_.compact_headers)
    return (mark & 3) == 3 ? 0 : L_.narrow_klass_base + ((mark >> L_.mark_klass_shift) << L_.narrow_klass_shift);
  if (L_.compressed_klass) {
    uint32_t nk = 0;
    return h.read_u32(8, nk) && nk ? L_.narrow_klass_base + (static_cast<uint64_t>(nk) << L_.narrow_klass_shift) : 0;
  }
  uint64_t klass = 0;
  return h.read_u64(8, klass) ? klass : 0;
}

void Walker::remember(KlassEntry& k) {
  constexpr uint8_t kSizedApart =
      KlassEntry::kMirror | KlassEntry::kFiller | KlassEntry::kUnsizable | KlassEntry::kPastCap;
  if (!k.has(KlassEntry::kValid) || (k.flags & kSizedApart) || !k.addr) return;
  const uint64_t instance_bytes = k.has(KlassEntry::kArray) ? 0 : static_cast<uint64_t>(k.lh) & ~uint64_t{7};
  if (!k.has(KlassEntry::kArray) && instance_bytes < 8) return;  // decode() finds no object there
  known_[known_slot(k.addr)] = KnownKlass{k.addr, &k, instance_bytes, k.lh};
}

uint64_t Walker::walk_known(uint64_t a, uint64_t limit, uint64_t end, uint64_t count_until, bool sampled) {
  uint64_t chunk_end = 0;
  const uint8_t* p = mem_.span(a, 8, chunk_end);
  if (!p) return a;
  // The header is read only from the chunk in hand; one that crosses its end
  // is left to decode(), which assembles it.
  const ByteView chunk(p, static_cast<size_t>(chunk_end - a));
  const uint64_t start = a;
  const uint64_t align = L_.object_alignment;
  JavaHeapWalk& r = res_;
  while (a < end) {
    if ((++steps_ % kDeadlineEvery) == 0 && deadline_.expired()) {
      stop("deadline reached");
      break;
    }
    const uint64_t off = a - start;
    ByteView h;
    uint64_t mark = 0;
    if (!chunk.sub(off, std::min<uint64_t>(24, chunk.size() - off), h) || !h.read_u64(0, mark)) break;
    const uint64_t klass = header_klass(h, mark);
    const KnownKlass& k = known_[known_slot(klass)];
    if (!klass || k.addr != klass) break;
    uint64_t size = k.instance_bytes;
    if (!size) {
      uint32_t len = 0;
      if (!h.read_u32(L_.array_length_offset, len)) break;
      size = array_bytes(k.lh, len, align);
    }
    if (size > limit - a || limit <= a) break;
    r.parsed_bytes += sampled ? std::min(size, count_until - a) : size;
    (sampled ? k.entry->sampled : k.entry->exact).add(size);
    r.objects += 1;
    a += size;
  }
  return a;
}

Decoded Walker::decode(uint64_t a, uint64_t limit, KlassEntry*& k, uint64_t& size, bool strict) {
  const size_t want = static_cast<size_t>(std::min<uint64_t>(24, limit - a));
  if (want < 8) return Decoded::kNoObject;
  const ByteView h(mem_.view(a, want), want);  // valid until the next read
  if (h.empty()) return Decoded::kUnreadable;
  uint64_t mark = 0;
  h.read_u64(0, mark);
  const uint64_t klass = header_klass(h, mark);
  if (!klass) return Decoded::kNoObject;
  uint32_t len = 0;
  const bool have_len = h.read_u32(L_.array_length_offset, len);
  // A resynchronisation candidate must look like an unlocked header (no hash
  // or age bits beyond their fields) before its klass is even considered.
  if (strict && ((mark & 3) != 1 || (!L_.compact_headers && (mark >> 39) != 0))) return Decoded::kNoObject;
  k = klass_at(klass);
  if (!k->has(KlassEntry::kValid)) return Decoded::kNoObject;
  if (!k->has(KlassEntry::kArray)) {
    if (k->has(KlassEntry::kUnsizable)) return Decoded::kNoObject;
    if (k->has(KlassEntry::kMirror)) {
      int32_t words = 0;
      if (!mem_.get(a + static_cast<uint64_t>(L_.mirror_size_offset), words) || words <= 0) return Decoded::kNoObject;
      size = static_cast<uint64_t>(words) * 8;
    } else {
      size = static_cast<uint64_t>(k->lh) & ~uint64_t{7};
    }
  } else {
    if (!have_len && !mem_.get(a + L_.array_length_offset, len)) return Decoded::kNoObject;
    size = array_bytes(k->lh, len, L_.object_alignment);
  }
  return size >= 8 && (size & 7) == 0 && size <= limit - a ? Decoded::kObject : Decoded::kNoObject;
}

uint64_t Walker::resync(uint64_t a, uint64_t limit, bool& unreadable) {
  KlassEntry* k = nullptr;
  uint64_t size = 0;
  for (uint64_t b = a; b < limit; b += 8) {
    if (!keep_going()) return b;
    switch (decode(b, limit, k, size, true)) {
      case Decoded::kObject:
        return b;
      case Decoded::kUnreadable:
        unreadable = true;
        return b;
      case Decoded::kNoObject:
        break;
    }
  }
  return limit;
}

void Walker::walk_region(uint64_t from, uint64_t top, uint64_t count_until, bool sampled, bool resync_first) {
  const uint64_t end = std::min(top, count_until);
  uint64_t a = from;
  bool unreadable = false;
  // Regions are not always walked in address order (stable ones first).
  hole_ = static_cast<size_t>(
      std::lower_bound(L_.holes.begin(), L_.holes.end(), from,
                       [](const std::pair<uint64_t, uint64_t>& h, uint64_t x) { return h.second <= x; }) -
      L_.holes.begin());
  if (resync_first) {
    // A sampling window starts anywhere: the bytes up to the first object
    // that starts in it belong to an object that started before.
    a = resync(a, end, unreadable);
    res_.parsed_bytes += a - from;
  }
  while (!unreadable && a < end && keep_going()) {
    // Skip the unformatted tail of a live TLAB.
    while (hole_ < L_.holes.size() && L_.holes[hole_].second <= a) ++hole_;
    if (hole_ < L_.holes.size() && L_.holes[hole_].first <= a) {
      const uint64_t hole_end = std::min(top, L_.holes[hole_].second);
      res_.parsed_bytes += hole_end - a;
      a = hole_end;
      continue;
    }
    const uint64_t limit =
        hole_ < L_.holes.size() && L_.holes[hole_].first < top ? L_.holes[hole_].first : top;
    if (const uint64_t b = walk_known(a, limit, end, count_until, sampled); b != a) {
      a = b;
      continue;
    }
    if (stopped_) break;
    KlassEntry* k = nullptr;
    uint64_t size = 0;
    const Decoded d = decode(a, limit, k, size, false);
    if (d == Decoded::kUnreadable) {
      unreadable = true;
      break;
    }
    if (d == Decoded::kObject) {
      // A sampled window accounts for the bytes inside it only.
      res_.parsed_bytes += sampled ? std::min(size, count_until - a) : size;
      if (k->has(KlassEntry::kFiller)) {
        res_.filler_bytes += size;
      } else {
        count(*k, size, sampled);
        res_.objects += 1;
        remember(*k);
      }
      a += size;
      continue;
    }
    // Unparsable (an object being published, a stale TLAB bound, a dead
    // object of an unloaded class): resynchronise on the next word that
    // starts a plausible object (unlocked mark, valid klass, fitting size).
    const uint64_t b = std::min(limit, resync(a + 8, limit, unreadable));
    res_.unparsed_bytes += b - a;
    a = b;
  }
  // Memory that cannot be read (uncommitted under us, or not heap at all):
  // the rest is given up at once, not stepped through a failed read at a time.
  if (unreadable && a < end) res_.unparsed_bytes += end - a;
}

bool Walker::region_plausible(const Region& g, int64_t tag, uint64_t end) const {
  if (g.bottom == 0 || g.top < g.bottom || g.top > end) return false;
  if (L_.region_types) {
    // Every G1 region spans exactly GrainBytes: a record claiming more is not
    // one, and walking it would take as long as it claims.
    return tag != L_.tag_free && end - g.bottom <= L_.grain_bytes;
  }
  // JDK 8 sets a starts-humongous region's end (and top) to its series'
  // end: up to the whole table. Only its first object is ever read, and
  // only GrainBytes of it are counted as this region's (classify_untyped).
  return g.top > g.bottom && end - g.bottom <= L_.grain_bytes * L_.region_count;
}

void Walker::classify_untyped(std::vector<Region>& regions) {
  uint64_t series_end = 0;  // the end of the last humongous object met
  for (Region& g : regions) {
    if (!keep_going()) break;
    const uint64_t top = g.top;
    g.top = std::min(g.top, g.bottom + L_.grain_bytes);
    if (g.bottom < series_end) {
      g.kind = Region::kContinuesHumongous;
      continue;
    }
    KlassEntry* k = nullptr;
    uint64_t size = 0;
    // An object of half a region or more at the bottom that ends at the
    // region's top (JDK 8 sets a humongous region's top to its object's
    // end) is humongous and covers the regions up to its end. A stale
    // header at the bottom of a region reused for allocation ends
    // elsewhere.
    if (decode(g.bottom, g.bottom + (1ull << 40), k, size, false) == Decoded::kObject &&
        size >= L_.grain_bytes / 2 && top - g.bottom == size) {
      g.kind = Region::kStartsHumongous;
      series_end = g.bottom + size;
    }
  }
}

std::vector<Walker::Region> Walker::read_regions(uint64_t& walkable_used) {
  JavaHeapWalk& r = res_;
  std::vector<Region> regions;
  std::vector<uint64_t> table(L_.region_count);
  if (!mem_.read(L_.region_table, table.data(), table.size() * 8)) {
    r.reason = mem_.target_gone() ? "target exited" : "cannot read the G1 region table";
    return regions;
  }
  std::vector<uint8_t> rec(region_record_bytes(L_));
  const ByteView rv(rec.data(), rec.size());
  int failed = 0;
  for (uint64_t hr : table) {
    if (!hr) continue;  // uncommitted
    if (!keep_going()) break;
    if (!mem_.read(hr, rec.data(), rec.size())) {
      if (++failed < kMaxFailedRecordReads) continue;
      stop("stopped reading the G1 region table after " + std::to_string(failed) + " unreadable region records");
      break;
    }
    Region g{0, 0, Region::kWalkable};
    uint64_t end = 0;
    int32_t tag = 0;
    // The record is sized to hold every field: these reads cannot fail.
    rv.read_u64(L_.region_bottom, g.bottom), rv.read_u64(L_.region_top, g.top), rv.read_u64(L_.region_end, end);
    if (L_.region_types) rv.read_i32(L_.region_tag, tag);
    if (!region_plausible(g, tag, end)) continue;
    if (L_.region_types && tag == L_.tag_starts_humongous) g.kind = Region::kStartsHumongous;
    if (L_.region_types && tag == L_.tag_continues_humongous) g.kind = Region::kContinuesHumongous;
    if (L_.region_types && L_.region_spaces) g.space = g1_region_space(L_, tag);
    g.tag = tag;
    regions.push_back(g);
  }
  std::sort(regions.begin(), regions.end(), [](const Region& x, const Region& y) { return x.bottom < y.bottom; });
  if (!L_.region_types) classify_untyped(regions);
  for (Region& g : regions) {
    g.stable = g.space && (g.kind != Region::kWalkable || std::string_view(g.space) == "old");
    ++r.regions;
    r.used_bytes += g.top - g.bottom;
    if (g.kind == Region::kWalkable) walkable_used += g.top - g.bottom;
    if (!g.space || g.top == g.bottom) continue;
    // A region that follows a full one of the same type extends its run.
    if (!r.spaces.empty() && r.spaces.back().name == g.space && r.spaces.back().used.end == g.bottom)
      r.spaces.back().used.end = g.top;
    else
      r.spaces.push_back({g.space, AddressRange{g.bottom, g.top}, 0});
  }
  return regions;
}

std::vector<Walker::Region> Walker::read_spaces(uint64_t& walkable_used) {
  JavaHeapWalk& r = res_;
  struct Read {
    const HeapSpaceRef* ref;
    uint64_t bottom, top, end;
  };
  std::vector<Read> spaces;
  std::vector<uint8_t> rec(space_record_bytes(L_));
  const ByteView rv(rec.data(), rec.size());
  for (const HeapSpaceRef& sp : L_.spaces) {
    const std::string what = "the " + sp.name + " space (" + sp.field + " -> " + hex(sp.addr) + ")";
    if (!mem_.read(sp.addr, rec.data(), rec.size())) {
      r.reason = mem_.target_gone() ? "target exited" : "cannot read " + what;
      return {};
    }
    Read s{&sp, 0, 0, 0};
    rv.read_u64(L_.space_bottom, s.bottom), rv.read_u64(L_.space_top, s.top), rv.read_u64(L_.space_end, s.end);
    const char* bad = !s.bottom                           ? "a null _bottom"
                      : s.top < s.bottom                  ? "_top below _bottom"
                      : s.end < s.top                     ? "_top beyond _end"
                      : ((s.bottom | s.top | s.end) & 7)  ? "unaligned bounds"
                      : s.end - s.bottom > kMaxSpaceBytes ? "a size beyond 32 TiB"
                                                          : nullptr;
    if (bad) {
      r.reason = "implausible " + what + ": " + bad + " (bottom " + hex(s.bottom) + ", top " + hex(s.top) +
                 ", end " + hex(s.end) + ")";
      return {};
    }
    spaces.push_back(s);
  }
  std::sort(spaces.begin(), spaces.end(), [](const Read& x, const Read& y) { return x.bottom < y.bottom; });
  std::vector<Region> regions;
  for (size_t i = 0; i < spaces.size(); ++i) {
    const Read& s = spaces[i];
    // Spaces are disjoint reservations: two that overlap would have their
    // objects counted twice (or one space's objects parsed as another's).
    if (i > 0 && spaces[i - 1].end > s.bottom) {
      r.reason = "implausible heap: the " + spaces[i - 1].ref->name + " space (" + spaces[i - 1].ref->field +
                 ") and the " + s.ref->name + " space (" + s.ref->field + ") overlap";
      return {};
    }
    ++r.regions;
    r.used_bytes += s.top - s.bottom;
    r.spaces.push_back({s.ref->name, AddressRange{s.bottom, s.top}, s.end});
    walkable_used += s.top - s.bottom;
    if (s.top > s.bottom)
      regions.push_back(Region{s.bottom, s.top, Region::kWalkable, s.ref->name.c_str(), 0, s.ref->name == "old"});
  }
  return regions;
}

void Walker::walk_humongous(const Region& g) {
  JavaHeapWalk& r = res_;
  KlassEntry* k = nullptr;
  uint64_t size = 0;
  ++r.regions_walked;
  // The object runs on into the continues-humongous regions that follow.
  if (decode(g.bottom, g.bottom + (1ull << 40), k, size, false) == Decoded::kObject) {
    count(*k, size, false);
    ++r.objects;
    ++r.humongous_objects;
    r.humongous_bytes += size;
    r.parsed_bytes += g.top - g.bottom;
  } else {
    r.unparsed_bytes += g.top - g.bottom;
  }
}

void Walker::scale_sampled(double scale) {
  auto scaled = [scale](uint64_t n) { return static_cast<uint64_t>(static_cast<double>(n) * scale + 0.5); };
  auto fold = [&](KlassEntry& k) {
    k.exact.objects += scaled(k.sampled.objects);
    k.exact.bytes += scaled(k.sampled.bytes);
  };
  for (size_t i = 0; i < klasses_.size(); ++i) fold(klasses_.at(i));
  fold(past_cap_);
  res_.klass_cap_reached = cap_reached_;
  res_.past_cap_objects = past_cap_.exact.objects;
  res_.past_cap_bytes = past_cap_.exact.bytes;
}

void Walker::select_classes() {
  std::vector<uint32_t> counted;
  counted.reserve(klasses_.size());
  for (size_t i = 0; i < klasses_.size(); ++i) {
    const KlassEntry& k = klasses_.at(i);
    if (k.has(KlassEntry::kValid) && k.exact.objects) counted.push_back(static_cast<uint32_t>(i));
  }
  res_.class_count = counted.size();
  // The names are read now, maybe after the walk used up its read budget.
  if (lim_.name_read_limit) mem_.set_read_limit(lim_.name_read_limit);
  const size_t n = lim_.max_entries;
  auto named = [&](uint32_t i) {
    const KlassEntry& k = klasses_.at(i);
    return JavaClassTotal{class_name(k), k.exact.objects, k.exact.bytes};
  };
  std::vector<JavaClassTotal>& out = res_.classes;
  if (counted.size() <= n) {
    for (uint32_t i : counted) out.push_back(named(i));
  } else if (n > 0) {
    // The n-th class by (bytes, objects): every class heavier is in, and of
    // those tied with it, the first by name fill the rest, so the result is
    // exactly the first n of the whole list sorted by sort_and_truncate.
    auto heavier_entry = [&](uint32_t a, uint32_t b) { return heavier(klasses_.at(a).exact, klasses_.at(b).exact); };
    std::nth_element(counted.begin(), counted.begin() + static_cast<std::ptrdiff_t>(n - 1), counted.end(),
                     heavier_entry);
    const uint32_t nth = counted[n - 1];
    std::vector<uint32_t> tied;
    for (uint32_t i : counted) {
      if (heavier_entry(i, nth)) out.push_back(named(i));
      else if (!heavier_entry(nth, i)) tied.push_back(i);
    }
    for (auto& c : first_by_name(tied, n - out.size())) out.push_back(std::move(c));
  }
  std::sort(out.begin(), out.end(), ranks_before);
}

std::vector<JavaClassTotal> Walker::first_by_name(const std::vector<uint32_t>& tied, size_t want) {
  std::vector<JavaClassTotal> heap;  // a max-heap by name: its top is the first to give way
  auto by_name = [](const JavaClassTotal& a, const JavaClassTotal& b) { return a.name < b.name; };
  for (size_t j = 0; j < tied.size(); ++j) {
    // Every tied class costs a name read: past the deadline, the ones read so
    // far decide (always at least `want`, so the result is never short).
    if (heap.size() == want && deadline_.expired()) {
      stop("deadline reached while choosing by name among " + std::to_string(tied.size()) +
           " classes tied at the last entry (" + std::to_string(j) + " compared)");
      break;
    }
    const KlassEntry& k = klasses_.at(tied[j]);
    JavaClassTotal c{class_name(k), k.exact.objects, k.exact.bytes};
    if (heap.size() < want) {
      heap.push_back(std::move(c));
      std::push_heap(heap.begin(), heap.end(), by_name);
    } else if (c.name < heap.front().name) {
      std::pop_heap(heap.begin(), heap.end(), by_name);
      heap.back() = std::move(c);
      std::push_heap(heap.begin(), heap.end(), by_name);
    }
  }
  return heap;
}

JavaHeapWalk Walker::run() {
  JavaHeapWalk& r = res_;
  if (auto bad = check_heap_layout(L_)) {
    r.reason = *bad;
    return r;
  }
  klass_buf_.resize(klass_record_bytes(L_));
  name_buf_.resize(kMaxNameBytes);
  uint64_t walkable_used = 0;
  const std::vector<Region> regions =
      L_.kind == HeapKind::kG1 ? read_regions(walkable_used) : read_spaces(walkable_used);
  if (!r.reason.empty()) return r;  // no region table, or a space not to be believed
  r.sample_stride = std::max<uint64_t>(1, (walkable_used + lim_.max_walk_bytes - 1) / std::max<uint64_t>(1, lim_.max_walk_bytes));
  uint64_t window_bytes = 0;
  if (r.sample_stride > 1)
    walk_sampled(regions, window_bytes);
  else
    walk_whole(regions);
  return finish(walkable_used, window_bytes);
}

void Walker::walk_one(const Region& g) {
  if (g.kind == Region::kContinuesHumongous) {
    res_.parsed_bytes += g.top - g.bottom;  // covered by the object of its starts-humongous region
  } else if (g.kind == Region::kStartsHumongous) {
    walk_humongous(g);
  } else {
    ++res_.regions_walked;
    walk_region(g.bottom, g.top, g.top, false, false);
  }
}

void Walker::walk_whole(const std::vector<Region>& regions) {
  stable_.clear();
  walk_stable_then_young(regions, std::vector<uint8_t>(regions.size()));
}

void Walker::walk_stable_then_young(const std::vector<Region>& regions, const std::vector<uint8_t>& walked) {
  for (size_t i = 0; i < regions.size(); ++i) {
    const Region& g = regions[i];
    if (!g.stable || walked[i]) continue;
    if (!keep_going()) return;
    walk_one(g);
    stable_.push_back(g);
  }
  save_checkpoint();
  for (const Region& g : regions) {
    if (g.stable) continue;
    if (!keep_going()) return;
    walk_one(g);
  }
}

void Walker::walk_sampled(const std::vector<Region>& regions, uint64_t& window_bytes) {
  // Heaps above the walk budget are sampled: 64 KiB windows spread evenly
  // over every walkable region (1 of every k), each entered by
  // resynchronising on its first object; what they hold is scaled by the
  // walkable bytes over the window bytes. Windows rather than whole regions,
  // because regions differ a lot (one holds arrays, the next small objects).
  constexpr uint64_t kWindow = 64 << 10;
  const uint64_t k = res_.sample_stride;
  uint64_t window_no = 0;
  for (const Region& g : regions) {
    if (!keep_going()) break;
    if (g.kind != Region::kWalkable) {
      walk_one(g);  // humongous objects stay exact
      continue;
    }
    // Window numbers run on across regions; this region's first sampled
    // window is the first multiple of k from window_no on (jumped to, not
    // counted up to: a region can hold many windows).
    const uint64_t windows = (g.top - g.bottom + kWindow - 1) / kWindow;
    bool walked = false;
    for (uint64_t i = (k - window_no % k) % k; i < windows && keep_going(); i += k) {
      const uint64_t w = g.bottom + i * kWindow;
      const uint64_t we = std::min(g.top, w + kWindow);
      window_bytes += we - w;
      walk_region(w, g.top, we, true, w != g.bottom);
      walked = true;
    }
    window_no += windows;
    res_.regions_walked += walked;
  }
}

void Walker::save_checkpoint() {
  Checkpoint& c = checkpoint_;
  c.klass_counts.resize(klasses_.size());
  for (size_t i = 0; i < klasses_.size(); ++i) c.klass_counts[i] = klasses_.at(i).exact;
  c.past_cap = past_cap_.exact;
  c.regions_walked = res_.regions_walked, c.parsed_bytes = res_.parsed_bytes, c.unparsed_bytes = res_.unparsed_bytes;
  c.objects = res_.objects, c.filler_bytes = res_.filler_bytes;
  c.humongous_objects = res_.humongous_objects, c.humongous_bytes = res_.humongous_bytes;
}

void Walker::restore_checkpoint() {
  const Checkpoint& c = checkpoint_;
  for (size_t i = 0; i < klasses_.size(); ++i) klasses_.at(i).exact = i < c.klass_counts.size() ? c.klass_counts[i] : Counts{};
  past_cap_.exact = c.past_cap;
  res_.regions_walked = c.regions_walked, res_.parsed_bytes = c.parsed_bytes, res_.unparsed_bytes = c.unparsed_bytes;
  res_.objects = c.objects, res_.filler_bytes = c.filler_bytes;
  res_.humongous_objects = c.humongous_objects, res_.humongous_bytes = c.humongous_bytes;
}

std::optional<JavaHeapWalk> Walker::run_young_again() {
  JavaHeapWalk& r = res_;
  // Only a whole walk that completed is brought up to date.
  if (r.sample_stride != 1 || r.status != SnapshotStatus::kComplete) return std::nullopt;
  r.status = SnapshotStatus::kFailed;
  r.reason.clear();
  r.classes.clear();
  r.spaces.clear();
  r.regions = r.used_bytes = 0;
  uint64_t walkable_used = 0;
  const std::vector<Region> regions =
      L_.kind == HeapKind::kG1 ? read_regions(walkable_used) : read_spaces(walkable_used);
  if (!r.reason.empty()) return r;
  if (walkable_used > lim_.max_walk_bytes) return std::nullopt;  // to be sampled now: walked afresh
  // Every stable region walked must still be there as it was, grown at most
  // by what was appended (objects promoted), or the walk is not brought up
  // to date but done again: a region a mixed collection evacuated is free
  // (or young) now, a humongous object reclaimed is gone.
  std::vector<size_t> at(stable_.size());
  std::vector<uint8_t> known(regions.size());
  for (size_t i = 0; i < stable_.size(); ++i) {
    const Region& s = stable_[i];
    const auto it = std::lower_bound(regions.begin(), regions.end(), s.bottom,
                                     [](const Region& g, uint64_t b) { return g.bottom < b; });
    if (it == regions.end() || it->bottom != s.bottom || !it->stable || it->kind != s.kind || it->tag != s.tag ||
        it->top < s.top || (s.kind != Region::kWalkable && it->top != s.top))
      return std::nullopt;
    at[i] = static_cast<size_t>(it - regions.begin());
    known[at[i]] = 1;
  }
  restore_checkpoint();
  for (size_t i = 0; i < stable_.size() && keep_going(); ++i) {
    const Region& g = regions[at[i]];
    if (g.kind == Region::kWalkable && g.top > stable_[i].top) walk_region(stable_[i].top, g.top, g.top, false, false);
    stable_[i].top = g.top;
  }
  walk_stable_then_young(regions, known);  // the old regions and humongous objects new since, whole
  return finish(walkable_used, 0);
}

JavaHeapWalk Walker::finish(uint64_t walkable_used, uint64_t window_bytes) {
  JavaHeapWalk& r = res_;
  // A read that failed for the budget or the target's exit ends a region as
  // unreadable memory does; on the last region no later step would say why.
  keep_going();
  scale_sampled(window_bytes ? static_cast<double>(walkable_used) / static_cast<double>(window_bytes) : 0);
  select_classes();
  r.coverage = r.used_bytes ? std::min(1.0, static_cast<double>(r.parsed_bytes) / static_cast<double>(r.used_bytes)) : 1.0;
  if (r.regions == 0) {
    r.reason = "no G1 regions in use could be read";
    if (!reason_.empty()) r.reason += " (" + reason_ + ")";
    return r;
  }
  if (!reason_.empty()) {
    r.status = SnapshotStatus::kPartial;
    r.reason = reason_;
  } else if (r.sample_stride > 1) {
    r.status = SnapshotStatus::kPartial;
    r.reason = "sampled walk: 1 of every " + std::to_string(r.sample_stride) + " 64 KiB windows of " +
               std::to_string(walkable_used >> 20) + " MiB in use (over the " +
               std::to_string(lim_.max_walk_bytes >> 20) + " MiB walk budget); counts and bytes are estimates";
  }
  if (r.klass_cap_reached) {
    r.status = SnapshotStatus::kPartial;
    r.reason += (r.reason.empty() ? "" : "; ") + std::string("klass cap reached: more than ") +
                std::to_string(klasses_.cap()) + " distinct klasses; " + std::to_string(r.past_cap_objects) +
                " objects (" + std::to_string(r.past_cap_bytes) +
                " bytes) of classes past the cap are counted in the totals only, not per class";
  }
  if (r.reason.empty()) r.status = SnapshotStatus::kComplete;
  return r;
}

}  // namespace java_walk

JavaHeapWalker::JavaHeapWalker(ChunkCache& mem, const JavaHeapLayout& layout, const JavaHeapLimits& limits,
                               const Deadline& deadline)
    : walker_(std::make_unique<java_walk::Walker>(mem, layout, limits, deadline)) {}
JavaHeapWalker::~JavaHeapWalker() = default;
JavaHeapWalk JavaHeapWalker::walk() { return walker_->run(); }
std::optional<JavaHeapWalk> JavaHeapWalker::walk_young_again() { return walker_->run_young_again(); }

JavaHeapWalk walk_java_heap(ChunkCache& mem, const JavaHeapLayout& layout, const JavaHeapLimits& limits, const Deadline& deadline) {
  return JavaHeapWalker(mem, layout, limits, deadline).walk();
}

}  // namespace oomsnap
