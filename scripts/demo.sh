#!/usr/bin/env bash
# The main job on its built-in default: installs what is missing, builds, and trains the tiny
# GPT on the built-in synthetic corpus (no downloads, no arguments), then prints the
# estimator's napkin math for the lecture's first question.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target napkin
./build/cli/napkin train
echo
./build/cli/napkin estimate --params 70e9 --tokens 15e12 --gpus 1024 --gpu h100-sxm --mfu 0.5
