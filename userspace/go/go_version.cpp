#include "go/go_version.h"

namespace oomsnap {
namespace {

bool parse_int(std::string_view& s, int& out) {
  size_t i = 0;
  long v = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9' && i < 9) v = v * 10 + (s[i++] - '0');
  if (i == 0 || (i < s.size() && s[i] >= '0' && s[i] <= '9')) return false;
  out = static_cast<int>(v);
  s.remove_prefix(i);
  return true;
}

}  // namespace

std::optional<GoVersion> GoVersion::parse(std::string_view s) {
  GoVersion v;
  std::string_view r = s;
  if (r.substr(0, 2) != "go") return std::nullopt;
  r.remove_prefix(2);
  if (!parse_int(r, v.major)) return std::nullopt;
  if (r.empty() || r[0] != '.') return std::nullopt;
  r.remove_prefix(1);
  if (!parse_int(r, v.minor)) return std::nullopt;
  if (!r.empty() && r[0] == '.') {
    r.remove_prefix(1);
    if (!parse_int(r, v.patch)) return std::nullopt;
  }
  if (!r.empty()) {
    // Allowed suffixes: "rcK", "betaK", "-extra", " extra", "+extra".
    char c = r[0];
    bool ok = r.substr(0, 2) == "rc" || r.substr(0, 4) == "beta" || c == '-' || c == ' ' ||
              c == '+' || c == '_';
    if (!ok) return std::nullopt;
  }
  v.text = std::string(s);
  return v;
}

}  // namespace oomsnap
