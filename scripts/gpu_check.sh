#!/usr/bin/env bash
# Everything napkin checks on a GPU, in few calls (a lent H100/H200 session has about 30 minutes
# of device time and 10 minutes per command: docs/CUDA.md, "Running on a GPU"):
#
#   scripts/gpu_check.sh build        # configure + build the CUDA targets into build-cuda (~5 min),
#                                     # or unpack .gpu/bundle.tar.gz (scripts/gpu_bundle.sh) if carried
#   scripts/gpu_check.sh test         # every gpu-labelled test binary, with ran/skipped counts
#   scripts/gpu_check.sh sanitize     # compute-sanitizer memcheck, racecheck, synccheck, initcheck
#   scripts/gpu_check.sh runs         # napkin train on CUDA vs CPU (tiny; gpt2 bf16; ZeRO 1-3 over NCCL)
#   scripts/gpu_check.sh trace        # the profiled gpt2 run for traces/<gpu>-gpt2 (+ report.txt),
#                                     # and PyTorch's under torch.profiler (scripts/torch_trace.py)
#   scripts/gpu_check.sh bench        # gemm_bench, attention vs PyTorch's SDPA, membound_bench, the profiler's cost on GPT-2
#   scripts/gpu_check.sh gpt2         # bench/gpt2_vs_pytorch.py: napkin vs PyTorch eager/compile
#   scripts/gpu_check.sh attention    # the flash attention: vs SDPA, the tile sweep, tests,
#                                     # memcheck and racecheck
#   scripts/gpu_check.sh fusion       # GPT-2 B 8 / B 64 with --fusion off vs on (cuBLASLt epilogues);
#                                     # the LM head + loss: its tests, head_ce_bench
#   scripts/gpu_check.sh graph        # GPT-2 B 8 with --cuda-graph off vs on: tokens/s, the
#                                     # driver's memory for the graphs, the graph tests
#   scripts/gpu_check.sh fp8          # GPT-2 B 64: bf16-amp, fp8-amp delayed, fp8-amp current
#                                     # scaling (--fp8-amax-history 0); the fp8 kernels' tests;
#                                     # fp8_cast_bench (the backward's cast-transposes vs casts
#                                     # + transposes), racecheck on the cast-transpose
#   scripts/gpu_check.sh decode       # flash-decoding: its tests, decode_attention_bench, and
#                                     # napkin generate on GPT-2 with --flash-decoding off vs on
#   scripts/gpu_check.sh predict      # napkin calibrate's profile; predicted vs measured step time;
#                                     # --detect-anomaly's cost on GPT-2
#   scripts/gpu_check.sh anomaly      # --detect-anomaly's cost on GPT-2 alone (predict runs it too)
#   scripts/gpu_check.sh paged        # --paged-optimizer on GPT-2: device peak (cudaMemGetInfo)
#                                     # and page traffic and its time, against the prediction
#   scripts/gpu_check.sh cpuacc       # bench/time_accuracy.py on the host's CPU (quiet, unlike the
#                                     # dev VM): calibrate, then 18 CPU runs predicted vs measured
#   scripts/gpu_check.sh all          # all of the above but cpuacc, in that order
#
# Logs and results go to $OUT (the device tool brings that folder back) or /tmp/gpu_check, one
# file per step, and one line per step is printed: "PASS name", "FAIL name (rc N, log)" or
# "SKIP name (why)". A failing step does not stop the others; the exit status is 1 if any failed.
# CUDA_ARCH (default 90: H100/H200) and JOBS (default nproc) tune the build; STEP_TIMEOUT (default
# 240 s) bounds each step.
#
# The GPU machines lack Debian's -dev packages napkin builds against and cannot install any, so
# the usual way is to build here with scripts/gpu_bundle.sh and carry `.gpu` with each call:
# every step then unpacks the bundle (once), points the bundle's build root at this copy of
# the tree, and finds the device's CUDA and NCCL libraries before it runs anything.
set -uo pipefail
cd "$(dirname "$0")/.."

out="${OUT:-/tmp/gpu_check}"
mkdir -p "$out"
arch="${CUDA_ARCH:-90}"
jobs="${JOBS:-$(nproc)}"
b=build-cuda
failed=0

# Each step may take STEP_TIMEOUT seconds (default 240; 0 = no limit), so that one hung or slow
# step (a collective that never returns, a sanitizer on a large test) cannot use up a whole
# device call (600 s) and the results of the steps after it.
step_timeout="${STEP_TIMEOUT:-240}"

step() {  # step NAME COMMAND...: runs it with its output in $out/NAME.log
    local name=$1
    shift
    local t0=$SECONDS
    if timeout --kill-after=10 "$step_timeout" "$@" >"$out/$name.log" 2>&1; then
        echo "PASS $name ($((SECONDS - t0)) s)"
    else
        local rc=$?
        local why="rc $rc"
        [ "$rc" = 124 ] || [ "$rc" = 137 ] && why="timed out after $step_timeout s"
        echo "FAIL $name ($why, $((SECONDS - t0)) s; $out/$name.log)"
        tail -n 15 "$out/$name.log" | sed 's/^/    /'
        failed=1
    fi
}

