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

}  // namespace oomsnap
