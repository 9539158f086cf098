#!/usr/bin/env python3
"""The LM head + loss's kernels in a profiled run's trace, launch by launch.

Reads a run folder's trace.json.gz (napkin train --profile ...) and sums, per profiled step, the
GPU time of the kernels the "head_cross_entropy" kernel range launched, grouped as
docs/CUDA.md ("The LM head and the loss") names the launches: logits GEMM, row kernel, dx GEMM
(with cuBLASLt's split-K reduction), dw GEMM, dw += dw32, memsets. Beside each: its share of the
op, and its time over its share of the op plan's roofline (each GEMM 1/3 of `--roofline-ms`, the
rest 0), so the table says which launch explains how much of the op's distance from its roofline.

    python3 bench/head_ce_trace.py bench/results/2026-11-27-h200/trace-gpt2 --roofline-ms 1.92
"""
import argparse
import collections
import gzip
import json
import os
import sys


def kind(kernel):
    if "head_cross_entropy" in kernel and "accumulate" not in kernel and "Accumulate" not in kernel:
        return "row kernel"
    if "ccumulate" in kernel:
        return "dw += dw32"
    if kernel.startswith("memset"):
        return "memsets"
    # cuBLASLt's row-major calls (kernels/cuda/gemm.cuh): logits nt, dx nn, dw tn; the kernel
    # names end in the column-major ops and layouts: TNN logits, NNT dx, NTN dw.
    if "splitKreduce" in kernel or kernel.endswith("NNT") or "_NNT" in kernel:
        return "dx GEMM"
    if "_TNN" in kernel:
        return "logits GEMM"
    if "_NTN" in kernel:
        return "dw GEMM"
    return "other: " + kernel[:40]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="a run folder with trace.json.gz")
    ap.add_argument("--roofline-ms", type=float, default=None,
                    help="the op plan's roofline for the op (napkin report's 'roofline')")
    a = ap.parse_args()
    path = os.path.join(a.run, "trace.json.gz")
    try:
        with gzip.open(path) as f:
            doc = json.load(f)
    except OSError as e:
        sys.exit(f"head_ce_trace.py: {path}: {e}")
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    ranges = [e for e in events if e.get("cat") == "op" and e.get("name", "").startswith("lm_head+loss")]
    kernels = [e for e in events if e.get("cat") == "kernel" and e.get("name") == "head_cross_entropy"]
    if not ranges or not kernels:
        sys.exit(f"head_ce_trace.py: {path}: no lm_head+loss range or head_cross_entropy kernels")
    steps = len(ranges)
    us = collections.defaultdict(float)
    for e in kernels:
        us[kind(e.get("args", {}).get("kernel", e["name"]))] += e["dur"] / steps
    total = sum(us.values())
    share = {"logits GEMM": 1 / 3, "dx GEMM": 1 / 3, "dw GEMM": 1 / 3}
    print(f"{a.run}: {steps} profiled step(s); ms per step")
    print(f"{'launch':<22} {'ms':>8} {'of op':>7} {'over roofline ms':>17}")
    order = ["logits GEMM", "row kernel", "dx GEMM", "dw GEMM", "dw += dw32", "memsets"]
    for k in order + sorted(set(us) - set(order)):
        if k not in us:
            continue
        over = "" if a.roofline_ms is None else f"{us[k] / 1e3 - share.get(k, 0) * a.roofline_ms:17.3f}"
        print(f"{k:<22} {us[k] / 1e3:8.3f} {us[k] / total:7.1%} {over}")
    over = "" if a.roofline_ms is None else f"{total / 1e3 - a.roofline_ms:17.3f}"
    print(f"{'total':<22} {total / 1e3:8.3f} {1:7.1%} {over}")


if __name__ == "__main__":
    main()