# The bundle's binaries hold absolute paths into the checkout they were built in (RPATH,
# NAPKIN_BINARY, test data): make that path lead here when it is free, as it is on a fresh device.
use_bundle() {
    [ -f .gpu/bundle.tar.gz ] || return 0
    if [ ! -f "$b/MANIFEST" ] || [ .gpu/bundle.tar.gz -nt "$b/MANIFEST" ]; then
        tar -xzf .gpu/bundle.tar.gz || { echo "FAIL unpack (.gpu/bundle.tar.gz)"; failed=1; return 0; }
        touch "$b/MANIFEST"
    fi
    local root here
    root=$(sed -n 's/^root //p' "$b/MANIFEST")
    here=$(pwd -P)
    if [ -n "$root" ] && [ "$root" != "$here" ]; then
        if [ ! -e "$root" ]; then
            mkdir -p "$(dirname "$root")" && ln -s "$here" "$root"
        elif [ "$(cd "$root" && pwd -P)" != "$here" ]; then
            echo "FAIL bundle (built in $root, which exists here and is not this tree: rebuild with $b)"
            failed=1
        fi
    fi
    echo "bundle: $(sed -n 's/^commit //p' "$b/MANIFEST"), nvcc $(sed -n 's/^nvcc //p' "$b/MANIFEST")," \
         "arch $(sed -n 's/^arch //p' "$b/MANIFEST")"
}

# CUDA's libraries as the device has them: the toolkit's, CUPTI's, and NCCL's (the toolkit's
# when it ships it, else the copy PyTorch's wheels bring).
find_libs() {
    local d dirs=""
    [ -d "$b/bundle-lib" ] && dirs="$(pwd -P)/$b/bundle-lib"
    for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/extras/CUPTI/lib64; do
        [ -d "$d" ] && dirs="$dirs:$d"
    done
    if ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2' && ! ls /usr/local/cuda/lib*/libnccl.so.2 >/dev/null 2>&1
    then
        d=$(find / -xdev -name libnccl.so.2 -not -path '/proc/*' 2>/dev/null | head -n 1)
        [ -n "$d" ] && dirs="$dirs:$(dirname "$d")"
    fi
    export LD_LIBRARY_PATH="${dirs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    [ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"  # compute-sanitizer
    if [ -f "$b/core/libnapkin_cuda.so" ] && ldd "$b/core/libnapkin_cuda.so" | grep -q 'not found'; then
        echo "FAIL libraries (the CUDA backend cannot load):"
        ldd "$b/core/libnapkin_cuda.so" | grep 'not found' | sed 's/^/    /'
        failed=1
    fi
}

need_build() {
    if [ ! -x "$b/cli/napkin" ]; then
        echo "SKIP $1 (no $b/cli/napkin: run scripts/gpu_check.sh build first)"
        return 1
    fi
}

# compute-sanitizer comes with the toolkit; a device without it on PATH skips its steps.
need_sanitizer() {
    command -v compute-sanitizer >/dev/null && return 0
    echo "SKIP compute-sanitizer (not on PATH)"
    return 1
}

do_build() {
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv \
        >"$out/gpu.txt" 2>&1
    if [ -f .gpu/bundle.tar.gz ]; then
        echo "SKIP build (prebuilt: .gpu/bundle.tar.gz)"
        return 0
    fi
    local step_timeout=0  # compiling on the device: as long as it takes
    step configure cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release -DNAPKIN_CUDA=ON -DNAPKIN_WERROR=ON \
        -DNAPKIN_VIEWER=OFF -DNAPKIN_ATTENTION_CANDIDATES=ON -DCMAKE_CUDA_ARCHITECTURES="$arch"
    step build cmake --build "$b" -j"$jobs" --target napkin napkin_cuda kernels_cuda_test engine_cuda_test \
        train_cuda_cli_test profile_cuda_test nccl_test caching_allocator_test \
        device_test gemm_bench attention_bench membound_bench decode_attention_bench head_ce_bench \
        fp8_cast_bench
}

# A test binary's counts from its XML, so that a PASS of skipped tests cannot pass for a run.
counts() {
    [ -f "$1" ] || return 0
    local n s f
    n=$(grep -c '<testcase ' "$1")
    s=$(grep -c '<skipped' "$1")
    f=$(grep -c '<failure' "$1")
    echo "    $n tests: $((n - s)) ran, $s skipped, $f failures"
}

do_test() {
    need_build test || return 0
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv \
        >"$out/gpu.txt" 2>&1
    "$b/cli/napkin" info 2>&1 | tee "$out/info.txt" | grep -E '^(cuda|libraries)' | sed 's/^/    /'
    local t
    for t in device_test caching_allocator_test kernels_cuda_test engine_cuda_test train_cuda_cli_test \
             nccl_test profile_cuda_test; do
        if [ -x "$b/tests/$t" ]; then
            step "$t" "$b/tests/$t" --gtest_output="xml:$out/$t.xml"
            counts "$out/$t.xml"
            # Kernel tests whose cuBLASLt call failed: once more with cuBLASLt's own log (level 5:
            # every API call and its arguments; its errors say which requirement a call missed).
            if [ "$t" = kernels_cuda_test ] && grep -q 'cuBLAS error' "$out/$t.log" 2>/dev/null; then
                local failing
                failing=$(grep -oE '\[  FAILED  \] [A-Za-z0-9_/.]+' "$out/$t.log" | awk '{print $4}' | sort -u |
                          paste -sd: -)
                CUBLASLT_LOG_LEVEL=5 CUBLASLT_LOG_FILE="$out/$t.cublaslt.%i.log" \
                    timeout 60 "$b/tests/$t" --gtest_filter="$failing" >/dev/null 2>&1
                echo "    cuBLASLt log of $failing: $out/$t.cublaslt.*.log"
            fi
        else
            echo "SKIP $t (not built)"
        fi
    done
}

