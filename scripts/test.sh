#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the tests that need no GPU or display
# (labels unit and slow; gpu tests run too and skip themselves without a device).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DNAPKIN_WERROR=ON >/dev/null
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)" -LE gui
