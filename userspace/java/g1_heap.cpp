#include "java/g1_heap.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "java/hotspot_vmstructs.h"

namespace oomsnap {
namespace {

constexpr size_t kMaxKlasses = 200000;
constexpr uint64_t kMaxRegions = 1ull << 22;

struct KlassInfo {
  bool valid = false, array = false, mirror = false, filler = false, unsizable = false;
  int32_t lh = 0;
  std::string name;  // internal form
  uint64_t objects = 0, bytes = 0;    // counted exactly (full walk, humongous)
  uint64_t sampled_objects = 0, sampled_bytes = 0;  // seen in sampled windows, scaled at the end
};

inline uint64_t u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint32_t u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

bool plausible_name(const std::string& n) {
  if (n.empty()) return false;
  for (unsigned char c : n)
    if (c < 0x20 || c == 0x7f) return false;
  return true;
}

class Walker {
 public:
  Walker(ChunkCache& mem, const G1Layout& L, const G1Limits& lim, const Deadline& d)
      : mem_(mem), L_(L), lim_(lim), deadline_(d) {}
  G1WalkResult run();

 private:
  KlassInfo* klass_at(uint64_t klass);
  // Decodes the object at a (below limit): its klass and size; false when the
  // header or the size is not plausible. strict: also require an unlocked
  // mark word (for resynchronisation inside unparsable memory).
  bool decode(uint64_t a, uint64_t limit, KlassInfo*& k, uint64_t& size, bool strict);
  // Parses [from, top) and counts the objects that start before count_until
  // (a sampling window's end; top for a full walk). from must be an object
  // start unless resync_first, then the walk first finds one.
  void walk_region(uint64_t from, uint64_t top, uint64_t count_until, bool sampled, bool resync_first);
  uint64_t resync(uint64_t a, uint64_t limit);
  bool stop(std::string why) {
    if (reason_.empty()) reason_ = std::move(why);
    stopped_ = true;
    return true;
  }

