// One way to read a subcommand's command line, for every subcommand (CLI11):
// `--k v` and `--k=v` alike; -h/--help prints the command's usage to stdout
// and exits 0; a usage error names the option, prints the usage to stderr
// and exits 2.
#pragma once
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace oomsnap {

// Parses args (argv after the command) into app, an app named "oomsnap
// <command>" (CLI11's default -h/--help flag). Help prints `usage`, the
// command's own text, not CLI11's generated one. nullopt: parsed, go on;
// otherwise the exit status, with the help or the error already printed.
std::optional<int> parse_command_line(CLI::App& app, const std::vector<std::string>& args, const char* usage,
                                      std::ostream& out, std::ostream& err);

// Option validators shared by the subcommands.
// A file name that is not empty (and, with allow_dash false, not "-").
CLI::Validator file_name(bool allow_dash);

}  // namespace oomsnap
