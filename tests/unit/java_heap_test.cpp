// The Java collector's decoders on byte images built in this process's own
// memory (read back through process_vm_readv on ourselves): HotSpot's
// VMStructs tables (well-formed, corrupted, unterminated), the JVM's flags,
// the G1 layout resolved from them, and G1 heaps (regions, humongous
// objects, TLAB tails, garbage, sampling, deadline). A hostile process can
// export tables of its own making (a file named libjvm.so), so every value
// from them is also tried out of range: it must be refused with a reason, or
// bounded, never used to index past a buffer or to loop for long.
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
#include "java/g1_heap.h"
#include "java/generational_heap.h"
#include "java/hotspot_vmstructs.h"

// The Java fuzzer's own entry point, for its regression inputs.
#include "../fuzz/fuzz_java_heap.cpp"

using namespace oomsnap;

namespace {

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

ChunkCache cache_of_self(RemoteMemory& mem) { return ChunkCache(mem, read_maps(getpid()), 4096, 1 << 20); }

// --- VMStructs tables -------------------------------------------------------

Deadline no_deadline() { return Deadline{std::chrono::milliseconds(60000)}; }

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
FakeVm generic_vm(int nfields, int ntypes) {
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

}  // namespace

TEST(HotSpotVmStructs, ReadsTheTables) {
  FakeVm t = generic_vm(40, 30);
  RemoteMemory mem(getpid());
  auto c = cache_of_self(mem);
  std::string err;
  auto vm = HotSpotVm::read(c, t.syms, no_deadline(), err);
  ASSERT_TRUE(vm) << err;
  EXPECT_EQ(vm->field_count(), 40u);
  const VmField* f = vm->field("Type3", "_field");
  ASSERT_TRUE(f);
  EXPECT_TRUE(f->is_static);
  EXPECT_EQ(f->address, 0x1003u);
  EXPECT_EQ(f->type, "int");
  EXPECT_FALSE(vm->field("Type2", "_field")->is_static);
  EXPECT_EQ(vm->field("Type2", "_field")->offset, 16u);
  EXPECT_EQ(vm->field_any({"Nope", "Type5"}, "_field"), vm->field("Type5", "_field"));
  EXPECT_EQ(vm->type_size("T4").value_or(0), 5u);
  EXPECT_EQ(vm->int_constant("Klass::_lh_array_tag_shift").value_or(0), 30);
  EXPECT_EQ(vm->long_constant("markWord::klass_shift").value_or(0), 42u);
  EXPECT_FALSE(vm->field("Type1", "_other"));
}

TEST(HotSpotVmStructs, CorruptTablesAreErrors) {
  RemoteMemory mem(getpid());
  std::string err;
  {
    FakeVm t = generic_vm(40, 30);
    Arena::put<uint64_t>(t.syms.struct_stride, 1 << 20);  // absurd stride
    auto c = cache_of_self(mem);
    EXPECT_FALSE(HotSpotVm::read(c, t.syms, no_deadline(), err));
    EXPECT_NE(err.find("implausible"), std::string::npos) << err;
  }
  {
    FakeVm t = generic_vm(40, 30);
    Arena::put<uint64_t>(t.syms.structs, 0x10);  // table pointer into nowhere
    auto c = cache_of_self(mem);
    EXPECT_FALSE(HotSpotVm::read(c, t.syms, no_deadline(), err));
    EXPECT_NE(err.find("gHotSpotVMStructs"), std::string::npos) << err;
  }
  {
    FakeVm t = generic_vm(40, 30);
    Arena::put<uint64_t>(t.syms.struct_type_name, 44);  // name field past the stride
    auto c = cache_of_self(mem);
    EXPECT_FALSE(HotSpotVm::read(c, t.syms, no_deadline(), err));
    EXPECT_NE(err.find("stride"), std::string::npos) << err;
  }
  {
    // No terminating entry: a table of repeated records stops at the cap.
    FakeVm t = generic_vm(4, 30);
    Arena a;
    const uint64_t big = a.alloc(48 * (HotSpotVm::kMaxEntries + 8));
    const uint64_t name = a.str("X");
    for (size_t i = 0; i < HotSpotVm::kMaxEntries + 8; ++i) Arena::put(big + 48 * i, name), Arena::put(big + 48 * i + 8, name);
    Arena::put(t.syms.structs, big);
    auto c = cache_of_self(mem);
    EXPECT_FALSE(HotSpotVm::read(c, t.syms, no_deadline(), err));
    EXPECT_NE(err.find("no end"), std::string::npos) << err;
  }
  {
    FakeVm t = generic_vm(3, 3);  // too few entries to be HotSpot's
    auto c = cache_of_self(mem);
    EXPECT_FALSE(HotSpotVm::read(c, t.syms, no_deadline(), err));
    EXPECT_NE(err.find("nearly empty"), std::string::npos) << err;
  }
}

// The table walk is bounded by the deadline too, not only by its entry cap.
TEST(HotSpotVmStructs, DeadlineEndsTheTableWalk) {
  FakeVm t = generic_vm(40, 30);
  RemoteMemory mem(getpid());
  auto c = cache_of_self(mem);
  std::string err;
  EXPECT_FALSE(HotSpotVm::read(c, t.syms, Deadline{std::chrono::milliseconds(0)}, err));
  EXPECT_NE(err.find("deadline"), std::string::npos) << err;
}

// An offset is only used once it fits, with the bytes read at it, inside its
// type's size from gHotSpotVMTypes, and that size is believable.

namespace {
// The fake's tables built into this process and read as the collector reads
// them (HotSpotVm keeps what it read, not the cache).
std::optional<HotSpotVm> read_fake_vm(FakeVm& v, std::string& err) {
  v.build();
  RemoteMemory mem(getpid());
  auto c = cache_of_self(mem);
  return HotSpotVm::read(c, v.syms, no_deadline(), err);
}
}  // namespace

TEST(HotSpotVmStructs, FieldOffsetsAreCheckedAgainstTheirType) {
  FakeVm v = generic_vm(20, 20);
  v.field("Klass", "_name", 16);
  v.field("Klass", "_far", 200);
  v.field("Huge", "_x", 0);
  v.field("NoSize", "_x", 0);
  v.global("Klass", "_static", 1);
  v.types["Klass"] = 64;
  v.types["Huge"] = uint64_t{1} << 40;
  std::string err;
  auto vm = read_fake_vm(v, err);
  ASSERT_TRUE(vm) << err;
  EXPECT_EQ(vm->field_offset({"Klass"}, "_name", 8, err).value_or(0), 16u) << err;
  EXPECT_EQ(vm->field_offset({"Renamed", "Klass"}, "_name", 48, err).value_or(0), 16u) << err;  // ends at 64
  EXPECT_FALSE(vm->field_offset({"Klass"}, "_name", 49, err));
  EXPECT_NE(err.find("Klass::_name"), std::string::npos) << err;
  EXPECT_FALSE(vm->field_offset({"Klass"}, "_far", 8, err));
  EXPECT_NE(err.find("does not fit"), std::string::npos) << err;
  EXPECT_FALSE(vm->field_offset({"Klass"}, "_name", ~uint64_t{0}, err));  // offset + bytes wraps
  EXPECT_FALSE(vm->field_offset({"Klass"}, "_static", 8, err));
  EXPECT_NE(err.find("static"), std::string::npos) << err;
  EXPECT_FALSE(vm->field_offset({"Huge"}, "_x", 8, err));
  EXPECT_NE(err.find("implausible size"), std::string::npos) << err;
  EXPECT_FALSE(vm->field_offset({"NoSize"}, "_x", 8, err));
  EXPECT_NE(err.find("no type NoSize"), std::string::npos) << err;
  EXPECT_FALSE(vm->field_offset({"Klass"}, "_missing", 8, err));
  EXPECT_NE(err.find("no Klass::_missing"), std::string::npos) << err;
  EXPECT_EQ(vm->checked_type_size({"Nope", "Klass"}, err).value_or(0), 64u);
}

// A string that runs into an unreadable page costs a read or two, not one
// failed read per byte.
TEST(HotSpotVmStructs, StringsNextToAnUnreadablePageCostFewReads) {
  const long page = sysconf(_SC_PAGESIZE);
  auto* p = static_cast<char*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  std::memset(p, 'x', 2 * page);
  std::memcpy(p + page - 4, "abc", 4);
  ASSERT_EQ(mprotect(p + page, page, PROT_NONE), 0);
  RemoteMemory mem(getpid());
  auto c = cache_of_self(mem);
  const uint64_t end = reinterpret_cast<uint64_t>(p + page);  // the unreadable page
  EXPECT_EQ(read_remote_c_string(c, end - 4), "abc");
  uint64_t before = mem.syscalls();
  EXPECT_EQ(read_remote_c_string(c, end - 63), std::string(59, 'x') + "abc");
  EXPECT_LE(mem.syscalls() - before, 1u);
  // Unterminated up to the unreadable page: empty, after a failed read or two.
  std::memcpy(p + page - 4, "abcd", 4);
  auto fresh = cache_of_self(mem);  // c holds the old bytes
  before = mem.syscalls();
  EXPECT_EQ(read_remote_c_string(fresh, end - 63), "");
  EXPECT_LE(mem.syscalls() - before, 2u);
  munmap(p, 2 * page);
}

// A field moves to a base class between versions (HeapRegion's _bottom,
// _end and _top are Space's and G1ContiguousSpace's in JDK 11): it is found
// through the superclasses gHotSpotVMTypes names, the nearest declaration
// first, and checked against the base class's size as well as the type's.
TEST(HotSpotVmStructs, FieldsOfBaseClassesAreFoundThroughTheTypeHierarchy) {
  FakeVm v = generic_vm(20, 20);
  v.types.insert({{"HeapRegion", 376}, {"G1ContiguousSpace", 248}, {"CompactibleSpace", 80}, {"Space", 48}});
  v.supers = {{"HeapRegion", "G1ContiguousSpace"}, {"G1ContiguousSpace", "CompactibleSpace"},
              {"CompactibleSpace", "Space"}};
  v.field("Space", "_bottom", 8), v.field("Space", "_end", 16);
  v.field("G1ContiguousSpace", "_top", 80);
  v.field("Space", "_top", 40);    // hidden by G1ContiguousSpace's own
  v.field("Space", "_far", 44);    // fits HeapRegion, not Space
  v.field("HeapRegion", "_type", 260);
  std::string err, decl;
  auto vm = read_fake_vm(v, err);
  ASSERT_TRUE(vm) << err;
  EXPECT_EQ(vm->superclass("HeapRegion"), "G1ContiguousSpace");
  EXPECT_EQ(vm->superclass("Space"), "");
  ASSERT_TRUE(vm->field("HeapRegion", "_bottom", &decl));
  EXPECT_EQ(decl, "Space");
  EXPECT_EQ(vm->field_offset({"G1HeapRegion", "HeapRegion"}, "_bottom", 8, err).value_or(0), 8u) << err;
  EXPECT_EQ(vm->field_offset({"HeapRegion"}, "_end", 8, err).value_or(0), 16u) << err;
  EXPECT_EQ(vm->field_offset({"HeapRegion"}, "_top", 8, err).value_or(0), 80u) << err;  // the nearest
  EXPECT_EQ(vm->field_offset({"HeapRegion"}, "_type", 4, err).value_or(0), 260u) << err;
  EXPECT_FALSE(vm->field_offset({"HeapRegion"}, "_far", 8, err));
  EXPECT_NE(err.find("HeapRegion::_far (declared in Space)"), std::string::npos) << err;
  EXPECT_NE(err.find("48 bytes"), std::string::npos) << err;
  EXPECT_FALSE(vm->field("Space", "_type"));  // never down the hierarchy
}

// The superclass names come from the target: a chain that loops (or goes on
// longer than any HotSpot's) ends the lookup after kMaxTypeDepth types.
TEST(HotSpotVmStructs, ACircularOrEndlessTypeHierarchyEndsTheLookup) {
  FakeVm v = generic_vm(20, 20);
  v.types.insert({{"A", 8}, {"B", 8}});
  v.supers = {{"A", "B"}, {"B", "A"}};
  for (int i = 0; i < HotSpotVm::kMaxTypeDepth + 4; ++i) {
    v.types["C" + std::to_string(i)] = 8;
    v.supers["C" + std::to_string(i)] = "C" + std::to_string(i + 1);
  }
  v.field("C" + std::to_string(HotSpotVm::kMaxTypeDepth - 1), "_near", 0);
  v.field("C" + std::to_string(HotSpotVm::kMaxTypeDepth + 2), "_far", 0);
  std::string err;
  auto vm = read_fake_vm(v, err);
  ASSERT_TRUE(vm) << err;
  EXPECT_FALSE(vm->field("A", "_missing"));
  EXPECT_FALSE(vm->field_offset({"B"}, "_missing", 8, err));
  EXPECT_TRUE(vm->field("C0", "_near"));
  EXPECT_FALSE(vm->field("C0", "_far"));
}

// Without the superclass layout variable (0: not exported) every type is a
// top-level one; with one outside the type record, the tables are refused.
TEST(HotSpotVmStructs, SuperclassLayoutIsOptionalButChecked) {
  RemoteMemory mem(getpid());
  std::string err;
  {
    FakeVm v = generic_vm(20, 20);
    v.types.insert({{"Sub", 16}, {"Base", 16}});
    v.supers = {{"Sub", "Base"}};
    v.field("Base", "_x", 0);
    v.build();
    v.syms.type_superclass_name = 0;
    auto c = cache_of_self(mem);
    auto vm = HotSpotVm::read(c, v.syms, no_deadline(), err);
    ASSERT_TRUE(vm) << err;
    EXPECT_FALSE(vm->field("Sub", "_x"));
    EXPECT_TRUE(vm->field("Base", "_x"));
  }
  {
    FakeVm v = generic_vm(20, 20);
    v.build();
    Arena::put<uint64_t>(v.syms.type_superclass_name, 36);  // 8 bytes at 36 of a 40-byte record
    auto c = cache_of_self(mem);
    EXPECT_FALSE(HotSpotVm::read(c, v.syms, no_deadline(), err));
    EXPECT_NE(err.find("stride"), std::string::npos) << err;
  }
}

// java -version's build line, from the VM's info string: JDK 8's VM release
// (25.504-b01) is not the JDK's version.
TEST(HotSpotVmStructs, JreVersionFromTheVmInfoString) {
  EXPECT_EQ(jre_version_of("OpenJDK 64-Bit Server VM (25.504-b01) for linux-amd64 JRE (1.8.0_504-8u504-ga-1-b01), "
                           "built on Aug 20 2026 02:12:31 by \"sbuild\" with gcc 16.2.0"),
            "1.8.0_504-8u504-ga-1-b01");
  EXPECT_EQ(jre_version_of("OpenJDK 64-Bit Server VM (26.0.2.1+1-1-Debian) for linux-amd64 JRE "
                           "(26.0.2.1+1-1-Debian), built on 2026-08-18T23:31:08Z with gcc 15.3.0"),
            "26.0.2.1+1-1-Debian");
  EXPECT_EQ(jre_version_of("no such part"), "");
  EXPECT_EQ(jre_version_of("x JRE ()"), "");
  EXPECT_EQ(jre_version_of("x JRE (1.8.0 with a space)"), "");
  EXPECT_EQ(jre_version_of("x JRE (1.8.0\n)"), "");
  EXPECT_EQ(jre_version_of("x JRE (" + std::string(65, '1') + ")"), "");
  EXPECT_EQ(jre_version_of("x JRE (unterminated"), "");
}

// --- The JVM's flags ----------------------------------------------------------

namespace {

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

}  // namespace

TEST(HotSpotFlags, ReadsTheWantedFlags) {
  FakeVm v = generic_vm(20, 20);
  FakeFlags f(v);
  v.build();
  FakeVm bare = generic_vm(20, 20);  // no flag table
  RemoteMemory mem(getpid());
  auto c = cache_of_self(mem);
  std::string err;
  auto vm = HotSpotVm::read(c, v.syms, no_deadline(), err);
  ASSERT_TRUE(vm) << err;
  auto flags = read_jvm_flags(c, *vm, {"UseG1GC", "ObjectAlignmentInBytes", "UseZGC"}, no_deadline(), err);
  ASSERT_TRUE(flags) << err;
  EXPECT_EQ(*flags, (std::map<std::string, uint64_t>{{"UseG1GC", f.values["UseG1GC"]},
                                                     {"ObjectAlignmentInBytes", f.values["ObjectAlignmentInBytes"]}}));
  // A JVM without a flag table (not JDK 9+): no flags, not an error.
  auto vm2 = HotSpotVm::read(c, bare.syms, no_deadline(), err);
  ASSERT_TRUE(vm2) << err;
  auto none = read_jvm_flags(c, *vm2, {"UseG1GC"}, no_deadline(), err);
  ASSERT_TRUE(none) << err;
  EXPECT_TRUE(none->empty());
}

// JDK 8 names the record Flag (JVMFlag from 11 on), with a layout of its own.
TEST(HotSpotFlags, ReadsJdk8sFlagTable) {
  FakeVm v = generic_vm(20, 20);
  FakeFlags f(v, FakeFlags::kJdk8);
  v.build();
  RemoteMemory mem(getpid());
  auto c = cache_of_self(mem);
  std::string err;
  auto vm = HotSpotVm::read(c, v.syms, no_deadline(), err);
  ASSERT_TRUE(vm) << err;
  auto flags = read_jvm_flags(c, *vm, {"UseG1GC", "UseSerialGC"}, no_deadline(), err);
  ASSERT_TRUE(flags) << err;
  EXPECT_EQ(*flags, (std::map<std::string, uint64_t>{{"UseG1GC", f.values["UseG1GC"]},
                                                     {"UseSerialGC", f.values["UseSerialGC"]}}));
  // Its record offsets are checked like JVMFlag's.
  FakeVm bad = generic_vm(20, 20);
  FakeFlags g(bad, FakeFlags::kJdk8);
  bad.find("Flag", "_addr").offset = 28;
  bad.build();
  auto c2 = cache_of_self(mem);
  auto vm2 = HotSpotVm::read(c2, bad.syms, no_deadline(), err);
  ASSERT_TRUE(vm2) << err;
  EXPECT_FALSE(read_jvm_flags(c2, *vm2, {"UseG1GC"}, no_deadline(), err));
  EXPECT_NE(err.find("Flag::_addr"), std::string::npos) << err;
}

// The record offsets come from the target: ones that do not fit the record
// (here _name 300 bytes into a 24-byte record, which indexed past the copy of
// the table) are refused with the field named, not used.
TEST(HotSpotFlags, RecordOffsetsOutsideTheRecordAreRefused) {
  RemoteMemory mem(getpid());
  std::string err;
  for (auto [field, offset] : std::initializer_list<std::pair<const char*, uint64_t>>{
           {"_name", 300}, {"_addr", 17}, {"_name", ~uint64_t{0} - 3}}) {
    FakeVm v = generic_vm(20, 20);
    FakeFlags f(v);
    v.find("JVMFlag", field).offset = offset;
    v.build();
    auto c = cache_of_self(mem);  // each case's own: the memory is new
    auto vm = HotSpotVm::read(c, v.syms, no_deadline(), err);
    ASSERT_TRUE(vm) << err;
    err.clear();
    EXPECT_FALSE(read_jvm_flags(c, *vm, {"UseG1GC"}, no_deadline(), err)) << field << " at " << offset;
    EXPECT_NE(err.find(std::string("JVMFlag::") + field), std::string::npos) << err;
  }
  for (uint64_t size : {uint64_t{8}, uint64_t{1} << 20}) {  // a record size that cannot hold both, or absurd
    FakeVm v = generic_vm(20, 20);
    FakeFlags f(v);
    v.types["JVMFlag"] = size;
    v.build();
    auto c = cache_of_self(mem);
    auto vm = HotSpotVm::read(c, v.syms, no_deadline(), err);
    ASSERT_TRUE(vm) << err;
    err.clear();
    EXPECT_FALSE(read_jvm_flags(c, *vm, {"UseG1GC"}, no_deadline(), err)) << size;
    EXPECT_NE(err.find("JVMFlag"), std::string::npos) << err;
  }
}

TEST(JavaNames, AsJavaPrintsThem) {
  EXPECT_EQ(java_class_name("java/lang/String"), "java.lang.String");
  EXPECT_EQ(java_class_name("[B"), "byte[]");
  EXPECT_EQ(java_class_name("[[I"), "int[][]");
  EXPECT_EQ(java_class_name("[Ljava/lang/Object;"), "java.lang.Object[]");
  EXPECT_EQ(java_class_name("[[LHeapFixture$Marker;"), "HeapFixture$Marker[][]");
  EXPECT_EQ(java_class_name("HeapFixture$Marker"), "HeapFixture$Marker");
  EXPECT_EQ(java_class_name("[Q"), "[Q");  // unknown descriptor kept as is
  EXPECT_EQ(java_class_name("[L;"), "[L;");
}

// Hidden classes (lambdas, method handles) as Klass::external_name() and so
// jcmd GC.class_histogram print them: the last '+' of HotSpot's name, before
// the suffix ClassFileParser appends, printed as '/'; nothing else changes.
TEST(JavaNames, HiddenClassesAsJcmdPrintsThem) {
  EXPECT_EQ(java_class_name("Foo$$Lambda$122+0x00007f0001234567", true), "Foo$$Lambda$122/0x00007f0001234567");
  EXPECT_EQ(java_class_name("java/lang/invoke/LambdaForm$MH+0x0000000801001400", true),
            "java.lang.invoke.LambdaForm$MH/0x0000000801001400");
  EXPECT_EQ(java_class_name("java/util/regex/Pattern$$Lambda$19+0x800000029", true),  // archived (CDS dump)
            "java.util.regex.Pattern$$Lambda$19/0x800000029");
  EXPECT_EQ(java_class_name("a/B+C$$Lambda+0x00007f0001234567", true), "a.B+C$$Lambda/0x00007f0001234567");
  EXPECT_EQ(java_class_name("[[Lp/Foo$$Lambda+0x00007f0001234567;", true), "p.Foo$$Lambda/0x00007f0001234567[][]");
  // Not hidden: '+' is legal in a class name and is kept.
  EXPECT_EQ(java_class_name("Foo$$Lambda$122+0x00007f0001234567"), "Foo$$Lambda$122+0x00007f0001234567");
  EXPECT_EQ(java_class_name("a/B+C"), "a.B+C");
  EXPECT_EQ(java_class_name("[La/B+C;"), "a.B+C[]");
}

// Which names are hidden classes' (VMStructs has no hidden flag): HotSpot's
// suffix, "+0x" and the klass's own address in 16 hex digits (an array: its
// bottom klass's), or, for a klass in a CDS archive, what the dump named it.
TEST(JavaNames, HiddenClassIsToldByItsOwnAddress) {
  const uint64_t k = 0x00007f0001234567;
  EXPECT_TRUE(hotspot_hidden_class_name("Foo$$Lambda$122+0x00007f0001234567", k, false));
  EXPECT_TRUE(hotspot_hidden_class_name("a/B+C$$Lambda+0x00007f0001234567", k, false));
  EXPECT_TRUE(hotspot_hidden_class_name("[Lp/Foo$$Lambda+0x00007f0001234567;", k, false));
  EXPECT_TRUE(hotspot_hidden_class_name("[[Lp/Foo$$Lambda+0x00007f0001234567;", k, false));
  // Another klass's address, or not the 16 digits of INTPTR_FORMAT.
  EXPECT_FALSE(hotspot_hidden_class_name("Foo$$Lambda$122+0x00007f0001234567", k + 8, false));
  EXPECT_FALSE(hotspot_hidden_class_name("Foo$$Lambda$122+0x7f0001234567", k, false));
  EXPECT_FALSE(hotspot_hidden_class_name("Foo$$Lambda$122+0x00007F0001234567", k, false));
  EXPECT_FALSE(hotspot_hidden_class_name("Foo+0x00007f0001234567", 0, false));
  // Archived: the static dump's counter, or a dynamic dump's address.
  EXPECT_TRUE(hotspot_hidden_class_name("java/util/regex/Pattern$$Lambda$19+0x800000029", k, true));
  EXPECT_TRUE(hotspot_hidden_class_name("Foo$$Lambda+0x0000000800c01000", k, true));
  EXPECT_TRUE(hotspot_hidden_class_name("[LFoo$$Lambda+0x800000029;", k, true));
  EXPECT_FALSE(hotspot_hidden_class_name("java/util/regex/Pattern$$Lambda$19+0x800000029", k, false));
  // Ordinary names with a '+', archived or not.
  for (bool archived : {false, true}) {
    for (const char* n : {"Foo", "Foo+Bar", "a/B+C", "Foo+", "Foo+0x", "+0x00007f0001234567", "Foo+0x12g4",
                          "Foo+0x00007f0001234567+1", "Foo+0x00007f00012345670", "[I", "[LFoo+0x1", "[L+0x1;",
                          "Foo+0X00007f0001234567", "Foo+ 0x1"})
      EXPECT_FALSE(hotspot_hidden_class_name(n, k, archived)) << n << " archived " << archived;
  }
}

// --- G1 heap ----------------------------------------------------------------

namespace {

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

std::map<std::string, std::pair<uint64_t, uint64_t>> classes(const JavaHeapWalk& r) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> m;
  for (const auto& c : r.classes) m[c.name] = {c.objects, c.bytes};
  return m;
}

}  // namespace

