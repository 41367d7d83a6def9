// Parses JSON from an untrusted peer (the capture process, which read a
// hostile target) without ever holding it as one tree. The elements of the
// arrays a caller names (a snapshot's entries, goroutine groups, ...) are
// handed to that caller one at a time, as each is complete, and dropped; only
// the rest (a few hundred small fields in an honest result) becomes a tree.
// A tree of the whole text costs 4 to 35 times the text; this costs the text
// plus the largest element, whatever the text holds.
#pragma once
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace oomsnap {

class JsonStream {
 public:
  // Takes one complete element (moved from; its strings may be moved out)
  // and says false with why to stop the parse.
  using ElementSink = std::function<bool(nlohmann::json& element, std::string& why)>;

  struct Limits {
    size_t max_depth = 32;           // nesting, counted from the root
    size_t max_tree_values = 4096;   // values kept in the tree (outside the named arrays)
    size_t max_element_values = 4096;  // values in one element of a named array
  };

  explicit JsonStream(Limits limits) : limits_(limits) {}

  // The elements of the array at `path` (object keys from the root, e.g.
  // {"record", "snapshot", "entries"}) go to `sink`; the tree keeps that array
  // empty. A path holding something other than an array is left in the tree
  // for the caller's type checks; a path seen twice is an error.
  void stream_elements(std::vector<std::string> path, ElementSink sink);

  // The tree without the streamed elements, or nullopt with why: not JSON,
  // nested too deep, too many values, or a sink said no.
  std::optional<nlohmann::json> parse(std::string_view text, std::string& why);

 private:
  struct Stream {
    std::vector<std::string> path;
    ElementSink sink;
    bool seen = false;
  };
  class Builder;

  Limits limits_;
  std::vector<Stream> streams_;
};

}  // namespace oomsnap
