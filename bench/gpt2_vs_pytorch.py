#!/usr/bin/env python3
"""napkin's CUDA engine against PyTorch on one GPU: GPT-2 (124M), T = 1024, bf16 autocast.

The benchmark the CUDA backend is held to (docs/CUDA.md, "Running on a GPU"): the same model and
recipe in both (bench/pytorch_gpt2.py describes PyTorch's side), on the same machine, in one
script, printed as ratios.

  1. PyTorch, eager and torch.compile, at the largest micro-batch that fits (bench/pytorch_gpt2.py).
  2. napkin at the micro-batch PyTorch's eager run settled on, so the two compare at equal B.
  3. napkin at the largest micro-batch that fits: the estimator's answer
     (`napkin estimate --solve max-micro-batch`), stepped down by a tenth while it runs out of
     memory.
  4. napkin fp8-amp at the same B as 2, twice: delayed scaling (napkin's default, an amax history
     of 16 steps per cast) and current scaling (--fp8-amax-history 0, one more pass per cast),
     each as a ratio to napkin's bf16-amp tokens/s (--no-fp8 leaves them out; they need sm_89+).
  5. With --attention-candidates LIST, napkin bf16-amp at the same B as 2 once more, its flash
     attention the sweep's candidates LIST names (NAPKIN_ATTENTION_CANDIDATES, docs/CUDA.md "The
     engine on candidates"; the build needs -DNAPKIN_ATTENTION_CANDIDATES=ON).

Each napkin run is `napkin train --device cuda --model gpt2 --seq-len 1024 --precision bf16-amp
--attention flash`; its step time is the median over the steps after the first --skip of
report.json's steps[].device_seconds (the step on the engine's stream, between CUDA events),
its MFU napkin's own (model FLOPs 6 N_matmul + 6 L T C per token against the GPU's dense bf16
peak), its memory the accounting allocator's peak and the device's (cudaMemGetInfo).

    python3 bench/gpt2_vs_pytorch.py [--napkin build-cuda/cli/napkin] [--steps 20] [--json FILE]
    python3 bench/gpt2_vs_pytorch.py --no-pytorch --batch 16     # napkin alone, one batch

Without a GPU (or without napkin's CUDA backend) it prints why and exits 0; --require makes that 1.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def skip(args, why):
    print(f"gpt2_vs_pytorch: skipped: {why}")
    sys.exit(1 if args.require else 0)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def napkin_train(args, batch, out, recipe=("--precision", "bf16-amp"), env=None):
    """One napkin run (`env`: variables added to its environment); returns its measurements, or
    None when it ran out of device memory."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [args.napkin, "train", "--device", "cuda", "--model", args.model, "--seq-len", str(args.seq_len),
           "--micro-batch", str(batch), *recipe, "--attention", "flash",
           "--steps", str(args.steps), "--warmup", "2", "--quiet", "--out", out,
           # The largest B is found by trying: past train's own check (prediction + 10% + 0.5 GB
           # against the free memory), down to what the device really holds.
           "--force"]
    r = run(cmd, env={**os.environ, **env} if env else None)
    if r.returncode != 0:
        err = (r.stderr or r.stdout).strip().splitlines()
        last = err[-1] if err else f"exit {r.returncode}"
        if re.search(r"out of (device )?memory", (r.stderr + r.stdout).lower()):  # napkin's OutOfMemory
            print(f"  napkin: B={batch} does not fit ({last})", flush=True)
            return None
        raise RuntimeError(f"napkin train B={batch} failed: {last}")
    with open(os.path.join(out, "report.json")) as f:
        rep = json.load(f)
    steps = rep["steps"][args.skip:]
    if not steps:
        raise RuntimeError(f"--steps {args.steps} leaves no step after --skip {args.skip}")
    dev = [s.get("device_seconds", s["seconds"]) for s in steps]
    step_s = statistics.median(dev)
    m = rep["measured"]
    peak_device = (m.get("device_memory") or {}).get("peak_used_bytes")
    return {
        "system": "napkin",
        "batch": batch,
        "step_ms_median": step_s * 1e3,
        "host_step_ms_median": statistics.median(s["seconds"] for s in steps) * 1e3,
        "tokens_per_s": batch * args.seq_len / step_s,
        # The peak report.json divides by: the GPU's dense datasheet rate for the GEMM dtype.
        "mfu": rep["predicted"]["model_flops_per_step"] / step_s / m["peak_flops_per_s"],
        "peak_allocator_bytes": m["peak_total_bytes"],
        "peak_device_bytes": peak_device,
        "last_loss": rep["steps"][-1]["loss"],
        "device": rep["run"].get("device"),
    }