TEST(G1Heap, CountsObjectsArraysAndHumongous) {
  FakeG1 h;
  const uint32_t marker = h.klass("Fixture$Marker", 24), bytes = h.klass("[B", FakeG1::array_lh(false, 0)),
                 objs = h.klass("[Ljava/lang/Object;", FakeG1::array_lh(true, 2));
  const uint64_t eden = h.region(2), old = h.region(8);
  for (int i = 0; i < 1000; ++i) h.obj(i % 2 ? eden : old, marker, 24);
  for (uint32_t len = 0; len < 50; ++len) h.array(old, bytes, len, 0), h.array(eden, objs, len, 2);
  const uint64_t hum = h.region(4);
  h.region(5);                              // continues humongous: skipped
  h.array(hum, bytes, 1500000, 0);          // spans into the next region
  h.set_top(hum, h.bottom(hum) + FakeG1::kGrain);  // top at region end
  h.region(0);                              // free: skipped
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  auto m = classes(r);
  EXPECT_EQ(m["Fixture$Marker"], std::make_pair(uint64_t{1000}, uint64_t{24000}));
  uint64_t byte_bytes = (16 + 1500000 + 7) & ~7ull, obj_bytes = 0;
  for (uint64_t len = 0; len < 50; ++len) byte_bytes += (16 + len + 7) & ~7ull, obj_bytes += (16 + len * 4 + 7) & ~7ull;
  EXPECT_EQ(m["byte[]"], std::make_pair(uint64_t{51}, byte_bytes));
  EXPECT_EQ(m["java.lang.Object[]"], std::make_pair(uint64_t{50}, obj_bytes));
  EXPECT_EQ(r.unparsed_bytes, 0u);
  EXPECT_DOUBLE_EQ(r.coverage, 1.0);
}

