#include "capture/last_gasp_wire.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "base/text.h"
#include "core/json_fields.h"

namespace oomsnap {
namespace {

using json = nlohmann::json;

constexpr char kImageMagic[8] = {'O', 'O', 'M', 'S', 'N', 'A', 'P', 'I'};
constexpr uint64_t kMaxPieceBytes = 64 * 1024;  // a bucket is < 2.5 KiB; a global 8 bytes
constexpr size_t kMaxPlanMappings = 4;
constexpr uint32_t kMaxRecordBytes = 256;  // bpf/last_gasp_events.h OOMSNAP_LG_MAX_RECORD
constexpr uint32_t kMaxStack = 256;        // OOMSNAP_LG_MAX_STACK

bool write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

int image_to_memfd(const MemoryImage& image, std::string& why) {
  const int fd = memfd_create("oomsnap-last-gasp", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    why = "memfd_create: " + errno_text(errno);
    return -1;
  }
  std::vector<uint8_t> buf(kImageMagic, kImageMagic + sizeof kImageMagic);
  auto put = [&buf](uint64_t v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    buf.insert(buf.end(), p, p + 8);
  };
  put(image.pieces());
  for (const auto& [addr, bytes] : image.by_address()) {
    put(addr);
    put(bytes.size());
    buf.insert(buf.end(), bytes.begin(), bytes.end());
  }
  if (!write_all(fd, buf.data(), buf.size()) ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    why = "writing the image: " + errno_text(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

std::shared_ptr<MemoryImage> image_from_fd(int fd, uint64_t max_bytes, std::string& why) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    why = "the image is not a regular file";
    return nullptr;
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    why = "the image is " + std::to_string(size) + " bytes, over the cap of " + std::to_string(max_bytes);
    return nullptr;
  }
  std::vector<uint8_t> buf(size);
  for (uint64_t off = 0; off < size;) {
    ssize_t n = ::pread(fd, buf.data() + off, size - off, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      why = "reading the image: " + errno_text(n < 0 ? errno : EIO);
      return nullptr;
    }
    off += static_cast<uint64_t>(n);
  }
  return image_from_bytes(buf, why);
}

std::shared_ptr<MemoryImage> image_from_bytes(const std::vector<uint8_t>& buf, std::string& why) {
  const uint64_t size = buf.size();
  uint64_t at = 0;
  auto get = [&](uint64_t& v) {
    if (size - at < 8) return false;
    std::memcpy(&v, buf.data() + at, 8);
    at += 8;
    return true;
  };
  if (size < sizeof kImageMagic || std::memcmp(buf.data(), kImageMagic, sizeof kImageMagic) != 0) {
    why = "the image has no header";
    return nullptr;
  }
  at = sizeof kImageMagic;
  uint64_t count = 0;
  if (!get(count) || count > size / 16) {
    why = "the image's piece count is implausible";
    return nullptr;
  }
  auto image = std::make_shared<MemoryImage>();
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t addr = 0, len = 0;
    if (!get(addr) || !get(len) || len > kMaxPieceBytes || len > size - at ||
        addr > std::numeric_limits<uint64_t>::max() - len) {
      why = "the image's piece " + std::to_string(i) + " is malformed";
      return nullptr;
    }
    if (!image->add(addr, std::vector<uint8_t>(buf.begin() + static_cast<std::ptrdiff_t>(at),
                                               buf.begin() + static_cast<std::ptrdiff_t>(at + len)))) {
      why = "the image's piece " + std::to_string(i) + " overlaps another";
      return nullptr;
    }
    at += len;
  }
  if (at != size) {
    why = "the image has bytes after its last piece";
    return nullptr;
  }
  return image;
}

json to_json(const GoLastGaspPlan& plan) {
  json maps = json::array();
  for (const GoMapping& m : plan.mappings)
    maps.push_back({{"start", m.start}, {"limit", m.limit}, {"offset", m.offset}, {"file", m.file},
                    {"build_id", m.build_id}});
  return {{"mbuckets", plan.arm.mbuckets},
          {"mem_profile_rate", plan.arm.mem_profile_rate},
          {"mprof_cycle", plan.arm.mprof_cycle},
          {"record_bytes", plan.arm.record_bytes},
          {"max_stack", plan.arm.max_stack},
          {"go_version", plan.version.text},
          {"load_bias", plan.load_bias},
          {"mappings", std::move(maps)}};
}

std::optional<GoLastGaspPlan> last_gasp_plan_from_json(const json& j, std::string& why) {
  JsonFields f(j, "last_gasp_plan", why);
  GoLastGaspPlan p;
  p.arm.mbuckets = f.u64("mbuckets");
  p.arm.mem_profile_rate = f.u64("mem_profile_rate");
  p.arm.mprof_cycle = f.u64("mprof_cycle");
  const uint64_t record = f.u64("record_bytes"), stack = f.u64("max_stack");
  const std::string version = f.str("go_version");
  p.load_bias = f.u64("load_bias");
  const json* maps = f.get("mappings", true);
  if (!f.ok()) return std::nullopt;
  auto ver = GoVersion::parse(version);
  if (!ver || !ver->at_least(1, 19)) f.fail("go_version is not a Go 1.19+ version");
  if (record == 0 || record > kMaxRecordBytes) f.fail("record_bytes out of range");
  if (stack == 0 || stack > kMaxStack) f.fail("max_stack out of range");
  if (p.arm.mbuckets == 0 || p.arm.mem_profile_rate == 0) f.fail("a heap profile global is 0");
  if (!maps->is_array() || maps->size() > kMaxPlanMappings) f.fail("mappings is not an array of at most 4");
  if (!f.ok()) return std::nullopt;
  p.version = *ver;
  p.arm.record_bytes = static_cast<uint32_t>(record);
  p.arm.max_stack = static_cast<uint32_t>(stack);
  for (const json& m : *maps) {
    JsonFields mf(m, "last_gasp_plan.mappings", why);
    GoMapping g;
    g.start = mf.u64("start");
    g.limit = mf.u64("limit");
    g.offset = mf.u64("offset");
    g.file = mf.str("file");
    g.build_id = mf.str("build_id");
    if (!mf.ok()) return std::nullopt;
    p.mappings.push_back(std::move(g));
  }
  return p;
}

json to_json(const LastGaspDecodeRequest& r) {
  const LastGaspWalk& w = r.walk;
  return {{"plan", to_json(r.plan)},
          {"start_time_ticks", r.identity.start_time_ticks},
          {"comm", r.identity.comm},
          {"walk",
           {{"ktime_ns", w.ktime_ns},
            {"walk_ns", w.walk_ns},
            {"buckets_sent", w.buckets_sent},
            {"buckets_received", w.buckets_received},
            {"zero_tails", w.zero_tails},
            {"status", to_string(w.status)},
            {"reason", w.reason}}}};
}

std::optional<LastGaspDecodeRequest> last_gasp_decode_from_json(const json& j, std::string& why) {
  JsonFields f(j, "last_gasp", why);
  LastGaspDecodeRequest r;
  const json* plan = f.get("plan", true);
  r.identity.start_time_ticks = f.u64("start_time_ticks");
  r.identity.comm = f.str("comm");
  const json* walk = f.get("walk", true);
  if (!f.ok()) return std::nullopt;
  auto p = last_gasp_plan_from_json(*plan, why);
  if (!p) return std::nullopt;
  r.plan = std::move(*p);
  JsonFields wf(*walk, "last_gasp.walk", why);
  LastGaspWalk& w = r.walk;
  w.ktime_ns = wf.u64("ktime_ns");
  w.walk_ns = wf.u64("walk_ns");
  const uint64_t sent = wf.u64("buckets_sent"), received = wf.u64("buckets_received");
  const uint64_t zero_tails = wf.u64("zero_tails");
  const std::string status = wf.str("status");
  w.reason = wf.str("reason");
  if (!wf.ok()) return std::nullopt;
  auto st = snapshot_status_from_string(status);
  if (!st) wf.fail("unknown status");
  if (sent > UINT32_MAX || received > UINT32_MAX || zero_tails > sent) wf.fail("bucket counts out of range");
  if (!wf.ok()) return std::nullopt;
  w.status = *st;
  w.buckets_sent = static_cast<uint32_t>(sent);
  w.buckets_received = static_cast<uint32_t>(received);
  w.zero_tails = static_cast<uint32_t>(zero_tails);
  w.arm = r.plan.arm;
  return r;
}

}  // namespace oomsnap
