#include "go/go_site_name.h"

#include <array>

namespace oomsnap {
namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Families whose every member is an allocator helper: mallocgc, mallocgcTiny,
// mallocgcSmall*, mallocgcLarge, the size-class specialised mallocgc*SC<n> of
// 1.26+; moveSlice* (1.27); convT, convT16/32/64, convTnoptr, convTslice,
// convTstring; concatstring2..5 and concatstrings; makemap, makemap64,
// makemap_small; mapassign and its fast variants; makeslice, makeslice64,
// makeslicecopy; all of 1.24+'s internal/runtime/maps (the map
// implementation allocating for its caller).
constexpr std::array<std::string_view, 8> kPrefixes = {
    "runtime.mallocgc", "runtime.moveSlice",  "runtime.convT",  "runtime.concatstring",
    "runtime.makemap",  "runtime.mapassign",  "runtime.makeslice", "internal/runtime/maps.",
};

// Single functions (slice.go, chan.go, map.go before 1.24, string.go).
constexpr std::array<std::string_view, 20> kNames = {
    "runtime.newobject",       "runtime.newarray",         "runtime.growslice",
    "runtime.makechan",        "runtime.makechan64",       "runtime.makeBucketArray",
    "runtime.hashGrow",        "runtime.(*hmap).newoverflow", "runtime.rawstring",
    "runtime.rawstringtmp",    "runtime.rawbyteslice",     "runtime.rawruneslice",
    "runtime.gobytes",         "runtime.slicebytetostring", "runtime.stringtoslicebyte",
    "runtime.stringtoslicerune", "runtime.slicerunetostring", "runtime.intstring",
    "runtime.bytealg_MakeNoZero", "runtime.concatbytes",
};

}  // namespace

bool is_go_runtime_frame(std::string_view fn) {
  return starts_with(fn, "runtime.") || starts_with(fn, "internal/runtime/");
}

bool is_go_allocator_frame(std::string_view fn) {
  for (auto p : kPrefixes)
    if (starts_with(fn, p)) return true;
  for (auto n : kNames)
    if (fn == n) return true;
  return false;
}

GoSite name_go_site(std::vector<std::string> frames) {
  GoSite site;
  size_t k = 0;
  while (k < frames.size() && is_go_runtime_frame(frames[k])) ++k;
  if (k < frames.size()) {
    site.stack.assign(frames.begin() + static_cast<std::ptrdiff_t>(k), frames.end());
    site.name = site.stack.front();
    return site;
  }
  size_t n = 0;
  while (n < frames.size() && is_go_allocator_frame(frames[n])) ++n;
  if (n == frames.size()) n = 0;  // nothing but the allocator: its leaf
  site.name = frames.empty() ? "?" : frames[n];
  site.stack = std::move(frames);
  return site;
}

}  // namespace oomsnap
