#!/usr/bin/env bash
# The main job on its built-in default: installs what is missing, builds, and runs
# `napkin estimate` on the default model (GPT-2 124M on one H100), then the lecture's first
# napkin question. No downloads, no arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target napkin
./build/cli/napkin estimate
echo
./build/cli/napkin estimate --params 70e9 --tokens 15e12 --gpus 1024 --gpu h100-sxm --mfu 0.5
