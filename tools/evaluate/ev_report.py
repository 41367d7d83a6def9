"""Summary per cell (JSON + Markdown), precision/recall of the trigger, the recommendation."""
import json
from collections import Counter, OrderedDict

from ev_fixtures import TOP_ENTRY

KILL_FOLLOW_NS = 60 * 1_000_000_000  # "a snapshot followed by a kill within 60 s"


def pct(values, p):
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    k = (len(v) - 1) * p / 100
    f = int(k)
    c = min(f + 1, len(v) - 1)
    return v[f] + (v[c] - v[f]) * (k - f)


def cell_id(cell):
    rate = cell["rate"]
    rate = rate if rate == "spike" else f"{rate}mbps"
    hp = cell.get("high_percent")
    return (f"{cell.get('runtime', 'go')}-{rate}-thr{cell['threshold']}" + (f"-high{hp}" if hp is not None else "")
            + (f"-{cell['rule']}only" if cell.get("rule") else ""))


def rate_sort_key(rate):
    return (1, 0) if rate == "spike" else (0, float(rate))


def cell_sort_key(cell):
    hp = cell.get("high_percent")
    return (cell.get("runtime", "go"), rate_sort_key(cell["rate"]), -1 if hp is None else hp, cell["threshold"],
            cell.get("rule", ""))


def snapshot_taken(run):
    return run.get("collection_status") == "collected" and run["timeline"].get("snapshot_complete_ns") is not None


def snapshot_followed_by_kill(run):
    """The trigger was right: an OOM kill of the container came after the collection started
    (within 60 s). Whether the snapshot was complete before it is what recall/lead measure."""
    tl = run["timeline"]
    start, kill = tl.get("collection_start_ns"), tl.get("oom_kill_ns")
    return snapshot_taken(run) and kill is not None and start is not None and 0 < kill - start <= KILL_FOLLOW_NS


def precision_recall(runs):
    snaps = [r for r in runs if snapshot_taken(r)]
    followed = [r for r in snaps if snapshot_followed_by_kill(r)]
    kills = [r for r in runs if r.get("killed")]
    preceded = [r for r in kills if r.get("outcome") == "captured_before_kill"]
    return {
        "snapshots": len(snaps),
        "snapshots_followed_by_kill_60s": len(followed),
        "precision": len(followed) / len(snaps) if snaps else None,
        "kills": len(kills),
        "kills_preceded_by_snapshot": len(preceded),
        "recall": len(preceded) / len(kills) if kills else None,
    }


def summarize_cell(cell, runs):
    kills = [r for r in runs if r.get("killed")]
    captured = [r for r in runs if r.get("outcome") == "captured_before_kill"]
    leads = [r["lead_ms"] for r in runs if r.get("lead_ms") is not None]
    lat_snap = [r["latency_trigger_to_snapshot_ms"] for r in runs if r.get("latency_trigger_to_snapshot_ms") is not None]
    lat_start = [r["latency_trigger_to_collection_start_ms"] for r in runs
                 if r.get("latency_trigger_to_collection_start_ms") is not None]
    rates = [r["achieved_rate_mb_s"] for r in runs if r.get("achieved_rate_mb_s")]
    s = OrderedDict()
    s["cell_id"] = cell_id(cell)
    s["cell"] = cell
    s["n"] = len(runs)
    s["outcomes"] = dict(Counter(r.get("outcome") for r in runs))
    s["kills"] = len(kills)
    s["captured_before_kill"] = len(captured)
    s["capture_before_kill_rate"] = len(captured) / len(kills) if kills else None
    s["lead_ms"] = {"p50": pct(leads, 50), "p99": pct(leads, 99), "min": min(leads) if leads else None, "n": len(leads)}
    s["latency_trigger_to_snapshot_ms"] = {"p50": pct(lat_snap, 50), "p99": pct(lat_snap, 99), "n": len(lat_snap)}
    s["latency_trigger_to_collection_start_ms"] = {"p50": pct(lat_start, 50), "p99": pct(lat_start, 99),
                                                   "n": len(lat_start)}
    s["snapshot_status"] = dict(Counter(r.get("snapshot_status") or "none" for r in runs))
    s["collection_status"] = dict(Counter(r.get("collection_status") or "none" for r in runs))
    s["first_trigger_type"] = dict(Counter(r.get("first_trigger_type") or "none" for r in runs))
    s["trigger_types_seen"] = sorted({t for r in runs for t in r.get("trigger_types", [])})
    s["achieved_rate_mb_s_p50"] = pct(rates, 50)
    def p(key, q):
        return pct([r.get(key) for r in runs], q)
    s["timing_detail_ms"] = {
        "crossing_to_first_trigger_p50": p("crossing_to_first_trigger_ms", 50),
        "crossing_to_snapshot_p50": p("crossing_to_snapshot_ms", 50),
        "snapshot_duration_p50": p("snapshot_duration_ms", 50),
        "snapshot_duration_p99": p("snapshot_duration_ms", 99),
        "kill_to_exit_p50": p("kill_to_exit_ms", 50),
        "fixture_ready_to_kill_p50": p("fixture_ready_to_kill_ms", 50),
        "agent_ready_p50": p("agent_ready_ms", 50),
    }
    s["timeline_complete_and_ordered"] = sum(1 for r in runs if r.get("timeline_complete") and r.get("timeline_ordered"))
    s["precision_recall"] = precision_recall(runs)
    return s


