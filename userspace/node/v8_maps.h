// The maps a V8 heap walk meets, read once each from the target: their
// instance type, size rule and the name their objects are counted under, as
// DevTools' Summary view names them (docs/readers/node-naming.md): a JS
// object by its constructor ("Order", "Array"), the rest by kind
// ("(string)", "(array)", "(closure)", "(compiled code)", "system / Context",
// "(object shape)", "(system)").
//
// A word is taken for a map only when it is a tagged pointer to an object
// whose own map is a meta map (a map that is its own map; V8 has one per
// native context besides the read-only one): a forged page cannot lead the
// walk to count arbitrary words as objects without forging that too.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/chunk_cache.h"
#include "node/v8_metadata.h"
#include "node/v8_object_walk.h"
#include "node/v8_types.h"

namespace oomsnap {

// The offsets and ids naming needs, from the binary's v8dbg_ metadata.
struct V8NamingFacts {
  uint32_t map_instance_type = 0, map_instance_size_words = 0, map_bit_field2 = 0, map_bit_field3 = 0,
           map_constructor = 0;
  uint32_t function_shared = 0, sfi_name = 0;
  uint32_t string_length = 0, seq_one_byte_chars = 0, seq_two_byte_chars = 0;
  uint32_t cons_first = 0, cons_second = 0, thin_actual = 0;
  uint16_t first_nonstring = 0, js_proxy = 0, js_function_first = 0, js_function_last = 0, js_bound_function = 0,
           js_regexp = 0, symbol = 0, heap_number = 0, scope_info = 0, shared_function_info = 0, tuple2 = 0;
  int64_t rep_mask = 0, cons_tag = 0, sliced_tag = 0, thin_tag = 0, seq_tag = 0, enc_mask = 0, one_byte_tag = 0;
  // ScopeInfo: flags as a u32 (13.6) or a Smi; where the variable part starts.
  bool scope_flags_u32 = false;
  uint32_t scope_first_slot = 0x20;
  uint8_t scope_module_type = 3;
  bool module_slot = false;  // 12.4+: a module scope has one more slot first
  bool object_shapes = true;  // 11.3+: maps and descriptors are "(object shape)"
  // And what an ArrayBuffer's backing store (outside the heap) needs; 0 when
  // the build does not say, and the stores are not counted.
  uint16_t js_array_buffer = 0;
  uint32_t buffer_length_at = 0, buffer_store_at = 0;
};

// Resolves the facts for this build; the missing v8dbg_ names in `missing`.
V8NamingFacts v8_naming_facts(const V8Metadata& md, const V8TypeIds& ids, uint32_t v8_major, std::string& missing);

class V8MapReader {
 public:
  static constexpr size_t kMaxMaps = size_t{1} << 18;
  static constexpr size_t kMaxMetaMaps = 64;
  static constexpr size_t kMaxNameBytes = 256;
  static constexpr int kMaxChain = 64;  // back pointers followed to a map's constructor

  V8MapReader(ChunkCache& cache, const V8Metadata& md, const V8TypeIds& ids, const V8NamingFacts& facts);

  // The map's info, or nullptr when `word` is no map of this heap (or the
  // map limit is reached: over_limit() then says so).
  const V8MapInfo* lookup(uint64_t word);
  const std::vector<std::string>& names() const { return names_; }
  bool over_limit() const { return over_limit_; }

 private:
  bool is_map(uint64_t tagged);
  std::string name_of(uint64_t map, uint16_t type);
  std::string constructor_name(uint64_t map, uint16_t type);
  std::string function_name(uint64_t sfi);
  std::string string_at(uint64_t tagged, int depth = 0);
  uint16_t type_of(uint64_t tagged);  // 0xffff when unreadable
  uint32_t intern(const std::string& name);

  ChunkCache& cache_;
  const V8Metadata& md_;
  const V8TypeIds& ids_;
  V8NamingFacts f_;
  std::unordered_map<uint64_t, V8MapInfo> maps_;
  std::unordered_set<uint64_t> not_maps_, meta_maps_;
  std::unordered_map<std::string, uint32_t> name_ids_;
  std::vector<std::string> names_;
  bool over_limit_ = false;
};

}  // namespace oomsnap
