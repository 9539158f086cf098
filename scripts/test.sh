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
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DNAPKIN_WERROR=ON -DNAPKIN_VIEWER=ON >/dev/null
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

# libFuzzer needs clang: the loader's fuzz target is a small project of its own (tests/viewer/fuzz).
stage "trace loader fuzz target"
cmake -S tests/viewer/fuzz -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j"$(nproc)"
mkdir -p build-fuzz/corpus
if ! build-fuzz/run_data_fuzz -max_total_time=45 -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
        build-fuzz/corpus tests/viewer/fuzz/corpus >build-fuzz/fuzz.log 2>&1; then
    tail -n 60 build-fuzz/fuzz.log
    echo "test.sh: the trace loader's fuzz target failed (build-fuzz/fuzz.log)" >&2
    exit 1
fi
grep -E "^Done [0-9]+ runs" build-fuzz/fuzz.log || true

# The readers of napkin's inputs (tests/fault/fuzz): checkpoints, model configs, report.json and
# device profiles, sharing the 30 s.
stage "readers' fuzz target"
cmake -S tests/fault/fuzz -B build-fuzz-readers -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz-readers -j"$(nproc)"
mkdir -p build-fuzz-readers/corpus
if ! build-fuzz-readers/run_reader_fuzz -max_total_time=30 -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
        build-fuzz-readers/corpus tests/fault/fuzz/corpus >build-fuzz-readers/fuzz.log 2>&1; then
    tail -n 60 build-fuzz-readers/fuzz.log
    echo "test.sh: the readers' fuzz target failed (build-fuzz-readers/fuzz.log)" >&2
    exit 1
fi
grep -E "^Done [0-9]+ runs" build-fuzz-readers/fuzz.log || true
stage "done"
