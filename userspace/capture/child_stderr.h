// What a capture process writes to its stderr, as the parent logs it. The
// child's stderr is a pipe only the parent reads: a child a crafted target
// has taken over must not reach the agent's log (which log shippers collect
// beside the records) with forged lines, terminal escapes or the node's
// secrets in bulk. So at most `cap` bytes per capture are kept, each line is
// escaped (base/log_escape.h) and prefixed with the capture process's pid, and
// the rest is dropped and counted.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace oomsnap {

class ChildStderr {
 public:
  static constexpr size_t kDefaultCap = 4096;
  explicit ChildStderr(size_t cap = kDefaultCap) : cap_(cap) {}

  void add(std::string_view bytes);
  bool empty() const { return kept_.empty() && dropped_ == 0; }
  uint64_t dropped() const { return dropped_; }
  // The log lines for what arrived since the last call, then forgets it:
  // "capture process PID: <escaped line>" for each line kept, and a last one
  // counting the bytes dropped, if any.
  std::vector<std::string> take_lines(pid_t child);

 private:
  size_t cap_;
  std::string kept_;
  uint64_t dropped_ = 0;
};

}  // namespace oomsnap
