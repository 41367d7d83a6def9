// oomsnap: memory-pressure forensics. Subcommands dispatch to userspace/cli/*.
#include <iostream>
#include <string>
#include <vector>

#include "capture/capture_child.h"
#include "cli/show_command.h"
#include "cli/snapshot_command.h"
#include "cli/watch_command.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const char* usage =
      "usage: oomsnap <command> [options]\n"
      "commands:\n"
      "  show [FILE|-]        agent records as text for a person (default: the agent's store)\n"
      "  snapshot --pid PID   capture one process's heap profile (JSON or pprof)\n"
      "  watch [--config F]   the agent: one JSON record per memory-pressure incident\n";
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    (args.empty() ? std::cerr : std::cout) << usage;
    return args.empty() ? 2 : 0;
  }
  std::string cmd = args[0];
  args.erase(args.begin());
  // The sandboxed capture process the agent and `snapshot` start (not for hand use).
  if (cmd == oomsnap::kCaptureChildCommand) return oomsnap::run_capture_child(args);
  if (cmd == "snapshot") return oomsnap::run_snapshot_command(args, std::cout, std::cerr);
  if (cmd == "show") return oomsnap::run_show_command(args, std::cin, std::cout, std::cerr);
  if (cmd == "watch") return oomsnap::run_watch_command(args, std::cerr);
  std::cerr << "oomsnap: unknown command '" << cmd << "'\n" << usage;
  return 2;
}
