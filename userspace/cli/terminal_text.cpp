#include "cli/terminal_text.h"

#include <cstdint>

namespace oomsnap {
namespace {

// Length of the well-formed UTF-8 sequence at s[i] (1..4) and its code
// point, or 0 when the byte there does not start one (stray continuation
// byte, overlong form, surrogate, beyond U+10FFFF, cut short).
size_t decode_utf8(std::string_view s, size_t i, uint32_t& cp) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t c = b(0);
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  size_t len;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    cp = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    cp = c & 0x07;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // beyond U+10FFFF
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    const uint8_t cc = b(k);
    if (k == 1 ? (cc < lo || cc > hi) : (cc < 0x80 || cc > 0xBF)) return 0;
    cp = (cp << 6) | (cc & 0x3F);
  }
  return len;
}

bool unprintable(uint32_t cp) {
  return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) ||  // C0, DEL, C1
         cp == 0x2028 || cp == 0x2029 ||                            // line/paragraph separator
         cp == 0x200E || cp == 0x200F || cp == 0x061C ||            // direction marks
         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);  // bidi embeddings/isolates
}

}  // namespace

std::string terminal_safe(std::string_view s, size_t max_bytes) {
  std::string out;
  out.reserve(s.size() < 256 ? s.size() : 256);
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t len = decode_utf8(s, i, cp);
    const std::string_view piece = len == 0 || unprintable(cp) ? kReplacementChar : s.substr(i, len);
    if (out.size() + piece.size() > max_bytes) {
      out += "...(+" + std::to_string(s.size() - i) + " bytes)";
      break;
    }
    out += piece;
    i += len == 0 ? 1 : len;
  }
  return out;
}

std::string repair_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t len = decode_utf8(s, i, cp);
    if (len == 0) {
      out += kReplacementChar;
      ++i;
    } else {
      out.append(s.data() + i, len);
      i += len;
    }
  }
  return out;
}

}  // namespace oomsnap
