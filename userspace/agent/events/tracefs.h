// tracefs for the classic-tracepoint fallback of the BPF programs: libbpf
// reads a tracepoint's event id from <tracefs>/events/<category>/<name>/id.
#pragma once
#include <string>

namespace oomsnap {

inline constexpr const char* kTracefs = "/sys/kernel/tracing";

// Mounts tracefs at kTracefs when it is missing (note says so). False with
// error and err (errno) when it is there but unusable or cannot be mounted.
bool ensure_tracefs(std::string& note, std::string& error, int& err);

}  // namespace oomsnap
