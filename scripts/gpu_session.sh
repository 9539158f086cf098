#!/usr/bin/env bash
# One device call's worth of gpu_check.sh steps, fitted to a lent GPU's limits (docs/CUDA.md,
# "Running on a GPU"): a session holds about 15 minutes of device time, one command runs at most
# 10 minutes, and at most 8 files come back from $OUT. So the steps run against one deadline,
# most important first, and everything they write is packed into one archive:
#
#   scripts/gpu_bundle.sh                     # here: build and pack the CUDA targets (.gpu/)
#   BUDGET=480 scripts/gpu_session.sh         # on the device, with .gpu carried: every phase
#   BUDGET=200 scripts/gpu_session.sh trace test   # or the phases named (attention trace bench
#                                                  # runs test gpt2 sanitize), in that order
#   BUDGET=480 scripts/gpu_session.sh attention    # the flash attention alone: the sm_90a wgmma
#                                                  # probe first, its speed against PyTorch's
#                                                  # SDPA, its candidate tiles and the wgmma
#                                                  # kernels (attention_bench --sweep), GPT-2
#                                                  # B 64 on the sweep's fastest against the
#                                                  # engine's own, tests, memcheck, racecheck
#   BUDGET=300 scripts/gpu_session.sh predict      # calibrate, predicted vs measured, anomaly cost
#   BUDGET=300 scripts/gpu_session.sh fusion       # GPT-2 B 8 and B 64, --fusion off vs on, the
#                                                  # fused GEMM tests, a profiled step of each;
#                                                  # the LM head + loss tests and head_ce_bench
#   BUDGET=240 scripts/gpu_session.sh graph        # --cuda-graph off vs on: GPT-2 B 8 tokens/s, the
#                                                  # driver's memory for the graphs, their tests
#   BUDGET=240 scripts/gpu_session.sh fp8          # GPT-2 B 64: bf16-amp, fp8-amp delayed and
#                                                  # current scaling; the fp8 kernels' tests
#   BUDGET=200 scripts/gpu_session.sh paged        # --paged-optimizer: device peak, page traffic
#   BUDGET=240 scripts/gpu_session.sh decode       # flash-decoding: its tests, decode_attention_bench
#                                                  # (split vs single pass), generate off vs on
#   BUDGET=200 scripts/gpu_session.sh anomaly      # --detect-anomaly's cost (batched checks)
#   BUDGET=450 scripts/gpu_session.sh cpuacc       # the CPU accuracy bench on the host's quiet CPU
#
# Order: the attention phase (when named), the profiled gpt2 trace and the GEMM/attention
# benchmarks first, on a quiet GPU (their timings are the ones quoted); then the gpu tests and
# the training runs side by side (correctness only: nothing from them is quoted as a speed);
# then, if at least GPT2_MIN seconds (default 240) are left, napkin against PyTorch
# (bench/gpt2_vs_pytorch.py, which compiles for minutes); last, when named, compute-sanitizer
# (each tool a minute at most; what the deadline leaves).
# $OUT receives summary.txt (one PASS/FAIL/SKIP line per step) and results.tgz (every log, test
# XML, run report and the trace folder; never a checkpoint: GPT-2's are hundreds of MB, and a
# file over 16 MiB does not come back).
set -uo pipefail
cd "$(dirname "$0")/.."

final="${OUT:-/tmp/gpu_session}"
mkdir -p "$final"
work=$(mktemp -d /tmp/gpu_session.XXXXXX)
budget="${BUDGET:-480}"
gpt2_min="${GPT2_MIN:-240}"
start=$SECONDS
left() { echo $((budget - (SECONDS - start))); }

summary="$final/summary.txt"
: >"$summary"
# phase NAME STEP_TIMEOUT STEP...: gpu_check.sh STEP with its own log, bounded by what is left.
phase() {
    local name=$1 per=$2
    shift 2
    local t=$(($(left) - 5))
    if [ "$t" -lt 20 ]; then
        echo "SKIP $name (only $(left) s of the budget left)" | tee -a "$summary"
        return 0
    fi
    OUT="$work" STEP_TIMEOUT="$per" timeout --kill-after=5 "$t" scripts/gpu_check.sh "$@" \
        >"$work/$name.summary" 2>&1
    local rc=$?
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "FAIL $name (stopped at the session's deadline)" >>"$work/$name.summary"
    sed "s/^/[$name] /" "$work/$name.summary" | tee -a "$summary"
}

pack() {
    nvidia-smi >"$work/nvidia-smi.txt" 2>&1 || true
    tar -czf "$final/results.tgz.tmp" --exclude='*.safetensors' -C "$work" . &&
        mv "$final/results.tgz.tmp" "$final/results.tgz"
    echo "packed $(du -h "$final/results.tgz" | cut -f1) into results.tgz; $((SECONDS - start)) s in all" |
        tee -a "$summary"
}

wanted=" ${*:-trace bench runs test gpt2} "
for p in $wanted; do
    case "$p" in attention|predict|fusion|graph|fp8|decode|anomaly|paged|trace|bench|runs|test|gpt2|sanitize|cpuacc) ;; *) echo "gpu_session.sh: unknown phase '$p'" >&2; exit 2 ;; esac
done
has() { [[ "$wanted" == *" $1 "* ]]; }

has attention && phase attention 180 attention
has predict && phase predict 200 predict
has fusion && phase fusion 120 fusion
has graph && phase graph 120 graph
has fp8 && phase fp8 120 fp8
has decode && phase decode 150 decode
has anomaly && phase anomaly 150 anomaly
has paged && phase paged 150 paged
has trace && phase trace 120 trace
has bench && phase bench 150 bench
# Tests and runs share the GPU: neither's timing is quoted, and together they fit the deadline.
has runs && phase runs 90 runs &
has test && phase test 200 test
wait
if has gpt2; then
    if [ "$(left)" -ge "$gpt2_min" ]; then
        phase gpt2 600 gpt2
    else
        echo "SKIP gpt2 (needs $gpt2_min s, $(left) left)" | tee -a "$summary"
    fi
fi
has sanitize && phase sanitize 60 sanitize
# Last and alone: CPU timings want the host quiet (no test binaries beside them).
has cpuacc && phase cpuacc 440 cpuacc
pack
