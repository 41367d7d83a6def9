// `oomsnap snapshot --pid PID [--format json|pprof] [-o FILE] [--max-entries N] [--budget-ms MS]`
#pragma once
#include <ostream>
#include <string>
#include <vector>

namespace oomsnap {

// Exit status: 0 a record was written (also partial/unavailable), 2 bad
// arguments, 1 the pid does not exist / cannot be read / nothing to write.
int run_snapshot_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace oomsnap
