// A Go version as a binary states it ("go1.26.10"): parsed apart from the
// build info that carries it, so that what only needs the version (the
// last gasp's wire form) does not need the ELF reader.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace oomsnap {

struct GoVersion {
  int major = 0, minor = 0, patch = 0;
  std::string text;  // "go1.26.10" as the binary says it
  // Parses "go1.N", "go1.N.P", "go1.N.P-extra", "go1.NrcK"; false if not a Go version.
  static std::optional<GoVersion> parse(std::string_view s);
  bool at_least(int maj, int min) const { return major > maj || (major == maj && minor >= min); }
};

}  // namespace oomsnap