// Unformatted memory inside a region: a live TLAB's tail is skipped as a
// hole; garbage elsewhere is skipped by resynchronising on the next object
// of a known class, and reported as unparsed.
TEST(G1Heap, TlabTailsAndGarbageAreSkipped) {
  FakeG1 h;
  const uint32_t marker = h.klass("Marker", 24), other = h.klass("Other", 32);
  const uint64_t r1 = h.region(2);
  for (int i = 0; i < 10; ++i) h.obj(r1, marker, 24);
  const uint64_t hole = h.top(r1);
  std::memset(reinterpret_cast<void*>(hole), 0xAB, 4096);  // unformatted TLAB tail
  h.set_top(r1, hole + 4096);
  h.L.holes = {{hole, hole + 4096}};
  for (int i = 0; i < 10; ++i) h.obj(r1, other, 32);
  const uint64_t junk = h.top(r1);
  std::memset(reinterpret_cast<void*>(junk), 0, 200);  // an object being published: zero klass
  h.set_top(r1, junk + 200);
  for (int i = 0; i < 10; ++i) h.obj(r1, marker, 24);
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  auto m = classes(r);
  EXPECT_EQ(m["Marker"].first, 20u);
  EXPECT_EQ(m["Other"].first, 10u);
  EXPECT_EQ(r.unparsed_bytes, 200u);
  EXPECT_LT(r.coverage, 1.0);
  EXPECT_GT(r.coverage, 0.9);
}

// Runs of objects of classes already met are sized without a lookup per
// object (Walker::walk_known); every rule of the general step still holds
// inside such a run: a TLAB hole full of stale objects of a known class is
// skipped, a known array class whose length runs past the top is unparsed,
// and mirrors (sized by a field) and fillers (not counted as objects) are
// told apart even after a long run of one class. The headers cross the
// test cache's 4 KiB chunks at every alignment.
TEST(G1Heap, RunsOfKnownClassesKeepEveryRule) {
  FakeG1 h;
  const uint32_t marker = h.klass("Marker", 24), bytes = h.klass("[B", FakeG1::array_lh(false, 0)),
                 mirror = h.klass("java/lang/Class", 96), filler = h.klass("jdk/internal/vm/FillerObject", 16);
  const uint64_t r1 = h.region(8);
  uint64_t mirror_bytes = 0;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 500; ++i) h.obj(r1, marker, 24), h.array(r1, bytes, static_cast<uint32_t>(i % 40), 0);
    // A mirror whose size (in words, at mirror_size_offset) is not its klass's.
    const uint64_t words = 14 + static_cast<uint64_t>(round);
    const uint64_t m = h.obj(r1, mirror, words * 8);
    Arena::put<int32_t>(m + h.L.mirror_size_offset, static_cast<int32_t>(words));
    mirror_bytes += words * 8;
    h.obj(r1, filler, 16);
  }
  for (int i = 0; i < 10; ++i) h.obj(r1, marker, 24);  // a run that reaches the hole
  // A TLAB's unformatted tail that happens to hold stale Marker objects.
  const uint64_t hole = h.top(r1);
  for (int i = 0; i < 100; ++i) h.obj(r1, marker, 24);
  h.L.holes = {{hole, h.top(r1)}};
  for (int i = 0; i < 10; ++i) h.obj(r1, marker, 24);
  // The region ends in a byte[] whose length runs past its top.
  const uint64_t last = h.array(r1, bytes, 4096, 0);
  h.set_top(r1, last + 64);
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  auto m = classes(r);
  uint64_t byte_bytes = 0;
  for (int i = 0; i < 500; ++i) byte_bytes += (16 + static_cast<uint64_t>(i % 40) + 7) & ~7ull;
  EXPECT_EQ(m["Marker"], std::make_pair(uint64_t{1520}, uint64_t{1520 * 24}));
  EXPECT_EQ(m["byte[]"], std::make_pair(uint64_t{1500}, 3 * byte_bytes));
  EXPECT_EQ(m["java.lang.Class"], std::make_pair(uint64_t{3}, mirror_bytes));
  EXPECT_EQ(m.count("jdk.internal.vm.FillerObject"), 0u);
  EXPECT_EQ(r.filler_bytes, 3u * 16);
  EXPECT_EQ(r.unparsed_bytes, 64u);
}

TEST(G1Heap, CorruptRegionEntriesAreSkippedNotFatal) {
  FakeG1 h;
  const uint32_t marker = h.klass("Marker", 24);
  const uint64_t good = h.region(2);
  for (int i = 0; i < 5; ++i) h.obj(good, marker, 24);
  const uint64_t bad = h.region(2);
  h.set_top(bad, 1);  // top below bottom
  const uint64_t wild = h.region(8);
  h.obj(wild, 0x7fffff00, 24);        // a klass that does not exist
  h.obj(wild, marker, 24);
  auto r = h.walk();
  EXPECT_EQ(classes(r)["Marker"].first, 6u) << r.reason;
  EXPECT_GT(r.unparsed_bytes, 0u);
}

TEST(G1Heap, SampledAboveTheBudgetAndDeadline) {
  FakeG1 h;
  const uint32_t marker = h.klass("Marker", 64);
  for (int i = 0; i < 8; ++i) {
    const uint64_t r = h.region(8);
    for (int j = 0; j < 1000; ++j) h.obj(r, marker, 64);
  }
  auto r = h.walk(2 * 64000);  // budget for two of the eight regions
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
  EXPECT_EQ(r.sample_stride, 4u);
  EXPECT_NE(r.reason.find("sampled walk: 1 of every 4 64 KiB windows"), std::string::npos) << r.reason;
  EXPECT_EQ(classes(r)["Marker"].first, 8000u);  // 2 regions read, scaled by 4
  EXPECT_NEAR(r.coverage, 0.25, 0.01);
  r = h.walk(1ull << 30, 0);
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
  EXPECT_NE(r.reason.find("deadline"), std::string::npos) << r.reason;
}

TEST(G1Heap, ImplausibleTableFails) {
  FakeG1 h;
  auto r = h.walk();  // no regions in use
  EXPECT_EQ(r.status, SnapshotStatus::kFailed);
  h.L.region_count = 0;
  JavaHeapLimits lim;
  RemoteMemory mem(getpid());
  ChunkCache c(mem, read_maps(getpid()));
  Deadline d{std::chrono::milliseconds(1000)};
  h.L.region_table = 0;
  r = walk_java_heap(c, h.L, lim, d);
  EXPECT_EQ(r.status, SnapshotStatus::kFailed);
  EXPECT_NE(r.reason.find("implausible"), std::string::npos);
}

// JDK 8 describes no region types: a region whose first object is half a
// region or more is humongous, the regions that object covers are its
// continues-humongous ones (JDK 8 sets a series' first region's end and
// top to the series' end), and each region counts at most GrainBytes.
TEST(G1Heap, RegionsWithoutTypesAreToldByTheirObjects) {
  FakeG1 h;
  h.L.region_types = false;
  const uint32_t marker = h.klass("Marker", 24), bytes = h.klass("[B", FakeG1::array_lh(false, 0));
  const uint64_t first = h.region(0);
  for (int i = 0; i < 100; ++i) h.obj(first, marker, 24);
  h.region(0);  // empty (free): not a region in use
  auto s = h.series(3);
  const uint32_t big = 2 * FakeG1::kGrain + 4096;
  h.array(s[0], bytes, big, 0);
  const uint64_t big_bytes = (16 + big + 7) & ~7ull;
  h.set_end(s[0], h.bottom(s[0]) + 3 * FakeG1::kGrain);  // JDK 8: the series' end
  h.set_top(s[1], h.bottom(s[1]) + FakeG1::kGrain);
  h.set_top(s[2], h.bottom(s[0]) + big_bytes);
  const uint64_t one = h.region(0);
  const uint32_t half = FakeG1::kGrain / 2;
  h.array(one, bytes, half, 0);  // humongous in one region
  const uint64_t last = h.region(0);
  for (int i = 0; i < 50; ++i) h.obj(last, marker, 24);
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  auto m = classes(r);
  EXPECT_EQ(m["Marker"], std::make_pair(uint64_t{150}, uint64_t{150 * 24}));
  const uint64_t half_bytes = (16 + half + 7) & ~7ull;
  EXPECT_EQ(m["byte[]"], std::make_pair(uint64_t{2}, big_bytes + half_bytes));
  EXPECT_EQ(r.humongous_objects, 2u);
  EXPECT_EQ(r.humongous_bytes, big_bytes + half_bytes);
  EXPECT_EQ(r.regions, 6u);
  EXPECT_EQ(r.used_bytes, 150 * 24 + big_bytes + half_bytes);
  EXPECT_EQ(r.unparsed_bytes, 0u);
  EXPECT_DOUBLE_EQ(r.coverage, 1.0);
}

// Without region types, a humongous object is one of half a region or more
// that ends at its region's top: a stale header of one at the bottom of a
// region in use for allocation (its top elsewhere) is not counted.
TEST(G1Heap, RegionsWithoutTypesNeedTheHumongousObjectToEndAtTheTop) {
  FakeG1 h;
  h.L.region_types = false;
  const uint32_t marker = h.klass("Marker", 24), bytes = h.klass("[B", FakeG1::array_lh(false, 0));
  const uint64_t reused = h.region(0);
  h.array(reused, bytes, FakeG1::kGrain / 2, 0);
  h.set_top(reused, h.bottom(reused) + 4096);
  const uint64_t next = h.region(0);
  for (int i = 0; i < 10; ++i) h.obj(next, marker, 24);
  auto r = h.walk();
  EXPECT_EQ(r.humongous_objects, 0u);
  EXPECT_EQ(classes(r).count("byte[]"), 0u) << r.reason;
  EXPECT_EQ(classes(r)["Marker"].first, 10u);
  EXPECT_EQ(r.unparsed_bytes, 4096u);
}

