// Encoder for Go heap profiles in the shape runtime/pprof's writeHeapProto gives
// them. The structure follows runtime/pprof (protomem.go, proto.go): the same
// runtime-frame hiding, the same location building (one frame per stored PC,
// merged into one Location while the PCs form one inline chain), the same
// location/function caches and the same mapping HasFunctions rule.
#include "go/go_pprof.h"

#include <google/protobuf/arena.h>
#include <google/protobuf/io/coded_stream.h>
#include <zlib.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "go/go_pclntab.h"
#include "profile.pb.h"

namespace oomsnap {
namespace {

namespace pb = perftools::profiles;

constexpr uint8_t kLookupTried = 1;
constexpr uint8_t kLookupFailed = 2;

// What runtime.CallersFrames([]uintptr{pc}) yields for one stored PC: a single
// frame (the innermost function at pc-1; callers of an inlined body are NOT
// expanded for a one-element slice), or nothing for runtime.goexit.
struct PcFrame {
  uint64_t pc = 0;      // Frame.PC: runtime call pc (stored pc - 1)
  uint64_t entry = 0;   // Frame.Entry: runtime entry of the physical function, 0 if unknown
  int64_t line = 0;
  int64_t start_line = 0;
  uint32_t func_key = 0;  // index into Encoder::fnames_ (symbol name)
  uint32_t file_key = 0;  // index into Encoder::fnames_
  bool has_func = false;  // Frame.Func != nil: a valid, non-inlined frame
};

struct PcInfo {
  bool goexit = false;
  uint8_t sym = 0;
  PcFrame frame;
};

struct LocInfo {
  uint64_t id = 0;
  size_t npcs = 0;                       // how many stack PCs the location covers
  const PcFrame* first_frame = nullptr;  // null when the first PC had no frames
  uint8_t first_sym = 0;
};

// Everything known about one distinct stored PC, filled lazily.
struct Slot {
  uint64_t pc = 0;
  bool frames_done = false;
  PcInfo info;                // allFrames(pc)
  std::vector<uint32_t> final_exp;  // runtime_expandFinalInlineFrame of [pc], when it changes
};

// Open-addressing map from PC to slot index (hot path: one probe per stack PC).
class PcIndex {
 public:
  PcIndex() { rehash(1 << 12); }
  // Returns the slot index for pc, or inserts next_index.
  std::pair<uint32_t, bool> find_or_insert(uint64_t pc, uint32_t next_index) {
    if ((size_ + 1) * 2 > cap_) rehash(cap_ * 2);
    size_t i = hash(pc);
    while (true) {
      if (vals_[i] == kEmpty) {
        keys_[i] = pc;
        vals_[i] = next_index;
        size_++;
        return {next_index, true};
      }
      if (keys_[i] == pc) return {vals_[i], false};
      i = (i + 1) & (cap_ - 1);
    }
  }

