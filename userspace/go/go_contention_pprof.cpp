// The block/mutex profile.proto (see go_contention_pprof.h).
#include "go/go_contention_pprof.h"

#include <zlib.h>

#include <map>
#include <stdexcept>
#include <utility>

#include "profile.pb.h"

namespace oomsnap {
namespace {

std::string gzip(const std::string& raw) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2 failed");
  std::string out;
  out.resize(deflateBound(&zs, raw.size()) + 32);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  zs.avail_in = static_cast<uInt>(raw.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) throw std::runtime_error("deflate failed");
  out.resize(zs.total_out);
  return out;
}

}  // namespace

std::string encode_go_contention_pprof(const std::vector<GoContentionSample>& samples, uint64_t load_bias,
                                       const std::vector<GoMapping>& mappings, int64_t time_nanos) {
  namespace pb = perftools::profiles;
  pb::Profile prof;
  std::map<std::string, int64_t> strings;
  auto intern = [&](const std::string& s) -> int64_t {
    auto [it, fresh] = strings.emplace(s, static_cast<int64_t>(strings.size()));
    if (fresh) prof.add_string_table(s);
    return it->second;
  };
  intern("");
  auto value_type = [&](pb::ValueType* vt, const char* type, const char* unit) {
    vt->set_type(intern(type));
    vt->set_unit(intern(unit));
  };
  value_type(prof.mutable_period_type(), "contentions", "count");
  prof.set_period(1);
  value_type(prof.add_sample_type(), "contentions", "count");
  value_type(prof.add_sample_type(), "delay", "nanoseconds");

  // One Location per stored PC, its inline chain as Lines (innermost first), as
  // runtime/pprof's appendLocsForStack builds them; Functions by name and file.
  std::map<std::pair<std::string, std::string>, uint64_t> funcs;
  // Keyed by the call pc and the frames it stands for: the same pc can
  // expand differently (a truncated final inline chain) in another stack.
  std::map<std::pair<uint64_t, std::string>, uint64_t> locs;
  auto func_id = [&](const GoFrame& f) {
    auto [it, fresh] = funcs.emplace(std::make_pair(f.function, f.file), funcs.size() + 1);
    if (fresh) {
      pb::Function* fn = prof.add_function();
      fn->set_id(it->second);
      fn->set_name(intern(f.function));
      fn->set_system_name(intern(f.function));
      fn->set_filename(intern(f.file));
      fn->set_start_line(f.start_line);
    }
    return it->second;
  };
  for (const auto& s : samples) {
    pb::Sample* smp = prof.add_sample();
    smp->add_value(s.values.contentions);
    smp->add_value(s.values.delay_ns);
    for (size_t i = 0; i < s.frames.size();) {
      size_t j = i + 1;
      // An inlined frame and the callers it was inlined into are one Location
      // (one physical call site), as pprof's pcDeck merges them.
      while (j < s.frames.size() && s.frames[j - 1].inlined) ++j;
      std::string names;
      for (size_t k = i; k < j; ++k) names += s.frames[k].function + '\n';
      auto [it, fresh] = locs.emplace(std::make_pair(s.frames[i].pc, std::move(names)), locs.size() + 1);
      if (fresh) {
        pb::Location* l = prof.add_location();
        l->set_id(it->second);
        l->set_address(s.frames[i].pc + load_bias);
        if (!mappings.empty()) l->set_mapping_id(1);
        for (size_t k = i; k < j; ++k) {
          pb::Line* ln = l->add_line();
          ln->set_function_id(func_id(s.frames[k]));
          ln->set_line(s.frames[k].line);
        }
      }
      smp->add_location_id(it->second);
      i = j;
    }
  }
  for (size_t i = 0; i < mappings.size(); ++i) {
    const GoMapping& m = mappings[i];
    pb::Mapping* mp = prof.add_mapping();
    mp->set_id(i + 1);
    mp->set_memory_start(m.start);
    mp->set_memory_limit(m.limit);
    mp->set_file_offset(m.offset);
    mp->set_filename(intern(m.file));
    mp->set_build_id(intern(m.build_id));
    mp->set_has_functions(true);
    mp->set_has_filenames(true);
    mp->set_has_line_numbers(true);
    mp->set_has_inline_frames(true);
  }
  if (time_nanos != 0) prof.set_time_nanos(time_nanos);
  std::string raw;
  if (!prof.SerializeToString(&raw)) throw std::runtime_error("cannot serialize the profile");
  return gzip(raw);
}

}  // namespace oomsnap
