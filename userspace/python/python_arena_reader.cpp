#include "python/python_arena_reader.h"

#include <algorithm>
#include <optional>
#include <set>

#include "base/text.h"
#include "python/python_arena_table.h"

namespace oomsnap {
namespace {

constexpr size_t kTableChunk = 64 << 10;  // the deadline is checked between chunks

class ArenaReader {
 public:
  ArenaReader(RemoteMemory& mem, const std::vector<Mapping>& maps, const PyLayout& layout, uint64_t budget,
              const Deadline& deadline)
      : mem_(mem), maps_(maps), geometry_(py_arena_geometry(layout.minor)), budget_(budget), deadline_(deadline) {}

  // Reads and decodes one table into the census; false (with why_) when it
  // cannot be read or does not hold together.
  bool add_table(const PyArenaTableRef& ref) {
    std::string why;
    auto census = read_table(ref, why);
    if (!census) return fail(why);
    merge(*census);
    return true;
  }
  // add_table for a reference that may not be one (a guess): false, and
  // nothing recorded, when it does not read as an arena table.
  bool try_table(const PyArenaTableRef& ref) {
    std::string why;
    auto census = read_table(ref, why);
    if (!census || census->arenas.empty()) return false;
    merge(*census);
    return true;
  }

  bool fail(std::string why) {
    why_ = std::move(why);
    return false;
  }

  PyArenaRead result() {
    PyArenaRead out;
    out.reason = why_.empty() ? "" : "obmalloc arenas not claimed: " + why_;
    if (!why_.empty() || total_.arenas.empty()) return out;
    out.arenas = total_.arenas.size();
    out.used_pool_bytes = total_.used_pool_bytes;
    out.claims = py_arena_claims(total_);
    return out;
  }

  RemoteMemory& mem() { return mem_; }

 private:
  void merge(const PyArenaCensus& census) {
    total_.arenas.insert(total_.arenas.end(), census.arenas.begin(), census.arenas.end());
    total_.used_pool_bytes += census.used_pool_bytes;
  }
  std::optional<PyArenaCensus> read_table(const PyArenaTableRef& ref, std::string& why) {
    if (auto bad = check_py_arena_table_ref(ref)) {
      why = *bad;
      return std::nullopt;
    }
    const uint64_t bytes = ref.count * kPyArenaObjectSize;
    if (spent_ + bytes > budget_) {
      why = "the arena table (" + std::to_string(bytes) + " bytes) exceeds what is left of the read budget";
      return std::nullopt;
    }
    std::vector<uint8_t> table(bytes);
    for (uint64_t off = 0; off < bytes; off += kTableChunk) {
      if (deadline_.expired()) {
        why = "the capture's deadline passed while reading the arena table";
        return std::nullopt;
      }
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kTableChunk, bytes - off));
      if (!mem_.read(ref.arenas + off, table.data() + off, n)) {
        why = "cannot read the arena table at " + hex(ref.arenas + off);
        return std::nullopt;
      }
    }
    spent_ += bytes;
    return decode_py_arena_table(table, geometry_, maps_, why);
  }

  RemoteMemory& mem_;
  const std::vector<Mapping>& maps_;
  PyArenaGeometry geometry_;
  uint64_t budget_, spent_ = 0;
  const Deadline& deadline_;
  PyArenaCensus total_;
  std::string why_;
};

// A stripped module: the first (maxarenas, arenas) pair among the globals
// its arena readers load that reads as a non-empty table. maxarenas doubles
// from 16, so only such values are tried: a wrong pair costs a 4- and an
// 8-byte read, and a table read only when its count is one of those. At
// most kMaxGuessedTables tables are read (a crafted target could otherwise
// have 64 pairs read 6 MiB each).
constexpr int kMaxGuessedTables = 4;
bool guess_static_table(ArenaReader& r, const PythonRuntime& rt) {
  int tables = 0;
  for (uint64_t max_var : rt.maxarenas_candidates) {
    uint32_t max = 0;
    if (!r.mem().read_value(max_var, max) || max < 16 || (max & (max - 1)) != 0) continue;
    for (uint64_t arenas_var : rt.arenas_candidates) {
      uint64_t arenas = 0;
      if (arenas_var == max_var || !r.mem().read_value(arenas_var, arenas) || !arenas) continue;
      if (tables++ == kMaxGuessedTables) return false;
      if (r.try_table({arenas, max})) return true;
    }
  }
  return false;
}

// 3.8-3.11: the statics, by .symtab's names or else guessed from the code.
void read_static_table(ArenaReader& r, const PythonRuntime& rt) {
  if (!rt.arenas_var) {
    if (!guess_static_table(r, rt))
      r.fail("the arena table is a static of obmalloc.c, named only in .symtab, which " + rt.module +
             " does not have (stripped), and none of the " + std::to_string(rt.maxarenas_candidates.size()) +
             " x " + std::to_string(rt.arenas_candidates.size()) +
             " globals that _Py_GetAllocatedBlocks and _PyObject_DebugMallocStats load reads as one");
    return;
  }
  uint64_t arenas = 0;
  uint32_t max = 0;
  if (!r.mem().read_value(rt.arenas_var, arenas) || !r.mem().read_value(rt.maxarenas_var, max)) {
    r.fail("cannot read obmalloc.c's arenas/maxarenas");
    return;
  }
  r.add_table({arenas, max});
}

// 3.12+: each interpreter's obmalloc state.
void read_interpreter_tables(ArenaReader& r, const PythonRuntime& rt, const PyLayout& L) {
  uint64_t interp = 0;
  if (!r.mem().read_value(rt.runtime_addr + L.interpreters_head, interp) || !interp) {
    r.fail("cannot read the interpreter list");
    return;
  }
  std::set<uint64_t> states;
  for (int i = 0; interp && i < kMaxPyArenaInterpreters; ++i) {
    uint64_t state = interp + L.interp_obmalloc;
    if (L.interp_obmalloc_is_pointer && !r.mem().read_value(state, state)) {
      r.fail("cannot read the obmalloc state pointer of interpreter " + hex(interp));
      return;
    }
    if (state && states.insert(state).second) {
      uint8_t mgmt[kPyObmallocMgmtReadSize];
      if (!r.mem().read(state, mgmt, sizeof mgmt)) {
        r.fail("cannot read the obmalloc state at " + hex(state));
        return;
      }
      std::string why;
      auto ref = parse_py_obmalloc_mgmt(mgmt, why);
      if (!ref) {
        r.fail(why + " (interpreter " + hex(interp) + ")");
        return;
      }
      if (ref->count && !r.add_table(*ref)) return;
    }
    if (!r.mem().read_value(interp + L.interp_next, interp)) {
      r.fail("cannot read the next interpreter");
      return;
    }
  }
  if (interp) r.fail("more than " + std::to_string(kMaxPyArenaInterpreters) + " interpreters");
}

}  // namespace

PyArenaRead read_py_arenas(RemoteMemory& mem, const std::vector<Mapping>& maps, const PythonRuntime& rt,
                           const PyLayout& layout, uint64_t read_budget, const Deadline& deadline) {
  ArenaReader r(mem, maps, layout, read_budget, deadline);
  if (layout.interp_obmalloc) read_interpreter_tables(r, rt, layout);
  else read_static_table(r, rt);
  return r.result();
}

}  // namespace oomsnap
