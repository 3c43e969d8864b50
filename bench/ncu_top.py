#!/usr/bin/env python3
"""bench/ncu_top.py — the SASS instructions where a kernel's warps stall most, from
`ncu --import R.ncu-rep --page source --csv --print-source sass > src.csv` (a profile taken with
--section SourceCounters). Usage: ncu_top.py src.csv [N]. Prints the N instructions with the most
warp-stall samples, with their share and the instruction text, then the totals by opcode."""
import csv
import sys
from collections import Counter

rows = list(csv.reader(open(sys.argv[1], newline="", errors="replace")))
n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
hdr_i = next(i for i, r in enumerate(rows) if any("Source" == c.strip() for c in r))
hdr = [c.strip() for c in rows[hdr_i]]
src = hdr.index("Source")
cand = [i for i, c in enumerate(hdr) if "Warp Stall Sampling (All" in c] or [i for i, c in enumerate(hdr) if "Stall" in c]
si = cand[0]
data = []
for r in rows[hdr_i + 1:]:
    if len(r) <= max(src, si):
        continue
    try:
        v = float(r[si].replace(",", "") or 0)
    except ValueError:
        continue
    data.append((v, r[src].strip(), r[0].strip()))
tot = sum(v for v, _, _ in data) or 1.0
print(f"column: {hdr[si]}; total samples {tot:.0f}; {len(data)} instructions")
for v, s, a in sorted(data, reverse=True)[:n]:
    print(f"{100 * v / tot:5.1f}%  {a:>8}  {s}")
by = Counter()
for v, s, _ in data:
    op = s.split()[0] if s else "?"
    if op.startswith("@"):
        op = s.split()[1] if len(s.split()) > 1 else op
    by[op.split(".")[0]] += v
print("by opcode:", ", ".join(f"{k} {100 * v / tot:.1f}%" for k, v in by.most_common(12)))
