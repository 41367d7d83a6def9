// utf8_prefix: a target's bytes made valid UTF-8 within a bound that the
// JSON encoder's replacements then cannot break.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/text.h"

using namespace oomsnap;

TEST(Utf8Prefix, ValidTextIsKeptAndCutAtACharacterBoundary) {
  EXPECT_EQ(utf8_prefix("plain", 100), "plain");
  EXPECT_EQ(utf8_prefix("plain", 3), "pla");
  EXPECT_EQ(utf8_prefix("", 3), "");
  const std::string euro = "\xE2\x82\xAC";  // U+20AC, 3 bytes
  EXPECT_EQ(utf8_prefix("a" + euro + euro, 5), "a" + euro);  // not half a euro
  const std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600, 4 bytes
  EXPECT_EQ(utf8_prefix(emoji + "z", 4), emoji);
}

TEST(Utf8Prefix, InvalidBytesBecomeTheReplacementCharacter) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_prefix("a\xFFz", 100), "a" + fffd + "z");
  EXPECT_EQ(utf8_prefix("\xC3", 100), fffd);                   // cut short
  EXPECT_EQ(utf8_prefix("\xC0\xAF", 100), fffd + fffd);        // overlong '/'
  EXPECT_EQ(utf8_prefix("\xED\xA0\x80", 100), fffd + fffd + fffd);  // a surrogate
  EXPECT_EQ(utf8_prefix("\xF4\x90\x80\x80", 100).substr(0, 3), fffd);  // past U+10FFFF
  EXPECT_EQ(utf8_prefix("\xFF\xFF", 4), fffd);  // a second would pass the bound
}

// The bound holds after JSON encoding with replacement: 200 bytes of
// invalid UTF-8 would have become 600.
TEST(Utf8Prefix, TheBoundHoldsThroughTheJsonEncoder) {
  const std::string hostile(300, '\xC3');
  const std::string cut = utf8_prefix(hostile, 200);
  EXPECT_LE(cut.size(), 200u);
  const std::string encoded = nlohmann::json(cut).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  EXPECT_EQ(nlohmann::json::parse(encoded).get<std::string>(), cut);
}
