#!/usr/bin/env python3
"""Back-predicts published training runs with napkin's performance model (issue 21).

Megatron-LM's weak-scaling runs (Narayanan et al. 2021, "Efficient Large-Scale Language Model
Training on GPU Clusters Using Megatron-LM", Table 1: GPT models of 1.7B to 1T parameters on 32 to
3072 A100 80 GB GPUs of Selene) publish the achieved teraFLOP/s per GPU. For each row this runs
`napkin estimate --json` with the row's shape and layout and no --mfu, so the time is predicted op
by op on napkin's default A100 efficiencies (no profile measured on an A100, nothing fitted to the
paper), and prints the paper's figure from the predicted step beside the published one.

    bench/published_runs.py --napkin build/cli/napkin [--json FILE]

The paper counts 96 B s l h^2 (1 + s/6h + V/16lh) FLOPs a step (its equation 3: recomputation
included, attention not halved for causality): napkin's hardware FLOPs with --attention-flops
full, so the predicted TFLOP/s per GPU is napkin's HFU x 312. What napkin is told about each run:
micro-batch 1 (the table gives only the global batch), M = batch / DP micro-batches per replica,
full recomputation, fp32 main gradients, naive attention (2021: no flash attention), dropout 0.1,
no ZeRO, the data-parallel all-reduce after the backward (--overlap off: Megatron-LM's
DistributedDataParallel then), the tensor group on NVLink 3 in a DGX A100 node and the data and
pipeline groups on HDR InfiniBand, and the plain 1F1B schedule (V = 1): the paper ran the
interleaved schedule with scatter/gather sends and does not print V (docs/ESTIMATOR.md, "Published
runs, predicted"). The estimate is arithmetic: the same on any machine.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

# Table 1: (parameters, heads, hidden size, layers, t, p, GPUs, batch, achieved TFLOP/s per GPU).
TABLE1 = [
    ("1.7B", 24, 2304, 24, 1, 1, 32, 512, 137),
    ("3.6B", 32, 3072, 30, 2, 1, 64, 512, 138),
    ("7.5B", 32, 4096, 36, 4, 1, 128, 512, 142),
    ("18.4B", 48, 6144, 40, 8, 1, 256, 1024, 135),
    ("39.1B", 64, 8192, 48, 8, 2, 512, 1536, 138),
    ("76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 140),
    ("145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 148),
    ("310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 155),
    ("529.6B", 128, 20480, 105, 8, 35, 2520, 2520, 163),
    ("1008B", 160, 25600, 128, 8, 64, 3072, 3072, 163),
]
A100_PEAK_TFLOPS = 312.0


def estimate(napkin, heads, h, layers, tp, pp, gpus, batch):
    dp = gpus // (tp * pp)
    cmd = [napkin, "estimate", "--layers", str(layers), "--d-model", str(h), "--heads", str(heads),
           "--vocab", "51200", "--context", "2048", "--seq-len", "2048", "--dropout", "0.1",
           "--attention", "naive", "--checkpointing", "full", "--tp", str(tp), "--pp", str(pp),
           "--gpus", str(gpus), "--micro-batches", str(batch // dp), "--gpu", "a100-80gb",
           "--grads-fp32", "--link", "ib-hdr", "--net-link", "ib-hdr", "--node-link", "nvlink3",
           "--overlap", "off", "--attention-flops", "full", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"published_runs: {' '.join(cmd)} failed: {out.stderr.strip()}")
    return cmd, json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--napkin", required=True, help="the napkin binary")
    ap.add_argument("--json", help="also write every row's numbers here")
    args = ap.parse_args()

    rows = []
    print("| N | t | p | GPUs | batch | predicted step | bubble | exposed comm. | "
          "predicted TFLOP/s per GPU | published | error |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, heads, h, layers, tp, pp, gpus, batch, published in TABLE1:
        cmd, e = estimate(args.napkin, heads, h, layers, tp, pp, gpus, batch)
        t = e["time"]
        if t["basis"] != "predicted":
            sys.exit(f"published_runs: {name}: time.basis is {t['basis']}, expected predicted")
        predicted = t["hfu"] * A100_PEAK_TFLOPS
        error = predicted / published - 1
        rows.append(dict(model=name, command=cmd[1:], step_seconds=t["step_seconds"],
                         bubble_fraction=t.get("bubble_fraction", 0), hfu=t["hfu"],
                         predicted_tflops=predicted, published_tflops=published, error=error))
        print(f"| {name} | {tp} | {pp} | {gpus} | {batch} | {t['step_seconds']:.2f} s | "
              f"{t.get('bubble_fraction', 0) * 100:.1f}% | "
              f"{t['model']['communication_exposed_seconds']:.2f} s | {predicted:.1f} | "
              f"{published} | {error * 100:+.1f}% |")
    errors = [abs(r["error"]) for r in rows]
    print(f"\nmedian absolute error {statistics.median(errors) * 100:.1f}%, "
          f"worst {max(errors) * 100:.1f}% over {len(rows)} runs "
          "(napkin estimate on its default A100 efficiencies)")
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump(rows, f, indent=1)
        os.replace(args.json + ".tmp", args.json)


if __name__ == "__main__":
    main()
