// UntouchedBuffer: a worst-case-sized scratch buffer costs only the pages
// written (the Go goroutine census sizes its scratch for 100,000 goroutines).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include "base/huge_page_allocator.h"

using namespace oomsnap;

namespace {

size_t resident_pages(const uint8_t* p, size_t len) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((len + page - 1) / page);
  EXPECT_EQ(mincore(const_cast<uint8_t*>(p), len, vec.data()), 0);
  size_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

}  // namespace

TEST(UntouchedBuffer, OnlyThePagesWrittenAreFaultedIn) {
  constexpr size_t kSize = 6u << 20;
  UntouchedBuffer buf(kSize);
  ASSERT_NE(buf.data(), nullptr);
  EXPECT_EQ(buf.size(), kSize);
  EXPECT_EQ(resident_pages(buf.data(), kSize), 0u) << "nothing may be touched before it is written";
  buf.data()[0] = 1;
  const size_t after = resident_pages(buf.data(), kSize);
  EXPECT_GE(after, 1u);
  // One page, or one 2 MiB huge page where transparent huge pages serve it:
  // never the whole buffer, as a value-initialized std::vector would.
  EXPECT_LE(after * static_cast<size_t>(sysconf(_SC_PAGESIZE)), size_t{2} << 20);
  EXPECT_EQ(buf.data()[kSize - 1], 0) << "the kernel's pages come zeroed";
}

TEST(UntouchedBuffer, EmptyHasNoMapping) {
  UntouchedBuffer buf(0);
  EXPECT_EQ(buf.data(), nullptr);
  EXPECT_EQ(buf.size(), 0u);
}
