// Flash attention's dropout on P on the device, shared by the SIMT kernels (attention.cu) and the
// tensor-core ones (attention_mma.cu): AttentionDropout's seed, with the threshold and the scale
// computed on the host as the CPU computes them (kernels/dropout.h), so every backend keeps the
// same elements. Not a public header.
#pragma once

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/dropout.h"

namespace napkin::cuda {

// on == false: no dropout.
struct FlashDropout {
    std::uint64_t seed = 0;
    std::uint32_t threshold = 0;
    float scale = 1.0f;  // 1 / (1 - p)
    bool on = false;

    // Whether P's element at offset `at` of (B, NH, T, T) is kept: the CPU's bit.
    __device__ bool keep(std::int64_t at) const {
        return dropout_keep(seed, static_cast<std::uint64_t>(at), threshold);
    }
    // Its keep factor: 0 or 1 / (1 - p).
    __device__ float factor(std::int64_t at) const { return keep(at) ? scale : 0.0f; }
};

// The kernels' dropout for `dropout` (null: none); `op` names the caller in the error for a p
// outside [0, 1).
template <class Elem>
FlashDropout flash_dropout(const char* op, const AttentionDropout<Elem>* dropout) {
    FlashDropout drop;
    if (dropout == nullptr) return drop;
    NAPKIN_CUDA_REQUIRE(dropout->p >= 0.0f && dropout->p < 1.0f, op << ": dropout p " << dropout->p);
    drop.seed = dropout->seed;
    drop.threshold = dropout_threshold(dropout->p);
    drop.scale = 1.0f / (1.0f - dropout->p);
    drop.on = true;
    return drop;
}

}  // namespace napkin::cuda
