#include "core/json_stream.h"

namespace oomsnap {

using json = nlohmann::json;

// nlohmann's SAX events, turned into the tree minus the streamed elements.
// Like nlohmann's own DOM builder it keeps a stack of the open containers;
// unlike it, it counts what it keeps and refuses what an honest capture
// process never writes (duplicate keys, deep nesting).
class JsonStream::Builder {
 public:
  Builder(const Limits& limits, std::vector<Stream>& streams, std::string& why)
      : limits_(limits), streams_(streams), why_(why) {}

  json take_root() { return std::move(root_); }

  bool null() { return scalar(json(nullptr)); }
  bool boolean(bool v) { return scalar(json(v)); }
  bool number_integer(json::number_integer_t v) { return scalar(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return scalar(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return scalar(json(v)); }
  bool string(json::string_t& v) { return scalar(json(std::move(v))); }
  bool binary(json::binary_t&) { return fail("binary values are not JSON"); }
  bool key(json::string_t& k) {
    key_ = std::move(k);
    return true;
  }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t position, const std::string&, const json::exception&) {
    if (why_.empty()) why_ = "not JSON (at byte " + std::to_string(position) + ")";
    return false;
  }

 private:
  struct Open {
    json* value;
    std::string key;          // the key it is stored under ("" for the root and array elements)
    Stream* stream = nullptr;  // its elements go to this stream's sink
    bool element_root = false;
  };

  bool fail(std::string what) {
    if (why_.empty()) why_ = std::move(what);
    return false;
  }

  std::string path_text(const Stream& s) const {
    std::string out;
    for (const auto& k : s.path) out += (out.empty() ? "" : ".") + k;
    return out;
  }

  // Stores v where the parser is; `where` is where it now lives.
  bool place(json&& v, json*& where, bool& element_root) {
    element_root = false;
    if (open_.empty()) {
      if (++tree_values_ > limits_.max_tree_values) return fail("more values than the tree's limit");
      root_ = std::move(v);
      where = &root_;
      return true;
    }
    Open& parent = open_.back();
    if (parent.stream) {
      element_ = std::move(v);
      element_values_ = 1;
      element_stream_ = parent.stream;
      where = &element_;
      element_root = true;
      return true;
    }
    if (element_stream_) {
      if (++element_values_ > limits_.max_element_values)
        return fail("an element of " + path_text(*element_stream_) + " holds more than " +
                    std::to_string(limits_.max_element_values) + " values");
    } else if (++tree_values_ > limits_.max_tree_values) {
      return fail("more than " + std::to_string(limits_.max_tree_values) + " values outside the lists");
    }
    if (parent.value->is_array()) {
      parent.value->push_back(std::move(v));
      where = &parent.value->back();
      return true;
    }
    auto [it, inserted] = parent.value->emplace(key_, std::move(v));
    if (!inserted) return fail("duplicate key '" + key_.substr(0, 64) + "'");
    where = &it.value();
    return true;
  }

  bool scalar(json&& v) {
    json* where = nullptr;
    bool element_root = false;
    if (!place(std::move(v), where, element_root)) return false;
    return element_root ? deliver() : true;
  }

  // The stream whose path is where a new array is being stored, if any:
  // only arrays reached through objects alone, outside any element.
  Stream* stream_here() {
    if (element_stream_ || open_.empty() || !open_.back().value->is_object()) return nullptr;
    for (const Open& o : open_)
      if (o.value->is_array()) return nullptr;
    for (Stream& s : streams_) {
      if (s.path.size() != open_.size()) continue;
      bool same = s.path.back() == key_;
      for (size_t i = 1; same && i < open_.size(); ++i) same = s.path[i - 1] == open_[i].key;
      if (same) return &s;
    }
    return nullptr;
  }

  bool open(json&& container) {
    if (open_.size() + 1 > limits_.max_depth)
      return fail("nested deeper than " + std::to_string(limits_.max_depth));
    const bool is_array = container.is_array();
    Stream* stream = is_array ? stream_here() : nullptr;
    if (stream && stream->seen) return fail(path_text(*stream) + " appears twice");
    const std::string key = open_.empty() || !open_.back().value->is_object() ? std::string() : key_;
    json* where = nullptr;
    bool element_root = false;
    if (!place(std::move(container), where, element_root)) return false;
    if (stream) stream->seen = true;
    open_.push_back(Open{where, key, stream, element_root});
    return true;
  }

  bool close() {
    const bool element_root = open_.back().element_root;
    open_.pop_back();
    return element_root ? deliver() : true;
  }

  bool deliver() {
    Stream* s = element_stream_;
    element_stream_ = nullptr;
    std::string why;
    const bool ok = s->sink(element_, why);
    element_ = json();
    return ok ? true : fail(why.empty() ? path_text(*s) + ": an element was refused" : why);
  }

  const Limits& limits_;
  std::vector<Stream>& streams_;
  std::string& why_;
  json root_;
  std::vector<Open> open_;
  std::string key_;
  size_t tree_values_ = 0;
  json element_;                     // the element being built, while element_stream_ is set
  Stream* element_stream_ = nullptr;
  size_t element_values_ = 0;
};

void JsonStream::stream_elements(std::vector<std::string> path, ElementSink sink) {
  streams_.push_back(Stream{std::move(path), std::move(sink)});
}

std::optional<json> JsonStream::parse(std::string_view text, std::string& why) {
  for (Stream& s : streams_) s.seen = false;
  std::string error;
  Builder builder(limits_, streams_, error);
  if (!json::sax_parse(text.begin(), text.end(), &builder)) {
    why = error.empty() ? "not JSON" : error;
    return std::nullopt;
  }
  return builder.take_root();
}

}  // namespace oomsnap
