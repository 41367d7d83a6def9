// Where the cgroup-v2 QEMU guest runner lives: $OOMSNAP_V2VM, else the
// shared folder beside the project (../shared/v2vm), else this machine
// family's fixed location of that folder (a checkout elsewhere, e.g. a CI
// clone in /tmp, still finds it).
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <string>

namespace oomsnap_test {

inline std::string v2vm_runner_path() {
  if (const char* e = std::getenv("OOMSNAP_V2VM"); e && *e) return e;
  const std::string beside = std::string(OOMSNAP_SOURCE_DIR) + "/../shared/v2vm/run-in-v2vm.sh";
  if (access(beside.c_str(), X_OK) == 0) return beside;
  const std::string fixed = "/work/shared/v2vm/run-in-v2vm.sh";
  if (access(fixed.c_str(), X_OK) == 0) return fixed;
  return beside;  // absent: the caller reports this path
}

// The guest's vCPUs (run-in-v2vm.sh -c): one. Under QEMU's multi-threaded
// TCG, a static key patched while another vCPU runs through its site can
// leave that vCPU executing the int3 of the patch after the kernel finished
// it: an int3 Oops and a panic. A site every page fault passes (the agent
// attaching and detaching kmem:rss_stat) hit it in 2 boots of 2 with two
// vCPUs; seen before at boot in sched_clock_cpu, before any of our code ran.
// One vCPU has no other vCPU to run stale code; the guest tests took about
// as long (89 s against 78 for the end-to-end test).
constexpr const char* kV2vmCpus = "1";

// Is an executable called `name` on $PATH (e.g. qemu-system-x86_64)?
inline bool on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(ss, dir, ':');)
    if (!dir.empty() && access((dir + "/" + name).c_str(), X_OK) == 0) return true;
  return false;
}

}  // namespace oomsnap_test