// Without region types a region's end may lie past GrainBytes (a humongous
// series' first region); one whose first object is not humongous is still
// walked for GrainBytes only, and one claiming to end past the whole table
// is not a region.
TEST(G1Heap, RegionsWithoutTypesAreNeverWalkedPastTheGrain) {
  FakeG1 h;
  h.L.region_types = false;
  const uint32_t marker = h.klass("Marker", 24);
  auto s = h.series(4);
  const uint64_t per_region = FakeG1::kGrain / 24;
  for (uint64_t i = 0; i < 4 * per_region; ++i) h.obj(s[0], marker, 24);
  h.set_end(s[0], h.top(s[0]));  // 4 regions' worth claimed by the first
  auto wide = h.region(0);
  for (int i = 0; i < 10; ++i) h.obj(wide, marker, 24);
  h.set_end(wide, h.bottom(wide) + (uint64_t{1} << 40));
  h.set_top(wide, h.bottom(wide) + (uint64_t{1} << 40));
  auto r = h.walk();
  EXPECT_EQ(classes(r)["Marker"].first, per_region) << r.reason;
  EXPECT_EQ(r.regions, 1u);
  EXPECT_LE(r.used_bytes, FakeG1::kGrain);
}

// --- Many classes: only the top ones named; the klass cap --------------------

namespace {

// The walk's classes as the collector turns them into entries, and the
// same list cut by Snapshot::sort_and_truncate itself: the reference order.
Snapshot as_snapshot(const JavaHeapWalk& r, size_t max_entries) {
  Snapshot s;
  for (const auto& c : r.classes) s.entries.push_back({"object_type", c.name, c.bytes, c.objects, {}, {}});
  s.sort_and_truncate(max_entries);
  return s;
}

std::vector<std::tuple<std::string, uint64_t, uint64_t>> rows(const JavaHeapWalk& r) {
  std::vector<std::tuple<std::string, uint64_t, uint64_t>> v;
  for (const auto& c : r.classes) v.emplace_back(c.name, c.bytes, c.objects);
  return v;
}
std::vector<std::tuple<std::string, uint64_t, uint64_t>> rows(const Snapshot& s) {
  std::vector<std::tuple<std::string, uint64_t, uint64_t>> v;
  for (const auto& e : s.entries) v.emplace_back(e.name, e.bytes, e.objects);
  return v;
}

}  // namespace

// 600 classes, many tied on (bytes, objects) and met out of name order: the
// walk names only the top N, and they are exactly the first N of the whole
// list as Snapshot::sort_and_truncate orders and cuts it, at every N (the
// boundary falling inside runs of ties); class_count counts them all.
TEST(G1Heap, OnlyTheTopClassesAreNamedExactlyAsSortAndTruncateWould) {
  FakeG1 h;
  constexpr int kClasses = 600;
  uint64_t hr = h.region(2);
  for (int i = 0; i < kClasses; ++i) {
    // Names in an order unrelated to the counts; 5 sizes x 4 counts: ~30 classes per tie.
    const int id = (i * 7919) % kClasses;
    const uint32_t k = h.klass("C" + std::to_string(1000 + id), 16 + 8 * (i % 5));
    if (h.top(hr) + 4 * 48 > h.bottom(hr) + FakeG1::kGrain) hr = h.region(2);
    for (int j = 0; j <= i % 4; ++j) h.obj(hr, k, 16 + 8 * (i % 5));
  }
  auto all = h.walk();
  ASSERT_EQ(all.status, SnapshotStatus::kComplete) << all.reason;
  ASSERT_EQ(all.class_count, uint64_t{kClasses});
  ASSERT_EQ(all.classes.size(), size_t{kClasses});
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{29}, size_t{30}, size_t{31}, size_t{64}, size_t{599},
                   size_t{600}, size_t{601}}) {
    h.limits.max_entries = n;
    auto top = h.walk();
    ASSERT_EQ(top.status, SnapshotStatus::kComplete) << top.reason;
    EXPECT_EQ(top.class_count, uint64_t{kClasses}) << n;
    const Snapshot want = as_snapshot(all, n);
    EXPECT_EQ(rows(top), rows(want)) << "top " << n;
    // What the collector reports as output_truncated.
    EXPECT_EQ(top.class_count > top.classes.size(), want.output_truncated) << n;
  }
}

// The boundary rule by hand: the 5th entry falls among 40 classes tied on
// bytes and objects; the first of them by name fill the last three places,
// whatever order they were met in.
TEST(G1Heap, ClassesTiedAtTheLastEntryAreChosenByName) {
  FakeG1 h;
  const uint64_t hr = h.region(2);
  auto add = [&](const std::string& name, uint64_t size, int count) {
    const uint32_t k = h.klass(name, static_cast<int32_t>(size));
    for (int j = 0; j < count; ++j) h.obj(hr, k, size);
  };
  add("Small", 16, 1);
  for (int i = 0; i < 40; ++i) {
    const int id = (i * 17 + 11) % 40;  // met out of name order
    add("Tie$" + std::string(id < 10 ? "0" : "") + std::to_string(id), 32, 3);
    if (i == 20) add("Big1", 64, 3);
  }
  add("Big2", 64, 4);
  h.limits.max_entries = 5;
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  EXPECT_EQ(r.class_count, 43u);
  using Row = std::tuple<std::string, uint64_t, uint64_t>;
  EXPECT_EQ(rows(r), (std::vector<Row>{{"Big2", 256, 4}, {"Big1", 192, 3}, {"Tie$00", 96, 3}, {"Tie$01", 96, 3},
                                       {"Tie$02", 96, 3}}));
}

// Hidden classes are named as jcmd names them: the walk tells them by their
// own address in HotSpot's suffix (an array's, by its bottom klass's), or by
// lying in a CDS archive; a '+' in any other class's name is kept.
TEST(G1Heap, HiddenClassesAreNamedAsJcmdNamesThem) {
  for (bool archive : {false, true}) {
    FakeG1 h;
    h.L.objarray_bottom_klass = 200;
    auto hex = [](uint64_t v) {
      char b[24];
      std::snprintf(b, sizeof b, "0x%016llx", static_cast<unsigned long long>(v));
      return std::string(b);
    };
    const uint64_t hr = h.region(2);
    const std::string lambda = "p/Foo$$Lambda+" + hex(h.next_klass());
    const uint32_t lam = h.klass(lambda, 16);
    const uint32_t lam_array = h.klass("[L" + lambda + ";", FakeG1::array_lh(true, 2));
    Arena::put<uint64_t>(h.klass_area() + lam_array + 200, h.klass_area() + lam);
    // Named as if hidden, but with another klass's address: ordinary.
    const uint32_t other = h.klass("p/Other+" + hex(h.klass_area() + lam), 24);
    const uint32_t other_array = h.klass("[Lp/Other+" + hex(h.klass_area() + lam) + ";", FakeG1::array_lh(true, 2));
    Arena::put<uint64_t>(h.klass_area() + other_array + 200, h.klass_area() + other);
    // A static CDS dump's counter: hidden only in an archive.
    const uint32_t archived = h.klass("p/Bar$$Lambda+0x800000029", 32);
    const uint32_t plus = h.klass("p/A+B", 40);
    if (archive) h.L.archive_ranges = {{h.klass_area(), h.klass_area() + FakeG1::kKlassArea}};
    for (uint32_t k : {lam, other, archived, plus}) h.obj(hr, k, k == lam ? 16 : k == other ? 24 : k == archived ? 32 : 40);
    h.array(hr, lam_array, 3, 2);
    h.array(hr, other_array, 5, 2);
    auto r = h.walk();
    ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
    auto m = classes(r);
    const std::string shown = "p.Foo$$Lambda/" + hex(h.klass_area() + lam);
    EXPECT_EQ(m[shown], std::make_pair(uint64_t{1}, uint64_t{16})) << archive;
    EXPECT_EQ(m[shown + "[]"], std::make_pair(uint64_t{1}, uint64_t{32})) << archive;
    EXPECT_EQ(m["p.A+B"], std::make_pair(uint64_t{1}, uint64_t{40})) << archive;
    EXPECT_EQ(m[archive ? "p.Bar$$Lambda/0x800000029" : "p.Bar$$Lambda+0x800000029"],
              std::make_pair(uint64_t{1}, uint64_t{32}));
    // In the archive any suffix of the dump's form is the dump's name.
    const std::string o = "p.Other" + std::string(archive ? "/" : "+") + hex(h.klass_area() + lam);
    EXPECT_EQ(m[o], std::make_pair(uint64_t{1}, uint64_t{24})) << archive;
    EXPECT_EQ(m[o + "[]"], std::make_pair(uint64_t{1}, uint64_t{40})) << archive;
    EXPECT_EQ(m.size(), 6u) << archive;
  }
}

// JDK 9-15 name a VM-anonymous class (a lambda's) by its Symbol plus "/" and
// the InstanceKlass's address, which is how jcmd prints it; the flag is
// InstanceKlass::_misc_flags' _misc_is_anonymous bit. Arrays of one keep
// the plain name (Klass::external_name() adds the address to instance
// classes only).
TEST(G1Heap, AnonymousClassesAreNamedWithTheirAddress) {
  FakeG1 h;
  h.L.instance_misc_flags = 208, h.L.misc_is_anonymous = 32;
  const uint64_t hr = h.region(2);
  const uint32_t lam = h.klass("p/Foo$$Lambda$14", 16), plain = h.klass("p/Plain", 24);
  const uint32_t lam_array = h.klass("[Lp/Foo$$Lambda$14;", FakeG1::array_lh(true, 2));
  Arena::put<uint16_t>(h.klass_area() + lam + 208, 32 | 4);
  Arena::put<uint16_t>(h.klass_area() + plain + 208, 4 | 8);
  Arena::put<uint16_t>(h.klass_area() + lam_array + 208, 32);  // not an instance klass: not read
  h.obj(hr, lam, 16), h.obj(hr, plain, 24);
  h.array(hr, lam_array, 3, 2);
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  char name[80];
  std::snprintf(name, sizeof name, "p.Foo$$Lambda$14/0x%016llx",
                static_cast<unsigned long long>(h.klass_area() + lam));
  auto m = classes(r);
  EXPECT_EQ(m[name], std::make_pair(uint64_t{1}, uint64_t{16}));
  EXPECT_EQ(m["p.Plain"], std::make_pair(uint64_t{1}, uint64_t{24}));
  EXPECT_EQ(m["p.Foo$$Lambda$14[]"], std::make_pair(uint64_t{1}, uint64_t{32}));
  EXPECT_EQ(m.size(), 3u);
}

