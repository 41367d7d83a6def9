#include "capture/child_stderr.h"

#include <algorithm>

#include "base/log_escape.h"

namespace oomsnap {

void ChildStderr::add(std::string_view bytes) {
  const size_t room = cap_ - std::min(cap_, kept_.size());
  const size_t take = std::min(room, bytes.size());
  kept_.append(bytes.substr(0, take));
  dropped_ += bytes.size() - take;
}

std::vector<std::string> ChildStderr::take_lines(pid_t child) {
  std::vector<std::string> lines;
  const std::string who = "capture process " + std::to_string(child) + ": ";
  std::string_view rest = kept_;
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    if (!line.empty()) lines.push_back(who + printable(line));
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  }
  if (dropped_)
    lines.push_back(who + std::to_string(dropped_) + " more bytes of its stderr dropped (at most " +
                    std::to_string(cap_) + " are logged per capture)");
  kept_.clear();
  dropped_ = 0;
  return lines;
}

}  // namespace oomsnap
