#include "java/direct_buffers.h"

#include <initializer_list>
#include <vector>

#include "base/reason.h"

namespace oomsnap {

std::optional<DirectBufferTotals> read_direct_buffers(ChunkCache& mem, const HotSpotClasses& classes,
                                                      const Deadline& deadline, std::string& error) {
  std::vector<uint64_t> k;
  if (!classes.find(mem, {"java/nio/Bits", "java/util/concurrent/atomic/AtomicLong"}, k, deadline, error))
    return std::nullopt;
  const uint64_t bits = k[0], atomic_long = k[1];
  if (!bits || !classes.initialized(mem, bits)) return DirectBufferTotals{};
  if (!atomic_long) {
    error = "java.nio.Bits is initialized but AtomicLong is not loaded";
    return std::nullopt;
  }
  auto value = classes.field(mem, atomic_long, "value", error);
  if (!value) return std::nullopt;
  if (value->access_flags & kJavaAccStatic) {
    error = "AtomicLong.value is static";
    return std::nullopt;
  }
  const uint64_t mirror = classes.mirror(mem, bits);
  if (!mirror) {
    error = "cannot read java.nio.Bits's mirror";
    return std::nullopt;
  }
  // A static AtomicLong of Bits (JDK 9+ name first, then JDK 8's), read.
  auto total = [&](std::initializer_list<const char*> names, uint64_t& out) {
    std::optional<JavaFieldEntry> f;
    std::string tried;
    for (const char* n : names) {
      if ((f = classes.field(mem, bits, n, error))) break;
      append_reason(tried, error);
    }
    if (!f) {
      error = tried;
      return false;
    }
    const uint64_t obj = (f->access_flags & kJavaAccStatic) ? classes.reference_at(mem, mirror + f->offset) : 0;
    int64_t v = 0;
    if (!obj || !mem.get(obj + value->offset, v) || v < 0 || static_cast<uint64_t>(v) > kMaxDirectBufferBytes) {
      error = std::string("cannot read java.nio.Bits.") + *names.begin() + " (or its value is implausible)";
      return false;
    }
    out = static_cast<uint64_t>(v);
    return true;
  };
  DirectBufferTotals t;
  if (!total({"RESERVED_MEMORY", "reservedMemory"}, t.reserved) ||
      !total({"TOTAL_CAPACITY", "totalCapacity"}, t.capacity) || !total({"COUNT", "count"}, t.count))
    return std::nullopt;
  return t;
}

}  // namespace oomsnap
