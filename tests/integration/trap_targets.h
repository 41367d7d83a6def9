// Test helpers: start the userfaultfd trap targets, real programs whose heap
// leads a reader into a page registered with userfaultfd (missing mode) that
// nobody serves. Any process_vm_readv of it from outside waits, killably,
// forever:
//   tests/fixtures/python/uffd_trap.py  a GC-tracked list item points there
//   tests/fixtures/go/uffdtrap          the last heap profile bucket's allnext
//                                       points there (built per Go version by
//                                       tools/build-go-fixtures.sh)
// Both print "ready <pid> 0x<trap address>" once planted, then idle until killed.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_process.h"

namespace oomsnap_test {

struct TrapTarget {
  std::unique_ptr<Process> proc;
  uint64_t trap_addr = 0;  // start of the userfaultfd region the heap leads into
};

namespace trap_detail {

// Waits for the ready line; throws (the child is killed) when it does not come.
inline TrapTarget await_ready(std::unique_ptr<Process> proc, const std::string& what,
                              std::chrono::milliseconds timeout) {
  std::string line = proc->read_line(timeout);
  std::istringstream in(line);
  std::string word, addr;
  long pid = 0;
  if (!(in >> word >> pid >> addr) || word != "ready" || addr.empty())
    throw std::runtime_error(what + " printed no ready line (got '" + line + "')");
  TrapTarget t;
  t.trap_addr = std::stoull(addr, nullptr, 16);
  t.proc = std::move(proc);
  return t;
}

}  // namespace trap_detail

// The Python trap under `python` (a path inside `rootfs` when that is set,
// e.g. OOMSNAP_ROOTFS "/trixie" with "/usr/bin/python3.13"; the source is
// passed with -c, so it needs nothing inside the root file system).
// hold_mb: memory the trap fills first, in `cgroup_dir` when that is set.
inline TrapTarget start_python_uffd_trap(const std::string& python = "/usr/bin/python3",
                                         const std::string& rootfs = "", int pages = 4, int hold_mb = 0,
                                         const std::string& cgroup_dir = "") {
  std::string src;
  const std::string path = std::string(OOMSNAP_SOURCE_DIR) + "/tests/fixtures/python/uffd_trap.py";
  if (!read_file(path, src)) throw std::runtime_error("cannot read " + path);
  if (!std::filesystem::exists(rootfs + python)) throw std::runtime_error(rootfs + python + " is missing");
  std::vector<std::string> argv;
  if (!rootfs.empty()) argv = {"/usr/sbin/chroot", rootfs};
  argv.insert(argv.end(), {python, "-c", src, "--pages", std::to_string(pages), "--hold-mb", std::to_string(hold_mb)});
  return trap_detail::await_ready(std::make_unique<Process>(argv, std::vector<std::string>{}, cgroup_dir),
                                  python + " uffd_trap.py",
                                  std::chrono::seconds(60));
}

inline std::string go_uffd_trap_path(const std::string& go_version) {
  return std::string(OOMSNAP_FIXTURES) + "/go/" + go_version + "/default/uffdtrap";
}

// The Go trap built with Go `go_version` ("1.26").
// in: "buckets" (the heap profile's bucket list leads into the trap) or
// "allgs" (runtime.allgptr, the goroutine census's array, is the trap).
inline TrapTarget start_go_uffd_trap(const std::string& go_version, int pages = 4,
                                     const std::string& in = "buckets") {
  const std::string bin = go_uffd_trap_path(go_version);
  if (!std::filesystem::exists(bin))
    throw std::runtime_error(bin + " is missing: run tools/build-go-fixtures.sh " + go_version);
  return trap_detail::await_ready(
      std::make_unique<Process>(std::vector<std::string>{bin, "-pages", std::to_string(pages), "-in", in}), bin,
      std::chrono::seconds(60));
}

}  // namespace oomsnap_test
