#!/usr/bin/env python3
"""bench/kernel_times.py — per-kernel device time of one decode step from an ncu CSV
(`ncu --csv --metrics gpu__time_duration.sum ...`): the last N launches (one step), grouped by
kernel name, with the sum against the step's wall time. Usage: kernel_times.py CSV N"""
import csv
import sys
from collections import OrderedDict

rows = []
with open(sys.argv[1], newline="") as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") == "gpu__time_duration.sum":
        rows.append((r["Kernel Name"].split("(")[0].split("<")[0], float(r["Metric Value"].replace(",", ""))))
n = int(sys.argv[2])
step = rows[-n:]
agg = OrderedDict()
for name, t in step:
    c, s = agg.get(name, (0, 0.0))
    agg[name] = (c + 1, s + t)
tot = sum(t for _, t in step)
print(f"| kernel | launches | us total | us each |\n|---|---|---|---|")
for name, (c, s) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"| {name} | {c} | {s / 1e3:.1f} | {s / c / 1e3:.2f} |")
print(f"| all ({len(step)} launches) | | {tot / 1e3:.1f} | |")
