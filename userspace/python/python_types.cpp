// The CPython heap walk's reading of the target's types: name, module,
// size rules and __slots__, read once per type address, and the strings and
// dict lookups that takes.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "python/python_walker.h"

namespace oomsnap::py_walk {

std::string capped_name(std::string s) {
  if (s.size() <= kMaxNameBytes) return s;
  size_t cut = kMaxNameBytes - kTruncated.size();
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  s.resize(cut);
  s += kTruncated;
  return s;
}

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

}  // namespace oomsnap::py_walk
