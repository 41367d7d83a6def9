// obmalloc's arena table decoded from byte images laid out as CPython lays
// out struct arena_object (48 bytes) and, from 3.12, struct _obmalloc_state's
// `mgmt`; crafted tables (counts in the billions, arenas outside the
// mappings, more free pools than pools) are refused with a reason.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstring>

#include "core/collector.h"
#include "core/remote_memory.h"
#include "python/python_arena_reader.h"
#include "python/python_arena_table.h"
#include "python/python_layout.h"
#include "python/python_runtime.h"

using namespace oomsnap;

namespace {

constexpr uint64_t kKiB = 1024, kMiB = kKiB * kKiB;

struct Entry {
  uint64_t address;
  uint32_t nfreepools, ntotalpools;
};

std::vector<uint8_t> table_of(const std::vector<Entry>& entries) {
  std::vector<uint8_t> t(entries.size() * kPyArenaObjectSize, 0xee);  // junk in the fields not read
  for (size_t i = 0; i < entries.size(); ++i) {
    uint8_t* e = t.data() + i * kPyArenaObjectSize;
    std::memcpy(e, &entries[i].address, 8);
    std::memcpy(e + 16, &entries[i].nfreepools, 4);
    std::memcpy(e + 20, &entries[i].ntotalpools, 4);
  }
  return t;
}

Mapping anon(uint64_t start, uint64_t end) {
  Mapping m;
  m.start = start, m.end = end, m.perms = "rw-p";
  return m;
}

// Two anonymous mappings, as mmap'd arenas and the brk heap lie.
const std::vector<Mapping> kMaps = {anon(0x555500000000, 0x555500800000), anon(0x7f0000000000, 0x7f0001000000)};

}  // namespace

TEST(PythonArenaTable, GeometryFollowsTheVersion) {
  EXPECT_EQ(py_arena_geometry(8).arena_size, 256 * kKiB);
  EXPECT_EQ(py_arena_geometry(9).pool_size, 4 * kKiB);
  EXPECT_EQ(py_arena_geometry(10).arena_size, 1 * kMiB);
  EXPECT_EQ(py_arena_geometry(14).pool_size, 16 * kKiB);
}

// 3.10+: 1 MiB arenas of 64 pools; one not pool aligned holds 63; unused
// entries (address 0, the rest junk) are skipped.
TEST(PythonArenaTable, LargeArenasAreDecodedWithTheirUsedPools) {
  auto t = table_of({{0x7f0000000000, 4, 64}, {0, 0xffffffff, 0xffffffff}, {0x7f0000100800, 63, 63},
                     {0x555500000000, 0, 64}});
  std::string why;
  auto c = decode_py_arena_table(t, py_arena_geometry(11), kMaps, why);
  ASSERT_TRUE(c) << why;
  ASSERT_EQ(c->arenas.size(), 3u);
  EXPECT_EQ(c->arenas[1].start, 0x7f0000100800u);
  EXPECT_EQ(c->arenas[1].end, 0x7f0000100800u + kMiB);
  EXPECT_EQ(c->used_pool_bytes, (60 + 0 + 64) * 16 * kKiB);
}

// 3.8/3.9: 256 KiB arenas of 64 pools of 4 KiB.
TEST(PythonArenaTable, SmallArenasAreDecodedWithTheirUsedPools) {
  auto t = table_of({{0x555500040000, 10, 64}, {0x555500080000, 63, 64}});
  std::string why;
  auto c = decode_py_arena_table(t, py_arena_geometry(8), kMaps, why);
  ASSERT_TRUE(c) << why;
  EXPECT_EQ(c->arenas.size(), 2u);
  EXPECT_EQ(c->arenas[0].end - c->arenas[0].start, 256 * kKiB);
  EXPECT_EQ(c->used_pool_bytes, (54 + 1) * 4 * kKiB);
}

TEST(PythonArenaTable, MoreFreePoolsThanPoolsIsRefused) {
  std::string why;
  EXPECT_FALSE(decode_py_arena_table(table_of({{0x7f0000000000, 65, 64}}), py_arena_geometry(12), kMaps, why));
  EXPECT_NE(why.find("65 free pools of 64"), std::string::npos) << why;
  // A pool count no arena of this geometry has (a 3.9 table read as 3.12's).
  why.clear();
  EXPECT_FALSE(decode_py_arena_table(table_of({{0x7f0000000000, 0, 16}}), py_arena_geometry(12), kMaps, why));
  EXPECT_NE(why.find("holds 16 pools"), std::string::npos) << why;
}

TEST(PythonArenaTable, ArenasOutsideTheMappingsAreRefused) {
  const auto g = py_arena_geometry(12);
  std::string why;
  // Unmapped; straddling a mapping's end; wrapping the address space.
  for (uint64_t at : {uint64_t{0x1000}, uint64_t{0x555500800000} - 4096, ~uint64_t{0} - 4095}) {
    why.clear();
    EXPECT_FALSE(decode_py_arena_table(table_of({{0x7f0000000000, 0, 64}, {at, 0, 64}}), g, kMaps, why)) << at;
    EXPECT_NE(why.find("arena table entry 1 names an arena at"), std::string::npos) << why;
  }
}

