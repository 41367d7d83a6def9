// Walking a run of V8 heap objects laid end to end (a page's area): each
// object's map says its kind and, with its first words, its size (V8's
// HeapObject::SizeFromMap); the next object starts right after it. Pure:
// the bytes are a copy of the run, the maps come from a lookup the caller
// owns (node/v8_maps.h reads them from the target), so unit tests and the
// fuzzer feed byte images.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/checked_bytes.h"

namespace oomsnap {

// How a variable-size object's size follows from its first words (V8's
// HeapObject::SizeFromMap; the rules of each version are in
// docs/readers/node-layouts.md, section 4).
struct V8SizeRule {
  enum class Kind : uint8_t {
    kFixed,        // the map's instance size
    kLengthTimes,  // header + length x element, rounded up to `align`
    kScopeInfo,    // counted from its flags and counts (node-layouts.md 4.3)
    kFeedbackMetadata,  // 16 + 4 per 6 slots (+ 2 per closure slot, 13.6), rounded to 8
    kPreparseData,      // align8(16 + data length) + 8 x children
    kCodeV10,           // V8 10.2 Code: 128 + instruction and metadata sizes, rounded to 64
    kInstructionStreamV11,  // V8 11.3: sized by the Code object it points to (a read of the target)
    kUnknown,      // a kind this reader cannot size: the walk stops there
  };
  Kind kind = Kind::kUnknown;
  uint32_t header = 0;       // bytes before the elements
  uint32_t length_at = 0;    // offset of the length in the object
  uint8_t length_bytes = 8;  // 8: a Smi (value in the upper 32 bits); 4: int32; 2: uint16
  uint32_t element = 0;      // bytes per element (1 for a byte count)
  // How many low bits of the length field belong to it (0: all); a
  // PropertyArray keeps its hash above the length.
  uint8_t length_bits = 0;
  uint8_t length_shift = 0;  // low bits to drop first (a BigInt's sign bit)
  uint8_t align = 8;         // the size is rounded up to this (64 for code)
  // kScopeInfo: flags as a u32 at 8 (13.6) rather than a Smi; position info
  // in every scope (13.6) rather than in class, eval, function, module and
  // script scopes (types 0-4); the module scope's type and where its
  // module_variable_count is.
  bool scope_flags_u32 = false;
  bool scope_position_always = false;
  uint8_t scope_module_type = 3;
  uint8_t scope_module_count_at = 0;  // 0: not known, a module scope is not sized
  // kFeedbackMetadata: the create-closure slot count at 12 counts too (13.6).
  bool feedback_closure_slots = false;
};

struct V8MapInfo {
  uint16_t instance_type = 0;
  uint32_t instance_size = 0;  // bytes, from instance_size_in_words; 0 = variable
  V8SizeRule rule;             // used when instance_size is 0
  uint32_t name = 0;           // the caller's index of the name it is counted under
  bool is_free = false;        // free space or a filler: counted as free, not as an object
  // A JSArrayBuffer: where its backing store's length and address are (both
  // inside instance_size; 0: not one).
  uint16_t buffer_length_at = 0, buffer_store_at = 0;
};

// The object's size in bytes, from its map and the bytes from its start:
// nullopt when a length is negative, absurd (past `room`, the most the
// object may span: by default the bytes given) or not in the bytes, or the
// kind is unknown.
std::optional<uint64_t> v8_object_size(const V8MapInfo& map, ByteView object, uint64_t room);
inline std::optional<uint64_t> v8_object_size(const V8MapInfo& map, ByteView object) {
  return v8_object_size(map, object, object.size());
}

struct V8NameTally {
  uint64_t objects = 0, bytes = 0;
};
struct V8WalkTally {
  // No process has more address space than this: a longer store is forged.
  static constexpr uint64_t kMaxBufferBytes = uint64_t{1} << 47;
  static constexpr size_t kMaxBufferStores = size_t{1} << 20;

  uint64_t objects = 0, bytes = 0, free_bytes = 0;
  std::vector<V8NameTally> by_name;  // indexed by V8MapInfo::name
  // ArrayBuffers' backing stores (memory outside the heap, process.memoryUsage()'s
  // arrayBuffers), each store once: views and a pool's slices share one.
  uint64_t buffers = 0, buffer_bytes = 0;
  std::unordered_set<uint64_t> buffer_stores;

  void add_buffer(uint64_t store, uint64_t length) {
    if (store == 0 || length == 0 || length > kMaxBufferBytes) return;
    // Past the bound, each store counts (a few may twice) rather than none.
    if (buffer_stores.size() < kMaxBufferStores && !buffer_stores.insert(store).second) return;
    ++buffers;
    buffer_bytes += length;
  }

