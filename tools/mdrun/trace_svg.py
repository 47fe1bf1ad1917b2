#!/usr/bin/env python3
"""Draws one step of an `mdrun --trace` file as an SVG timeline.

A picture for the docs (docs/images/trace-gpt-tiny.svg) of what
ui.perfetto.dev shows: per rank its host, compute and comm tracks, nested
slices one row deeper, coloured by category, and the arrows between
streams.

    tools/mdrun/trace_svg.py TRACE.json STEP OUT.svg
"""
import json
import sys
from xml.sax.saxutils import escape

COLOURS = {"step": "#b0b0b0", "host": "#b39ddb", "data": "#81c784",
           "kernel": "#64b5f6", "collective": "#ffb74d",
           "evaluation": "#f06292", "checkpoint": "#e57373"}
TRACKS = [(2, "host"), (0, "compute stream"), (1, "comm stream")]
WIDTH, LEFT, ROW = 1200, 150, 14


def main():
    path, step, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    ev = json.load(open(path))["traceEvents"]
    ranks = sorted({e["pid"] for e in ev})
    xs = [e for e in ev if e["ph"] == "X"]
    window = [e for e in xs if e["pid"] == ranks[0] and e["tid"] == 2 and
              e["name"] == f"step {step}"]
    if not window:
        sys.exit(f"{path}: rank {ranks[0]} has no slice 'step {step}'")
    t0, t1 = window[0]["ts"], window[0]["ts"] + window[0]["dur"]
    scale = (WIDTH - LEFT - 10) / (t1 - t0)
    x = lambda ts: LEFT + (min(max(ts, t0), t1) - t0) * scale
    parts, y, rows = [], 30, {}
    for r in ranks:
        for tid, name in TRACKS:
            mine = sorted((e for e in xs if e["pid"] == r and e["tid"] == tid
                           and e["ts"] < t1 and e["ts"] + e["dur"] > t0),
                          key=lambda e: (e["ts"], -e["dur"]))
            stack, depth = [], 0
            for e in mine:
                while stack and stack[-1] <= e["ts"] + 0.002:
                    stack.pop()
                e["depth"] = len(stack)
                depth = max(depth, len(stack) + 1)
                stack.append(e["ts"] + e["dur"])
            rows[(r, tid)] = y
            parts.append(f'<text x="4" y="{y + 10}" font-size="11">rank {r} '
                         f'{escape(name)}</text>')
            last = {}  # depth -> right edge drawn, to skip hidden slivers
            for e in mine:
                left, right = x(e["ts"]), x(e["ts"] + e["dur"])
                if right - left < 0.3 and last.get(e["depth"], -1) > left - 0.3:
                    continue  # under a pixel, next to one drawn already
                last[e["depth"]] = right
                parts.append(
                    f'<rect x="{left:.1f}" y="{y + e["depth"] * ROW}" '
                    f'width="{max(right - left, 0.5):.1f}" height="{ROW - 2}" '
                    f'fill="{COLOURS.get(e["cat"], "#ccc")}" stroke="white" '
                    f'stroke-width="0.3"/>')
            y += max(depth, 1) * ROW + 8
        y += 10
    ends = {(e["pid"], e["id"]): e for e in ev if e["ph"] == "f"}
    for s in (e for e in ev if e["ph"] == "s"):
        f = ends.get((s["pid"], s["id"]))
        if f and t0 <= s["ts"] <= t1 and t0 <= f["ts"] <= t1:
            parts.append(
                f'<line x1="{x(s["ts"]):.1f}" y1="{rows[(s["pid"], s["tid"])] + 6}" '
                f'x2="{x(f["ts"]):.1f}" y2="{rows[(f["pid"], f["tid"])] + 6}" '
                f'stroke="#555" stroke-width="0.5"/>')
    legend = " ".join(
        f'<rect x="{LEFT + 110 * i}" y="6" width="10" height="10" fill="{c}"/>'
        f'<text x="{LEFT + 110 * i + 14}" y="15" font-size="11">{k}</text>'
        for i, (k, c) in enumerate(COLOURS.items()))
    with open(out, "w") as o:
        o.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
                f'height="{y + 20}" font-family="sans-serif">\n'
                f'<rect width="100%" height="100%" fill="white"/>\n{legend}\n'
                + "\n".join(parts) +
                f'\n<text x="{LEFT}" y="{y + 12}" font-size="11">step {step}: '
                f'{(t1 - t0) / 1000:.1f} ms</text>\n</svg>\n')


if __name__ == "__main__":
    main()
