#!/usr/bin/env python3
"""napkin's flash attention against PyTorch's scaled_dot_product_attention on one GPU.

Issue 20's target for attention: napkin's forward and backward each at most 1.2x the time of
SDPA (whatever fused backend PyTorch picks there), bf16, causal, at GPT-2's shape (B 8, T 1024,
12 heads, HD 64) and a Llama-like GQA shape (B 2, T 4096, 32 query heads, 8 KV heads, HD 128),
measured in one run on one GPU:

  napkin  bench/attention_bench --json: the tensor-core kernels (mma.sync at HD 64 and 128),
          median of CUDA-event-timed calls after warm-up; the backward is both of its passes.
  SDPA    the same layout: q, k and v strided views of one packed (B, T, (NH + 2 KVH) HD) bf16
          tensor (napkin's qkv; nanoGPT's split), is_causal=True, GQA through enable_gqa=True.
          Forward: the call; backward: torch.autograd.grad of its output with respect to q, k
          and v (the SDPA backward alone), both CUDA-event-timed, median of --reps after --warmup.
          The reference is SDPA's own choice ("default"); each fused backend forced on its own
          (flash, cudnn, efficient) is printed beside it where it takes the shape, and for GQA
          also the default on K and V expanded to NH heads (outside the timing).

Ratios are napkin's time over SDPA's (<= 1.2 meets the target). TFLOP/s use napkin's model
FLOPs for both (4 and 8 B NH HD T(T+1)/2, kernels/attention.h).

    python3 bench/attention_vs_sdpa.py [--bench build-cuda/bench/attention_bench] [--json FILE]
    python3 bench/attention_vs_sdpa.py --bench build/bench/attention_bench_emu --shape tiny  # dry run

Without PyTorch or a GPU it prints napkin's side and why SDPA's is missing, and exits 0
(--require: 1).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = {  # name: (B, T, NH, KVH, HD), as attention_bench names them
    "gpt2": (8, 1024, 12, 12, 64),
    "llama": (2, 4096, 32, 8, 128),
    "tiny": (1, 130, 4, 2, 64),
}
TARGET = 1.2


def model_flops(shape, direction):
    b, t, nh, _, hd = SHAPES[shape]
    return (4 if direction == "fwd" else 8) * b * nh * hd * t * (t + 1) // 2


def napkin_side(args, shapes):
    """attention_bench's mma rows: {(shape, dir): ms}, and its device line."""
    rows, device = {}, None
    with tempfile.TemporaryDirectory() as tmp:
        for shape in shapes:
            out = os.path.join(tmp, f"{shape}.json")
            cmd = [args.bench, "--reps", str(args.reps), "--warmup", str(args.warmup),
                   "--simt-reps", "1", "--shape", shape, "--json", out]
            r = subprocess.run(cmd, capture_output=True, text=True)
            print(r.stdout, end="", flush=True)
            if r.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
            if not os.path.exists(out):  # no GPU: the bench said so
                return rows, device
            with open(out) as f:
                doc = json.load(f)
            device = doc["device"]
            for row in doc["rows"]:
                if row["path"] == "mma":
                    rows[(shape, row["dir"])] = row["ms"]
    return rows, device


def median_ms(torch, fn, warmup, reps):
    for _ in range(warmup):
        fn()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def sdpa_time(torch, shape, backend, expand, args):
    """(forward ms, backward ms) of SDPA on `shape`, with `backend` forced (None: its choice)."""
    import contextlib
    from torch.nn.attention import SDPBackend, sdpa_kernel
    F = torch.nn.functional
    b, t, nh, kvh, hd = SHAPES[shape]
    gen = torch.Generator(device="cuda").manual_seed(1234)
    qkv = torch.randn(b, t, (nh + 2 * kvh) * hd, device="cuda", dtype=torch.bfloat16,
                      generator=gen, requires_grad=True)
    q = qkv[..., : nh * hd].view(b, t, nh, hd).transpose(1, 2)
    k = qkv[..., nh * hd: (nh + kvh) * hd].view(b, t, kvh, hd).transpose(1, 2)
    v = qkv[..., (nh + kvh) * hd:].view(b, t, kvh, hd).transpose(1, 2)
    gqa = kvh != nh
    if expand and gqa:  # K and V heads repeated to NH, as leaves: the repeat is not timed
        k = k.repeat_interleave(nh // kvh, dim=1).detach().requires_grad_(True)
        v = v.repeat_interleave(nh // kvh, dim=1).detach().requires_grad_(True)
        gqa = False
    def forward():
        with sdpa_kernel([getattr(SDPBackend, backend)]) if backend else contextlib.nullcontext():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)

    out = forward()
    dout = torch.randn(out.shape, device="cuda", dtype=out.dtype, generator=gen)
    fwd = median_ms(torch, forward, args.warmup, args.reps)
    bwd = median_ms(torch, lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True),
                    args.warmup, args.reps)
    return fwd, bwd


