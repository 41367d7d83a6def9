// What java.nio's direct buffers hold, as the JVM itself counts them: the
// static totals of java.nio.Bits (RESERVED_MEMORY, TOTAL_CAPACITY and COUNT
// since JDK 9, reservedMemory, totalCapacity and count in JDK 8), AtomicLongs
// that every ByteBuffer.allocateDirect adds to and its cleaner subtracts
// from; BufferPoolMXBean "direct" reports the same numbers. Read out of
// process through the class's mirror (hotspot_classes.h). The memory itself
// is malloc'd (Unsafe.allocateMemory), so it has no address range of its
// own: the breakdown names that many native bytes (issue #24).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/chunk_cache.h"
#include "core/collector.h"
#include "java/hotspot_classes.h"

namespace oomsnap {

struct DirectBufferTotals {
  uint64_t reserved = 0;  // bytes of native memory reserved (MemoryUsed)
  uint64_t capacity = 0;  // the buffers' capacities (TotalCapacity)
  uint64_t count = 0;     // buffers alive
};

// More than this is not believed (the address space of x86-64's user half).
inline constexpr uint64_t kMaxDirectBufferBytes = uint64_t{1} << 47;

// Zero totals when java.nio.Bits is not loaded or not initialized (the JVM
// made no direct buffer yet). nullopt + error when its fields or values
// cannot be read, or a value is negative or implausible.
std::optional<DirectBufferTotals> read_direct_buffers(ChunkCache& mem, const HotSpotClasses& classes,
                                                      const Deadline& deadline, std::string& error);

}  // namespace oomsnap
