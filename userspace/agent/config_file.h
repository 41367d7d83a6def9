// Reading the agent's configuration file, which says what a root agent with
// ptrace-class capabilities watches, where it writes and what it listens on:
// a file that another user could have written is refused, not read.
// Refused: one owned by a user other than root or the agent's own uid, and
// one whose mode lets its group or everyone write it (0o020, 0o002). A
// symlink is followed (a Kubernetes ConfigMap mount is a chain of them) and
// the file it reaches is checked: the owner and mode of the opened file, so
// nothing can be swapped between the check and the read. The directories
// above it are the deployer's (deploy/oomsnap.service keeps it in
// /etc/oomsnap, the DaemonSet mounts its ConfigMap read-only).
#pragma once
#include <sys/stat.h>
#include <sys/types.h>

#include <string>

namespace oomsnap {

// Why a file with this owner and mode may not configure an agent running as
// agent_uid, naming path, owner and mode (e.g. "refusing '/etc/x.toml' (mode
// 0664, owner uid 0): its group can write it; chmod go-w it"); "" when it
// may.
std::string config_file_refusal(const std::string& path, const struct stat& st, uid_t agent_uid);

// The text of the configuration file at path; ConfigError naming the path
// (and why) when it cannot be read, is not a regular file, or is refused
// (config_file_refusal with the effective uid).
std::string read_config_file(const std::string& path);

}  // namespace oomsnap
