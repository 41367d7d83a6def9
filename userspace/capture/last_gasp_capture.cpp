#include "capture/last_gasp_capture.h"

namespace oomsnap {

CaptureRecord decode_last_gasp(const LastGaspDecodeRequest& request, std::shared_ptr<MemoryImage> image,
                               int exe_fd, const CaptureOptions& options) {
  CaptureRecord rec;
  rec.identity = request.identity;
  rec.process_memory.status = "the process was gone: read in it at its kill (last gasp)";
  LastGaspWalk walk = request.walk;
  walk.image = std::move(image);
  std::unique_ptr<ElfFile> elf;
  std::string why;
  try {
    elf = ElfFile::open_fd(exe_fd, "the armed process's executable");
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (!elf) {
    rec.result.language = "go";
    rec.result.snapshot.source = "last_gasp";
    rec.result.snapshot.set_status(SnapshotStatus::kFailed, "cannot read the executable: " + why);
    return rec;
  }
  rec.result = go_last_gasp_snapshot(walk, request.plan, *elf, options);
  return rec;
}

}  // namespace oomsnap
