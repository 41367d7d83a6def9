#include "java/g1_heap.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string_view>
#include <tuple>
#include <unordered_set>

#include "base/text.h"
#include "core/checked_bytes.h"
#include "java/hotspot_vmstructs.h"

namespace oomsnap {
namespace {

constexpr uint64_t kMaxRegions = 1ull << 22;
// Serial and Parallel heaps have four spaces (eden, from, to, old).
constexpr size_t kMaxSpaces = 8;
// No space is believed larger than this (HotSpot's heaps stay below 32 TiB
// with compressed oops off, far below with them on).
constexpr uint64_t kMaxSpaceBytes = 1ull << 45;
// G1's regions are at most 512 MiB (JDK 18+; 32 MiB before).
constexpr uint64_t kMaxGrainBytes = 1ull << 30;
// No offset into a HotSpot struct is believed beyond this: the walk copies
// region and klass records up to their farthest field.
constexpr uint64_t kMaxRecordBytes = HotSpotVm::kMaxTypeBytes;
// HeapRegions and JavaThreads are C-heap objects, always readable in a live
// JVM: records that cannot be read mean a table that is not what it claims,
// and each costs a failed read, so their scan gives up after this many.
constexpr int kMaxFailedRecordReads = 64;
// Symbols longer than this are not believed to be class names.
constexpr size_t kMaxNameBytes = 2048;
// Steps of a loop over heap memory between two looks at the clock.
constexpr uint64_t kDeadlineEvery = 4096;

bool power_of_two(uint64_t v) { return v && !(v & (v - 1)); }

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
uint16_t name_check(std::string_view name) {
  uint32_t h = 2166136261u;
  for (unsigned char c : name) h = (h ^ c) * 16777619u;
  return static_cast<uint16_t>(h ^ (h >> 16));
}

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

std::optional<std::string> check_heap_layout(const JavaHeapLayout& L) {
  const std::tuple<const char*, uint64_t, uint64_t> fields[] = {
      {"(G1)HeapRegion::_bottom", L.region_bottom, 8},
      {"(G1)HeapRegion::_end", L.region_end, 8},
      {"(G1)HeapRegion::_top", L.region_top, 8},
      {"(G1)HeapRegionType::_tag", L.region_tag, 4},
      {"Klass::_layout_helper", L.klass_layout_helper, 4},
      {"Klass::_name", L.klass_name, 8},
      {"Symbol::_length", L.symbol_length, 2},
      {"Symbol::_body", L.symbol_body, 1},
      {"ObjArrayKlass::_bottom_klass", L.objarray_bottom_klass, 8},
      {"InstanceKlass::_misc_flags", L.instance_misc_flags, 2},
      {"the array length", L.array_length_offset, 4},
      {"java_lang_Class::_oop_size_offset", static_cast<uint64_t>(int64_t{L.mirror_size_offset}), 4},
  };
  for (auto [what, off, bytes] : fields)
    if (!in_bounds(off, bytes, kMaxRecordBytes))
      return "implausible heap layout: " + std::string(what) + " at offset " + std::to_string(off) + " (+" +
             std::to_string(bytes) + " bytes) is beyond " + std::to_string(kMaxRecordBytes) + " bytes";
  if (L.kind != HeapKind::kG1) {
    for (auto [what, off] : {std::pair<const char*, uint64_t>{"the space's _bottom", L.space_bottom},
                             {"the space's _end", L.space_end},
                             {"the space's _top", L.space_top}})
      if (!in_bounds(off, 8, kMaxRecordBytes))
        return "implausible heap layout: " + std::string(what) + " at offset " + std::to_string(off) +
               " is beyond " + std::to_string(kMaxRecordBytes) + " bytes";
  }
  if (L.narrow_klass_shift > 32)
    return "implausible heap layout: narrow klass shift " + std::to_string(L.narrow_klass_shift);
  if (L.compact_headers && L.mark_klass_shift >= 64)
    return "implausible heap layout: markWord::klass_shift " + std::to_string(L.mark_klass_shift);
  if (L.object_alignment < 8 || L.object_alignment > 256 || !power_of_two(L.object_alignment))
    return "implausible heap layout: ObjectAlignmentInBytes " + std::to_string(L.object_alignment);
  if (L.kind != HeapKind::kG1) {
    if (L.spaces.empty() || L.spaces.size() > kMaxSpaces)
      return "implausible heap layout: " + std::to_string(L.spaces.size()) + " spaces";
    for (const HeapSpaceRef& sp : L.spaces)
      if (!sp.addr || (sp.addr & 7))
        return "implausible heap layout: the " + sp.name + " space's record (" + sp.field + ") at " + hex(sp.addr);
    return std::nullopt;
  }
  if (!power_of_two(L.grain_bytes) || L.grain_bytes > kMaxGrainBytes)
    return "implausible G1 layout: GrainBytes " + std::to_string(L.grain_bytes);
  if (!L.region_table || L.region_count == 0 || L.region_count > kMaxRegions)
    return "implausible G1 region table (" + std::to_string(L.region_count) + " regions)";
  return std::nullopt;
}

namespace {

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