# The SDPA variants timed per shape: label, forced backend (None: SDPA's choice), K/V expanded.
VARIANTS = [("default", None, False), ("flash", "FLASH_ATTENTION", False),
            ("cudnn", "CUDNN_ATTENTION", False), ("efficient", "EFFICIENT_ATTENTION", False),
            ("default expanded", None, True)]


def sdpa_side(args, shapes):
    """{(shape, variant): (fwd ms, bwd ms) or an error string}, and a line on PyTorch."""
    try:
        import torch
    except ImportError as e:
        return {}, f"PyTorch not importable ({e})"
    if not torch.cuda.is_available():
        return {}, f"PyTorch {torch.__version__} sees no CUDA device"
    results = {}
    for shape in shapes:
        gqa = SHAPES[shape][2] != SHAPES[shape][3]
        for label, backend, expand in VARIANTS:
            if expand and not gqa:
                continue
            try:
                results[(shape, label)] = sdpa_time(torch, shape, backend, expand, args)
            except Exception as e:  # a backend that does not take the shape (or this GPU)
                results[(shape, label)] = str(e).strip().splitlines()[0][:100] if str(e) else repr(e)
            torch.cuda.empty_cache()
    name = torch.cuda.get_device_name()
    return results, f"PyTorch {torch.__version__} (CUDA {torch.version.cuda}) on {name}"


def tflops(flops, ms):
    return f"{flops / (ms * 1e-3) / 1e12:8.1f}" if ms else f"{'-':>8}"


def report(shapes, napkin, sdpa):
    """The table, and the rows as dicts for --json."""
    print(f"\n{'shape':6} {'dir':3} {'napkin ms':>10} {'TFLOP/s':>8} {'SDPA ms':>9} {'TFLOP/s':>8} "
          f"{'napkin/SDPA':>11} {'<= 1.2':>6}   forced backends (ms)")
    rows = []
    for shape in shapes:
        for i, direction in enumerate(("fwd", "bwd")):
            ms = napkin.get((shape, direction))
            flops = model_flops(shape, direction)
            ref = sdpa.get((shape, "default"))
            ref_ms = ref[i] if isinstance(ref, tuple) else None
            others = []
            for label, _, _ in VARIANTS[1:]:
                v = sdpa.get((shape, label))
                if v is not None:
                    others.append(f"{label} {v[i]:.3f}" if isinstance(v, tuple) else f"{label}: n/a")
            ratio = ms / ref_ms if ms and ref_ms else None
            verdict = ("yes" if ratio <= TARGET else "no") if ratio else "-"
            print(f"{shape:6} {direction:3} {ms or float('nan'):10.3f} {tflops(flops, ms)} "
                  f"{ref_ms or float('nan'):9.3f} {tflops(flops, ref_ms)} "
                  f"{(f'{ratio:.2f}x' if ratio else '-'):>11} {verdict:>6}   {'; '.join(others)}")
            rows.append({"shape": shape, "dir": direction, "napkin_ms": ms, "sdpa_ms": ref_ms,
                         "ratio": ratio, "flops": flops,
                         "sdpa_variants": {label: sdpa.get((shape, label)) for label, _, _ in VARIANTS
                                           if (shape, label) in sdpa}})
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench", default=os.path.join(HERE, "..", "build-cuda", "bench", "attention_bench"))
    p.add_argument("--shape", choices=sorted(SHAPES), action="append",
                   help="one shape (repeatable); default gpt2 and llama")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--json", metavar="FILE", help="also write every result as JSON (atomically)")
    p.add_argument("--require", action="store_true", help="exit 1, not 0, without both sides")
    args = p.parse_args()
    shapes = args.shape or ["gpt2", "llama"]

    napkin, device = napkin_side(args, shapes)
    sdpa, torch_line = sdpa_side(args, shapes)
    print(f"napkin: attention_bench on {device or 'no GPU'}; SDPA: {torch_line}")
    rows = report(shapes, napkin, sdpa)
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"napkin_device": device, "pytorch": torch_line, "target": TARGET,
                       "rows": rows}, f, indent=2)
        os.replace(tmp, args.json)
    missing = [why for why, gone in (("no napkin timing (no GPU?)", not napkin),
                                     ("no SDPA timing", not any(isinstance(v, tuple) for v in sdpa.values())))
               if gone]
    if missing:
        print("attention_vs_sdpa: incomplete: " + "; ".join(missing))
    sys.exit(1 if missing and args.require else 0)


if __name__ == "__main__":
    main()
