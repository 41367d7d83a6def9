// Byte images of HotSpot's structures, built in this process's own memory and
// read back through process_vm_readv on ourselves, for the Java collector's
// unit tests (tests/unit/java_*_test.cpp): scratch pages, VMStructs tables and
// a G1 heap with its klasses and regions.
#pragma once
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "core/chunk_cache.h"
#include "core/snapshot.h"
#include "java/java_heap.h"
#include "java/generational_heap.h"
#include "java/hotspot_vmstructs.h"

namespace oomsnap::java_test {


// Page-aligned scratch memory that lives as long as the test.
class Arena {
 public:
  Arena() = default;
  Arena(Arena&& o) noexcept : blocks_(std::move(o.blocks_)) { o.blocks_.clear(); }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() {
    for (auto& [p, n] : blocks_) munmap(p, n);
  }
  uint64_t alloc(size_t n, size_t align = 8) {
    n = (n + align + 4095) & ~size_t{4095};
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    blocks_.emplace_back(p, n);
    return (reinterpret_cast<uint64_t>(p) + align - 1) & ~uint64_t(align - 1);
  }
  uint64_t str(const std::string& s) {
    uint64_t a = alloc(s.size() + 1);
    std::memcpy(reinterpret_cast<void*>(a), s.c_str(), s.size() + 1);
    return a;
  }
  template <typename T>
  static void put(uint64_t addr, T v) {
    std::memcpy(reinterpret_cast<void*>(addr), &v, sizeof v);
  }

 private:
  std::vector<std::pair<void*, size_t>> blocks_;
};

inline ChunkCache cache_of_self(RemoteMemory& mem) { return ChunkCache(mem, read_maps(getpid()), 4096, 1 << 20); }

// --- VMStructs tables -------------------------------------------------------

inline Deadline no_deadline() { return Deadline{std::chrono::milliseconds(60000)}; }

// HotSpot's four VMStructs tables built from a description, with the real
// entry layouts (JDK 17-25): struct entries of 48 bytes, type entries of 40,
// constants of 16. Tests describe, change the description, then build() and
// read syms with a cache made after that (a cache made before it could hold
// stale bytes of memory an earlier test unmapped and the arena got back).
class FakeVm {
 public:
  struct Field {
    std::string type, name, type_string;
    bool is_static = false;
    uint64_t offset = 0, address = 0;
  };
  void field(const std::string& type, const std::string& name, uint64_t offset) {
    fields.push_back({type, name, "int", false, offset, 0});
  }
  // A static variable holding `value` (8 bytes); returns its address.
  uint64_t global(const std::string& type, const std::string& name, uint64_t value) {
    const uint64_t p = a.alloc(8);
    Arena::put(p, value);
    fields.push_back({type, name, "int", true, 0, p});
    return p;
  }
  Field& find(const std::string& type, const std::string& name) {
    for (auto& f : fields)
      if (f.type == type && f.name == name) return f;
    throw std::runtime_error("no field " + type + "::" + name);
  }
  // The field described as declared by another type, or no longer described.
  void move(const std::string& type, const std::string& name, const std::string& to_type,
            const std::string& to_name = "") {
    Field& f = find(type, name);
    f.type = to_type;
    if (!to_name.empty()) f.name = to_name;
  }
  void drop(const std::string& type, const std::string& name) {
    Field& f = find(type, name);
    fields.erase(fields.begin() + (&f - fields.data()));
  }
  // Writes the tables and the entry layout variables; the symbols point at them.
  const HotSpotSymbols& build() {
    auto var = [&](uint64_t v) {
      const uint64_t p = a.alloc(8);
      Arena::put(p, v);
      return p;
    };
    syms.struct_type_name = var(0), syms.struct_field_name = var(8), syms.struct_type_string = var(16);
    syms.struct_is_static = var(24), syms.struct_offset = var(32), syms.struct_address = var(40);
    syms.struct_stride = var(48);
    syms.type_type_name = var(0), syms.type_size = var(32), syms.type_stride = var(40);
    syms.type_superclass_name = var(8);
    syms.int_name = var(0), syms.int_value = var(8), syms.int_stride = var(16);
    syms.long_name = var(0), syms.long_value = var(8), syms.long_stride = var(16);
    const uint64_t st = a.alloc(48 * (fields.size() + 1));
    for (size_t i = 0; i < fields.size(); ++i) {
      const Field& f = fields[i];
      const uint64_t e = st + 48 * i;
      Arena::put(e, a.str(f.type)), Arena::put(e + 8, a.str(f.name)), Arena::put(e + 16, a.str(f.type_string));
      Arena::put<int32_t>(e + 24, f.is_static), Arena::put(e + 32, f.offset), Arena::put(e + 40, f.address);
    }
    const uint64_t ty = a.alloc(40 * (types.size() + 1));
    size_t i = 0;
    for (const auto& [name, size] : types) {
      Arena::put(ty + 40 * i, a.str(name)), Arena::put(ty + 40 * i + 32, size);
      if (auto it = supers.find(name); it != supers.end()) Arena::put(ty + 40 * i + 8, a.str(it->second));
      ++i;
    }
    auto constants = [&](const auto& m) {
      const uint64_t t = a.alloc(16 * (m.size() + 1));
      size_t j = 0;
      for (const auto& [name, v] : m) Arena::put(t + 16 * j, a.str(name)), Arena::put(t + 16 * j + 8, v), ++j;
      return t;
    };
    syms.structs = var(st);
    syms.types = var(ty);
    syms.int_constants = var(constants(ints));
    syms.long_constants = var(constants(longs));
    return syms;
  }

