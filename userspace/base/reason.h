// Reasons made of parts ("the heap is not claimed: ...; the code cache is
// not claimed: ..."), joined by "; ".
#pragma once
#include <string>
#include <string_view>

namespace oomsnap {

inline void append_reason(std::string& reason, std::string_view more) {
  if (!reason.empty()) reason += "; ";
  reason += more;
}

}  // namespace oomsnap
