// The goroutine unwinder on byte images: stacks built by hand over a real
// fixture's pclntab (its functions' SP deltas), so the arithmetic is checked
// without a live process, and hostile images end bounded.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

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

INSTANTIATE_TEST_SUITE_P(AllGo, GoUnwindTest, ::testing::Values("1.19", "1.23", "1.26", "1.27"),
                         [](const auto& i) {
                           std::string s = "go" + i.param;
                           for (char& c : s)
                             if (c == '.') c = '_';
                           return s;
                         });

}  // namespace
}  // namespace oomsnap
