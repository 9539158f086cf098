// The forward of the mma.sync flash attention (FlashAttention-2's algorithm; docs/CUDA.md "Flash
// attention on mma.sync"), behind cuda::attention_flash_mma_forward for HD 64 and 128 on sm_80
// and later (attention_mma.cuh), with the engine's tiles (fa2::DefaultForwardTiles). The contract
// is the SIMT kernels' and the CPU's (kernels/cpu/attention.cpp): out and the fp32 logsumexp lse
// (natural log of the scaled scores), causal, GQA/MQA, scale 1 / sqrt(HD), fp32 softmax
// statistics and accumulation, optional dropout on P with the CPU's keep bits. The block's work
// is attention_fa2_forward.cuh's; bench/attention_fa2_candidates.cu launches it with other tiles.
#include <cstdint>

#include "kernels/cuda/attention_fa2_forward.cuh"
#include "kernels/cuda/attention_mma.cuh"

namespace napkin::cuda::mma_detail {

namespace {

// Grid: (query tiles * B * NH) blocks, the last query tiles first. Shared: Tiles::smem_bytes().
template <class D, class Tiles, bool kDropout>
__global__ void __launch_bounds__(Tiles::kThreads, Tiles::kMinBlocks)
    attention_fa2_forward_kernel(D* out, float* lse, const D* qkv, MmaLayout l, FlashDropout drop) {
    extern __shared__ __align__(128) unsigned char smem[];
    fa2::forward_block<D, Tiles, kDropout>(smem, out, lse, qkv, l, drop);
}

template <class D, class Tiles>
void launch_forward(D* out, float* lse, const D* qkv, const MmaLayout& l, const FlashDropout& drop,
                    cudaStream_t stream) {
    const char* op = "attention_flash_mma_forward";
    const std::int64_t tiles = (l.T + Tiles::kBlockM - 1) / Tiles::kBlockM;
    const unsigned grid = mma_grid(op, tiles, l.B * l.NH);
    constexpr std::size_t smem = Tiles::smem_bytes();
    auto kernel = drop.on ? attention_fa2_forward_kernel<D, Tiles, true>
                          : attention_fa2_forward_kernel<D, Tiles, false>;
    allow_smem(kernel, smem, op);
    kernel<<<grid, Tiles::kThreads, smem, stream>>>(out, lse, qkv, l, drop);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool fa2_supported(std::int64_t HD) {
    if (HD != 64 && HD != 128) return false;
    int device = 0, major = 0;
    NAPKIN_CUDA_CHECK(cudaGetDevice(&device));
    NAPKIN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    return major >= 8;
}

template <class D>
void fa2_forward(D* out, float* lse, const D* qkv, const MmaLayout& l, const FlashDropout& drop,
                 cudaStream_t stream) {
    if (l.HD == 64)
        return launch_forward<D, fa2::DefaultForwardTiles<64>>(out, lse, qkv, l, drop, stream);
    launch_forward<D, fa2::DefaultForwardTiles<128>>(out, lse, qkv, l, drop, stream);
}

template void fa2_forward<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*,
                                         const MmaLayout&, const FlashDropout&, cudaStream_t);
template void fa2_forward<__half>(__half*, float*, const __half*, const MmaLayout&,
                                  const FlashDropout&, cudaStream_t);

}  // namespace napkin::cuda::mma_detail
