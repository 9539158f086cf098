#!/usr/bin/env bash
# Installs the Debian packages napkin needs, only those that are missing.
#   scripts/install_deps.sh            build + tests (the default)
#   scripts/install_deps.sh --viewer   also the ImGui viewer's packages (and Xvfb, Mesa, clang for its tests)
# Runs apt-get as root, or through sudo when not root.
set -euo pipefail

# OpenMPI: the data-parallel engine's CPU ranks and their tests (mpirun -n 2, 4; docs/ZERO.md).
# simdjson: napkin's one trace reader (profiler/trace_reader.h: trace_check, the viewer, export).
# zlib: that reader's .json.gz traces (optional at configure time; without it, plain .json only).
# jq: bench/zero_bench.sh reads `napkin report --json` with it.
# Boost.Context: the fibers of the CUDA kernels' CPU emulation (tests/cuda_emu, docs/CUDA.md).
# python3: the style check of function lengths (scripts/long_functions.py, a unit test).
packages=(build-essential cmake pkg-config nlohmann-json3-dev libcli11-dev libgtest-dev libopenblas-dev libopenblas-openmp-dev
          libopenmpi-dev openmpi-bin libsimdjson-dev zlib1g-dev jq libboost-context-dev python3)
for arg in "$@"; do
    case "$arg" in
        --viewer) packages+=(libimgui-dev libglfw3-dev libstb-dev libgl-dev libgl1-mesa-dri xvfb xauth fonts-dejavu-core
                            clang libclang-rt-14-dev) ;;  # llvmpipe for headless GL; clang for libFuzzer
        --mpi) ;;  # in the default set now; kept so older instructions still work
        -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
        *) echo "install_deps.sh: unknown option '$arg' (expected --viewer or --mpi)" >&2; exit 2 ;;
    esac
done

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "install_deps.sh: all ${#packages[@]} packages present"
    exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install_deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
