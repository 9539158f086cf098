#!/usr/bin/env python3
"""Rewrites the "dur" of every complete event ("ph":"X") of a napkin trace by the writer's rule
(profiler::trace_dur_us, profiler/chrome_trace_writer.h): the double whose sum with ts, added in
double, lands on the range's end, never past it. For traces written before that rule, whose
ts + dur could pass a successor's start by one ulp (traces/h200-gpt2). Every other byte of the
file stays as it was (napkin writes one event per line); times are read exactly from their
decimal text into nanoseconds, as napkin's reader reads them.

    python3 scripts/retime_trace.py traces/h200-gpt2/trace.json
"""

import math
import os
import re
import sys
from decimal import ROUND_HALF_UP, Decimal

FIELD = re.compile(r'"(ts|dur)":(-?[0-9.eE+-]+)')


def ns(text):
    return int((Decimal(text) * 1000).to_integral_value(rounding=ROUND_HALF_UP))


def trace_dur_us(start_ns, dur_ns):  # profiler::trace_dur_us, step for step
    ts, end = start_ns / 1000.0, (start_ns + dur_ns) / 1000.0
    quotient = dur_ns / 1000.0
    if ts + quotient == end:
        return quotient
    dur = end - ts
    for _ in range(4):
        if not (dur > 0 and ts + dur > end):
            break
        dur = math.nextafter(dur, 0.0)
    for _ in range(4):
        if not ts + dur < end:
            break
        up = math.nextafter(dur, end)
        if ts + up > end:
            break
        dur = up
    return dur


def main():
    path = sys.argv[1]
    with open(path) as f:
        lines = f.readlines()
    changed = 0
    for i, line in enumerate(lines):
        if '"ph":"X"' not in line:
            continue
        fields = {m.group(1): m for m in FIELD.finditer(line)}
        if "ts" not in fields or "dur" not in fields:
            continue
        m = fields["dur"]
        dur = trace_dur_us(ns(fields["ts"].group(2)), ns(m.group(2)))
        text = repr(dur)  # shortest round-trip text, as nlohmann writes doubles
        if float(text) != float(m.group(2)):
            lines[i] = line[:m.start(2)] + text + line[m.end(2):]
            changed += 1
    with open(path + ".tmp", "w") as f:
        f.writelines(lines)
    os.replace(path + ".tmp", path)
    print(f"retime_trace: {path}: {changed} durations rewritten")


if __name__ == "__main__":
    main()
