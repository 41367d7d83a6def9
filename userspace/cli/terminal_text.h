// Text from an agent record made safe to print on a terminal. Records hold
// names a monitored process chose (function and class names, comm, cgroup
// paths, reasons quoting them), so `oomsnap show` must never let one clear
// the screen, retitle the window, move the cursor or hide a line.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace oomsnap {

// U+FFFD: what an invalid byte or an unprintable character is shown as.
inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// Valid UTF-8 text is kept (names in any script read as they are); C0
// controls (also tab and newline), DEL, C1 controls (U+0080..U+009F, which
// some terminals obey as CSI/OSC), Unicode line/paragraph separators and
// bidirectional overrides (which reorder what follows on the line) become
// U+FFFD, as does every byte of invalid UTF-8. When the result would exceed
// `max_bytes` it is cut at a character boundary and ends in "...(+N bytes)",
// N the bytes of `s` left out, so a cut is never mistaken for the name.
std::string terminal_safe(std::string_view s, size_t max_bytes = std::string_view::npos);

// Only invalid UTF-8 replaced (by U+FFFD), everything else byte for byte: a
// line repaired so a JSON parser that insists on UTF-8 accepts it.
std::string repair_utf8(std::string_view s);

}  // namespace oomsnap
