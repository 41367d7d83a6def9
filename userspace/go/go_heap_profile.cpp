#include "go/go_heap_profile.h"

#include <cmath>
#include <limits>

namespace oomsnap {
int64_t go_f64_to_i64(double v) {
  constexpr double kLimit = 9223372036854775808.0;  // 2^63
  if (!(v >= -kLimit && v < kLimit)) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

std::pair<int64_t, int64_t> scale_heap_sample(int64_t count, int64_t size, int64_t rate,
                                              int go_minor, uint64_t object_size) {
  if (go_minor >= 27) {
    // 1.27: the second argument is the (integer) object size; bytes = count*size.
    const int64_t avg = static_cast<int64_t>(object_size);
    if (count == 0 || avg == 0) return {0, 0};
    // Go's int64 multiplication wraps; do the same without UB.
    const int64_t total =
        static_cast<int64_t>(static_cast<uint64_t>(count) * static_cast<uint64_t>(avg));
    if (rate <= 1) return {count, total};
    const double scale = 1.0 / (1.0 - std::exp(-static_cast<double>(avg) / static_cast<double>(rate)));
    return {go_f64_to_i64(static_cast<double>(count) * scale),
            go_f64_to_i64(static_cast<double>(total) * scale)};
  }
  if (count == 0 || size == 0) return {0, 0};
  if (rate <= 1) return {count, size};
  const double avg = static_cast<double>(size) / static_cast<double>(count);
  const double scale = 1.0 / (1.0 - std::exp(-avg / static_cast<double>(rate)));
  return {go_f64_to_i64(static_cast<double>(count) * scale),
          go_f64_to_i64(static_cast<double>(size) * scale)};
}

uint32_t GoHeapProfile::code_of(uint64_t pc) {
  if (!based_) {
    base_ = pc > kBelow ? pc - kBelow : 0;
    based_ = true;
  }
  if (pc >= base_ && pc - base_ < kForeign) return static_cast<uint32_t>(pc - base_);
  if (foreign_.size() >= kForeign) throw std::length_error("Go heap profile: more than 2^31 PCs outside the text");
  foreign_.push_back(pc);
  return kForeign + static_cast<uint32_t>(foreign_.size() - 1);
}

GoHeapBucket& GoHeapProfile::add_bucket(uint64_t size, std::span<const uint64_t> stack) {
  if (stack.size() > UINT32_MAX - codes_.size())
    throw std::length_error("Go heap profile: more than 2^32 stored PCs");
  GoHeapBucket& b = buckets.emplace_back();
  b.size = size;
  b.stack_begin = static_cast<uint32_t>(codes_.size());
  b.stack_len = static_cast<uint32_t>(stack.size());
  for (uint64_t pc : stack) codes_.push_back(code_of(pc));
  return b;
}

std::vector<uint64_t> GoHeapProfile::stack(const GoHeapBucket& b) const {
  std::vector<uint64_t> out;
  out.reserve(b.stack_len);
  for (uint32_t c : stack_codes(b)) out.push_back(pc_of(c));
  return out;
}

}  // namespace oomsnap
