// ChildStderr: a capture process's stderr as the parent logs it (capped,
// escaped, one log line per line, the rest counted).
#include <gtest/gtest.h>

#include <string>

#include "capture/child_stderr.h"

using oomsnap::ChildStderr;

TEST(ChildStderr, EachLineIsLoggedWithThePid) {
  ChildStderr e;
  e.add("first\nsec");
  e.add("ond\n");
  const auto lines = e.take_lines(42);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "capture process 42: first");
  EXPECT_EQ(lines[1], "capture process 42: second");
  EXPECT_TRUE(e.empty());
  EXPECT_TRUE(e.take_lines(42).empty());
}

TEST(ChildStderr, ControlBytesAndForgedLinesAreEscaped) {
  ChildStderr e;
  e.add("x\r[agent] fake\x1b[2J\x9b\n");
  const auto lines = e.take_lines(7);
  ASSERT_EQ(lines.size(), 1u);
  for (char c : lines[0]) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << lines[0];
  EXPECT_NE(lines[0].find("\\x0d"), std::string::npos) << lines[0];
}

TEST(ChildStderr, BytesOverTheCapAreDroppedAndCounted) {
  ChildStderr e(16);
  e.add(std::string(10, 'a'));
  e.add(std::string(1000, 'b'));
  EXPECT_EQ(e.dropped(), 994u);
  const auto lines = e.take_lines(9);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "capture process 9: aaaaaaaaaabbbbbb");
  EXPECT_EQ(lines[1], "capture process 9: 994 more bytes of its stderr dropped (at most 16 are logged per capture)");
  // The cap is per capture: the next one starts afresh.
  e.add("c\n");
  EXPECT_EQ(e.take_lines(9), std::vector<std::string>{"capture process 9: c"});
}
