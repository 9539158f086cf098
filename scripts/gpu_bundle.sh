#!/usr/bin/env bash
# Builds the CUDA targets here, on a machine without a GPU, and packs them for a lent GPU machine:
#
#   scripts/gpu_bundle.sh            # -> .gpu/bundle.tar.gz (git-ignored), then, on the device:
#   scripts/gpu_check.sh test        #    with .gpu carried (the device tool's `carry`)
#
# Why: the GPU machines have nvcc 13.0 (as here) but not Debian's -dev packages napkin builds
# against (OpenBLAS, CLI11, nlohmann-json, GoogleTest, OpenMPI), and nothing can be installed
# there; and every minute of device time spent compiling is a minute not spent measuring.
#
# The bundle holds build-cuda's executables and the CUDA plugin as built here (sm_90, Release),
# the shared libraries they need that are neither the C runtime nor CUDA's own (which the device
# has, in its own versions), and MANIFEST (commit, flags, toolkit, the build's absolute root).
# Test binaries carry absolute paths into this checkout (NAPKIN_BINARY, test data, RPATH);
# gpu_check.sh points that root at wherever the device unpacked the working tree.
# CUDA_ARCH (default 90) and JOBS (default nproc) tune the build.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd -P)
b=build-cuda
arch="${CUDA_ARCH:-90}"
jobs="${JOBS:-$(nproc)}"
nvcc=/usr/local/cuda/bin/nvcc

if [ ! -x "$nvcc" ]; then
    echo "gpu_bundle.sh: $nvcc not found: the bundle needs the CUDA toolkit (no GPU needed)" >&2
    exit 1
fi

# The executables gpu_check.sh runs; the first is the CLI, the rest its gpu tests and benchmark.
targets=(napkin napkin_cuda device_test caching_allocator_test kernels_cuda_test engine_cuda_test
         train_cuda_cli_test profile_cuda_test nccl_test gemm_bench attention_bench
         membound_bench decode_attention_bench head_ce_bench fp8_cast_bench)

cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release -DNAPKIN_CUDA=ON -DNAPKIN_WERROR=ON -DNAPKIN_VIEWER=OFF \
      -DNAPKIN_ATTENTION_CANDIDATES=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" >/dev/null
cmake --build "$b" -j"$jobs" --target "${targets[@]}"

# What goes in: every ELF file the targets produced (paths as CMake wrote them).
files=()
for t in "${targets[@]}"; do
    f=$(find "$b" -path "$b/CMakeFiles" -prune -o \( -name "$t" -o -name "lib$t.so" \) -type f -print |
        head -n 1)
    if [ -z "$f" ]; then
        echo "gpu_bundle.sh: target $t was built but its file is not under $b" >&2
        exit 1
    fi
    files+=("$f")
done

# The libraries they load that a GPU machine's base image may lack: everything ldd resolves,
# less the C runtime (glibc, libstdc++, libgcc: the device's are newer and compatible), the
# driver and CUDA's own libraries (the device's toolkit and driver provide those).
is_system() {
    case "$(basename "$1")" in
        ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libutil.so*|libresolv.so*) return 0 ;;
        libstdc++.so*|libgcc_s.so*) return 0 ;;
        libcuda.so*|libcudart.so*|libcublas*.so*|libcupti.so*|libnccl.so*|libnvrtc*|libnvidia*|libnvToolsExt*) return 0 ;;
    esac
    return 1
}
libdir="$b/bundle-lib"
rm -rf "$libdir"
mkdir -p "$libdir"
missing=0
for f in "${files[@]}"; do
    while read -r name _ path _; do
        [ "$path" = "not" ] && { echo "gpu_bundle.sh: $f: $name not found here" >&2; missing=1; continue; }
        [ -n "$path" ] && [ -f "$path" ] || continue
        is_system "$path" && continue
        case "$path" in "$root"/*) continue ;; esac  # napkin's own libraries travel as files
        cp -L "$path" "$libdir/$name"
    done < <(ldd "$f" | awk '/=>/ {print $1, $2, $3, $4}')
done
[ "$missing" = 0 ] || exit 1

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo " (uncommitted changes)" || true)
{
    echo "root $root"
    echo "commit $commit$dirty"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
    echo "nvcc $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
    echo "arch $arch"
    echo "glibc $(ldd --version | head -n 1 | awk '{print $NF}')"
    echo "files ${files[*]}"
    echo "libs $(cd "$libdir" && ls | tr '\n' ' ')"
} >"$b/MANIFEST"

mkdir -p .gpu
tmp=$(mktemp .gpu/.bundle.XXXXXX)
tar -czf "$tmp" "$b/MANIFEST" "${files[@]}" "$libdir"
mv "$tmp" .gpu/bundle.tar.gz
echo "gpu_bundle.sh: .gpu/bundle.tar.gz, $(du -h .gpu/bundle.tar.gz | cut -f1), commit $commit$dirty"
cat "$b/MANIFEST"