TEST(PythonArenaTable, TableReferencesAreBounded) {
  EXPECT_FALSE(check_py_arena_table_ref({0x555500000000, 64}));
  EXPECT_FALSE(check_py_arena_table_ref({0x555500000000, kMaxPyArenaObjects}));
  auto billions = check_py_arena_table_ref({0x555500000000, 4'000'000'000});
  ASSERT_TRUE(billions);
  EXPECT_NE(billions->find("4000000000 entries"), std::string::npos) << *billions;
  EXPECT_TRUE(check_py_arena_table_ref({0, 16}));
  EXPECT_TRUE(check_py_arena_table_ref({0x555500000004, 16}));
  EXPECT_TRUE(check_py_arena_table_ref({~uint64_t{0} - 1023, 64}));
}

namespace {

std::vector<uint8_t> mgmt_of(uint64_t arenas, uint32_t maxarenas, uint64_t now) {
  std::vector<uint8_t> s(kPyObmallocMgmtReadSize, 0);
  std::memcpy(s.data() + kPyObmallocArenas, &arenas, 8);
  std::memcpy(s.data() + kPyObmallocMaxArenas, &maxarenas, 4);
  std::memcpy(s.data() + kPyObmallocArenasNow, &now, 8);
  return s;
}

}  // namespace

// 3.12+: the table named by the interpreter's obmalloc state.
TEST(PythonArenaTable, ObmallocStateNamesItsTable) {
  std::string why;
  auto ref = parse_py_obmalloc_mgmt(mgmt_of(0x555500001000, 64, 51), why);
  ASSERT_TRUE(ref) << why;
  EXPECT_EQ(ref->arenas, 0x555500001000u);
  EXPECT_EQ(ref->count, 64u);
  // An interpreter using the main one's allocator: nothing to read.
  ref = parse_py_obmalloc_mgmt(mgmt_of(0, 0, 0), why);
  ASSERT_TRUE(ref) << why;
  EXPECT_EQ(ref->count, 0u);
}

TEST(PythonArenaTable, CraftedObmallocStatesAreRefused) {
  std::string why;
  EXPECT_FALSE(parse_py_obmalloc_mgmt(mgmt_of(0x555500001000, 64, 65), why));
  EXPECT_NE(why.find("65 arenas allocated of a table of 64"), std::string::npos) << why;
  EXPECT_FALSE(parse_py_obmalloc_mgmt(mgmt_of(0x555500001000, 0xffffffff, 3), why));
  EXPECT_NE(why.find("more than the"), std::string::npos) << why;
  EXPECT_FALSE(parse_py_obmalloc_mgmt(mgmt_of(0, 64, 3), why));
  const auto s = mgmt_of(0x555500001000, 64, 3);
  EXPECT_FALSE(parse_py_obmalloc_mgmt(std::span(s.data(), s.size() - 1), why));
}

// The claims: the arenas as heap up to the used pools, then as free heap.
TEST(PythonArenaTable, ClaimsAreHeapUpToTheUsedPoolsThenFreeHeap) {
  PyArenaCensus c;
  c.arenas = {{0x7f0000000000, 0x7f0000100000}, {0x7f0000200000, 0x7f0000300000}};
  c.used_pool_bytes = 5 * 16 * kKiB;
  auto claims = py_arena_claims(c);
  ASSERT_EQ(claims.size(), 2u);
  EXPECT_EQ(claims[0].kind, MemoryKind::kHeap);
  EXPECT_EQ(claims[0].what, "CPython obmalloc arenas (2 arenas)");
  EXPECT_EQ(claims[0].max_bytes, 5 * 16 * kKiB);
  EXPECT_EQ(claims[0].ranges.size(), 2u);
  EXPECT_EQ(claims[1].kind, MemoryKind::kHeapFree);
  EXPECT_FALSE(claims[1].max_bytes);
  EXPECT_EQ(claims[1].ranges.size(), 2u);
  auto large = py_large_object_claim(3 * kMiB, 7);
  EXPECT_EQ(large.kind, MemoryKind::kHeap);
  EXPECT_TRUE(large.ranges.empty());
  EXPECT_EQ(large.max_bytes, 3 * kMiB);
  EXPECT_EQ(large.what.rfind("objects outside arenas (malloc)", 0), 0u) << large.what;
}

// The obmalloc state's place in the interpreter, per version; on 3.13+ it
// moves with the end of the GC state the runtime's debug offsets give.
TEST(PythonArenaTable, InterpreterObmallocOffsetPerVersion) {
  EXPECT_EQ(python_layout_for(0x030b07f0)->interp_obmalloc, 0u);  // a static of obmalloc.c
  EXPECT_EQ(python_layout_for(0x030c01f0)->interp_obmalloc, 3960u);
  EXPECT_FALSE(python_layout_for(0x030c01f0)->interp_obmalloc_is_pointer);
  EXPECT_EQ(python_layout_for(0x030d00f0)->interp_obmalloc, 10800u);
  auto L = *python_layout_for(0x030e0af0);
  EXPECT_TRUE(L.interp_obmalloc_is_pointer);
  PyDebugOffsets d;
  d.tp_name = L.tp_name, d.tp_flags = L.tp_flags, d.tuple_items = L.tuple_items;
  d.interpreters_head = L.interpreters_head, d.interp_next = L.interp_next, d.interp_gc = L.interp_gc;
  d.gc_collecting = L.gc_collecting;
  d.gc_size = 240;  // 3.14.0-3.14.4: 24 bytes less than the table's 264
  ASSERT_FALSE(apply_py_debug_offsets(L, d));
  EXPECT_EQ(L.interp_obmalloc, 10904u - 24);
}

// A stripped interpreter (Debian's): the table is found among the globals
// its arena readers load, each pair tried against the target's memory (here
// this process's own): a maxarenas that is no power of two from 16 is never
// tried, a table that reads as no arenas is passed over, and the first pair
// that reads as one wins. None: a reason, and nothing claimed.
TEST(PythonArenaTable, AStrippedModulesTableIsTheFirstCandidatePairThatReadsAsOne) {
  static uint32_t odd_max = 24, max16 = 16;
  const std::vector<uint8_t> zeros(16 * kPyArenaObjectSize, 0);
  std::vector<Entry> entries(16, Entry{0, 0, 0});
  entries[0] = {0x7f0000000000, 4, 64};
  entries[5] = {0x555500000000, 0, 64};
  std::vector<uint8_t> table = table_of(entries);
  for (size_t i = 0; i < entries.size(); ++i)  // unused entries: address 0
    if (!entries[i].address) std::memset(table.data() + i * kPyArenaObjectSize, 0, 8);
  static uint64_t zeros_ptr, table_ptr;
  zeros_ptr = reinterpret_cast<uint64_t>(zeros.data());
  table_ptr = reinterpret_cast<uint64_t>(table.data());
  auto addr = [](const void* p) { return reinterpret_cast<uint64_t>(p); };

  RemoteMemory mem(::getpid());
  const auto layout = python_layout_for(0x030b0000);
  ASSERT_TRUE(layout);
  ASSERT_EQ(layout->interp_obmalloc, 0u);  // 3.11: the statics
  const Deadline deadline(std::chrono::seconds(10));
  PythonRuntime rt;
  rt.module = "/usr/bin/python3.11";
  rt.maxarenas_candidates = {addr(&odd_max), addr(&max16)};
  rt.arenas_candidates = {addr(&zeros_ptr), addr(&max16), addr(&table_ptr)};
  PyArenaRead r = read_py_arenas(mem, kMaps, rt, *layout, 64 * kMiB, deadline);
  EXPECT_EQ(r.reason, "");
  EXPECT_EQ(r.arenas, 2u);
  EXPECT_EQ(r.used_pool_bytes, (60 + 64) * 16 * kKiB);
  EXPECT_FALSE(r.claims.empty());

  rt.arenas_candidates = {addr(&zeros_ptr), addr(&max16)};
  r = read_py_arenas(mem, kMaps, rt, *layout, 64 * kMiB, deadline);
  EXPECT_NE(r.reason.find("none of the 2 x 2 globals"), std::string::npos) << r.reason;
  EXPECT_EQ(r.arenas, 0u);
  EXPECT_TRUE(r.claims.empty());
}

// A crafted stripped module: every candidate a maxarenas of 2^17 (a 6 MiB
// table) and every pointer readable: at most four tables are read while
// guessing, not 64.
TEST(PythonArenaTable, GuessingReadsAtMostFourTables) {
  static uint32_t maxes[8];
  static uint64_t ptrs[8];
  const std::vector<uint8_t> big((size_t{1} << 17) * kPyArenaObjectSize, 0);
  PythonRuntime rt;
  for (int i = 0; i < 8; ++i) {
    maxes[i] = 1u << 17;
    ptrs[i] = reinterpret_cast<uint64_t>(big.data());
    rt.maxarenas_candidates.push_back(reinterpret_cast<uint64_t>(&maxes[i]));
    rt.arenas_candidates.push_back(reinterpret_cast<uint64_t>(&ptrs[i]));
  }
  RemoteMemory mem(::getpid());
  const auto layout = python_layout_for(0x030b0000);
  ASSERT_TRUE(layout);
  const Deadline deadline(std::chrono::seconds(30));
  const uint64_t before = mem.bytes_read();
  const PyArenaRead r = read_py_arenas(mem, kMaps, rt, *layout, uint64_t{1} << 30, deadline);
  EXPECT_NE(r.reason.find("none of the 8 x 8 globals"), std::string::npos) << r.reason;
  const uint64_t table = (uint64_t{1} << 17) * kPyArenaObjectSize;
  EXPECT_LE(mem.bytes_read() - before, 4 * table + 4096) << "read " << (mem.bytes_read() - before) / table << " tables";
  EXPECT_GE(mem.bytes_read() - before, 4 * table);
}
