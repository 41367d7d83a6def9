// Naming an allocation site from its symbolized stack (go_site_name.h):
// runtime frames hidden on user stacks as runtime/pprof hides them, and
// runtime-only stacks named after the first frame that is not the allocator.
#include <gtest/gtest.h>

#include "go/go_site_name.h"

using namespace oomsnap;

TEST(GoSiteName, UserStackHidesLeadingRuntimeFrames) {
  // 1.26+ store mallocgc and newobject/makeslice/growslice before the user frame.
  auto s = name_go_site({"runtime.mallocgc", "runtime.growslice", "main.fill", "main.main", "runtime.main"});
  EXPECT_EQ(s.name, "main.fill");
  EXPECT_EQ(s.stack, (std::vector<std::string>{"main.fill", "main.main", "runtime.main"}));
  // A runtime frame that is not the allocator is hidden too, as pprof does.
  s = name_go_site({"runtime.makechan", "runtime.someHelper", "internal/runtime/maps.newarray", "net/http.serve"});
  EXPECT_EQ(s.name, "net/http.serve");
  EXPECT_EQ(s.stack.size(), 1u);
}

TEST(GoSiteName, GoroutineStackAllocationIsNamedMalg) {
  // Go 1.26: the g of a new goroutine; 1.19–1.25 store it from malg on.
  for (auto frames : {std::vector<std::string>{"runtime.mallocgc", "runtime.newobject", "runtime.malg",
                                               "runtime.newproc1", "runtime.newproc.func1", "runtime.systemstack"},
                      std::vector<std::string>{"runtime.mallocgcSmallScanNoHeader", "runtime.mallocgc",
                                               "runtime.newobject", "runtime.malg", "runtime.newproc1"},
                      std::vector<std::string>{"runtime.malg", "runtime.newproc1", "runtime.newproc.func1"}}) {
    auto s = name_go_site(frames);
    EXPECT_EQ(s.name, "runtime.malg");
    EXPECT_EQ(s.stack, frames) << "a runtime-only stack is printed whole, as pprof shows it";
  }
}

TEST(GoSiteName, RuntimeOnlyStacksSkipEveryAllocatorFamily) {
  const std::vector<std::string> allocators = {
      "runtime.mallocgc",           "runtime.mallocgcTiny",        "runtime.mallocgcSmallNoScanSC2",
      "runtime.mallocgcLarge",      "runtime.newobject",           "runtime.newarray",
      "runtime.makeslice",          "runtime.makeslice64",         "runtime.makeslicecopy",
      "runtime.growslice",          "runtime.moveSliceNoCapNoScan", "runtime.makemap_small",
      "runtime.makemap64",          "runtime.makeBucketArray",     "runtime.hashGrow",
      "runtime.mapassign_faststr",  "runtime.makechan",            "runtime.rawstring",
      "runtime.rawbyteslice",       "runtime.slicebytetostring",   "runtime.concatstring3",
      "runtime.convTstring",        "runtime.convT64",             "internal/runtime/maps.newarray",
      "internal/runtime/maps.(*table).grow",
  };
  for (const auto& a : allocators) {
    EXPECT_TRUE(is_go_allocator_frame(a)) << a;
    auto s = name_go_site({a, "runtime.allocm", "runtime.newm", "runtime.startm"});
    EXPECT_EQ(s.name, "runtime.allocm") << a;
  }
  for (const char* not_alloc : {"runtime.malg", "runtime.allocm", "runtime.gcBgMarkWorker", "runtime.main",
                                "runtime.newproc1", "main.mallocgc", "runtime.mapaccess1", "runtime.convI2I"})
    EXPECT_FALSE(is_go_allocator_frame(not_alloc)) << not_alloc;
  // reflect.New's allocation is a user stack: named as pprof shows it.
  auto s = name_go_site({"runtime.mallocgc", "runtime.newobject", "reflect.unsafe_New", "reflect.New", "main.f"});
  EXPECT_EQ(s.name, "reflect.unsafe_New");
}

TEST(GoSiteName, AllocatorOnlyOrEmptyStacks) {
  auto s = name_go_site({"runtime.mallocgc", "runtime.newobject"});
  EXPECT_EQ(s.name, "runtime.mallocgc");
  EXPECT_EQ(s.stack.size(), 2u);
  s = name_go_site({});
  EXPECT_EQ(s.name, "?");
  EXPECT_TRUE(s.stack.empty());
}
