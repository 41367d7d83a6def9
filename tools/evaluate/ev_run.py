"""One evaluation run: a fresh memory cgroup, the agent scoped to it, a leaking fixture,
usage sampled on CLOCK_MONOTONIC, and the incident timeline put together afterwards.

Every step is bounded in time; whatever happens, the fixture and the agent are killed
and the cgroups removed (Run.cleanup, also called from the driver on Ctrl-C/SIGTERM).
"""
import datetime
import json
import os
import re
import select
import signal
import subprocess
import threading
import time

import ev_fixtures
from ev_cgroup import Cgroup, UsageReader

MiB = 1 << 20

# captured_before_kill: the snapshot completed before the OOM kill (lead_ms > 0);
# missed: a kill without a snapshot completed before it; throttled_without_kill: v2, no kill
# by the run timeout with usage held at memory.high; no_kill: no kill otherwise; error: the
# run itself failed (agent or fixture did not start, ...).
OUTCOMES = ("captured_before_kill", "missed", "throttled_without_kill", "no_kill", "error")


def mono_ns():
    return time.monotonic_ns()  # CLOCK_MONOTONIC: the clock of bpf_ktime_get_ns() and the agent's timeline


class Sampler(threading.Thread):
    """Reads the cgroup's usage every `period_ns` into a list of (t_ns, bytes)."""

    def __init__(self, path, period_ns):
        super().__init__(daemon=True)
        self.reader = UsageReader(path)
        self.period_ns = period_ns
        self.samples = []
        self._halt = threading.Event()

    def run(self):
        nxt = mono_ns()
        while not self._halt.is_set():
            v = self.reader.read()
            t = mono_ns()
            if v is not None:
                self.samples.append((t, v))
            nxt += self.period_ns
            delay = nxt - mono_ns()
            if delay < 0:
                nxt = mono_ns()  # fell behind (CPU contention): do not burst
                delay = 0
            time.sleep(delay / 1e9)

    def stop(self):
        self._halt.set()
        self.join(timeout=2)
        self.reader.close()


def wall_to_mono_offset_ns():
    """CLOCK_REALTIME - CLOCK_MONOTONIC, read as close together as possible."""
    best = None
    for _ in range(5):
        a = time.monotonic_ns()
        r = time.time_ns()
        b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, r - (a + b) // 2)
    return best[1]


# "2026-11-29T14:21:51.123 debug oomsnap: trigger memory_events (inotify: ...) for /x/box: not a candidate: below threshold"
_LOG_TRIGGER = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}) \S+ oomsnap: trigger (\w+) \((.*)\) for (\S+): (.*)$")


def triggers_from_log(log_text, box_rel, realtime_minus_mono_ns):
    """Every trigger the agent logged for the box (debug level), with the policy's verdict.
    Times are the log's wall clock (ms, local time) mapped to CLOCK_MONOTONIC: +-1 ms."""
    out = []
    for line in log_text.splitlines():
        m = _LOG_TRIGGER.match(line)
        if not m or m.group(4) != box_rel:
            continue
        wall = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").timestamp()
        out.append({"type": m.group(2), "approx_ns": int(wall * 1e9) - realtime_minus_mono_ns,
                    "verdict": m.group(5)})
    return out


def percent_of(limit, pct):
    # The agent's own rounding for the v1 threshold (limit/100*pct + limit%100*pct/100).
    return limit // 100 * pct + limit % 100 * pct // 100


