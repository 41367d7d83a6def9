// HotSpot's VMStructs tables (well-formed, corrupted, unterminated), the JVM's
// flags and class names, decoded from byte images (java_heap_images.h). A
// hostile process can export tables of its own making (a file named
// libjvm.so), so every value from them is also tried out of range.

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "java_heap_images.h"

using namespace oomsnap;
using namespace oomsnap::java_test;

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
