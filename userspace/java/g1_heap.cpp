#include "java/g1_heap.h"

#include <algorithm>
#include <tuple>
#include <unordered_map>

#include "core/checked_bytes.h"
#include "java/hotspot_vmstructs.h"

namespace oomsnap {
namespace {

constexpr size_t kMaxKlasses = 200000;
constexpr uint64_t kMaxRegions = 1ull << 22;
// G1's regions are at most 512 MiB (JDK 18+; 32 MiB before).
constexpr uint64_t kMaxGrainBytes = 1ull << 30;
// No offset into a HotSpot struct is believed beyond this: the walk copies
// region and klass records up to their farthest field.
constexpr uint64_t kMaxRecordBytes = HotSpotVm::kMaxTypeBytes;
// HeapRegions and JavaThreads are C-heap objects, always readable in a live
// JVM: records that cannot be read mean a table that is not what it claims,
// and each costs a failed read, so their scan gives up after this many.
constexpr int kMaxFailedRecordReads = 64;
// Steps of a loop over heap memory between two looks at the clock.
constexpr uint64_t kDeadlineEvery = 4096;

bool power_of_two(uint64_t v) { return v && !(v & (v - 1)); }

struct KlassInfo {
  bool valid = false, array = false, mirror = false, filler = false, unsizable = false;
  int32_t lh = 0;
  std::string name;  // internal form
  uint64_t objects = 0, bytes = 0;    // counted exactly (full walk, humongous)
  uint64_t sampled_objects = 0, sampled_bytes = 0;  // seen in sampled windows, scaled at the end
};

bool plausible_name(const std::string& n) {
  if (n.empty()) return false;
  for (unsigned char c : n)
    if (c < 0x20 || c == 0x7f) return false;
  return true;
}

// The bytes of the region and klass records the walk copies: up to their
// farthest field (check_g1_layout keeps that below kMaxRecordBytes).
size_t region_record_bytes(const G1Layout& L) {
  return static_cast<size_t>(std::max({uint64_t{L.region_bottom} + 8, uint64_t{L.region_end} + 8,
                                       uint64_t{L.region_top} + 8, uint64_t{L.region_tag} + 4}));
}
size_t klass_record_bytes(const G1Layout& L) {
  return static_cast<size_t>(std::max(uint64_t{L.klass_layout_helper} + 4, uint64_t{L.klass_name} + 8));
}

}  // namespace

std::optional<std::string> check_g1_layout(const G1Layout& L) {
  const std::tuple<const char*, uint64_t, uint64_t> fields[] = {
      {"(G1)HeapRegion::_bottom", L.region_bottom, 8},
      {"(G1)HeapRegion::_end", L.region_end, 8},
      {"(G1)HeapRegion::_top", L.region_top, 8},
      {"(G1)HeapRegionType::_tag", L.region_tag, 4},
      {"Klass::_layout_helper", L.klass_layout_helper, 4},
      {"Klass::_name", L.klass_name, 8},
      {"Symbol::_length", L.symbol_length, 2},
      {"Symbol::_body", L.symbol_body, 1},
      {"the array length", L.array_length_offset, 4},
      {"java_lang_Class::_oop_size_offset", static_cast<uint64_t>(int64_t{L.mirror_size_offset}), 4},
  };
  for (auto [what, off, bytes] : fields)
    if (!in_bounds(off, bytes, kMaxRecordBytes))
      return "implausible G1 layout: " + std::string(what) + " at offset " + std::to_string(off) + " (+" +
             std::to_string(bytes) + " bytes) is beyond " + std::to_string(kMaxRecordBytes) + " bytes";
  if (L.narrow_klass_shift > 32)
    return "implausible G1 layout: narrow klass shift " + std::to_string(L.narrow_klass_shift);
  if (L.compact_headers && L.mark_klass_shift >= 64)
    return "implausible G1 layout: markWord::klass_shift " + std::to_string(L.mark_klass_shift);
  if (L.object_alignment < 8 || L.object_alignment > 256 || !power_of_two(L.object_alignment))
    return "implausible G1 layout: ObjectAlignmentInBytes " + std::to_string(L.object_alignment);
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
  Walker(ChunkCache& mem, const G1Layout& L, const G1Limits& lim, const Deadline& d)
      : mem_(mem), L_(L), lim_(lim), deadline_(d) {}
  G1WalkResult run();

 private:
  struct Region {
    uint64_t bottom, top;
    int64_t tag;
  };
  KlassInfo* klass_at(uint64_t klass);
  void read_klass(uint64_t klass, KlassInfo& k);
  // Decodes the object at a (below limit): its klass and size. strict: also
  // require an unlocked mark word (for resynchronisation inside unparsable
  // memory).
  Decoded decode(uint64_t a, uint64_t limit, KlassInfo*& k, uint64_t& size, bool strict);
  // Reads the region table: the regions in use, sorted by address, and the
  // bytes in use outside humongous regions. Sets the result's reason when
  // the table itself cannot be read.
  std::vector<Region> read_regions(uint64_t& walkable_used);
  bool region_plausible(const Region& g, uint64_t end) const;
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
  const G1Layout& L_;
  const G1Limits& lim_;
  const Deadline& deadline_;
  std::unordered_map<uint64_t, KlassInfo> klasses_;
  uint64_t last_klass_addr_ = 0;
  KlassInfo* last_klass_ = nullptr;
  KlassInfo invalid_;
  std::vector<uint8_t> klass_buf_;  // one Klass record: klass_record_bytes(), sized once the layout is checked
  G1WalkResult res_;
  std::string reason_;
  bool stopped_ = false;
  uint64_t steps_ = 0;
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

void Walker::read_klass(uint64_t klass, KlassInfo& k) {
  if (!mem_.read(klass, klass_buf_.data(), klass_buf_.size())) return;
  const ByteView kv(klass_buf_.data(), klass_buf_.size());
  int32_t lh = 0;
  uint64_t sym = 0;
  uint16_t len = 0;
  if (!kv.read_i32(L_.klass_layout_helper, lh) || !kv.read_u64(L_.klass_name, sym)) return;
  if (!sym || (sym & 1) || !mem_.get(sym + L_.symbol_length, len) || len == 0 || len > 2048) return;
  std::string name(len, '\0');
  if (!mem_.read(sym + L_.symbol_body, name.data(), len) || !plausible_name(name)) return;
  const bool array = lh < 0;
  const int tag = lh >> 30;  // arithmetic: -1 type array, -2 object array
  const unsigned hdr_size = (static_cast<uint32_t>(lh) >> 16) & 0xff, log2 = static_cast<uint32_t>(lh) & 0x3f;
  const bool sane = array ? ((tag == -1 || tag == -2) && hdr_size >= 8 && hdr_size <= 32 && log2 <= 3 &&
                             name[0] == '[')
                          : (lh > 0 && lh < (1 << 24) && name[0] != '[');
  if (!sane) return;
  k.valid = true;
  k.array = array;
  k.lh = lh;
  k.name = std::move(name);
  k.mirror = k.name == "java/lang/Class";
  k.filler = k.name == "jdk/internal/vm/FillerObject" || k.name == "[Ljdk/internal/vm/FillerElement;";
  // Sized by a Java field SA reads from the class's field table; not exported.
  k.unsizable = k.name == "jdk/internal/vm/StackChunk";
}

KlassInfo* Walker::klass_at(uint64_t klass) {
  if (klass == last_klass_addr_ && last_klass_) return last_klass_;
  auto it = klasses_.find(klass);
  if (it == klasses_.end()) {
    // Every distinct klass address costs a read, once: the cap bounds them.
    if (klasses_.size() >= kMaxKlasses || !klass || (klass & 7)) return &invalid_;
    it = klasses_.emplace(klass, KlassInfo{}).first;
    read_klass(klass, it->second);
  }
  if (!it->second.valid) return &invalid_;
  last_klass_addr_ = klass;
  last_klass_ = &it->second;
  return last_klass_;
}

Decoded Walker::decode(uint64_t a, uint64_t limit, KlassInfo*& k, uint64_t& size, bool strict) {
  const size_t want = static_cast<size_t>(std::min<uint64_t>(24, limit - a));
  if (want < 8) return Decoded::kNoObject;
  const ByteView h(mem_.view(a, want), want);  // valid until the next read
  if (h.empty()) return Decoded::kUnreadable;
  uint64_t mark = 0;
  h.read_u64(0, mark);
  uint64_t klass = 0;
  if (L_.compact_headers) {
    if ((mark & 3) == 3) return Decoded::kNoObject;  // forwarded/marked: no klass bits
    klass = L_.narrow_klass_base + ((mark >> L_.mark_klass_shift) << L_.narrow_klass_shift);
  } else if (L_.compressed_klass) {
    uint32_t nk = 0;
    if (!h.read_u32(8, nk) || !nk) return Decoded::kNoObject;
    klass = L_.narrow_klass_base + (static_cast<uint64_t>(nk) << L_.narrow_klass_shift);
  } else if (!h.read_u64(8, klass)) {
    return Decoded::kNoObject;
  }
  uint32_t len = 0;
  const bool have_len = h.read_u32(L_.array_length_offset, len);
  // A resynchronisation candidate must look like an unlocked header (no hash
  // or age bits beyond their fields) before its klass is even considered.
  if (strict && ((mark & 3) != 1 || (!L_.compact_headers && (mark >> 39) != 0))) return Decoded::kNoObject;
  k = klass_at(klass);
  if (!k->valid) return Decoded::kNoObject;
  if (!k->array) {
    if (k->unsizable) return Decoded::kNoObject;
    if (k->mirror) {
      int32_t words = 0;
      if (!mem_.get(a + static_cast<uint64_t>(L_.mirror_size_offset), words) || words <= 0) return Decoded::kNoObject;
      size = static_cast<uint64_t>(words) * 8;
    } else {
      size = static_cast<uint64_t>(k->lh) & ~uint64_t{7};
    }
  } else {
    if (!have_len && !mem_.get(a + L_.array_length_offset, len)) return Decoded::kNoObject;
    const uint64_t hdr = (static_cast<uint32_t>(k->lh) >> 16) & 0xff, log2 = static_cast<uint32_t>(k->lh) & 0x3f;
    const uint64_t align = L_.object_alignment;
    size = (hdr + (static_cast<uint64_t>(len) << log2) + align - 1) & ~(align - 1);
  }
  return size >= 8 && (size & 7) == 0 && size <= limit - a ? Decoded::kObject : Decoded::kNoObject;
}

uint64_t Walker::resync(uint64_t a, uint64_t limit, bool& unreadable) {
  KlassInfo* k = nullptr;
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
    KlassInfo* k = nullptr;
    uint64_t size = 0;
    const Decoded d = decode(a, limit, k, size, false);
    if (d == Decoded::kUnreadable) {
      unreadable = true;
      break;
    }
    if (d == Decoded::kObject) {
      // A sampled window accounts for the bytes inside it only.
      res_.parsed_bytes += sampled ? std::min(size, count_until - a) : size;
      if (k->filler) {
        res_.filler_bytes += size;
      } else {
        if (sampled) {
          ++k->sampled_objects;
          k->sampled_bytes += size;
        } else {
          ++k->objects;
          k->bytes += size;
        }
        res_.objects += 1;
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

bool Walker::region_plausible(const Region& g, uint64_t end) const {
  // Every G1 region spans exactly GrainBytes: a record claiming more is not
  // one, and walking it would take as long as it claims.
  return g.tag != L_.tag_free && g.bottom != 0 && g.top >= g.bottom && g.top <= end && end - g.bottom <= L_.grain_bytes;
}

std::vector<Walker::Region> Walker::read_regions(uint64_t& walkable_used) {
  G1WalkResult& r = res_;
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
    Region g{0, 0, 0};
    uint64_t end = 0;
    int32_t tag = 0;
    // The record is sized to hold every field: these reads cannot fail.
    rv.read_u64(L_.region_bottom, g.bottom), rv.read_u64(L_.region_top, g.top), rv.read_u64(L_.region_end, end);
    rv.read_i32(L_.region_tag, tag);
    g.tag = tag;
    if (!region_plausible(g, end)) continue;
    ++r.regions;
    r.used_bytes += g.top - g.bottom;
    if (g.tag != L_.tag_starts_humongous && g.tag != L_.tag_continues_humongous) walkable_used += g.top - g.bottom;
    regions.push_back(g);
  }
  std::sort(regions.begin(), regions.end(), [](const Region& x, const Region& y) { return x.bottom < y.bottom; });
  return regions;
}

void Walker::walk_humongous(const Region& g) {
  G1WalkResult& r = res_;
  KlassInfo* k = nullptr;
  uint64_t size = 0;
  ++r.regions_walked;
  // The object runs on into the continues-humongous regions that follow.
  if (decode(g.bottom, g.bottom + (1ull << 40), k, size, false) == Decoded::kObject) {
    ++k->objects;
    k->bytes += size;
    ++r.objects;
    ++r.humongous_objects;
    r.humongous_bytes += size;
    r.parsed_bytes += g.top - g.bottom;
  } else {
    r.unparsed_bytes += g.top - g.bottom;
  }
}

G1WalkResult Walker::run() {
  G1WalkResult& r = res_;
  if (auto bad = check_g1_layout(L_)) {
    r.reason = *bad;
    return r;
  }
  klass_buf_.resize(klass_record_bytes(L_));
  uint64_t walkable_used = 0;
  const std::vector<Region> regions = read_regions(walkable_used);
  if (!r.reason.empty()) return r;  // no region table
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
    if (g.tag == L_.tag_continues_humongous) {
      r.parsed_bytes += g.top - g.bottom;  // covered by the object of its starts-humongous region
      continue;
    }
    if (g.tag == L_.tag_starts_humongous) {
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
  const double scale = window_bytes ? static_cast<double>(walkable_used) / static_cast<double>(window_bytes) : 0;
  for (auto& [addr, kl] : klasses_) {
    kl.objects += static_cast<uint64_t>(static_cast<double>(kl.sampled_objects) * scale + 0.5);
    kl.bytes += static_cast<uint64_t>(static_cast<double>(kl.sampled_bytes) * scale + 0.5);
  }
  for (auto& [addr, kl] : klasses_)
    if (kl.valid && kl.objects) r.classes.push_back({java_class_name(kl.name), kl.objects, kl.bytes});
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
  } else {
    r.status = SnapshotStatus::kComplete;
  }
  return r;
}

}  // namespace

std::string java_class_name(const std::string& internal) {
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
  for (size_t i = 0; i < dims; ++i) base += "[]";
  return base;
}

// --- Resolution from VMStructs ------------------------------------------------

namespace {

// Offsets resolved one by one from VMStructs, each checked against the size
// of the type it indexes; the first that is missing or does not fit is the
// error, and the ones after it are not looked at.
class OffsetResolver {
 public:
  explicit OffsetResolver(const HotSpotVm& vm) : vm_(vm) {}
  // A field read as `bytes` bytes at its offset.
  uint32_t field(std::initializer_list<std::string_view> types, std::string_view name, uint64_t bytes) {
    if (error) return 0;
    auto off = vm_.field_offset(types, name, bytes, err_);
    if (!off) error = err_;
    // field_offset keeps offsets below HotSpotVm::kMaxTypeBytes.
    return static_cast<uint32_t>(off.value_or(0));
  }
  // A struct embedded in another (HeapRegion::_type, Thread::_tlab): its
  // offset must leave room for the member's whole type.
  uint32_t embedded(std::initializer_list<std::string_view> types, std::string_view name,
                    std::initializer_list<std::string_view> member_types) {
    if (error) return 0;
    auto size = vm_.checked_type_size(member_types, err_);
    if (!size) {
      error = err_;
      return 0;
    }
    return field(types, name, *size);
  }
  std::optional<std::string> error;

 private:
  const HotSpotVm& vm_;
  std::string err_;
};

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
std::optional<std::string> resolve_klass_encoding(ChunkCache& mem, const HotSpotVm& vm, G1Layout& L) {
  if (L.compressed_klass) {
    auto kb = read_static<uint64_t>(mem, vm.field("CompressedKlassPointers", "_narrow_klass._base"));
    if (!kb) kb = read_static<uint64_t>(mem, vm.field("CompressedKlassPointers", "_base"));
    auto ks = read_static<int32_t>(mem, vm.field("CompressedKlassPointers", "_narrow_klass._shift"));
    if (!ks) ks = read_static<int32_t>(mem, vm.field("CompressedKlassPointers", "_shift"));
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

std::optional<std::string> resolve_g1_layout(ChunkCache& mem, const HotSpotVm& vm,
                                             const std::map<std::string, uint64_t>& flags, G1Layout& L,
                                             uint64_t& heap_addr) {
  auto flag_bool = [&](const char* n) {
    uint8_t v = 0;
    auto it = flags.find(n);
    return it != flags.end() && mem.get(it->second, v) && v != 0;
  };
  G1Statics st{};
  if (auto e = find_statics(vm, st)) return e;
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
  const uint32_t type = o.embedded(kRegionTypes, "_type", kRegionTypeTypes);
  L.region_tag = type + o.field(kRegionTypeTypes, "_tag", 4);  // both below 64 KiB: no overflow
  L.klass_layout_helper = o.field({"Klass"}, "_layout_helper", 4);
  L.klass_name = o.field({"Klass"}, "_name", 8);
  L.symbol_length = o.field({"Symbol"}, "_length", 2);
  L.symbol_body = o.field({"Symbol"}, "_body", 1);
  if (o.error) return o.error;

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
  auto free_t = tag_const("FreeTag"), sh = tag_const("StartsHumongousTag"), ch = tag_const("ContinuesHumongousTag");
  if (!free_t || !sh || !ch) return "VMStructs has no heap region type tags";
  L.tag_free = *free_t, L.tag_starts_humongous = *sh, L.tag_continues_humongous = *ch;

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
  auto mo = read_static<int32_t>(mem, st.mirror);
  if (!mo || *mo <= 0 || *mo > 4096) return "cannot read java_lang_Class::_oop_size_offset";
  L.mirror_size_offset = *mo;
  return check_g1_layout(L);
}

std::optional<std::vector<std::pair<uint64_t, uint64_t>>> read_tlab_holes(ChunkCache& mem, const HotSpotVm& vm,
                                                                          const Deadline& deadline,
                                                                          std::string& error) {
  constexpr uint32_t kMaxThreads = 100000;
  constexpr int64_t kMaxReserveWords = 1 << 16;  // HotSpot's are a few hundred words at most
  std::vector<std::pair<uint64_t, uint64_t>> holes;
  auto list = read_static<uint64_t>(mem, vm.field("ThreadsSMRSupport", "_java_thread_list"));
  for (auto [type, name] : std::initializer_list<std::pair<const char*, const char*>>{
           {"ThreadsList", "_length"}, {"ThreadsList", "_threads"}, {"Thread", "_tlab"},
           {"ThreadLocalAllocBuffer", "_top"}, {"ThreadLocalAllocBuffer", "_end"}})
    if (!vm.field(type, name)) return holes;  // TLABs not described: the walk resynchronises over their tails
  if (!list || !*list) return holes;
  OffsetResolver o(vm);
  const uint64_t len_off = o.field({"ThreadsList"}, "_length", 4);
  const uint64_t thr_off = o.field({"ThreadsList"}, "_threads", 8);
  const uint64_t tlab = o.embedded({"Thread"}, "_tlab", {"ThreadLocalAllocBuffer"});
  const uint64_t t_top = o.field({"ThreadLocalAllocBuffer"}, "_top", 8);
  const uint64_t t_end = o.field({"ThreadLocalAllocBuffer"}, "_end", 8);
  if (o.error) {
    error = *o.error;
    return std::nullopt;
  }
  // The reserve past _end that a TLAB keeps for a filler / prefetch.
  int64_t reserve_words = 2;  // an int[] header, as lab_alignment_reserve() before JDK 25 exported it
  if (auto p = read_static<int32_t>(mem, vm.field("ThreadLocalAllocBuffer", "_reserve_for_allocation_prefetch")))
    if (*p <= kMaxReserveWords) reserve_words = std::max<int64_t>(reserve_words, *p);
  if (auto r = read_static<uint64_t>(mem, vm.field("CollectedHeap", "_lab_alignment_reserve")))
    if (*r <= static_cast<uint64_t>(kMaxReserveWords)) reserve_words = std::max<int64_t>(reserve_words, *r);
  uint32_t n = 0;
  uint64_t threads = 0;
  if (!mem.get(*list + len_off, n) || !mem.get(*list + thr_off, threads) || n > kMaxThreads) return holes;
  std::vector<uint64_t> tp(n);
  if (n && !mem.read(threads, tp.data(), uint64_t{n} * 8)) return holes;
  // JavaThreads are C-heap objects: one that cannot be read means the list
  // is not what it claims, and reading on would cost a failed read each.
  int failed = 0;
  for (size_t i = 0; i < tp.size() && failed < kMaxFailedRecordReads; ++i) {
    if ((i & 255) == 255 && deadline.expired()) break;
    uint64_t top = 0, end = 0;
    if (!tp[i]) continue;
    if (!mem.get(tp[i] + tlab + t_top, top) || !mem.get(tp[i] + tlab + t_end, end)) {
      ++failed;
      continue;
    }
    if (top && end && top <= end) holes.emplace_back(top, end + static_cast<uint64_t>(reserve_words) * 8);
  }
  std::sort(holes.begin(), holes.end());
  return holes;
}

G1WalkResult walk_g1_heap(ChunkCache& mem, const G1Layout& layout, const G1Limits& limits, const Deadline& deadline) {
  Walker w(mem, layout, limits, deadline);
  return w.run();
}

}  // namespace oomsnap