  // One object of `map` (free space counts apart).
  void add(const V8MapInfo& map, uint64_t size) {
    if (map.is_free) {
      free_bytes += size;
      return;
    }
    objects += 1;
    bytes += size;
    if (map.name >= by_name.size()) by_name.resize(map.name + 1);
    by_name[map.name].objects += 1;
    by_name[map.name].bytes += size;
  }
};

// Where a walk of a run ended: complete when it reached `end` exactly.
struct V8RunWalk {
  bool complete = false;
  uint64_t stopped_at = 0;  // the address of the object it could not step over
  std::string why;
};

// Walks [start, end) of a copy `bytes` of the target's memory from address
// `base`. lookup(map_word) returns the map's info or nullptr when the word
// is not the address of a map this heap knows; remote(map, address, bytes)
// sizes the kinds whose size lies in another object (nullopt: unknown).
// Every step advances at least one word, so the walk ends after
// (end - start) / 8 objects at most.
// One object at `at`: its map and size, or nullptr with `why`. The size is
// whole words and stays inside [at, end).
template <typename Lookup, typename Remote>
const V8MapInfo* v8_step(ByteView bytes, uint64_t base, uint64_t at, uint64_t end, Lookup& lookup, Remote& remote,
                         uint64_t& size, std::string* why) {
  uint64_t map_word = 0;
  if (end - at < 8 || !bytes.read_u64(at - base, map_word)) {
    if (why) *why = "a run that ends inside an object";
    return nullptr;
  }
  const V8MapInfo* map = lookup(map_word);
  if (!map) {
    if (why) *why = "a word that is not a map of this heap where an object should start";
    return nullptr;
  }
  ByteView object;
  bytes.sub(at - base, end - at, object);
  auto got = v8_object_size(*map, object);
  if (!got && map->rule.kind == V8SizeRule::Kind::kInstructionStreamV11) got = remote(*map, at, object);
  if (!got || *got < 8 || *got % 8 != 0 || *got > end - at) {
    if (why)
      *why = std::string(got ? "an object whose size runs past the run" : "an object whose size cannot be read") +
             " (instance type " + std::to_string(map->instance_type) + ")";
    return nullptr;
  }
  size = *got;
  return map;
}

template <typename Lookup, typename Remote>
V8RunWalk walk_v8_run(ByteView bytes, uint64_t base, uint64_t start, uint64_t end, Lookup&& lookup,
                      V8WalkTally& tally, Remote&& remote) {
  V8RunWalk out;
  if (start < base || end < start || end - base > bytes.size()) {
    out.stopped_at = start;
    out.why = "the run is outside the bytes read";
    return out;
  }
  uint64_t at = start;
  while (at < end) {
    uint64_t size = 0;
    const V8MapInfo* map = v8_step(bytes, base, at, end, lookup, remote, size, &out.why);
    if (!map) {
      out.stopped_at = at;
      return out;
    }
    tally.add(*map, size);
    if (map->buffer_length_at && !map->is_free) {
      uint64_t length = 0, store = 0;
      if (bytes.read_u64(at - base + map->buffer_length_at, length) &&
          bytes.read_u64(at - base + map->buffer_store_at, store))
        tally.add_buffer(store, length);
    }
    at += size;
  }
  out.complete = true;
  out.stopped_at = end;
  return out;
}

// The first word after `from` from which objects walk exactly to `end`: where
// a page's walk resumes after an allocation area it could not locate (a
// background thread's, whose unused rest holds stale or no objects). Each
// word is judged once, a walk that meets a judged word taking its verdict,
// so a page costs one pass however much stale data the area holds.
template <typename Lookup, typename Remote>
std::optional<uint64_t> find_v8_resume(ByteView bytes, uint64_t base, uint64_t from, uint64_t end, Lookup&& lookup,
                                       Remote&& remote) {
  if (from < base || end <= from || end - base > bytes.size() || (end - from) % 8 != 0) return std::nullopt;
  enum : uint8_t { kUnknown, kReaches, kFails };
  std::vector<uint8_t> verdict((end - from) / 8, kUnknown);
  std::vector<size_t> path;
  for (uint64_t start = from + 8; start < end; start += 8) {
    path.clear();
    uint64_t at = start;
    uint8_t v = kUnknown;
    while (v == kUnknown) {
      if (at == end) {
        v = kReaches;
        break;
      }
      const size_t i = (at - from) / 8;
      if (verdict[i] != kUnknown) {
        v = verdict[i];
        break;
      }
      path.push_back(i);
      uint64_t size = 0;
      if (!v8_step(bytes, base, at, end, lookup, remote, size, nullptr)) v = kFails;
      else at += size;
    }
    for (size_t i : path) verdict[i] = v;
    if (v == kReaches) return start;
  }
  return std::nullopt;
}

template <typename Lookup>
V8RunWalk walk_v8_run(ByteView bytes, uint64_t base, uint64_t start, uint64_t end, Lookup&& lookup,
                      V8WalkTally& tally) {
  return walk_v8_run(bytes, base, start, end, std::forward<Lookup>(lookup), tally,
                     [](const V8MapInfo&, uint64_t, ByteView) -> std::optional<uint64_t> { return std::nullopt; });
}

}  // namespace oomsnap
