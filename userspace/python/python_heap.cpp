#include "python/python_heap.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "base/text.h"
#include "core/address_bitmap.h"
#include "core/address_set.h"
#include "core/checked_bytes.h"

namespace oomsnap {
namespace {

// Py_TPFLAGS_* (Include/object.h; bits 2-4 only 3.11+, the rest the same 3.8-3.14).
constexpr uint64_t kInlineValues = 1ull << 2, kManagedWeakref = 1ull << 3, kManagedDict = 1ull << 4,
                   kHeapType = 1ull << 9, kHaveGc = 1ull << 14, kLongSub = 1ull << 24,
                   kListSub = 1ull << 25, kTupleSub = 1ull << 26, kBytesSub = 1ull << 27,
                   kUnicodeSub = 1ull << 28, kDictSub = 1ull << 29;
// PyGC_Head links carry two flag bits below the pointer (3.14's incremental
// GC keeps its space bit in _gc_next; _gc_prev has FINALIZED/COLLECTING).
// Only two: Debian's 3.13 aligns PyGC_Head to 4, so list heads inside the
// interpreter state may sit at 4 mod 8.
constexpr uint64_t kLinkMask = ~uint64_t{3};
constexpr uint64_t kGcHead = 16;
constexpr size_t kObjView = 64;           // object bytes read with its header
constexpr size_t kMaxTypes = 65536;       // distinct type addresses before "<other>"
constexpr int kMaxBaseDepth = 32;          // tp_base chain length followed
constexpr uint64_t kSaneBytes = 1ull << 40;
constexpr int kT_OBJECT = 6, kT_OBJECT_EX = 16;  // PyMemberDef.type
// Local limits on what the target's counts can make the reader do. A
// container's item count is the target's to choose: a container to follow
// is remembered as a range (address, count), never expanded up front; its
// items are read kBatchRecords at a time, only when nothing else is pending,
// and only the pointers worth following are kept, so what the walk holds
// grows with the depth of the references followed, never with a count or
// with the heap's size. At most kMaxItemsPerContainer records are read from
// one container (16 Mi: 128 MiB of list items, within the default read budget).
constexpr uint64_t kMaxItemsPerContainer = uint64_t{1} << 24;
constexpr size_t kBatchRecords = 1024;
// Pending work while references are followed (depth-first): pointers and
// container ranges. The GC-list walk hands its references over in bulk; past
// these sizes they are followed at once (4 MiB and 2.5 MiB at most). Beyond
// them (a chain of nested containers this deep), the rest is left out and
// the snapshot says so.
constexpr size_t kMaxPendingPointers = size_t{1} << 19;
constexpr size_t kMaxPendingRanges = size_t{1} << 16;
constexpr size_t kFollowPointersAt = kMaxPendingPointers / 2, kFollowRangesAt = kMaxPendingRanges / 2;
// Words that did not read as an object are remembered in a small
// direct-mapped table (32 KiB), so a value repeated through junk memory
// costs one read, not one per occurrence, and never a seen mark.
constexpr size_t kRejectSlots = 4096;
constexpr unsigned kMaxStride = 3;
constexpr size_t kMaxSlots = 256;         // __slots__ members per type, bases included
constexpr size_t kMaxNameBytes = 1024;    // a type's name, marker included
constexpr std::string_view kTruncated = "[...]";
constexpr uint64_t kMaxDictKeys = 4096;   // entries of a type's __dict__ searched for __module__

// kGen: generator, coroutine, async generator; kFrame: frame object (3.11+,
// both with an interpreter frame inline).
enum class Kind { kOther, kList, kTuple, kDict, kSet, kStr, kInt, kBytes, kByteArray, kFloat, kGen, kFrame };

struct TypeInfo {
  bool valid = false;
  std::string name;
  uint64_t basicsize = 0, itemsize = 0, flags = 0, preheader = 0;
  int64_t dictoffset = 0;                // tp_dictoffset (3.8-3.10 instances: their __dict__ pointer)
  Kind kind = Kind::kOther;
  bool is_code = false;                  // the static type `code`
  uint64_t shared_entries = 0;           // heap types: dk_nentries of ht_cached_keys (attribute values in use)
  std::vector<uint32_t> slot_offsets;    // object members (__slots__) of this type and its bases
  uint64_t objects = 0, bytes = 0;
};

// Fields of bytes copied from the target, through the checked view: a field
// outside the bytes read reads as 0 (absent), never past the buffer.
inline uint64_t u64(ByteView v, uint64_t off) {
  uint64_t x = 0;
  v.read_u64(off, x);
  return x;
}
inline int64_t i64(ByteView v, uint64_t off) { return static_cast<int64_t>(u64(v, off)); }
inline uint32_t u32(ByteView v, uint64_t off) {
  uint32_t x = 0;
  v.read_u32(off, x);
  return x;
}
inline uint64_t abs64(int64_t v) { return v < 0 ? static_cast<uint64_t>(-(v + 1)) + 1 : static_cast<uint64_t>(v); }

// Byte totals of hostile sizes summed over millions of objects: stop at the
// top instead of wrapping.
inline uint64_t sat_add(uint64_t a, uint64_t b) { return a > ~uint64_t{0} - b ? ~uint64_t{0} : a + b; }

// At most kMaxNameBytes of `s`, cut at a UTF-8 character boundary and marked.
std::string capped_name(std::string s) {
  if (s.size() <= kMaxNameBytes) return s;
  size_t cut = kMaxNameBytes - kTruncated.size();
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  s.resize(cut);
  s += kTruncated;
  return s;
}

// PyDictKeysObject header fields, in the form both layouts share (3.8-3.10:
// dk_size and a 40-byte header; 3.11+: log2 sizes and a 32-byte header).
struct DictKeys {
  int64_t refcnt = 0;
  uint8_t log2_size = 0, kind = 0;  // kind 0: {hash, key, value} entries (always before 3.11)
  uint64_t header = 32, index_bytes = 0;
  uint64_t usable = 0, nentries = 0;
  bool sane() const { return log2_size < 40 && index_bytes < (1ull << 44) && nentries <= (1ull << log2_size); }
  uint64_t usable_fraction() const { return ((uint64_t{1} << log2_size) << 1) / 3; }
  uint64_t entry_size() const { return kind == 0 ? 24 : 16; }
  uint64_t entries_offset() const { return header + index_bytes; }
  // _PyDict_KeysSize (3.11+); sizeof(PyDictKeysObject) + DK_IXSIZE * dk_size +
  // entries of the usable fraction (3.8-3.10 _PyDict_SizeOf)
  uint64_t bytes() const { return entries_offset() + usable_fraction() * entry_size(); }
};

class Walker {
 public:
  Walker(ChunkCache& mem, const PyLayout& layout, const PyHeapInput& in, const Deadline& deadline)
      : mem_(mem), L_(layout), in_(in), deadline_(deadline) {
    unknown_.name = "<unreadable type>";
  }

