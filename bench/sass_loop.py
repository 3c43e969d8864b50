#!/usr/bin/env python3
"""bench/sass_loop.py — the size of a kernel's tensor-core step loop, from `cuobjdump -sass` output (gpu.sh's
SASS= option writes it to $OUT/<file>.sass). Usage: sass_loop.py FILE.sass [FUNCTION-SUBSTRING ...]

For each function whose mangled name contains every substring: the innermost backward branch whose body holds
an HMMA (the decode GEMV's step loop), its instruction count, the count by opcode, and the blocks inside it that a
conditional forward branch can skip (in the GEMV: the per-tile setup and the emit), so that the instructions of a
normal step are the total minus the skipped blocks that a step does not execute. Round 12 (bench/NOTES.md) found
the big GEMVs bound by this count; compare variants by it before timing them. SASS_BODY=1 also prints the loop's
instructions."""
import os
import re
import sys
from collections import Counter

INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
FUNC = re.compile(r"Function : (\S+)")


def functions(path):
    """yields (name, [(addr, pred, opcode, operands)])"""
    name, body = None, []
    for line in open(path, errors="replace"):
        m = FUNC.search(line)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
            continue
        m = INSN.search(line)
        if m and name:
            body.append((int(m.group(1), 16), (m.group(2) or "").strip(), m.group(3), m.group(4).strip()))
    if name:
        yield name, body


def target(ops):
    m = re.search(r"0x([0-9a-f]+)", ops)
    return int(m.group(1), 16) if m else None


def step_loop(body):
    """(start, end) addresses of the smallest backward-branch body that contains an HMMA"""
    best = None
    hmma = [a for a, _, op, _ in body if op.startswith("HMMA")]
    for a, _, op, ops in body:
        if not op.startswith("BRA"):
            continue
        t = target(ops)
        if t is None or t >= a or not any(t <= h <= a for h in hmma):
            continue
        if best is None or a - t < best[1] - best[0]:
            best = (t, a)
    return best


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    keys = sys.argv[2:] or ["Li1ELi1ELi2ELi8E"]  # the gate/up kernel: <__half, PRO_NORM, KS 1, GLU, 8 warps, ...>
    found = 0
    for name, body in functions(sys.argv[1]):
        if not all(k in name for k in keys):
            continue
        found += 1
        loop = step_loop(body)
        print(f"{name}: {len(body)} instructions")
        if not loop:
            print("  no backward branch around an HMMA")
            continue
        lo, hi = loop
        ins = [i for i in body if lo <= i[0] <= hi]
        by = Counter(op.split(".")[0] for _, _, op, _ in ins)
        print(f"  step loop 0x{lo:x}..0x{hi:x}: {len(ins)} instructions")
        print("  by opcode: " + ", ".join(f"{k} {v}" for k, v in by.most_common()))
        if os.environ.get("SASS_BODY"):  # the loop itself, one instruction per line
            for a, pred, op, ops in ins:
                print(f"    {a:05x} {pred:6} {op} {ops}")
        for a, pred, op, ops in ins:  # blocks a conditional forward branch jumps over
            if op.startswith("BRA") and pred:
                t = target(ops)
                if t is not None and a < t <= hi:
                    n = sum(1 for i in ins if a < i[0] < t)
                    print(f"  {pred} BRA at 0x{a:x} skips {n} instructions (to 0x{t:x})")
    if not found:
        print("no function matches " + " ".join(keys))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
