// The goroutine unwinder on byte images: stacks built by hand over a real
// fixture's pclntab (its functions' SP deltas), so the arithmetic is checked
// without a live process, and hostile images end bounded.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <unistd.h>
#include <vector>

#include "core/remote_memory.h"

#include "go/go_g_layout.h"
#include "go/go_goroutine_census.h"
#include "go/go_goroutines.h"
#include "go/go_pclntab.h"
#include "go_fixture_util.h"

namespace oomsnap {
namespace {

struct Fixture {
  std::unique_ptr<ElfFile> elf;
  std::optional<GoPclntab> tab;
};

Fixture load(const std::string& v) {
  Fixture f;
  f.elf = testutil::open_elf(testutil::fixture_path(v, "default"));
  if (f.elf) f.tab.emplace(GoPclntab::from_elf(*f.elf));
  return f;
}

// A pc inside fn (past its prologue, where the frame is set up: the middle).
uint64_t mid(const GoPclntab& t, const char* fn) {
  auto f = t.find_func_by_name(fn);
  EXPECT_TRUE(f) << fn;
  return f ? f->entry + (f->end - f->entry) / 2 : 0;
}

void put(std::vector<uint8_t>& s, uint64_t off, uint64_t v) {
  if (s.size() < off + 8) s.resize(off + 8);
  std::memcpy(s.data() + off, &v, 8);
}

class GoUnwindTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoUnwindTest, FollowsSpDeltasToGoexit) {
  OOMSNAP_REQUIRE_FIXTURE(testutil::fixture_path(GetParam(), "default"));
  auto fx = load(GetParam());
  ASSERT_TRUE(fx.tab);
  const GoPclntab& t = *fx.tab;
  const uint64_t bias = 0x1000;  // runtime = link-time + bias, as in a PIE
  const uint64_t pc1 = mid(t, "runtime.gopark"), pc2 = mid(t, "main.parkChanRecv");
  const auto goexit = t.find_func_by_name("runtime.goexit");
  ASSERT_TRUE(goexit);
  auto f1 = t.frame_info(pc1), f2 = t.frame_info(pc2);
  ASSERT_TRUE(f1 && f2);
  ASSERT_FALSE(f1->top_frame);
  const uint64_t base = 0xc000100000;
  std::vector<uint8_t> stack;
  // gopark's frame, its return address into parkChanRecv, parkChanRecv's
  // frame, its return address: goexit + 1 (what newproc leaves).
  const uint64_t ra1 = f1->sp_delta;
  put(stack, ra1, pc2 + bias);
  const uint64_t ra2 = ra1 + 8 + f2->sp_delta;
  put(stack, ra2, goexit->entry + 1 + bias);
  stack.resize(ra2 + 64);
  auto u = unwind_go_stack(t, bias, pc1 + bias, base, 0, base, stack, 128);
  EXPECT_TRUE(u.ok);
  EXPECT_FALSE(u.truncated);
  EXPECT_EQ(u.pcs, (std::vector<uint64_t>{pc1 + bias, pc2 + bias, goexit->entry + 1 + bias}));

  // A frame at its function's entry is stored as entry + 1 (tracebackPCs).
  auto e = t.find_func_by_name("main.parkChanRecv");
  std::vector<uint8_t> fresh;
  put(fresh, 0, goexit->entry + 1 + bias);
  u = unwind_go_stack(t, bias, e->entry + bias, base, 0, base, fresh, 128);
  ASSERT_EQ(u.pcs.size(), 2u);
  EXPECT_EQ(u.pcs[0], e->entry + 1 + bias);

  // The window ends before the next return address: truncated, not read past.
  std::vector<uint8_t> shortstack(stack.begin(), stack.begin() + static_cast<std::ptrdiff_t>(ra2));
  u = unwind_go_stack(t, bias, pc1 + bias, base, 0, base, shortstack, 128);
  EXPECT_TRUE(u.truncated);
  EXPECT_EQ(u.pcs.size(), 2u);

