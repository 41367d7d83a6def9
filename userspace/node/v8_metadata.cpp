#include "node/v8_metadata.h"

namespace oomsnap {
namespace {

constexpr std::string_view kPrefix = "v8dbg_";

template <typename Map>
auto find_in(const Map& m, std::string_view key) -> std::optional<typename Map::mapped_type> {
  auto it = m.find(key);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

// Splits "A__B..." at the first "__": A and what follows the separator.
bool split_once(std::string_view s, std::string_view& head, std::string_view& tail) {
  auto at = s.find("__");
  if (at == std::string_view::npos || at == 0 || at + 2 >= s.size()) return false;
  head = s.substr(0, at);
  tail = s.substr(at + 2);
  return true;
}

}  // namespace

std::optional<int64_t> V8Metadata::constant(std::string_view name) const { return find_in(constants, name); }

std::optional<int64_t> V8Metadata::field(std::string_view cls, std::string_view name) const {
  std::string key;
  key.reserve(cls.size() + 1 + name.size());
  key.append(cls).append(".").append(name);
  return find_in(fields, key);
}

std::optional<uint16_t> V8Metadata::type(std::string_view instance_type) const {
  return find_in(types, instance_type);
}

std::optional<V8Metadata> parse_v8_metadata(const std::vector<std::pair<std::string, uint32_t>>& symbols,
                                            std::string& why) {
  if (symbols.size() > kMaxV8dbgSymbols) {
    why = std::to_string(symbols.size()) + " v8dbg_ symbols, more than the " + std::to_string(kMaxV8dbgSymbols) +
          " a V8 build has";
    return std::nullopt;
  }
  V8Metadata md;
  for (const auto& [full, raw] : symbols) {
    if (full.size() > kMaxV8dbgName || full.compare(0, kPrefix.size(), kPrefix) != 0) continue;
    const std::string_view name = std::string_view(full).substr(kPrefix.size());
    // The values are C ints: a negative one (none today) keeps its sign.
    const int64_t value = static_cast<int32_t>(raw);
    std::string_view head;
    if (name.starts_with("class_")) {
      std::string_view cls, rest, field, type;
      if (!split_once(name.substr(6), cls, rest)) continue;
      // The field name ends at its type suffix; a field without one keeps it all.
      field = split_once(rest, head, type) ? head : rest;
      md.fields.emplace(std::string(cls) + "." + std::string(field), value);
    } else if (name.starts_with("type_")) {
      std::string_view cls, type_name;
      if (!split_once(name.substr(5), cls, type_name) || raw > 0xffff) continue;
      md.types.emplace(std::string(type_name), static_cast<uint16_t>(raw));
      md.class_of_type.emplace(static_cast<uint16_t>(raw), std::string(cls));
    } else if (!name.empty()) {
      md.constants.emplace(std::string(name), value);
    }
  }
  if (!md.constant("TaggedSize") || !md.field("HeapObject", "map") || !md.field("Map", "instance_type")) {
    why = "the v8dbg_ symbols lack TaggedSize, HeapObject.map or Map.instance_type";
    return std::nullopt;
  }
  return md;
}

std::optional<std::string> unsupported_tagging(const V8Metadata& md) {
  const auto tagged = md.constant("TaggedSize");
  const auto pointer = md.constant("SystemPointerSize");
  if (tagged && pointer && *tagged == 4 && *pointer == 8)
    return "a pointer-compressed V8 build (TaggedSize 4): its heap holds 32-bit offsets from a cage base, "
           "which this reader does not decode";
  auto is = [&md](const char* name, int64_t want) { return md.constant(name) == want; };
  if (!is("TaggedSize", 8) || !is("SystemPointerSize", 8))
    return "an unknown V8 tagging scheme (TaggedSize " + (tagged ? std::to_string(*tagged) : "?") +
           ", SystemPointerSize " + (pointer ? std::to_string(*pointer) : "?") + ")";
  if (!is("HeapObjectTag", 1) || !is("HeapObjectTagMask", 3) || !is("SmiTag", 0) || !is("SmiTagMask", 1) ||
      !is("SmiShiftSize", 31))
    return "an unknown V8 tagging scheme (HeapObjectTag, HeapObjectTagMask, SmiTag, SmiTagMask or SmiShiftSize "
           "is not 1, 3, 0, 1 and 31)";
  return std::nullopt;
}

}  // namespace oomsnap
