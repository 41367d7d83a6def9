#include "pprof_summary.h"

#include <zlib.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "profile.pb.h"

namespace oomsnap::testutil {

std::string maybe_gunzip(const std::string& data) {
  if (data.size() < 2 || static_cast<uint8_t>(data[0]) != 0x1f || static_cast<uint8_t>(data[1]) != 0x8b)
    return data;
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 16) != Z_OK) throw std::runtime_error("inflateInit2 failed");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  std::string out;
  char buf[1 << 16];
  int rc;
  do {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&zs);
      throw std::runtime_error("gunzip failed: " + std::to_string(rc));
    }
    out.append(buf, sizeof buf - zs.avail_out);
  } while (rc != Z_STREAM_END);
  inflateEnd(&zs);
  return out;
}

PprofSummary summarize_pprof_bytes(const std::string& data) {
  perftools::profiles::Profile p;
  if (!p.ParseFromString(maybe_gunzip(data))) throw std::runtime_error("not a profile.proto");
  const auto& st = p.string_table();
  if (st.empty() || !st[0].empty()) throw std::runtime_error("string_table[0] must be \"\"");
  auto str = [&](int64_t i) -> const std::string& {
    if (i < 0 || i >= st.size()) throw std::runtime_error("string index out of range: " + std::to_string(i));
    return st[static_cast<int>(i)];
  };

  PprofSummary s;
  s.period = p.period();
  if (p.has_period_type()) {
    s.period_type = str(p.period_type().type());
    s.period_unit = str(p.period_type().unit());
  }
  for (const auto& vt : p.sample_type()) {
    s.sample_types.push_back(str(vt.type()));
    s.sample_units.push_back(str(vt.unit()));
  }
  // Heap profiles have 4 sample types, block/mutex profiles 2, count profiles (goroutine) 1.
  const int nvalues = static_cast<int>(s.sample_types.size());
  if (nvalues != 4 && nvalues != 2 && nvalues != 1)
    throw std::runtime_error("expected 4, 2 or 1 sample types, got " + std::to_string(nvalues));
  s.num_samples = p.sample_size();
  s.num_locations = p.location_size();
  s.num_functions = p.function_size();
  s.num_mappings = p.mapping_size();

  std::unordered_map<uint64_t, std::string> funcs;
  for (const auto& f : p.function()) {
    if (f.id() == 0) throw std::runtime_error("function id 0");
    funcs[f.id()] = str(f.name());
  }
  std::unordered_map<uint64_t, std::vector<std::string>> locs;
  for (const auto& l : p.location()) {
    if (l.id() == 0) throw std::runtime_error("location id 0");
    auto& names = locs[l.id()];
    for (const auto& ln : l.line()) {
      auto it = funcs.find(ln.function_id());
      if (it == funcs.end()) throw std::runtime_error("line refers to unknown function " + std::to_string(ln.function_id()));
      names.push_back(it->second);
    }
  }
  for (const auto& smp : p.sample()) {
    if (smp.value_size() != nvalues)
      throw std::runtime_error("sample with " + std::to_string(smp.value_size()) + " values");
    Stack stk;
    for (uint64_t id : smp.location_id()) {
      auto it = locs.find(id);
      if (it == locs.end()) throw std::runtime_error("sample refers to unknown location " + std::to_string(id));
      stk.insert(stk.end(), it->second.begin(), it->second.end());
    }
    Values& v = s.stacks[stk];
    for (int i = 0; i < nvalues; i++) v[i] += smp.value(i);
  }
  return s;
}

PprofSummary summarize_pprof_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return summarize_pprof_bytes(ss.str());
}

StackMap filter_stacks(const StackMap& stacks, std::string_view prefix) {
  StackMap out;
  for (const auto& [stk, v] : stacks) {
    for (const auto& fn : stk) {
      if (fn.compare(0, prefix.size(), prefix) == 0) {
        out.emplace(stk, v);
        break;
      }
    }
  }
  return out;
}

Values total(const StackMap& stacks) {
  Values t{};
  for (const auto& [stk, v] : stacks)
    for (int i = 0; i < 4; i++) t[i] += v[i];
  return t;
}

std::string format_stack(const Stack& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); i++) {
    if (i) out += " <- ";
    out += s[i];
  }
  return out;
}

static std::string format_values(const Values& v) {
  return "[" + std::to_string(v[0]) + " " + std::to_string(v[1]) + " " + std::to_string(v[2]) + " " +
         std::to_string(v[3]) + "]";
}

std::vector<std::string> compare_stacks(const StackMap& got, const StackMap& want, double rel_tol) {
  std::vector<std::string> diffs;
  for (const auto& [stk, w] : want) {
    auto it = got.find(stk);
    if (it == got.end()) {
      diffs.push_back("missing stack " + format_stack(stk) + " want " + format_values(w));
      continue;
    }
    const Values& g = it->second;
    for (int i = 0; i < 4; i++) {
      const double tol = rel_tol * std::fabs(static_cast<double>(w[i]));
      if (std::fabs(static_cast<double>(g[i]) - static_cast<double>(w[i])) > tol) {
        diffs.push_back("stack " + format_stack(stk) + " value " + std::to_string(i) + ": got " +
                        format_values(g) + " want " + format_values(w));
        break;
      }
    }
  }
  for (const auto& [stk, g] : got)
    if (!want.count(stk)) diffs.push_back("unexpected stack " + format_stack(stk) + " got " + format_values(g));
  return diffs;
}

}  // namespace oomsnap::testutil