  PyHeapResult run();

 private:
  bool load(uint64_t addr, uint8_t* out, size_t want);
  std::optional<DictKeys> read_keys(uint64_t addr);
  // depth: how far up a tp_base chain this lookup is (bounded).
  TypeInfo& type_info(uint64_t addr, int depth = 0);
  void fill_type(TypeInfo& t, uint64_t addr, int depth);
  std::optional<std::string> read_str(uint64_t addr);
  std::string read_c_string(uint64_t addr);
  uint64_t dict_lookup(uint64_t dict, std::string_view key);
  // sys.getsizeof of the object; fits: false when the size does not fit the
  // memory (then only its fixed part is returned).
  uint64_t size_of(uint64_t obj, ByteView o, const TypeInfo& t, bool& fits);
  // co_nlocalsplus + co_stacksize of the code object a generator or frame
  // object runs; nullopt when that is no code object or its counts are not sane.
  std::optional<int64_t> frame_slots(uint64_t obj, ByteView o, Kind kind);
  // ob_size of a tuple object at addr (3.8-3.10 co_cellvars/co_freevars).
  std::optional<uint64_t> tuple_len(uint64_t addr);
  // what: the container's kind, for the reason when its count is cut.
  void add_pointers(uint64_t addr, uint64_t count, unsigned stride = 1, unsigned keep = 1, const char* what = "container");
  void add_pointer(uint64_t p);
  // Reads the next batch of the innermost pending container range.
  void expand_range();
  bool mark(uint64_t addr);
  void collect_refs(uint64_t obj, ByteView o, const TypeInfo& t);
  // Follows every pending reference (and what they reference) depth-first.
  void visit_refs();
  // false: stop following (the object cap is reached).
  bool visit_ref(uint64_t r);
  // An object whose size, as its own fields give it, does not fit the
  // memory it (or its buffer) lies in: the fields are not what they claim.
  bool size_fits(uint64_t addr, uint64_t len) { return len <= mem_.readable_room(addr); }
  bool rejected(uint64_t r) const { return reject_[(r >> 3) & (kRejectSlots - 1)] == r; }
  bool reject(uint64_t r) {
    reject_[(r >> 3) & (kRejectSlots - 1)] = r;
    return true;
  }

  // Walks one generation list; false when it stopped early (reason set;
  // halt_ also set when nothing more should be read at all).
  bool walk_list(uint64_t head);
  const std::vector<uint32_t>* pick_heads(uint64_t gc);
  // The interpreter's GC state (gc_state_size bytes, every GC offset of the
  // layout inside them) into gc_buf_; false when unreadable.
  bool read_gc_state(uint64_t gc);
  bool is_static(uint64_t a) const {
    for (auto& [lo, hi] : in_.static_ranges)
      if (a >= lo && a < hi) return true;
    return false;
  }
  bool over_budget() {
    if (visited_ >= in_.max_objects) return halt("object cap of " + std::to_string(in_.max_objects) + " reached");
    if ((++steps_ & 1023) == 0 && deadline_.expired()) return halt("deadline reached");
    if (mem_.read_limit_hit()) return halt("read budget exhausted");
    if (mem_.target_gone()) return halt("target exited during the walk");
    return false;
  }
  // What ended the walk leads the reason; a list that broke earlier (the walk
  // went on with the other lists) follows it.
  bool halt(std::string why) {
    if (!halt_) reason_ = reason_.empty() ? std::move(why) : why + "; before that: " + reason_;
    halt_ = true;
    return true;
  }
  bool stop(std::string why) {
    if (reason_.empty()) reason_ = std::move(why);
    return true;
  }