def recommend(summaries):
    """Per runtime and rate: the latest trigger point (highest memory.high, then highest
    threshold) whose capture-before-kill rate is >= 95 %."""
    by_rate = OrderedDict()
    for s in sorted(summaries, key=lambda s: cell_sort_key(s["cell"])):
        by_rate.setdefault((s["cell"].get("runtime", "go"), s["cell"]["rate"]), []).append(s)
    out = []
    for (runtime, rate), cells in by_rate.items():
        ok = [s for s in cells if s["kills"] and s["capture_before_kill_rate"] is not None
              and s["capture_before_kill_rate"] >= 0.95]
        rate_txt = "a step spike (as fast as the fixture can allocate)" if rate == "spike" else f"{rate} MB/s"
        rec = {"runtime": runtime, "rate": rate, "ok_cells": [s["cell_id"] for s in ok]}
        if ok:
            best = max(ok, key=lambda s: (s["cell"].get("high_percent") or 0, s["cell"]["threshold"]))
            c = best["cell"]
            hp = c.get("high_percent")
            lead = best["lead_ms"]
            thr_list = sorted({s["cell"]["threshold"] for s in ok if s["cell"].get("high_percent") == hp})
            rec["cell"] = best["cell_id"]
            throttled = best["outcomes"].get("throttled_without_kill", 0)
            txt = (f"{runtime} leaking at {rate_txt}: "
                   + (f"memory.high {hp}% with " if hp is not None else "")
                   + f"ThresholdPercent {c['threshold']} is the latest setting that captured before every kill "
                   f"({best['captured_before_kill']}/{best['kills']} runs; lead p50 {fmt(lead['p50'])} ms, "
                   f"min {fmt(lead['min'])} ms)")
            if len(thr_list) > 1:
                txt += f"; thresholds {', '.join(map(str, thr_list))} all reached >= 95 %"
            if throttled:
                txt += f"; {throttled} run(s) were throttled at memory.high without a kill"
            short = [s for s in cells if s not in ok]
            if short:
                txt += "; below 95 %: " + ", ".join(
                    f"{s['cell_id']} {s['captured_before_kill']}/{s['kills']}" for s in short)
            rec["text"] = txt + "."
        else:
            withkills = [s for s in cells if s["kills"]]
            if withkills:
                best = max(withkills, key=lambda s: (s["capture_before_kill_rate"], -s["cell"]["threshold"]))
                rec["text"] = (f"{runtime} leaking at {rate_txt}: no tested setting reached 95 % capture before "
                               f"the kill; best was {best['cell_id']} with {best['captured_before_kill']}/"
                               f"{best['kills']}. Use a lower threshold (or memory.high) for this rate.")
            else:
                rec["text"] = (f"{runtime} leaking at {rate_txt}: no run ended in an OOM kill "
                               f"(outcomes: {merge_counts(s['outcomes'] for s in cells)}).")
        out.append(rec)
    return out


