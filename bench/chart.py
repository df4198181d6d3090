#!/usr/bin/env python3
"""Draws the fire-lateness distributions of a benchmark run as an SVG.

    DELAYQ_BENCH_SAMPLES=samples.txt cargo run --release --example bench
    python3 bench/chart.py samples.txt > bench/lateness.svg

Input: one line per (pending, system, repeat): "N system ms ms ms ...".
Output: one panel per N, the share of jobs fired within x ms (x on a log
scale), delayq and BullMQ drawn over each other. No dependencies.
"""
import math
import sys
from collections import defaultdict

COLORS = {"delayq": "#1b7f3b", "bullmq": "#c0392b"}
W, H, PAD = 360, 240, 46
X_MIN, X_MAX = 0.1, 10_000.0  # ms


def x_of(ms):
    ms = min(max(ms, X_MIN), X_MAX)
    span = math.log10(X_MAX) - math.log10(X_MIN)
    return PAD + (math.log10(ms) - math.log10(X_MIN)) / span * (W - 2 * PAD)


def y_of(share):
    return H - PAD - share * (H - 2 * PAD)


def panel(n, runs, left):
    out = [f'<g transform="translate({left},0)">',
           f'<rect x="{PAD}" y="{PAD}" width="{W - 2 * PAD}" height="{H - 2 * PAD}" fill="none" stroke="#999"/>',
           f'<text x="{W / 2}" y="{PAD - 14}" text-anchor="middle" font-size="13">{n:,} jobs pending</text>']
    for ms in (0.1, 1, 10, 100, 1000, 10000):
        x = x_of(ms)
        out.append(f'<line x1="{x}" y1="{H - PAD}" x2="{x}" y2="{PAD}" stroke="#eee"/>')
        out.append(f'<text x="{x}" y="{H - PAD + 14}" text-anchor="middle" font-size="10">{ms:g}</text>')
    for share in (0, 0.5, 0.9, 0.99, 1):
        y = y_of(share)
        out.append(f'<text x="{PAD - 4}" y="{y + 3}" text-anchor="end" font-size="10">{share:g}</text>')
    out.append(f'<text x="{W / 2}" y="{H - 8}" text-anchor="middle" font-size="10">lateness, ms (log)</text>')
    for system, samples in sorted(runs.items()):
        xs = sorted(samples)
        # At most 300 points per line: the chart needs the shape, not every sample.
        step = max(1, len(xs) // 300)
        idx = list(range(step - 1, len(xs), step))
        if idx[-1] != len(xs) - 1:
            idx.append(len(xs) - 1)
        pts = " ".join(f"{x_of(xs[i]):.1f},{y_of((i + 1) / len(xs)):.1f}" for i in idx)
        out.append(f'<polyline points="{pts}" fill="none" stroke="{COLORS.get(system, "#333")}" stroke-width="1.5"/>')
    out.append("</g>")
    return "\n".join(out)


def main():
    data = defaultdict(lambda: defaultdict(list))
    for line in open(sys.argv[1]):
        parts = line.split()
        if len(parts) > 2:
            data[int(parts[0])][parts[1]].extend(float(v) for v in parts[2:])
    ns = sorted(data)
    width = W * len(ns)
    print(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{H + 24}" font-family="sans-serif">')
    print(f'<rect width="{width}" height="{H + 24}" fill="white"/>')
    for i, n in enumerate(ns):
        print(panel(n, data[n], i * W))
    legend = " ".join(f'<tspan fill="{c}">&#9632; {s}</tspan>' for s, c in COLORS.items())
    print(f'<text x="{PAD}" y="{H + 16}" font-size="12">share of jobs fired within x ms: {legend}</text>')
    print("</svg>")


if __name__ == "__main__":
    main()