def estimator_gpu(cuda_line):
    """napkin estimate's --gpu for the device napkin info names ("cuda: NVIDIA H200 (sm_90, ...)")."""
    name = cuda_line.upper()
    for key, gpu in (("H200", "h200"), ("H100 PCIE", "h100-pcie"), ("H100", "h100-sxm"), ("B200", "b200"),
                     ("A100-SXM4-40GB", "a100-40gb"), ("A100", "a100-80gb"), ("L4", "l4"), ("T4", "t4"),
                     ("3090", "rtx3090"), ("4090", "rtx4090")):
        if key in name:
            return gpu
    print(f"  no estimator GPU matches '{cuda_line}': sizing the largest B for h100-sxm (--gpu to choose)",
          flush=True)
    return "h100-sxm"


def largest_napkin(args, workdir):
    r = run([args.napkin, "estimate", "--model", args.model, "--seq-len", str(args.seq_len), "--precision", "bf16-amp",
             "--attention", "flash", "--gpu", args.gpu, "--solve", "max-micro-batch", "--json"])
    if r.returncode != 0:
        raise RuntimeError(f"napkin estimate --solve max-micro-batch: {r.stderr.strip()}")
    batch = int(json.loads(r.stdout)["solve"]["value"])
    predicted = batch
    for _ in range(8):
        res = napkin_train(args, batch, os.path.join(workdir, f"napkin-b{batch}"))
        if res is not None:
            res["predicted_max_batch"] = predicted
            return res
        batch = max(1, int(batch * 0.9))
    raise RuntimeError(f"napkin: nothing from B={predicted} down to B={batch} fits")