  Arena a;
  std::vector<Field> fields;
  std::map<std::string, uint64_t> types;
  std::map<std::string, std::string> supers;  // type -> its superclass (types without one are top-level)
  std::map<std::string, int32_t> ints;
  std::map<std::string, uint64_t> longs;
  HotSpotSymbols syms;
};

// nfields generic fields ("Type<i>::_field", every other one static) and ntypes types.
inline FakeVm generic_vm(int nfields, int ntypes) {
  FakeVm v;
  for (int i = 0; i < nfields; ++i)
    v.fields.push_back({"Type" + std::to_string(i), "_field", "int", i % 2 != 0, static_cast<uint64_t>(i) * 8,
                        0x1000 + static_cast<uint64_t>(i)});
  for (int i = 0; i < ntypes; ++i) v.types["T" + std::to_string(i)] = static_cast<uint64_t>(i) + 1;
  v.ints["Klass::_lh_array_tag_shift"] = 30;
  v.longs["markWord::klass_shift"] = 42;
  v.build();
  return v;
}

// The fake's tables built into this process and read as the collector reads
// them (HotSpotVm keeps what it read, not the cache).
inline std::optional<HotSpotVm> read_fake_vm(FakeVm& v, std::string& err) {
  v.build();
  RemoteMemory mem(getpid());
  auto c = cache_of_self(mem);
  return HotSpotVm::read(c, v.syms, no_deadline(), err);
}

// --- The JVM's flags ----------------------------------------------------------


// JVMFlag::flags[numFlags] as JDK 17-25 lay it out (_addr at 0, _name at 8,
// 24-byte records), with a few flags and their values; or JDK 8's
// Flag::flags (_name at 8, _addr at 16, 32-byte records).
struct FakeFlags {
  struct Layout {
    const char* type;
    uint64_t record, addr, name;
  };
  static constexpr Layout kJdk17{"JVMFlag", 24, 0, 8}, kJdk8{"Flag", 32, 16, 8};
  explicit FakeFlags(FakeVm& v, Layout l = kJdk17) {
    const std::vector<std::pair<std::string, uint64_t>> flags = {
        {"UseSerialGC", 0}, {"UseG1GC", 1}, {"UseCompressedClassPointers", 1}, {"ObjectAlignmentInBytes", 8}};
    const uint64_t table = v.a.alloc(l.record * flags.size());
    for (size_t i = 0; i < flags.size(); ++i) {
      const uint64_t value = v.a.alloc(8);
      Arena::put(value, flags[i].second);
      values[flags[i].first] = value;
      Arena::put(table + l.record * i + l.addr, value);
      Arena::put(table + l.record * i + l.name, v.a.str(flags[i].first));
    }
    v.global(l.type, "flags", table);
    v.global(l.type, "numFlags", flags.size());
    v.field(l.type, "_addr", l.addr);
    v.field(l.type, "_name", l.name);
    v.types[l.type] = l.record;
  }
  std::map<std::string, uint64_t> values;  // flag -> address of its value
};


// --- G1 heap ----------------------------------------------------------------


// A G1 heap image with compressed class pointers (narrow klass = offset from
// a klass area), legacy 16-byte headers and 1 MiB regions. Klass and region
// records are written at the layout's offsets (L.klass_*, L.region_*), so a
// test can move them.
class FakeG1 {
 public:
  static constexpr uint64_t kGrain = 1 << 20;
  static constexpr uint64_t kKlassBytes = 256, kRegionBytes = 256;  // record sizes
  static constexpr uint64_t kKlassArea = 1 << 20;                     // room for 4095 klasses
  FakeG1() {
    klass_area_ = a_.alloc(kKlassArea, 8);
    klass_next_ = klass_area_ + 8;  // narrow klass 0 means null
    L.narrow_klass_base = klass_area_;
    L.narrow_klass_shift = 0;
    L.compressed_klass = true;
    L.array_length_offset = 12;
    L.grain_bytes = kGrain;
    L.region_bottom = 0, L.region_end = 8, L.region_top = 16, L.region_tag = 24;
    L.tag_free = 0, L.tag_starts_humongous = 4, L.tag_continues_humongous = 5;
    L.mirror_size_offset = 16;
  }
  // An instance klass of `size` bytes, or an array klass (header 16, log2 element size).
  uint32_t klass(const std::string& name, int32_t lh) {
    const uint64_t k = klass_next_;
    if (k + kKlassBytes > klass_area_ + kKlassArea) throw std::length_error("FakeG1: klass area full");
    klass_next_ += kKlassBytes;
    const uint64_t sym = a_.alloc(8 + name.size());
    Arena::put<uint16_t>(sym + 4, static_cast<uint16_t>(name.size()));
    std::memcpy(reinterpret_cast<void*>(sym + 6), name.data(), name.size());
    Arena::put<int32_t>(k + L.klass_layout_helper, lh);
    Arena::put<uint64_t>(k + L.klass_name, sym);
    return static_cast<uint32_t>(k - klass_area_);
  }
  static int32_t array_lh(bool objects, int log2) {
    return static_cast<int32_t>((objects ? 0x80000000u : 0xC0000000u) | (16u << 16) | static_cast<uint32_t>(log2));
  }
  // A region with the given tag; objects are appended with obj()/array().
  uint64_t region(int64_t tag) {
    const uint64_t bottom = a_.alloc(kGrain, kGrain);
    const uint64_t hr = a_.alloc(kRegionBytes);
    Arena::put(hr + L.region_bottom, bottom), Arena::put(hr + L.region_end, bottom + kGrain);
    Arena::put(hr + L.region_top, bottom);
    Arena::put<int32_t>(hr + L.region_tag, static_cast<int32_t>(tag));
    regions_.push_back(hr);
    return hr;
  }
  // n regions one after the other in memory (a humongous series), untagged.
  std::vector<uint64_t> series(size_t n) {
    const uint64_t base = a_.alloc(n * kGrain, kGrain);
    std::vector<uint64_t> out;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t hr = a_.alloc(kRegionBytes), bottom = base + i * kGrain;
      Arena::put(hr + L.region_bottom, bottom), Arena::put(hr + L.region_end, bottom + kGrain);
      Arena::put(hr + L.region_top, bottom);
      regions_.push_back(hr);
      out.push_back(hr);
    }
    return out;
  }
  uint64_t bottom(uint64_t hr) const { return at(hr + L.region_bottom); }
  uint64_t top(uint64_t hr) const { return at(hr + L.region_top); }
  void set_top(uint64_t hr, uint64_t top) { Arena::put(hr + L.region_top, top); }
  void set_end(uint64_t hr, uint64_t end) { Arena::put(hr + L.region_end, end); }
  uint64_t obj(uint64_t hr, uint32_t nk, uint64_t size) {
    const uint64_t at = top(hr);
    Arena::put<uint64_t>(at, 1);  // unlocked mark
    Arena::put<uint32_t>(at + 8, nk);
    set_top(hr, at + size);
    return at;
  }
  uint64_t array(uint64_t hr, uint32_t nk, uint32_t len, int log2) {
    const uint64_t size = (16 + (uint64_t{len} << log2) + 7) & ~uint64_t{7};
    const uint64_t at = obj(hr, nk, size);
    Arena::put<uint32_t>(at + 12, len);
    return at;
  }
  // The region table (slot 0 uncommitted), into L.region_table / L.region_count.
  void table() {
    const uint64_t t = a_.alloc(8 * (regions_.size() + 2));
    for (size_t i = 0; i < regions_.size(); ++i) Arena::put(t + 8 * (i + 1), regions_[i]);
    L.region_table = t;
    L.region_count = regions_.size() + 2;
  }
  // Walks with L and limits as they are (table() when no table was built);
  // last_syscalls: the reads that cost.
  JavaHeapWalk walk(uint64_t max_walk = 1ull << 30, int budget_ms = 5000) {
    RemoteMemory mem(getpid());
    ChunkCache c(mem, read_maps(getpid()), 4096, 1 << 20);
    auto r = walk_with(c, max_walk, budget_ms);
    last_syscalls = mem.syscalls();
    return r;
  }
  // The same through a cache of the test's own.
  JavaHeapWalk walk_with(ChunkCache& c, uint64_t max_walk = 1ull << 30, int budget_ms = 5000) {
    if (!L.region_table) table();
    JavaHeapLimits lim = limits;
    lim.max_walk_bytes = max_walk;
    Deadline d{std::chrono::milliseconds(budget_ms)};
    return walk_java_heap(c, L, lim, d);
  }
  uint64_t klass_area() const { return klass_area_; }
  uint64_t next_klass() const { return klass_next_; }  // where klass() writes the next one
  const std::vector<uint64_t>& regions() const { return regions_; }
  JavaHeapLayout L;
  JavaHeapLimits limits;
  Arena a_;
  uint64_t last_syscalls = 0;

 private:
  static uint64_t at(uint64_t addr) {
    uint64_t v;
    std::memcpy(&v, reinterpret_cast<void*>(addr), 8);
    return v;
  }
  uint64_t klass_area_ = 0, klass_next_ = 0;
  std::vector<uint64_t> regions_;
};

// Serial / Parallel: the fake's region records serve as space records
// (bottom, end, top at the same offsets as a ContiguousSpace's or
// MutableSpace's would be), named as the resolution names them.
inline void use_spaces(FakeG1& h, HeapKind kind, const std::vector<std::pair<std::string, uint64_t>>& spaces) {
  h.L.kind = kind;
  h.L.space_bottom = h.L.region_bottom, h.L.space_end = h.L.region_end, h.L.space_top = h.L.region_top;
  h.L.spaces.clear();
  for (const auto& [name, rec] : spaces) h.L.spaces.push_back({name, "DefNewGeneration::_" + name + "_space", rec});
}

inline std::map<std::string, std::pair<uint64_t, uint64_t>> classes(const JavaHeapWalk& r) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> m;
  for (const auto& c : r.classes) m[c.name] = {c.objects, c.bytes};
  return m;
}

}  // namespace oomsnap::java_test
