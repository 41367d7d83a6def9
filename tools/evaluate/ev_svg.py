"""One SVG per cell, written by hand (standard library only).

Top panel: the cgroup's usage over the whole run (seconds since the fixture started) for
every repeat (the first in black, the others grey), with the limit, memory.high and the
agent's threshold as horizontal lines and a vertical marker per event of the first repeat.
Bottom panel: the same events zoomed to the window from the first trigger to the exit
(milliseconds relative to the OOM kill), where collection start, snapshot complete and the
kill are often only milliseconds apart. Right: the legend with each event's time.
"""
from xml.sax.saxutils import escape

MiB = 1 << 20

W, H = 1060, 680
PX0, PX1 = 70, 730        # plot area x
TOP = (70, 330)           # top panel y range (y0 top, y1 bottom)
BOT = (410, 630)
LEG_X = 755

EVENT_STYLE = {
    # key: (label, colour, dash, width)
    "threshold_crossed_ns": ("threshold crossed (sampled)", "#1f77b4", "2,3", 1.5),
    "high_crossed_ns": ("memory.high crossed (sampled)", "#ff7f0e", "2,3", 1.5),
    "collection_start_ns": ("collection start", "#2ca02c", "6,3", 1.5),
    "snapshot_complete_ns": ("snapshot complete", "#006400", "", 2.5),
    "oom_kill_ns": ("OOM kill (mark_victim)", "#d62728", "", 2.5),
    "exit_ns": ("process exit", "#000000", "4,2", 1.5),
}
TRIGGER_COLOUR = {
    "threshold": "#17becf",
    "memcg_pressure": "#9467bd",
    "memory_events": "#e377c2",
    "psi": "#8c564b",
    "oom_kill": "#d62728",
    "process_exit": "#7f7f7f",
}


def _fmt(v, nd=1):
    return f"{v:.{nd}f}"


class _Axis:
    def __init__(self, lo, hi, p0, p1):
        if hi <= lo:
            hi = lo + 1
        self.lo, self.hi, self.p0, self.p1 = lo, hi, p0, p1

    def __call__(self, v):
        return self.p0 + (v - self.lo) / (self.hi - self.lo) * (self.p1 - self.p0)


