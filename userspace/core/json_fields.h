// Typed, bounded access to the fields of a JSON object from an untrusted
// peer (the capture process's result, which read a hostile target): the
// first problem is recorded with where it was, nothing throws.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace oomsnap {

class JsonFields {
 public:
  // At most this many bytes in a string field: a name, a frame, a reason.
  static constexpr size_t kMaxString = 64 * 1024;

  JsonFields(const nlohmann::json& j, std::string where, std::string& why) : j_(j), where_(std::move(where)), why_(why) {
    if (!j_.is_object()) fail("not an object");
  }
  bool ok() const { return ok_; }
  bool has(const char* k) const { return ok_ && j_.contains(k); }
  std::string str(const char* k, bool required = true) {
    const nlohmann::json* v = get(k, required);
    if (!v) return {};
    if (!v->is_string()) return fail(std::string(k) + " is not a string"), std::string();
    const auto& s = v->get_ref<const std::string&>();
    if (s.size() > kMaxString) return fail(std::string(k) + " is longer than " + std::to_string(kMaxString)), std::string();
    return s;
  }
  uint64_t u64(const char* k, bool required = true) {
    const nlohmann::json* v = get(k, required);
    if (!v) return 0;
    if (!v->is_number_unsigned()) return fail(std::string(k) + " is not an unsigned integer"), 0;
    return v->get<uint64_t>();
  }
  int64_t i64(const char* k) {
    const nlohmann::json* v = get(k, true);
    if (!v) return 0;
    if (!v->is_number_integer()) return fail(std::string(k) + " is not an integer"), 0;
    return v->get<int64_t>();
  }
  double num(const char* k, bool required = true) {
    const nlohmann::json* v = get(k, required);
    if (!v) return 0;
    if (!v->is_number()) return fail(std::string(k) + " is not a number"), 0;
    return v->get<double>();
  }
  bool boolean(const char* k, bool required = true) {
    const nlohmann::json* v = get(k, required);
    if (!v) return false;
    if (!v->is_boolean()) return fail(std::string(k) + " is not a boolean"), false;
    return v->get<bool>();
  }
  const nlohmann::json* get(const char* k, bool required) {
    if (!ok_) return nullptr;
    auto it = j_.find(k);
    if (it == j_.end()) {
      if (required) fail(std::string("missing ") + k);
      return nullptr;
    }
    return &*it;
  }
  void fail(const std::string& what) {
    if (ok_) why_ = where_ + ": " + what;
    ok_ = false;
  }

 private:
  const nlohmann::json& j_;
  std::string where_;
  std::string& why_;
  bool ok_ = true;
};


}  // namespace oomsnap