def fmt_row(r):
    mem = r.get("peak_allocated_bytes") or r.get("peak_allocator_bytes")
    dev = r.get("peak_device_bytes")
    mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "n/a"
    return (f"{r['system'] + ' ' + r.get('mode', ''):18s} B={r['batch']:4d}  step {r['step_ms_median']:9.2f} ms  "
            f"{r['tokens_per_s']:10.0f} tok/s  MFU {mfu:>6s}  peak {mem / 2**30 if mem else 0:6.2f} GiB"
            + (f" (device {dev / 2**30:.2f})" if dev else ""))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--napkin", default=os.path.join(HERE, "..", "build-cuda", "cli", "napkin"))
    p.add_argument("--model", default="gpt2", help="napkin preset (tiny: a dry run of the script itself)")
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--steps", type=int, default=20, help="steps per napkin run")
    p.add_argument("--skip", type=int, default=3, help="first steps left out of the median")
    p.add_argument("--batch", type=int, default=0, help="napkin (and PyTorch) at this B only")
    p.add_argument("--gpu", default="auto",
                   help="the estimator's GPU for the largest B (napkin estimate --list-gpus); auto: the "
                        "one napkin info names")
    p.add_argument("--no-pytorch", action="store_true")
    p.add_argument("--no-fp8", action="store_true", help="leave out napkin's fp8-amp runs")
    p.add_argument("--attention-candidates", metavar="LIST",
                   help="one more bf16-amp run at the same B with NAPKIN_ATTENTION_CANDIDATES=LIST")
    p.add_argument("--json", metavar="FILE", help="also write every result as JSON (atomically)")
    p.add_argument("--keep", metavar="DIR", help="keep napkin's run folders here")
    p.add_argument("--require", action="store_true", help="exit 1, not 0, when there is no GPU")
    args = p.parse_args()
    if args.steps <= args.skip:
        p.error(f"--steps {args.steps} must exceed --skip {args.skip}")
    if not os.access(args.napkin, os.X_OK):
        skip(args, f"{args.napkin} is not an executable (scripts/gpu_bundle.sh or gpu_check.sh build)")
    info = run([args.napkin, "info"]).stdout
    cuda_line = next((l for l in info.splitlines() if l.startswith("cuda: ")), "cuda: none (napkin info said nothing)")
    if cuda_line.startswith("cuda: none"):
        skip(args, "napkin sees no CUDA device: " + cuda_line)
    if args.gpu == "auto":
        args.gpu = estimator_gpu(cuda_line)
        print(f"estimator GPU for the largest B: {args.gpu} ({cuda_line})", flush=True)

    workdir = args.keep or tempfile.mkdtemp(prefix="gpt2_vs_pytorch.")
    os.makedirs(workdir, exist_ok=True)
    results = []
    torch_by_mode = {}
    if not args.no_pytorch:
        pj = os.path.join(workdir, "pytorch.json")
        cmd = [sys.executable, os.path.join(HERE, "pytorch_gpt2.py"), "--json", pj, "--model", args.model,
               "--seq", str(args.seq_len)]
        if args.batch:
            cmd += ["--batch", str(args.batch)]
        print("PyTorch (bench/pytorch_gpt2.py) ...", flush=True)
        r = subprocess.run(cmd, text=True)
        if r.returncode == 0 and os.path.exists(pj):
            with open(pj) as f:
                for x in json.load(f)["results"]:
                    x["system"] = "pytorch"
                    torch_by_mode[x["mode"]] = x
                    results.append(x)
        else:
            print("  PyTorch baseline not available; napkin alone", flush=True)

    same_b = args.batch or (torch_by_mode.get("eager") or {}).get("batch")
    if same_b:
        print(f"napkin at B={same_b} ...", flush=True)
        r = napkin_train(args, same_b, os.path.join(workdir, f"napkin-b{same_b}"))
        if r is not None:
            r["mode"] = "same B"
            results.append(r)
        if args.attention_candidates:
            print(f"napkin at B={same_b}, attention {args.attention_candidates} ...", flush=True)
            r = napkin_train(args, same_b, os.path.join(workdir, f"napkin-candidates-b{same_b}"),
                             env={"NAPKIN_ATTENTION_CANDIDATES": args.attention_candidates})
            if r is not None:
                r["mode"] = "candidates"
                r["attention_candidates"] = args.attention_candidates
                results.append(r)
        fp8_recipes = {"fp8 delayed": ("--precision", "fp8-amp"),
                       "fp8 current": ("--precision", "fp8-amp", "--fp8-amax-history", "0")}
        for mode, recipe in ({} if args.no_fp8 else fp8_recipes).items():
            print(f"napkin {mode} ({' '.join(recipe)}) at B={same_b} ...", flush=True)
            tag = mode.replace(" ", "-")
            try:
                r = napkin_train(args, same_b, os.path.join(workdir, f"napkin-{tag}-b{same_b}"), recipe)
            except RuntimeError as e:  # an sm_80 GPU refuses fp8-amp: say so, go on
                print(f"  {e}", flush=True)
                continue
            if r is not None:
                r["mode"] = mode
                r["recipe"] = " ".join(recipe)
                results.append(r)
    if not args.batch:
        print("napkin at the largest B that fits ...", flush=True)
        r = largest_napkin(args, workdir)
        r["mode"] = "largest B"
        results.append(r)

    print()
    print(f"{args.model}, T={args.seq_len}, bf16 autocast / bf16-amp, flash attention, fused AdamW; "
          f"device {next((x.get('device') for x in results if x.get('device')), '?')}")
    for x in results:
        print(fmt_row(x))
    nap = {x["mode"]: x for x in results if x["system"] == "napkin"}
    for mode, t in torch_by_mode.items():
        for nmode, n in nap.items():
            print(f"napkin ({nmode}) / PyTorch {mode} tokens/s: {n['tokens_per_s'] / t['tokens_per_s']:.2f}")
    if "same B" in nap:
        for nmode in ("candidates", "fp8 delayed", "fp8 current"):
            if nmode in nap:
                print(f"napkin {nmode} / napkin bf16-amp tokens/s at B={nap[nmode]['batch']}: "
                      f"{nap[nmode]['tokens_per_s'] / nap['same B']['tokens_per_s']:.2f}")

    if args.json:
        d = os.path.dirname(os.path.abspath(args.json))
        fd, tmp = tempfile.mkstemp(prefix=".gpt2_vs_pytorch.", dir=d)
        with os.fdopen(fd, "w") as f:
            json.dump({"format": "napkin-gpt2-vs-pytorch/1", "model": args.model, "seq_len": args.seq_len,
                       "results": results}, f, indent=1)
        os.replace(tmp, args.json)


if __name__ == "__main__":
    main()
