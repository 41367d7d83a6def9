#!/usr/bin/python3
"""Trigger-timing evaluation of `oomsnap watch` against real OOM kills (issue #6).

Runs a matrix of experiments. Each cell: a fresh memory cgroup with a limit (and, on cgroup
v2, memory.high as a percentage of it), the agent with ThresholdPercent, a leaking Go fixture
growing at a given rate (MB/s, or "spike": as fast as it can). Each cell is repeated N times;
per run the incident's timeline (CLOCK_MONOTONIC ns: threshold crossed as sampled, every
trigger the agent saw, collection start, snapshot complete, OOM kill, process exit) is put
together from the usage samples and the agent's record, and the outcome decided:
captured_before_kill, missed, throttled_without_kill (v2: held at memory.high until the run
timeout), no_kill or error.

Outputs in --out: runs.jsonl (one line per run), summary.json + summary.md (a table per
cell, precision/recall of the trigger, the recommendation), plots/<cell>.svg, and raw/<run>/
(agent config, log and records, usage samples as CSV, the fixture's stderr).

Standard library only; needs root (the agent does, and so does creating cgroups). On cgroup v1
every cgroup is created below this process's own memory cgroup (or --cgroup-parent).

    tools/evaluate.py --binary build/oomsnap \\
        --fixture /var/cache/oomsnap/fixtures/go/1.26/default/heapfixture --out /tmp/eval \\
        [--limit-mb 512] [--rates 10,50,200,spike] [--thresholds 80,90] [--high-percents none|80,95]
        [--repeat 5] [--run-timeout auto|S] [--cgroup-parent REL] [--report-only]
"""
import argparse
import collections
import datetime
import json
import os
import platform
import signal
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree (or the guest's read-only view)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "evaluate"))

import ev_fixtures  # noqa: E402
import ev_report  # noqa: E402
import ev_svg  # noqa: E402
from ev_cgroup import Cgroup, CgroupError, MemoryCgroupFs  # noqa: E402
from ev_run import MiB, Run  # noqa: E402

DEFAULT_FIXTURE = "/var/cache/oomsnap/fixtures/go/1.26/default/heapfixture"
# Page faults and zeroing cost about 4 ms per MiB on this project's machines: one goroutine
# cannot leak much faster than ~250 MB/s (used only for the automatic run timeout).
ASSUMED_MAX_RATE_MB_S = 250.0


class Options:
    def __init__(self, a):
        self.__dict__.update(vars(a))

    def run_timeout_for(self, cell):
        if self.run_timeout != "auto":
            return float(self.run_timeout)
        fill_s = cell["limit_mb"] / min(cell["rate_mb_s"], ASSUMED_MAX_RATE_MB_S)
        return round(15 + 2 * fill_s, 1)


def parse_list(text, conv, name):
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            out.append(conv(item))
        except ValueError:
            raise SystemExit(f"evaluate: bad value {item!r} in {name}")
    if not out:
        raise SystemExit(f"evaluate: {name} is empty")
    return out


def rate_value(item, spike_rate):
    if item == "spike":
        return ("spike", spike_rate)
    v = float(item)
    if v <= 0:
        raise ValueError(item)
    return (f"{v:g}", v)


def high_value(item):
    if item in ("none", "-"):
        return None
    v = int(item)
    if not 1 <= v <= 100:
        raise ValueError(item)
    return v


def runtime_value(item):
    if item not in ev_fixtures.RUNTIMES:
        raise ValueError(item)
    return item


def rule_value(item):
    if item not in ("forecast", "threshold"):
        raise ValueError(item)
    return item


def threshold_value(item):
    v = int(item)
    if not 1 <= v <= 100:
        raise ValueError(item)
    return v


def build_matrix(opts):
    cells = []
    for runtime in opts.runtime_list:
        for rate, rate_mb_s in opts.rate_list:
            for hp in opts.high_list:
                for thr in opts.threshold_list:
                    for rule in opts.rule_list:
                        cell = {"runtime": runtime, "rate": rate, "rate_mb_s": rate_mb_s, "threshold": thr,
                                "high_percent": hp, "limit_mb": opts.limit_mb}
                        if rule != "forecast":
                            cell["rule"] = rule
                        cells.append(cell)
    return cells


def read_samples(raw_dir):
    path = os.path.join(raw_dir, "usage.csv")
    out = []
    try:
        with open(path) as f:
            next(f)
            for line in f:
                t, v = line.split(",")
                out.append((int(t), int(v)))
    except (OSError, StopIteration, ValueError):
        pass
    return out


def achieved_rate(run, samples):
    """Usage slope between 25 % and 75 % of the limit, MB/s (MiB/s as the fixture counts)."""
    limit = run.get("limit_bytes")
    if not limit or not samples:
        return None
    a = next(((t, v) for t, v in samples if v >= limit * 0.25), None)
    b = next(((t, v) for t, v in samples if v >= limit * 0.75), None)
    if not a or not b or b[0] <= a[0]:
        return None
    return (b[1] - a[1]) / MiB / ((b[0] - a[0]) / 1e9)


def make_plots(out_dir, runs, cgroup_version):
    os.makedirs(os.path.join(out_dir, "plots"), exist_ok=True)
    cells = {}
    for r in sorted(runs, key=lambda r: (ev_report.cell_sort_key(r["cell"]), r["cell"].get("repeat", 0))):
        cells.setdefault(ev_report.cell_id(r["cell"]), []).append(r)
    files = []
    for cid, cruns in cells.items():
        samples = {r["run_id"]: read_samples(os.path.join(out_dir, "raw", r["run_id"])) for r in cruns}
        c = cruns[0]["cell"]
        captured = sum(1 for r in cruns if r["outcome"] == "captured_before_kill")
        kills = sum(1 for r in cruns if r.get("killed"))
        leads = [r["lead_ms"] for r in cruns if r.get("lead_ms") is not None]
        rate_txt = "spike (as fast as possible)" if c["rate"] == "spike" else f"{c['rate']} MB/s"
        title = (f"{c.get('runtime', 'go')} leak {rate_txt}, limit {c['limit_mb']} MiB, threshold {c['threshold']} %"
                 + (f", memory.high {c['high_percent']} %" if c.get("high_percent") is not None else ""))
        sub = (f"cgroup v{cgroup_version}; {len(cruns)} run(s): captured before kill {captured}/{kills}"
               + (f"; lead p50 {ev_report.fmt(ev_report.pct(leads, 50))} ms" if leads else "")
               + "; outcomes " + ev_report.mix(dict(collections.Counter(r['outcome'] for r in cruns))))
        path = os.path.join(out_dir, "plots", f"{cid}.svg")
        ev_svg.plot_cell(path, title, sub, cruns, samples)
        files.append((cid, f"plots/{cid}.svg"))
    return files


class Interrupted(BaseException):
    pass


def on_term(signum, frame):
    raise Interrupted(f"signal {signum}")


def fmt_run_line(res):
    lead = res.get("lead_ms")
    return (f"{res['run_id']}: {res['outcome']}"
            + (f", lead {lead:.1f} ms" if lead is not None else "")
            + (f", first trigger {res.get('first_trigger_type')}" if res.get("first_trigger_type") else "")
            + (f", trigger->snapshot {res['latency_trigger_to_snapshot_ms']:.1f} ms"
               if res.get("latency_trigger_to_snapshot_ms") is not None else "")
            + (f", snapshot {res.get('snapshot_status')}" if res.get("snapshot_status") else "")
            + (f" [{res['error']}]" if res.get("error") else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="build/oomsnap", help="the oomsnap binary (default build/oomsnap)")
    ap.add_argument("--fixture", default=DEFAULT_FIXTURE, help="Go heapfixture binary")
    ap.add_argument("--runtimes", default="go",
                    help="leaking fixtures, comma list of " + ", ".join(ev_fixtures.RUNTIMES) + " (default go)")
    ap.add_argument("--rules", default="forecast",
                    help="trigger rules, comma list: forecast (the agent's default: the threshold and the "
                         "forecast trigger), threshold (the fixed threshold alone: forecast blacklisted)")
    ap.add_argument("--fixtures-dir", default="/var/cache/oomsnap/fixtures",
                    help="built fixtures (the Java classes under java/)")
    ap.add_argument("--out", required=True, help="output directory (created)")
    ap.add_argument("--limit-mb", type=int, default=512, help="memory limit of each cell's cgroup (MiB)")
    ap.add_argument("--rates", default="10,50,200,spike", help="leak rates in MB/s, or 'spike' (comma list)")
    ap.add_argument("--spike-rate", type=float, default=100000.0, help="what 'spike' asks the fixture for (MB/s)")
    ap.add_argument("--thresholds", default="80,90", help="agent ThresholdPercent values (comma list)")
    ap.add_argument("--high-percents", default="none",
                    help="v2 memory.high as %% of the limit, 'none' for unset (comma list)")
    ap.add_argument("--oom-group", type=int, choices=(0, 1), default=1,
                    help="v2 memory.oom.group of each cell's cgroup (1, as Kubernetes sets on every container)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per cell")
    ap.add_argument("--run-timeout", default="auto",
                    help="seconds a run may last from the fixture's start (auto: 15 + 2 x the time to fill "
                         "the limit at min(rate, 250 MB/s))")
    ap.add_argument("--cgroup-parent", default=None,
                    help="parent cgroup (relative to the mount) for the runs; default: v1 this process's own "
                         "memcg, v2 the root")
    ap.add_argument("--sample-ms", type=int, default=10, help="usage sampling period")
    ap.add_argument("--interval-tracing", type=int, default=300,
                    help="agent IntervalTracing (s); the default keeps one snapshot per run")
    ap.add_argument("--oom-kill-window", type=float, default=60, help="agent OomKillWindow (s)")
    ap.add_argument("--snapshot-budget", type=float, default=5, help="agent RunTracingToolTimeout (s)")
    ap.add_argument("--blacklist", default="", help="agent [triggers] Blacklist (comma list)")
    ap.add_argument("--agent-ready-timeout", type=float, default=60)
    ap.add_argument("--fixture-ready-timeout", type=float, default=30)
    ap.add_argument("--record-wait", type=float, default=5, help="s to wait for the record after the kill")
    ap.add_argument("--agent-stop-timeout", type=float, default=30)
    ap.add_argument("--label", default=None, help="title of the report (default: host and cgroup version)")
    ap.add_argument("--note", default=None, help="a line added to the report's header")
    ap.add_argument("--report-only", action="store_true",
                    help="rebuild summary and plots from OUT/runs.jsonl and OUT/raw/ without running anything")
    a = ap.parse_args()
    opts = Options(a)
    opts.blacklist = [b for b in a.blacklist.split(",") if b.strip()]
    opts.rate_list = parse_list(a.rates, lambda x: rate_value(x, a.spike_rate), "--rates")
    opts.threshold_list = parse_list(a.thresholds, threshold_value, "--thresholds")
    opts.high_list = parse_list(a.high_percents, high_value, "--high-percents")
    opts.runtime_list = parse_list(a.runtimes, runtime_value, "--runtimes")
    opts.rule_list = parse_list(a.rules, rule_value, "--rules")
    if a.run_timeout != "auto":
        try:
            float(a.run_timeout)
        except ValueError:
            raise SystemExit("evaluate: --run-timeout must be 'auto' or seconds")
    out = os.path.abspath(a.out)

    if a.report_only:
        runs = [json.loads(l) for l in open(os.path.join(out, "runs.jsonl")) if l.strip()]
        meta = json.load(open(os.path.join(out, "summary.json")))["meta"]
        if os.path.isdir(os.path.join(out, "raw")):
            plots = make_plots(out, runs, meta["cgroup_version"])
        else:  # published results keep no raw samples: keep the plots as they are
            print("evaluate: no OUT/raw/: plots not redrawn", file=sys.stderr)
            plots = [(os.path.basename(p)[:-4], p) for p in
                     json.load(open(os.path.join(out, "summary.json"))).get("plots", [])]
        _, md = ev_report.write_reports(out, meta, runs, plots)
        print(md)
        return 0

    if os.geteuid() != 0:
        raise SystemExit("evaluate: run as root (the agent and the cgroups need it)")
    opts.binary = os.path.abspath(a.binary)
    opts.fixture = os.path.abspath(a.fixture)
    needed = [opts.binary] + [x for r in opts.runtime_list for x in ev_fixtures.executables(r, opts)]
    for p in needed:
        if not os.access(p, os.X_OK):
            raise SystemExit(f"evaluate: not executable: {p}")
    try:
        fs = MemoryCgroupFs.detect()
    except CgroupError as e:
        raise SystemExit(f"evaluate: {e}")
    parent = a.cgroup_parent if a.cgroup_parent is not None else (fs.own_path() if fs.version == 1 else "/")
    parent = "" if parent in ("", "/") else parent.rstrip("/")
    if fs.version == 1 and any(h is not None for h in opts.high_list):
        print("evaluate: cgroup v1 has no memory.high; --high-percents ignored", file=sys.stderr)
        opts.high_list = [None]

    os.makedirs(os.path.join(out, "raw"), exist_ok=True)
    for stale in ("runs.jsonl",):
        if os.path.exists(os.path.join(out, stale)):
            os.unlink(os.path.join(out, stale))
    # Page cache is charged to whoever reads it in first: read the binaries here, in our own
    # cgroup, so their text is not charged to (and evicted from, and refaulted in) the boxes.
    for p in needed:
        with open(p, "rb") as f:
            while f.read(1 << 20):
                pass

    # Explicit handlers: a shell starts background jobs with SIGINT ignored.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_term)
    cells = build_matrix(opts)
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.monotonic()
    runs = []
    session = None
    current = None
    total = len(cells) * a.repeat
    print(f"evaluate: cgroup v{fs.version} at {fs.mount}, parent {parent or '/'}; {len(cells)} cells x "
          f"{a.repeat} repeats = {total} runs", file=sys.stderr, flush=True)
    try:
        try:
            session = Cgroup(fs, f"{parent}/oomsnap-eval-{os.getpid()}", enable_memory_below=True)
        except CgroupError as e:
            raise SystemExit(f"evaluate: cannot create the session cgroup: {e}")
        with open(os.path.join(out, "runs.jsonl"), "w") as jl:
            k = 0
            # Repeats outermost: transient load on the machine is spread over the cells.
            for rep in range(a.repeat):
                for cell in cells:
                    k += 1
                    cell = dict(cell, repeat=rep)
                    run_id = f"{ev_report.cell_id(cell)}-r{rep}"
                    current = Run(fs, session, run_id, cell, opts, os.path.join(out, "raw", run_id))
                    res = current.execute()
                    current = None
                    res["achieved_rate_mb_s"] = achieved_rate(res, read_samples(os.path.join(out, "raw", run_id)))
                    runs.append(res)
                    jl.write(json.dumps(res) + "\n")
                    jl.flush()
                    print(f"[{k}/{total} {time.monotonic() - t0:6.0f}s] {fmt_run_line(res)}", file=sys.stderr,
                          flush=True)
    except (KeyboardInterrupt, Interrupted) as e:
        print(f"evaluate: interrupted ({e or 'Ctrl-C'}); cleaning up, reporting the {len(runs)} finished runs",
              file=sys.stderr)
    finally:
        if current:
            current.cleanup()
        if session and not session.remove_tree():
            print(f"evaluate: could not remove {session.dir}", file=sys.stderr)

    if not runs:
        print("evaluate: no runs finished", file=sys.stderr)
        return 1
    meta = {
        "label": a.label or f"{platform.node()}, cgroup v{fs.version}",
        "node": platform.node(), "kernel": platform.release(), "cgroup_version": fs.version, "cpus": os.cpu_count(),
        "started": started.strftime("%Y-%m-%d %H:%M UTC"),
        "finished": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "wall_s": time.monotonic() - t0, "binary": opts.binary, "fixture": opts.fixture, "limit_mb": a.limit_mb,
        "repeat": a.repeat, "rates": a.rates, "thresholds": a.thresholds,
        "runtimes": opts.runtime_list, "rules": opts.rule_list,
        "high_percents": a.high_percents if fs.version == 2 else "n/a (v1)", "sample_ms": a.sample_ms,
        "oom_group": a.oom_group if fs.version == 2 else None,
        "interval_tracing": a.interval_tracing, "oom_kill_window": a.oom_kill_window,
        "snapshot_budget": a.snapshot_budget, "blacklist": opts.blacklist,
        "run_timeout": a.run_timeout if a.run_timeout != "auto" else "auto (15 s + 2 x fill time)",
        "runs": len(runs), "note": a.note,
    }
    plots = make_plots(out, runs, fs.version)
    _, md = ev_report.write_reports(out, meta, runs, plots)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
