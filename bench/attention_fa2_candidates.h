// The flash attention's candidate kernels (docs/CUDA.md "Flash attention's tiles by
// measurement"): per head dimension (64, 128) and direction, the engine's own tiles first, other
// mma.sync tiles, and kernels on Hopper's wgmma (sm90a: forwards, dq passes, dK/dV passes, some
// warp-specialized, some with the row statistics precomputed), that `attention_bench --sweep`
// times on a GPU and tests/kernels_cuda/attention_test.cpp holds to the CPU. Their kernels are
// instantiated in bench/attention_fa2_candidates.cu alone (napkin_fa2_candidates, linked by the
// bench and the test, and by the CUDA backend only with NAPKIN_ATTENTION_CANDIDATES), so that
// the engine's nvcc time does not grow with them. bf16 only. Compiled by nvcc as C++17.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/launch.h"

namespace napkin {
struct bf16_t;  // core/half.h (C++20), which nvcc's C++17 does not compile
}  // namespace napkin

namespace napkin::bench {

struct Fa2Candidate {
    const char* name;  // e.g. "f128-m2-n64": direction, HD, what differs from the default
    std::int64_t HD;
    bool backward;
    bool is_default;    // the engine's tiles: calls attention_flash_mma_forward/backward itself
    const char* tiles;  // the configuration in words
    // Per pass (the forward has one; the backward's key pass then query pass): threads a block,
    // rows a block (queries, or keys), shared memory a block, and the shared-memory bytes a warp
    // reads per m16n8k16 product (the tile structs' smem_read_per_mma).
    int passes;
    int threads[2], rows[2];
    std::size_t smem_bytes[2];
    double smem_read_per_mma[2];
    // Exactly one is set, by `backward`. Same contract as attention_flash_mma_forward/backward;
    // HD must be the candidate's, the device sm_80 or later.
    void (*fwd)(const AttentionFlashForwardArgs<bf16_t>&, const cuda::Launch&);
    void (*bwd)(const AttentionFlashBackwardArgs<bf16_t>&, const cuda::Launch&);
    // On wgmma (kernels/cuda/attention_wgmma_forward.cuh): runs only where
    // fa2_sm90a_unavailable() is empty.
    bool sm90a = false;
    // A backward's passes one at a time (the same contract; pass 1 writes dK and dV, pass 2 dQ,
    // so each runs alone): the sweep times them apart, to combine the fastest of each.
    void (*bwd_pass[2])(const AttentionFlashBackwardArgs<bf16_t>&, const cuda::Launch&) = {};
    // Pass 1 takes each query's D and lse from a kernel run before it (its time counted in pass
    // 1's) and streams Q and dout, not out too (docs/CUDA.md "Row statistics before pass 1").
    bool row_stats = false;
};

// Every candidate, the forwards first, each (HD, direction)'s default first.
const std::vector<Fa2Candidate>& fa2_candidates();

// Empty when the sm90a candidates can run here (an sm_90 device and this build's sm_90a code,
// or the emulator), else why not.
std::string fa2_sm90a_unavailable();

// The row statistics' kernel of the -rs and -kpp candidates alone (cuda::fa2::row_stats_block):
// `stats` (device, row_stats_floats(dims) floats) per (b, h): padded(T) rows of lse log2(e)
// (+inf past T), then as many of D = dout . out (0 past T), with padded(T) = T rounded up to 64.
// For its test against the CPU; HD 64 or 128.
std::int64_t row_stats_floats(const AttentionDims& dims);
void row_stats(float* stats, const bf16_t* dout, const bf16_t* out, const float* lse,
               const AttentionDims& dims, const cuda::Launch& launch);

// Candidates chosen to stand in for the engine's flash attention (bf16, head dimensions 64 and
// 128; docs/CUDA.md "The engine on candidates"), per head dimension ([0] 64, [1] 128): the
// forward, and pass 1 (dK, dV) and pass 2 (dQ) of the backward; null: the engine's own.
struct Fa2Selection {
    const Fa2Candidate* forward[2] = {};
    const Fa2Candidate* pass[2][2] = {};
};

// Parses a comma-separated list of candidate names (NAPKIN_ATTENTION_CANDIDATES): a forward's,
// a backward's (both its passes), or a backward's NAME@1 or NAME@2 (that pass alone), at most
// one per head dimension and forward or pass. Throws std::invalid_argument naming the entry.
Fa2Selection parse_fa2_selection(const std::string& list);

// The selection in words ("HD 64: forward f64-wgmma-pp, pass 1 b64-wgmma-kpp, pass 2 engine").
std::string describe(const Fa2Selection& s);

// The engine's attention_flash_forward/backward (kernels/attention.h) with the candidates that
// NAPKIN_ATTENTION_CANDIDATES names in place of its tiles where the head dimension has one, and
// the engine's kernels elsewhere. The variable is read and checked at the first call, which
// prints the selection on stderr once; a bad list, or a wgmma candidate where wgmma cannot
// run, throws cuda::CudaError. libnapkin_cuda.so puts them in its bf16 table when built with
// NAPKIN_ATTENTION_CANDIDATES=ON and the variable is set (core/cuda/cuda_engine_api.cpp).
void selected_flash_forward(const AttentionFlashForwardArgs<bf16_t>& args,
                            const cuda::Launch& launch);
void selected_flash_backward(const AttentionFlashBackwardArgs<bf16_t>& args,
                             const cuda::Launch& launch);

}  // namespace napkin::bench