  // Depth cap.
  u = unwind_go_stack(t, bias, pc1 + bias, base, 0, base, stack, 1);
  EXPECT_TRUE(u.truncated);
  EXPECT_EQ(u.pcs.size(), 1u);
}

// The frame-pointer chain cross-checks the SP deltas: every frame with a
// frame saved the caller's BP just below its return address, and BP points
// at that slot. Agreement checks each frame; a torn or crafted chain (a stack
// rewritten under us, an SP delta that is wrong) is refused, not followed.
TEST_P(GoUnwindTest, FramePointerChainCrossChecksSpDeltas) {
  OOMSNAP_REQUIRE_FIXTURE(testutil::fixture_path(GetParam(), "default"));
  auto fx = load(GetParam());
  ASSERT_TRUE(fx.tab);
  const GoPclntab& t = *fx.tab;
  const uint64_t pc1 = mid(t, "runtime.gopark"), pc2 = mid(t, "main.parkChanRecv");
  const auto goexit = t.find_func_by_name("runtime.goexit");
  ASSERT_TRUE(goexit);
  auto f1 = t.frame_info(pc1), f2 = t.frame_info(pc2);
  ASSERT_TRUE(f1 && f2);
  ASSERT_GE(f1->sp_delta, 8);
  ASSERT_GE(f2->sp_delta, 8);
  ASSERT_FALSE(f1->assembly);
  const uint64_t base = 0xc000300000;
  const uint64_t ra1 = f1->sp_delta, slot1 = ra1 - 8;
  const uint64_t sp2 = ra1 + 8, ra2 = sp2 + f2->sp_delta, slot2 = ra2 - 8;
  std::vector<uint8_t> stack;
  put(stack, ra1, pc2);
  put(stack, ra2, goexit->entry + 1);
  put(stack, slot1, base + slot2);  // gopark's prologue saved parkChanRecv's BP
  put(stack, slot2, 0);             // and parkChanRecv's, whatever goexit's was
  stack.resize(ra2 + 64);

  auto u = unwind_go_stack(t, 0, pc1, base, base + slot1, base, stack, 128);
  EXPECT_TRUE(u.ok);
  EXPECT_FALSE(u.fp_mismatch);
  EXPECT_EQ(u.fp_checked, 2u);
  EXPECT_EQ(u.pcs.size(), 3u);

  // The saved BP is not where the SP deltas put the frame: refused.
  u = unwind_go_stack(t, 0, pc1, base, base + slot1 + 8, base, stack, 128);
  EXPECT_FALSE(u.ok);
  EXPECT_TRUE(u.fp_mismatch);
  EXPECT_TRUE(u.pcs.size() <= 1u);

  // The chain breaks one frame up (the stack was rewritten under us, or the
  // return address was planted without its frame): refused at that frame.
  auto torn = stack;
  put(torn, slot1, base + slot2 + 32);
  u = unwind_go_stack(t, 0, pc1, base, base + slot1, base, torn, 128);
  EXPECT_FALSE(u.ok);
  EXPECT_TRUE(u.fp_mismatch);
  EXPECT_EQ(u.fp_checked, 1u);

  // A BP pointing below the window is compared, never read.
  u = unwind_go_stack(t, 0, pc1, base, base - 8, base, stack, 128);
  EXPECT_TRUE(u.fp_mismatch);

  // No saved BP (a goroutine in a syscall before Go 1.23): not cross-checked.
  u = unwind_go_stack(t, 0, pc1, base, 0, base, torn, 128);
  EXPECT_TRUE(u.ok);
  EXPECT_EQ(u.fp_checked, 0u);
}

// `go parkArg(i)` runs in a compiler-made wrapper: unwound through, left out
// of the stack as the runtime's tracebackPCs leaves it out, unless the
// wrapper called a panic.
TEST_P(GoUnwindTest, WrapperFramesAreLeftOutAsTheRuntimeDoes) {
  OOMSNAP_REQUIRE_FIXTURE(testutil::fixture_path(GetParam(), "default"));
  auto fx = load(GetParam());
  ASSERT_TRUE(fx.tab);
  const GoPclntab& t = *fx.tab;
  const int minor = std::stoi(GetParam().substr(2));
  const uint8_t wrapper_id = go_func_id_wrapper(minor);
  ASSERT_NE(wrapper_id, 0);
  const char* wrapper_name = minor >= 22 ? "main.runGoroutines.gowrap1" : "main.runGoroutines.func1";
  const auto goexit = t.find_func_by_name("runtime.goexit");
  ASSERT_TRUE(goexit);
  // leaf -> ... -> wrapper -> goexit + 1, each frame its SP delta long.
  auto build = [&](std::vector<uint64_t> pcs, std::vector<uint8_t>& stack) {
    uint64_t off = 0;
    for (size_t i = 0; i < pcs.size(); ++i) {
      off += t.frame_info(pcs[i])->sp_delta;
      put(stack, off, i + 1 < pcs.size() ? pcs[i + 1] : goexit->entry + 1);
      off += 8;
    }
    stack.resize(off + 64);
  };
  const uint64_t base = 0xc000300000;
  const uint64_t park = mid(t, "runtime.gopark"), arg = mid(t, "main.parkArg"), wrap = mid(t, wrapper_name);
  std::vector<uint8_t> stack;
  build({park, arg, wrap}, stack);
  auto u = unwind_go_stack(t, 0, park, base, 0, base, stack, 128, nullptr, wrapper_id);
  EXPECT_TRUE(u.ok);
  EXPECT_EQ(u.pcs, (std::vector<uint64_t>{park, arg, goexit->entry + 1}));
  // Without the wrapper's funcID nothing is left out.
  u = unwind_go_stack(t, 0, park, base, 0, base, stack, 128, nullptr, 0);
  EXPECT_EQ(u.pcs, (std::vector<uint64_t>{park, arg, wrap, goexit->entry + 1}));
  // A wrapper that called a panic stays: it is where the panic happened.
  const uint64_t panic = mid(t, "runtime.gopanic");
  std::vector<uint8_t> panicking;
  build({panic, wrap}, panicking);
  u = unwind_go_stack(t, 0, panic, base, 0, base, panicking, 128, nullptr, wrapper_id);
  EXPECT_EQ(u.pcs, (std::vector<uint64_t>{panic, wrap, goexit->entry + 1}));
}

TEST_P(GoUnwindTest, HostileStacksEndBounded) {
  OOMSNAP_REQUIRE_FIXTURE(testutil::fixture_path(GetParam(), "default"));
  auto fx = load(GetParam());
  ASSERT_TRUE(fx.tab);
  const GoPclntab& t = *fx.tab;
  const uint64_t pc = mid(t, "main.parkChanRecv");
  auto f = t.frame_info(pc);
  ASSERT_TRUE(f);
  const uint64_t base = 0xc000200000;
  // Every return address is the same pc: a cycle through ever higher frames,
  // stopped by the depth cap or the end of the bytes.
  std::vector<uint8_t> loop(1 << 16);
  for (uint64_t off = 0; off + 8 <= loop.size(); off += 8) std::memcpy(loop.data() + off, &pc, 8);
  auto u = unwind_go_stack(t, 0, pc, base, 0, base, loop, 32);
  EXPECT_TRUE(u.truncated);
  EXPECT_LE(u.pcs.size(), 32u);
  // An address in no function: not ok, nothing invented.
  u = unwind_go_stack(t, 0, 0x10, base, 0, base, loop, 32);
  EXPECT_FALSE(u.ok);
  EXPECT_TRUE(u.pcs.empty());
  // Garbage return address after one good frame.
  std::vector<uint8_t> junk;
  put(junk, f->sp_delta, 0xdeadbeefdeadbeefull);
  u = unwind_go_stack(t, 0, pc, base, 0, base, junk, 32);
  EXPECT_FALSE(u.ok);
  EXPECT_EQ(u.pcs.size(), 1u);
}

// The census's re-check and re-reads on a fake runtime in this process's own
// memory (read with process_vm_readv like any target): allgs, one g, and the
// stacks it can sit on. The target changes at a chosen point between two of
// the census's reads (RemoteMemory's after-batch hook), as a GC does when it
// copies a parked goroutine's stack or stops a running one to scan it.
class FakeRuntime {
 public:
  static constexpr size_t kStackBytes = 4096, kUsedFrom = 1024;  // sp = lo + kUsedFrom

