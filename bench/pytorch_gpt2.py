#!/usr/bin/env python3
"""PyTorch baseline for napkin's GPU benchmark: GPT-2 (124M) training steps in bf16 autocast.

The same model and recipe as `napkin train --model gpt2 --precision bf16-amp --attention flash`
(core/model_presets.cpp): 12 layers, d_model 768, 12 heads, learned positions, LayerNorm, GELU
(tanh), biases, the head tied to the token embedding, vocabulary padded to 50304, fp32 weights
with bf16 autocast, AdamW (fused) over fp32 parameters, causal attention through
scaled_dot_product_attention (flash on Hopper). Synthetic tokens: this measures throughput,
not learning.

Modes: `eager` and `compile` (torch.compile of the whole model). For each: median step time
over the timed steps (CUDA events around each whole step: forward, backward, optimizer),
tokens/s, MFU and peak memory (torch.cuda.max_memory_allocated).

MFU's numerator is napkin's model FLOPs (docs/ESTIMATOR.md section 6): per token
6 * N_matmul + 6 * L * T * C, with N_matmul the weights of every matrix product (the tied head
counted once as a product) and causal attention counting T(T+1)/2 pairs (approximated by T/2).

    python3 bench/pytorch_gpt2.py                      # both modes, largest batch that fits
    python3 bench/pytorch_gpt2.py --batch 16 --json out.json
    python3 bench/pytorch_gpt2.py --device cpu --model tiny --steps 3 --warmup 1   # dry run

Without PyTorch (or without a GPU for --device cuda) it prints why and exits 0, so that
scripts calling it carry on; --require makes that exit 1 instead.
"""

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time

SHAPES = {
    # name: (layers, d_model, heads, vocab, padded vocab, context); core/model_presets.cpp
    "gpt2": (12, 768, 12, 50257, 50304, 1024),
    "tiny": (2, 128, 4, 256, 256, 128),
}

# Dense bf16 tensor-core peaks in TFLOP/s (docs/HARDWARE.md), matched on the device name.
PEAKS_BF16 = [
    ("H200", 989.5),
    ("H100 PCIe", 756.0),
    ("H100", 989.5),
    ("A100", 312.0),
]


def skip(args, why):
    print(f"pytorch_gpt2: skipped: {why}")
    sys.exit(1 if args.require else 0)


