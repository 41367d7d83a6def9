// MemoryImage and RemoteMemory over an image: the last gasp's buckets are
// read back by the live readers, so an image must answer exactly what a live
// process would have for the bytes it holds, and fail like unreadable memory
// for everything else.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <vector>

#include "core/memory_image.h"
#include "core/remote_memory.h"

using namespace oomsnap;

namespace {

std::vector<uint8_t> bytes(uint8_t first, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(first + i);
  return v;
}

}  // namespace

TEST(MemoryImage, ReadsInsideOnePieceOnly) {
  MemoryImage img;
  ASSERT_TRUE(img.add(0x1000, bytes(0, 16)));
  ASSERT_TRUE(img.add(0x1010, bytes(100, 16)));  // adjacent, but a read never spans two pieces
  uint8_t buf[16] = {};
  ASSERT_TRUE(img.read(0x1004, buf, 8));
  EXPECT_EQ(buf[0], 4);
  EXPECT_EQ(buf[7], 11);
  ASSERT_TRUE(img.read(0x1010, buf, 16));
  EXPECT_EQ(buf[15], 115);
  EXPECT_TRUE(img.read(0x1000, buf, 16));
  EXPECT_TRUE(img.read(0x1020, buf, 0)) << "an empty read at a piece's end";
  EXPECT_FALSE(img.read(0x1008, buf, 16)) << "a read across two pieces";
  EXPECT_FALSE(img.read(0xfff, buf, 2)) << "starts before the first piece";
  EXPECT_FALSE(img.read(0x1018, buf, 9)) << "runs past the last piece";
  EXPECT_FALSE(img.read(0x5000, buf, 1));
  EXPECT_FALSE(img.read(UINT64_MAX - 1, buf, 4)) << "wraps the address space";
  EXPECT_EQ(img.pieces(), 2u);
  EXPECT_EQ(img.bytes(), 32u);
}

TEST(MemoryImage, APieceAtTheSameAddressReplacesTheOld) {
  MemoryImage img;
  ASSERT_TRUE(img.add(0x2000, bytes(0, 64)));
  ASSERT_TRUE(img.add(0x2000, bytes(50, 8)));  // a bucket sent twice (a cycle walked twice): the last copy counts
  uint8_t b = 0;
  ASSERT_TRUE(img.read(0x2000, &b, 1));
  EXPECT_EQ(b, 50);
  EXPECT_FALSE(img.read(0x2008, &b, 1));
  EXPECT_EQ(img.pieces(), 1u);
  EXPECT_EQ(img.bytes(), 8u);
}

TEST(MemoryImage, APieceOverlappingAnotherIsRefused) {
  MemoryImage img;
  ASSERT_TRUE(img.add(0x3000, bytes(0, 256)));
  EXPECT_FALSE(img.add(0x3010, bytes(200, 4))) << "inside the one before";
  EXPECT_FALSE(img.add(0x2ff0, bytes(200, 0x20))) << "running into the one after";
  EXPECT_FALSE(img.add(UINT64_MAX - 2, bytes(1, 8))) << "wrapping the address space";
  EXPECT_TRUE(img.add(0x2ff0, bytes(200, 0x10))) << "ending where the next begins";
  EXPECT_TRUE(img.add(0x3100, bytes(7, 4))) << "beginning where the last ends";
  uint8_t buf[32];
  ASSERT_TRUE(img.read(0x3020, buf, 32));
  EXPECT_EQ(buf[0], 0x20);
  EXPECT_EQ(img.pieces(), 3u);
  EXPECT_EQ(img.bytes(), 256u + 0x10 + 4);
}

TEST(RemoteMemoryOverImage, ServesTheImageWithoutSyscallsAndFailsLikeUnreadableMemory) {
  auto img = std::make_shared<MemoryImage>();
  ASSERT_TRUE(img->add(0x4000, bytes(1, 32)));
  RemoteMemory mem{std::shared_ptr<const MemoryImage>(img)};
  EXPECT_EQ(mem.pid(), 0);
  uint64_t a = 0, b = 0, c = 0;
  std::vector<RemoteMemory::Request> reqs = {{0x4000, &a, 8}, {0x9000, &b, 8}, {0x4008, &c, 8}};
  EXPECT_EQ(mem.read_batch(reqs), 2u);
  EXPECT_TRUE(reqs[0].ok);
  EXPECT_FALSE(reqs[1].ok) << "a failed request does not stop the others";
  EXPECT_TRUE(reqs[2].ok);
  EXPECT_EQ(a & 0xff, 1u);
  EXPECT_EQ(c & 0xff, 9u);
  EXPECT_EQ(mem.last_errno(), EFAULT);
  EXPECT_EQ(mem.syscalls(), 0u);
  EXPECT_EQ(mem.bytes_read(), 16u);
}
