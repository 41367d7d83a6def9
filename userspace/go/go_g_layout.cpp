// The table of go_g_layout.h. Offsets were computed field by field from
// $GOROOT/src/runtime/runtime2.go of each toolchain (type g struct, gobuf,
// stack) and are re-checked against DWARF by tests/unit/go/go_g_layout_test.cpp
// (tests/fixtures/go/glayout prints the DWARF view). What moved:
//   1.21: g grew (coroarg etc.); gopc/startpc moved from 296/312 to 280/296.
//   1.23: syscallbp added after syscallpc (+8 for everything after it).
//   1.25: gobuf.ret removed (sched.bp 104 -> 96, everything after -8).
//   1.26: more fields before gopc (gopc 280 -> 288).
// The wait reasons are waitReasonStrings of each version's runtime2.go, in
// the order of its waitReason constants (the order changes between versions).
#include "go/go_g_layout.h"

#include <algorithm>

#include <iterator>

namespace oomsnap {
namespace {

constexpr GoGLayout kLayouts[] = {
    // minor size  lo hi  sp  pc  bp   syssp syspc sysbp        status goid waitsince reason gopc startpc depth
    {19, 392, 0, 8, 56, 64, 104, 112, 120, std::nullopt, 144, 152, 168, 176, 296, 312, 32},
    {21, 408, 0, 8, 56, 64, 104, 112, 120, std::nullopt, 144, 152, 168, 176, 280, 296, 32},
    {22, 424, 0, 8, 56, 64, 104, 112, 120, std::nullopt, 144, 152, 168, 176, 280, 296, 32},
    {23, 432, 0, 8, 56, 64, 104, 112, 120, 128, 152, 160, 176, 184, 288, 304, 128},
    {24, 440, 0, 8, 56, 64, 104, 112, 120, 128, 152, 160, 176, 184, 288, 304, 128},
    {25, 440, 0, 8, 56, 64, 96, 104, 112, 120, 144, 152, 168, 176, 280, 296, 128},
    {26, 456, 0, 8, 56, 64, 96, 104, 112, 120, 144, 152, 168, 176, 288, 304, 128},
    {27, 456, 0, 8, 56, 64, 96, 104, 112, 120, 144, 152, 168, 176, 288, 304, 128},
};

template <size_t N>
std::string_view pick(const std::string_view (&names)[N], uint8_t reason) {
  return reason < N ? names[reason] : std::string_view();
}

}  // namespace

std::optional<GoGLayout> go_g_layout_for(int go_minor) {
  for (const auto& l : kLayouts)
    if (l.minor == go_minor) return l;
  return std::nullopt;
}

std::string_view go_g_status_name(int go_minor, uint32_t status) {
  switch (static_cast<GoGStatus>(status & ~kGoGScanBit)) {
    case GoGStatus::kIdle: return "idle";
    case GoGStatus::kRunnable: return "runnable";
    case GoGStatus::kRunning: return "running";
    case GoGStatus::kSyscall: return "syscall";
    case GoGStatus::kWaiting: return "waiting";
    case GoGStatus::kMoribund: return "moribund";
    case GoGStatus::kDead: return "dead";
    case GoGStatus::kEnqueue: return "enqueue";
    case GoGStatus::kCopystack: return "copystack";
    case GoGStatus::kPreempted: return "preempted";
    case GoGStatus::kLeaked: return go_minor >= 26 ? "leaked" : "unknown";
    case GoGStatus::kDeadExtra: return go_minor >= 26 ? "dead" : "unknown";
  }
  return "unknown";
}

std::string_view go_wait_reason_name(int go_minor, uint8_t reason) {
  switch (go_minor) {
    case 19: {
      static constexpr std::string_view k[] = {
          "", "GC assist marking", "IO wait", "chan receive (nil chan)", "chan send (nil chan)", "dumping heap",
          "garbage collection", "garbage collection scan", "panicwait", "select", "select (no cases)",
          "GC assist wait", "GC sweep wait", "GC scavenge wait", "chan receive", "chan send", "finalizer wait",
          "force gc (idle)", "semacquire", "sleep", "sync.Cond.Wait", "timer goroutine (idle)",
          "trace reader (blocked)", "wait for GC cycle", "GC worker (idle)", "preempted", "debug call"};
      return pick(k, reason);
    }
    case 21: {
      static constexpr std::string_view k[] = {
          "", "GC assist marking", "IO wait", "chan receive (nil chan)", "chan send (nil chan)", "dumping heap",
          "garbage collection", "garbage collection scan", "panicwait", "select", "select (no cases)",
          "GC assist wait", "GC sweep wait", "GC scavenge wait", "chan receive", "chan send", "finalizer wait",
          "force gc (idle)", "semacquire", "sleep", "sync.Cond.Wait", "sync.Mutex.Lock", "sync.RWMutex.RLock",
          "sync.RWMutex.Lock", "trace reader (blocked)", "wait for GC cycle", "GC worker (idle)",
          "GC worker (active)", "preempted", "debug call", "GC mark termination", "stopping the world"};
      return pick(k, reason);
    }
    case 22: {
      static constexpr std::string_view k[] = {
          "", "GC assist marking", "IO wait", "chan receive (nil chan)", "chan send (nil chan)", "dumping heap",
          "garbage collection", "garbage collection scan", "panicwait", "select", "select (no cases)",
          "GC assist wait", "GC sweep wait", "GC scavenge wait", "chan receive", "chan send", "finalizer wait",
          "force gc (idle)", "semacquire", "sleep", "sync.Cond.Wait", "sync.Mutex.Lock", "sync.RWMutex.RLock",
          "sync.RWMutex.Lock", "trace reader (blocked)", "wait for GC cycle", "GC worker (idle)",
          "GC worker (active)", "preempted", "debug call", "GC mark termination", "stopping the world",
          "flushing proc caches", "trace goroutine status", "trace proc status", "page trace flush", "coroutine"};
      return pick(k, reason);
    }
    case 23: {
      static constexpr std::string_view k[] = {
          "", "GC assist marking", "IO wait", "chan receive (nil chan)", "chan send (nil chan)", "dumping heap",
          "garbage collection", "garbage collection scan", "panicwait", "select", "select (no cases)",
          "GC assist wait", "GC sweep wait", "GC scavenge wait", "chan receive", "chan send", "finalizer wait",
          "force gc (idle)", "semacquire", "sleep", "sync.Cond.Wait", "sync.Mutex.Lock", "sync.RWMutex.RLock",
          "sync.RWMutex.Lock", "trace reader (blocked)", "wait for GC cycle", "GC worker (idle)",
          "GC worker (active)", "preempted", "debug call", "GC mark termination", "stopping the world",
          "flushing proc caches", "trace goroutine status", "trace proc status", "page trace flush", "coroutine",
          "GC weak to strong wait"};
      return pick(k, reason);
    }
    case 24: {
      static constexpr std::string_view k[] = {
          "", "GC assist marking", "IO wait", "chan receive (nil chan)", "chan send (nil chan)", "dumping heap",
          "garbage collection", "garbage collection scan", "panicwait", "select", "select (no cases)",
          "GC assist wait", "GC sweep wait", "GC scavenge wait", "chan receive", "chan send", "finalizer wait",
          "force gc (idle)", "semacquire", "sleep", "sync.Cond.Wait", "sync.Mutex.Lock", "sync.RWMutex.RLock",
          "sync.RWMutex.Lock", "sync.WaitGroup.Wait", "trace reader (blocked)", "wait for GC cycle",
          "GC worker (idle)", "GC worker (active)", "preempted", "debug call", "GC mark termination",
          "stopping the world", "flushing proc caches", "trace goroutine status", "trace proc status",
          "page trace flush", "coroutine", "GC weak to strong wait", "synctest.Run", "synctest.Wait",
          "chan receive (synctest)", "chan send (synctest)", "select (synctest)"};
      return pick(k, reason);
    }
    case 25: {
      static constexpr std::string_view k[] = {
          "", "GC assist marking", "IO wait", "chan receive (nil chan)", "chan send (nil chan)", "dumping heap",
          "garbage collection", "garbage collection scan", "panicwait", "select", "select (no cases)",
          "GC assist wait", "GC sweep wait", "GC scavenge wait", "chan receive", "chan send", "finalizer wait",
          "force gc (idle)", "GOMAXPROCS updater (idle)", "semacquire", "sleep", "sync.Cond.Wait",
          "sync.Mutex.Lock", "sync.RWMutex.RLock", "sync.RWMutex.Lock", "sync.WaitGroup.Wait",
          "trace reader (blocked)", "wait for GC cycle", "GC worker (idle)", "GC worker (active)", "preempted",
          "debug call", "GC mark termination", "stopping the world", "flushing proc caches",
          "trace goroutine status", "trace proc status", "page trace flush", "coroutine",
          "GC weak to strong wait", "synctest.Run", "synctest.Wait", "chan receive (durable)",
          "chan send (durable)", "select (durable)", "sync.WaitGroup.Wait (durable)", "cleanup wait"};
      return pick(k, reason);
    }
    case 26:
    case 27: {  // 1.27 kept 1.26's waitReason list
      static constexpr std::string_view k[] = {
          "", "GC assist marking", "IO wait", "dumping heap", "garbage collection", "garbage collection scan",
          "panicwait", "GC assist wait", "GC sweep wait", "GC scavenge wait", "finalizer wait",
          "force gc (idle)", "GOMAXPROCS updater (idle)", "semacquire", "sleep", "chan receive (nil chan)",
          "chan send (nil chan)", "select (no cases)", "select", "chan receive", "chan send", "sync.Cond.Wait",
          "sync.Mutex.Lock", "sync.RWMutex.RLock", "sync.RWMutex.Lock", "sync.WaitGroup.Wait",
          "trace reader (blocked)", "wait for GC cycle", "GC worker (idle)", "GC worker (active)", "preempted",
          "debug call", "GC mark termination", "stopping the world", "flushing proc caches",
          "trace goroutine status", "trace proc status", "page trace flush", "coroutine",
          "GC weak to strong wait", "synctest.Run", "synctest.Wait", "chan receive (durable)",
          "chan send (durable)", "select (durable)", "sync.WaitGroup.Wait (durable)", "cleanup wait"};
      return pick(k, reason);
    }
    default:
      return {};
  }
}

bool go_wait_is_transient(int go_minor, uint8_t reason) {
  // By name, since the numbering moves between versions: the runtime's
  // isWaitingForGC (1.22–1.25; isWaitingForSuspendG from 1.26, the same
  // reasons), whose goroutines run on the system stack, and
  // waitReasonPreempted, which suspendG leaves on a running goroutine it
  // stopped (preemptPark sets it on 1.19 too).
  static constexpr std::string_view kTransient[] = {
      "preempted",          "stopping the world",     "GC mark termination", "garbage collection",
      "garbage collection scan", "trace goroutine status", "trace proc status",   "page trace flush",
      "GC assist marking",  "GC worker (active)",     "flushing proc caches"};
  const std::string_view name = go_wait_reason_name(go_minor, reason);
  if (name.empty()) return false;
  return std::find(std::begin(kTransient), std::end(kTransient), name) != std::end(kTransient);
}

uint8_t go_func_id_wrapper(int go_minor) {
  // Its place in the FuncID list, which grew before it: corostart (1.22)
  // and one more entry in 1.25. tests/unit/go/go_g_layout_test.cpp counts it
  // in each toolchain's own internal/abi/symtab.go (runtime/symtab.go on 1.19).
  if (go_minor == 19 || go_minor == 21) return 21;
  if (go_minor >= 22 && go_minor <= 24) return 22;
  if (go_minor >= 25 && go_minor <= 27) return 23;
  return 0;
}

}  // namespace oomsnap
