// Text a target controls (a comm, a cgroup name, a path, a reason that quotes
// them) made safe for one log line: every byte outside printable ASCII
// (control characters such as "\n", "\r" and ESC, DEL, and every byte from
// 0x80, so also invalid UTF-8 and Unicode line or direction marks) becomes
// \xNN, and a backslash becomes \\, so the text cannot end the line, start a
// forged one or drive the terminal, and reads back unambiguously.
#pragma once
#include <string>
#include <string_view>

namespace oomsnap {

std::string printable(std::string_view s);

// The last line of defence, for a whole log message: only control
// characters (below 0x20, and DEL) become \xNN, so the message stays one
// line whatever a call site passed in unescaped. printable() output passes
// unchanged.
std::string one_line(std::string_view s);

}  // namespace oomsnap
