#include <gtest/gtest.h>
#include <unistd.h>

#include "core/proc_info.h"

using namespace oomsnap;

TEST(ProcInfo, ParsesStatWithHostileComm) {
  // comm may contain spaces and ')' — the parser splits at the last ')'.
  std::string stat = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 123456 1000 10";
  auto id = parse_proc_stat(42, stat);
  ASSERT_TRUE(id);
  EXPECT_EQ(id->comm, "a) b (c)");
  EXPECT_EQ(id->start_time_ticks, 123456u);
  EXPECT_EQ(id->state, 'S');
  EXPECT_FALSE(id->exited());
  auto z = parse_proc_stat(42, "42 (x) Z 1 42 42 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 123456 1000 10");
  ASSERT_TRUE(z);
  EXPECT_TRUE(z->exited());
  // Killed a moment ago: still 'R', but PF_EXITING (0x4) in the flags (field
  // 9) says it is on its way out, its memory perhaps already gone. Seen as
  // "cannot read process ...: need root" in a capture begun in that window.
  auto exiting = parse_proc_stat(42, "42 (x) R 1 42 42 0 -1 4194564 100 0 0 0 5 3 0 0 20 0 1 0 123456 1000 10");
  ASSERT_TRUE(exiting);
  EXPECT_EQ(exiting->flags, 4194564u);
  EXPECT_TRUE(exiting->exited());
}

TEST(ProcInfo, RejectsTruncatedStat) {
  EXPECT_FALSE(parse_proc_stat(1, "1 (x) S 0 1"));
  EXPECT_FALSE(parse_proc_stat(1, "garbage"));
  EXPECT_FALSE(parse_proc_stat(1, ""));
}

TEST(ProcInfo, StatusFieldsInBytesMissingOmitted) {
  std::string status =
      "Name:\tx\nVmSize:\t  1000 kB\nVmRSS:\t 200 kB\nRssAnon:\t 150 kB\nRssFile:\t 50 kB\n"
      "RssShmem:\t 0 kB\nVmPTE:\t 12 kB\n";
  auto m = parse_proc_status(status);
  EXPECT_EQ(m.status, "ok");
  EXPECT_EQ(m.virtual_bytes.value(), 1000u * 1024);
  EXPECT_EQ(m.rss_bytes.value(), 200u * 1024);
  EXPECT_EQ(m.rss_shmem_bytes.value(), 0u);  // present and zero stays zero
  EXPECT_FALSE(m.swap_bytes.has_value());    // absent is omitted, never zero
  EXPECT_EQ(m.page_table_bytes.value(), 12u * 1024);
}

TEST(ProcInfo, KernelThreadStatusHasNoFields) {
  auto m = parse_proc_status("Name:\tkthreadd\nState:\tS\n");
  EXPECT_NE(m.status, "ok");
  EXPECT_FALSE(m.rss_bytes);
}

TEST(ProcInfo, ParsesMaps) {
  auto maps = parse_proc_maps(
      "00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon\n"
      "7ffd1000-7ffd2000 rw-p 00000000 00:00 0 \n"
      "7f00-7f10 r--p 00001000 08:02 99 /path with spaces/lib.so\n"
      "not a line\n");
  ASSERT_EQ(maps.size(), 3u);
  EXPECT_EQ(maps[0].start, 0x400000u);
  EXPECT_EQ(maps[0].inode, 173521u);
  EXPECT_EQ(maps[0].path, "/usr/bin/dbus-daemon");
  EXPECT_EQ(maps[1].path, "");
  EXPECT_EQ(maps[2].offset, 0x1000u);
  EXPECT_EQ(maps[2].path, "/path with spaces/lib.so");
}

TEST(ProcInfo, LiveSelf) {
  auto id = read_identity(getpid());
  ASSERT_TRUE(id);
  EXPECT_GT(id->start_time_ticks, 0u);
  auto m = read_process_memory(getpid());
  EXPECT_EQ(m.status, "ok");
  EXPECT_GT(m.rss_bytes.value_or(0), 0u);
  EXPECT_FALSE(read_maps(getpid()).empty());
  EXPECT_FALSE(read_identity(0));
  EXPECT_FALSE(read_identity(1 << 29));  // no such pid
}

TEST(ProcInfo, UserfaultfdRangesFromSmaps) {
  const std::string smaps =
      "55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0                          [heap]\n"
      "Size:                132 kB\n"
      "VmFlags: rd wr mr mw me ac sd\n"
      "7f4011bb6000-7f4011bba000 rw-p 00000000 00:00 0 \n"
      "Size:                 16 kB\n"
      "VmFlags: rd wr mr mw me ac sd um\n"
      "7f4011bc0000-7f4011bc1000 rw-p 00000000 00:00 0 \n"
      "VmFlags: rd wr mr mw me ac uw\n"   // write-protect only: reads do not wait
      "7f4011bd0000-7f4011bd2000 r--s 00000000 00:2a 77 /mnt/fuse/file\n"
      "VmFlags: rd mr me ms ui\n";
  auto r = parse_userfaultfd_ranges(smaps);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].start, 0x7f4011bb6000u);
  EXPECT_EQ(r[0].end, 0x7f4011bba000u);
  EXPECT_EQ(r[1].start, 0x7f4011bd0000u);
  EXPECT_TRUE(parse_userfaultfd_ranges("garbage\nVmFlags: um\n").empty());
  EXPECT_TRUE(read_userfaultfd_ranges(getpid()).empty());
}

// Skipped ranges fail at once, alone; the rest of a batch is read.
TEST(RemoteMemory, SkippedRangesAreNotRead) {
  static uint64_t a = 0x1111, b = 0x2222, c = 0x3333;
  RemoteMemory mem(getpid());
  mem.set_skip({{reinterpret_cast<uint64_t>(&b), reinterpret_cast<uint64_t>(&b) + 8}});
  uint64_t ra = 0, rb = 0, rc = 0;
  RemoteMemory::Request reqs[3] = {{reinterpret_cast<uint64_t>(&a), &ra, 8},
                                   {reinterpret_cast<uint64_t>(&b), &rb, 8},
                                   {reinterpret_cast<uint64_t>(&c), &rc, 8}};
  EXPECT_EQ(mem.read_batch(reqs), 2u);
  EXPECT_TRUE(reqs[0].ok);
  EXPECT_FALSE(reqs[1].ok);
  EXPECT_TRUE(reqs[2].ok);
  EXPECT_EQ(ra, 0x1111u);
  EXPECT_EQ(rb, 0u);
  EXPECT_EQ(rc, 0x3333u);
  EXPECT_EQ(mem.skipped_reads(), 1u);
  EXPECT_FALSE(mem.read(reinterpret_cast<uint64_t>(&b) + 4, &rb, 2));  // any overlap
}
