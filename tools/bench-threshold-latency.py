#!/usr/bin/env python3
"""Crossing -> trigger latency of the usage threshold (issue #25, item 3).

Runs the real agent (`oomsnap watch`) scoped to a fresh parent cgroup with one
box per run, each box limited to --limit-mb. In each box a leaker allocates
256 KiB at a time at the given rate and reads its cgroup's usage after every
step, on CLOCK_MONOTONIC (the clock of BPF's bpf_ktime_get_ns and of the
agent). The crossing is in the step during which usage reached
ThresholdPercent of the limit, interpolated linearly between the usage before
and after it (the step's width, ~1 ms here where a fresh page costs ~15 us,
is printed as the resolution).

From each record (triggers_seen with their sources) the first time each
mechanism saw the crossing:
  bpf     the in-kernel check (rss_stat, bpf/agent.bpf.c): its kernel timestamp
  eventfd cgroup v1's usage-threshold eventfd: when the agent read it
  poll    cgroup v2's poll of memory.current: when the agent read it
and, when the BPF event was the incident's trigger, its delivery to the agent
(ring buffer -> loop: timeline.received_ns - trigger_ns).
Latencies are from the interpolated crossing. Prints a Markdown table and
FIGURE lines for tools/lib/bench-record.sh.

Usage: bench-threshold-latency.py --binary build/oomsnap [--rates 50,200,1000]
       [--runs 5] [--limit-mb 256] [--threshold 90]
cgroup v1: the boxes go below this process's own memory cgroup; cgroup v2: below
a new /sys/fs/cgroup/oomsnap-thr-PID with +memory (the v2 guest of
../shared/v2vm/run-in-v2vm.sh). Everything created is removed.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

LEAKER = r"""
import json, sys, time
rate = float(sys.argv[1]) * 1e6
stop = int(sys.argv[2])
usage_file = sys.argv[3]
def usage():
    with open(usage_file) as f:
        return int(f.read())
chunks, log = [], []
print("ready", flush=True)
sys.stdin.readline()
t0 = time.monotonic_ns()
total = 0
log.append((t0, t0, usage()))
while usage() < stop:
    tb = time.monotonic_ns()
    chunks.append(b"x" * (256 << 10))
    total += 256 << 10
    ta = time.monotonic_ns()
    log.append((tb, ta, usage()))
    due = t0 + total / rate * 1e9
    now = time.monotonic_ns()
    if due > now:
        time.sleep((due - now) / 1e9)
