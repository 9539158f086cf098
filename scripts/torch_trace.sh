#!/usr/bin/env bash
# Records tests/viewer/data/torch_cpu_gpt_trace.json, the real torch.profiler trace the trace
# reader's tests load: Debian's python3-torch (1.13, CPU only, installed here with apt-get when
# missing) profiles bench/pytorch_gpt2.py's tiny GPT (scripts/torch_trace.py). Not in CI's path
# (CI installs nothing by hand); rerun it by hand and commit the file with its README row.
#
#   scripts/torch_trace.sh [OUT.json]
set -euo pipefail
cd "$(dirname "$0")/.."
py=/usr/bin/python3  # Debian's interpreter: python3-torch installs into its dist-packages
if ! "$py" -c 'import torch' 2>/dev/null; then
    apt-get install -y --no-install-recommends python3-torch
fi
"$py" scripts/torch_trace.py --device cpu --model tiny --batch 2 --seq 64 \
    --out "${1:-tests/viewer/data/torch_cpu_gpt_trace.json}"
