// The CPython collector: a type histogram of the interpreter's heap, read
// from outside the process (GC generation lists + the untracked objects that
// tracked containers reference), for CPython 3.8-3.14 GIL builds.
#pragma once
#include <optional>

#include "core/collector.h"
#include "python/python_runtime.h"

namespace oomsnap {

class PythonCollector : public Collector {
 public:
  const char* language() const override { return "python"; }
  bool detect(Target& target) override;
  bool reads_mapped_file(const Mapping& m) const override;
  CaptureResult collect(Target& target, const CaptureOptions& options) override;

 private:
  std::optional<PythonRuntime> runtime_;
};

}  // namespace oomsnap