def _nice_ticks(lo, hi, n=6):
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / n
    mag = 10 ** int(f"{raw:e}".split("e")[1])
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=mag * 10)
    first = (lo // step) * step
    out = []
    v = first
    while v <= hi + step * 1e-9:
        if v >= lo - step * 1e-9:
            out.append(round(v, 10))
        v += step
    return out


def _downsample(points, max_points=1500):
    if len(points) <= max_points:
        return points
    step = len(points) / max_points
    out = [points[int(i * step)] for i in range(max_points)]
    out.append(points[-1])
    return out


def _polyline(points, xa, ya, colour, width, opacity=1.0, cls="usage"):
    pts = " ".join(f"{_fmt(xa(x))},{_fmt(ya(y))}" for x, y in points)
    return (f'<polyline class="{cls}" fill="none" stroke="{colour}" stroke-width="{width}" '
            f'stroke-opacity="{opacity}" points="{pts}"/>')


def _hline(y, ya, x0, x1, colour, label, cls, dash="8,4"):
    py = ya(y)
    return (f'<line class="{cls}" x1="{x0}" x2="{x1}" y1="{_fmt(py)}" y2="{_fmt(py)}" stroke="{colour}" '
            f'stroke-width="1.5" stroke-dasharray="{dash}"/>'
            f'<text x="{x1 - 4}" y="{_fmt(py - 4)}" font-size="11" text-anchor="end" fill="{colour}">'
            f'{escape(label)}</text>')


def _vline(x, y0, y1, colour, dash, width, title):
    d = f' stroke-dasharray="{dash}"' if dash else ""
    return (f'<line x1="{_fmt(x)}" x2="{_fmt(x)}" y1="{y0}" y2="{y1}" stroke="{colour}" stroke-width="{width}"{d}>'
            f'<title>{escape(title)}</title></line>')


def _axes(xa, ya, yrange, xlabel, ylabel, xticks, yticks, xfmt):
    y0, y1 = yrange
    out = [f'<rect x="{PX0}" y="{y0}" width="{PX1 - PX0}" height="{y1 - y0}" fill="none" stroke="#444"/>']
    for t in xticks:
        px = xa(t)
        if PX0 - 0.5 <= px <= PX1 + 0.5:
            out.append(f'<line x1="{_fmt(px)}" x2="{_fmt(px)}" y1="{y0}" y2="{y1}" stroke="#eee"/>'
                       f'<text x="{_fmt(px)}" y="{y1 + 15}" font-size="11" text-anchor="middle">{xfmt(t)}</text>')
    for t in yticks:
        py = ya(t)
        if y0 - 0.5 <= py <= y1 + 0.5:
            out.append(f'<line x1="{PX0}" x2="{PX1}" y1="{_fmt(py)}" y2="{_fmt(py)}" stroke="#eee"/>'
                       f'<text x="{PX0 - 6}" y="{_fmt(py + 4)}" font-size="11" text-anchor="end">{t:g}</text>')
    out.append(f'<text x="{(PX0 + PX1) / 2}" y="{y1 + 32}" font-size="12" text-anchor="middle">{escape(xlabel)}</text>')
    out.append(f'<text x="18" y="{(y0 + y1) / 2}" font-size="12" text-anchor="middle" '
               f'transform="rotate(-90 18 {(y0 + y1) / 2})">{escape(ylabel)}</text>')
    return out


def _events(run):
    """[(key, label, colour, dash, width, ns)] of the run's timeline, plus its triggers."""
    tl = run.get("timeline", {})
    ev = []
    for key, (label, colour, dash, width) in EVENT_STYLE.items():
        if tl.get(key):
            ev.append((key, label, colour, dash, width, tl[key]))
    return ev


def _trigger_marks(run):
    """First trigger of each type as a full marker; the others as ticks."""
    firsts, ticks, seen = [], [], set()
    for t in run.get("triggers", []):
        c = TRIGGER_COLOUR.get(t["type"], "#bcbd22")
        if t["type"] in seen:
            ticks.append((t["type"], c, t["ns"]))
        else:
            seen.add(t["type"])
            firsts.append((t["type"], c, t["ns"]))
    return firsts, ticks


def _zoom(px0, px1, lo, hi, anchor, anchor_name, samples, limit, high, thr, marks, end_ns, heading):
    """One zoomed panel over [lo, hi] ns (padded), x in ms relative to `anchor`."""
    evs, firsts, ticks = marks
    pad = max((hi - lo) * 0.12, 1_500_000)
    lo, hi = lo - pad, hi + pad
    zx = _Axis((lo - anchor) / 1e6, (hi - anchor) / 1e6, px0, px1)
    # one sample beyond each edge keeps the line going through the panel (clipped)
    i0 = max(0, next((i for i, (t, _) in enumerate(samples) if t >= lo), len(samples)) - 1)
    i1 = next((i for i, (t, _) in enumerate(samples) if t > hi), len(samples) - 1)
    pts = [((t - anchor) / 1e6, v / MiB) for t, v in samples[i0:i1 + 1]]
    # y range from the usage before the exit (after it the usage falls to zero)
    live = [v for (t, v) in [(t, v) for t, v in samples if lo <= t <= hi] if not end_ns or t <= end_ns]
    vals = [v / MiB for v in live] or [p[1] for p in pts]
    if not vals:
        vals = [x / MiB for x in (limit, thr) if x]
    zlo, zhi = min(vals), max(vals)
    for x in (limit, high, thr):
        if x and zlo - 8 <= x / MiB <= zhi + 8:
            zlo, zhi = min(zlo, x / MiB), max(zhi, x / MiB)
    zpad = max((zhi - zlo) * 0.12, 0.5)
    za = _Axis(max(0, zlo - zpad), zhi + zpad, BOT[1], BOT[0])
    out = [f'<text x="{px0}" y="{BOT[0] - 8}" font-size="12" font-weight="bold">{escape(heading)} '
           f'({_fmt((hi - lo) / 1e6, 1)} ms)</text>']
    y0, y1 = BOT
    out.append(f'<rect x="{px0}" y="{y0}" width="{px1 - px0}" height="{y1 - y0}" fill="none" stroke="#444"/>')
    for t in _nice_ticks(zx.lo, zx.hi, 5 if px1 - px0 < 400 else 8):
        px = zx(t)
        if px0 - 0.5 <= px <= px1 + 0.5:
            out.append(f'<line x1="{_fmt(px)}" x2="{_fmt(px)}" y1="{y0}" y2="{y1}" stroke="#eee"/>'
                       f'<text x="{_fmt(px)}" y="{y1 + 15}" font-size="11" text-anchor="middle">{t:g}</text>')
    for t in _nice_ticks(za.lo, za.hi, 4):
        py = za(t)
        if y0 - 0.5 <= py <= y1 + 0.5:
            out.append(f'<line x1="{px0}" x2="{px1}" y1="{_fmt(py)}" y2="{_fmt(py)}" stroke="#eee"/>'
                       f'<text x="{px0 - 6}" y="{_fmt(py + 4)}" font-size="11" text-anchor="end">{t:g}</text>')
    out.append(f'<text x="{(px0 + px1) / 2}" y="{y1 + 32}" font-size="12" text-anchor="middle">'
               f'ms relative to {escape(anchor_name)}</text>')
    if px0 == PX0:
        out.append(f'<text x="18" y="{(y0 + y1) / 2}" font-size="12" text-anchor="middle" '
                   f'transform="rotate(-90 18 {(y0 + y1) / 2})">usage (MiB)</text>')
    if pts:
        cid = f"clip{px0}"
        out.append(f'<clipPath id="{cid}"><rect x="{px0}" y="{y0}" width="{px1 - px0}" height="{y1 - y0}"/>'
                   f'</clipPath>')
        out.append(f'<g clip-path="url(#{cid})">' + _polyline(pts, zx, za, "#000", 1.6) + "</g>")
    for val, colour, cls in ((limit, "#d62728", "limit-line-zoom"), (high, "#ff7f0e", "high-line-zoom"),
                             (thr, "#1f77b4", "threshold-line-zoom")):
        if val and za.lo <= val / MiB <= za.hi:
            py = za(val / MiB)
            out.append(f'<line class="{cls}" x1="{px0}" x2="{px1}" y1="{_fmt(py)}" y2="{_fmt(py)}" '
                       f'stroke="{colour}" stroke-dasharray="8,4"/>')
    row = 0
    items = [(ns, label.split(" (")[0], colour, dash, width) for _, label, colour, dash, width, ns in evs]
    items += [(ns, typ, colour, "1,2", 1.5) for typ, colour, ns in firsts]
    for ns, label, colour, dash, width in sorted(items):
        if not lo <= ns <= hi:
            continue
        x = zx((ns - anchor) / 1e6)
        out.append(_vline(x, y0, y1, colour, dash, width, label))
        out.append(f'<text x="{_fmt(x + 3)}" y="{y0 + 12 + 12 * (row % 7)}" font-size="10" '
                   f'fill="{colour}">{escape(label)}</text>')
        row += 1
    for typ, colour, ns in ticks:
        if lo <= ns <= hi:
            x = zx((ns - anchor) / 1e6)
            out.append(f'<line x1="{_fmt(x)}" x2="{_fmt(x)}" y1="{y1 - 8}" y2="{y1}" stroke="{colour}"/>')
    return out


def plot_cell(path, title, subtitle, runs, samples_by_run):
    """runs: the cell's run results (first = the one whose events are drawn);
    samples_by_run: run_id -> [(t_ns, bytes)]."""
    primary = runs[0]
    limit = primary.get("limit_bytes") or 0
    high = primary.get("high_bytes")
    thr = primary.get("threshold_bytes")
    t0 = primary["timeline"].get("fixture_start_ns") or (samples_by_run.get(primary["run_id"]) or [(0, 0)])[0][0]

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           f'font-family="DejaVu Sans, Arial, sans-serif">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{PX0}" y="24" font-size="16" font-weight="bold">{escape(title)}</text>',
           f'<text x="{PX0}" y="44" font-size="12" fill="#333">{escape(subtitle)}</text>']

    # ---- top panel: the whole run, every repeat
    series = []
    t_end = 1.0
    for r in runs:
        s = samples_by_run.get(r["run_id"]) or []
        r0 = r["timeline"].get("fixture_start_ns") or (s[0][0] if s else 0)
        rend = r["timeline"].get("exit_ns") or r["timeline"].get("fixture_reaped_ns") or (s[-1][0] if s else r0)
        rend += max((rend - r0) * 0.08, 50_000_000)
        pts = [((t - r0) / 1e9, v / MiB) for t, v in s if r0 - 200_000_000 <= t <= rend]
        if pts:
            t_end = max(t_end, pts[-1][0])
        series.append((r, pts))
    ymax = max([limit / MiB * 1.08] + [max((p[1] for p in pts), default=0) * 1.05 for _, pts in series])
    xa = _Axis(-0.2 if t_end < 5 else 0, t_end, PX0, PX1)
    ya = _Axis(0, ymax, TOP[1], TOP[0])
    xt = _nice_ticks(xa.lo, xa.hi)
    out += _axes(xa, ya, TOP, "time since the fixture started (s)", "usage (MiB)", xt,
                 _nice_ticks(0, ymax, 6), lambda v: f"{v:g}")
    out.append(f'<text x="{PX0}" y="{TOP[0] - 8}" font-size="12" font-weight="bold">whole run '
               f'({len(runs)} repeat{"s" if len(runs) != 1 else ""}; first in black)</text>')
    for r, pts in reversed(series):
        if not pts:
            continue
        first = r is primary
        out.append(_polyline(_downsample(pts), xa, ya, "#000" if first else "#999", 1.6 if first else 0.9,
                             1.0 if first else 0.7, "usage" if first else "usage-other"))
    if limit:
        out.append(_hline(limit / MiB, ya, PX0, PX1, "#d62728", f"limit {limit / MiB:g} MiB", "limit-line"))
    if high:
        out.append(_hline(high / MiB, ya, PX0, PX1, "#ff7f0e",
                          f"memory.high {primary['cell'].get('high_percent')}% = {high / MiB:.1f} MiB", "high-line"))
    if thr:
        out.append(_hline(thr / MiB, ya, PX0, PX1 - 200, "#1f77b4",
                          f"threshold {primary['cell'].get('threshold')}% = {thr / MiB:.1f} MiB", "threshold-line",
                          "3,3"))
    evs = _events(primary)
    firsts, ticks = _trigger_marks(primary)
    for _, label, colour, dash, width, ns in evs:
        out.append(_vline(xa((ns - t0) / 1e9), TOP[0], TOP[1], colour, dash, width, label))
    for typ, colour, ns in firsts:
        out.append(_vline(xa((ns - t0) / 1e9), TOP[0], TOP[1], colour, "1,2", 1.5, f"first {typ} trigger"))
    for typ, colour, ns in ticks:
        x = xa((ns - t0) / 1e9)
        out.append(f'<line x1="{_fmt(x)}" x2="{_fmt(x)}" y1="{TOP[0]}" y2="{TOP[0] + 8}" stroke="{colour}"/>')
    # Triggers the policy ignored (usage below ThresholdPercent; times from the agent's log, +-1 ms):
    # grey ticks on the bottom edge.
    for b in primary.get("triggers_below_threshold") or []:
        x = xa((b["approx_ns"] - t0) / 1e9)
        out.append(f'<line class="ignored-trigger" x1="{_fmt(x)}" x2="{_fmt(x)}" y1="{TOP[1] - 8}" y2="{TOP[1]}" '
                   f'stroke="{TRIGGER_COLOUR.get(b["type"], "#999")}" stroke-opacity="0.6">'
                   f'<title>{escape(b["type"])} ignored: {escape(b["verdict"])}</title></line>')

    # ---- bottom panel: zoom on the events (split in two when the snapshot and the kill are
    # far apart, so milliseconds stay visible on both sides)
    tl = primary["timeline"]
    anchor = tl.get("oom_kill_ns") or tl.get("snapshot_complete_ns") or tl.get("first_trigger_ns")
    prim_samples = samples_by_run.get(primary["run_id"]) or []
    end_ns = tl.get("exit_ns") or tl.get("fixture_reaped_ns") or tl.get("oom_kill_ns")
    early = [tl.get(k) for k in ("threshold_crossed_ns", "first_trigger_ns", "decided_ns", "collection_start_ns",
                                 "snapshot_complete_ns") if tl.get(k)]
    late = [tl.get(k) for k in ("oom_kill_ns", "exit_ns") if tl.get(k)]
    if early and late:  # each first trigger joins the nearer cluster
        for _, _, ns in firsts:
            (early if abs(ns - max(early)) < abs(ns - min(late)) else late).append(ns)
    marks = (evs, firsts, ticks)
    if early and late and max(late) - min(early) > 4 * max(max(early) - min(early), max(late) - min(late), 2_000_000):
        mid = (PX0 + PX1) // 2
        a0 = tl.get("first_trigger_ns") or min(early)
        a0_name = "the first trigger" if tl.get("first_trigger_ns") else "the threshold crossing"
        head_a = ("zoom A: threshold, trigger, snapshot" if tl.get("snapshot_complete_ns")
                  else "zoom A: threshold crossing (no snapshot here)")
        out += _zoom(PX0, mid - 30, min(early), max(early), a0, a0_name, prim_samples, limit, high, thr,
                     marks, end_ns, head_a)
        out += _zoom(mid + 30, PX1, min(late), max(late), anchor, "the OOM kill", prim_samples, limit, high, thr,
                     marks, end_ns, "zoom B: OOM kill and exit")
    elif anchor and (early or late):
        cand = early + late + [ns for _, _, ns in firsts]
        name = ("the OOM kill" if tl.get("oom_kill_ns") else
                "snapshot complete" if tl.get("snapshot_complete_ns") else "the first trigger")
        out += _zoom(PX0, PX1, min(cand), max(cand), anchor, name, prim_samples, limit, high, thr, marks, end_ns,
                     "zoom: first repeat")
    else:
        out.append(f'<text x="{PX0}" y="{BOT[0] + 20}" font-size="12">no agent events in the first repeat</text>')

    # ---- legend
    y = 70
    out.append(f'<text x="{LEG_X}" y="{y}" font-size="12" font-weight="bold">first repeat: {escape(primary["run_id"])}</text>')
    y += 18
    lead = primary.get("lead_ms")
    out.append(f'<text x="{LEG_X}" y="{y}" font-size="12">outcome: {escape(primary.get("outcome", "?"))}'
               f'{", lead " + _fmt(lead, 1) + " ms" if lead is not None else ""}</text>')
    y += 22
    rows = [(label, colour, dash, ns) for _, label, colour, dash, _, ns in evs]
    rows += [(f"trigger: {typ} (first)", colour, "1,2", ns) for typ, colour, ns in firsts]
    rows.sort(key=lambda r: r[3])
    for label, colour, dash, ns in rows:
        d = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<line x1="{LEG_X}" x2="{LEG_X + 22}" y1="{y - 4}" y2="{y - 4}" stroke="{colour}" '
                   f'stroke-width="2.5"{d}/>')
        rel = f"{(ns - t0) / 1e9:.3f} s"
        if anchor:
            rel += f" ({(ns - anchor) / 1e6:+.1f} ms)"
        out.append(f'<text x="{LEG_X + 28}" y="{y}" font-size="11">{escape(label)}</text>')
        out.append(f'<text x="{LEG_X + 28}" y="{y + 13}" font-size="10" fill="#555">{escape(rel)}</text>')
        y += 30
    if ticks:
        out.append(f'<text x="{LEG_X}" y="{y}" font-size="10" fill="#555">{len(ticks)} later triggers: ticks '
                   f'at the panel edge</text>')
        y += 16
    below = primary.get("triggers_below_threshold") or []
    if below:
        types = sorted({b["type"] for b in below})
        out.append(f'<text x="{LEG_X}" y="{y}" font-size="10" fill="#555">{len(below)} trigger(s) ignored, usage below '
                   f'the threshold</text>')
        out.append(f'<text x="{LEG_X}" y="{y + 12}" font-size="10" fill="#555">(ticks on the bottom edge):</text>')
        out.append(f'<text x="{LEG_X}" y="{y + 24}" font-size="10" fill="#555">{escape(", ".join(types))}</text>')
        y += 40
    out.append(f'<text x="{LEG_X}" y="{y + 6}" font-size="10" fill="#555">ms in brackets: relative to '
               f'{"the OOM kill" if tl.get("oom_kill_ns") else "the anchor"}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