# compute-sanitizer over the kernels and one engine recipe: its own call, as each run is slow.
# racecheck and synccheck see what the emulator cannot: shared-memory races between warps and
# barriers or warp-level calls that not every thread reaches.
do_sanitize() {
    need_build sanitize || return 0
    need_sanitizer || return 0
    local k="$b/tests/kernels_cuda_test" cs="compute-sanitizer --error-exitcode 9"
    step memcheck_kernels $cs --tool memcheck "$k" \
        --gtest_filter='Norm*:Residual*:Accumulate*:Optimizer*:AttentionFlash16*'
    step memcheck_engine $cs --tool memcheck "$b/tests/engine_cuda_test" \
        --gtest_filter='Recipes/*fp32_flash_gpt2:Recipes/*bf16amp_flash_gpt2'
    step racecheck_kernels $cs --tool racecheck "$k" \
        --gtest_filter='Attention*:Embedding*:Norm*:CrossEntropy*:Optimizer*'
    step synccheck_kernels $cs --tool synccheck "$k" \
        --gtest_filter='Attention*:Embedding*:Norm*:CrossEntropy*:Optimizer*'
    step initcheck_loss $cs --tool initcheck "$k" --gtest_filter='CrossEntropy*'
}

do_runs() {
    need_build runs || return 0
    local n="$b/cli/napkin"
    step train_cuda_tiny "$n" train --device cuda --steps 20 --out "$out/runs/cuda-tiny"
    step train_cpu_tiny "$n" train --device cpu --steps 20 --out "$out/runs/cpu-tiny"
    step train_cuda_gpt2 "$n" train --device cuda --model gpt2 --micro-batch 8 --seq-len 1024 \
        --precision bf16-amp --steps 20 --out "$out/runs/cuda-gpt2"
    step train_cuda_pure_bf16 "$n" train --device cuda --precision bf16 --steps 20 --out "$out/runs/cuda-bf16"
    step train_cpu_pure_bf16 "$n" train --device cpu --precision bf16 --steps 20 --out "$out/runs/cpu-bf16"
    local s
    for s in 1 2 3; do
        step "train_cuda_zero$s" "$n" train --device cuda --zero "$s" --steps 20 --out "$out/runs/cuda-z$s"
    done
    # ZeRO-Offload: the master and Adam's moments on the host, against the same run without it.
    step train_cuda_zero2_bf16 "$n" train --device cuda --zero 2 --precision bf16-amp --steps 20 \
        --out "$out/runs/cuda-z2-bf16"
    step train_cuda_zero2_offload "$n" train --device cuda --zero 2 --precision bf16-amp --offload optimizer \
        --steps 20 --out "$out/runs/cuda-z2-offload"
    # LoRA and QLoRA on GPT-2 124M (its frozen linears in NF4 under QLoRA), against the full run.
    step train_cuda_gpt2_lora "$n" train --device cuda --model gpt2 --micro-batch 8 --seq-len 1024 \
        --precision bf16-amp --finetune lora --lora-rank 16 --steps 20 --out "$out/runs/cuda-gpt2-lora"
    step train_cuda_gpt2_qlora "$n" train --device cuda --model gpt2 --micro-batch 8 --seq-len 1024 \
        --precision bf16-amp --finetune qlora --lora-rank 16 --steps 20 --out "$out/runs/cuda-gpt2-qlora"
    # adamw-8bit's block-aligned shards on the device (the update kernel's absmax pointers).
    step train_cuda_zero2_8bit "$n" train --device cuda --zero 2 --precision bf16-amp --optimizer adamw-8bit \
        --steps 20 --out "$out/runs/cuda-z2-8bit"
    # FSDP + QLoRA's path at world size 1 over NCCL: the NF4 base in bf16 storage, gathered per block.
    step train_cuda_gpt2_qlora_zero3 "$n" train --device cuda --model gpt2 --micro-batch 8 --seq-len 1024 \
        --precision bf16-amp --finetune qlora --lora-rank 16 --zero 3 --steps 20 --out "$out/runs/cuda-gpt2-qlora-z3"
    # The losses side by side (first and last step), for the note.
    if command -v jq >/dev/null; then
        for r in "$out"/runs/*/report.json; do
            printf '%-40s %s\n' "$(basename "$(dirname "$r")")" \
                "$(jq -c '[.steps[0].loss, .steps[-1].loss, .measured.tokens_per_s, .measured.mfu]' "$r")"
        done >"$out/runs/losses.txt"
    fi
}

do_trace() {
    need_build trace || return 0
    local gpu dir
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -oiE 'H100|H200|A100|B200' |
          tr '[:upper:]' '[:lower:]')
    dir="traces/${gpu:-gpu}-gpt2"
    rm -rf "$dir"
    step trace_gpt2 "$b/cli/napkin" train --device cuda --model gpt2 --micro-batch 8 --seq-len 1024 \
        --precision bf16-amp --steps 3 --profile steps:2-3 --out "$dir"
    # Host waits per step on the real device (docs/ENGINE.md, "One host synchronization per
    # step"): the CUPTI synchronization records of one step, which must be 1.
    [ -x "$b/tests/engine_cuda_test" ] &&
        step step_syncs "$b/tests/engine_cuda_test" --gtest_filter='*StepSyncCuda*'
    if [ -f "$dir/report.json" ]; then
        "$b/cli/napkin" report --warmup 1 "$dir" >"$dir/report.txt" 2>&1
        rm -f "$dir/checkpoint.safetensors"  # hundreds of MB; never committed
        mkdir -p "$out/traces"
        cp -r "$dir" "$out/traces/"
        command -v jq >/dev/null && jq .otherData.gpu_activity "$dir/trace.json" >"$out/gpu_activity.json"
        # The device's idle gaps per step (against the committed traces/<gpu>-gpt2 of before:
        # the host waits inside a step showed as gaps behind the loss and the norm).
        python3 scripts/trace_gaps.py "$dir" >"$out/trace_gaps.txt" 2>&1 && head -n 12 "$out/trace_gaps.txt"
    fi
    # The same model and batch under torch.profiler (Kineto: stream lanes, ac2g and fwdbwd
    # flows, gpu_user_annotation), for the trace reader's fixtures (tests/viewer/data/README.md):
    # one profiled step, gzipped. Needs only PyTorch; a minute at most.
    step_timeout=120 step torch_trace python3 scripts/torch_trace.py --device cuda --model gpt2 \
        --batch 8 --seq 1024 --out "$out/torch_gpt2_trace.json" &&
        gzip -f "$out/torch_gpt2_trace.json"
    tail -n 2 "$out/torch_trace.log"
}

# attention_bench's table (napkin's tensor-core and SIMT kernels) and napkin against PyTorch's
# scaled_dot_product_attention at GPT-2's and a Llama-like GQA shape, as ratios (issue 20's
# target: at most 1.2x SDPA's time, forward and backward).
attention_vs_sdpa() {
    [ -x "$b/bench/attention_bench" ] || { echo "SKIP attention_vs_sdpa (no attention_bench)"; return 0; }
    step attention_vs_sdpa python3 bench/attention_vs_sdpa.py --require \
        --bench "$b/bench/attention_bench" --json "$out/attention_vs_sdpa.json"
    tail -n 8 "$out/attention_vs_sdpa.log"
}

do_bench() {
    need_build bench || return 0
    step gemm_bench "$b/bench/gemm_bench"
    tail -n 25 "$out/gemm_bench.log"
    attention_vs_sdpa
    # The memory-bound kernels alone: GB/s on the vector path against the scalar one.
    if [ -x "$b/bench/membound_bench" ]; then
        step membound_bench "$b/bench/membound_bench"
        tail -n 20 "$out/membound_bench.log"
    fi
    # The profiler's cost on GPT-2's steps: a --profile window in the middle of one run.
    step profile_overhead python3 bench/profile_window_overhead.py --napkin "$b/cli/napkin" --device cuda \
        --json "$out/profile_overhead.json"
    tail -n 4 "$out/profile_overhead.log"
}

# The cuBLASLt epilogue fusions (issue 20; docs/ENGINE.md, "Epilogue fusions"): GPT-2 bf16-amp
# at B 8 and B 64 with --fusion off and on, alternated (off, on, off, on) so a drift hits both,
# then each run's median step on the device (steps after the first 3) and the on/off ratio; the
# fused kernels' tests on this GPU; one profiled B 8 step of each (report.txt: the mlp ops'
# kernels, matmul_gelu_forward/backward against matmul_forward + gelu_forward, ...). The LM head
# and the loss (docs/CUDA.md, "The LM head and the loss"): its tests on this GPU, then
# head_ce_bench at GPT-2 B 8 and B 64 (the op, its old three-pass row kernel, its GEMMs alone,
# chunks 1024-8192, against the account's roofline).
do_fusion() {
    need_build fusion || return 0
    local n="$b/cli/napkin" bsz i f dir
    step fusion_tests "$b/tests/kernels_cuda_test" --gtest_filter='MatmulGelu*:MatmulCuda*' \
        --gtest_output="xml:$out/fusion_tests.xml"
    step head_ce_tests "$b/tests/kernels_cuda_test" --gtest_filter='CrossEntropyCuda*' \
        --gtest_output="xml:$out/head_ce_tests.xml"
    if [ -x "$b/bench/head_ce_bench" ]; then
        step head_ce_bench "$b/bench/head_ce_bench" --json "$out/head_ce_bench.json"
        tail -n 30 "$out/head_ce_bench.log"
    else
        echo "SKIP head_ce_bench (not built)"
    fi
    for bsz in 8 64; do
        for i in 1 2; do
            for f in off on; do
                dir="$out/fusion/b$bsz-$f-$i"
                step "fusion_b${bsz}_${f}_$i" "$n" train --device cuda --model gpt2 --micro-batch "$bsz" \
                    --seq-len 1024 --precision bf16-amp --steps 10 --quiet --force --fusion "$f" --out "$dir"
                rm -f "$dir/checkpoint.safetensors"
            done
        done
    done
    python3 - "$out/fusion" <<'PY' | tee "$out/fusion_summary.txt"
import sys
sys.path.insert(0, "scripts")
from run_steps import median_step
root = sys.argv[1]
def step_s(run):  # seconds a step on the device where it was timed there
    return median_step(root, run, "device_seconds", "seconds")
for bsz in (8, 64):
    t = {f: [step_s(f"b{bsz}-{f}-{i}") for i in (1, 2)] for f in ("off", "on")}
    if any(v is None for v in t["off"] + t["on"]):
        print(f"B {bsz}: a run is missing"); continue
    off, on = min(t["off"]), min(t["on"])
    print(f"B {bsz}: fusion off {off * 1e3:.2f} ms, on {on * 1e3:.2f} ms a step; "
          f"tokens/s on/off {off / on:.3f}")
PY
    for f in off on; do
        dir="$out/fusion/trace-$f"
        step "fusion_trace_$f" "$n" train --device cuda --model gpt2 --micro-batch 8 --seq-len 1024 \
            --precision bf16-amp --steps 3 --profile steps:2-3 --fusion "$f" --out "$dir" &&
            "$n" report --warmup 1 "$dir" >"$dir/report.txt" 2>&1
        rm -f "$dir/checkpoint.safetensors"
    done
}

# CUDA graphs (issue 20; docs/CUDA.md "CUDA graphs"): the graph tests on this GPU, then GPT-2
# bf16-amp at B 8 with --cuda-graph off and on, alternated (off, on, off, on) so a drift hits
# both; each run's median host step (steps after the first 3: the capture is step 2) as tokens/s,
# the on/off ratio, and the device memory the driver took for the graphs (cudaMemGetInfo before
# each capture and after its instantiation, printed by napkin train).
do_graph() {
    need_build graph || return 0
    local n="$b/cli/napkin" i g dir
    step graph_tests "$b/tests/engine_cuda_test" --gtest_filter='*CudaGraph*' \
        --gtest_output="xml:$out/graph_tests.xml"
    for i in 1 2; do
        for g in off on; do
            dir="$out/graph/b8-$g-$i"
            step "graph_b8_${g}_$i" "$n" train --device cuda --model gpt2 --micro-batch 8 \
                --seq-len 1024 --precision bf16-amp --steps 12 --force --cuda-graph "$g" \
                --out "$dir" >"$out/graph_b8_${g}_$i.stdout" 2>&1
            grep -h "cuda graphs:" "$out/graph_b8_${g}_$i.stdout"
            rm -f "$dir/checkpoint.safetensors"
        done
    done
    python3 - "$out/graph" <<'PY' | tee "$out/graph_summary.txt"
import sys
sys.path.insert(0, "scripts")
from run_steps import median_step
root = sys.argv[1]
def tokens_per_s(run):
    return median_step(root, run, "tokens_per_s")
t = {g: [tokens_per_s(f"b8-{g}-{i}") for i in (1, 2)] for g in ("off", "on")}
if any(v is None for v in t["off"] + t["on"]):
    print("B 8: a run is missing")
else:
    off, on = max(t["off"]), max(t["on"])
    print(f"GPT-2 B 8 bf16-amp: --cuda-graph off {off:,.0f} tokens/s, on {on:,.0f}; on/off {on / off:.3f}")
PY
}

# fp8-amp that pays (issue 20, deliverable 4; docs/ENGINE.md "Precision on the CPU"): GPT-2 at
# B 64, T 1024 under bf16-amp, fp8-amp with delayed scaling (the default, one pass per cast) and
# fp8-amp with current scaling (--fp8-amax-history 0), alternated twice so a drift hits all three;
# each run's median step on the device (steps after the first 3), tokens/s and the ratios to
# bf16-amp; the fp8 kernels' tests on this GPU first, then the backward's casts per block linear
# at B 64 (bench/fp8_cast_bench: the cast-transposes against the casts + byte transposes they
# replaced, against docs/CUDA.md's account) and racecheck over the cast-transpose's shared tile.
do_fp8() {
    need_build fp8 || return 0
    local n="$b/cli/napkin" i r dir
    step fp8_tests "$b/tests/kernels_cuda_test" \
        --gtest_filter='QuantizeCuda*:QuantizeDelayedCuda*:AmaxHistoryRollCuda*:MatmulFp8*:QuantizeTranspose*:TransposeFp8*' \
        --gtest_output="xml:$out/fp8_tests.xml"
    counts "$out/fp8_tests.xml"
    if [ -x "$b/bench/fp8_cast_bench" ]; then
        step fp8_cast_bench "$b/bench/fp8_cast_bench" --shape gpt2-b64
        tail -n 16 "$out/fp8_cast_bench.log"
    fi
    if need_sanitizer; then
        step racecheck_fp8_cast compute-sanitizer --error-exitcode 9 --tool racecheck \
            "$b/tests/kernels_cuda_test" --gtest_filter='QuantizeTransposeCuda/1.*:TransposeFp8Cuda.*'
    fi
    local -A recipe=([bf16]="--precision bf16-amp" [delayed]="--precision fp8-amp"
                     [current]="--precision fp8-amp --fp8-amax-history 0")
    for i in 1 2; do
        for r in bf16 delayed current; do
            dir="$out/fp8/$r-$i"
            # shellcheck disable=SC2086 # the recipe is several flags
            step "fp8_b64_${r}_$i" "$n" train --device cuda --model gpt2 --micro-batch 64 \
                --seq-len 1024 ${recipe[$r]} --steps 10 --quiet --force --out "$dir"
            rm -f "$dir/checkpoint.safetensors"
        done
    done
    python3 - "$out/fp8" <<'PY' | tee "$out/fp8_summary.txt"
import sys
sys.path.insert(0, "scripts")
from run_steps import fastest_step
best = fastest_step(sys.argv[1], ("bf16", "delayed", "current"))
tokens = 64 * 1024
for r, s in best.items():
    ratio = f", {best['bf16'] / s:.3f}x bf16-amp" if "bf16" in best and r != "bf16" else ""
    print(f"GPT-2 B 64 T 1024 {r:8s}: {s * 1e3:8.2f} ms a step, {tokens / s:10.0f} tokens/s{ratio}")
PY
}

# The engine on the sweep's fastest kernels (docs/CUDA.md "The engine on candidates"): at GPT-2's
# shape, the fastest forward and the best passes (attention_sweep.json's attention_candidates), in
# NAPKIN_ATTENTION_CANDIDATES (the bundle's backend carries the candidates); GPT-2 bf16-amp at
# B 64, T 1024 with the engine's own kernels and with those, alternated (engine, candidates,
# engine, candidates), each run's median step on the device as tokens/s and the ratio.
attention_engine_runs() {
    local n="$b/cli/napkin" list i k dir envs
    list=$(python3 - "$out/attention_sweep.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
picks = [p.get("attention_candidates") for p in doc.get("best_backward_passes") or []
         if p["shape"] == "gpt2"]
if not picks or not picks[0]:
    sys.exit(1)
print(picks[0])
PY
    ) || { echo "SKIP attention_engine_runs (no GPT-2 rows in the sweep's JSON)"; return 0; }
    echo "the sweep's fastest at GPT-2's shape: NAPKIN_ATTENTION_CANDIDATES=$list"
    echo "$list" >"$out/attention_candidates.txt"
    for i in 1 2; do
        for k in engine candidates; do
            dir="$out/attention_engine/$k-$i"
            envs=()  # the candidates' runs with the list in their environment
            [ "$k" = candidates ] && envs=(env NAPKIN_ATTENTION_CANDIDATES="$list")
            step "attention_engine_${k}_$i" "${envs[@]}" "$n" train --device cuda --model gpt2 \
                --micro-batch 64 --seq-len 1024 --precision bf16-amp --steps 10 --force --out "$dir"
            rm -f "$dir/checkpoint.safetensors"
        done
    done
    python3 - "$out/attention_engine" <<'PY' | tee "$out/attention_engine_summary.txt"
import sys
sys.path.insert(0, "scripts")
from run_steps import fastest_step
best = fastest_step(sys.argv[1], ("engine", "candidates"))
tokens = 64 * 1024
for k, s in best.items():
    ratio = f", {best['engine'] / s:.3f}x the engine's" if "engine" in best and k != "engine" else ""
    print(f"GPT-2 B 64 T 1024 bf16-amp, attention {k:10s}: {s * 1e3:8.2f} ms a step, "
          f"{tokens / s:10.0f} tokens/s{ratio}")
PY
}

# The flash attention in one call (issue 20): its kernel tests, its speed against SDPA on a quiet
# GPU, and compute-sanitizer's memcheck, racecheck and synccheck on the mma.sync kernels
# (kernels/cuda/attention_fa2_*.cu) over the test of their shapes, bf16 (fp16 runs the same code).
do_attention() {
    need_build attention || return 0
    local k="$b/tests/kernels_cuda_test"
    # First, the sm_90a wgmma and TMA primitives (kernels/cuda/wgmma.cuh, tma.cuh) against the
    # CPU through their probes: the hardware's word on the layouts and tensor maps the emulator
    # assumes (docs/CUDA.md "wgmma").
    step wgmma_tests "$k" --gtest_filter='Wgmma*:Tma*' --gtest_output="xml:$out/wgmma_tests.xml"
    attention_vs_sdpa
    # The mma.sync kernels' candidate tiles against the engine's (docs/CUDA.md "Flash
    # attention's tiles by measurement"): GPT-2, the GQA shape and GPT-2's sizes at HD 128.
    step attention_sweep "$b/bench/attention_bench" --sweep --json "$out/attention_sweep.json"
    tail -n 48 "$out/attention_sweep.log"
    attention_engine_runs
    step attention_tests "$k" --gtest_filter='Attention*:Tiles/AttentionFa2Candidates.*' --gtest_output="xml:$out/attention_tests.xml"
    counts "$out/attention_tests.xml"
    need_sanitizer || return 0
    local cs="compute-sanitizer --error-exitcode 9" f='AttentionFlash16/0.MmaSyncShapesMatchCpu'
    step memcheck_attention $cs --tool memcheck "$k" \
        --gtest_filter="$f:AttentionFlash16/0.TensorCoresAreDeterministic"
    step racecheck_attention $cs --tool racecheck "$k" --gtest_filter="$f"
    step synccheck_attention $cs --tool synccheck "$k" --gtest_filter="$f"
    # The candidate tiles' 8-warp blocks (their loads and barriers span twice the threads).
    step racecheck_attention_tiles $cs --tool racecheck "$k" \
        --gtest_filter='Tiles/AttentionFa2Candidates.MatchCpu/*w8*'
    # The wgmma kernels (sm_90 only; they skip elsewhere): shared tiles the async proxy reads.
    step racecheck_attention_wgmma $cs --tool racecheck "$k" \
        --gtest_filter='Tiles/AttentionFa2Candidates.MatchCpu/*wgmma*:Wgmma.*:Tma.*'
    # The warp-specialized ones hand stages over named barriers (bar.sync / bar.arrive) and
    # mbarriers (the TMA ones).
    step synccheck_attention_pp $cs --tool synccheck "$k" \
        --gtest_filter='Tiles/AttentionFa2Candidates.MatchCpu/*wgmma_*pp*:Tiles/AttentionFa2Candidates.MatchCpu/*wgmma_*tma*'
}

# The CUDA backend's benchmark: napkin's GPT-2 against PyTorch eager and torch.compile on this
# GPU (bench/gpt2_vs_pytorch.py). A call of its own: PyTorch's compile takes minutes.
do_gpt2() {
    need_build gpt2 || return 0
    local step_timeout=570 runs=/tmp/gpt2_vs_pytorch
    # With the attention phase's pick in this session, napkin on those kernels too.
    local cand=()
    [ -s "$out/attention_candidates.txt" ] &&
        cand=(--attention-candidates "$(cat "$out/attention_candidates.txt")")
    step gpt2_vs_pytorch python3 bench/gpt2_vs_pytorch.py --napkin "$b/cli/napkin" \
        --json "$out/gpt2_vs_pytorch.json" --keep "$runs" "${cand[@]}"
    tail -n 12 "$out/gpt2_vs_pytorch.log"
    local r
    for r in "$runs"/napkin-b*/report.json; do  # the reports, not the checkpoints (GBs)
        [ -f "$r" ] && mkdir -p "$out/gpt2-runs" && cp "$r" "$out/gpt2-runs/$(basename "$(dirname "$r")").json"
    done
}