  ChunkCache& mem_;
  const PyLayout& L_;
  const PyHeapInput& in_;
  const Deadline& deadline_;
  std::unordered_map<uint64_t, TypeInfo> types_;
  TypeInfo unknown_, other_;
  AddressBitmap seen_;
  uint64_t last_type_addr_ = ~uint64_t{0};
  TypeInfo* last_type_ = nullptr;
  // References pending while the GC lists are walked, followed after them
  // (or once there are kFollow*At of them), so references to tracked objects
  // are mostly recognised from the seen marks without a second read.
  struct PendingRange {
    uint64_t addr, count, claimed, done;
    uint32_t stride, keep;
    const char* what;
  };
  std::vector<uint64_t> refs_;
  std::vector<PendingRange> ranges_;
  std::vector<uint64_t> reject_ = std::vector<uint64_t>(kRejectSlots, 0);
  uint64_t implausible_sizes_ = 0;
  std::vector<uint64_t> batch_;   // one batch of a container's records (kBatchRecords x stride words)
  std::vector<uint8_t> gc_buf_;  // the GC state being read (read_gc_state)
  uint64_t visited_ = 0, tracked_ = 0, untracked_ = 0, steps_ = 0, marks_ = 0;
  uint64_t peak_queue_bytes_ = 0;  // pending pointers + ranges, at their largest
  bool refs_truncated_ = false;
  bool halt_ = false;
  uint64_t missing_ = 0;      // estimated objects of incomplete lists not read
  bool unestimated_ = false;  // an incomplete list had no estimate
  std::string reason_;
};

bool Walker::load(uint64_t addr, uint8_t* out, size_t want) {
  // Objects near the end of a mapping may be shorter than the view: retry smaller.
  for (size_t n : {want, size_t{48}, size_t{24}}) {
    if (n > want) continue;
    if (const uint8_t* p = mem_.view(addr, n)) {
      std::memcpy(out, p, n);
      std::memset(out + n, 0, want - n);
      return true;
    }
  }
  return false;
}

std::optional<DictKeys> Walker::read_keys(uint64_t addr) {
  uint8_t b[40];
  const size_t len = L_.dict_keys_v1 ? 40 : 32;
  if (!addr || !mem_.read(addr, b, len)) return std::nullopt;
  const ByteView v(b, len);
  DictKeys k;
  k.refcnt = i64(v, 0);
  if (L_.dict_keys_v1) {
    // dk_size: a power of two (at least PyDict_MINSIZE 8); DK_IXSIZE from it.
    const uint64_t size = u64(v, 8);
    if (size < 8 || (size & (size - 1))) return std::nullopt;  // a size over 2^39 fails sane()
    k.log2_size = static_cast<uint8_t>(__builtin_ctzll(size));
    const uint64_t ix = size <= 0xff ? 1 : size <= 0xffff ? 2 : size <= 0xffffffff ? 4 : 8;
    k.header = 40, k.index_bytes = size * ix;
    k.usable = u64(v, 24);
    k.nentries = u64(v, 32);
  } else {
    uint8_t log2_index_bytes = 0;
    v.read_u8(8, k.log2_size);
    v.read_u8(9, log2_index_bytes);
    v.read_u8(10, k.kind);
    if (log2_index_bytes >= 44) return std::nullopt;
    k.index_bytes = uint64_t{1} << log2_index_bytes;
    k.usable = u64(v, 16);
    k.nentries = u64(v, 24);
  }
  if (!k.sane()) return std::nullopt;
  return k;
}

// A C string (tp_name) of printable ASCII; at most kMaxNameBytes, marked
// when cut. Smaller windows for a name near the end of a mapping.
std::string Walker::read_c_string(uint64_t addr) {
  char b[kMaxNameBytes];
  for (size_t n : {sizeof b, size_t{128}, size_t{32}}) {
    if (!addr || !mem_.read(addr, b, n)) continue;
    const size_t len = strnlen(b, n);
    // Unterminated within a smaller window: the bytes run into unreadable
    // memory, not a name. Within the largest: a long name, cut.
    if (len == n && n != sizeof b) return {};
    std::string s(b, len);
    bool printable = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c > 32 && c < 127; });
    if (!printable) return {};
    return len == n ? capped_name(s + std::string(kTruncated)) : s;
  }
  return {};
}

// A str object's text when it is compact ASCII or Latin-1 (names), as
// UTF-8; a long one is cut to kMaxNameBytes and marked.
std::optional<std::string> Walker::read_str(uint64_t addr) {
  uint8_t buf[48];
  if (!addr || !load(addr, buf, sizeof buf)) return std::nullopt;
  const ByteView o(buf, sizeof buf);
  const uint64_t len = u64(o, 16);
  const uint32_t state = u32(o, 32);
  const unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
  if (!compact || kind != 1) return std::nullopt;
  char text[kMaxNameBytes];
  const size_t n = static_cast<size_t>(std::min<uint64_t>(len, sizeof text));
  if (!mem_.read(addr + (ascii ? L_.ascii_size : L_.compact_size), text, n)) return std::nullopt;
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      s += static_cast<char>(c);
    } else {  // Latin-1 to UTF-8
      s += static_cast<char>(0xC0 | (c >> 6));
      s += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  if (len > n) s += kTruncated;
  return capped_name(std::move(s));
}

// Value for a str key in a combined or split dict (0 when absent/unreadable).
uint64_t Walker::dict_lookup(uint64_t dict, std::string_view key) {
  uint8_t d[48];
  if (!dict || !load(dict, d, sizeof d)) return 0;
  const uint64_t keys_addr = u64(ByteView(d, sizeof d), 32), values = u64(ByteView(d, sizeof d), 40);
  auto k = read_keys(keys_addr);
  if (!k || k->nentries > kMaxDictKeys) return 0;
  const uint64_t esz = k->entry_size(), key_off = k->kind == 0 ? 8 : 0;
  std::vector<uint8_t> ents(k->nentries * esz);
  if (ents.empty() || !mem_.read(keys_addr + k->entries_offset(), ents.data(), ents.size())) return 0;
  const ByteView ev(ents.data(), ents.size());
  for (uint64_t i = 0; i < k->nentries; ++i) {
    if ((i & 63) == 63 && deadline_.expired()) return 0;  // each key is a read: bounded in time too
    ByteView e;
    if (!ev.element(i, esz, e)) break;
    const uint64_t kp = u64(e, key_off);
    if (!kp) continue;
    auto s = read_str(kp);
    if (!s || *s != key) continue;
    if (!values) return u64(e, key_off + 8);
    uint64_t v = 0;
    mem_.get(values + L_.dict_values_items + i * 8, v);
    return v;
  }
  return 0;
}

