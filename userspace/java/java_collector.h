// The Java collector: a class histogram of a HotSpot G1 heap read from
// outside the JVM, with every offset taken from the JVM's own VMStructs
// tables (JDK 17, 21, 25; legacy and compact object headers). No safepoint,
// attach or signal: the application never pauses.
#pragma once
#include <optional>

#include "core/collector.h"
#include "java/hotspot_locate.h"

namespace oomsnap {

class JavaCollector : public Collector {
 public:
  const char* language() const override { return "java"; }
  bool detect(Target& target) override;
  bool reads_mapped_file(const Mapping& m) const override;
  CaptureResult collect(Target& target, const CaptureOptions& options) override;

 private:
  std::optional<LibJvm> jvm_;
};

}  // namespace oomsnap
