// The record store's directory, opened so that no local user can redirect it:
// every directory on the way and every symlink followed is checked, and the
// store is created 0700 (agent/records/rotating_file_sink.cpp).
#pragma once

#include <string>

#include "base/unique_fd.h"

namespace oomsnap::store_dir {

// Resolves `dir` from "/" one component at a time, following symlinks by
// hand, and checks every directory passed and every symlink followed (see
// make_rotating_file_sink in sink.h). Missing directories are created 0700.
// On success `out` holds the store directory opened O_DIRECTORY.
bool open_store_dir(const std::string& dir, UniqueFd& out, std::string& error);

// "pid 1234 (comm)" for the process holding an flock on the file `fd` is
// open on, from /proc/locks; "another process" when it does not say.
std::string lock_holder(int fd);

}  // namespace oomsnap::store_dir