void Walker::fill_type(TypeInfo& t, uint64_t addr, int depth) {
  // A type is read once, but there can be 65536 of them: past the deadline
  // the rest stay unreadable rather than cost more reads.
  if (!addr || (addr & 7) || deadline_.expired()) return;
  std::vector<uint8_t> buf(L_.type_read_size);
  if (!mem_.read(addr, buf.data(), buf.size())) return;
  // validate_py_layout put every tp_* offset inside type_read_size.
  const ByteView b(buf.data(), buf.size());
  t.flags = u64(b, L_.tp_flags);
  const int64_t basic = i64(b, L_.tp_basicsize), item = i64(b, L_.tp_itemsize);
  if (basic < 16 || basic > (1 << 20) || item < 0 || item > (1 << 16)) return;  // not a type object
  t.basicsize = static_cast<uint64_t>(basic);
  t.itemsize = static_cast<uint64_t>(item);
  t.dictoffset = i64(b, L_.tp_dictoffset);
  const bool heap = t.flags & kHeapType;
  std::string tp_name = read_c_string(u64(b, L_.tp_name));
  if (tp_name.empty()) return;
  t.valid = true;
  t.name = tp_name;
  if (heap) {
    if (auto q = read_str(u64(b, L_.ht_qualname))) t.name = *q;
    if (auto m = read_str(dict_lookup(u64(b, L_.tp_dict), "__module__")); m && *m != "builtins")
      t.name = capped_name(*m + "." + t.name);
    if (auto k = read_keys(u64(b, L_.ht_cached_keys))) t.shared_entries = std::min<uint64_t>(k->nentries, 64);
    // __slots__: object members of this type (PyMemberDef array at tp_members).
    const uint64_t members = u64(b, L_.tp_members);
    for (int i = 0; members && i < 256 && t.slot_offsets.size() < kMaxSlots; ++i) {
      uint8_t mb[40];
      if (!mem_.read(members + static_cast<uint64_t>(i) * 40, mb, sizeof mb)) break;
      const ByteView m(mb, sizeof mb);
      if (u64(m, 0) == 0) break;
      const int type = static_cast<int>(u32(m, 8));
      const int64_t off = i64(m, 16);
      if ((type == kT_OBJECT || type == kT_OBJECT_EX) && off >= 16 && off + 8 <= basic)
        t.slot_offsets.push_back(static_cast<uint32_t>(off));
    }
  }
  // The built-in layout the object starts with: flags for the common bases,
  // otherwise the first static type up the tp_base chain.
  if (t.flags & kListSub) t.kind = Kind::kList;
  else if (t.flags & kTupleSub) t.kind = Kind::kTuple;
  else if (t.flags & kDictSub) t.kind = Kind::kDict;
  else if (t.flags & kUnicodeSub) t.kind = Kind::kStr;
  else if (t.flags & kLongSub) t.kind = Kind::kInt;
  else if (t.flags & kBytesSub) t.kind = Kind::kBytes;
  else if (!heap) {
    if (tp_name == "set" || tp_name == "frozenset") t.kind = Kind::kSet;
    else if (tp_name == "bytearray") t.kind = Kind::kByteArray;
    else if (tp_name == "float") t.kind = Kind::kFloat;
    else if (L_.code_nlocalsplus && (tp_name == "generator" || tp_name == "coroutine" || tp_name == "async_generator"))
      t.kind = Kind::kGen;
    else if ((L_.code_nlocalsplus || L_.frame_f_code) && tp_name == "frame") t.kind = Kind::kFrame;
    else if (tp_name == "code") t.is_code = true;
  } else {
    // The base's own info is cached like any type's (a class hierarchy reads
    // each base once); a cycle or an over-deep chain yields an invalid base.
    const TypeInfo& base = type_info(u64(b, L_.tp_base), depth + 1);
    if (base.valid) {
      t.kind = base.kind;
      // The same member can come from several bases: each offset once, and
      // at most kMaxSlots (every one is a read per object).
      for (uint32_t off : base.slot_offsets) {
        if (t.slot_offsets.size() >= kMaxSlots) break;
        if (std::find(t.slot_offsets.begin(), t.slot_offsets.end(), off) == t.slot_offsets.end())
          t.slot_offsets.push_back(off);
      }
    }
  }
  const bool managed = L_.managed_dict == PyManagedDict::kNone ? false
                       : L_.minor == 11                       ? (t.flags & kManagedDict) != 0
                                                              : (t.flags & (kManagedDict | kManagedWeakref)) != 0;
  t.preheader = ((t.flags & kHaveGc) ? kGcHead : 0) + (managed ? 16 : 0);
}

TypeInfo& Walker::type_info(uint64_t addr, int depth) {
  if (addr == last_type_addr_) return *last_type_;  // runs of one type are common
  TypeInfo* t = nullptr;
  if (auto it = types_.find(addr); it != types_.end()) {
    t = &it->second;  // also a type still being filled (a tp_base cycle): invalid so far
  } else if (types_.size() >= kMaxTypes) {
    return other_;
  } else if (depth > kMaxBaseDepth) {
    return unknown_;
  } else {
    t = &types_[addr];  // node-based map: the reference stays valid
    fill_type(*t, addr, depth);
  }
  if (!t->valid) t = &unknown_;
  last_type_addr_ = addr;
  last_type_ = t;
  return *t;
}