# The performance model and the anomaly check on this GPU (issues 21 and 25): napkin calibrate's
# profile of the device (its CUDA path: CUPTI's kernel time per op range), then GPT-2 runs whose
# report.json holds the time predicted from that profile beside the time measured, and the same
# run with and without --detect-anomaly, alternated (off, on, off, on) so a drift hits both, and
# once profiled (the checks' kernels in its trace); the anomaly runs first, as they need no
# profile. PROFILE_BASE (a profile to start from) and
# CALIBRATE_ARGS (e.g. "--precisions fp32 --merge") measure only what that profile lacks.
# --detect-anomaly's cost alone (issue 25: one batched check launch per op): GPT-2 B=8 T=1024
# bf16-amp off and on, alternated, and once profiled; `report.txt` has the step times side by side.
do_anomaly() {
    need_build anomaly || return 0
    local n="$b/cli/napkin" i
    for i in 1 2; do
        step "anomaly_off_$i" "$n" train --device cuda --model gpt2 --micro-batch 8 --seq-len 1024 \
            --precision bf16-amp --steps 20 --quiet --out "$out/anomaly/off-$i"
        step "anomaly_on_$i" "$n" train --device cuda --model gpt2 --micro-batch 8 --seq-len 1024 \
            --precision bf16-amp --steps 20 --quiet --detect-anomaly --out "$out/anomaly/on-$i"
    done
    step anomaly_on_profiled "$n" train --device cuda --model gpt2 --micro-batch 8 --seq-len 1024 \
        --precision bf16-amp --steps 5 --quiet --detect-anomaly --profile steps:3-4 \
        --out "$out/anomaly/on-profiled"
    "$n" report --warmup 3 "$out/anomaly/off-1" "$out/anomaly/on-1" "$out/anomaly/off-2" \
        "$out/anomaly/on-2" >"$out/anomaly/report.txt" 2>&1
    "$n" report --warmup 3 --top 40 "$out/anomaly/on-profiled" >"$out/anomaly/profiled.txt" 2>&1
}

