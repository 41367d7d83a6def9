#include "base/log_escape.h"

namespace oomsnap {
namespace {

void append_hex(std::string& out, unsigned char c) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += "\\x";
  out += kHex[c >> 4];
  out += kHex[c & 0xf];
}

}  // namespace

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\') out += "\\\\";
    else if (c < 0x20 || c >= 0x7f) append_hex(out, c);
    else out += ch;
  }
  return out;
}

std::string one_line(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) append_hex(out, c);
    else out += ch;
  }
  return out;
}

}  // namespace oomsnap
