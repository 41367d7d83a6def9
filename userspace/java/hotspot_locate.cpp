#include "java/hotspot_locate.h"

#include <unistd.h>


#include "elf/module_map.h"

namespace oomsnap {

bool is_libjvm_mapping(const Mapping& m) {
  if (m.offset != 0 || m.inode == 0) return false;
  auto slash = m.path.rfind('/');
  std::string base = slash == std::string::npos ? m.path : m.path.substr(slash + 1);
  return base == "libjvm.so" || base.rfind("libjvm.so ", 0) == 0;  // "libjvm.so (deleted)"
}

std::optional<LibJvm> find_libjvm(const Target& target) {
  for (const auto& m : target.maps()) {
    if (!is_libjvm_mapping(m)) continue;
    int fd = target.open_mapping(m);
    if (fd < 0) continue;
    LibJvm j;
    std::unique_ptr<ElfFile> elf;  // needed for the symbols only
    try {
      elf = ElfFile::open_fd(fd, m.path);
    } catch (const std::exception&) {
      ::close(fd);
      continue;
    }
    ::close(fd);
    auto bias = module_load_bias(*elf, target.maps(), m.inode);
    if (!bias) continue;
    j.bias = *bias;
    j.path = m.path;
    auto addr = [&](const char* name) -> uint64_t {
      auto s = elf->symbol(name);
      return s ? s->value + j.bias : 0;
    };
    HotSpotSymbols& y = j.symbols;
    y.structs = addr("gHotSpotVMStructs");
    if (!y.structs) continue;
    y.types = addr("gHotSpotVMTypes");
    y.int_constants = addr("gHotSpotVMIntConstants");
    y.long_constants = addr("gHotSpotVMLongConstants");
    y.struct_type_name = addr("gHotSpotVMStructEntryTypeNameOffset");
    y.struct_field_name = addr("gHotSpotVMStructEntryFieldNameOffset");
    y.struct_type_string = addr("gHotSpotVMStructEntryTypeStringOffset");
    y.struct_is_static = addr("gHotSpotVMStructEntryIsStaticOffset");
    y.struct_offset = addr("gHotSpotVMStructEntryOffsetOffset");
    y.struct_address = addr("gHotSpotVMStructEntryAddressOffset");
    y.struct_stride = addr("gHotSpotVMStructEntryArrayStride");
    y.type_type_name = addr("gHotSpotVMTypeEntryTypeNameOffset");
    y.type_size = addr("gHotSpotVMTypeEntrySizeOffset");
    y.type_superclass_name = addr("gHotSpotVMTypeEntrySuperclassNameOffset");
    y.type_stride = addr("gHotSpotVMTypeEntryArrayStride");
    y.int_name = addr("gHotSpotVMIntConstantEntryNameOffset");
    y.int_value = addr("gHotSpotVMIntConstantEntryValueOffset");
    y.int_stride = addr("gHotSpotVMIntConstantEntryArrayStride");
    y.long_name = addr("gHotSpotVMLongConstantEntryNameOffset");
    y.long_value = addr("gHotSpotVMLongConstantEntryValueOffset");
    y.long_stride = addr("gHotSpotVMLongConstantEntryArrayStride");
    return j;
  }
  return std::nullopt;
}

}  // namespace oomsnap
