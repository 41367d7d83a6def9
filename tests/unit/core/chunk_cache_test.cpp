// ChunkCache over this process's own memory: reads across chunk and mapping
// boundaries, a mapping that starts inside a chunk, memory mapped after the
// maps were read, unreadable holes, the read budget, and the syscall saving.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "base/seccomp_filter.h"
#include "core/chunk_cache.h"
#include "core/target.h"
#include "core/proc_files.h"

using namespace oomsnap;

namespace {

constexpr size_t kChunk = ChunkCache::kDefaultChunk;

// An aligned reservation of `chunks` chunks, filled with a byte pattern.
struct Region {
  explicit Region(size_t chunks) : len(chunks * kChunk) {
    void* p = mmap(nullptr, len + kChunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    raw = static_cast<uint8_t*>(p);
    raw_len = len + kChunk;
    base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + kChunk - 1) & ~(kChunk - 1));
    for (size_t i = 0; i < len; ++i) base[i] = static_cast<uint8_t>(i * 7 + 3);
  }
  ~Region() { munmap(raw, raw_len); }
  uint64_t at(size_t off) const { return reinterpret_cast<uint64_t>(base + off); }
  uint8_t* raw;
  size_t raw_len, len;
  uint8_t* base;
};

bool same(const uint8_t* a, const uint8_t* b, size_t n) { return std::memcmp(a, b, n) == 0; }

}  // namespace

TEST(ChunkCache, ReadsAcrossChunksWithFewSyscalls) {
  Region r(4);
  RemoteMemory mem(getpid());
  ChunkCache c(mem, read_maps(getpid()));
  std::vector<uint8_t> buf(kChunk + 100);
  ASSERT_TRUE(c.read(r.at(kChunk - 50), buf.data(), buf.size()));  // spans three chunks
  EXPECT_TRUE(same(buf.data(), r.base + kChunk - 50, buf.size()));
  const uint64_t calls = mem.syscalls();
  // Thousands of small reads inside the cached chunks: no more syscalls.
  for (size_t off = kChunk; off + 64 <= 2 * kChunk; off += 64) {
    const uint8_t* v = c.view(r.at(off), 64);
    ASSERT_TRUE(v);
    ASSERT_TRUE(same(v, r.base + off, 64));
  }
  EXPECT_EQ(mem.syscalls(), calls);
  EXPECT_LE(calls, 3u);
}

// A hole (PROT_NONE) between two readable parts of one chunk: each side
// reads, the hole and reads that cross into it fail, nothing crashes.
TEST(ChunkCache, MappingThatStartsInsideAChunk) {
  Region r(2);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  ASSERT_EQ(mprotect(r.base + 4 * page, page, PROT_NONE), 0);
  RemoteMemory mem(getpid());
  ChunkCache c(mem, read_maps(getpid()));
  uint8_t b[64];
  ASSERT_TRUE(c.read(r.at(0), b, sizeof b));  // first caches [chunk start, hole)
  EXPECT_TRUE(same(b, r.base, sizeof b));
  ASSERT_TRUE(c.read(r.at(5 * page + 8), b, sizeof b));  // the mapping after the hole, same chunk
  EXPECT_TRUE(same(b, r.base + 5 * page + 8, sizeof b));
  EXPECT_FALSE(c.read(r.at(4 * page + 8), b, 8));
  EXPECT_FALSE(c.read(r.at(4 * page - 8), b, 16));
  EXPECT_EQ(c.view(r.at(4 * page), 8), nullptr);
  ASSERT_TRUE(c.read(r.at(3 * page), b, sizeof b));  // and the first part still reads
  EXPECT_TRUE(same(b, r.base + 3 * page, sizeof b));
}