class Run:
    """One run of one cell. `cell` holds: rate (label), rate_mb_s, threshold, high_percent
    (None = no memory.high), limit_mb, runtime."""

    def __init__(self, fs, session, run_id, cell, opts, raw_dir):
        self.fs = fs
        self.session = session
        self.run_id = run_id
        self.cell = cell
        self.opts = opts
        self.raw_dir = raw_dir
        self.scope = None
        self.box = None
        self.agent = None
        self.fixture = None
        self.sampler = None
        self.notes = []

    # ---------------------------------------------------------------- setup
    def _make_cgroups(self):
        limit = self.cell["limit_mb"] * MiB
        self.scope = Cgroup(self.fs, f"{self.session.rel}/{self.run_id}", enable_memory_below=True)
        self.box = Cgroup(self.fs, f"{self.scope.rel}/box")
        if self.fs.version == 1:
            self.box.write("memory.limit_in_bytes", limit)
        else:
            if os.path.exists(self.box.path("memory.swap.max")):
                self.box.write("memory.swap.max", 0)
            self.box.write("memory.max", limit)
            # Kubernetes sets memory.oom.group on every container on cgroup v2.
            self.box.write("memory.oom.group", self.opts.oom_group)
            self.oom_group = self.box.read_int("memory.oom.group")
            if self.cell["high_percent"] is not None:
                self.box.write("memory.high", percent_of(limit, self.cell["high_percent"]))
        self.limit_bytes = limit
        self.high_bytes = percent_of(limit, self.cell["high_percent"]) if self.cell["high_percent"] else None
        self.threshold_bytes = percent_of(limit, self.cell["threshold"])

    def _agent_config(self):
        o = self.opts
        lines = [
            f"ThresholdPercent = {self.cell['threshold']}",
            f"IntervalTracing = {o.interval_tracing}",
            f"OomKillWindow = {o.oom_kill_window}",
            f"RunTracingToolTimeout = {o.snapshot_budget}",
        ]
        # The "threshold" rule cell is the fixed threshold alone: the forecast trigger off.
        blacklist = list(o.blacklist) + (["forecast"] if self.cell.get("rule") == "threshold" else [])
        if blacklist:
            lines += ["[triggers]", "Blacklist = [" + ", ".join(json.dumps(b) for b in blacklist) + "]"]
        lines += ["[storage]", "Stdout = true", "LocalFile = false", f'Path = "{self.raw_dir}/store"',
                  "[cgroup]", f'Scope = "{self.scope.rel}"']
        return "\n".join(lines) + "\n"

    def _start_agent(self):
        cfg = os.path.join(self.raw_dir, "agent.toml")
        with open(cfg, "w") as f:
            f.write(self._agent_config())
        self.records_path = os.path.join(self.raw_dir, "records.jsonl")
        self.log_path = os.path.join(self.raw_dir, "agent.log")
        out = open(self.records_path, "wb")
        err = open(self.log_path, "wb")
        t0 = mono_ns()
        self.agent = subprocess.Popen([self.opts.binary, "watch", "--config", cfg, "--log-level", "debug"],
                                      stdin=subprocess.DEVNULL, stdout=out, stderr=err, close_fds=True)
        out.close()
        err.close()
        end = time.monotonic() + self.opts.agent_ready_timeout
        while time.monotonic() < end:
            if b"ready:" in self._read(self.log_path):
                self.agent_ready_ms = (mono_ns() - t0) / 1e6
                return
            if self.agent.poll() is not None:
                raise RuntimeError(f"agent exited with {self.agent.returncode} before ready:\n"
                                   + self._read(self.log_path).decode(errors="replace")[-2000:])
            time.sleep(0.05)
        raise RuntimeError(f"agent not ready within {self.opts.agent_ready_timeout} s:\n"
                           + self._read(self.log_path).decode(errors="replace")[-2000:])

    @staticmethod
    def _read(path):
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError:
            return b""

    def _start_fixture(self):
        runtime = self.cell.get("runtime", "go")
        args = ev_fixtures.argv(runtime, self.opts, self.cell)
        err = open(os.path.join(self.raw_dir, "fixture.err"), "wb")
        self.fixture_start_ns = mono_ns()
        # The wrapper moves itself into the box, then execs the fixture (no preexec_fn:
        # this process has a sampling thread).
        self.fixture = subprocess.Popen(
            ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', self.box.dir] + args,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, close_fds=True)
        err.close()
        self.fixture_pidfd = os.pidfd_open(self.fixture.pid)
        buf = b""
        end = time.monotonic() + self.opts.fixture_ready_timeout
        while b"\n" not in buf:
            left = end - time.monotonic()
            if left <= 0:
                raise RuntimeError("fixture printed no ready line within "
                                   f"{self.opts.fixture_ready_timeout} s")
            r, _, _ = select.select([self.fixture.stdout], [], [], left)
            if not r:
                continue
            chunk = os.read(self.fixture.stdout.fileno(), 65536)
            if not chunk:
                raise RuntimeError("fixture exited before its ready line: "
                                   + self._read(os.path.join(self.raw_dir, "fixture.err")).decode(errors="replace"))
            buf += chunk
        self.fixture_ready_ns = mono_ns()
        ready = json.loads(buf.split(b"\n", 1)[0])
        if not ev_fixtures.is_ready(runtime, ready):
            raise RuntimeError(f"unexpected fixture line: {buf[:200]!r}")
        self.fixture_pid = ready.get("pid", self.fixture.pid) if runtime == "go" else self.fixture.pid

    def _wait_fixture(self, timeout_s):
        """Waits for the fixture to exit; True with its reap time, False on timeout."""
        p = select.poll()
        p.register(self.fixture_pidfd, select.POLLIN)
        if p.poll(max(0, int(timeout_s * 1000))):
            self.fixture_reaped_ns = mono_ns()
            self.fixture.wait()
            return True
        return False

    def _records(self):
        recs = []
        for line in self._read(self.records_path).decode(errors="replace").splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                recs.append(json.loads(line))
            except json.JSONDecodeError:
                self.notes.append(f"unparsable record line: {line[:120]}")
        return recs

    def _wait_records(self, timeout_s):
        """After the kill: the record is written at the victim's exit (or 1 s after the kill)."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if any("oom_kill" in r for r in self._records()):
                return True
            time.sleep(0.1)
        return False

    def _stop_agent(self):
        if not self.agent or self.agent.poll() is not None:
            return
        self.agent.send_signal(signal.SIGTERM)
        try:
            self.agent_exit = self.agent.wait(timeout=self.opts.agent_stop_timeout)
        except subprocess.TimeoutExpired:
            self.notes.append("agent did not stop on SIGTERM in time: killed")
            self.agent.kill()
            self.agent.wait()
            self.agent_exit = "killed"

    # --------------------------------------------------------------- the run
    def execute(self):
        """Runs the experiment; returns the run's result dict (never raises for run failures)."""
        os.makedirs(self.raw_dir, exist_ok=True)
        self.agent_exit = None
        self.fixture_reaped_ns = None
        self.fixture_start_ns = self.fixture_ready_ns = None
        self.agent_ready_ms = None
        self.wait_status = None
        self.timed_out = False
        error = None
        try:
            self._make_cgroups()
            self._start_agent()
            self.clock_offset_ns = wall_to_mono_offset_ns()
            self.sampler = Sampler(self.box.path(self.fs.usage_file), self.opts.sample_ms * 1_000_000)
            self.sampler.start()
            self._start_fixture()
            if self._wait_fixture(self.opts.run_timeout_for(self.cell)):
                self.wait_status = self.fixture.returncode
                time.sleep(0.3)  # a few samples after the exit (usage drop) for the plot
                self._wait_records(self.opts.record_wait)
            else:
                self.timed_out = True
                # Stop the agent first: its pending incident is written as it is, before
                # our own SIGKILL of the fixture could be mistaken for a kill.
            self.sampler.stop()
            self._stop_agent()
        except Exception as e:  # noqa: BLE001 - a failed run is a result, not a crash
            error = f"{type(e).__name__}: {e}"
        finally:
            counters = {}
            try:
                if self.sampler and self.sampler.is_alive():
                    self.sampler.stop()
                self._stop_agent()
                counters = self._read_counters()
            finally:
                self.cleanup()
        return self._result(error, counters)

    def _read_counters(self):
        c = {}
        if not self.box:
            return c
        try:
            if self.fs.version == 1:
                c["oom_control"] = self.box.flat_keyed("memory.oom_control")
                c["failcnt"] = self.box.read_int("memory.failcnt")
                c["max_usage_bytes"] = self.box.read_int("memory.max_usage_in_bytes")
            else:
                c["memory_events"] = self.box.flat_keyed("memory.events")
                if os.path.exists(self.box.path("memory.peak")):
                    c["peak_bytes"] = self.box.read_int("memory.peak")
        except Exception as e:  # noqa: BLE001
            c["error"] = str(e)
        return c

    def cleanup(self):
        """Idempotent: kill what we started, remove the cgroups."""
        if self.fixture and self.fixture.poll() is None:
            try:
                self.fixture.kill()
                self.fixture.wait(timeout=5)
            except Exception:  # noqa: BLE001
                pass
        if self.agent and self.agent.poll() is None:
            try:
                self.agent.send_signal(signal.SIGTERM)
                self.agent.wait(timeout=self.opts.agent_stop_timeout)
            except Exception:  # noqa: BLE001
                self.agent.kill()
                self.agent.wait()
        if getattr(self, "fixture_pidfd", None) is not None:
            os.close(self.fixture_pidfd)
            self.fixture_pidfd = None
        if self.fixture and self.fixture.stdout:
            self.fixture.stdout.close()
        for cg in (self.box, self.scope):
            if cg and not cg.remove():
                self.notes.append(f"could not remove {cg.dir}")
        self.box = None
        self.scope = None

    # ---------------------------------------------------------- the result
    def _result(self, error, counters):
        samples = self.sampler.samples if self.sampler else []
        if samples:
            with open(os.path.join(self.raw_dir, "usage.csv"), "w") as f:
                f.write("t_ns,usage_bytes\n")
                for t, v in samples:
                    f.write(f"{t},{v}\n")
        recs = self._records() if hasattr(self, "records_path") else []
        log = self._read(getattr(self, "log_path", "")).decode(errors="replace")
        res = {
            "run_id": self.run_id,
            "cell": dict(self.cell),
            "cgroup_version": self.fs.version,
            "repeat": self.cell.get("repeat"),
            "limit_bytes": getattr(self, "limit_bytes", None),
            "high_bytes": getattr(self, "high_bytes", None),
            "oom_group": getattr(self, "oom_group", None),
            "threshold_bytes": getattr(self, "threshold_bytes", None),
            "sample_period_ms": self.opts.sample_ms,
            "samples": len(samples),
            "peak_usage_bytes": max((v for _, v in samples), default=None),
            "agent_ready_ms": self.agent_ready_ms,
            "agent_exit": self.agent_exit,
            "fixture_wait_status": self.wait_status,
            "fixture_killed_by": (-self.wait_status if isinstance(self.wait_status, int) and self.wait_status < 0
                                  else None),
            "timed_out": self.timed_out,
            "run_timeout_s": self.opts.run_timeout_for(self.cell),
            "cgroup_counters": counters,
            "records": len(recs),
            "error": error,
            "notes": self.notes,
        }
        res.update(build_timeline(self, recs, samples, log, counters, error))
        return res


def _first(pred, seq):
    for x in seq:
        if pred(x):
            return x
    return None


def _ms(a, b):
    """(b - a) in ms, None when either is missing."""
    if a is None or b is None:
        return None
    return (b - a) / 1e6


def build_timeline(run, recs, samples, log, counters, error):
    box_rel = f"{run.session.rel}/{run.run_id}/box"
    tl = {"fixture_start_ns": run.fixture_start_ns, "fixture_ready_ns": run.fixture_ready_ns}

    # Threshold (and memory.high) crossings as sampled: between the last sample below the
    # level (lower bound) and the first one at or above it (upper bound); the estimate is
    # the linear interpolation between the two.
    def crossing(level):
        if level is None:
            return None, None, None
        prev = None
        for t, v in samples:
            if v >= level:
                if prev is None:
                    return t, t, t
                pt, pv = prev
                est = pt + int((level - pv) / (v - pv) * (t - pt)) if v > pv else t
                return est, pt, t
            prev = (t, v)
        return None, None, None
    thr_bytes = getattr(run, "threshold_bytes", None)
    (tl["threshold_crossed_ns"], tl["threshold_crossed_lower_ns"],
     tl["threshold_crossed_upper_ns"]) = crossing(thr_bytes)
    if getattr(run, "high_bytes", None):
        tl["high_crossed_ns"], _, _ = crossing(run.high_bytes)

    # The incident with the decision (a snapshot attempt), and the kill / exit records.
    snap = _first(lambda r: r.get("collection", {}).get("status") != "not_attempted", recs)
    kill_rec = _first(lambda r: "oom_kill" in r, ([snap] if snap and "oom_kill" in snap else []) + recs)
    exit_rec = _first(lambda r: "exit" in r, ([kill_rec] if kill_rec else []) + recs)
    rtl = (snap or {}).get("timeline", {})
    for k in ("trigger_ns", "received_ns", "decided_ns", "collection_start_ns", "snapshot_complete_ns"):
        tl[k if k != "trigger_ns" else "first_trigger_ns"] = rtl.get(k)
    tl["oom_kill_ns"] = kill_rec["oom_kill"].get("kernel_ts_ns") if kill_rec else None
    tl["exit_ns"] = exit_rec["exit"].get("kernel_ts_ns") if exit_rec else None
    tl["fixture_reaped_ns"] = run.fixture_reaped_ns

    triggers = [{"type": s["type"], "ns": s["kernel_ts_ns"]} for s in (snap or {}).get("triggers_seen", [])]
    # Kill-only records (no snapshot before the kill) still carry their trigger.
    for r in recs:
        if r is snap:
            continue
        t = r.get("trigger", {})
        if t.get("type") and t.get("kernel_ts_ns"):
            triggers.append({"type": t["type"], "ns": t["kernel_ts_ns"], "record": "separate"})
    triggers.sort(key=lambda x: x["ns"])
    offset = getattr(run, "clock_offset_ns", None)
    below = []
    if offset is not None:
        stop = tl["oom_kill_ns"] or tl["exit_ns"] or tl["fixture_reaped_ns"]
        below = [t for t in triggers_from_log(log, box_rel, offset)
                 if "below threshold" in t["verdict"] and (stop is None or t["approx_ns"] <= stop)]

    snap_status = None
    coll_status = None
    top_entry = None
    if snap:
        coll_status = snap.get("collection", {}).get("status")
        s = snap.get("tracer_data", {}).get("snapshot", {})
        snap_status = s.get("status")
        if s.get("entries"):
            top_entry = s["entries"][0].get("name")

    kill_ns, done_ns = tl["oom_kill_ns"], tl["snapshot_complete_ns"]
    # Ground truth for "was there a kill": the cgroup's own counter, else the agent's record.
    # OOM kill events, not processes: with memory.oom.group the kernel counts the chosen
    # victim twice in oom_kill (its own kill, then again as a member of the group), and
    # oom_group_kill counts the events.
    events = counters.get("memory_events", {})
    if run.fs.version == 1:
        kernel_kills = counters.get("oom_control", {}).get("oom_kill")
    elif getattr(run, "oom_group", None) and events.get("oom_group_kill") is not None:
        kernel_kills = events.get("oom_group_kill")
    else:
        kernel_kills = events.get("oom_kill")
    killed = bool(kernel_kills) or kill_ns is not None
    lead = _ms(done_ns, kill_ns) if (kill_ns and done_ns and coll_status == "collected") else None
    if error:
        outcome = "error"
    elif killed:
        outcome = "captured_before_kill" if (lead is not None and lead > 0) else "missed"
    elif run.timed_out:
        throttled = bool(getattr(run, "high_bytes", None)) and bool(samples) and samples[-1][1] >= getattr(run, "high_bytes", 0) * 0.95
        outcome = "throttled_without_kill" if throttled else "no_kill"
    else:
        outcome = "no_kill"  # the fixture ended on its own (not expected)

    # Ordering checks of the timeline (all CLOCK_MONOTONIC ns).
    def le(a, b):
        return a is not None and b is not None and a <= b
    first_trig = tl["first_trigger_ns"]
    first_type = (snap or {}).get("trigger", {}).get("type")
    complete_keys = ["threshold_crossed_ns", "first_trigger_ns", "collection_start_ns", "snapshot_complete_ns",
                     "oom_kill_ns", "exit_ns"]
    missing = [k for k in complete_keys if tl.get(k) is None]
    # A forecast trigger predicts the limit from the climb's rate: it may come before
    # the threshold is crossed (crossing_to_first_trigger_ms is then negative).
    ordered = ((first_type == "forecast" or le(tl["threshold_crossed_lower_ns"], first_trig))
               and le(first_trig, tl["decided_ns"])
               and le(tl["decided_ns"], tl["collection_start_ns"])
               and le(tl["collection_start_ns"], tl["snapshot_complete_ns"])
               and tl["collection_start_ns"] < tl["snapshot_complete_ns"]
               and le(kill_ns, tl["exit_ns"]))

    derived = {
        "lead_ms": lead,
        "record_lead_ms": (kill_rec or {}).get("oom_kill", {}).get("lead_ms") if kill_rec else None,
        "latency_trigger_to_collection_start_ms": _ms(first_trig, tl["collection_start_ns"]),
        "latency_trigger_to_snapshot_ms": _ms(first_trig, done_ns),
        "snapshot_duration_ms": _ms(tl["collection_start_ns"], done_ns),
        "crossing_to_first_trigger_ms": _ms(tl["threshold_crossed_ns"], first_trig),
        "crossing_to_snapshot_ms": _ms(tl["threshold_crossed_ns"], done_ns),
        "kill_to_exit_ms": _ms(kill_ns, tl["exit_ns"]),
        "fixture_ready_to_kill_ms": _ms(run.fixture_ready_ns, kill_ns),
    }
    return {
        "outcome": outcome,
        "killed": bool(killed),
        "kernel_oom_kills": kernel_kills,
        "agent_oom_kill_records": sum(1 for r in recs if "oom_kill" in r),
        "timeline": tl,
        "triggers": triggers,
        "trigger_types": sorted({t["type"] for t in triggers}),
        "first_trigger_type": first_type,
        "triggers_below_threshold": below,
        "timeline_complete": not missing,
        "timeline_missing": missing,
        "timeline_ordered": bool(ordered) if not missing else None,
        "collection_status": coll_status,
        "collection_reason": (snap or {}).get("collection", {}).get("reason"),
        "snapshot_status": snap_status,
        "snapshot_top_entry": top_entry,
        "victim_pid": (snap or {}).get("victim_pid"),
        "matches_victim": (kill_rec or {}).get("oom_kill", {}).get("matches_victim") if kill_rec else None,
        "group_kill": (kill_rec or {}).get("oom_kill", {}).get("group_kill") if kill_rec else None,
        "killed_pids": [k.get("pid") for k in (kill_rec or {}).get("oom_kill", {}).get("killed", [])] if kill_rec else None,
        "fixture_pid": getattr(run, "fixture_pid", None),
        "usage_at_decision_bytes": (snap or {}).get("container", {}).get("usage_bytes"),
        "agent_counters": (recs[-1].get("agent") if recs else None),
        **derived,
    }