// sys.getsizeof of the object, from its first kObjView bytes `o`. Every
// count in it is the target's: the object (or the buffer it owns) must fit
// the readable mapping it lies in, else fits is false and only the fixed
// part is counted (a junk word read as an object claims terabytes).
uint64_t Walker::size_of(uint64_t obj, ByteView o, const TypeInfo& t, bool& fits) {
  const uint64_t basic = t.basicsize;
  const uint64_t n = abs64(i64(o, 16));  // ob_size for var objects
  uint64_t size = basic;
  // The memory the size says the target holds: inline (from obj) unless a
  // buffer of its own is named.
  uint64_t buf = obj, buf_len = basic;
  switch (t.kind) {
    case Kind::kList: {
      const uint64_t allocated = std::min<uint64_t>(u64(o, 32), kSaneBytes);
      size = basic + allocated * 8;
      if (allocated) buf = u64(o, 24), buf_len = allocated * 8;
      break;
    }
    case Kind::kInt: {
      const uint64_t ndigits = std::min(L_.long_has_lv_tag ? (u64(o, 16) >> 3) : n, kSaneBytes);
      size = buf_len = basic + std::max<uint64_t>(ndigits, L_.long_zero_has_digit ? 1 : 0) * 4;
      break;
    }
    case Kind::kStr: {
      const uint32_t state = u32(o, 32);
      const uint64_t kind = (state >> 2) & 7, len = std::min(u64(o, 16), kSaneBytes);
      if ((state >> 5) & 1) size = buf_len = ((state >> 6) & 1) ? L_.ascii_size + len + 1 : L_.compact_size + (len + 1) * kind;
      else size = basic + (len + 1) * kind;
      break;
    }
    case Kind::kByteArray: {
      const uint64_t alloc = std::min(u64(o, L_.bytearray_alloc), kSaneBytes);
      size = basic + alloc;
      if (alloc) buf = u64(o, L_.bytearray_alloc + 8), buf_len = alloc;  // ob_bytes follows ob_alloc
      break;
    }
    case Kind::kSet:
      if (u64(o, 40) != obj + 64) {
        const uint64_t table = (std::min(u64(o, 32), kSaneBytes) + 1) * 16;
        size = basic + table;
        buf = u64(o, 40), buf_len = table;
      }
      break;
    case Kind::kDict: {
      const uint64_t keys = u64(o, 32), values = u64(o, 40);
      auto k = is_static(keys) ? std::nullopt : read_keys(keys);
      if (k && values)  // split table: shared_keys_usable_size values (3.8-3.10: the usable fraction)
        size += (L_.dict_keys_v1 ? k->usable_fraction() : k->nentries + std::min(k->usable, kSaneBytes)) * 8;
      if (k && k->refcnt == 1) {  // keys owned by this dict
        size += k->bytes();
        buf = keys, buf_len = k->bytes();
      }
      break;
    }
    case Kind::kGen:
    case Kind::kFrame: {
      // gen_sizeof / frame_sizeof: the slots of the frame held inline (the
      // memory a frame object is allocated with, too).
      auto slots = frame_slots(obj, o, t.kind);
      if (!slots) {
        fits = false;
        return basic + t.preheader;
      }
      size = buf_len = static_cast<uint64_t>(static_cast<int64_t>(basic) + *slots * 8);  // basic is at least 16
      break;
    }
    default:
      // Like object.__sizeof__: 3.13+ inline attribute values are not counted.
      if (t.itemsize) size = buf_len = basic + std::min(n, kSaneBytes) * t.itemsize;
      break;
  }
  fits = size_fits(buf, buf_len) && (buf == obj || size_fits(obj, basic));
  if (!fits) size = basic;
  return size + t.preheader;
}

std::optional<uint64_t> Walker::tuple_len(uint64_t addr) {
  uint64_t type = 0, n = 0;
  if (!addr || !mem_.get(addr + 8, type) || type_info(type).kind != Kind::kTuple || !mem_.get(addr + 16, n) ||
      n >= (uint64_t{1} << 31))
    return std::nullopt;
  return n;
}

// Slots beyond basicsize: 3.11+ co_nlocalsplus + co_stacksize; 3.8-3.10
// frames the co_stacksize + co_nlocals + cells + free variables less the
// one slot sizeof(PyFrameObject) holds (so -1 for a code with none).
std::optional<int64_t> Walker::frame_slots(uint64_t obj, ByteView o, Kind kind) {
  uint64_t code = 0;
  if (L_.frame_f_code) {
    uint64_t code_type = 0;
    uint32_t stack = 0, nlocals = 0;
    code = u64(o, L_.frame_f_code);
    if (!code || !mem_.get(code + 8, code_type) || !type_info(code_type).is_code ||
        !mem_.get(code + L_.code_stacksize, stack) || !mem_.get(code + L_.code_nlocals, nlocals))
      return std::nullopt;
    uint64_t cells = 0, frees = 0;
    auto c = tuple_len(mem_.get(code + L_.code_cellvars, cells) ? cells : 0);
    auto f = tuple_len(mem_.get(code + L_.code_freevars, frees) ? frees : 0);
    if (!c || !f) return std::nullopt;
    return static_cast<int64_t>(uint64_t{stack} + nlocals + *c + *f) - 1;
  }
  if (kind == Kind::kGen) {
    if (!o.read_u64(L_.gen_code, code) && !mem_.get(obj + L_.gen_code, code)) return std::nullopt;
  } else {
    const uint64_t iframe = u64(o, L_.frame_iframe);
    if (!iframe || !mem_.get(iframe + L_.iframe_code, code)) return std::nullopt;
  }
  code &= ~uint64_t{7};  // 3.14's f_executable is a tagged _PyStackRef
  uint64_t code_type = 0;
  // Read unsigned: a negative count reads as ~4 G slots, which no mapping
  // holds (size_fits); the sum of two stays far from overflow.
  uint32_t stack = 0, nlocals = 0;
  if (!code || !mem_.get(code + 8, code_type) || !type_info(code_type).is_code ||
      !mem_.get(code + L_.code_stacksize, stack) || !mem_.get(code + L_.code_nlocalsplus, nlocals))
    return std::nullopt;
  return static_cast<int64_t>(uint64_t{stack} + nlocals);
}

