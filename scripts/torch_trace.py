#!/usr/bin/env python3
"""Records a real torch.profiler (Kineto) trace of a few training steps of bench/pytorch_gpt2.py's
GPT, for napkin's trace reader and viewer tests (tests/viewer/data/README.md says which file came
from which command).

    /usr/bin/python3 scripts/torch_trace.py --device cpu --out tests/viewer/data/torch_cpu_gpt_trace.json
    python3 scripts/torch_trace.py --device cuda --model gpt2 --batch 8 --seq 1024 --out DIR/torch_gpt2_trace.json

The profiler records with record_shapes, with_flops and profile_memory over a schedule of one
wait, one warmup and --active steps; the trace torch writes is then trimmed to its last
--keep-steps ProfilerStep#N windows (every event that starts inside them, every metadata event,
every flow whose two ends are both kept), so a fixture stays small and every flow kept is bound.
Nothing else is changed: names, fields and numbers are torch's own. The provenance (torch version,
device, command, host CPU) goes to stdout and into the file's top-level "napkin_provenance" key,
which no reader of Kineto's traces looks at.

scripts/torch_trace.sh installs Debian's python3-torch (1.13, CPU only) and runs the CPU recording;
scripts/gpu_check.sh trace (gpu_session.sh's first phase) runs the CUDA one on a GPU that has PyTorch.
"""

import argparse
import json
import os
import platform
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))


def attention_for_old_torch(torch):
    """torch < 2.0 has no scaled_dot_product_attention: the same causal attention, unfused."""
    F = torch.nn.functional
    if hasattr(F, "scaled_dot_product_attention"):
        return

    def sdpa(q, k, v, is_causal=False):  # q, k, v (B, H, T, HD)
        T = q.shape[-2]
        att = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)  # (B, H, T, T)
        if is_causal:
            mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
            att = att.masked_fill(~mask, float("-inf"))
        return torch.softmax(att, dim=-1) @ v

    F.scaled_dot_product_attention = sdpa


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def trim(trace, keep_steps):
    """The last keep_steps ProfilerStep windows of a Kineto trace, flows with both ends kept."""
    events = trace["traceEvents"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"))
    if not steps:
        return trace
    lo, hi = steps[-keep_steps][0], steps[-1][1]
    inside = [e for e in events if e.get("ph") == "M" or (
        "ts" in e and lo <= e["ts"] <= hi and e.get("ph") not in ("s", "f"))]
    flows = {}
    for e in events:
        if e.get("ph") in ("s", "f") and lo <= e.get("ts", -1) <= hi:
            flows.setdefault((e.get("cat"), e.get("id")), []).append(e)
    for pair in flows.values():
        if sorted(e["ph"] for e in pair) == ["f", "s"]:
            inside.extend(pair)
    out = dict(trace)
    out["traceEvents"] = inside
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--model", choices=["tiny", "gpt2"], default="tiny")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--active", type=int, default=2, help="profiled steps")
    p.add_argument("--keep-steps", type=int, default=1, help="profiled steps kept in the file")
    p.add_argument("--out", required=True)
    args = p.parse_args()

    import torch
    import pytorch_gpt2

    attention_for_old_torch(torch)
    torch.manual_seed(1234)
    shape = pytorch_gpt2.SHAPES[args.model]
    model = pytorch_gpt2.build_model(torch, shape).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
    V = shape[3]
    idx = torch.randint(0, V, (args.batch, args.seq), device=args.device)
    tgt = torch.randint(0, V, (args.batch, args.seq), device=args.device)

    activities = [torch.profiler.ProfilerActivity.CPU]
    if args.device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    raw = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
    with torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=args.active),
            on_trace_ready=lambda prof: prof.export_chrome_trace(raw),
            record_shapes=True, with_flops=True, profile_memory=True) as prof:
        for _ in range(2 + args.active):
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device_type=args.device, dtype=torch.bfloat16,
                                enabled=args.device == "cuda"):  # napkin's bf16-amp
                loss = model(idx, tgt)
            loss.backward()
            opt.step()
            prof.step()
    with open(raw) as f:
        trace = json.load(f)
    os.unlink(raw)
    if isinstance(trace, list):  # a torch without Kineto writes the bare array
        trace = {"traceEvents": trace}

    trace = trim(trace, args.keep_steps)
    provenance = {
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "torch": torch.__version__,
        "kineto": torch.autograd.kineto_available(),  # False: the legacy exporter wrote it
        "device": torch.cuda.get_device_name() if args.device == "cuda" else cpu_name(),
        "machine": platform.platform(),
        "model": args.model, "batch": args.batch, "seq": args.seq,
    }
    trace["napkin_provenance"] = provenance
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(trace, f, separators=(",", ":"))
        f.write("\n")
    os.replace(tmp, args.out)
    print(f"torch_trace: {len(trace['traceEvents'])} events -> {args.out}; {json.dumps(provenance)}")


if __name__ == "__main__":
    main()