print(json.dumps({"log": log, "seconds": (time.monotonic_ns() - t0) / 1e9, "bytes": total}), flush=True)
time.sleep(600)
"""


def own_memcg_v1():
    for line in open("/proc/self/cgroup"):
        _, ctrls, path = line.rstrip("\n").split(":", 2)
        if "memory" in ctrls.split(","):
            return path
    return None


class Cgroups:
    """The scope and its boxes, v1 or v2, removed at the end."""

    def __init__(self, limit):
        self.limit = limit
        if os.path.isdir("/sys/fs/cgroup/memory"):
            self.version, self.mount = 1, "/sys/fs/cgroup/memory"
            own = own_memcg_v1() or "/"
            self.scope_rel = own.rstrip("/") + "/oomsnap-thr-%d" % os.getpid()
        else:
            self.version, self.mount = 2, "/sys/fs/cgroup"
            self.scope_rel = "/oomsnap-thr-%d" % os.getpid()
        self.scope = self.mount + self.scope_rel
        os.mkdir(self.scope)
        if self.version == 2:
            with open(self.scope + "/cgroup.subtree_control", "w") as f:
                f.write("+memory")
        self.boxes = []

    def box(self, i):
        d = "%s/box%d" % (self.scope, i)
        os.mkdir(d)
        if self.version == 1:
            open(d + "/memory.limit_in_bytes", "w").write(str(self.limit))
        else:
            open(d + "/memory.max", "w").write(str(self.limit))
            open(d + "/memory.swap.max", "w").write("0")
        self.boxes.append(d)
        return d

    def usage_file(self, d):
        return d + ("/memory.usage_in_bytes" if self.version == 1 else "/memory.current")

    def remove(self):
        for d in reversed(self.boxes + [self.scope]):
            for _ in range(100):
                try:
                    for p in open(d + "/cgroup.procs").read().split():
                        os.kill(int(p), signal.SIGKILL)
                    os.rmdir(d)
                    break
                except OSError:
                    time.sleep(0.05)


def start_leaker(box, usage_file, rate, stop):
    def join():
        with open(box + "/cgroup.procs", "w") as f:
            f.write("0")
    p = subprocess.Popen([sys.executable, "-c", LEAKER, str(rate), str(stop), usage_file],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=join)
    if p.stdout.readline().strip() != "ready":
        raise SystemExit("leaker did not start")
    return p


def read_records(path, have):
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines[have:]:
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def mechanism(source):
    if source.startswith("bpf "):
        return "bpf"
    if source.startswith("eventfd") or source.startswith("registration"):
        return "eventfd"
    if source.startswith("poll"):
        return "poll"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/oomsnap")
    ap.add_argument("--rates", default="50,200,1000")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--limit-mb", type=int, default=256)
    ap.add_argument("--threshold", type=int, default=90)
    ap.add_argument("--record-timeout", type=float, default=30)
    a = ap.parse_args()
    rates = [float(r) for r in a.rates.split(",")]
    limit = a.limit_mb << 20
    threshold = limit // 100 * a.threshold + limit % 100 * a.threshold // 100
    stop = limit // 100 * min(a.threshold + 4, 99)
    cg = Cgroups(limit)
    work = tempfile.mkdtemp(prefix="oomsnap-thr-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None)
    agent = None
    results = {}
    try:
        boxes = [[cg.box(r * a.runs + i) for i in range(a.runs)] for r in range(len(rates))]
        conf = os.path.join(work, "agent.toml")
        with open(conf, "w") as f:
            f.write('ThresholdPercent = %d\nIntervalTracing = 1\nOomKillWindow = 1\nRescanInterval = 1\n'
                    'NodeMaxCapturesPerMinute = 1000\nRunTracingToolTimeout = 2\n'
                    '[triggers]\nBlacklist = ["memcg_pressure", "psi", "memory_events", "forecast"]\n'
                    '[storage]\nLocalFile = false\n[cgroup]\nScope = "%s"\n[http]\nListen = ""\n'
                    % (a.threshold, cg.scope_rel))
        rec_path, log_path = os.path.join(work, "records.jsonl"), os.path.join(work, "agent.log")
        agent = subprocess.Popen([a.binary, "watch", "--config", conf, "--log-level", "debug"],
                                 stdout=open(rec_path, "w"), stderr=open(log_path, "w"))
        end = time.time() + 60
        while "ready:" not in open(log_path).read():
            if agent.poll() is not None or time.time() > end:
                raise SystemExit("agent did not start:\n" + open(log_path).read())
            time.sleep(0.05)
        in_kernel = "usage thresholds: also checked in the kernel" in open(log_path).read()
        have = 0
        for r, rate in enumerate(rates):
            rows = results.setdefault(rate, [])
            for box in boxes[r]:
                leaker = start_leaker(box, cg.usage_file(box), rate, stop)
                leaker.stdin.write("go\n")
                leaker.stdin.flush()
                out = json.loads(leaker.stdout.readline())
                rec, end = None, time.time() + a.record_timeout
                while rec is None and time.time() < end:
                    for x in read_records(rec_path, have):
                        have += 1
                        if x.get("container", {}).get("cgroup_path", "").endswith(box[len(cg.mount):]):
                            rec = x
                    time.sleep(0.05)
                leaker.kill()
                leaker.wait()
                row = {"achieved_mb_s": out["bytes"] / out["seconds"] / 1e6}
                log = out["log"]
                i = next((i for i in range(1, len(log)) if log[i][2] >= threshold and log[i - 1][2] < threshold), None)
                if rec is None or i is None:
                    row["error"] = "no record" if rec is None else "never crossed from below"
                    rows.append(row)
                    continue
                (tb, ta, after), before = log[i], log[i - 1][2]
                cross = tb + (ta - tb) * (threshold - before) / max(after - before, 1)
                row["step_ms"] = (ta - tb) / 1e6
                for s in rec.get("triggers_seen", []):
                    m = mechanism(s.get("source", ""))
                    if s.get("type") == "threshold" and m and m not in row:
                        row[m] = (s["kernel_ts_ns"] - cross) / 1e6
                t = rec["trigger"]
                if mechanism(t.get("source", "")) == "bpf":
                    tl = rec["timeline"]
                    row["delivery"] = (tl["received_ns"] - tl["trigger_ns"]) / 1e6
                rows.append(row)
    finally:
        if agent:
            agent.send_signal(signal.SIGTERM)
            agent.wait()
        cg.remove()

    kinds = ["bpf", "eventfd" if cg.version == 1 else "poll", "delivery"]
    print("cgroup v%d, limit %d MiB, threshold %d %%, %d runs per rate, BPF threshold %s; "
          "latency from the crossing (interpolated in its 256 KiB step), ms (median / max (n)):\n"
          % (cg.version, a.limit_mb, a.threshold, a.runs, "on" if in_kernel else "OFF"))
    print("| leak MB/s (achieved) | step ms | in-kernel check (bpf) | %s | bpf event -> agent |" % kinds[1])
    print("|---:|---:|---:|---:|---:|")
    for rate, rows in results.items():
        ok = [x for x in rows if "error" not in x]
        cell = []
        for k in ["step_ms"] + kinds:
            v = [x[k] for x in ok if k in x]
            cell.append("%.2f / %.2f (%d)" % (statistics.median(v), max(v), len(v)) if v else "n/a")
        cell[0] = cell[0].rsplit(" (", 1)[0]
        ach = statistics.median([x["achieved_mb_s"] for x in rows]) if rows else 0
        errs = [x["error"] for x in rows if "error" in x]
        print("| %g (%.0f) | %s |%s" % (rate, ach, " | ".join(cell), (" errors: " + ", ".join(errs)) if errs else ""))
        for k in kinds:
            v = [x[k] for x in ok if k in x]
            if v:
                print("FIGURE v%d_%s_ms_at_%g %.3f ms" % (cg.version, k, rate, statistics.median(v)), file=sys.stderr)


if __name__ == "__main__":
    main()
