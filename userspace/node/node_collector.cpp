#include "node/node_collector.h"

namespace oomsnap {

bool NodeCollector::detect(Target& target) {
  runtime_ = find_node_runtime(target);
  return runtime_.has_value();
}

CaptureResult NodeCollector::collect(Target& target, const CaptureOptions& opts) {
  CaptureRun run(target, "node", opts);
  Snapshot& snap = run.out.snapshot;
  if (!runtime_ && !detect(target)) {
    snap.set_status(SnapshotStatus::kFailed, "not a Node.js process (no module exports V8's v8dbg_ symbols)");
    return run.finish();
  }
  const NodeRuntime& rt = *runtime_;
  const auto node_version = read_node_version(target.memory(), rt);
  snap.runtime_version = "node " + (node_version ? "v" + *node_version : std::string("(version unknown)")) +
                         ", V8 " + (rt.v8_version ? rt.v8_version->text() : std::string("(version unknown)"));
  if (!rt.metadata) {
    snap.set_status(SnapshotStatus::kUnavailable, "V8's postmortem metadata in " + rt.module +
                                                      " cannot be used: " + rt.metadata_error);
    return run.finish();
  }
  if (auto why = unsupported_tagging(*rt.metadata)) {
    snap.set_status(SnapshotStatus::kUnavailable, *why + " (" + rt.module + ")");
    return run.finish();
  }
  snap.set_status(SnapshotStatus::kUnavailable, "the V8 heap reader is not built yet (issue #26)");
  return run.finish();
}

}  // namespace oomsnap