def build_model(torch, shape):
    nn = torch.nn
    F = torch.nn.functional
    L, C, H, _, V, ctx = shape

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C)
            self.qkv = nn.Linear(C, 3 * C)
            self.proj = nn.Linear(C, C)
            self.ln_2 = nn.LayerNorm(C)
            self.fc = nn.Linear(C, 4 * C)
            self.fc_proj = nn.Linear(4 * C, C)

        def forward(self, x):  # x (B, T, C)
            B, T, _ = x.shape
            q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
            q = q.view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, HD)
            k = k.view(B, T, H, C // H).transpose(1, 2)
            v = v.view(B, T, H, C // H).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Embedding(ctx, C)
            self.h = nn.ModuleList([Block() for _ in range(L)])
            self.ln_f = nn.LayerNorm(C)
            self.apply(self._init)

        @staticmethod
        def _init(m):
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

        def forward(self, idx, targets):  # idx, targets (B, T)
            T = idx.shape[1]
            pos = torch.arange(T, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head, (B, T, V)
            return F.cross_entropy(logits.float().view(-1, V), targets.view(-1))

    return GPT()


def model_flops_per_token(torch, model, shape, T):
    L, C = shape[0], shape[1]
    n_matmul = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    n_matmul += model.wte.weight.numel()  # the tied head is a matrix product
    return 6 * n_matmul + 6 * L * T * C


def peak_tflops(torch, device):
    if device != "cuda":
        return None, "no GPU peak on the CPU"
    name = torch.cuda.get_device_name()
    for key, peak in PEAKS_BF16:
        if key in name:
            return peak, name
    return None, name


def run_mode(torch, args, shape, mode, batch):
    """Returns a dict of measurements, or raises torch.cuda.OutOfMemoryError."""
    device = args.device
    torch.manual_seed(1234)
    model = build_model(torch, shape).to(device)
    fused = device == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            eps=1e-8, fused=fused)
    fwd = torch.compile(model) if mode == "compile" else model
    T = args.seq
    V = shape[3]
    gen = torch.Generator(device=device).manual_seed(42)
    idx = torch.randint(0, V, (batch, T), device=device, generator=gen)
    tgt = torch.randint(0, V, (batch, T), device=device, generator=gen)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = fwd(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t_compile = time.perf_counter()
    for _ in range(args.warmup):
        loss = step()
    if device == "cuda":
        torch.cuda.synchronize()
    warmup_s = time.perf_counter() - t_compile

    times = []
    for _ in range(args.steps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss = step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            loss = step()
            times.append(time.perf_counter() - t0)
    final_loss = float(loss.item())
    if not math.isfinite(final_loss):
        raise RuntimeError(f"{mode}: loss is {final_loss}")

    step_s = statistics.median(times)
    tokens = batch * T
    flops_tok = model_flops_per_token(torch, model, shape, T)
    peak, device_name = peak_tflops(torch, device)
    out = {
        "mode": mode,
        "batch": batch,
        "seq_len": T,
        "steps_timed": args.steps,
        "warmup_steps": args.warmup,
        "warmup_s": warmup_s,
        "step_ms_median": step_s * 1e3,
        "step_ms_min": min(times) * 1e3,
        "step_ms_max": max(times) * 1e3,
        "tokens_per_s": tokens / step_s,
        "model_flops_per_token": flops_tok,
        "achieved_tflops": flops_tok * tokens / step_s / 1e12,
        "mfu": (flops_tok * tokens / step_s / 1e12 / peak) if peak else None,
        "peak_tflops_bf16": peak,
        "device": device_name,
        "last_loss": final_loss,
    }
    if device == "cuda":
        out["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        out["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    del model, opt, fwd
    return out


def largest_batch(torch, args, shape, mode):
    """Halves from --max-batch until a step fits; returns (batch, result)."""
    batch = args.max_batch
    while batch >= 1:
        try:
            return batch, run_mode(torch, args, shape, mode, batch)
        except torch.cuda.OutOfMemoryError:
            print(f"  {mode}: B={batch} does not fit, trying {batch // 2}", flush=True)
            torch.cuda.empty_cache()
            batch //= 2
    raise RuntimeError(f"{mode}: not even B=1 fits")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=sorted(SHAPES), default="gpt2")
    p.add_argument("--mode", choices=["eager", "compile", "both"], default="both")
    p.add_argument("--batch", type=int, default=0, help="micro-batch B (default: the largest that fits)")
    p.add_argument("--max-batch", type=int, default=64, help="where the search for the largest B starts")
    p.add_argument("--seq", type=int, default=None, help="sequence length T (default: the context, 1024)")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation happens here)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON (atomically)")
    p.add_argument("--require", action="store_true", help="exit 1, not 0, when PyTorch or the GPU is missing")
    args = p.parse_args()
    shape = SHAPES[args.model]
    if args.seq is None:
        args.seq = shape[5]
    for flag in ("steps", "warmup", "seq", "max_batch"):
        if getattr(args, flag) <= 0:
            p.error(f"--{flag.replace('_', '-')} must be positive")
    if args.seq > shape[5]:
        p.error(f"--seq {args.seq} is longer than {args.model}'s context {shape[5]}")

    try:
        import torch
    except ImportError as e:
        skip(args, f"PyTorch is not importable ({e})")
    if args.device == "cuda" and not torch.cuda.is_available():
        skip(args, "torch.cuda.is_available() is False")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    modes = ["eager", "compile"] if args.mode == "both" else [args.mode]
    results = []
    print(f"PyTorch {torch.__version__}, {args.model}, T={args.seq}, bf16 autocast, fused AdamW, "
          f"{args.warmup} warm-up + {args.steps} timed steps", flush=True)
    for mode in modes:
        if args.batch:
            r = run_mode(torch, args, shape, mode, args.batch)
        else:
            _, r = largest_batch(torch, args, shape, mode)
        r["torch_version"] = torch.__version__
        results.append(r)
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
        mem = f"{r['peak_allocated_bytes'] / 2**30:.2f} GiB" if "peak_allocated_bytes" in r else "n/a"
        print(f"{mode:8s} B={r['batch']:3d}  step {r['step_ms_median']:9.2f} ms  "
              f"{r['tokens_per_s']:12.0f} tok/s  {r['achieved_tflops']:7.1f} TFLOP/s  MFU {mfu:>6s}  "
              f"peak {mem}  loss {r['last_loss']:.3f}", flush=True)
    if len(results) == 2:
        print(f"compile / eager tokens/s: {results[1]['tokens_per_s'] / results[0]['tokens_per_s']:.2f}")

    if args.json:
        d = os.path.dirname(os.path.abspath(args.json))
        fd, tmp = tempfile.mkstemp(prefix=".pytorch_gpt2.", dir=d)
        with os.fdopen(fd, "w") as f:
            json.dump({"format": "napkin-pytorch-baseline/1", "model": args.model, "results": results}, f, indent=1)
        os.replace(tmp, args.json)


if __name__ == "__main__":
    main()
