// The Go version and module info a Go binary carries in .go.buildinfo.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace oomsnap {
class ElfFile;

struct GoVersion {
  int major = 0, minor = 0, patch = 0;
  std::string text;  // "go1.26.10" as the binary says it
  // Parses "go1.N", "go1.N.P", "go1.N.P-extra", "go1.NrcK"; false if not a Go version.
  static std::optional<GoVersion> parse(std::string_view s);
  bool at_least(int maj, int min) const { return major > maj || (major == maj && minor >= min); }
};

struct GoBuildInfo {
  GoVersion version;
  std::string modinfo;  // sentinels stripped; may be empty
};

// nullopt when the file has no (valid) Go build info: not a Go binary.
// Uses the .go.buildinfo section, or a 16-byte aligned magic scan of the
// data segments when section headers are missing. Never throws on garbage.
std::optional<GoBuildInfo> read_go_buildinfo(const ElfFile& elf);

}  // namespace oomsnap