// Marks addr seen; false when it was already. The marks live in 1 MiB
// bitmap regions up to AddressBitmap's region limit, then in its fallback
// hash set, which grows with every mark: bounded here by the object cap (a
// mark per object visited or reference followed, both within it).
bool Walker::mark(uint64_t addr) {
  if (!seen_.insert(addr)) return false;
  const uint64_t limit = 2 * in_.max_objects + 1024;
  if (++marks_ > limit) halt("seen-set limit of " + std::to_string(limit) + " addresses reached");
  return true;
}

// Remembers `count` records of `stride` words at addr whose word index is set
// in keep (bit 0 = first word of each record) for visit_refs: list and tuple
// items, {key, hash} set entries, {hash, key, value} dict entries. count is
// the target's: nothing is read or sized from it here.
void Walker::add_pointers(uint64_t addr, uint64_t count, unsigned stride, unsigned keep, const char* what) {
  if (!addr || count == 0 || stride == 0 || stride > kMaxStride) return;
  if (ranges_.size() >= kMaxPendingRanges) {
    refs_truncated_ = true;
    return;
  }
  ranges_.push_back({addr, std::min(count, kMaxItemsPerContainer), count, 0, stride, keep, what});
  peak_queue_bytes_ = std::max<uint64_t>(peak_queue_bytes_, refs_.capacity() * sizeof(uint64_t) +
                                                                ranges_.capacity() * sizeof(PendingRange));
}

// Pending pointers are bounded by kMaxPendingPointers and by the room the
// object cap leaves (more could not all be visited); past either, the
// pointer is left out and the snapshot is partial.
void Walker::add_pointer(uint64_t p) {
  if (!p || is_static(p) || seen_.contains(p)) return;
  const uint64_t room = in_.max_objects - std::min(visited_, in_.max_objects);
  if (refs_.size() >= std::min<uint64_t>(kMaxPendingPointers, room)) {
    refs_truncated_ = true;
    return;
  }
  refs_.push_back(p);
}

// Reads the next kBatchRecords records of the innermost range and keeps the
// pointers worth following (not null, not static, not already counted). An
// unreadable batch ends the range; where it starts in readable memory, the
// count ran past the end of it: a count that does not match the memory is
// worth a partial. (Unmapped items are a container freed while we read: the
// list walk says so.)
void Walker::expand_range() {
  PendingRange& g = ranges_.back();
  const uint64_t n = std::min<uint64_t>(g.count - g.done, kBatchRecords);
  const uint64_t at = g.addr + g.done * g.stride * 8;
  batch_.resize(kBatchRecords * kMaxStride);
  if (!mem_.read(at, batch_.data(), n * g.stride * 8)) {
    if (!mem_.read_limit_hit() && !mem_.target_gone() && mem_.mapped(at))
      stop(std::string("a ") + g.what + " at " + hex(g.addr) + " claims " + std::to_string(g.claimed) +
           " items, more than the memory it points at holds; " + std::to_string(g.done) + " were followed");
    ranges_.pop_back();
    return;
  }
  const uint64_t words = n * g.stride;
  for (uint64_t r = 0; r < words; ++r)
    if ((g.keep >> (r % g.stride)) & 1) add_pointer(batch_[r]);
  g.done += n;
  if (g.done < g.count) return;
  if (g.claimed > g.count)
    stop(std::string("a ") + g.what + " at " + hex(g.addr) + " claims " + std::to_string(g.claimed) +
         " items; the first " + std::to_string(g.count) + " were followed");
  ranges_.pop_back();
}

// The objects this tracked object references directly, as CPython's own
// tp_traverse would see them for the common containers and instances.
void Walker::collect_refs(uint64_t obj, ByteView o, const TypeInfo& t) {
  const uint64_t n = abs64(i64(o, 16));
  switch (t.kind) {
    case Kind::kList: add_pointers(u64(o, 24), std::min(n, u64(o, 32)), 1, 1, "list"); break;
    case Kind::kTuple: add_pointers(obj + L_.tuple_items, n, 1, 1, "tuple"); break;
    case Kind::kSet: {
      const uint64_t mask = u64(o, 32);
      if (mask < (1ull << 32)) add_pointers(u64(o, 40), mask + 1, 2, 0b01, "set");  // setentry {key, hash}
      break;
    }
    case Kind::kDict: {
      const uint64_t keys = u64(o, 32), values = u64(o, 40);
      auto k = is_static(keys) ? std::nullopt : read_keys(keys);
      if (!k) break;
      // PyDictKeyEntry {hash, key, value} or PyDictUnicodeEntry {key, value};
      // a split table keeps its values apart.
      if (k->kind == 0) add_pointers(keys + k->entries_offset(), k->nentries, 3, values ? 0b010 : 0b110, "dict");
      else add_pointers(keys + k->entries_offset(), k->nentries, 2, values ? 0b01 : 0b11, "dict");
      if (values) add_pointers(values + L_.dict_values_items, k->nentries, 1, 1, "dict");
      break;
    }
    default: break;
  }
  if (!(t.flags & kHeapType)) return;
  for (uint32_t off : t.slot_offsets) {
    uint64_t v = 0;
    if (!o.read_u64(off, v)) mem_.get(obj + off, v);  // beyond the bytes read with the header
    add_pointer(v);
  }
  if (L_.managed_dict == PyManagedDict::kNone) {
    // 3.8-3.10: the instance's __dict__ (untracked while it holds only
    // atomic values) at tp_dictoffset, inside the object's basic size.
    const int64_t off = t.dictoffset;
    uint64_t dict = 0;
    if (off >= 16 && static_cast<uint64_t>(off) + 8 <= t.basicsize && !o.read_u64(static_cast<uint64_t>(off), dict))
      mem_.get(obj + static_cast<uint64_t>(off), dict);
    add_pointer(dict);
    return;
  }
  if (!(t.flags & kManagedDict)) return;
  // Attribute values of a managed dict that was never materialised.
  uint64_t values = 0, dict = 0;
  switch (L_.managed_dict) {
    case PyManagedDict::kNone: break;
    case PyManagedDict::kValuesBeforeDict:
      mem_.get(obj - 32, values);
      mem_.get(obj - 24, dict);
      break;
    case PyManagedDict::kTaggedDictOrValues: {
      uint64_t dv = 0;
      mem_.get(obj - 24, dv);
      if (dv & 1) values = dv + 1;  // stored as values - 1 (_PyDictOrValues_SetValues)
      else dict = dv;
      break;
    }
    case PyManagedDict::kInlineValues: {
      mem_.get(obj - 24, dict);
      if (t.flags & kInlineValues) {
        uint8_t hdr[4];
        const uint64_t v = obj + t.basicsize;
        // PyDictValues: capacity, size, embedded, valid (0 once moved to a dict);
        // 3.13 asserts basicsize == sizeof(PyObject), 3.14 places them at basicsize.
        if (mem_.read(v, hdr, sizeof hdr) && hdr[3]) add_pointers(v + L_.dict_values_items, hdr[0]);
      }
      break;
    }
  }
  add_pointer(dict);
  if (values) add_pointers(values + L_.dict_values_items, t.shared_entries);
}

