// Which frame of a heap profile stack names the allocation site: what the
// JSON entry's `name` says and what part of the stack is printed.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace oomsnap {

// runtime.* and internal/runtime/*: the frames runtime/pprof hides at the
// top of a heap profile stack (protomem.go hideRuntime).
bool is_go_runtime_frame(std::string_view fn);

// The runtime's allocator: mallocgc and the functions that only turn a Go
// allocation statement (new, make, append, a conversion, a map insert) into a
// mallocgc call, in Go 1.19–1.27 (runtime/malloc.go, malloc_generated.go,
// slice.go, chan.go, map*.go, string.go, iface.go, internal/runtime/maps).
// Their linkname aliases outside the runtime (reflect.unsafe_New) are left
// out: a stack holding one is a user stack, and pprof names it by that frame.
bool is_go_allocator_frame(std::string_view fn);

struct GoSite {
  std::vector<std::string> stack;  // what is printed, leaf first
  std::string name;
};

// A user stack loses its leading runtime frames, as pprof shows it, and is
// named after its first remaining frame. A stack that is runtime all the way
// down is printed whole (pprof does the same) and named after its first frame
// that is not the allocator: mallocgc → newobject → malg is runtime.malg.
GoSite name_go_site(std::vector<std::string> frames);

}  // namespace oomsnap
