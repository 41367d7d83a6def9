// The command that runs a JDK's tool (java, jcmd) on the host or from a
// cached root file system (OOMSNAP_ROOTFS/<name>), for the live Java tests.
#pragma once
#include <string>
#include <vector>

namespace oomsnap_test {

// `home`/bin/`tool` `args`...: directly on the host when rootfs is empty, or
// chroot'ed into it inside a private mount namespace (proc, and when
// mnt_dir is given a private /tmp for the attach socket and mnt_dir bound
// read-only on /mnt), whose mounts die with the process; the pid is the
// tool's (exec all the way).
inline std::vector<std::string> jdk_command(const std::string& rootfs, const std::string& home,
                                            const std::string& tool, const std::string& mnt_dir,
                                            const std::vector<std::string>& args) {
  std::vector<std::string> argv;
  if (rootfs.empty()) {
    argv.push_back(home + "/bin/" + tool);
  } else {
    argv = {"/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
            "R=$1; F=$2; shift 2; mount -t proc proc \"$R/proc\" && "
            "if [ -n \"$F\" ]; then mount -t tmpfs tmpfs \"$R/tmp\" && mount -o bind,ro \"$F\" \"$R/mnt\"; fi && "
            "exec chroot \"$R\" /usr/bin/env -C /tmp \"$@\"",
            "sh", rootfs, mnt_dir, home + "/bin/" + tool};
  }
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

}  // namespace oomsnap_test
