// base/log_escape.h: target-controlled text in a log line.
#include "base/log_escape.h"

#include <gtest/gtest.h>

#include <string>

using oomsnap::printable;
using namespace std::string_literals;

TEST(LogEscape, PrintableAsciiIsUnchanged) {
  EXPECT_EQ(printable(""), "");
  EXPECT_EQ(printable("heapfixture"), "heapfixture");
  const std::string plain = "/kubepods/burstable/pod-1 (x) [y] {z} ~!@#$%^&*";
  EXPECT_EQ(printable(plain), plain);
}

TEST(LogEscape, NewlineCannotStartAForgedLine) {
  const std::string comm = "\n2026-12-01T00:00:00.000 info oomsnap: forged";
  const std::string out = printable(comm);
  EXPECT_EQ(out, "\\x0a2026-12-01T00:00:00.000 info oomsnap: forged");
  EXPECT_EQ(out.find('\n'), std::string::npos);
}

TEST(LogEscape, EveryControlByteAndDelAreEscaped) {
  EXPECT_EQ(printable("a\rb\tc\x1b[31md\x7f"), "a\\x0db\\x09c\\x1b[31md\\x7f");
  EXPECT_EQ(printable("x\0y"s), "x\\x00y");
  for (int c = 0; c < 0x20; ++c) {
    const std::string out = printable(std::string(1, static_cast<char>(c)));
    ASSERT_EQ(out.size(), 4u) << c;
    EXPECT_EQ(out.substr(0, 2), "\\x") << c;
  }
}

TEST(LogEscape, NonAsciiAndInvalidUtf8AreEscapedBytewise) {
  EXPECT_EQ(printable("caf\xc3\xa9"), "caf\\xc3\\xa9");
  EXPECT_EQ(printable("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(printable("a\xe2\x80\xa8" "b"), "a\\xe2\\x80\\xa8b");  // U+2028 LINE SEPARATOR
  EXPECT_EQ(printable("\xc2\x85"), "\\xc2\\x85");               // U+0085 NEXT LINE
}

// A backslash is doubled, so an escape in the output always came from a byte
// the escaping replaced, never from the text itself.
TEST(LogEscape, BackslashIsDoubled) {
  EXPECT_EQ(printable("\\x0a"), "\\\\x0a");
  EXPECT_NE(printable("\\x0a"), printable("\n"));
  EXPECT_EQ(printable("a\\b"), "a\\\\b");
}

TEST(LogEscape, OutputIsAlwaysPrintableAscii) {
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  for (char c : printable(all)) {
    EXPECT_GE(static_cast<unsigned char>(c), 0x20);
    EXPECT_LT(static_cast<unsigned char>(c), 0x7f);
  }
}

// one_line: the whole message's guard (the watch command's log format).
TEST(LogEscape, OneLineEscapesOnlyControlCharacters) {
  EXPECT_EQ(oomsnap::one_line("incident 1: victim 42 (\nFORGED)\r\x1b[2K\x7f"),
            "incident 1: victim 42 (\\x0aFORGED)\\x0d\\x1b[2K\\x7f");
  EXPECT_EQ(oomsnap::one_line("caf\xc3\xa9 a\\b"), "caf\xc3\xa9 a\\b");
  // What printable() made passes unchanged: nothing is escaped twice.
  const std::string escaped = printable("\n\\x0a\xff\t");
  EXPECT_EQ(oomsnap::one_line(escaped), escaped);
}
