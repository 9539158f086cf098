#!/usr/bin/env python3
"""Where a profiled GPU step's time goes, read from a run's trace.json (docs/FORMATS.md):

- per step, the device records' summed time against the step's host range, the gaps between
  consecutive records on the GPU tracks (a histogram in microseconds, their total, the largest
  with the records on either side), and the lead before the first record;
- how many records began before the one ahead of them ended (started_early_ns), and by how much;
- the device time of the records each op launched (the launch flow's start inside the op's host
  range: report.json's device_seconds_per_step, recomputed from the trace, which every profiled
  run has, while older reports lack the field).

    python3 scripts/trace_gaps.py traces/h200-gpt2 [--top 8]

The figures docs/CUDA.md ("On a GPU") and traces/README.md quote for traces/h200-gpt2 come from it.
"""

import argparse
import bisect
import collections
import json
import os
import re
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", help="a run folder with trace.json, or the trace.json itself")
    p.add_argument("--top", type=int, default=8, help="largest gaps and ops to list")
    args = p.parse_args()
    path = args.run_dir if args.run_dir.endswith(".json") else os.path.join(args.run_dir, "trace.json")
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"trace_gaps: {path}: {e}", file=sys.stderr)
        return 2
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    threads = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"
           and threads.get(e.get("tid"), "").startswith("GPU")]
    if not gpu:
        print(f"trace_gaps: {path}: no device records on a GPU track (a CPU run, or profiling was off)",
              file=sys.stderr)
        return 1
    early = [k["args"]["started_early_ns"] for k in gpu if "started_early_ns" in k.get("args", {})]
    if early:
        print(f"{len(early)} records began before the one ahead of them on their stream ended "
              f"(started_early_ns, up to {max(early)} ns)")
    steps = [e for e in events if e.get("ph") == "X" and e.get("cat") == "step"]
    for s in steps:
        t0, t1 = s["ts"], s["ts"] + s["dur"]
        ks = sorted((k for k in gpu if k["ts"] >= t0 and k["ts"] + k["dur"] <= t1), key=lambda k: k["ts"])
        if not ks:
            continue
        busy = sum(k["dur"] for k in ks)
        gaps = [(b["ts"] - (a["ts"] + a["dur"]), a["name"], b["name"]) for a, b in zip(ks, ks[1:])]
        hist = collections.Counter(min(int(g), 20) for g, _, _ in gaps)
        small = sum(g for g, _, _ in gaps if g < 5)
        print(f"{s['name']}: {s['dur'] / 1e3:.3f} ms on the host, {len(ks)} device records, "
              f"{busy / 1e3:.3f} ms busy; gaps {sum(g for g, _, _ in gaps) / 1e3:.3f} ms "
              f"({small / 1e3:.3f} ms of them under 5 us), lead {(ks[0]['ts'] - t0) / 1e3:.3f} ms")
        print("  gaps by whole us (20: 20 or more): " + ", ".join(f"{k}: {v}" for k, v in sorted(hist.items())))
        for g, a, b in sorted(gaps, reverse=True)[:args.top]:
            print(f"  {g:8.1f} us  {a} -> {b}")

    # Each device record's time to the op range holding its launch.
    launched = {e["id"]: e["ts"] for e in events if e.get("ph") == "s"}
    ends = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "f":
            ends[e["tid"]].append((e["ts"], e["id"]))
    for v in ends.values():
        v.sort()
    ops = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in ("op", "optimizer")),
                 key=lambda e: e["ts"])
    starts = [e["ts"] for e in ops]
    per_op, unattributed = collections.Counter(), 0.0
    for k in gpu:
        lst = ends[k["tid"]]
        i = bisect.bisect_left(lst, (k["ts"], -1))
        t = launched.get(lst[i][1]) if i < len(lst) and lst[i][0] <= k["ts"] + k["dur"] else None
        j = bisect.bisect_right(starts, t) - 1 if t is not None else -1
        if j < 0 or t > ops[j]["ts"] + ops[j]["dur"]:
            unattributed += k["dur"]
            continue
        per_op[re.sub(r"^h\.\d+\.", "", ops[j]["name"])] += k["dur"]
    n = max(1, len(steps))
    print(f"device time of what each op launched, per step ({n} steps); "
          f"{unattributed / 1e3 / n:.3f} ms per step launched outside every op")
    for name, us in per_op.most_common(args.top):
        print(f"  {name:45s} {us / 1e3 / n:8.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