  ChunkCache& mem_;
  const G1Layout& L_;
  const G1Limits& lim_;
  const Deadline& deadline_;
  std::unordered_map<uint64_t, KlassInfo> klasses_;
  uint64_t last_klass_addr_ = 0;
  KlassInfo* last_klass_ = nullptr;
  KlassInfo invalid_;
  G1WalkResult res_;
  std::string reason_;
  bool stopped_ = false;
  uint64_t steps_ = 0;
  size_t hole_ = 0;  // next TLAB hole to consider (holes sorted, regions walked in address order)
};

KlassInfo* Walker::klass_at(uint64_t klass) {
  if (klass == last_klass_addr_ && last_klass_) return last_klass_;
  auto it = klasses_.find(klass);
  if (it == klasses_.end()) {
    if (klasses_.size() >= kMaxKlasses || !klass || (klass & 7)) return &invalid_;
    KlassInfo& k = klasses_[klass];
    uint8_t hdr[32];
    if (mem_.read(klass, hdr, std::max<size_t>(L_.klass_name + 8, L_.klass_layout_helper + 4))) {
      int32_t lh;
      std::memcpy(&lh, hdr + L_.klass_layout_helper, 4);
      const uint64_t sym = u64(hdr + L_.klass_name);
      uint8_t sh[8];
      uint16_t len = 0;
      if (sym && !(sym & 1) && mem_.read(sym + L_.symbol_length, sh, 2)) std::memcpy(&len, sh, 2);
      if (len > 0 && len <= 2048) {
        std::string name(len, '\0');
        if (mem_.read(sym + L_.symbol_body, name.data(), len) && plausible_name(name)) {
          const bool array = lh < 0;
          const int tag = lh >> 30;  // arithmetic: -1 type array, -2 object array
          const unsigned hdr_size = (static_cast<uint32_t>(lh) >> 16) & 0xff, log2 = static_cast<uint32_t>(lh) & 0x3f;
          const bool sane = array ? ((tag == -1 || tag == -2) && hdr_size >= 8 && hdr_size <= 32 && log2 <= 3 &&
                                     name[0] == '[')
                                  : (lh > 0 && lh < (1 << 24) && name[0] != '[');
          if (sane) {
            k.valid = true;
            k.array = array;
            k.lh = lh;
            k.name = std::move(name);
            k.mirror = k.name == "java/lang/Class";
            k.filler = k.name == "jdk/internal/vm/FillerObject" || k.name == "[Ljdk/internal/vm/FillerElement;";
            // Sized by a Java field SA reads from the class's field table; not exported.
            k.unsizable = k.name == "jdk/internal/vm/StackChunk";
          }
        }
      }
    }
    it = klasses_.find(klass);
  }
  if (!it->second.valid) return &invalid_;
  last_klass_addr_ = klass;
  last_klass_ = &it->second;
  return last_klass_;
}

bool Walker::decode(uint64_t a, uint64_t limit, KlassInfo*& k, uint64_t& size, bool strict) {
  const size_t want = static_cast<size_t>(std::min<uint64_t>(24, limit - a));
  if (want < 8) return false;
  const uint8_t* h = mem_.view(a, want);  // valid until the next read
  if (!h) return false;
  const uint64_t mark = u64(h);
  uint64_t klass = 0;
  if (L_.compact_headers) {
    if ((mark & 3) == 3) return false;  // forwarded/marked: no klass bits
    klass = L_.narrow_klass_base + ((mark >> L_.mark_klass_shift) << L_.narrow_klass_shift);
  } else if (L_.compressed_klass) {
    const uint32_t nk = u32(h + 8);
    if (!nk) return false;
    klass = L_.narrow_klass_base + (static_cast<uint64_t>(nk) << L_.narrow_klass_shift);
  } else {
    klass = u64(h + 8);
  }
  uint32_t len = 0;
  const bool have_len = L_.array_length_offset + 4 <= want;
  if (have_len) len = u32(h + L_.array_length_offset);
  // A resynchronisation candidate must look like an unlocked header (no hash
  // or age bits beyond their fields) before its klass is even considered.
  if (strict && ((mark & 3) != 1 || (!L_.compact_headers && (mark >> 39) != 0))) return false;
  k = klass_at(klass);
  if (!k->valid) return false;
  if (!k->array) {
    if (k->unsizable) return false;
    if (k->mirror) {
      int32_t words = 0;
      if (!mem_.get(a + static_cast<uint64_t>(L_.mirror_size_offset), words) || words <= 0) return false;
      size = static_cast<uint64_t>(words) * 8;
    } else {
      size = static_cast<uint64_t>(k->lh) & ~uint64_t{7};
    }
  } else {
    if (!have_len && !mem_.get(a + L_.array_length_offset, len)) return false;
    const uint64_t hdr = (static_cast<uint32_t>(k->lh) >> 16) & 0xff, log2 = static_cast<uint32_t>(k->lh) & 0x3f;
    const uint64_t align = L_.object_alignment;
    size = (hdr + (static_cast<uint64_t>(len) << log2) + align - 1) & ~(align - 1);
  }
  return size >= 8 && (size & 7) == 0 && size <= limit - a;
}

uint64_t Walker::resync(uint64_t a, uint64_t limit) {
  KlassInfo* k = nullptr;
  uint64_t size = 0;
  uint64_t b = a;
  for (; b < limit; b += 8)
    if (decode(b, limit, k, size, true)) break;
  return b;
}

void Walker::walk_region(uint64_t from, uint64_t top, uint64_t count_until, bool sampled, bool resync_first) {
  uint64_t a = from;
  if (resync_first) {
    // A sampling window starts anywhere: the bytes up to the first object
    // that starts in it belong to an object that started before.
    a = resync(a, std::min(top, count_until));
    res_.parsed_bytes += a - from;
  }
  while (a < top && a < count_until && !stopped_) {
    if ((++steps_ & 4095) == 0 && deadline_.expired()) {
      stop("deadline reached");
      return;
    }
    if (mem_.target_gone()) {
      stop("target exited during the walk");
      return;
    }
    if (mem_.read_limit_hit()) {
      stop("read budget exhausted");
      return;
    }
    // Skip the unformatted tail of a live TLAB.
    while (hole_ < L_.holes.size() && L_.holes[hole_].second <= a) ++hole_;
    if (hole_ < L_.holes.size() && L_.holes[hole_].first <= a) {
      const uint64_t end = std::min(top, L_.holes[hole_].second);
      res_.parsed_bytes += end - a;
      a = end;
      continue;
    }
    const uint64_t limit =
        hole_ < L_.holes.size() && L_.holes[hole_].first < top ? L_.holes[hole_].first : top;
    KlassInfo* k = nullptr;
    uint64_t size = 0;
    if (decode(a, limit, k, size, false)) {
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
    const uint64_t b = resync(a + 8, limit);
    res_.unparsed_bytes += b - a;
    a = b;
  }
}

G1WalkResult Walker::run() {
  G1WalkResult& r = res_;
  if (!L_.region_table || L_.region_count == 0 || L_.region_count > kMaxRegions || L_.grain_bytes == 0) {
    r.reason = "implausible G1 region table";
    return r;
  }
  std::vector<uint64_t> table(L_.region_count);
  if (!mem_.read(L_.region_table, table.data(), table.size() * 8)) {
    r.reason = mem_.target_gone() ? "target exited" : "cannot read the G1 region table";
    return r;
  }
  struct Region {
    uint64_t bottom, top;
    int64_t tag;
  };
  std::vector<Region> regions;
  uint64_t walkable_used = 0;
  const size_t rsize = std::max<size_t>(L_.region_tag + 4, L_.region_top + 8);
  std::vector<uint8_t> rb(rsize);
  for (uint64_t hr : table) {
    if (!hr) continue;  // uncommitted
    if (!mem_.read(hr, rb.data(), rb.size())) continue;
    Region g{u64(rb.data() + L_.region_bottom), u64(rb.data() + L_.region_top), 0};
    int32_t tag;
    std::memcpy(&tag, rb.data() + L_.region_tag, 4);
    g.tag = tag;
    const uint64_t end = u64(rb.data() + L_.region_end);
    if (g.tag == L_.tag_free || g.bottom == 0 || g.top < g.bottom || g.top > end || end - g.bottom > (1ull << 40))
      continue;
    ++r.regions;
    r.used_bytes += g.top - g.bottom;
    if (g.tag != L_.tag_starts_humongous && g.tag != L_.tag_continues_humongous) walkable_used += g.top - g.bottom;
    regions.push_back(g);
  }
  std::sort(regions.begin(), regions.end(), [](const Region& x, const Region& y) { return x.bottom < y.bottom; });
  // Heaps above the walk budget are sampled: 64 KiB windows spread evenly
  // over every walkable region (1 of every k), each entered by
  // resynchronising on its first object; what they hold is scaled by the
  // walkable bytes over the window bytes. Windows rather than whole regions,
  // because regions differ a lot (one holds arrays, the next small objects).
  constexpr uint64_t kWindow = 64 << 10;
  r.sample_stride = std::max<uint64_t>(1, (walkable_used + lim_.max_walk_bytes - 1) / std::max<uint64_t>(1, lim_.max_walk_bytes));
  const bool sampled = r.sample_stride > 1;
  uint64_t window_no = 0, window_bytes = 0;
  for (const Region& g : regions) {
    if (stopped_) break;
    if (g.tag == L_.tag_continues_humongous) {
      r.parsed_bytes += g.top - g.bottom;  // covered by the object of its starts-humongous region
      continue;
    }
    if (g.tag == L_.tag_starts_humongous) {
      KlassInfo* k = nullptr;
      uint64_t size = 0;
      ++r.regions_walked;
      if (decode(g.bottom, g.bottom + (1ull << 40), k, size, false)) {
        ++k->objects;
        k->bytes += size;
        ++r.objects;
        ++r.humongous_objects;
        r.humongous_bytes += size;
        r.parsed_bytes += g.top - g.bottom;
      } else {
        r.unparsed_bytes += g.top - g.bottom;
      }
      continue;
    }
    if (!sampled) {
      ++r.regions_walked;
      walk_region(g.bottom, g.top, g.top, false, false);
      continue;
    }
    bool walked = false;
    for (uint64_t w = g.bottom; w < g.top && !stopped_; w += kWindow, ++window_no) {
      if (window_no % r.sample_stride != 0) continue;
      const uint64_t we = std::min(g.top, w + kWindow);
      window_bytes += we - w;
      walk_region(w, g.top, we, true, w != g.bottom);
      walked = true;
    }
    r.regions_walked += walked;
  }
  const double scale = window_bytes ? static_cast<double>(walkable_used) / static_cast<double>(window_bytes) : 0;
  for (auto& [addr, k] : klasses_) {
    k.objects += static_cast<uint64_t>(static_cast<double>(k.sampled_objects) * scale + 0.5);
    k.bytes += static_cast<uint64_t>(static_cast<double>(k.sampled_bytes) * scale + 0.5);
  }
  for (auto& [addr, k] : klasses_)
    if (k.valid && k.objects) r.classes.push_back({java_class_name(k.name), k.objects, k.bytes});
  r.coverage = r.used_bytes ? std::min(1.0, static_cast<double>(r.parsed_bytes) / static_cast<double>(r.used_bytes)) : 1.0;
  if (r.regions == 0) {
    r.reason = "no G1 regions in use could be read";
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

G1WalkResult walk_g1_heap(ChunkCache& mem, const G1Layout& layout, const G1Limits& limits, const Deadline& deadline) {
  Walker w(mem, layout, limits, deadline);
  return w.run();
}

}  // namespace oomsnap