// Memory the target maps after the cache took its maps is still read (the
// maps are re-read); memory unmapped since is refused, not a crash.
TEST(ChunkCache, MapsThatChangeDuringTheRead) {
  RemoteMemory mem(getpid());
  ChunkCache c(mem, read_maps(getpid()));
  Region later(1);
  uint8_t b[32];
  ASSERT_TRUE(c.read(later.at(100), b, sizeof b));
  EXPECT_TRUE(same(b, later.base + 100, sizeof b));
  EXPECT_TRUE(c.mapped(later.at(0)));
  EXPECT_FALSE(c.read(0x10, b, 8));
  EXPECT_FALSE(c.read(~uint64_t{0} - 4, b, 8));  // wraps
  EXPECT_FALSE(c.target_gone());
}

TEST(ChunkCache, ReadBudgetIsEnforced) {
  Region r(8);
  RemoteMemory mem(getpid());
  ChunkCache c(mem, read_maps(getpid()));
  c.set_read_limit(3 * kChunk);
  uint8_t b[8];
  int ok = 0;
  for (size_t i = 0; i < 8; ++i) ok += c.read(r.at(i * kChunk), b, sizeof b);
  EXPECT_EQ(ok, 3);
  EXPECT_TRUE(c.read_limit_hit());
  EXPECT_LE(mem.bytes_read(), 3 * kChunk);
}

TEST(ChunkCache, EvictionKeepsResultsCorrect) {
  Region r(16);
  RemoteMemory mem(getpid());
  ChunkCache c(mem, read_maps(getpid()), kChunk, 3 * kChunk);  // room for 3 chunks
  uint8_t b[16];
  for (int pass = 0; pass < 3; ++pass)
    for (size_t i = 0; i < 16; ++i) {
      const size_t off = i * kChunk + 1000 + static_cast<size_t>(pass);
      ASSERT_TRUE(c.read(r.at(off), b, sizeof b));
      ASSERT_TRUE(same(b, r.base + off, sizeof b)) << "chunk " << i << " pass " << pass;
    }
}

// holds() answers without a read: true for the chunks in the cache, false
// once one is evicted, and false for a chunk whose number shares its
// direct-mapped entry with a cached one (64 entries for 3 slots here).
TEST(ChunkCache, HoldsAnswersForCachedChunksOnlyAndReadsNothing) {
  Region r(80);
  RemoteMemory mem(getpid());
  ChunkCache c(mem, read_maps(getpid()), kChunk, 3 * kChunk);
  uint8_t b[8];
  EXPECT_FALSE(c.holds(r.at(0)));
  ASSERT_TRUE(c.read(r.at(0), b, sizeof b));
  ASSERT_TRUE(c.read(r.at(kChunk), b, sizeof b));
  const uint64_t calls = mem.syscalls();
  EXPECT_TRUE(c.holds(r.at(10)));
  EXPECT_TRUE(c.holds(r.at(kChunk + kChunk - 1)));  // not the last chunk read: found by its number
  EXPECT_FALSE(c.holds(r.at(2 * kChunk)));
  EXPECT_FALSE(c.holds(r.at(64 * kChunk + 10)));  // the same entry as chunk 0, another chunk
  EXPECT_EQ(mem.syscalls(), calls);
  for (size_t i = 2; i < 6; ++i) ASSERT_TRUE(c.read(r.at(i * kChunk), b, sizeof b));  // evicts chunks 0 and 1
  EXPECT_FALSE(c.holds(r.at(10)));
  EXPECT_TRUE(c.holds(r.at(5 * kChunk)));
  ASSERT_TRUE(c.read(r.at(64 * kChunk + 8), b, sizeof b));
  EXPECT_TRUE(same(b, r.base + 64 * kChunk + 8, sizeof b));
  EXPECT_TRUE(c.holds(r.at(64 * kChunk)));
  c.forget_contents();
  EXPECT_FALSE(c.holds(r.at(64 * kChunk)));
}

TEST(ChunkCache, ExitedTargetIsReported) {
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  RemoteMemory mem(child);
  auto maps = read_maps(child);
  ASSERT_FALSE(maps.empty());
  ChunkCache c(mem, maps);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  uint8_t b[8];
  EXPECT_FALSE(c.read(maps.front().start, b, sizeof b));
  EXPECT_TRUE(c.target_gone());
}

