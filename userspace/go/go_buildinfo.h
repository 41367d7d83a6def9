// The Go version and module info a Go binary carries in .go.buildinfo.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "go/go_version.h"

namespace oomsnap {
class ElfFile;

struct GoBuildInfo {
  GoVersion version;
  std::string modinfo;  // sentinels stripped; may be empty
};

// nullopt when the file has no (valid) Go build info: not a Go binary.
// Uses the .go.buildinfo section, or a 16-byte aligned magic scan of the
// data segments when section headers are missing. Never throws on garbage.
std::optional<GoBuildInfo> read_go_buildinfo(const ElfFile& elf);

}  // namespace oomsnap
