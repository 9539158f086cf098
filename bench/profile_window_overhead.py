#!/usr/bin/env python3
"""The profiler's cost on whole training steps, in one process: one `napkin train` run whose
`--profile steps:N-M` window covers the middle of the run, so the steps before and after it run
unprofiled in the same process, on the same warm caches and allocator.

For each step report.json gives the host's wall time (`seconds`) and, on a GPU, the step on the
engine's stream between two CUDA events (`device_seconds`). The table gives the median of the
unprofiled steps (after the first --skip) against the median of the profiled ones, and the
first profiled step alone (it also holds CUPTI's start-up). On a GPU the profiled steps pay the
host ranges, CUPTI's records and their flush after each step; the flush runs after the step's
synchronize, outside both timers, so the figures are what the profiled steps themselves cost.

    python3 bench/profile_window_overhead.py --device cuda                    # GPT-2, B 8, T 1024
    python3 bench/profile_window_overhead.py --device cpu --model tiny -B 8 -T 64 --precision fp32

bench/profiler_overhead.cpp is the CPU engine's finer benchmark (alternating steps, the
instrumentation's own floor); this script is the one that runs wherever napkin train does.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--napkin", default=os.path.join(HERE, "..", "build-cuda", "cli", "napkin"))
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--model", default="gpt2")
    p.add_argument("-B", "--micro-batch", type=int, default=8)
    p.add_argument("-T", "--seq-len", type=int, default=1024)
    p.add_argument("--precision", default="bf16-amp")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--window", default="11-20", help="the profiled steps, 1-based N-M (napkin train --profile steps:N-M)")
    p.add_argument("--skip", type=int, default=3, help="first steps left out (warm-up)")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = p.parse_args()
    try:
        first, last = (int(x) for x in args.window.split("-"))
    except ValueError:
        p.error(f"--window {args.window!r}: expected N-M, e.g. 11-20")
    if not (args.skip < first - 1 and first <= last < args.steps):
        p.error(f"--window {args.window}: needs unprofiled steps on both sides, after the {args.skip} skipped, "
                f"within --steps {args.steps}")
    if not os.access(args.napkin, os.X_OK):
        print(f"profile_window_overhead: {args.napkin} is not an executable", file=sys.stderr)
        return 2

    out = tempfile.mkdtemp(prefix="napkin_profile_window.")
    try:
        cmd = [args.napkin, "train", "--device", args.device, "--model", args.model, "--micro-batch",
               str(args.micro_batch), "--seq-len", str(args.seq_len), "--precision", args.precision,
               "--steps", str(args.steps), "--profile", f"steps:{first}-{last}", "--quiet", "--out", out]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"profile_window_overhead: {' '.join(cmd)} failed (exit {r.returncode}):\n{r.stderr.strip()}",
                  file=sys.stderr)
            return 1
        with open(os.path.join(out, "report.json")) as f:
            report = json.load(f)
    finally:
        shutil.rmtree(out, ignore_errors=True)

    steps = report["steps"]  # step i (0-based) is --profile's step i + 1
    profiled = [s for s in steps if first - 1 <= s["step"] <= last - 1]
    off = [s for s in steps if s["step"] >= args.skip and not first - 1 <= s["step"] <= last - 1]
    keys = ["seconds"] + (["device_seconds"] if "device_seconds" in steps[0] else [])
    result = {"device": report["run"]["device"], "model": args.model, "micro_batch": args.micro_batch,
              "seq_len": args.seq_len, "precision": args.precision, "window": args.window,
              "unprofiled_steps": len(off), "profiled_steps": len(profiled)}
    print(f"{report['run']['device']}: {args.model}, B={args.micro_batch} T={args.seq_len} {args.precision}; "
          f"{len(off)} unprofiled steps against {len(profiled)} profiled ({args.window}), medians")
    print(f"  {'time':16s} {'unprofiled':>12s} {'profiled':>12s} {'overhead':>9s} {'first profiled':>15s}")
    for k in keys:
        a = statistics.median(s[k] for s in off)
        b = statistics.median(s[k] for s in profiled[1:] or profiled)
        first_on = profiled[0][k]
        name = "host (wall)" if k == "seconds" else "device (events)"
        print(f"  {name:16s} {a * 1e3:10.3f} ms {b * 1e3:10.3f} ms {100 * (b / a - 1):+8.2f}% {first_on * 1e3:12.3f} ms")
        result[k] = {"unprofiled_median": a, "profiled_median": b, "overhead": b / a - 1,
                     "first_profiled": first_on}
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1)
        os.replace(tmp, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