// Counts the untracked objects among the pending references, each once.
// Untracked containers (a tuple of str, a dict of str -> bytes: CPython stops
// tracking containers that can hold no cycle) are followed too, transitively,
// since what they hold is reachable from nothing the GC lists show. Depth
// first: pending pointers before the next batch of a container's items, so
// what is pending stays within the depth of the references being followed.
void Walker::visit_refs() {
  while (!halt_) {
    if ((++steps_ & 1023) == 0 && deadline_.expired()) {
      halt("deadline reached while following references");
      break;
    }
    if (mem_.read_limit_hit()) {
      halt("read budget exhausted while following references");
      break;
    }
    if (!refs_.empty()) {
      const uint64_t r = refs_.back();
      refs_.pop_back();
      if (!visit_ref(r)) break;
    } else if (!ranges_.empty()) {
      expand_range();
    } else {
      break;
    }
  }
  peak_queue_bytes_ = std::max<uint64_t>(peak_queue_bytes_, refs_.capacity() * sizeof(uint64_t) +
                                                                ranges_.capacity() * sizeof(PendingRange));
  refs_.clear();
  ranges_.clear();
}

bool Walker::visit_ref(uint64_t r) {
  if (!r || (r & 7) || is_static(r) || seen_.contains(r) || rejected(r)) return true;
  if (visited_ >= in_.max_objects) {
    refs_truncated_ = true;
    return false;
  }
  // Marked only once it reads as an object of a valid type whose size fits
  // its memory: a reference is the target's word (a container's count can
  // run past its items into any memory), and marks cost the agent memory.
  uint8_t buf[kObjView];
  if (!load(r, buf, sizeof buf)) return reject(r);
  const ByteView o(buf, sizeof buf);
  TypeInfo& t = type_info(u64(o, 8));
  if (!t.valid) return reject(r);
  if (t.flags & kHaveGc) {
    uint64_t next = 1;
    if (!mem_.get(r - kGcHead, next)) return reject(r);
    if (next != 0) {
      mark(r);  // tracked: counted from its list, now or later
      return true;
    }
  }
  bool fits = true;
  const uint64_t size = size_of(r, o, t, fits);
  if (!fits) return reject(r);
  mark(r);
  ++visited_;
  ++untracked_;
  ++t.objects;
  t.bytes = sat_add(t.bytes, size);
  if (t.flags & kHaveGc) collect_refs(r, o, t);
  return true;
}

bool Walker::walk_list(uint64_t head) {
  uint8_t hb[16];
  if (!mem_.read(head, hb, sizeof hb)) return !halt(mem_.target_gone() ? "target exited during the walk" : "cannot read a GC list head");
  uint64_t prev = head;
  uint64_t g = u64(ByteView(hb, sizeof hb), 0) & kLinkMask;
  while (g != head) {
    if (over_budget()) return false;
    uint8_t buf[kGcHead + kObjView];
    if (g == 0 || (g & 7) || !load(g, buf, sizeof buf)) {
      if (over_budget()) return false;  // the read failed for a budget or exit reason
      return !stop("GC list changed under the reader (unreadable next link)");
    }
    const ByteView gh(buf, kGcHead), o(buf + kGcHead, kObjView);
    if ((u64(gh, 8) & kLinkMask) != prev) return !stop("GC list changed under the reader (prev link mismatch)");
    const uint64_t obj = g + kGcHead;
    // Marked so that references to it are skipped without reading it again.
    mark(obj);
    TypeInfo& t = type_info(u64(o, 8));
    ++visited_;
    ++tracked_;
    ++t.objects;
    bool fits = true;
    t.bytes = sat_add(t.bytes, size_of(obj, o, t, fits));
    implausible_sizes_ += !fits;
    collect_refs(obj, o, t);
    if (refs_.size() >= kFollowPointersAt || ranges_.size() >= kFollowRangesAt) visit_refs();
    if (halt_) return false;
    prev = g;
    g = u64(gh, 0) & kLinkMask;
  }
  return true;
}

// The list-head set of this GC state: the one generation0 points at when the
// layout has that pointer, else the first whose heads are all well-formed
// circular lists (re-checked a few times: the youngest list churns).
bool Walker::read_gc_state(uint64_t gc) {
  gc_buf_.resize(L_.gc_state_size);
  return mem_.read(gc, gc_buf_.data(), gc_buf_.size());
}

