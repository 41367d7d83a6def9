// Finding Node.js in a target: the module (the executable, or a shared
// libnode as Debian builds it) whose symbol table exports V8's v8dbg_*
// metadata, by symbols and never by name, read through /proc/PID/root and
// map_files like every other runtime's binary.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/remote_memory.h"
#include "core/target.h"
#include "node/v8_metadata.h"

namespace oomsnap {

struct V8Version {
  uint32_t major = 0, minor = 0, build = 0, patch = 0;
  std::string text() const;  // "12.4.254.21"
};

struct NodeRuntime {
  std::string module;  // the file that exports v8dbg_* (path as in the target's maps)
  uint64_t bias = 0;   // its load bias
  std::optional<V8Metadata> metadata;
  std::string metadata_error;  // why metadata is missing
  // V8's v8::internal::Version::major_ .. patch_, read from the file (they
  // are initialised data; the V8 API exports them).
  std::optional<V8Version> v8_version;
  // node::per_process::metadata in the target (0 when the symbol table has
  // none): its first member is versions.node, a std::string.
  uint64_t node_metadata_addr = 0;
};

// Whether a mapping is a shared libnode (Debian's nodejs links one).
bool is_libnode_mapping(const Mapping& m);

// The executable first, then each libnode mapping. nullopt when no module
// exports a v8dbg_ symbol: not a V8 embedder this reader knows.
std::optional<NodeRuntime> find_node_runtime(Target& target);

// process.versions.node ("22.23.5", without the "v") read from the live
// process: a std::string of at most 31 digits and dots. nullopt when the
// symbol is missing or what it holds is not a version.
std::optional<std::string> read_node_version(RemoteMemory& mem, const NodeRuntime& rt);

}  // namespace oomsnap
