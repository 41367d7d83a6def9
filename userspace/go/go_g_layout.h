// Per-Go-version layout of runtime.g (amd64) and the names the runtime gives
// goroutine states and wait reasons: one table, used by the goroutine census
// (go_goroutines.cpp). Stripped binaries have no DWARF, so the table is what
// they use; tests/unit/go/go_g_layout_test.cpp checks every entry against the
// DWARF of each toolchain's unstripped fixture.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace oomsnap {

struct GoGLayout {
  int minor = 0;            // Go 1.<minor>
  uint32_t size = 0;        // sizeof(runtime.g)
  uint32_t stack_lo = 0, stack_hi = 0;             // g.stack
  uint32_t sched_sp = 0, sched_pc = 0, sched_bp = 0;  // g.sched (gobuf)
  uint32_t syscallsp = 0, syscallpc = 0;
  std::optional<uint32_t> syscallbp;               // 1.23+
  uint32_t atomicstatus = 0;  // uint32
  uint32_t goid = 0;          // uint64
  uint32_t waitsince = 0;     // int64, nanotime() when it blocked (approximate)
  uint32_t waitreason = 0;    // uint8 (waitReason)
  uint32_t gopc = 0, startpc = 0;
  // The goroutine profile's stack depth: StackRecord.Stack0 [32] up to 1.22,
  // debug.profstackdepth (default 128) from 1.23.
  uint32_t profile_depth = 0;
};

// nullopt for versions without a verified entry (not 1.19, 1.21–1.27).
std::optional<GoGLayout> go_g_layout_for(int go_minor);

// runtime2.go's _G* constants, the same in 1.19–1.27 (1.26 added 10 and 11).
enum class GoGStatus : uint32_t {
  kIdle = 0, kRunnable = 1, kRunning = 2, kSyscall = 3, kWaiting = 4,
  kMoribund = 5, kDead = 6, kEnqueue = 7, kCopystack = 8, kPreempted = 9,
  kLeaked = 10, kDeadExtra = 11,
};
constexpr uint32_t kGoGScanBit = 0x1000;  // _Gscan: a GC scan holds the g

// The census's name for a status without the scan bit: "running",
// "runnable", "waiting", "syscall", "preempted", "copystack", "dead", ...
// (lower case, as the runtime prints them after "goroutine N ["), "unknown"
// for values this version does not define.
std::string_view go_g_status_name(int go_minor, uint32_t status);

// waitReasonStrings[reason] for this version ("chan receive", "sleep",
// "sync.Mutex.Lock", ...); empty for reason 0 or one the version lacks.
std::string_view go_wait_reason_name(int go_minor, uint8_t reason);

// A wait that only hands the goroutine's stack to the GC: the runtime's
// waitReason.isWaitingForGC (on the system stack, really running: "GC assist
// marking", "garbage collection scan", "stopping the world", ...) and
// "preempted" (a running goroutine the GC stopped to scan it, suspendG). Such
// a goroutine is back to running at any moment; it is not parked.
bool go_wait_is_transient(int go_minor, uint8_t reason);

// abi.FuncIDWrapper of this version (runtime.funcID_wrapper on 1.19): the
// funcID of compiler-made wrappers (the closure of `go f(x)`, method value
// and interface wrappers), which the runtime's tracebacks leave out. 0 (no
// function is elided) for versions without a verified entry.
uint8_t go_func_id_wrapper(int go_minor);

}  // namespace oomsnap