// More distinct klasses than the cap (4 here; 2^20 in a real walk): the
// classes past it are not dropped silently; their objects are counted
// together, and the walk is partial naming the cap.
TEST(G1Heap, KlassCapReachedIsPartialAndCountsTheClassesPastIt) {
  FakeG1 h;
  const uint64_t hr = h.region(2);
  std::vector<uint32_t> k;
  for (const char* name : {"A", "B", "C", "D"}) k.push_back(h.klass(name, 24));
  const uint32_t e = h.klass("E", 32), f = h.klass("F", 40);
  for (uint32_t x : k)
    for (int j = 0; j < 10; ++j) h.obj(hr, x, 24);
  for (int j = 0; j < 5; ++j) h.obj(hr, e, 32), h.obj(hr, f, 40);
  for (int j = 0; j < 2; ++j) h.obj(hr, f, 40);
  for (int j = 0; j < 3; ++j) h.obj(hr, k[0], 24);  // a class inside the cap, met again after it filled
  h.limits.max_klasses = 4;
  auto r = h.walk();
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
  EXPECT_NE(r.reason.find("klass cap"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("more than 4 distinct klasses"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("12 objects (440 bytes)"), std::string::npos) << r.reason;
  EXPECT_TRUE(r.klass_cap_reached);
  EXPECT_EQ(r.past_cap_objects, 12u);
  EXPECT_EQ(r.past_cap_bytes, 5u * 32 + 7 * 40);
  EXPECT_EQ(r.class_count, 4u);
  auto m = classes(r);
  EXPECT_EQ(m.size(), 4u);
  EXPECT_EQ(m["A"], std::make_pair(uint64_t{13}, uint64_t{13 * 24}));
  EXPECT_EQ(m["D"], std::make_pair(uint64_t{10}, uint64_t{240}));
  EXPECT_EQ(r.objects, 55u);  // every object parsed and counted: none of them skipped as garbage
  EXPECT_EQ(r.unparsed_bytes, 0u);
  // Without the cap: complete, every class by name.
  h.limits = JavaHeapLimits{};
  r = h.walk();
  EXPECT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  EXPECT_FALSE(r.klass_cap_reached);
  EXPECT_EQ(classes(r)["F"], std::make_pair(uint64_t{7}, uint64_t{280}));
  // A cap asked above the walk's own is the walk's own.
  h.limits.max_klasses = SIZE_MAX;
  EXPECT_EQ(h.walk().status, SnapshotStatus::kComplete);
}

// In a sampled walk the objects past the cap are scaled like every class's.
TEST(G1Heap, ObjectsPastTheKlassCapAreScaledInASampledWalk) {
  FakeG1 h;
  const uint32_t marker = h.klass("Marker", 64), other = h.klass("Other", 64);
  for (int i = 0; i < 8; ++i) {
    const uint64_t r = h.region(8);
    for (int j = 0; j < 500; ++j) h.obj(r, marker, 64);
    for (int j = 0; j < 500; ++j) h.obj(r, other, 64);
  }
  h.limits.max_klasses = 1;
  auto r = h.walk(2 * 64000);  // budget for two of the eight regions
  EXPECT_EQ(r.sample_stride, 4u);
  EXPECT_NE(r.reason.find("sampled walk"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("klass cap reached"), std::string::npos) << r.reason;
  EXPECT_EQ(classes(r)["Marker"].first, 4000u);
  EXPECT_EQ(r.past_cap_objects, 4000u);
  EXPECT_EQ(r.past_cap_bytes, 4000u * 64);
}

namespace {

// A heap whose region table, region record, two Klasses and their Symbols
// share one 4 KiB page P, and whose one region spans 16 pages: Victim's
// objects first, then Keeper's. A test reads P into a two-chunk cache, then
// changes P: the walk meets both klasses in P as cached (before the region's
// second page evicts it), and reads P afresh for their names at the end,
// the way a class unloaded during the walk reads by then.
struct OnePageHeap {
  static constexpr uint64_t kRecord = 256, kVictim = 1024, kKeeper = 1536, kVictimSym = 2048, kKeeperSym = 2560;
  OnePageHeap() {
    page = a.alloc(4096, 4096);
    heap = a.alloc(16 * 4096, 4096);
    auto klass = [&](uint64_t k, uint64_t sym, const std::string& name, int32_t lh) {
      Arena::put<int32_t>(page + k + 8, lh);
      Arena::put<uint64_t>(page + k + 24, page + sym);
      Arena::put<uint16_t>(page + sym + 4, static_cast<uint16_t>(name.size()));
      std::memcpy(reinterpret_cast<void*>(page + sym + 6), name.data(), name.size());
    };
    klass(kVictim, kVictimSym, "Victim", 24);
    klass(kKeeper, kKeeperSym, "Keeper", 32);
    uint64_t top = heap;
    auto obj = [&](uint32_t nk, uint64_t size) {
      Arena::put<uint64_t>(top, 1), Arena::put<uint32_t>(top + 8, nk);
      top += size;
    };
    for (int i = 0; i < 10; ++i) obj(kVictim, 24);
    while (top + 32 <= heap + 16 * 4096) obj(kKeeper, 32), ++keepers;
    Arena::put(page, page + kRecord);  // the region table: one region, then an uncommitted slot
    Arena::put(page + kRecord + 0, heap), Arena::put(page + kRecord + 8, heap + FakeG1::kGrain);
    Arena::put(page + kRecord + 16, top), Arena::put<int32_t>(page + kRecord + 24, 2);
    L.region_table = page, L.region_count = 2;
    L.grain_bytes = FakeG1::kGrain;
    L.region_bottom = 0, L.region_end = 8, L.region_top = 16, L.region_tag = 24;
    L.tag_free = 0, L.tag_starts_humongous = 4, L.tag_continues_humongous = 5;
    L.narrow_klass_base = page, L.narrow_klass_shift = 0;
    L.mirror_size_offset = 16;
  }
  // Walks through a two-chunk cache that read P before `change` ran.
  template <typename Change>
  JavaHeapWalk walk(Change change) {
    RemoteMemory mem(getpid());
    ChunkCache c(mem, read_maps(getpid()), 4096, 2 * 4096);
    uint8_t b = 0;
    EXPECT_TRUE(c.read(page, &b, 1));
    change();
    Deadline d{std::chrono::milliseconds(5000)};
    return walk_java_heap(c, L, JavaHeapLimits{}, d);
  }
  std::string placeholder(uint64_t klass) const {
    char buf[80];
    std::snprintf(buf, sizeof buf, "<unreadable class name: Klass 0x%llx>", static_cast<unsigned long long>(page + klass));
    return buf;
  }
  Arena a;
  uint64_t page = 0, heap = 0;
  uint64_t keepers = 0;
  JavaHeapLayout L;
};

}  // namespace

// A class whose name no longer reads at the end as it did when the walk met
// it (unloaded, its Klass reused by another class, or unmapped) keeps its
// counts under a placeholder naming the Klass; it is not dropped, and not
// given the other class's name.
TEST(G1Heap, ClassWhoseNameNoLongerReadsGetsAPlaceholder) {
  {
    OnePageHeap h;
    auto r = h.walk([&] {});  // unchanged: the names as read at first sight
    ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
    auto m = classes(r);
    EXPECT_EQ(m["Victim"], std::make_pair(uint64_t{10}, uint64_t{240}));
    EXPECT_EQ(m["Keeper"], std::make_pair(h.keepers, h.keepers * 32));
  }
  {
    // Victim's Symbol now spells another class's name.
    OnePageHeap h;
    auto r = h.walk([&] {
      const std::string other = "Another";
      Arena::put<uint16_t>(h.page + OnePageHeap::kVictimSym + 4, static_cast<uint16_t>(other.size()));
      std::memcpy(reinterpret_cast<void*>(h.page + OnePageHeap::kVictimSym + 6), other.data(), other.size());
    });
    ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
    EXPECT_EQ(r.class_count, 2u);
    auto m = classes(r);
    EXPECT_EQ(m.count("Another"), 0u);
    EXPECT_EQ(m.count("Victim"), 0u);
    EXPECT_EQ(m[h.placeholder(OnePageHeap::kVictim)], std::make_pair(uint64_t{10}, uint64_t{240}));
    EXPECT_EQ(m["Keeper"], std::make_pair(h.keepers, h.keepers * 32));
  }
  {
    // The page cannot be read any more: both names are placeholders.
    OnePageHeap h;
    auto r = h.walk([&] { ASSERT_EQ(mprotect(reinterpret_cast<void*>(h.page), 4096, PROT_NONE), 0); });
    mprotect(reinterpret_cast<void*>(h.page), 4096, PROT_READ | PROT_WRITE);
    EXPECT_EQ(r.class_count, 2u);
    auto m = classes(r);
    EXPECT_EQ(m[h.placeholder(OnePageHeap::kVictim)], std::make_pair(uint64_t{10}, uint64_t{240}));
    EXPECT_EQ(m[h.placeholder(OnePageHeap::kKeeper)], std::make_pair(h.keepers, h.keepers * 32));
  }
}

// A walk that used up the read budget still names its top classes when the
// caller leaves room for the names (JavaHeapLimits::name_read_limit, as the
// collector does); without it they are placeholders, not dropped.
TEST(G1Heap, NamesAreReadPastAnExhaustedWalkBudget) {
  FakeG1 h;
  const uint32_t marker = h.klass("Marker", 32);
  const uint64_t hr = h.region(2);
  for (int i = 0; i < 30000; ++i) h.obj(hr, marker, 32);  // ~940 KiB: far past the budget below
  h.table();
  for (bool room : {false, true}) {
    RemoteMemory mem(getpid());
    ChunkCache c(mem, read_maps(getpid()), 4096, 2 * 4096);
    c.set_read_limit(mem.bytes_read() + (128 << 10));
    h.limits.name_read_limit = room ? mem.bytes_read() + (16 << 20) : 0;
    auto r = h.walk_with(c);
    EXPECT_EQ(r.status, SnapshotStatus::kPartial) << room;
    EXPECT_NE(r.reason.find("read budget"), std::string::npos) << r.reason;
    ASSERT_EQ(r.classes.size(), 1u) << room;
    EXPECT_GT(r.classes[0].objects, 1000u);
    EXPECT_LT(r.classes[0].objects, 30000u);
    if (room)
      EXPECT_EQ(r.classes[0].name, "Marker");
    else
      EXPECT_EQ(r.classes[0].name.rfind("<unreadable class name: Klass 0x", 0), 0u) << r.classes[0].name;
  }
}

// --- Offsets and sizes from a hostile target (the security issue) ----------

// Klass::_name comes from the target: 200 bytes into the Klass is a legal
// place for it (Klass is bigger than that), and the walk must read the klass
// record at that size; it once read it into a 32-byte stack buffer.
TEST(G1Heap, KlassFieldsAnywhereInsideTheKlassAreRead) {
  FakeG1 h;
  h.L.klass_name = 200, h.L.klass_layout_helper = 240;
  const uint32_t marker = h.klass("Marker", 24);
  const uint64_t r1 = h.region(2);
  for (int i = 0; i < 10; ++i) h.obj(r1, marker, 24);
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  EXPECT_EQ(classes(r)["Marker"], std::make_pair(uint64_t{10}, uint64_t{240}));
}

// The HeapRegion fields may lie in any order: the region record is read at
// the size of its farthest field (it was sized from _tag and _top only, and
// _bottom/_end were read past it).
TEST(G1Heap, RegionFieldsAreReadInsideTheRecord) {
  FakeG1 h;
  h.L.region_tag = 0, h.L.region_top = 8, h.L.region_bottom = 200, h.L.region_end = 208;
  const uint32_t marker = h.klass("Marker", 24);
  const uint64_t r1 = h.region(2);
  for (int i = 0; i < 10; ++i) h.obj(r1, marker, 24);
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  EXPECT_EQ(classes(r)["Marker"].first, 10u);
  EXPECT_EQ(r.regions, 1u);
}

// Offsets no HotSpot struct could hold are refused before the walk reads
// anything, with the field named.
TEST(G1Heap, LayoutOffsetsBeyondTheCapsAreRefused) {
  const std::pair<const char*, void (*)(JavaHeapLayout&)> cases[] = {
      {"Klass::_name", [](JavaHeapLayout& L) { L.klass_name = 0xfffffff0u; }},
      {"Klass::_layout_helper", [](JavaHeapLayout& L) { L.klass_layout_helper = 1u << 20; }},
      {"HeapRegion::_bottom", [](JavaHeapLayout& L) { L.region_bottom = 0xfffffffcu; }},
      {"HeapRegion::_end", [](JavaHeapLayout& L) { L.region_end = 1u << 20; }},
      {"HeapRegionType::_tag", [](JavaHeapLayout& L) { L.region_tag = 0xfffffffeu; }},
      {"Symbol::_length", [](JavaHeapLayout& L) { L.symbol_length = 0xffffffffu; }},
      {"markWord::klass_shift", [](JavaHeapLayout& L) { L.compact_headers = true, L.mark_klass_shift = 64; }},
      {"narrow klass shift", [](JavaHeapLayout& L) { L.narrow_klass_shift = 64; }},
      {"ObjectAlignmentInBytes", [](JavaHeapLayout& L) { L.object_alignment = 12; }},
      {"GrainBytes", [](JavaHeapLayout& L) { L.grain_bytes = 3 << 20; }},
      {"InstanceKlass::_misc_flags", [](JavaHeapLayout& L) { L.instance_misc_flags = 0xffffffffu; }},
  };
  for (auto [what, spoil] : cases) {
    FakeG1 h;
    const uint32_t marker = h.klass("Marker", 24);
    h.obj(h.region(2), marker, 24);
    spoil(h.L);
    auto r = h.walk();
    EXPECT_EQ(r.status, SnapshotStatus::kFailed) << what;
    EXPECT_NE(r.reason.find(what), std::string::npos) << what << ": " << r.reason;
  }
}

// A region record is believed only as large as a region: one whose end lies
// 1 TiB above its bottom was walked to its top, resynchronising 8 bytes at a
// time through unmapped memory, one failed read each (the fuzzer's slow unit).
// The deadline is far: the walk must end on the region size alone.
TEST(G1Heap, RegionsLargerThanTheGrainAreNotWalked) {
  FakeG1 h;
  const uint32_t marker = h.klass("Marker", 24);
  const uint64_t good = h.region(2);
  for (int i = 0; i < 10; ++i) h.obj(good, marker, 24);
  const uint64_t huge = h.region(2);
  for (int i = 0; i < 10; ++i) h.obj(huge, marker, 24);
  h.set_end(huge, h.bottom(huge) + (1ull << 40));
  h.set_top(huge, h.bottom(huge) + (1ull << 39));
  const auto t0 = std::chrono::steady_clock::now();
  auto r = h.walk(1ull << 30, 60000);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_EQ(classes(r)["Marker"].first, 10u) << r.reason;
  EXPECT_EQ(r.regions, 1u);
}

// A region whose memory cannot be read is given up at the first failed read
// (reported unparsed), not stepped through 8 bytes at a time.
TEST(G1Heap, UnreadableRegionIsGivenUpAtTheFirstFailedRead) {
  FakeG1 h;
  const uint32_t marker = h.klass("Marker", 24);
  const uint64_t good = h.region(2);
  for (int i = 0; i < 10; ++i) h.obj(good, marker, 24);
  const uint64_t gone = h.region(2);
  h.set_top(gone, h.bottom(gone) + FakeG1::kGrain);
  ASSERT_EQ(mprotect(reinterpret_cast<void*>(h.bottom(gone)), FakeG1::kGrain, PROT_NONE), 0);
  auto r = h.walk(1ull << 30, 60000);
  EXPECT_EQ(classes(r)["Marker"].first, 10u) << r.reason;
  EXPECT_EQ(r.unparsed_bytes, FakeG1::kGrain);
  EXPECT_LT(h.last_syscalls, 100u);
}

// Resynchronising through a region of garbage notices the deadline.
TEST(G1Heap, DeadlineEndsAResynchronisation) {
  FakeG1 h;
  h.klass("Marker", 24);
  const uint64_t junk = h.region(8);
  std::memset(reinterpret_cast<void*>(h.bottom(junk)), 0xAB, FakeG1::kGrain);
  h.set_top(junk, h.bottom(junk) + FakeG1::kGrain);
  auto r = h.walk(1ull << 30, 0);
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
  EXPECT_NE(r.reason.find("deadline"), std::string::npos) << r.reason;
  EXPECT_LT(r.unparsed_bytes, FakeG1::kGrain);
}

// A region table of 2M entries that all point at unreadable memory: the scan
// ends after a few failed reads, not 2M of them (the 16 MiB table itself
// costs one read per 4 KiB chunk of the test's cache).
TEST(G1Heap, UnreadableRegionRecordsEndTheTableScan) {
  FakeG1 h;
  const uint64_t n = 1u << 21;
  const uint64_t table = h.a_.alloc(8 * n);
  for (uint64_t i = 0; i < n; ++i) Arena::put<uint64_t>(table + 8 * i, 0x1000 + 8 * i);
  h.L.region_table = table;
  h.L.region_count = n;
  auto r = h.walk(1ull << 30, 60000);
  EXPECT_EQ(r.status, SnapshotStatus::kFailed);
  EXPECT_NE(r.reason.find("unreadable"), std::string::npos) << r.reason;
  EXPECT_LT(h.last_syscalls, 8 * n / 4096 + 200);
}

// The fuzzer's slow unit (tests/fuzz/fuzz_java_heap.cpp found it in an 8-minute
// run): the G1 walk of this 273-byte image ran for more than 12 minutes.
TEST(G1Heap, FuzzSlowUnitFinishesFast) {
  static const uint8_t kSlowUnit[] = {
    0x0a, 0xb0, 0xb0, 0xb0, 0xb0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x30, 0x30,
    0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30,
    0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30,
    0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x37, 0x39,
    0x38, 0x36, 0x35, 0x32, 0x34, 0x34, 0x2b, 0x16, 0x33, 0x33, 0x79, 0x7a, 0x00, 0x00, 0x30, 0x61,
    0x00, 0x00, 0x33, 0x33, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0x48, 0xb0, 0x90, 0xb0, 0xb0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x09, 0x00, 0xff, 0xff,
    0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33,
    0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x2b, 0x16, 0x33,
    0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x00, 0x20, 0x00, 0x00, 0x00,
    0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x32, 0xb0, 0x90, 0xb0, 0xb0, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0x09, 0x00, 0xff, 0xff, 0xbf, 0xfc, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xe3,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7a,
    0xff, 0x09, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0x7a, 0xff, 0x09, 0x00, 0xff, 0xff, 0xff, 0x51, 0x2e, 0xd9, 0x00,
    0x70, 0x62, 0xff, 0xff, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0xb0, 0xb0, 0xb0, 0xb0, 0x33, 0x33, 0x33,
    0xb0,
  };
  static_assert(sizeof kSlowUnit == 273);
  const auto t0 = std::chrono::steady_clock::now();
  LLVMFuzzerTestOneInput(kSlowUnit, sizeof kSlowUnit);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
}

// --- The G1 layout resolved from VMStructs ----------------------------------

namespace {

// Serial / Parallel: the fake's region records serve as space records
// (bottom, end, top at the same offsets as a ContiguousSpace's or
// MutableSpace's would be), named as the resolution names them.
void use_spaces(FakeG1& h, HeapKind kind, const std::vector<std::pair<std::string, uint64_t>>& spaces) {
  h.L.kind = kind;
  h.L.space_bottom = h.L.region_bottom, h.L.space_end = h.L.region_end, h.L.space_top = h.L.region_top;
  h.L.spaces.clear();
  for (const auto& [name, rec] : spaces) h.L.spaces.push_back({name, "DefNewGeneration::_" + name + "_space", rec});
}

TEST(GenerationalHeap, SerialSpacesAreWalkedWhole) {
  FakeG1 h;
  const uint32_t marker = h.klass("Fixture$Marker", 24), bytes = h.klass("[B", FakeG1::array_lh(false, 0));
  const uint64_t eden = h.region(2), from = h.region(2), to = h.region(2), old = h.region(2);
  for (int i = 0; i < 300; ++i) h.obj(i % 3 == 0 ? eden : i % 3 == 1 ? from : old, marker, 24);
  // A large array: a normal object in a Serial heap (no humongous regions).
  h.array(old, bytes, 600000, 0);
  const uint64_t hole = h.top(eden);  // a live TLAB's unformatted tail
  std::memset(reinterpret_cast<void*>(hole), 0xAB, 4096);
  h.set_top(eden, hole + 4096);
  h.L.holes = {{hole, hole + 4096}};
  use_spaces(h, HeapKind::kSerial, {{"eden", eden}, {"from", from}, {"to", to}, {"old", old}});
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  auto m = classes(r);
  EXPECT_EQ(m["Fixture$Marker"], std::make_pair(uint64_t{300}, uint64_t{7200}));
  EXPECT_EQ(m["byte[]"], std::make_pair(uint64_t{1}, uint64_t{(16 + 600000 + 7) & ~7ull}));
  EXPECT_EQ(r.regions, 4u);         // eden, from, to, old
  EXPECT_EQ(r.regions_walked, 3u);  // to is empty
  EXPECT_EQ(r.humongous_objects, 0u);
  EXPECT_EQ(r.unparsed_bytes, 0u);
  EXPECT_EQ(r.used_bytes, r.parsed_bytes);
  EXPECT_DOUBLE_EQ(r.coverage, 1.0);
  // Sampled above the budget like G1's regions, in 64 KiB windows.
  auto s = h.walk(64 << 10);
  EXPECT_EQ(s.status, SnapshotStatus::kPartial);
  EXPECT_GT(s.sample_stride, 1u);
}

// Every space's bounds come from the target: one that is not plausible
// refuses the whole walk, naming the space and the field it came from.
TEST(GenerationalHeap, ImplausibleSpacesAreRefusedNamingTheField) {
  auto walk_with_space = [](const std::function<void(FakeG1&, uint64_t eden, uint64_t old)>& spoil) {
    FakeG1 h;
    const uint32_t marker = h.klass("Marker", 24);
    const uint64_t eden = h.region(2), old = h.region(2);
    for (int i = 0; i < 10; ++i) h.obj(eden, marker, 24), h.obj(old, marker, 24);
    use_spaces(h, HeapKind::kParallel, {{"eden", eden}, {"old", old}});
    spoil(h, eden, old);
    return h.walk();
  };
  auto benign = walk_with_space([](FakeG1&, uint64_t, uint64_t) {});
  ASSERT_EQ(benign.status, SnapshotStatus::kComplete) << benign.reason;
  EXPECT_EQ(classes(benign)["Marker"].first, 20u);
  const std::pair<const char*, std::function<void(FakeG1&, uint64_t, uint64_t)>> cases[] = {
      {"_top beyond _end", [](FakeG1& h, uint64_t eden, uint64_t) { h.set_end(eden, h.top(eden) - 8); }},
      {"_top below _bottom", [](FakeG1& h, uint64_t eden, uint64_t) { h.set_top(eden, h.bottom(eden) - 8); }},
      {"unaligned bounds", [](FakeG1& h, uint64_t eden, uint64_t) { h.set_top(eden, h.top(eden) + 4); }},
      {"a size beyond 32 TiB",
       [](FakeG1& h, uint64_t eden, uint64_t) { h.set_end(eden, h.bottom(eden) + (1ull << 46)); }},
      {"overlap",
       [](FakeG1& h, uint64_t eden, uint64_t old) {
         Arena::put(old + h.L.region_bottom, h.bottom(eden) + 64);
         Arena::put(old + h.L.region_top, h.bottom(eden) + 128);
         Arena::put(old + h.L.region_end, h.bottom(eden) + 4096);
       }},
      {"cannot read the eden space (DefNewGeneration::_eden_space",
       [](FakeG1& h, uint64_t, uint64_t) { h.L.spaces[0].addr = 0x1000; }},
      {"the eden space's record", [](FakeG1& h, uint64_t, uint64_t) { h.L.spaces[0].addr = 0; }},
      {"9 spaces",
       [](FakeG1& h, uint64_t, uint64_t) {
         while (h.L.spaces.size() < 9) h.L.spaces.push_back(h.L.spaces.back());
       }},
  };
  for (const auto& [want, spoil] : cases) {
    auto r = walk_with_space(spoil);
    EXPECT_EQ(r.status, SnapshotStatus::kFailed) << want;
    EXPECT_NE(r.reason.find(want), std::string::npos) << want << ": " << r.reason;
    EXPECT_EQ(r.objects, 0u) << want << ": nothing is walked";
  }
}

// A JVM as the collector sees it once libjvm is found: VMStructs (JDK 17's
// names) describing a G1 heap (a FakeG1), its flags, and one Java thread
// whose TLAB has an unformatted tail. Tests change the description, then
// resolve().
class FakeJvm {
 public:
  static constexpr uint64_t kHrm = 0x100, kRegions = 0x10, kTlab = 0x40;
  FakeJvm() : vm(generic_vm(0, 0)), flags(vm) {
    vm.types.insert({{"G1CollectedHeap", 1024}, {"HeapRegionManager", 128}, {"G1HeapRegionTable", 48},
                     {"HeapRegion", FakeG1::kRegionBytes}, {"HeapRegionType", 4}, {"Klass", FakeG1::kKlassBytes},
                     {"Symbol", 8}, {"ThreadsList", 32}, {"Thread", 512}, {"ThreadLocalAllocBuffer", 96},
                     {"CollectedHeap", 512}, {"Universe", 1}, {"java_lang_Class", 1},
                     {"CompressedKlassPointers", 1}, {"ThreadsSMRSupport", 1}, {"intx", 8}});
    heap = vm.a.alloc(1024);
    vm.global("Universe", "_collectedHeap", heap);
    vm.field("G1CollectedHeap", "_hrm", kHrm);
    vm.field("HeapRegionManager", "_regions", kRegions);
    vm.field("G1HeapRegionTable", "_base", 0);
    vm.field("G1HeapRegionTable", "_length", 8);
    vm.field("HeapRegion", "_bottom", 0), vm.field("HeapRegion", "_end", 8), vm.field("HeapRegion", "_top", 16);
    vm.field("HeapRegion", "_type", 24);
    vm.field("HeapRegionType", "_tag", 0);
    grain = vm.global("HeapRegion", "GrainBytes", FakeG1::kGrain);
    vm.ints["HeapRegionType::FreeTag"] = 0;
    vm.ints["HeapRegionType::StartsHumongousTag"] = 4;
    vm.ints["HeapRegionType::ContinuesHumongousTag"] = 5;
    vm.field("Klass", "_layout_helper", 8), vm.field("Klass", "_name", 24);
    vm.field("Symbol", "_length", 4), vm.field("Symbol", "_body", 6);
    vm.global("java_lang_Class", "_oop_size_offset", 16);
    vm.global("CompressedKlassPointers", "_narrow_klass._base", g.klass_area());
    vm.global("CompressedKlassPointers", "_narrow_klass._shift", 0);
    // One Java thread: ThreadsList {_length at 8, _threads at 16}, its TLAB at kTlab.
    const uint64_t list = vm.a.alloc(32);
    threads = vm.a.alloc(8);
    thread = vm.a.alloc(512);
    Arena::put<uint32_t>(list + 8, 1), Arena::put(list + 16, threads), Arena::put(threads, thread);
    vm.global("ThreadsSMRSupport", "_java_thread_list", list);
    vm.field("ThreadsList", "_length", 8), vm.field("ThreadsList", "_threads", 16);
    vm.field("Thread", "_tlab", kTlab);
    vm.field("ThreadLocalAllocBuffer", "_top", 8), vm.field("ThreadLocalAllocBuffer", "_end", 16);
  }
  void set_tlab(uint64_t top, uint64_t end) {
    Arena::put(thread + kTlab + 8, top);
    Arena::put(thread + kTlab + 16, end);
  }
  static constexpr uint64_t kNext = 480;  // JavaThread::_next (JDK 8, 11)
  // JDK 11's description of the same JVM: HeapRegion's bottom and end are
  // Space's, its top G1ContiguousSpace's; the narrow klass base and shift
  // Universe's; the Java threads a linked list from Threads::_thread_list
  // through JavaThread::_next.
  void as_jdk11() {
    vm.types.insert({{"G1ContiguousSpace", 200}, {"CompactibleSpace", 80}, {"Space", 48}, {"JavaThread", 512}});
    vm.supers.insert({{"HeapRegion", "G1ContiguousSpace"}, {"G1ContiguousSpace", "CompactibleSpace"},
                      {"CompactibleSpace", "Space"}, {"JavaThread", "Thread"}});
    vm.move("HeapRegion", "_bottom", "Space"), vm.move("HeapRegion", "_end", "Space");
    vm.move("HeapRegion", "_top", "G1ContiguousSpace");
    vm.move("CompressedKlassPointers", "_narrow_klass._base", "Universe");
    vm.move("CompressedKlassPointers", "_narrow_klass._shift", "Universe");
    vm.drop("ThreadsSMRSupport", "_java_thread_list");
    vm.drop("ThreadsList", "_length"), vm.drop("ThreadsList", "_threads");
    vm.global("Threads", "_thread_list", thread);
    vm.field("JavaThread", "_next", kNext);
    vm.types["Threads"] = 1;
  }
  // JDK 8's: as 11's, with G1OffsetTableContigSpace for G1ContiguousSpace,
  // no region type (nor its tags), and the flags as Flag.
  void as_jdk8() {
    as_jdk11();
    vm.types["G1OffsetTableContigSpace"] = vm.types["G1ContiguousSpace"];
    vm.types.erase("G1ContiguousSpace");
    vm.supers["HeapRegion"] = "G1OffsetTableContigSpace";
    vm.supers.erase("G1ContiguousSpace");
    vm.supers["G1OffsetTableContigSpace"] = "CompactibleSpace";
    vm.move("G1ContiguousSpace", "_top", "G1OffsetTableContigSpace");
    vm.drop("HeapRegion", "_type"), vm.drop("HeapRegionType", "_tag");
    vm.ints.clear();
    for (const char* f : {"flags", "numFlags", "_addr", "_name"}) vm.move("JVMFlag", f, "Flag");
    vm.types["Flag"] = vm.types["JVMFlag"];
    vm.types.erase("JVMFlag");
  }
  // The linked list of as_jdk11() made longer: n more threads after the
  // first, the last pointing back at `loop_to` (0: none).
  std::vector<uint64_t> chain_threads(size_t n, size_t loop_to_index = SIZE_MAX) {
    std::vector<uint64_t> t{thread};
    for (size_t i = 0; i < n; ++i) t.push_back(vm.a.alloc(512));
    for (size_t i = 0; i + 1 < t.size(); ++i) Arena::put(t[i] + kNext, t[i + 1]);
    Arena::put<uint64_t>(t.back() + kNext, loop_to_index < t.size() ? t[loop_to_index] : 0);
    return t;
  }
  struct Resolved {
    std::optional<std::string> error;  // from any step
    JavaHeapLayout L;
    uint64_t heap = 0;
    uint64_t syscalls = 0;
  };
  // A Serial heap (kSerial) or a Parallel one (kParallel) of the given
  // spaces (FakeG1 region records, bottom/end/top at 0/8/16), described as
  // JDK 8 describes it (jdk8: GenCollectedHeap::_gens, ImmutableSpace's
  // bounds) or as later JDKs do (SerialHeap < GenCollectedHeap::_young_gen,
  // MutableSpace's own bounds). Static generation pointers for Parallel.
  void as_generational(HeapKind kind, bool jdk8, uint64_t eden, uint64_t from, uint64_t to, uint64_t old) {
    const uint64_t young = vm.a.alloc(256), tenured = vm.a.alloc(256);
    if (kind == HeapKind::kSerial) {
      vm.types.insert({{"GenCollectedHeap", 512}, {"DefNewGeneration", 256}, {"TenuredGeneration", 256},
                       {"ContiguousSpace", FakeG1::kRegionBytes}, {"Space", 24}});
      vm.supers.insert({{"ContiguousSpace", "Space"}});
      vm.field("Space", "_bottom", 0), vm.field("Space", "_end", 8), vm.field("ContiguousSpace", "_top", 16);
      if (jdk8) {
        vm.field("GenCollectedHeap", "_gens", 128), vm.field("GenCollectedHeap", "_n_gens", 124);
        Arena::put<int32_t>(heap + 124, 2), Arena::put(heap + 128, young), Arena::put(heap + 136, tenured);
        vm.types["OneContigSpaceCardGeneration"] = 256;
        vm.supers["TenuredGeneration"] = "OneContigSpaceCardGeneration";
        vm.field("OneContigSpaceCardGeneration", "_the_space", 40);
      } else {
        vm.types["SerialHeap"] = 512;
        vm.supers["SerialHeap"] = "GenCollectedHeap";
        vm.field("GenCollectedHeap", "_young_gen", 96), vm.field("GenCollectedHeap", "_old_gen", 104);
        Arena::put(heap + 96, young), Arena::put(heap + 104, tenured);
        vm.field("TenuredGeneration", "_the_space", 40);
      }
      vm.field("DefNewGeneration", "_eden_space", 8), vm.field("DefNewGeneration", "_from_space", 16);
      vm.field("DefNewGeneration", "_to_space", 24);
      Arena::put(young + 8, eden), Arena::put(young + 16, from), Arena::put(young + 24, to);
      Arena::put(tenured + 40, old);
    } else {
      vm.types.insert({{"ParallelScavengeHeap", 512}, {"PSYoungGen", 256}, {"PSOldGen", 256},
                       {"MutableSpace", FakeG1::kRegionBytes}});
      if (jdk8) {
        vm.types["ImmutableSpace"] = 16;
        vm.supers["MutableSpace"] = "ImmutableSpace";
        vm.field("ImmutableSpace", "_bottom", 0), vm.field("ImmutableSpace", "_end", 8);
      } else {
        vm.field("MutableSpace", "_bottom", 0), vm.field("MutableSpace", "_end", 8);
      }
      vm.field("MutableSpace", "_top", 16);
      vm.global("ParallelScavengeHeap", "_young_gen", young);
      vm.global("ParallelScavengeHeap", "_old_gen", tenured);
      vm.field("PSYoungGen", "_eden_space", 32), vm.field("PSYoungGen", "_from_space", 40);
      vm.field("PSYoungGen", "_to_space", 48), vm.field("PSOldGen", "_object_space", 160);
      Arena::put(young + 32, eden), Arena::put(young + 40, from), Arena::put(young + 48, to);
      Arena::put(tenured + 160, old);
    }
  }
  Resolved resolve(HeapKind kind = HeapKind::kG1) {
    g.table();
    Arena::put(heap + kHrm + kRegions, g.L.region_table), Arena::put(heap + kHrm + kRegions + 8, g.L.region_count);
    vm.build();
    RemoteMemory mem(getpid());
    auto c = cache_of_self(mem);
    Resolved r;
    std::string err;
    auto hv = HotSpotVm::read(c, vm.syms, no_deadline(), err);
    auto fl = hv ? read_jvm_flags(c, *hv, {"UseG1GC", "UseCompressedClassPointers", "ObjectAlignmentInBytes"},
                                  no_deadline(), err)
                 : std::nullopt;
    if (!fl) {
      r.error = err;
      return r;
    }
    r.error = kind == HeapKind::kG1 ? resolve_g1_layout(c, *hv, *fl, r.L, r.heap)
                                    : resolve_generational_layout(c, *hv, *fl, kind, r.L, r.heap);
    if (!r.error) {
      auto holes = read_tlab_holes(c, *hv, no_deadline(), err);
      if (holes) r.L.holes = std::move(*holes);
      else r.error = err;
    }
    r.syscalls = mem.syscalls();
    return r;
  }

  FakeG1 g;
  FakeVm vm;
  FakeFlags flags;
  uint64_t heap = 0, grain = 0, threads = 0, thread = 0;
};

}  // namespace

// The fake heap walked with a resolved layout: complete, its markers all
// found, nothing left unparsed.
void expect_walks_whole(FakeJvm& j, const decltype(FakeJvm().resolve().L)& layout, uint64_t markers) {
  j.g.L = layout;
  auto w = j.g.walk();
  ASSERT_EQ(w.status, SnapshotStatus::kComplete) << w.reason;
  EXPECT_EQ(classes(w)["Marker"].first, markers);
  EXPECT_EQ(w.unparsed_bytes, 0u);
}

TEST(G1LayoutResolution, ResolvesAConsistentLayoutAndWalksWithIt) {
  FakeJvm j;
  const uint32_t marker = j.g.klass("Marker", 24);
  const uint64_t r1 = j.g.region(2);
  for (int i = 0; i < 10; ++i) j.g.obj(r1, marker, 24);
  const uint64_t tail = j.g.top(r1);
  std::memset(reinterpret_cast<void*>(tail), 0xAB, 4096);
  j.g.set_top(r1, tail + 4096);
  j.set_tlab(tail, tail + 4096 - 16);  // the reserve (2 words) past _end is part of the hole
  for (int i = 0; i < 5; ++i) j.g.obj(r1, marker, 24);
  auto r = j.resolve();
  ASSERT_FALSE(r.error) << *r.error;
  EXPECT_EQ(r.heap, j.heap);
  EXPECT_EQ(r.L.region_table, j.g.L.region_table);
  EXPECT_EQ(r.L.region_count, j.g.L.region_count);
  EXPECT_EQ(r.L.grain_bytes, FakeG1::kGrain);
  EXPECT_EQ(r.L.region_tag, 24u);
  EXPECT_EQ(r.L.klass_name, 24u);
  EXPECT_EQ(r.L.symbol_body, 6u);
  EXPECT_TRUE(r.L.compressed_klass);
  EXPECT_FALSE(r.L.compact_headers);
  EXPECT_EQ(r.L.narrow_klass_base, j.g.klass_area());
  EXPECT_EQ(r.L.object_alignment, 8u);
  EXPECT_EQ(r.L.mirror_size_offset, 16);
  EXPECT_EQ(r.L.holes, (std::vector<std::pair<uint64_t, uint64_t>>{{tail, tail + 4096}}));
  expect_walks_whole(j, r.L, 15);
}

// Every offset the target gives is checked, once, against the size of the
// struct it indexes (and every size against a cap); the snapshot fails
// naming the field instead of using it.
TEST(G1LayoutResolution, OffsetsOutsideTheirTypeFailWithTheFieldNamed) {
  const std::tuple<const char*, const char*, uint64_t> offsets[] = {
      {"Klass", "_name", FakeG1::kKlassBytes - 4},  // 8 bytes read there
      {"Klass", "_layout_helper", FakeG1::kKlassBytes - 2},
      {"HeapRegion", "_bottom", 4000},
      {"HeapRegion", "_end", FakeG1::kRegionBytes - 4},
      {"HeapRegion", "_top", 1ull << 40},
      {"HeapRegion", "_type", FakeG1::kRegionBytes - 2},  // HeapRegionType is 4 bytes
      {"HeapRegionType", "_tag", 2},
      {"Symbol", "_length", 7},
      {"Symbol", "_body", 8},
      {"G1CollectedHeap", "_hrm", 1000},  // HeapRegionManager is 128 bytes
      {"HeapRegionManager", "_regions", 100},
      {"G1HeapRegionTable", "_length", 44},
      {"ThreadLocalAllocBuffer", "_top", 96},
      {"Thread", "_tlab", 500},
      {"ThreadsList", "_length", ~uint64_t{0} - 1},
  };
  for (auto [type, field, offset] : offsets) {
    FakeJvm j;
    j.vm.find(type, field).offset = offset;
    auto r = j.resolve();
    ASSERT_TRUE(r.error) << type << "::" << field << " at " << offset;
    EXPECT_NE(r.error->find(std::string(type) + "::" + field), std::string::npos) << *r.error;
  }
  const std::tuple<const char*, uint64_t, const char*> sizes[] = {
      {"Klass", 1ull << 30, "implausible size"},
      {"HeapRegion", 0, "implausible size"},
      {"G1CollectedHeap", ~uint64_t{0}, "implausible size"},
  };
  for (auto [type, size, what] : sizes) {
    FakeJvm j;
    j.vm.types[type] = size;
    auto r = j.resolve();
    ASSERT_TRUE(r.error) << type << " of " << size;
    EXPECT_NE(r.error->find(what), std::string::npos) << *r.error;
    EXPECT_NE(r.error->find(type), std::string::npos) << *r.error;
  }
  {
    FakeJvm j;
    j.vm.types.erase("Symbol");
    auto r = j.resolve();
    ASSERT_TRUE(r.error);
    EXPECT_NE(r.error->find("no type Symbol"), std::string::npos) << *r.error;
  }
  {
    FakeJvm j;
    Arena::put<uint64_t>(j.grain, 3 << 20);  // not a power of two
    auto r = j.resolve();
    ASSERT_TRUE(r.error);
    EXPECT_NE(r.error->find("GrainBytes"), std::string::npos) << *r.error;
  }
}

// A thread list of 100,000 threads that cannot be read: the TLAB scan stops
// after a few failed reads.
TEST(G1LayoutResolution, UnreadableThreadsEndTheTlabScan) {
  FakeJvm j;
  const uint64_t n = 100000;
  const uint64_t list = j.vm.find("ThreadsSMRSupport", "_java_thread_list").address;
  const uint64_t threads = j.vm.a.alloc(8 * n);
  for (uint64_t i = 0; i < n; ++i) Arena::put<uint64_t>(threads + 8 * i, 0x1000 + 64 * i);
  uint64_t l = 0;
  std::memcpy(&l, reinterpret_cast<void*>(list), 8);
  Arena::put<uint32_t>(l + 8, n), Arena::put(l + 16, threads);
  auto r = j.resolve();
  ASSERT_FALSE(r.error) << *r.error;
  EXPECT_TRUE(r.L.holes.empty());
  EXPECT_LT(r.syscalls, 1000u);
}

// JDK 11 describes HeapRegion's bottom, end and top on its base classes, the
// narrow klass under Universe and the threads as a linked list: the same
// layout resolves, and the walk with it skips the TLAB tail.
TEST(G1LayoutResolution, Jdk11sDescriptionResolvesTheSameLayout) {
  FakeJvm j;
  j.as_jdk11();
  const uint32_t marker = j.g.klass("Marker", 24);
  const uint64_t r1 = j.g.region(2);
  for (int i = 0; i < 10; ++i) j.g.obj(r1, marker, 24);
  const uint64_t tail = j.g.top(r1);
  std::memset(reinterpret_cast<void*>(tail), 0xAB, 4096);
  j.g.set_top(r1, tail + 4096);
  j.set_tlab(tail, tail + 4096 - 16);
  for (int i = 0; i < 5; ++i) j.g.obj(r1, marker, 24);
  auto r = j.resolve();
  ASSERT_FALSE(r.error) << *r.error;
  EXPECT_EQ(r.L.region_bottom, 0u);
  EXPECT_EQ(r.L.region_end, 8u);
  EXPECT_EQ(r.L.region_top, 16u);
  EXPECT_TRUE(r.L.region_types);
  EXPECT_EQ(r.L.narrow_klass_base, j.g.klass_area());
  EXPECT_EQ(r.L.holes, (std::vector<std::pair<uint64_t, uint64_t>>{{tail, tail + 4096}}));
  expect_walks_whole(j, r.L, 15);
}

// A base class's field is checked against the base class: Space::_end 44
// bytes into a 48-byte Space fits HeapRegion but not Space.
TEST(G1LayoutResolution, BaseClassFieldsAreCheckedAgainstTheBaseClass) {
  FakeJvm j;
  j.as_jdk11();
  j.vm.find("Space", "_end").offset = 44;
  auto r = j.resolve();
  ASSERT_TRUE(r.error);
  EXPECT_NE(r.error->find("HeapRegion::_end (declared in Space)"), std::string::npos) << *r.error;
}

// JDK 8 describes no region type, its flags as Flag, G1OffsetTableContigSpace.
TEST(G1LayoutResolution, Jdk8sDescriptionResolvesWithoutRegionTypes) {
  FakeJvm j;
  j.as_jdk8();
  const uint32_t marker = j.g.klass("Marker", 24);
  const uint64_t r1 = j.g.region(0);  // no tag: 0 is what the record holds
  for (int i = 0; i < 10; ++i) j.g.obj(r1, marker, 24);
  auto r = j.resolve();
  ASSERT_FALSE(r.error) << *r.error;
  EXPECT_FALSE(r.L.region_types);
  EXPECT_EQ(r.L.region_top, 16u);
  EXPECT_TRUE(r.L.compressed_klass);  // from Flag::flags
  expect_walks_whole(j, r.L, 10);
}

// The linked list of threads comes from the target: one that loops back, or
// runs on past any JVM's thread count, ends (at the thread seen twice, or at
// the cap) instead of looping; every thread before is read.
TEST(G1LayoutResolution, ALinkedThreadListThatLoopsOrNeverEndsIsCut) {
  {
    FakeJvm j;
    j.as_jdk11();
    auto t = j.chain_threads(5, 2);  // the last points back at the third
    for (size_t i = 0; i < t.size(); ++i)
      Arena::put(t[i] + FakeJvm::kTlab + 8, 0x100000 * (i + 1)), Arena::put(t[i] + FakeJvm::kTlab + 16, 0x100000 * (i + 1) + 64);
    auto r = j.resolve();
    ASSERT_FALSE(r.error) << *r.error;
    EXPECT_EQ(r.L.holes.size(), t.size());
  }
  {
    FakeJvm j;
    j.as_jdk11();
    auto t = j.chain_threads(0, 0);  // the only thread is its own next
    auto r = j.resolve();
    ASSERT_FALSE(r.error) << *r.error;
  }
  {
    // More threads than any JVM has: the list is followed for 100,000, no further.
    FakeJvm j;
    j.as_jdk11();
    const size_t n = 100010;
    const uint64_t block = j.vm.a.alloc(n * 512);
    Arena::put(j.thread + FakeJvm::kNext, block);
    j.set_tlab(0x800, 0x808);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t t = block + i * 512;
      Arena::put<uint64_t>(t + FakeJvm::kNext, i + 1 < n ? t + 512 : 0);
      Arena::put<uint64_t>(t + FakeJvm::kTlab + 8, 0x1000 + 16 * i), Arena::put<uint64_t>(t + FakeJvm::kTlab + 16, 0x1008 + 16 * i);
    }
    auto r = j.resolve();
    ASSERT_FALSE(r.error) << *r.error;
    EXPECT_EQ(r.L.holes.size(), 100000u);
  }
  {
    FakeJvm j;
    j.as_jdk11();
    j.vm.find("JavaThread", "_next").offset = 510;  // 8 bytes at 510 of 512
    auto r = j.resolve();
    ASSERT_TRUE(r.error);
    EXPECT_NE(r.error->find("JavaThread::_next"), std::string::npos) << *r.error;
  }
}

// Serial and Parallel heaps as JDK 8 and later JDKs describe them resolve
// to their four spaces (through base classes and static fields), and the
// walk with that layout reads every object.
TEST(GenerationalLayoutResolution, SerialAndParallelResolveToTheirSpacesOnEveryShape) {
  for (HeapKind kind : {HeapKind::kSerial, HeapKind::kParallel}) {
    for (bool jdk8 : {true, false}) {
      SCOPED_TRACE(std::string(kind == HeapKind::kSerial ? "serial" : "parallel") + (jdk8 ? " jdk8" : " jdk9+"));
      FakeJvm j;
      const uint32_t marker = j.g.klass("Marker", 24);
      const uint64_t eden = j.g.region(2), from = j.g.region(2), to = j.g.region(2), old = j.g.region(2);
      for (int i = 0; i < 40; ++i) j.g.obj(i % 2 ? eden : old, marker, 24);
      j.g.obj(from, marker, 24);
      j.as_generational(kind, jdk8, eden, from, to, old);
      auto r = j.resolve(kind);
      ASSERT_FALSE(r.error) << *r.error;
      EXPECT_EQ(r.L.kind, kind);
      ASSERT_EQ(r.L.spaces.size(), 4u);
      EXPECT_EQ(r.L.spaces[0].addr, eden);
      EXPECT_EQ(r.L.spaces[3].addr, old);
      EXPECT_EQ(r.L.space_top, 16u);
      expect_walks_whole(j, r.L, 41);
    }
  }
}

// What the resolution follows comes from the target: a generation count
// that is not 2, a null generation or space pointer, a field outside its
// type are errors naming the field.
TEST(GenerationalLayoutResolution, HostileDescriptionsFailNamingTheField) {
  auto resolve_spoiled = [](HeapKind kind, bool jdk8, const std::function<void(FakeJvm&)>& spoil) {
    FakeJvm j;
    const uint64_t eden = j.g.region(2), from = j.g.region(2), to = j.g.region(2), old = j.g.region(2);
    j.as_generational(kind, jdk8, eden, from, to, old);
    spoil(j);
    return j.resolve(kind).error.value_or("");
  };
  EXPECT_NE(resolve_spoiled(HeapKind::kSerial, true, [](FakeJvm& j) { Arena::put<int32_t>(j.heap + 124, 3); })
                .find("GenCollectedHeap::_n_gens"),
            std::string::npos);
  EXPECT_NE(resolve_spoiled(HeapKind::kSerial, false, [](FakeJvm& j) { Arena::put<uint64_t>(j.heap + 96, 0); })
                .find("SerialHeap::_young_gen"),
            std::string::npos);
  auto unaligned_old_gen = [](FakeJvm& j) {
    Arena::put<uint64_t>(j.vm.find("ParallelScavengeHeap", "_old_gen").address, 0x1003);
  };
  EXPECT_NE(resolve_spoiled(HeapKind::kParallel, false, unaligned_old_gen).find("ParallelScavengeHeap::_old_gen"),
            std::string::npos);
  EXPECT_NE(resolve_spoiled(HeapKind::kParallel, false,
                            [](FakeJvm& j) { j.vm.find("PSYoungGen", "_eden_space").offset = 300; })
                .find("_eden_space"),
            std::string::npos);
  EXPECT_NE(resolve_spoiled(HeapKind::kSerial, false, [](FakeJvm& j) { j.vm.drop("DefNewGeneration", "_to_space"); })
                .find("_to_space"),
            std::string::npos);
}