const std::vector<uint32_t>* Walker::pick_heads(uint64_t gc) {
  if (L_.gc_generation0) {
    uint64_t gen0 = 0;
    if (!read_gc_state(gc) || !ByteView(gc_buf_.data(), gc_buf_.size()).read_u64(L_.gc_generation0, gen0))
      return nullptr;
    for (const auto& set : L_.gc_head_sets)
      if (!set.empty() && gen0 == gc + set[0]) return &set;
    return nullptr;
  }
  for (int attempt = 0; attempt < 5; ++attempt) {
    for (const auto& set : L_.gc_head_sets) {
      bool ok = true;
      for (uint32_t off : set) {
        uint64_t h = gc + off, hn = 0, hp = 0, back = 0, fwd = 0;
        ok = mem_.get(h, hn) && mem_.get(h + 8, hp) && (hn &= kLinkMask, hp &= kLinkMask, true) &&
             (hn == h || (mem_.get(hn + 8, back) && (back & kLinkMask) == h)) &&
             (hp == h || (mem_.get(hp, fwd) && (fwd & kLinkMask) == h));
        if (!ok) break;
      }
      if (ok) return &set;
    }
  }
  return nullptr;
}

PyHeapResult Walker::run() {
  PyHeapResult res;
  if (auto bad = validate_py_layout(L_)) {
    res.reason = "unusable CPython layout: " + *bad;
    return res;
  }
  other_.valid = true;
  other_.name = "<other types>";
  uint64_t interp = 0;
  if (!mem_.get(in_.runtime_addr + L_.interpreters_head, interp) || interp == 0) {
    res.reason = mem_.target_gone() ? "target exited" : "cannot read _PyRuntime.interpreters.head";
    return res;
  }
  AddressSet interps;
  bool any = false;
  for (int i = 0; interp && i < 256 && interps.insert(interp); ++i) {
    ++res.interpreters;
    if (L_.runtime_gc && i > 0) {  // 3.8: the one GC state was walked with the first interpreter
      if (!mem_.get(interp + L_.interp_next, interp)) break;
      continue;
    }
    const uint64_t gc = py_gc_state(L_, in_.runtime_addr, interp);
    const std::vector<uint32_t>* heads = pick_heads(gc);
    if (!heads) {
      if (mem_.read_limit_hit()) halt("read budget exhausted");
      else if (mem_.target_gone()) halt("target exited during the walk");
      else stop("no well-formed GC generation lists at the interpreter's GC state");
    } else {
      any = true;
      for (size_t li = 0; li < heads->size(); ++li) {
        ++res.lists_total;
        const uint64_t before = tracked_;
        const bool complete = !halt_ && walk_list(gc + (*heads)[li]);
        if (complete) {
          ++res.lists_complete;
          continue;
        }
        // Cut short (or never started after a halt): how much is missing? The
        // oldest list holds nearly everything: the runtime counts it. The
        // youngest list's gc_generation.count (at +20) is its allocations since
        // the last collection; the middle and permanent lists are small and
        // have no count, so they add nothing.
        const uint64_t read = tracked_ - before;
        uint64_t expected = read;
        const bool state = read_gc_state(gc);
        const ByteView gv(gc_buf_.data(), state ? gc_buf_.size() : 0);
        if (li == 2) {
          uint64_t total = 0, pending = 0;
          if (L_.gc_long_lived_total && gv.read_u64(L_.gc_long_lived_total, total) &&
              gv.read_u64(L_.gc_long_lived_total + 8, pending) && total < (1ull << 40) && pending < (1ull << 40) &&
              total + pending > read)
            expected = total + pending;
          else
            unestimated_ = true;  // no count, or one the read already exceeds
        } else if (li == 0) {
          int32_t count = 0;
          if (gv.read_i32(uint64_t{(*heads)[li]} + 20, count) && count > 0) expected = static_cast<uint64_t>(count);
        }
        missing_ += std::max(expected, read) - read;
      }
    }
    if (halt_ || (!reason_.empty() && !any)) break;
    if (!mem_.get(interp + L_.interp_next, interp)) break;
  }
  if (!halt_) visit_refs();
  if (implausible_sizes_)
    stop(std::to_string(implausible_sizes_) +
         " GC-tracked objects claim sizes that do not fit the memory they lie in (counted at their fixed size)");
  res.tracked_objects = tracked_;
  res.untracked_objects = untracked_;
  res.implausible_sizes = implausible_sizes_;
  res.ref_queue_peak_bytes = std::max<uint64_t>(peak_queue_bytes_, refs_.capacity() * sizeof(uint64_t) +
                                                                       ranges_.capacity() * sizeof(PendingRange));
  res.addresses_marked = marks_;
  auto emit = [&](const TypeInfo& t) {
    if (t.objects) res.types.push_back({t.name, t.objects, t.bytes});
  };
  for (auto& [addr, t] : types_)
    if (t.valid) emit(t);
  emit(other_);
  emit(unknown_);
  res.scope = "gc_tracked+referenced_untracked";
  if (!any) {
    res.status = SnapshotStatus::kFailed;
    res.reason = reason_.empty() ? "no interpreter state could be read" : reason_;
    return res;
  }
  if (reason_.empty() && !refs_truncated_) {
    res.status = SnapshotStatus::kComplete;
    res.coverage = 1.0;
  } else {
    res.status = SnapshotStatus::kPartial;
    res.reason = reason_.empty() ? "object cap reached while following references" : reason_;
    if (!unestimated_)
      res.coverage = tracked_ + missing_ ? static_cast<double>(tracked_) / static_cast<double>(tracked_ + missing_) : 1.0;
    else
      res.coverage = res.lists_total ? static_cast<double>(res.lists_complete) / static_cast<double>(res.lists_total) : 0;
  }
  return res;
}

}  // namespace

PyHeapResult walk_python_heap(ChunkCache& mem, const PyLayout& layout, const PyHeapInput& in,
                              const Deadline& deadline) {
  Walker w(mem, layout, in, deadline);
  return w.run();
}

}  // namespace oomsnap