# Flash-decoding (docs/INFERENCE.md, "The CUDA kernel"): the decode attention tests on this GPU,
# decode_attention_bench (split-KV against the single-pass kernel, B 1 and 8, 1k-32k keys; the
# table the doc quotes), then napkin generate on GPT-2 (random weights, bf16, B 1, 960 + 64
# tokens) with --flash-decoding off and on, alternated, each run folder's `napkin report`
# (memory and time per token, predicted and measured) beside its generate.json.
do_decode() {
    need_build decode || return 0
    local n="$b/cli/napkin" i m d
    step decode_tests "$b/tests/kernels_cuda_test" --gtest_filter='DecodeAttention*'
    if [ -x "$b/bench/decode_attention_bench" ]; then
        step decode_attention_bench "$b/bench/decode_attention_bench" \
            --json "$out/decode_attention_bench.json"
        tail -n 24 "$out/decode_attention_bench.log"
    fi
    mkdir -p "$out/decode"
    for i in 1 2; do
        for m in off on; do
            step "generate_${m}_$i" "$n" generate --device cuda --model gpt2 --precision bf16 \
                --synthetic-prompt 960 --max-new-tokens 64 --flash-decoding "$m" \
                --out "$out/decode/$m-$i"
        done
    done
    for d in "$out"/decode/*/; do
        "$n" report "$d" >"${d%/}.txt" 2>&1
    done
    grep -h "decode" "$out"/decode/*.txt
}

do_predict() {
    need_build predict || return 0
    local n="$b/cli/napkin" gpu
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -oiE 'H100|H200|A100|B200' |
          tr '[:upper:]' '[:lower:]')
    local profile="$out/profile-${gpu:-gpu}.json"
    do_anomaly
    [ -n "${PROFILE_BASE:-}" ] && cp "$PROFILE_BASE" "$profile"
    # shellcheck disable=SC2086  # CALIBRATE_ARGS: words
    step_timeout="${CALIBRATE_TIMEOUT:-200}" step calibrate "$n" calibrate --device cuda -o "$profile" ${CALIBRATE_ARGS:-} \
        --note "gpu_check.sh predict; nothing else on the GPU"
    local with=()
    [ -f "$profile" ] && with=(--device-profile "$profile")
    mkdir -p "$out/predict"
    step predict_gpt2_b4_fp32 "$n" train --device cuda --model gpt2 --micro-batch 4 --seq-len 1024 \
        --steps 12 --quiet "${with[@]}" --out "$out/predict/gpt2-b4-t1024-fp32"
    step predict_gpt2_b8 "$n" train --device cuda --model gpt2 --micro-batch 8 --seq-len 1024 \
        --precision bf16-amp --steps 12 --quiet "${with[@]}" --out "$out/predict/gpt2-b8-t1024-bf16"
    step predict_gpt2_b16_t512 "$n" train --device cuda --model gpt2 --micro-batch 16 --seq-len 512 \
        --precision bf16-amp --steps 12 --quiet "${with[@]}" --out "$out/predict/gpt2-b16-t512-bf16"
    step predict_gpt2_b32 "$n" train --device cuda --model gpt2 --micro-batch 32 --seq-len 1024 \
        --precision bf16-amp --steps 8 --quiet "${with[@]}" --out "$out/predict/gpt2-b32-t1024-bf16"
    rm -f "$out"/predict/*/checkpoint.safetensors "$out"/anomaly/*/checkpoint.safetensors
    if command -v jq >/dev/null; then
        for r in "$out"/predict/*/report.json "$out"/anomaly/*/report.json; do
            printf '%-28s %s\n' "$(basename "$(dirname "$r")")" \
                "$(jq -c '[.predicted.time.step_seconds, (.steps[3:] | map(.seconds) | sort | .[length/2|floor])]' "$r")"
        done | tee "$out/predict/predicted_vs_measured.txt"
    fi
}

# The paged optimizer (issue 25): GPT-2 bf16-amp AdamW with and without --paged-optimizer, the
# same numbers bit for bit expected; report.json holds the paged state and the page traffic
# (bytes each way and the prefetches' time on the stream) predicted beside measured, and the
# driver's device peak (cudaMemGetInfo) of both runs. The prediction's link is assumed (PCIe 4.0
# x16) unless the run's device profile measured host-device copies.
do_paged() {
    need_build paged || return 0
    local n="$b/cli/napkin" m
    mkdir -p "$out/paged"
    for m in off on; do
        local flag=()
        [ "$m" = on ] && flag=(--paged-optimizer)
        step "paged_gpt2_$m" "$n" train --device cuda --model gpt2 --micro-batch 8 --seq-len 1024 \
            --precision bf16-amp --steps 10 --quiet "${flag[@]}" --out "$out/paged/$m"
    done
    rm -f "$out"/paged/*/checkpoint.safetensors
    "$n" report "$out/paged/off" "$out/paged/on" >"$out/paged/report.txt" 2>&1
    if command -v jq >/dev/null; then
        for m in off on; do
            echo "$m $(jq -c '{device_peak_used: .measured.device_memory.peak_used_bytes,
                baseline: .measured.device_memory.baseline_used_bytes,
                losses: [.steps[].loss], predicted: .predicted.paged_optimizer,
                measured: .measured.paged_optimizer}' "$out/paged/$m/report.json")"
        done | tee "$out/paged/paged.txt"
    fi
}

