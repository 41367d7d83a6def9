// The Node.js collector: V8's heap read from outside the process, with no
// inspector, no signal and no pause (issue #26). Recognises a V8 embedder by
// the v8dbg_* metadata its binary exports (node/node_runtime.h).
#pragma once
#include <optional>

#include "core/collector.h"
#include "node/node_runtime.h"

namespace oomsnap {

class NodeCollector : public Collector {
 public:
  const char* language() const override { return "node"; }
  bool detect(Target& target) override;
  bool reads_mapped_file(const Mapping& m) const override { return is_libnode_mapping(m); }
  CaptureResult collect(Target& target, const CaptureOptions& options) override;

 private:
  std::optional<NodeRuntime> runtime_;
};

}  // namespace oomsnap
