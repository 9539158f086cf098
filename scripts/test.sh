#!/usr/bin/env bash
# Installs what is missing, builds everything (the viewer included) and runs the tests: labels
# unit and slow (gpu tests run too and skip themselves without a device), then the fault suite
# (tests/fault) within its time budget, then the viewer's gui tests under Xvfb with Mesa's
# llvmpipe, then under libFuzzer the viewer's trace loader for 45 s and the checkpoint, config,
# report.json and device-profile readers for 30 s.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's start, in seconds since this script began: what to shorten when CI runs long.
t0=$(date +%s)
stage() { echo "== test.sh: $1 at $(( $(date +%s) - t0 )) s"; }
stage "installing dependencies"
scripts/install_deps.sh --viewer
stage "building"
# Without a GPU no SASS is run here (the CUDA tests run the kernels on the emulator, compiled
# from the same sources by g++), so one arch, sm_80, shows that every kernel compiles: no kernel
# differs above compute capability 8.0 (mma.cuh's #if). Two archs cost nvcc 1.8x the time
# (attention_mma.cu: 43.6 against 24.0 CPU-s, docs/LAYOUT.md). With a GPU: both, as shipped.
archs="80;90"
if ! nvidia-smi -L >/dev/null 2>&1; then archs="80"; fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DNAPKIN_WERROR=ON -DNAPKIN_VIEWER=ON \
      -DNAPKIN_ATTENTION_CANDIDATES=ON -DCMAKE_CUDA_ARCHITECTURES="$archs" >/dev/null
cmake --build build -j"$(nproc)"
stage "unit, slow and gpu tests"
ctest --test-dir build --output-on-failure -j"$(nproc)" -LE "gui|fault"
# The fault suite (tests/fault, 32 cases): about 3 min of napkin runs one case at a time on the
# 2-core dev VM, 1.5 min with two at once; the longest, one ZeRO stage's kill -9 trials under
# mpirun, 20 s alone and up to 46 s on a loaded machine, the bit flips 20 s a test past their
# first round. Each case may take at most 120 s; every command in it is under `timeout 20` (60 for
# mpirun and calibrate), so a hang fails one case and never stalls CI.
stage "fault suite"
ctest --test-dir build --output-on-failure -j"$(nproc)" -L fault --timeout 120
# -noreset: by default Xvfb resets when its last client leaves, and a test connecting during the
# reset fails to open the display (seen in CI with two gui tests at once).
stage "gui tests"
xvfb-run -a -s "-screen 0 1280x1024x24 -noreset" ctest --test-dir build --output-on-failure -j"$(nproc)" -L gui

# libFuzzer needs clang: the two fuzz targets are a small project of their own (tests/fuzz), the
# sources both read compiled once. The trace loader's target (tests/viewer/fuzz) runs 45 s, the
# readers' of napkin's inputs (tests/fault/fuzz: checkpoints, model configs, report.json and
# device profiles, sharing the time) 30 s.
stage "fuzz targets"
cmake -S tests/fuzz -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j"$(nproc)"
fuzz() {  # target seconds corpus what
    mkdir -p "build-fuzz/corpus-$1"
    if ! "build-fuzz/$1" -max_total_time="$2" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
            "build-fuzz/corpus-$1" "$3" >"build-fuzz/$1.log" 2>&1; then
        tail -n 60 "build-fuzz/$1.log"
        echo "test.sh: $4's fuzz target failed (build-fuzz/$1.log)" >&2
        exit 1
    fi
    grep -E "^Done [0-9]+ runs" "build-fuzz/$1.log" || true
}
# Both at once: each fuzzer is one single-threaded process and the machine has two cores (45 s
# of wall, not 75).
fuzz run_data_fuzz 45 tests/viewer/fuzz/corpus "the trace loader" &
data_fuzz=$!
fuzz run_reader_fuzz 30 tests/fault/fuzz/corpus "the readers" &
reader_fuzz=$!
fuzz_rc=0
wait "$data_fuzz" || fuzz_rc=1
wait "$reader_fuzz" || fuzz_rc=1
[ "$fuzz_rc" = 0 ] || exit 1
stage "done"