# The CPU accuracy benchmark (issue 21) wants a quiet machine; the GPU host's CPU is one.
do_cpuacc() {
    need_build cpuacc || return 0
    step_timeout="${CPUACC_TIMEOUT:-420}" step cpu_time_accuracy python3 bench/time_accuracy.py \
        --napkin "$b/cli/napkin" --out "$out/cpuacc"
    rm -f "$out"/cpuacc/run*/checkpoint.safetensors
}

what="${1:-all}"
case "$what" in
    build|test|sanitize|runs|trace|bench|gpt2|attention|predict|anomaly|paged|cpuacc|all) use_bundle; find_libs ;;
esac
case "$what" in
    build) do_build ;;
    test) do_test ;;
    sanitize) do_sanitize ;;
    runs) do_runs ;;
    trace) do_trace ;;
    bench) do_bench ;;
    gpt2) do_gpt2 ;;
    attention) do_attention ;;
    fusion) do_fusion ;;
    graph) do_graph ;;
    fp8) do_fp8 ;;
    decode) do_decode ;;
    predict) do_predict ;;
    anomaly) do_anomaly ;;
    paged) do_paged ;;
    cpuacc) do_cpuacc ;;
    all) do_build; do_test; do_sanitize; do_runs; do_trace; do_bench; do_gpt2 ;;
    -h|--help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check.sh: unknown step '$what' (build|test|sanitize|runs|trace|bench|gpt2|attention|fusion|graph|fp8|decode|predict|anomaly|paged|cpuacc|all; see --help)" >&2; exit 2 ;;
esac
echo "logs in $out"
exit $failed
