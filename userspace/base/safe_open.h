// Opening files whose paths a target controls (a library path from its maps,
// looked up in its container's root) so that nothing it plants there reaches
// outside that root or stalls the reader:
// - the path is resolved by openat2 with RESOLVE_IN_ROOT |
//   RESOLVE_NO_MAGICLINKS from the target's /proc/PID/root: symlinks, absolute
//   or relative, and ".." stay inside that root (an absolute symlink names the
//   container's file, never the host's), and /proc magic links are refused;
// - it is resolved as O_PATH, which opens nothing (a FIFO does not wait for a
//   writer, no device's open runs), checked with fstat, and only a regular
//   file is then reopened read-only (through /proc/self/fd, the same inode).
// Symlinks stay allowed in the last component too: libraries are reached
// through them (libpython3.11.so.1.0 -> ...).
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <string>

namespace oomsnap {

// The regular file at `path` as seen from the directory root_fd (resolved
// inside it, see above). An fd (O_RDONLY | O_CLOEXEC), or -1 with errno:
// EINVAL when the path resolves to something that is not a regular file;
// ENOSYS without openat2 (kernels before 5.6, or a capture process whose
// kernel could not seal its arguments, see seal_open_how); else why
// resolution failed (ENOENT, ELOOP, EXDEV for a magic link, ...).
int open_regular_in_root(int root_fd, const std::string& path);

// The directory at `path` inside root_fd, resolved the same way, opened for
// reading its entries (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK |
// O_CLOEXEC) in one openat2: O_DIRECTORY refuses anything else (ENOTDIR)
// before its open runs; a symlink as the last component is refused (ELOOP,
// or ENOTDIR). Also a walk's step: root_fd a directory, path one entry's name.
// -1 + errno.
int open_directory_in_root(int root_fd, const std::string& path);

// A path the kernel resolves, such as the magic link /proc/PID/map_files/A-B:
// followed, but the same check: only a regular file is opened. -1 + errno.
int open_regular_file(const std::string& path);

// /proc/PID/root as an O_PATH fd: the root the target sees, for
// open_regular_in_root. -1 + errno.
int open_proc_root(pid_t pid);

// For the capture process's seccomp filter, which cannot read the struct
// open_how that openat2 takes its flags in: moves the two open_hows this
// file passes (open_regular_in_root's O_PATH handle, open_directory_in_root's
// directory; both RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS) into a page of
// their own, read-only and sealed (mseal, Linux 6.10+: no mprotect, munmap,
// mremap or mmap over it), so a filter that allows openat2 only with these
// addresses (and open_how_size()) allows only these opens. Returns their
// addresses (the same on every later call), or nullptr when the page cannot
// be sealed: the filter must then refuse openat2 (with ENOSYS, which both
// functions report).
struct SealedOpenHows {
  const void* path_handle = nullptr;
  const void* directory = nullptr;
};
const SealedOpenHows* seal_open_hows();
size_t open_how_size();

}  // namespace oomsnap