def merge_counts(dicts):
    c = Counter()
    for d in dicts:
        c.update(d)
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items()))


def fmt(v, nd=1):
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def fmt_rate(v):
    return "–" if v is None else f"{v * 100:.0f} %"


def mix(d):
    return ", ".join(f"{k} {v}" for k, v in sorted(d.items(), key=lambda kv: (-kv[1], kv[0])))


def markdown(meta, summaries, overall, recs, plot_files):
    v2 = meta["cgroup_version"] == 2
    L = [f"# oomsnap trigger-timing evaluation ({meta['label']})", ""]
    L.append(f"- machine: {meta['node']}, kernel {meta['kernel']}, cgroup v{meta['cgroup_version']}, "
             f"{meta['cpus']} CPUs; {meta['started']} – {meta['finished']} ({meta['wall_s']:.0f} s)")
    L.append(f"- agent: `{meta['binary']}`; fixtures: "
             + ", ".join(f"{r}" + (f" (`{meta['fixture']}`)" if r == "go" else "") + f", leaking {TOP_ENTRY.get(r, '?')}"
                         for r in meta.get("runtimes", ["go"])) + " (tools/evaluate/ev_fixtures.py)")
    L.append("- rules: the agent's default (ThresholdPercent and the forecast trigger)"
             + ("; \"threshold only\" cells blacklist the forecast trigger" if "threshold" in meta.get("rules", []) else ""))
    L.append(f"- per run: a fresh memory cgroup with limit {meta['limit_mb']} MiB"
             + (", memory.swap.max 0, memory.high as listed" if v2 else "")
             + (f", memory.oom.group {meta['oom_group']}" if v2 and meta.get("oom_group") is not None else "")
             + f"; the agent scoped to it (IntervalTracing {meta['interval_tracing']} s, OomKillWindow "
             f"{meta['oom_kill_window']} s, RunTracingToolTimeout {meta['snapshot_budget']} s"
             + (f", blacklist {meta['blacklist']}" if meta.get("blacklist") else "")
             + f"); usage sampled every {meta['sample_ms']} ms; run timeout {meta['run_timeout']}; "
             f"{meta['repeat']} repeat(s) per cell")
    if meta.get("note"):
        L.append(f"- note: {meta['note']}")
    L.append("")
    L.append("Capture before kill = runs whose snapshot completed before the OOM kill / runs with a kill. "
             "lead = kill − snapshot complete; latency = first trigger (kernel timestamp) → snapshot complete "
             "(→ collection start). Rates are what the fixture was asked for; \"achieved\" is the usage slope "
             "between 25 % and 75 % of the limit.")
    L.append("")
    hdr = ["runtime", "rate MB/s (achieved)"] + (["memory.high"] if v2 else []) + [
        "threshold", "n", "outcomes", "capture before kill", "lead ms p50 / p99 (min)",
        "trigger→snapshot ms p50 / p99", "trigger→collection start ms p50 / p99", "first trigger",
        "snapshot status"]
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "|".join(["---"] * len(hdr)) + "|")
    for s in summaries:
        c = s["cell"]
        row = [c.get("runtime", "go"), f"{c['rate']} ({fmt(s['achieved_rate_mb_s_p50'], 0)})"]
        if v2:
            row.append("none" if c.get("high_percent") is None else f"{c['high_percent']} %")
        row += [f"{c['threshold']} %" + (" (threshold only)" if c.get("rule") == "threshold" else ""), str(s["n"]),
                mix(s["outcomes"]),
                f"{s['captured_before_kill']}/{s['kills']} ({fmt_rate(s['capture_before_kill_rate'])})",
                f"{fmt(s['lead_ms']['p50'])} / {fmt(s['lead_ms']['p99'])} ({fmt(s['lead_ms']['min'])})",
                f"{fmt(s['latency_trigger_to_snapshot_ms']['p50'])} / {fmt(s['latency_trigger_to_snapshot_ms']['p99'])}",
                f"{fmt(s['latency_trigger_to_collection_start_ms']['p50'])} / "
                f"{fmt(s['latency_trigger_to_collection_start_ms']['p99'])}",
                mix(s["first_trigger_type"]), mix(s["snapshot_status"])]
        L.append("| " + " | ".join(row) + " |")
    L.append("")
    L.append("Timing details (ms, p50 unless noted): threshold crossed (sampled) → first trigger the policy "
             "took; crossing → snapshot complete; snapshot duration (collection start → complete); kill → exit; "
             "fixture ready → kill; timelines complete and ordered.")
    L.append("")
    hdr2 = ["cell", "crossing → first trigger", "crossing → snapshot", "snapshot p50 / p99", "kill → exit",
            "ready → kill", "timeline ok"]
    L.append("| " + " | ".join(hdr2) + " |")
    L.append("|" + "|".join(["---"] * len(hdr2)) + "|")
    for s in summaries:
        d = s["timing_detail_ms"]
        L.append(f"| {s['cell_id']} | {fmt(d['crossing_to_first_trigger_p50'])} | {fmt(d['crossing_to_snapshot_p50'])} | "
                 f"{fmt(d['snapshot_duration_p50'])} / {fmt(d['snapshot_duration_p99'])} | {fmt(d['kill_to_exit_p50'])} | "
                 f"{fmt(d['fixture_ready_to_kill_p50'], 0)} | {s['timeline_complete_and_ordered']}/{s['n']} |")
    L.append("")
    L.append("## Precision / recall of the trigger")
    L.append("")
    L.append("Precision = snapshots (collections) followed by an OOM kill of the container within 60 s of "
             "their start / snapshots; recall = OOM kills (memcg counter) preceded by a completed snapshot / "
             "OOM kills.")
    L.append("")
    L.append("| cell | snapshots | followed by a kill ≤ 60 s | precision | kills | preceded by a snapshot | recall |")
    L.append("|---|---|---|---|---|---|---|")
    for s in summaries + [{"cell_id": "**all runs**", "precision_recall": overall}]:
        pr = s["precision_recall"]
        L.append(f"| {s['cell_id']} | {pr['snapshots']} | {pr['snapshots_followed_by_kill_60s']} | "
                 f"{fmt_rate(pr['precision'])} | {pr['kills']} | {pr['kills_preceded_by_snapshot']} | "
                 f"{fmt_rate(pr['recall'])} |")
    L.append("")
    L.append("## Recommendation")
    L.append("")
    for r in recs:
        L.append(f"- {r['text']}")
    L.append("")
    if plot_files:
        L.append("## Plots")
        L.append("")
        for cid, p in plot_files:
            L.append(f"- [{cid}]({p})")
        L.append("")
    return "\n".join(L)


def write_reports(out_dir, meta, runs, plot_files):
    cells = OrderedDict()
    for r in sorted(runs, key=lambda r: (cell_sort_key(r["cell"]), r["cell"].get("repeat", 0))):
        key = cell_id(r["cell"])
        cells.setdefault(key, {"cell": {k: v for k, v in r["cell"].items() if k != "repeat"}, "runs": []})
        cells[key]["runs"].append(r)
    summaries = [summarize_cell(v["cell"], v["runs"]) for v in cells.values()]
    overall = precision_recall(runs)
    recs = recommend(summaries)
    summary = OrderedDict(meta=meta, cells=summaries, overall=overall, recommendations=recs,
                          plots=[p for _, p in plot_files])
    with open(f"{out_dir}/summary.json", "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    md = markdown(meta, summaries, overall, recs, plot_files)
    with open(f"{out_dir}/summary.md", "w") as f:
        f.write(md + "\n")
    return summary, md