// Reads of addresses outside every mapping (a hostile word followed as a
// pointer) cost one failing syscall each only up to a bound: the CPython
// reader followed 1.1M such words of a list claiming 10M items, 620k
// syscalls, and ran out of its deadline.
TEST(ChunkCache, ReadsOutsideTheMappingsStopCostingSyscalls) {
  RemoteMemory mem(getpid());
  ChunkCache c(mem, read_maps(getpid()));
  const uint64_t calls = mem.syscalls();
  uint64_t v = 0;
  // From 1 TiB: unmapped in a normal build, ASan's PROT_NONE shadow gap in a
  // sanitized one (16 TiB, where this started, is ASan's readable shadow).
  for (uint64_t i = 0; i < 100000; ++i) ASSERT_FALSE(c.get(0x10000000000ull + i * 4096 * 17, v));
  EXPECT_LE(mem.syscalls() - calls, 300u);
  // Memory mapped since still reads (the maps are re-read, at most once per
  // 10 ms once the first few refreshes were spent on the junk).
  Region r(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  uint8_t b = 0;
  EXPECT_TRUE(c.get(r.at(5), b));
  EXPECT_EQ(b, r.base[5]);
}

// Part of a mapping unmapped after the maps were read (an allocator returning
// a block that shared one mapping with live objects): a chunk read that
// starts in the hole fails, yet the live part of that chunk still reads. The
// CPython walker lost a live GC list this way under ASan, whose allocator
// unmapped a freed block merged with the test's heap pages.
TEST(ChunkCache, AHoleUnmappedSinceTheMapsWereReadDoesNotHideTheRestOfItsChunk) {
  Region r(2);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  RemoteMemory mem(getpid());
  ChunkCache c(mem, read_maps(getpid()));
  ASSERT_EQ(munmap(r.base, page), 0);  // the chunk's first page
  uint8_t b[64];
  ASSERT_TRUE(c.read(r.at(5 * page), b, sizeof b));
  EXPECT_TRUE(same(b, r.base + 5 * page, sizeof b));
  EXPECT_FALSE(c.read(r.at(8), b, 8));
}

// Memory mapped after the maps were read, in a process that may no longer
// open files (the capture process once its target is open): the maps are
// read again through the target's kept descriptor. Opened by path, as they
// were, the re-read failed, the cache took the target for gone, and a
// CPython capture of a fast leak lost nine tenths of its heap.
TEST(ChunkCache, MapsAreReadAgainThroughTheKeptDescriptorWhenOpensAreRefused) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ProcFiles self(getpid());
    self.open_all();
    RemoteMemory mem(getpid());
    ChunkCache kept(mem, read_maps(getpid())), by_path(mem, read_maps(getpid()));
    kept.read_maps_from(self);
    // As the collectors build theirs: from the Target, its descriptor kept.
    std::string err;
    auto target = Target::open(getpid(), err);
    if (!target) _exit(15);
    ChunkCache of_target(*target);
    SeccompFilter no_opens(SCMP_ACT_ALLOW);
    no_opens.add(SCMP_ACT_ERRNO(EACCES), SCMP_SYS(openat));
    std::string why;
    if (!no_opens.load(why)) _exit(10);
    Region later(1);  // mapped now: in neither cache's maps
    uint8_t b[16];
    if (!kept.read(later.at(100), b, sizeof b) || !same(b, later.base + 100, sizeof b)) _exit(11);
    if (kept.target_gone()) _exit(12);
    if (!of_target.read(later.at(200), b, sizeof b) || !same(b, later.base + 200, sizeof b)) _exit(14);
    // Without it the re-read is refused: the guard this test is for.
    if (by_path.mapped(later.at(100))) _exit(13);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: filter, 11: not read through the descriptor, 12: taken for gone, "
                                       "13: opened by path under the filter, 14: a Target's cache not read through "
                                       "its descriptor, 15: Target::open";
}
