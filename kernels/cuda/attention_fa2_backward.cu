// The backward of the mma.sync flash attention (docs/CUDA.md "Flash attention on mma.sync"),
// behind cuda::attention_flash_mma_backward for HD 64 and 128 on sm_80 and later
// (attention_mma.cuh), with the engine's tiles (fa2::DefaultBackwardTiles): pass 1 (dk, dv) and
// pass 2 (dq), whose blocks' work is attention_fa2_backward.cuh's;
// bench/attention_fa2_candidates.cu launches them with other tiles.
#include <cstdint>

#include "kernels/cuda/attention_fa2_backward.cuh"
#include "kernels/cuda/attention_mma.cuh"

namespace napkin::cuda::mma_detail {

namespace {

// Pass 1. Grid: (key tiles * B * KVH) blocks, the first key tiles first. Shared:
// Tiles::smem_bytes().
template <class D, class Tiles>
__global__ void __launch_bounds__(Tiles::kThreads, Tiles::kMinBlocks)
    attention_fa2_backward_key_kernel(D* dqkv, const D* dout, const D* out, const D* qkv,
                                      const float* lse, MmaLayout l, FlashDropout drop) {
    extern __shared__ __align__(128) unsigned char smem[];
    fa2::backward_key_block<D, Tiles>(smem, dqkv, dout, out, qkv, lse, l, drop);
}

// Pass 2. Grid: (query tiles * B * NH) blocks, the last query tiles first. Shared:
// Tiles::smem_bytes().
template <class D, class Tiles>
__global__ void __launch_bounds__(Tiles::kThreads, Tiles::kMinBlocks)
    attention_fa2_backward_query_kernel(D* dqkv, const D* dout, const D* out, const D* qkv,
                                        const float* lse, MmaLayout l, FlashDropout drop) {
    extern __shared__ __align__(128) unsigned char smem[];
    fa2::backward_query_block<D, Tiles>(smem, dqkv, dout, out, qkv, lse, l, drop);
}

template <class D, class Tiles>
void launch_backward(D* dqkv, const D* dout, const D* out, const D* qkv, const float* lse,
                     const MmaLayout& l, const FlashDropout& drop, cudaStream_t stream) {
    const char* op = "attention_flash_mma_backward";
    using Key = typename Tiles::KeyPass;
    using Query = typename Tiles::QueryPass;
    auto key_kernel = attention_fa2_backward_key_kernel<D, Key>;
    constexpr std::size_t key_smem = Key::smem_bytes();
    allow_smem(key_kernel, key_smem, op);
    const unsigned key_grid = mma_grid(op, (l.T + Key::kKeys - 1) / Key::kKeys, l.B * l.KVH);
    key_kernel<<<key_grid, Key::kThreads, key_smem, stream>>>(dqkv, dout, out, qkv, lse, l, drop);
    NAPKIN_CUDA_CHECK_LAUNCH();
    auto query_kernel = attention_fa2_backward_query_kernel<D, Query>;
    constexpr std::size_t query_smem = Query::smem_bytes();
    allow_smem(query_kernel, query_smem, op);
    const unsigned query_grid =
        mma_grid(op, (l.T + Query::kQueries - 1) / Query::kQueries, l.B * l.NH);
    query_kernel<<<query_grid, Query::kThreads, query_smem, stream>>>(dqkv, dout, out, qkv, lse, l,
                                                                      drop);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class D>
void fa2_backward(D* dqkv, const D* dout, const D* out, const D* qkv, const float* lse,
                  const MmaLayout& l, const FlashDropout& drop, cudaStream_t stream) {
    if (l.HD == 64)
        return launch_backward<D, fa2::DefaultBackwardTiles<64>>(dqkv, dout, out, qkv, lse, l, drop,
                                                                 stream);
    launch_backward<D, fa2::DefaultBackwardTiles<128>>(dqkv, dout, out, qkv, lse, l, drop, stream);
}

template void fa2_backward<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*,
                                          const __nv_bfloat16*, const __nv_bfloat16*, const float*,
                                          const MmaLayout&, const FlashDropout&, cudaStream_t);
template void fa2_backward<__half>(__half*, const __half*, const __half*, const __half*,
                                   const float*, const MmaLayout&, const FlashDropout&,
                                   cudaStream_t);

}  // namespace napkin::cuda::mma_detail