  FakeRuntime(const GoPclntab& t, const GoGLayout& l) : l_(l), g_(l.size), stacks_(2) {
    pc_park_ = mid(t, "runtime.gopark");
    pc_site_ = mid(t, "main.parkChanRecv");
    goexit_ = t.find_func_by_name("runtime.goexit")->entry;
    // One parked stack image: gopark's frame, its return into parkChanRecv,
    // parkChanRecv's frame, its return to goexit + 1 (what newproc leaves).
    auto f1 = t.frame_info(pc_park_), f2 = t.frame_info(pc_site_);
    d1_ = f1->sp_delta;
    d2_ = f2->sp_delta;
    std::vector<uint8_t> used;
    put(used, f1->sp_delta, pc_site_);
    put(used, f1->sp_delta + 8 + f2->sp_delta, goexit_ + 1);
    used.resize(kStackBytes - kUsedFrom);
    for (auto& s : stacks_) {
      s.assign(kStackBytes, 0);
      std::copy(used.begin(), used.end(), s.begin() + kUsedFrom);
    }
    allgs_ = {addr(g_.data())};
    allglen_ = 1;
    allgptr_ = addr(allgs_.data());
    field(l.goid, 7);
    field(l.gopc, mid(t, "main.runGoroutines"));
    field(l.startpc, t.find_func_by_name("main.parkChanRecv")->entry);
    field(l.sched_pc, pc_park_);
    set_status(static_cast<uint32_t>(GoGStatus::kWaiting));
    g_[l.waitreason] = reason("chan receive");
    put_on_stack(0);
  }

