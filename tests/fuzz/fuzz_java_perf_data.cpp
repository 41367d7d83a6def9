// The JVM's performance counters (java/perf_data.h) from hostile bytes: a
// buffer whose prologue, entry lengths, name and value offsets and count are
// all fuzzed, against a fuzzed layout. Parsing may not read past the
// buffer, loop beyond its entries or find more than it was asked for.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "java/perf_data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 9) return 0;
  oomsnap::PerfDataLayout L;
  // Offsets within a record as VMStructs could claim them (checked against
  // the types' sizes there, but any small value here).
  L.magic = data[0] % 40u, L.used = data[1] % 40u, L.entry_offset = data[2] % 40u, L.num_entries = data[3] % 40u;
  L.entry_length = data[4] % 24u, L.name_offset = data[5] % 24u, L.vector_length = data[6] % 24u;
  L.data_type = data[7] % 24u, L.data_offset = data[8] % 24u;
  const oomsnap::ByteView buf(data + 9, size - 9);
  const std::vector<std::string_view> wanted = {oomsnap::kMetaspaceUsedCounter, oomsnap::kMetaspaceCommittedCounter,
                                                "a", ""};
  std::string err;
  auto m = oomsnap::parse_perf_data(buf, L, wanted, err);
  if (m && m->size() > wanted.size()) __builtin_trap();
  if (m) {
    std::string why;
    auto use = oomsnap::metaspace_use(*m, why);
    if (use && (use->used > use->committed || use->committed > oomsnap::kMaxMetaspaceBytes)) __builtin_trap();
  }
  return 0;
}
