// How jcmd GC.class_histogram names a class (JDK 9+), from HotSpot's internal name.
#include <string>
#include <string_view>

#include "base/text.h"
#include "java/java_heap.h"

namespace oomsnap {

bool hotspot_hidden_class_name(std::string_view n, uint64_t element_klass, bool archived) {
  // An array's element class: "[[LFoo+0x...;" -> "Foo+0x...".
  size_t dims = 0;
  while (dims < n.size() && n[dims] == '[') ++dims;
  if (dims) {
    if (n.size() < dims + 3 || n[dims] != 'L' || n.back() != ';') return false;
    n = n.substr(dims + 1, n.size() - dims - 2);
  }
  // Klass::external_name() takes the last '+', never the name's first byte.
  const size_t plus = n.rfind('+');
  if (plus == std::string_view::npos || plus == 0) return false;
  std::string_view hex = n.substr(plus + 1);
  if (hex.size() < 3 || hex.size() > 18 || hex.substr(0, 2) != "0x") return false;
  hex.remove_prefix(2);
  uint64_t v = 0;
  for (char c : hex) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  // Defined at run time: INTPTR_FORMAT of the InstanceKlass itself.
  if (hex.size() == 16 && element_klass != 0 && v == element_klass) return true;
  // Archived: the dump's address or counter, no longer the klass's.
  return archived;
}

std::string java_class_name(const std::string& internal, bool hidden) {
  size_t dims = 0;
  while (dims < internal.size() && internal[dims] == '[') ++dims;
  std::string base;
  if (dims == 0) {
    base = internal;
  } else {
    const std::string elem = internal.substr(dims);
    static const std::pair<char, const char*> prim[] = {{'Z', "boolean"}, {'B', "byte"}, {'C', "char"},
                                                        {'S', "short"},   {'I', "int"},  {'J', "long"},
                                                        {'F', "float"},   {'D', "double"}};
    if (elem.size() == 1) {
      for (auto [c, n] : prim)
        if (elem[0] == c) base = n;
    } else if (elem.size() > 2 && elem.front() == 'L' && elem.back() == ';') {
      base = elem.substr(1, elem.size() - 2);
    }
    if (base.empty()) return internal;  // not a descriptor we know: keep it as is
  }
  std::replace(base.begin(), base.end(), '/', '.');
  if (hidden) {
    const size_t plus = base.rfind('+');
    if (plus != std::string::npos && plus > 0) base[plus] = '/';
  }
  for (size_t i = 0; i < dims; ++i) base += "[]";
  return base;
}

}  // namespace oomsnap