 private:
  static constexpr uint32_t kEmpty = 0xffffffffu;
  size_t hash(uint64_t pc) const { return static_cast<size_t>((pc * 0x9E3779B97F4A7C15ull) >> shift_); }
  __attribute__((noinline)) void rehash(size_t cap) {
    std::vector<uint64_t> ok = std::move(keys_);
    std::vector<uint32_t> ov = std::move(vals_);
    cap_ = cap;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(cap));
    keys_.assign(cap, 0);
    vals_.assign(cap, kEmpty);
    for (size_t j = 0; j < ov.size(); j++) {
      if (ov[j] == kEmpty) continue;
      size_t i = hash(ok[j]);
      while (vals_[i] != kEmpty) i = (i + 1) & (cap_ - 1);
      keys_[i] = ok[j];
      vals_[i] = ov[j];
    }
  }
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> vals_;
  size_t cap_ = 0, size_ = 0;
  unsigned shift_ = 0;
};

// funcNamePiecesForPrint: "pkg.F[go.shape.int]" -> "pkg.F[...]".
std::string name_for_print(std::string_view name) {
  auto i = name.find('[');
  if (i == std::string_view::npos) return std::string(name);
  auto j = name.rfind(']');
  if (j == std::string_view::npos || j <= i) return std::string(name);
  std::string out(name.substr(0, i));
  out += "[...]";
  out += name.substr(j + 1);
  return out;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Protobuf wire bytes into a gzip stream (zlib level 1, like Go's BestSpeed).
// The raw bytes are cut into 64 KiB chunks; once there is more than one, a
// worker thread deflates them while the encoder keeps producing, so gzip costs
// little wall time on a multi-core node. Only the worker touches the z_stream
// until finish() has joined it.
class GzipProtoWriter {
 public:
  GzipProtoWriter() {
    if (deflateInit2(&zs_, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
      throw std::runtime_error("pprof: deflateInit2 failed");
    buf_.reserve(kChunk + 4096);
  }
  ~GzipProtoWriter() {
    stop_worker();
    deflateEnd(&zs_);
  }
  GzipProtoWriter(const GzipProtoWriter&) = delete;
  GzipProtoWriter& operator=(const GzipProtoWriter&) = delete;

  // One length-delimited field holding msg.
  void write_message(int field, const google::protobuf::MessageLite& msg) {
    const size_t n = msg.ByteSizeLong();
    uint8_t* p = reserve(20 + n);
    p = google::protobuf::io::CodedOutputStream::WriteVarint32ToArray(
        static_cast<uint32_t>(field) << 3 | 2, p);
    p = google::protobuf::io::CodedOutputStream::WriteVarint64ToArray(n, p);
    p = msg.SerializeWithCachedSizesToArray(p);
    commit(p);
  }
  // msg's own fields, as if spliced into the enclosing message.
  void write_message_fields(const google::protobuf::MessageLite& msg) {
    const size_t n = msg.ByteSizeLong();
    uint8_t* p = reserve(n);
    p = msg.SerializeWithCachedSizesToArray(p);
    commit(p);
  }
  std::string finish() {
    stop_worker();
    if (worker_error_) std::rethrow_exception(worker_error_);
    deflate_chunk(buf_, Z_FINISH);
    out_.resize(zs_.total_out);
    return std::move(out_);
  }

 private:
  static constexpr size_t kChunk = 64 << 10;
  static constexpr size_t kMaxQueued = 16;

  uint8_t* reserve(size_t n) {
    if (buf_.size() + n > kChunk && !buf_.empty()) hand_off();
    const size_t at = buf_.size();
    buf_.resize(at + n);
    return reinterpret_cast<uint8_t*>(buf_.data()) + at;
  }
  void commit(const uint8_t* end) {
    buf_.resize(static_cast<size_t>(end - reinterpret_cast<const uint8_t*>(buf_.data())));
  }

  // Queues the current chunk for the worker and continues in a fresh buffer.
  void hand_off() {
    std::string next;
    {
      std::unique_lock lk(mu_);
      if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
      space_cv_.wait(lk, [this] { return queue_.size() < kMaxQueued; });
      queue_.push_back(std::move(buf_));
      if (!spare_.empty()) {
        next = std::move(spare_.back());
        spare_.pop_back();
      }
    }
    work_cv_.notify_one();
    next.clear();
    next.reserve(kChunk + 4096);
    buf_ = std::move(next);
  }

  void worker_loop() {
    std::unique_lock lk(mu_);
    while (true) {
      work_cv_.wait(lk, [this] { return !queue_.empty() || closing_; });
      if (queue_.empty()) return;  // closing and drained
      std::string chunk = std::move(queue_.front());
      queue_.pop_front();
      lk.unlock();
      space_cv_.notify_one();
      if (!worker_error_) {
        try {
          deflate_chunk(chunk, Z_NO_FLUSH);
        } catch (...) {
          worker_error_ = std::current_exception();
        }
      }
      lk.lock();
      spare_.push_back(std::move(chunk));
    }
  }

  void stop_worker() {
    if (!worker_.joinable()) return;
    {
      std::lock_guard lk(mu_);
      closing_ = true;
    }
    work_cv_.notify_one();
    worker_.join();
  }

  void deflate_chunk(std::string& chunk, int flush) {
    zs_.next_in = reinterpret_cast<Bytef*>(chunk.data());
    zs_.avail_in = static_cast<uInt>(chunk.size());
    int rc;
    do {
      if (out_.size() - zs_.total_out < kChunk)
        out_.resize(std::max<size_t>(out_.size() * 2, zs_.total_out + 2 * kChunk));
      zs_.next_out = reinterpret_cast<Bytef*>(out_.data()) + zs_.total_out;
      zs_.avail_out = static_cast<uInt>(out_.size() - zs_.total_out);
      rc = deflate(&zs_, flush);
      if (rc == Z_STREAM_ERROR) throw std::runtime_error("pprof: deflate failed");
    } while (zs_.avail_in > 0 || (flush == Z_FINISH && rc != Z_STREAM_END));
  }

  z_stream zs_{};
  std::string buf_;  // being filled by the encoder
  std::string out_;  // compressed bytes (worker-owned until finish)

  std::thread worker_;
  std::mutex mu_;
  std::condition_variable work_cv_, space_cv_;
  std::deque<std::string> queue_;
  std::vector<std::string> spare_;
  bool closing_ = false;
  std::exception_ptr worker_error_;
};

class Encoder {
 public:
  Encoder(const GoPprofInput& in, bool recent)
      : in_(in),
        recent_(recent),
        minor_(in.profile ? in.profile->go_minor : 0),
        prof_(google::protobuf::Arena::CreateMessage<pb::Profile>(&arena_)) {
    intern("");
    mem_.reserve(in.mappings.size() + 1);
    for (const auto& m : in.mappings) mem_.push_back({m, 0, false});
    if (mem_.empty()) mem_.push_back({GoMapping{}, 0, true});  // pprof wants a mapping
  }

  // A count profile (runtime/pprof printCountProfile, debug=0): one sample
  // type `<name>/count`, period 1, every stack as the runtime stored it, no
  // frames hidden.
  std::string run_counts() {
    const int64_t name = intern(in_.count_name);
    const int64_t count = intern("count");
    auto* pt = prof_->mutable_period_type();
    pt->set_type(name);
    pt->set_unit(count);
    prof_->set_period(1);
    auto* st = prof_->add_sample_type();
    st->set_type(name);
    st->set_unit(count);
    auto* locs = sample_.mutable_location_id();
    std::vector<uint32_t> stk;
    for (const auto& [pcs, n] : *in_.counts) {
      stk.clear();
      for (uint64_t pc : pcs) stk.push_back(slot_of(pc));
      sample_.Clear();
      append_locs_for_stack(*locs, stk);
      sample_.mutable_value()->Add(n);
      gz_.write_message(pb::Profile::kSampleFieldNumber, sample_);
    }
    return finish_profile();
  }

  std::string run() {
    const GoHeapProfile& p = *in_.profile;
    const int64_t rate = p.mem_profile_rate;

    auto* pt = prof_->mutable_period_type();
    pt->set_type(intern("space"));
    pt->set_unit(intern("bytes"));
    prof_->set_period(rate);
    const size_t types = recent_ ? 2 : 4;  // recent: the two alloc_* types only
    const std::pair<const char*, const char*> kTypes[] = {
        {"alloc_objects", "count"}, {"alloc_space", "bytes"}, {"inuse_objects", "count"}, {"inuse_space", "bytes"}};
    for (size_t i = 0; i < types; ++i) {
      auto* st = prof_->add_sample_type();
      st->set_type(intern(kTypes[i].first));
      st->set_unit(intern(kTypes[i].second));
    }
    const int64_t bytes_key = intern("bytes");

    auto* locs = sample_.mutable_location_id();
    std::vector<uint32_t> stk;
    for (const auto& b : p.buckets) {
      if (recent_ && b.recent_objects == 0 && b.recent_bytes == 0) continue;
      stk.clear();
      for (uint32_t code : p.stack_codes(b)) stk.push_back(slot_of(p.pc_of(code)));
      sample_.Clear();
      bool hide_runtime = true;
      for (int tries = 0; tries < 2; tries++) {
        size_t skip = 0;
        if (hide_runtime) {
          // Drop the leading runtime frames (FuncForPC at the stored pc). If
          // every frame is runtime, nothing is dropped.
          for (size_t i = 0; i < stk.size(); i++) {
            if (runtime_class(stk[i]) == 1) continue;
            skip = i;
            break;
          }
        }
        locs->Clear();
        append_locs_for_stack(*locs, std::span<const uint32_t>(stk).subspan(skip));
        if (!locs->empty()) break;
        hide_runtime = false;  // try again, showing all frames
      }

      int64_t v[4];
      int64_t block_size = 0;
      // Recent: the net new objects stand where the allocations stand.
      const auto alloc_objects = static_cast<int64_t>(recent_ ? b.recent_objects : b.allocs);
      const auto alloc_bytes = static_cast<int64_t>(recent_ ? b.recent_bytes : b.alloc_bytes);
      // InUseObjects/InUseBytes are plain int64 differences in Go.
      const auto inuse_objects = static_cast<int64_t>(b.allocs - b.frees);
      const auto inuse_bytes = static_cast<int64_t>(b.alloc_bytes - b.free_bytes);
      std::tie(v[0], v[1]) = scale_heap_sample(alloc_objects, alloc_bytes, rate, minor_, b.size);
      std::tie(v[2], v[3]) = scale_heap_sample(inuse_objects, inuse_bytes, rate, minor_, b.size);
      if (minor_ < 27 && alloc_objects > 0) block_size = alloc_bytes / alloc_objects;

      // Samples are streamed: one reused Sample message, serialized as a
      // Profile.sample field straight into the gzip stream (repeated fields
      // may appear anywhere in a message), so 100k buckets cost no 100k
      // message allocations.
      auto* vals = sample_.mutable_value();
      for (size_t i = 0; i < types; ++i) vals->Add(v[i]);
      // Go <= 1.26 labels the average object size when there were allocations;
      // 1.27 always labels ObjectSize.
      if (minor_ >= 27 || block_size != 0) {
        pb::Label* l = sample_.add_label();
        l->set_key(bytes_key);
        l->set_num(minor_ >= 27 ? static_cast<int64_t>(b.size) : block_size);
      }
      gz_.write_message(pb::Profile::kSampleFieldNumber, sample_);
    }
    return finish_profile();
  }

  // Mappings, time and the string table, then the gzip trailer.
  std::string finish_profile() {
    for (size_t i = 0; i < mem_.size(); i++) {
      const auto& m = mem_[i];
      pb::Mapping* mp = prof_->add_mapping();
      mp->set_id(i + 1);
      mp->set_memory_start(m.m.start);
      mp->set_memory_limit(m.m.limit);
      mp->set_file_offset(m.m.offset);
      mp->set_filename(intern(m.m.file));
      mp->set_build_id(intern(m.m.build_id));
      // Go sets HasFunctions when every location in the mapping symbolized
      // (and at least one was looked up). Lines, files and inline frames come
      // with it from the pclntab, so say so too.
      if (m.funcs == kLookupTried) {
        mp->set_has_functions(true);
        mp->set_has_filenames(true);
        mp->set_has_line_numbers(true);
        mp->set_has_inline_frames(true);
      }
    }

    if (in_.time_nanos != 0) prof_->set_time_nanos(in_.time_nanos);

    auto* st = prof_->mutable_string_table();
    st->Reserve(static_cast<int>(strings_.size()));
    for (auto& str : strings_) st->Add(std::move(str));

    gz_.write_message_fields(*prof_);
    return gz_.finish();
  }

 private:
  struct Mem {
    GoMapping m;
    uint8_t funcs = 0;
    bool fake = false;
  };

  int64_t intern(std::string_view s) {
    auto it = string_index_.find(std::string(s));
    if (it != string_index_.end()) return it->second;
    const auto id = static_cast<int64_t>(strings_.size());
    strings_.emplace_back(s);
    string_index_.emplace(strings_.back(), id);
    return id;
  }

  uint32_t fname_key(const std::string& s) {
    auto it = fname_index_.find(s);
    if (it != fname_index_.end()) return it->second;
    const auto k = static_cast<uint32_t>(fnames_.size());
    fnames_.push_back(s);
    fname_index_.emplace(s, k);
    return k;
  }

  uint32_t slot_of(uint64_t pc) {
    auto [idx, inserted] = index_.find_or_insert(pc, static_cast<uint32_t>(loc_of_.size()));
    if (__builtin_expect(inserted, 0)) add_slot(pc);
    return idx;
  }
  __attribute__((noinline)) void add_slot(uint64_t pc) {
    slots_.emplace_back().pc = pc;
    loc_of_.push_back(-1);
    runtime_of_.push_back(-2);
    final_of_.push_back(0);
  }

  // runtime.FuncForPC(pc): the innermost function AT pc (no pc-1 adjustment).
  // 1 = runtime (hidden), 0 = other, -1 = no function (stops hiding too).
  int runtime_class(uint32_t si) {
    if (runtime_of_[si] != -2) return runtime_of_[si];
    const Slot& sl = slots_[si];
    int r = -1;
    if (in_.pclntab) {
      const uint64_t pc = sl.pc - in_.load_bias;
      if (auto f = in_.pclntab->find_func(pc)) {
        std::string name = f->name;
        // frames_for_pc resolves stored_pc-1, so ask for pc+1 to look at pc
        // itself, unless pc+1 would leave the function.
        if (f->end == 0 || pc + 1 < f->end) {
          auto fr = in_.pclntab->frames_for_pc(pc + 1);
          if (!fr.empty()) name = fr.front().function;
        }
        const bool rt = starts_with(name, "runtime.") ||
                        (minor_ >= 24 && starts_with(name, "internal/runtime/"));
        r = rt ? 1 : 0;
      }
    }
    runtime_of_[si] = static_cast<int8_t>(r);
    return r;
  }

  // allFrames(pc): CallersFrames of the one-element slice {pc}, cached.
  const PcInfo& all_frames(uint32_t si) {
    Slot& sl = slots_[si];
    if (sl.frames_done) return sl.info;
    sl.frames_done = true;
    PcInfo& info = sl.info;
    std::vector<GoFrame> frames;
    if (in_.pclntab) frames = in_.pclntab->frames_for_pc(sl.pc - in_.load_bias);
    PcFrame& f = info.frame;
    if (!frames.empty()) {
      const GoFrame& g = frames.front();  // a one-PC slice yields only the innermost frame
      if (g.function == "runtime.goexit") {
        info.goexit = true;
      } else {
        f.pc = g.pc + in_.load_bias;
        f.entry = g.entry ? g.entry + in_.load_bias : 0;
        f.line = g.line;
        f.start_line = g.start_line;
        f.func_key = fname_key(g.function);
        f.file_key = fname_key(g.file);
        f.has_func = !g.inlined;
        info.sym = kLookupTried;
        if (g.function.empty() || g.file.empty() || g.line == 0) info.sym |= kLookupFailed;
      }
    } else {
      // Unknown PC: CallersFrames yields a zero Frame; pprof makes up the call pc.
      info.sym = kLookupTried | kLookupFailed;
      f.pc = sl.pc - 1;
      f.func_key = fname_key("");
      f.file_key = fname_key("");
    }
    return info;
  }

  // runtime_expandFinalInlineFrame for a stack ending in slot si: the slots
  // replacing it (empty when nothing changes).
  const std::vector<uint32_t>* final_expansion(uint32_t si) {
    if (final_of_[si] == 1) return nullptr;
    if (final_of_[si] == 2) return &slots_[si].final_exp;
    std::vector<uint32_t> out;
    if (in_.pclntab) {
      const uint64_t one = slots_[si].pc - in_.load_bias;
      std::vector<uint64_t> ex = in_.pclntab->expand_final_inline_frame(std::span<const uint64_t>(&one, 1));
      if (!(ex.size() == 1 && ex[0] == one) && !ex.empty()) {
        for (uint64_t x : ex) out.push_back(slot_of(x + in_.load_bias));  // may grow slots_
      }
    }
    if (out.empty()) {
      final_of_[si] = 1;
      return nullptr;
    }
    final_of_[si] = 2;
    slots_[si].final_exp = std::move(out);
    return &slots_[si].final_exp;
  }

  // pcDeck
  void deck_reset() {
    deck_pcs_.clear();
    deck_frames_.clear();
    deck_sym_ = 0;
    deck_first_frames_ = 0;
    deck_first_sym_ = 0;
  }

  bool same_symbol(const PcFrame& a, const PcFrame& b) const {
    if (a.func_key == b.func_key) return true;
    if (minor_ >= 20 && minor_ <= 21)  // these compared Frame.Function (print names)
      return name_for_print(fnames_[a.func_key]) == name_for_print(fnames_[b.func_key]);
    return false;
  }

  bool deck_try_add(uint32_t si, const PcFrame* frame, uint8_t sym) {
    if (!deck_frames_.empty()) {
      const PcFrame* last = deck_frames_.back();
      if (frame == nullptr) return false;
      if (last->has_func) return false;                         // last frame isn't inlined
      if (last->entry == 0 || frame->entry == 0) return false;  // maybe not Go
      if (last->entry != frame->entry) return false;            // another function
      if (same_symbol(*last, *frame)) return false;             // maybe recursion
    }
    deck_pcs_.push_back(si);
    if (frame) deck_frames_.push_back(frame);
    deck_sym_ |= sym;
    if (deck_pcs_.size() == 1) {
      deck_first_frames_ = deck_frames_.size();
      deck_first_sym_ = sym;
    }
    return true;
  }

  // emitLocation, with the common empty-deck case kept inline.
  uint64_t flush_deck() { return deck_pcs_.empty() ? 0 : emit_location(); }

  uint64_t emit_location() {
    const uint64_t addr = slots_[deck_pcs_.front()].pc;
    const uint64_t id = locs_.size() + 1;
    LocInfo li;
    li.id = id;
    li.npcs = deck_pcs_.size();
    li.first_frame = deck_first_frames_ > 0 ? deck_frames_.front() : nullptr;
    li.first_sym = deck_first_sym_;
    loc_of_[deck_pcs_.front()] = static_cast<int32_t>(locs_.size());
    locs_.push_back(li);

    pb::Location* loc = prof_->add_location();
    loc->set_id(id);
    loc->set_address(deck_frames_.empty() ? addr - 1 : deck_frames_.front()->pc);
    new_funcs_.clear();
    auto* lines = loc->mutable_line();
    lines->Reserve(static_cast<int>(deck_frames_.size()));
    for (const PcFrame* f : deck_frames_) {
      if (func_ids_.size() <= f->func_key) func_ids_.resize(fnames_.size(), 0);
      uint64_t& fid = func_ids_[f->func_key];
      if (fid == 0) {
        fid = ++nfuncs_;
        new_funcs_.push_back({fid, f});
      }
      pb::Line* ln = lines->Add();
      ln->set_function_id(fid);
      ln->set_line(f->line);
    }
    for (size_t i = 0; i < mem_.size(); i++) {
      if ((mem_[i].m.start <= addr && addr < mem_[i].m.limit) || mem_[i].fake) {
        loc->set_mapping_id(i + 1);
        mem_[i].funcs |= deck_sym_;
        break;
      }
    }
    for (const auto& [fid, f] : new_funcs_) {
      pb::Function* fn = prof_->add_function();
      fn->set_id(fid);
      const int64_t name = intern(fnames_[f->func_key]);
      fn->set_name(name);
      fn->set_system_name(name);
      fn->set_filename(intern(fnames_[f->file_key]));
      if (minor_ >= 20) fn->set_start_line(f->start_line);
    }
    deck_reset();
    return id;
  }

  // appendLocsForStack: stack PCs (as slots, leaf first) to location ids.
  void append_locs_for_stack(google::protobuf::RepeatedField<uint64_t>& locs, std::span<const uint32_t> stk) {
    deck_reset();
    // The last frame might have lost its inline callers to the depth limit.
    if (!stk.empty()) {
      if (const std::vector<uint32_t>* ex = final_expansion(stk.back())) {
        expanded_.assign(stk.begin(), stk.end() - 1);
        expanded_.insert(expanded_.end(), ex->begin(), ex->end());
        stk = expanded_;
      }
    }

    while (!stk.empty()) {
      const uint32_t si = stk.front();
      if (const int32_t li = loc_of_[si]; li >= 0) {
        const LocInfo& l = locs_[static_cast<size_t>(li)];
        // A cached location's PC may still be an inline-mark PC of the deck.
        if (!deck_pcs_.empty() && deck_try_add(si, l.first_frame, l.first_sym)) {
          stk = stk.subspan(1);
          continue;
        }
        const uint64_t lid = l.id;
        const size_t npcs = l.npcs;
        if (auto id = flush_deck(); id > 0) locs.Add(id);
        locs.Add(lid);
        // Go panics when the stack is shorter than the cached PCs (impossible
        // for stacks the runtime recorded); for odd input consume the rest.
        stk = stk.subspan(std::min(npcs, stk.size()));
        continue;
      }

      const PcInfo& pi = all_frames(si);
      if (pi.goexit) {
        if (auto id = flush_deck(); id > 0) locs.Add(id);
        stk = stk.subspan(1);
        continue;
      }
      if (deck_try_add(si, &pi.frame, pi.sym)) {
        stk = stk.subspan(1);
        continue;
      }
      // Not part of the deck's inline chain: flush, then retry this PC.
      if (auto id = flush_deck(); id > 0) locs.Add(id);
      if (const int32_t li = loc_of_[si]; li >= 0) {
        const LocInfo& l = locs_[static_cast<size_t>(li)];
        locs.Add(l.id);
        stk = stk.subspan(std::min(l.npcs, stk.size()));
      } else {
        deck_try_add(si, &pi.frame, pi.sym);  // the deck is empty: always succeeds
        stk = stk.subspan(1);
      }
    }
    if (auto id = flush_deck(); id > 0) locs.Add(id);
  }

  const GoPprofInput& in_;
  const bool recent_;
  const int minor_;
  google::protobuf::Arena arena_;
  pb::Profile* prof_;
  pb::Sample sample_;
  GzipProtoWriter gz_;

  std::vector<std::string> strings_;
  std::unordered_map<std::string, int64_t> string_index_;

  std::vector<std::string> fnames_;  // function and file names, by key
  std::unordered_map<std::string, uint32_t> fname_index_;
  std::vector<uint64_t> func_ids_;   // fnames_ key -> Function id (0 = none yet)
  uint64_t nfuncs_ = 0;
  std::vector<std::pair<uint64_t, const PcFrame*>> new_funcs_;

  std::vector<Mem> mem_;
  PcIndex index_;
  std::deque<Slot> slots_;  // stable addresses: the deck and locs_ point into it
  // Hot per-slot fields, kept dense for the per-PC loop.
  std::vector<int32_t> loc_of_;    // index into locs_ of the location starting at the PC, or -1
  std::vector<int8_t> final_of_;    // final_expansion: 0 not yet, 1 unchanged, 2 in Slot::final_exp
  std::vector<int8_t> runtime_of_;  // FuncForPC(pc) is runtime: 1, other: 0, no func: -1, unknown: -2
  std::vector<LocInfo> locs_;
  std::vector<uint32_t> expanded_;

  std::vector<uint32_t> deck_pcs_;
  std::vector<const PcFrame*> deck_frames_;
  uint8_t deck_sym_ = 0;
  size_t deck_first_frames_ = 0;
  uint8_t deck_first_sym_ = 0;
};

}  // namespace

std::string encode_go_count_pprof(const GoPprofInput& in) {
  if (in.counts == nullptr) throw std::invalid_argument("encode_go_count_pprof: no samples");
  Encoder enc(in, /*recent=*/false);
  return enc.run_counts();
}

std::string encode_go_heap_pprof(const GoPprofInput& in) {
  if (in.profile == nullptr) throw std::invalid_argument("encode_go_heap_pprof: no profile");
  Encoder enc(in, /*recent=*/false);
  return enc.run();
}

std::string encode_go_recent_pprof(const GoPprofInput& in) {
  if (in.profile == nullptr) throw std::invalid_argument("encode_go_recent_pprof: no profile");
  Encoder enc(in, /*recent=*/true);
  return enc.run();
}

}  // namespace oomsnap
