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

// `s` as valid UTF-8 of at most `max_bytes`: each invalid sequence becomes
// U+FFFD (as the JSON encoder would make it, so a bound checked here still
// holds after encoding), then cut at a character boundary. For names a
// target chooses (file names are bytes, not text).
std::string utf8_prefix(std::string_view s, size_t max_bytes);

}  // namespace oomsnap