  uint64_t addr(const void* p) const { return reinterpret_cast<uint64_t>(p); }
  void field(uint32_t off, uint64_t v) { std::memcpy(g_.data() + off, &v, 8); }
  void set_status(uint32_t s) { std::memcpy(g_.data() + l_.atomicstatus, &s, 4); }
  // The GC's copystack: new bounds, then the saved sp on the new stack.
  void put_on_stack(int which) {
    on_ = which;
    const uint64_t lo = addr(stacks_[which].data());
    field(l_.stack_lo, lo);
    field(l_.stack_hi, lo + kStackBytes);
    field(l_.sched_sp, lo + kUsedFrom);
  }
  void move_stack() { put_on_stack(1 - on_); }
  // The frame-pointer chain of the current stack: sched.bp at gopark's BP
  // slot (just below its return address), that slot holding parkChanRecv's.
  // torn: the slot still holds an address on the other stack, as a stack
  // copystack has switched to but not yet fixed up does.
  void set_frame_pointers(bool torn) {
    const uint64_t sp = this->sp(), slot1 = sp + d1_ - 8, slot2 = sp + d1_ + 8 + d2_ - 8;
    field(l_.sched_bp, slot1);
    const uint64_t other = addr(stacks_[1 - on_].data()) + (slot2 - addr(stacks_[on_].data()));
    const uint64_t saved = torn ? other : slot2;
    std::memcpy(stacks_[on_].data() + (slot1 - addr(stacks_[on_].data())), &saved, 8);
  }
  uint64_t sp() const { return addr(stacks_[on_].data()) + kUsedFrom; }
  uint64_t g_addr() const { return addr(g_.data()); }
  uint8_t reason(std::string_view name) const {
    for (int r = 1; r < 256; ++r)
      if (go_wait_reason_name(l_.minor, static_cast<uint8_t>(r)) == name) return static_cast<uint8_t>(r);
    ADD_FAILURE() << "no wait reason " << name;
    return 0;
  }
  void set_reason(std::string_view name) { g_[l_.waitreason] = reason(name); }
  GoGoroutineAddrs addrs() const { return {addr(&allglen_), addr(&allgptr_)}; }
  std::vector<uint64_t> want_pcs() const { return {pc_park_, pc_site_, goexit_ + 1}; }

