// Finds HotSpot in a target: the mapped libjvm.so (opened through
// /proc/PID/map_files, so JVMs in containers work) and the addresses of its
// exported VMStructs symbols.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "core/collector.h"
#include "elf/elf_file.h"
#include "java/hotspot_vmstructs.h"

namespace oomsnap {

struct LibJvm {
  std::string path;  // as the target maps it
  uint64_t bias = 0;
  HotSpotSymbols symbols;
};

// nullopt when no libjvm.so is mapped (or it exports no gHotSpotVMStructs).
std::optional<LibJvm> find_libjvm(const Target& target);
// The first mapping (offset 0) of libjvm.so, the file find_libjvm opens.
bool is_libjvm_mapping(const Mapping& m);

}  // namespace oomsnap
