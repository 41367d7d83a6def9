#include "node/v8_maps.h"

#include <algorithm>
#include <set>

namespace oomsnap {
namespace {

constexpr uint16_t kUnreadable = 0xffff;
bool tagged_pointer(uint64_t w) { return (w & 3) == 1 && w > 1; }

// The kinds the heap snapshot files under "code" (node-naming.md 3.2).
const std::set<std::string> kCodeClasses = {
    "Code", "InstructionStream", "BytecodeArray", "SharedFunctionInfo", "Script", "ScopeInfo", "FeedbackVector",
    "FeedbackCell", "AllocationSite", "ArrayBoilerplateDescription", "InterpreterData", "PreparseData",
    "RegExpBoilerplateDescription", "TemplateObjectDescription", "UncompiledDataWithoutPreparseData",
    "UncompiledDataWithPreparseData", "UncompiledDataWithoutPreparseDataWithJob",
    "UncompiledDataWithPreparseDataAndJob", "LoadHandler", "StoreHandler", "BytecodeWrapper", "CodeWrapper"};
// What the snapshot calls an object's shape (11.3+).
const std::set<std::string> kShapeClasses = {"Map", "DescriptorArray", "StrongDescriptorArray", "TransitionArray",
                                             "PrototypeInfo", "EnumCache"};

}  // namespace

V8NamingFacts v8_naming_facts(const V8Metadata& md, const V8TypeIds& ids, uint32_t v8_major, std::string& missing) {
  V8NamingFacts f;
  auto field = [&](const char* cls, const char* name, uint32_t& out) {
    if (auto v = md.field(cls, name)) out = static_cast<uint32_t>(*v);
    else missing += std::string(missing.empty() ? "" : ", ") + cls + "." + name;
  };
  auto type = [&](const char* name, uint16_t& out) {
    if (auto v = md.type(name)) out = *v;
    else missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  auto constant = [&](const char* name, int64_t& out) {
    if (auto v = md.constant(name)) out = *v;
    else missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  field("Map", "instance_type", f.map_instance_type);
  field("Map", "instance_size_in_words", f.map_instance_size_words);
  field("Map", "bit_field2", f.map_bit_field2);
  field("Map", "bit_field3", f.map_bit_field3);
  field("Map", "constructor_or_back_pointer", f.map_constructor);
  field("JSFunction", "shared", f.function_shared);
  field("SharedFunctionInfo", "name_or_scope_info", f.sfi_name);
  field("String", "length", f.string_length);
  field("SeqOneByteString", "chars", f.seq_one_byte_chars);
  field("SeqTwoByteString", "chars", f.seq_two_byte_chars);
  field("ConsString", "first", f.cons_first);
  field("ConsString", "second", f.cons_second);
  field("ThinString", "actual", f.thin_actual);
  type("JS_PROXY_TYPE", f.js_proxy);
  type("JS_BOUND_FUNCTION_TYPE", f.js_bound_function);
  type("JS_REG_EXP_TYPE", f.js_regexp);
  type("SYMBOL_TYPE", f.symbol);
  type("HEAP_NUMBER_TYPE", f.heap_number);
  type("SHARED_FUNCTION_INFO_TYPE", f.shared_function_info);
  f.scope_info = ids.scope_info;
  if (auto t = md.type("TUPLE2_TYPE")) f.tuple2 = *t;
  int64_t v = 0;
  constant("FirstNonstringType", v);
  f.first_nonstring = static_cast<uint16_t>(v);
  // The function range: exported from 12.4; before, read off the heap
  // snapshot generator's code (node-naming.md 2.1).
  if (auto a = md.constant("FirstJSFunctionType"), b = md.constant("LastJSFunctionType"); a && b) {
    f.js_function_first = static_cast<uint16_t>(*a), f.js_function_last = static_cast<uint16_t>(*b);
  } else if (v8_major == 10) {
    f.js_function_first = 0x811, f.js_function_last = 0x821;
  } else if (v8_major == 11) {
    f.js_function_first = 0x812, f.js_function_last = 0x822;
  } else {
    missing += std::string(missing.empty() ? "" : ", ") + "FirstJSFunctionType";
  }
  constant("StringRepresentationMask", f.rep_mask);
  constant("ConsStringTag", f.cons_tag);
  constant("SlicedStringTag", f.sliced_tag);
  constant("ThinStringTag", f.thin_tag);
  constant("SeqStringTag", f.seq_tag);
  constant("StringEncodingMask", f.enc_mask);
  constant("OneByteStringTag", f.one_byte_tag);
  f.scope_flags_u32 = ids.scope_flags_u32;
  f.scope_first_slot = ids.scope_position_always ? 0x30 : 0x20;
  f.scope_module_type = ids.scope_module_type;
  f.module_slot = ids.scope_module_count_at != 0;
  f.object_shapes = v8_major >= 11;
  const auto buffer_type = md.type("JS_ARRAY_BUFFER_TYPE");
  const auto length = md.field("JSArrayBuffer", "byte_length"), store = md.field("JSArrayBuffer", "backing_store");
  if (buffer_type && length && store && *length > 0 && *store > 0 && *length < 0x1000 && *store < 0x1000) {
    f.js_array_buffer = *buffer_type;
    f.buffer_length_at = static_cast<uint32_t>(*length), f.buffer_store_at = static_cast<uint32_t>(*store);
  }
  return f;
}

V8MapReader::V8MapReader(ChunkCache& cache, const V8Metadata& md, const V8TypeIds& ids, const V8NamingFacts& facts)
    : cache_(cache), md_(md), ids_(ids), f_(facts) {}

uint32_t V8MapReader::intern(const std::string& name) {
  auto [it, fresh] = name_ids_.try_emplace(name, static_cast<uint32_t>(names_.size()));
  if (fresh) names_.push_back(name);
  return it->second;
}

uint16_t V8MapReader::type_of(uint64_t tagged) {
  uint64_t map = 0;
  uint16_t type = 0;
  if (!tagged_pointer(tagged) || !cache_.get(tagged - 1, map) || !tagged_pointer(map) ||
      !cache_.get(map - 1 + f_.map_instance_type, type))
    return kUnreadable;
  return type;
}

bool V8MapReader::is_map(uint64_t tagged) {
  uint64_t meta = 0;
  if (!tagged_pointer(tagged) || !cache_.get(tagged - 1, meta) || !tagged_pointer(meta)) return false;
  if (meta_maps_.count(meta)) return true;
  // A meta map is its own map, and a map.
  uint64_t meta_map = 0;
  uint16_t type = 0;
  if (!cache_.get(meta - 1, meta_map) || meta_map != meta || !cache_.get(meta - 1 + f_.map_instance_type, type) ||
      type != ids_.map || meta_maps_.size() >= kMaxMetaMaps)
    return false;
  meta_maps_.insert(meta);
  return true;
}

const V8MapInfo* V8MapReader::lookup(uint64_t word) {
  if (auto it = maps_.find(word); it != maps_.end()) return &it->second;
  if (not_maps_.count(word)) return nullptr;
  if (maps_.size() >= kMaxMaps || not_maps_.size() >= kMaxMaps) {
    over_limit_ = true;
    return nullptr;
  }
  uint16_t type = 0;
  uint8_t words = 0;
  if (!is_map(word) || !cache_.get(word - 1 + f_.map_instance_type, type) ||
      !cache_.get(word - 1 + f_.map_instance_size_words, words)) {
    not_maps_.insert(word);
    return nullptr;
  }
  V8MapInfo info;
  info.instance_type = type;
  info.instance_size = uint32_t{words} * 8;
  if (words == 0) info.rule = v8_size_rule(type, ids_, md_);
  info.is_free = v8_is_free(type, ids_);
  // An ArrayBuffer's backing store, when its fields lie inside the object.
  if (f_.js_array_buffer && type == f_.js_array_buffer && info.instance_size &&
      std::max(f_.buffer_length_at, f_.buffer_store_at) + 8 <= info.instance_size)
    info.buffer_length_at = static_cast<uint16_t>(f_.buffer_length_at),
    info.buffer_store_at = static_cast<uint16_t>(f_.buffer_store_at);
  if (!info.is_free) info.name = intern(name_of(word, type));
  return &maps_.emplace(word, info).first->second;
}

std::string V8MapReader::name_of(uint64_t map, uint16_t t) {
  if (t < f_.first_nonstring) {
    const int64_t rep = t & f_.rep_mask;
    if (rep == f_.cons_tag) return "(concatenated string)";
    if (rep == f_.sliced_tag) return "(sliced string)";
    return "(string)";
  }
  if (t == f_.symbol) return "(symbol)";
  if (t == ids_.big_int) return "(bigint)";
  if (t == f_.heap_number) return "(number)";
  if ((t >= f_.js_function_first && t <= f_.js_function_last) || t == f_.js_bound_function) return "(closure)";
  if (t == f_.js_regexp) return "(regexp)";
  if (t >= ids_.context_first && t <= ids_.context_last) return t == ids_.native_context ? "(system)" : "system / Context";
  if (t == ids_.fixed_array_first || t == ids_.fixed_double_array || t == ids_.byte_array) return "(array)";
  if (t > f_.js_proxy) return constructor_name(map, t);
  const auto cls = md_.class_of_type.find(t);
  const std::string name = cls == md_.class_of_type.end() ? "" : cls->second;
  if (kCodeClasses.count(name) || t == ids_.code || t == ids_.instruction_stream || t == ids_.bytecode_array ||
      t == ids_.scope_info || t == ids_.feedback_vector || t == ids_.preparse_data ||
      (ids_.closure_feedback_cell_array && t == ids_.closure_feedback_cell_array) ||
      (ids_.closure_feedback_cell_array && t == ids_.object_boilerplate))
    return "(compiled code)";
  if (f_.object_shapes && (kShapeClasses.count(name) || t == ids_.map || t == ids_.descriptor_array ||
                           t == ids_.strong_descriptor_array || t == ids_.transition_array))
    return "(object shape)";
  return "(system)";
}

std::string V8MapReader::constructor_name(uint64_t map, uint16_t t) {
  uint8_t bit_field2 = 0;
  uint32_t bit_field3 = 0;
  // The map's constructor names its objects when they were made by it
  // (new_target_is_base) and the map is no prototype's.
  if (cache_.get(map - 1 + f_.map_bit_field2, bit_field2) && cache_.get(map - 1 + f_.map_bit_field3, bit_field3) &&
      (bit_field2 & 1) && !(bit_field3 & (1u << 20))) {
    uint64_t c = 0;
    cache_.get(map - 1 + f_.map_constructor, c);
    for (int i = 0; i < kMaxChain && tagged_pointer(c) && is_map(c); ++i)
      if (!cache_.get(c - 1 + f_.map_constructor, c)) c = 0;
    if (f_.tuple2 && type_of(c) == f_.tuple2 && !cache_.get(c - 1 + 8, c)) c = 0;
    const uint16_t ct = type_of(c);
    uint64_t sfi = 0;
    if (ct != kUnreadable && ct >= f_.js_function_first && ct <= f_.js_function_last &&
        cache_.get(c - 1 + f_.function_shared, sfi)) {
      std::string n = function_name(sfi);
      if (!n.empty() && n != "Object") return n;
    }
  }
  // V8's class name for the kind (JSReceiver::class_name): the class
  // without its "JS".
  const auto cls = md_.class_of_type.find(t);
  if (cls == md_.class_of_type.end()) return "Object";
  std::string name = cls->second;
  if (name.rfind("JS", 0) == 0) name.erase(0, 2);
  if (name == "ArgumentsObject") return "Arguments";
  if (name.empty() || name.find("Object") != std::string::npos || name.find("Api") != std::string::npos) return "Object";
  return name;
}

std::string V8MapReader::function_name(uint64_t sfi) {
  uint64_t v = 0;
  if (!tagged_pointer(sfi) || type_of(sfi) != f_.shared_function_info || !cache_.get(sfi - 1 + f_.sfi_name, v) ||
      !tagged_pointer(v))
    return "";
  const uint16_t t = type_of(v);
  if (t < f_.first_nonstring) return string_at(v);
  if (t != f_.scope_info) return "";
  // A ScopeInfo (node-naming.md 1.3): the function name's slot follows the
  // context locals' names and infos and the saved class variable.
  const uint64_t s = v - 1;
  uint32_t flags = 0;
  uint64_t count_word = 0;
  if (!cache_.get(s + (f_.scope_flags_u32 ? 8 : 12), flags) || !cache_.get(s + 0x18, count_word) ||
      (count_word & 0xffffffff) != 0)
    return "";
  const uint64_t n = count_word >> 32;
  if (n > (1u << 16)) return "";
  const bool module = (flags & 0xf) == f_.scope_module_type;
  const uint64_t first = f_.scope_first_slot + (module && f_.module_slot ? 8 : 0);
  const uint64_t name_at = first + (n < 75 ? 8 * n : 8) + 8 * n + 8 * ((flags >> 10) & 1);
  const bool has_function_name = flags & 0x3000;
  uint64_t slot = 0;
  if (has_function_name && cache_.get(s + name_at, slot) && tagged_pointer(slot)) {
    std::string name = string_at(slot);
    if (!name.empty()) return name;
  }
  if ((flags >> 14) & 1) {
    if (cache_.get(s + name_at + (has_function_name ? 16 : 0), slot) && tagged_pointer(slot)) return string_at(slot);
  }
  return "";
}

std::string V8MapReader::string_at(uint64_t tagged, int depth) {
  const uint16_t t = type_of(tagged);
  if (t == kUnreadable || t >= f_.first_nonstring || depth > 4) return "";
  const int64_t rep = t & f_.rep_mask;
  if (rep == f_.cons_tag) {
    uint64_t a = 0, b = 0;
    if (!cache_.get(tagged - 1 + f_.cons_first, a) || !cache_.get(tagged - 1 + f_.cons_second, b)) return "";
    std::string s = string_at(a, depth + 1);
    if (s.size() < kMaxNameBytes) s += string_at(b, depth + 1);
    return s.substr(0, kMaxNameBytes);
  }
  if (rep == f_.thin_tag) {
    uint64_t a = 0;
    return cache_.get(tagged - 1 + f_.thin_actual, a) ? string_at(a, depth + 1) : "";
  }
  if (rep != f_.seq_tag) return "";
  int32_t length = 0;
  if (!cache_.get(tagged - 1 + f_.string_length, length) || length <= 0) return "";
  const size_t n = std::min<size_t>(static_cast<size_t>(length), kMaxNameBytes);
  const bool one_byte = (t & f_.enc_mask) == f_.one_byte_tag;
  std::string out;
  if (one_byte) {
    out.resize(n);
    if (!cache_.read(tagged - 1 + f_.seq_one_byte_chars, out.data(), n)) return "";
  } else {
    std::vector<uint16_t> units(n);
    if (!cache_.read(tagged - 1 + f_.seq_two_byte_chars, units.data(), n * 2)) return "";
    for (uint16_t u : units) out.push_back(u < 0x80 ? static_cast<char>(u) : '?');
  }
  return out;
}

}  // namespace oomsnap
