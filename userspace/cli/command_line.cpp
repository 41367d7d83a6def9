#include "cli/command_line.h"

#include "cli/terminal_text.h"

namespace oomsnap {

std::optional<int> parse_command_line(CLI::App& app, const std::vector<std::string>& args, const char* usage,
                                      std::ostream& out, std::ostream& err) {
  // CLI11 takes the arguments last first.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    out << usage;
    return 0;
  } catch (const CLI::ParseError& e) {
    // The message names the option (and may quote what was typed: kept
    // printable, as everything this binary writes to a terminal).
    err << app.get_name() << ": " << terminal_safe(e.what(), 512) << "\n" << usage;
    return 2;
  }
  return std::nullopt;
}

CLI::Validator file_name(bool allow_dash) {
  return CLI::Validator(
      [allow_dash](const std::string& v) -> std::string {
        if (v.empty()) return "needs a file name";
        if (!allow_dash && v == "-") return "needs a file name, not '-'";
        return "";
      },
      "FILE");
}

}  // namespace oomsnap
