// oomsnap: memory-pressure forensics. Subcommands dispatch to userspace/cli/*.
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "agent/events/bpf_events.h"
#include "agent/ops/version.h"
#include "capture/capture_child.h"
#include "cli/show_command.h"
#include "cli/snapshot_command.h"
#include "cli/test_hooks.h"
#include "cli/watch_command.h"
#include "git_commit.h"

namespace {

// What a bug report needs: the release, the exact commit, and which BPF
// attach modes this binary's programs can use (the agent's log says which
// one each event got on this kernel).
void print_version(std::ostream& out) {
  using oomsnap::BpfAttachMode;
  out << "oomsnap " << oomsnap::kOomsnapVersion << "\n"
      << "commit " << OOMSNAP_GIT_COMMIT << "\n"
      << "bpf attach modes: " << to_string(BpfAttachMode::RawTracepoint) << ", "
      << to_string(BpfAttachMode::Tracepoint) << " (--bpf-mode " << to_string(BpfAttachMode::Auto)
      << ": raw_tp per event, else tracepoint)\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const char* usage =
      "usage: oomsnap <command> [options]    (oomsnap <command> --help: its options)\n"
      "commands:\n"
      "  show [FILE|-]        agent records as text for a person (default: the agent's store)\n"
      "  snapshot --pid PID   capture one process's heap profile (JSON or pprof)\n"
      "  watch [--config F]   the agent: one JSON record per memory-pressure incident\n"
      "  --version            the version, the commit and the BPF attach modes built in\n";
  if (args.empty()) {
    std::cerr << usage;
    return 2;
  }
  if (args[0] == "-h" || args[0] == "--help") {
    std::cout << usage;
    return 0;
  }
  if (args[0] == "--version" || args[0] == "-V") {
    print_version(std::cout);
    return 0;
  }
  std::string cmd = args[0];
  args.erase(args.begin());
  // The sandboxed capture process the agent and `snapshot` start (not for hand use).
  if (cmd == oomsnap::kCaptureChildCommand) return oomsnap::run_capture_child(args);
  if (cmd == "snapshot") return oomsnap::run_snapshot_command(args, std::cout, std::cerr);
  if (cmd == "show") return oomsnap::run_show_command(args, std::cin, std::cout, std::cerr, ::isatty(STDOUT_FILENO) == 1);
  if (cmd == "watch") return oomsnap::run_watch_command(args, oomsnap::read_test_hooks(), std::cout, std::cerr);
  std::cerr << "oomsnap: unknown command '" << cmd << "'\n" << usage;
  return 2;
}