 private:
  const GoGLayout& l_;
  std::vector<uint8_t> g_;
  std::vector<std::vector<uint8_t>> stacks_;
  std::vector<uint64_t> allgs_;
  uint64_t allglen_ = 0, allgptr_ = 0;
  uint64_t pc_park_ = 0, pc_site_ = 0, goexit_ = 0;
  int32_t d1_ = 0, d2_ = 0;
  int on_ = 0;
};

bool reads(std::span<const RemoteMemory::Request> batch, uint64_t addr) {
  for (const auto& r : batch)
    if (r.addr == addr) return true;
  return false;
}

class GoCensusUnderGc : public ::testing::Test {
 protected:
  void SetUp() override {
    OOMSNAP_REQUIRE_FIXTURE(testutil::fixture_path("1.26", "default"));
    fx_ = load("1.26");
    ASSERT_TRUE(fx_.tab);
    layout_ = *go_g_layout_for(26);
    rt_ = std::make_unique<FakeRuntime>(*fx_.tab, layout_);
  }
  GoGoroutineRead read() {
    return read_go_goroutines(mem_, rt_->addrs(), layout_, *fx_.tab, 0, CaptureOptions{},
                              Deadline(std::chrono::seconds(10)));
  }
  GoroutineCensus census(const GoGoroutineRead& r) { return build_goroutine_census(r, *fx_.tab, 0, 26, 100); }
  // Calls f after each batch that reads the goroutine's stack (at its sp then).
  void after_stack_reads(std::function<void(int)> f) {
    mem_.set_after_batch([this, f, n = 0](std::span<const RemoteMemory::Request> b) mutable {
      if (reads(b, rt_->sp())) f(n++);
    });
  }
  // Complete, the one goroutine with its whole stack, after `rereads` re-reads.
  void expect_whole_after(const GoGoroutineRead& r, uint64_t rereads) {
    const auto c = census(r);
    ASSERT_EQ(c.status, SnapshotStatus::kComplete) << c.reason;
    EXPECT_EQ(r.stacks_reread, rereads);
    EXPECT_EQ(c.stacks_reread, rereads);
    ASSERT_LT(r.goroutines[0].stack, r.stacks.size());
    EXPECT_EQ(r.stacks[r.goroutines[0].stack], rt_->want_pcs());
    EXPECT_EQ(r.goroutines[0].missing, GoStackMissing::kNone);
  }
  Fixture fx_;
  GoGLayout layout_;
  std::unique_ptr<FakeRuntime> rt_;
  RemoteMemory mem_{getpid()};
};

TEST_F(GoCensusUnderGc, QuietGoroutineIsCompleteWithItsStack) {
  const auto r = read();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  ASSERT_EQ(r.goroutines.size(), 1u);
  ASSERT_LT(r.goroutines[0].stack, r.stacks.size());
  EXPECT_EQ(r.stacks[r.goroutines[0].stack], rt_->want_pcs());
  EXPECT_EQ(r.stacks_reread, 0u);
  EXPECT_EQ(census(r).status, SnapshotStatus::kComplete);
}

// The GC shrinks the parked goroutine's stack between the stack read and the
// re-check: same goroutine, same pc, new sp. Read again, it is whole.
TEST_F(GoCensusUnderGc, StackMovedOnceIsReadAgain) {
  after_stack_reads([this](int n) {
    if (n == 0) rt_->move_stack();
  });
  expect_whole_after(read(), 1);
}

// A stack that moves after every read: bounded re-reads, then partial, and
// the reason says the stack moved, not that the goroutine ran.
TEST_F(GoCensusUnderGc, StackThatKeepsMovingIsPartialAndSaysSo) {
  int moves = 0;
  after_stack_reads([&](int) {
    rt_->move_stack();
    ++moves;
  });
  const auto r = read();
  EXPECT_EQ(moves, 5);  // the first read and 4 re-reads
  EXPECT_EQ(r.stacks_reread, 4u);
  EXPECT_EQ(r.goroutines[0].stack, kNoStack);
  EXPECT_EQ(r.goroutines[0].missing, GoStackMissing::kStackKeptMoving);
  const auto c = census(r);
  EXPECT_EQ(c.status, SnapshotStatus::kPartial);
  EXPECT_NE(c.reason.find("1 parked goroutines' stacks moved under every re-read"), std::string::npos) << c.reason;
  EXPECT_EQ(c.reason.find("changed state"), std::string::npos) << c.reason;
}

// A parked goroutine that really ran between the reads stays partial, with
// that reason, and is not read again.
TEST_F(GoCensusUnderGc, GoroutineThatRanIsPartialAndSaysSo) {
  after_stack_reads([this](int n) {
    if (n > 0) return;
    rt_->set_status(static_cast<uint32_t>(GoGStatus::kRunnable));
    rt_->move_stack();
  });
  const auto r = read();
  EXPECT_EQ(r.stacks_reread, 0u);
  EXPECT_EQ(r.goroutines[0].stack, kNoStack);
  EXPECT_EQ(r.goroutines[0].missing, GoStackMissing::kChangedState);
  const auto c = census(r);
  EXPECT_EQ(c.status, SnapshotStatus::kPartial);
  EXPECT_NE(c.reason.find("1 parked goroutines changed state"), std::string::npos) << c.reason;
}

// A running goroutine the GC stopped to scan it (suspendG leaves it
// _Gwaiting, "preempted"), or one in a GC wait on the system stack, is
// running: back on a CPU by the re-check, and no inconsistency.
TEST_F(GoCensusUnderGc, GoroutineStoppedForTheGcCountsAsRunning) {
  for (const char* why : {"preempted", "GC assist marking", "garbage collection scan"}) {
    SCOPED_TRACE(why);
    rt_ = std::make_unique<FakeRuntime>(*fx_.tab, layout_);
    rt_->set_reason(why);
    after_stack_reads([this](int n) {
      if (n == 0) rt_->set_status(static_cast<uint32_t>(GoGStatus::kRunning));
    });
    const auto r = read();
    EXPECT_EQ(r.goroutines[0].missing, GoStackMissing::kNone);
    const auto c = census(r);
    EXPECT_EQ(c.status, SnapshotStatus::kComplete) << c.reason;
  }
  // A real park that ends is still a change.
  rt_ = std::make_unique<FakeRuntime>(*fx_.tab, layout_);
  after_stack_reads([this](int n) {
    if (n == 0) rt_->set_status(static_cast<uint32_t>(GoGStatus::kRunning));
  });
  EXPECT_EQ(census(read()).status, SnapshotStatus::kPartial);
}

// Caught in the middle of copystack (the scan bit set, the new bounds
// written, the saved sp still on the old stack): read again once the copy is
// done, not left without a stack.
TEST_F(GoCensusUnderGc, GoroutineCaughtMidCopyIsReadAgain) {
  const uint64_t old_sp = rt_->sp();
  rt_->move_stack();
  rt_->field(layout_.sched_sp, old_sp);
  rt_->set_status(static_cast<uint32_t>(GoGStatus::kWaiting) | kGoGScanBit);
  mem_.set_after_batch([this, done = false](std::span<const RemoteMemory::Request> b) mutable {
    if (done || !reads(b, rt_->g_addr())) return;
    done = true;
    rt_->put_on_stack(1);  // the copy completes: sp on the new stack
    rt_->set_status(static_cast<uint32_t>(GoGStatus::kWaiting));
  });
  expect_whole_after(read(), 1);
}

// Read after copystack switched stacks but before it fixed the frame
// pointers in the new one (the GC holds the g: the scan bit): the chain
// disagrees. Read again once the GC let go, it agrees and the stack counts.
TEST_F(GoCensusUnderGc, StackCaughtBeforeItsFramePointersAreFixedIsReadAgain) {
  rt_->set_frame_pointers(/*torn=*/true);
  rt_->set_status(static_cast<uint32_t>(GoGStatus::kWaiting) | kGoGScanBit);
  after_stack_reads([this](int n) {
    if (n > 0) return;
    rt_->set_frame_pointers(/*torn=*/false);
    rt_->set_status(static_cast<uint32_t>(GoGStatus::kWaiting));
  });
  expect_whole_after(read(), 1);
}

// The same torn chain without the GC: a goroutine that woke, ran and parked
// again at the same pc and sp between the reads (a GC worker, a worker
// loop). Its place is unchanged, its stack was read while it ran: read again.
TEST_F(GoCensusUnderGc, GoroutineThatRanBetweenTwoParksIsReadAgain) {
  rt_->set_frame_pointers(/*torn=*/true);
  after_stack_reads([this](int n) {
    if (n == 0) rt_->set_frame_pointers(/*torn=*/false);
  });
  expect_whole_after(read(), 1);
}

// A chain that stays torn through every re-read is a stack that lies:
// bounded re-reads, then no stack and the frame-pointer reason.
TEST_F(GoCensusUnderGc, ChainThatStaysTornIsRefused) {
  rt_->set_frame_pointers(/*torn=*/true);
  const auto r = read();
  EXPECT_EQ(r.stacks_reread, 4u);
  EXPECT_EQ(r.goroutines[0].stack, kNoStack);
  EXPECT_EQ(r.goroutines[0].missing, GoStackMissing::kFramePointers);
  const auto c = census(r);
  EXPECT_EQ(c.status, SnapshotStatus::kPartial);
  EXPECT_NE(c.reason.find("1 goroutine stacks disagree with their frame pointers"), std::string::npos) << c.reason;
  // An intact chain is checked and agrees.
  rt_->set_frame_pointers(/*torn=*/false);
  const auto ok = read();
  EXPECT_EQ(census(ok).status, SnapshotStatus::kComplete);
  ASSERT_LT(ok.goroutines[0].stack, ok.stacks.size());
}

// A runnable goroutine (preempted in a tight loop, so at the same place
// each time) whose stack was read while it ran in between: no stack, as any
// running goroutine, and no partial; not read again.
TEST_F(GoCensusUnderGc, RunnableGoroutineWithATornStackCountsWithoutOne) {
  rt_->set_status(static_cast<uint32_t>(GoGStatus::kRunnable));
  rt_->set_frame_pointers(/*torn=*/true);
  const auto r = read();
  EXPECT_EQ(r.stacks_reread, 0u);
  EXPECT_EQ(r.goroutines[0].stack, kNoStack);
  EXPECT_EQ(r.goroutines[0].missing, GoStackMissing::kNone);
  EXPECT_EQ(census(r).status, SnapshotStatus::kComplete);
}

// The runtime's own goroutines (start in package runtime) are left out of
// the census, and so is what their stacks did: a GC worker that never holds
// still does not make the user's census partial.
TEST_F(GoCensusUnderGc, RuntimeGoroutinesStacksDoNotMakeThePartial) {
  rt_->field(layout_.startpc, fx_.tab->find_func_by_name("runtime.gcBgMarkWorker")->entry);
  rt_->set_frame_pointers(/*torn=*/true);
  const auto r = read();
  EXPECT_EQ(r.goroutines[0].missing, GoStackMissing::kFramePointers);
  const auto c = census(r);
  EXPECT_EQ(c.status, SnapshotStatus::kComplete) << c.reason;
  EXPECT_EQ(c.system, 1u);
  EXPECT_EQ(c.total, 0u);
}

TEST(GoWaitReasons, TransientWaitsAreTheRuntimesOwn) {
  for (int minor : {19, 21, 22, 23, 24, 25, 26, 27}) {
    SCOPED_TRACE(minor);
    int transient = 0;
    bool preempted = false, chan = false;
    for (int r = 0; r < 256; ++r) {
      const auto name = go_wait_reason_name(minor, static_cast<uint8_t>(r));
      const bool t = go_wait_is_transient(minor, static_cast<uint8_t>(r));
      transient += t;
      if (name == "preempted") preempted = t;
      if (name == "chan receive") chan = t;
      if (name == "sleep" || name == "select" || name == "sync.Mutex.Lock" || name == "semacquire" ||
          name == "GC worker (idle)" || name == "GC assist wait") {
        EXPECT_FALSE(t) << name;
      }
    }
    EXPECT_TRUE(preempted);
    EXPECT_FALSE(chan);
    // 1.19 lacks the GC worker, mark termination and stop-the-world waits,
    // 1.21 the trace and flush ones.
    EXPECT_EQ(transient, minor == 19 ? 4 : minor == 21 ? 7 : 11);
  }
  EXPECT_FALSE(go_wait_is_transient(26, 0));
}

INSTANTIATE_TEST_SUITE_P(AllGo, GoUnwindTest, ::testing::Values("1.19", "1.23", "1.26", "1.27"),
                         [](const auto& i) {
                           std::string s = "go" + i.param;
                           for (char& c : s)
                             if (c == '.') c = '_';
                           return s;
                         });

}  // namespace
}  // namespace oomsnap
