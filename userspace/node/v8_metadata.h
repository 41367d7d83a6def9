// V8's postmortem metadata: the v8dbg_* constants a Node.js binary exports
// (tools/gen-postmortem-metadata.py in V8 writes them at build time). They
// describe this very build: tagging, class field offsets, instance types.
// Parsed from (name, value) pairs so that unit tests and the fuzzer feed it
// without an ELF file; every offset a walk uses is looked up here, never
// assumed, since fields move between V8 versions (JSFunction.shared: 24 in
// V8 11.3, 32 in 12.4).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace oomsnap {

struct V8Metadata {
  // v8dbg_<Name>, e.g. "TaggedSize", "HeapObjectTag" (values are 32-bit).
  std::map<std::string, int64_t, std::less<>> constants;
  // v8dbg_class_<Class>__<field>__<Type>, keyed "Class.field": the type
  // suffix is dropped because its spelling changed between versions
  // (Object in 11.3, Tagged_Object_ in 12.4).
  std::map<std::string, int64_t, std::less<>> fields;
  // v8dbg_type_<Class>__<INSTANCE_TYPE>: the instance type's value by its
  // enum name, and the class name by value (for naming what a walk finds).
  std::map<std::string, uint16_t, std::less<>> types;
  std::map<uint16_t, std::string> class_of_type;

  std::optional<int64_t> constant(std::string_view name) const;
  std::optional<int64_t> field(std::string_view cls, std::string_view field) const;
  std::optional<uint16_t> type(std::string_view instance_type) const;
};

// Limits for a crafted symbol table: real builds have 450-550 v8dbg symbols
// with names under 120 bytes.
constexpr size_t kMaxV8dbgSymbols = 4096;
constexpr size_t kMaxV8dbgName = 256;

// Parses the pairs (names with the v8dbg_ prefix; others are ignored). A
// name that does not fit its pattern is skipped; a duplicate keeps the
// first. Returns nullopt with why when the set is not V8's (no TaggedSize,
// no HeapObject.map) or exceeds the limits.
std::optional<V8Metadata> parse_v8_metadata(const std::vector<std::pair<std::string, uint32_t>>& symbols,
                                            std::string& why);

// Whether the walker can read this build's tagged values: 8-byte untagged
// pointers (no pointer compression), heap objects tagged 1 in the low bits,
// Smis as 32-bit values in the upper half. Returns the reason when not.
std::optional<std::string> unsupported_tagging(const V8Metadata& md);

}  // namespace oomsnap
