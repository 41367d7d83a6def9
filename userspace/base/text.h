// Small text helpers every folder uses: messages that name an address, a list,
// an errno. Depends on nothing but the standard library.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace oomsnap {

// "0x7f00deadbeef": an address or value as messages print it.
std::string hex(uint64_t v);

// The parts with `sep` between them: join({"a", "b"}, "; ") == "a; b".
std::string join(const std::vector<std::string>& parts, std::string_view sep);

// strerror(err), thread-safe: "No such file or directory".
std::string errno_text(int err);

}  // namespace oomsnap