 private:
  struct Region {
    enum Kind : uint8_t { kWalkable, kStartsHumongous, kContinuesHumongous };
    uint64_t bottom, top;
    Kind kind;
  };
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
  size_t hole_ = 0;  // next TLAB hole to consider (holes sorted, regions walked in address order)
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
  uint16_t len = 0;
  if (!kv.read_i32(L_.klass_layout_helper, lh) || !kv.read_u64(L_.klass_name, sym)) return false;
  if (!sym || (sym & 1) || !mem_.get(sym + L_.symbol_length, len) || len == 0 || len > name_buf_.size()) return false;
  if (!mem_.read(sym + L_.symbol_body, name_buf_.data(), len)) return false;
  name = std::string_view(name_buf_.data(), len);
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
    regions.push_back(g);
  }
  std::sort(regions.begin(), regions.end(), [](const Region& x, const Region& y) { return x.bottom < y.bottom; });
  if (!L_.region_types) classify_untyped(regions);
  for (const Region& g : regions) {
    ++r.regions;
    r.used_bytes += g.top - g.bottom;
    if (g.kind == Region::kWalkable) walkable_used += g.top - g.bottom;
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
    walkable_used += s.top - s.bottom;
    if (s.top > s.bottom) regions.push_back(Region{s.bottom, s.top, Region::kWalkable});
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
  // Heaps above the walk budget are sampled: 64 KiB windows spread evenly
  // over every walkable region (1 of every k), each entered by
  // resynchronising on its first object; what they hold is scaled by the
  // walkable bytes over the window bytes. Windows rather than whole regions,
  // because regions differ a lot (one holds arrays, the next small objects).
  constexpr uint64_t kWindow = 64 << 10;
  r.sample_stride = std::max<uint64_t>(1, (walkable_used + lim_.max_walk_bytes - 1) / std::max<uint64_t>(1, lim_.max_walk_bytes));
  const bool sampled = r.sample_stride > 1;
  const uint64_t k = r.sample_stride;
  uint64_t window_no = 0, window_bytes = 0;
  for (const Region& g : regions) {
    if (!keep_going()) break;
    if (g.kind == Region::kContinuesHumongous) {
      r.parsed_bytes += g.top - g.bottom;  // covered by the object of its starts-humongous region
      continue;
    }
    if (g.kind == Region::kStartsHumongous) {
      walk_humongous(g);
      continue;
    }
    if (!sampled) {
      ++r.regions_walked;
      walk_region(g.bottom, g.top, g.top, false, false);
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
    r.regions_walked += walked;
  }
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

}  // namespace

bool hotspot_hidden_class_name(std::string_view n, uint64_t element_klass, bool archived) {
  // An array's element class: "[[LFoo+0x...;" -> "Foo+0x...".
  size_t dims = 0;
  while (dims < n.size() && n[dims] == '[') ++dims;
  if (dims) {
    if (n.size() < dims + 3 || n[dims] != 'L' || n.back() != ';') return false;
    n = n.substr(dims + 1, n.size() - dims - 2);
  }
  // Klass::external_name() takes the last '+', never the name's first byte.
  const size_t plus = n.rfind('+');
  if (plus == std::string_view::npos || plus == 0) return false;
  std::string_view hex = n.substr(plus + 1);
  if (hex.size() < 3 || hex.size() > 18 || hex.substr(0, 2) != "0x") return false;
  hex.remove_prefix(2);
  uint64_t v = 0;
  for (char c : hex) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  // Defined at run time: INTPTR_FORMAT of the InstanceKlass itself.
  if (hex.size() == 16 && element_klass != 0 && v == element_klass) return true;
  // Archived: the dump's address or counter, no longer the klass's.
  return archived;
}

std::string java_class_name(const std::string& internal, bool hidden) {
  size_t dims = 0;
  while (dims < internal.size() && internal[dims] == '[') ++dims;
  std::string base;
  if (dims == 0) {
    base = internal;
  } else {
    const std::string elem = internal.substr(dims);
    static const std::pair<char, const char*> prim[] = {{'Z', "boolean"}, {'B', "byte"}, {'C', "char"},
                                                        {'S', "short"},   {'I', "int"},  {'J', "long"},
                                                        {'F', "float"},   {'D', "double"}};
    if (elem.size() == 1) {
      for (auto [c, n] : prim)
        if (elem[0] == c) base = n;
    } else if (elem.size() > 2 && elem.front() == 'L' && elem.back() == ';') {
      base = elem.substr(1, elem.size() - 2);
    }
    if (base.empty()) return internal;  // not a descriptor we know: keep it as is
  }
  std::replace(base.begin(), base.end(), '/', '.');
  if (hidden) {
    const size_t plus = base.rfind('+');
    if (plus != std::string::npos && plus > 0) base[plus] = '/';
  }
  for (size_t i = 0; i < dims; ++i) base += "[]";
  return base;
}

// --- Resolution from VMStructs ------------------------------------------------

namespace {

const std::initializer_list<std::string_view> kRegionTypes = {"HeapRegion", "G1HeapRegion"};
const std::initializer_list<std::string_view> kRegionTypeTypes = {"HeapRegionType", "G1HeapRegionType"};
const std::initializer_list<std::string_view> kRegionManagerTypes = {"HeapRegionManager", "G1HeapRegionManager"};

// The statics the resolution reads (addresses in the target, not offsets).
struct G1Statics {
  const VmField *heap, *grain, *mirror;
};

std::optional<std::string> find_statics(const HotSpotVm& vm, G1Statics& s) {
  s.heap = vm.field("Universe", "_collectedHeap");
  s.grain = vm.field_any(kRegionTypes, "GrainBytes");
  s.mirror = vm.field("java_lang_Class", "_oop_size_offset");
  for (auto [f, what] : std::initializer_list<std::pair<const VmField*, const char*>>{
           {s.heap, "Universe::_collectedHeap"}, {s.grain, "(G1)HeapRegion::GrainBytes"},
           {s.mirror, "java_lang_Class::_oop_size_offset"}})
    if (!f) return std::string("VMStructs has no ") + what;
  return std::nullopt;
}

// The compressed class pointer base and shift, or the markWord's klass shift
// (compact headers), as the flags say the JVM encodes klass pointers.
std::optional<std::string> resolve_klass_encoding(ChunkCache& mem, const HotSpotVm& vm, JavaHeapLayout& L) {
  if (L.compressed_klass) {
    // Where each JDK keeps them, the first pair VMStructs describes:
    // Universe (8, 11), CompressedKlassPointers::_narrow_klass (17, 21),
    // CompressedKlassPointers' own statics (25).
    struct Names {
      const char *type, *base, *shift;
    };
    std::optional<uint64_t> kb;
    std::optional<int32_t> ks;
    for (const Names& n : {Names{"CompressedKlassPointers", "_narrow_klass._base", "_narrow_klass._shift"},
                           Names{"CompressedKlassPointers", "_base", "_shift"},
                           Names{"Universe", "_narrow_klass._base", "_narrow_klass._shift"}}) {
      const VmField *b = vm.field(n.type, n.base), *sh = vm.field(n.type, n.shift);
      if (!b || !sh) continue;
      kb = read_static<uint64_t>(mem, b);
      ks = read_static<int32_t>(mem, sh);
      break;
    }
    if (!kb || !ks || *ks < 0 || *ks > 32) return "cannot read the compressed class pointer base/shift";
    L.narrow_klass_base = *kb;
    L.narrow_klass_shift = static_cast<uint32_t>(*ks);
  }
  if (L.compact_headers) {
    auto s = vm.long_constant("markWord::klass_shift");
    if (!s || *s >= 64) return "compact object headers but no markWord::klass_shift";
    L.mark_klass_shift = static_cast<uint32_t>(*s);
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> resolve_object_layout(ChunkCache& mem, const HotSpotVm& vm,
                                                 const std::map<std::string, uint64_t>& flags, JavaHeapLayout& L) {
  auto flag_bool = [&](const char* n) {
    uint8_t v = 0;
    auto it = flags.find(n);
    return it != flags.end() && mem.get(it->second, v) && v != 0;
  };
  const VmField* mirror = vm.field("java_lang_Class", "_oop_size_offset");
  if (!mirror) return std::string("VMStructs has no java_lang_Class::_oop_size_offset");
  OffsetResolver o(vm);
  L.klass_layout_helper = o.field({"Klass"}, "_layout_helper", 4);
  L.klass_name = o.field({"Klass"}, "_name", 8);
  L.symbol_length = o.field({"Symbol"}, "_length", 2);
  L.symbol_body = o.field({"Symbol"}, "_body", 1);
  // Optional: without it, arrays of hidden classes keep HotSpot's '+'.
  if (vm.field("ObjArrayKlass", "_bottom_klass"))
    L.objarray_bottom_klass = o.field({"ObjArrayKlass"}, "_bottom_klass", 8);
  // Optional: without it, VM-anonymous classes are named without their address.
  if (auto bit = vm.int_constant("InstanceKlass::_misc_is_anonymous");
      bit && *bit > 0 && *bit <= 0x8000 && vm.field("InstanceKlass", "_misc_flags")) {
    L.instance_misc_flags = o.field({"InstanceKlass"}, "_misc_flags", 2);
    L.misc_is_anonymous = static_cast<uint32_t>(*bit);
  }
  if (o.error) return o.error;
  L.compact_headers = flag_bool("UseCompactObjectHeaders");
  L.compressed_klass = L.compact_headers || flag_bool("UseCompressedClassPointers");
  if (auto e = resolve_klass_encoding(mem, vm, L)) return e;
  // intx in JDK 17, int in 21+: the low 32 bits (little endian) serve both.
  int32_t align = 8;
  if (auto it = flags.find("ObjectAlignmentInBytes"); it != flags.end()) mem.get(it->second, align);
  if (align < 8 || align > 256 || (align & (align - 1))) return "implausible ObjectAlignmentInBytes";
  L.object_alignment = static_cast<uint64_t>(align);
  // Not in VMStructs (SA computes it): after the mark word with compact
  // headers, in the klass gap with compressed class pointers, else after Klass*.
  L.array_length_offset = L.compact_headers ? 8 : (L.compressed_klass ? 12 : 16);
  auto mo = read_static<int32_t>(mem, mirror);
  if (!mo || *mo <= 0 || *mo > 4096) return "cannot read java_lang_Class::_oop_size_offset";
  L.mirror_size_offset = *mo;
  return std::nullopt;
}

std::optional<std::string> resolve_g1_layout(ChunkCache& mem, const HotSpotVm& vm,
                                             const std::map<std::string, uint64_t>& flags, JavaHeapLayout& L,
                                             uint64_t& heap_addr) {
  G1Statics st{};
  if (auto e = find_statics(vm, st)) return e;
  L.kind = HeapKind::kG1;
  // Every offset, checked once here against the size of the struct it
  // indexes; the walk reads records no larger than these.
  OffsetResolver o(vm);
  const uint64_t hrm = o.embedded({"G1CollectedHeap"}, "_hrm", kRegionManagerTypes);
  const uint64_t regions = o.embedded(kRegionManagerTypes, "_regions", {"G1HeapRegionTable"});
  const uint64_t tbase = o.field({"G1HeapRegionTable"}, "_base", 8);
  const uint64_t tlen = o.field({"G1HeapRegionTable"}, "_length", 8);
  L.region_bottom = o.field(kRegionTypes, "_bottom", 8);
  L.region_end = o.field(kRegionTypes, "_end", 8);
  L.region_top = o.field(kRegionTypes, "_top", 8);
  // JDK 8 describes no region type: its regions are told apart by their objects.
  L.region_types = vm.field_any(kRegionTypes, "_type") != nullptr;
  if (L.region_types) {
    const uint32_t type = o.embedded(kRegionTypes, "_type", kRegionTypeTypes);
    L.region_tag = type + o.field(kRegionTypeTypes, "_tag", 4);  // both below 64 KiB: no overflow
  }
  if (o.error) return o.error;
  if (auto e = resolve_object_layout(mem, vm, flags, L)) return e;

  auto heap = read_static<uint64_t>(mem, st.heap);
  if (!heap || !*heap) return "cannot read Universe::_collectedHeap";
  heap_addr = *heap;
  const uint64_t table = *heap + hrm + regions;
  if (!mem.get(table + tbase, L.region_table) || !mem.get(table + tlen, L.region_count))
    return "cannot read the G1 region table";
  auto g = read_static<uint64_t>(mem, st.grain);
  if (!g) return "cannot read GrainBytes";
  L.grain_bytes = *g;
  auto tag_const = [&](const char* n) {
    auto v = vm.int_constant(std::string("HeapRegionType::") + n);
    if (!v) v = vm.int_constant(std::string("G1HeapRegionType::") + n);
    return v;
  };
  if (L.region_types) {
    auto free_t = tag_const("FreeTag"), sh = tag_const("StartsHumongousTag"), ch = tag_const("ContinuesHumongousTag");
    if (!free_t || !sh || !ch) return "VMStructs has no heap region type tags";
    L.tag_free = *free_t, L.tag_starts_humongous = *sh, L.tag_continues_humongous = *ch;
  }
  return check_heap_layout(L);
}

namespace {

constexpr uint32_t kMaxThreads = 100000;

// The JavaThreads, from the first list VMStructs describes: the array
// ThreadsSMRSupport::_java_thread_list (JDK 10+ exports it from 17 on), or
// the linked list Threads::_thread_list -> JavaThread::_next (8, 11).
// Empty when neither is described or the list cannot be read; nullopt +
// error when one is described with offsets that do not fit their types.
std::optional<std::vector<uint64_t>> java_threads(ChunkCache& mem, const HotSpotVm& vm, const Deadline& deadline,
                                                  std::string& error) {
  std::vector<uint64_t> threads;
  OffsetResolver o(vm);
  if (vm.field("ThreadsSMRSupport", "_java_thread_list") && vm.field("ThreadsList", "_length") &&
      vm.field("ThreadsList", "_threads")) {
    const uint64_t len_off = o.field({"ThreadsList"}, "_length", 4);
    const uint64_t thr_off = o.field({"ThreadsList"}, "_threads", 8);
    if (o.error) {
      error = *o.error;
      return std::nullopt;
    }
    auto list = read_static<uint64_t>(mem, vm.field("ThreadsSMRSupport", "_java_thread_list"));
    uint32_t n = 0;
    uint64_t array = 0;
    if (!list || !*list || !mem.get(*list + len_off, n) || !mem.get(*list + thr_off, array) || n > kMaxThreads)
      return threads;
    threads.resize(n);
    if (n && !mem.read(array, threads.data(), uint64_t{n} * 8)) threads.clear();
    return threads;
  }
  if (!vm.field("Threads", "_thread_list") || !vm.field("JavaThread", "_next")) return threads;
  const uint64_t next_off = o.field({"JavaThread"}, "_next", 8);
  if (o.error) {
    error = *o.error;
    return std::nullopt;
  }
  auto head = read_static<uint64_t>(mem, vm.field("Threads", "_thread_list"));
  // A list the target made circular (or longer than any JVM's) ends at the
  // cap; a thread seen twice ends it at once.
  std::unordered_set<uint64_t> seen;
  for (uint64_t t = head.value_or(0); t && threads.size() < kMaxThreads; ) {
    if ((threads.size() & 255) == 255 && deadline.expired()) break;
    if (!seen.insert(t).second) break;
    threads.push_back(t);
    if (!mem.get(t + next_off, t)) break;
  }
  return threads;
}

}  // namespace

std::optional<std::vector<std::pair<uint64_t, uint64_t>>> read_tlab_holes(ChunkCache& mem, const HotSpotVm& vm,
                                                                          const Deadline& deadline,
                                                                          std::string& error) {
  constexpr int64_t kMaxReserveWords = 1 << 16;  // HotSpot's are a few hundred words at most
  std::vector<std::pair<uint64_t, uint64_t>> holes;
  for (auto [type, name] : std::initializer_list<std::pair<const char*, const char*>>{
           {"Thread", "_tlab"}, {"ThreadLocalAllocBuffer", "_top"}, {"ThreadLocalAllocBuffer", "_end"}})
    if (!vm.field(type, name)) return holes;  // TLABs not described: the walk resynchronises over their tails
  OffsetResolver o(vm);
  const uint64_t tlab = o.embedded({"Thread"}, "_tlab", {"ThreadLocalAllocBuffer"});
  const uint64_t t_top = o.field({"ThreadLocalAllocBuffer"}, "_top", 8);
  const uint64_t t_end = o.field({"ThreadLocalAllocBuffer"}, "_end", 8);
  if (o.error) {
    error = *o.error;
    return std::nullopt;
  }
  auto tp = java_threads(mem, vm, deadline, error);
  if (!tp) return std::nullopt;
  // The reserve past _end that a TLAB keeps for a filler / prefetch (the
  // prefetch reserve is VM_Version's in JDK 8).
  int64_t reserve_words = 2;  // an int[] header, as lab_alignment_reserve() before JDK 25 exported it
  for (auto [type, name] : std::initializer_list<std::pair<const char*, const char*>>{
           {"ThreadLocalAllocBuffer", "_reserve_for_allocation_prefetch"},
           {"Abstract_VM_Version", "_reserve_for_allocation_prefetch"}})
    if (auto p = read_static<int32_t>(mem, vm.field(type, name)))
      if (*p <= kMaxReserveWords) reserve_words = std::max<int64_t>(reserve_words, *p);
  if (auto r = read_static<uint64_t>(mem, vm.field("CollectedHeap", "_lab_alignment_reserve")))
    if (*r <= static_cast<uint64_t>(kMaxReserveWords)) reserve_words = std::max<int64_t>(reserve_words, *r);
  // JavaThreads are C-heap objects: one that cannot be read means the list
  // is not what it claims, and reading on would cost a failed read each.
  int failed = 0;
  for (size_t i = 0; i < tp->size() && failed < kMaxFailedRecordReads; ++i) {
    if ((i & 255) == 255 && deadline.expired()) break;
    const uint64_t t = (*tp)[i];
    uint64_t top = 0, end = 0;
    if (!t) continue;
    if (!mem.get(t + tlab + t_top, top) || !mem.get(t + tlab + t_end, end)) {
      ++failed;
      continue;
    }
    if (top && end && top <= end) holes.emplace_back(top, end + static_cast<uint64_t>(reserve_words) * 8);
  }
  std::sort(holes.begin(), holes.end());
  return holes;
}

JavaHeapWalk walk_java_heap(ChunkCache& mem, const JavaHeapLayout& layout, const JavaHeapLimits& limits, const Deadline& deadline) {
  Walker w(mem, layout, limits, deadline);
  return w.run();
}

}  // namespace oomsnap
