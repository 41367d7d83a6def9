// `oomsnap show [FILE|-] [--last N] [--container SUBSTR] [--config F]`: agent
// records (JSON lines, as `oomsnap watch` writes them) rendered for a person.
#pragma once
#include <istream>
#include <ostream>
#include <string>
#include <vector>

namespace oomsnap {

// `in` is what "-" reads (stdin in the binary). Lines that are not records
// are noted on `err` by file and line number and skipped. Exit status: 0 at
// least one record shown, 1 none (also: a file cannot be read), 2 bad
// arguments or configuration. `terminal`: `out` is a terminal (the memory
// bar is drawn with block characters; plain ASCII otherwise).
int run_show_command(const std::vector<std::string>& args, std::istream& in, std::ostream& out, std::ostream& err,
                     bool terminal = false);

}  // namespace oomsnap
