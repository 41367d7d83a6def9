#include "base/text.h"

#include <cstdio>
#include <cstring>

namespace oomsnap {

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string s;
  for (const auto& p : parts) {
    if (!s.empty()) s += sep;
    s += p;
  }
  return s;
}

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r (g++ defines _GNU_SOURCE): thread-safe, unlike strerror on
  // older C libraries; sinks are written from several threads.
  return strerror_r(err, buf, sizeof buf);
}

namespace {

// The length of the valid UTF-8 sequence at the start of `s` (RFC 3629: no
// overlong forms, surrogates or code points past U+10FFFF), 0 if invalid.
size_t utf8_sequence(std::string_view s) {
  const auto b = [&s](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else return 0;
  if (s.size() < n || b(1) < lo || b(1) > hi) return 0;
  for (size_t i = 2; i < n; ++i)
    if (b(i) < 0x80 || b(i) > 0xBF) return 0;
  return n;
}

}  // namespace

std::string utf8_prefix(std::string_view s, size_t max_bytes) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  while (!s.empty()) {
    const size_t n = utf8_sequence(s);
    const std::string_view piece = n ? s.substr(0, n) : kReplacement;
    if (out.size() + piece.size() > max_bytes) break;
    out += piece;
    s.remove_prefix(n ? n : 1);
  }
  return out;
}

}  // namespace oomsnap
