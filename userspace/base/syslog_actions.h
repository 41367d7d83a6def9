// The syslog(2) actions the agent makes (sys/klog.h gives only the call):
// read the whole kernel log, and its size. agent/events/kernel_log.cpp makes
// them; agent/ops/self_confinement.cpp's filter refuses every other action.
#pragma once

namespace oomsnap {

inline constexpr unsigned kSyslogReadAll = 3;      // SYSLOG_ACTION_READ_ALL
inline constexpr unsigned kSyslogSizeBuffer = 10;  // SYSLOG_ACTION_SIZE_BUFFER

}  // namespace oomsnap
