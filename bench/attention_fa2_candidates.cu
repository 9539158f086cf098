// The flash attention's candidate kernels (bench/attention_fa2_candidates.h; docs/CUDA.md
// "Flash attention's tiles by measurement" has the arithmetic behind each), bf16: the kernels of
// attention_fa2_forward.cu and attention_fa2_backward.cu again, as thin wrappers over the same
// block bodies (attention_fa2_forward.cuh, attention_fa2_backward.cuh) with other tiles, the
// wgmma ones over attention_wgmma_forward.cuh and attention_wgmma_backward.cuh, and the row
// statistics' kernel of the -rs and -kpp pass 1s. The default of each (HD, direction) calls the
// engine's entry point instead, so its kernels are the engine's own and are not compiled twice.
#include "bench/attention_fa2_candidates.h"

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/attention_fa2_backward.cuh"
#include "kernels/cuda/attention_fa2_forward.cuh"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/attention_wgmma_backward.cuh"
#include "kernels/cuda/attention_wgmma_forward.cuh"

namespace napkin::bench {

namespace {

using cuda::FlashDropout;
using cuda::mma_detail::MmaLayout;
using D = __nv_bfloat16;

template <class Tiles, bool kDropout>
__global__ void __launch_bounds__(Tiles::kThreads, Tiles::kMinBlocks)
    attention_fa2_forward_kernel(D* out, float* lse, const D* qkv, MmaLayout l, FlashDropout drop) {
    extern __shared__ __align__(128) unsigned char smem[];
    cuda::fa2::forward_block<D, Tiles, kDropout>(smem, out, lse, qkv, l, drop);
}

template <class Tiles, bool kDropout>
__global__ void __launch_bounds__(Tiles::kThreads, Tiles::kMinBlocks)
    attention_wgmma_forward_kernel(D* out, float* lse, const D* qkv, MmaLayout l,
                                   FlashDropout drop) {
    extern __shared__ __align__(128) unsigned char smem[];
    cuda::fa2::wgmma_forward_block<D, Tiles, kDropout>(smem, out, lse, qkv, l, drop);
}

// By TMA: the call's tensor maps a kernel parameter the copies read in place (__grid_constant__).
template <class Tiles, bool kDropout>
__global__ void __launch_bounds__(Tiles::kThreads, Tiles::kMinBlocks)
    attention_wgmma_tma_forward_kernel(D* out, float* lse, const D* qkv, MmaLayout l,
                                       FlashDropout drop,
                                       const __grid_constant__ cuda::fa2::TmaMaps maps) {
    extern __shared__ __align__(128) unsigned char smem[];
    cuda::fa2::wgmma_forward_block<D, Tiles, kDropout>(smem, out, lse, qkv, l, drop, &maps);
}

template <class Tiles>
__global__ void __launch_bounds__(Tiles::kThreads, Tiles::kMinBlocks)
    attention_wgmma_backward_query_kernel(D* dqkv, const D* dout, const D* out, const D* qkv,
                                          const float* lse, MmaLayout l, FlashDropout drop) {
    extern __shared__ __align__(128) unsigned char smem[];
    cuda::fa2::wgmma_backward_query_block<D, Tiles>(smem, dqkv, dout, out, qkv, lse, l, drop);
}

template <class Tiles>
__global__ void __launch_bounds__(Tiles::kThreads, Tiles::kMinBlocks)
    attention_wgmma_tma_backward_query_kernel(D* dqkv, const D* dout, const D* out, const D* qkv,
                                              const float* lse, MmaLayout l, FlashDropout drop,
                                              const __grid_constant__ cuda::fa2::TmaMaps maps) {
    extern __shared__ __align__(128) unsigned char smem[];
    cuda::fa2::wgmma_backward_query_block<D, Tiles>(smem, dqkv, dout, out, qkv, lse, l, drop,
                                                    &maps);
}

template <class Tiles>
__global__ void __launch_bounds__(Tiles::kThreads, Tiles::kMinBlocks)
    attention_wgmma_tma_backward_key_kernel(D* dqkv, const D* dout, const D* out, const D* qkv,
                                            const float* lse, MmaLayout l, FlashDropout drop,
                                            const float* row_stats,
                                            const __grid_constant__ cuda::fa2::TmaMaps maps) {
    extern __shared__ __align__(128) unsigned char smem[];
    cuda::fa2::wgmma_backward_key_block<D, Tiles>(smem, dqkv, dout, out, qkv, lse, l, drop,
                                                  row_stats, &maps);
}

template <class Tiles>
__global__ void __launch_bounds__(Tiles::kThreads, Tiles::kMinBlocks)
    attention_wgmma_backward_key_kernel(D* dqkv, const D* dout, const D* out, const D* qkv,
                                        const float* lse, MmaLayout l, FlashDropout drop,
                                        const float* row_stats) {
    extern __shared__ __align__(128) unsigned char smem[];
    cuda::fa2::wgmma_backward_key_block<D, Tiles>(smem, dqkv, dout, out, qkv, lse, l, drop,
                                                  row_stats);
}

__global__ void sm90a_flag_kernel(int* out) {
    *out = cuda::wgmma::compiled_in() ? 1 : 0;
}

template <class Tiles>
__global__ void __launch_bounds__(Tiles::kThreads, Tiles::kMinBlocks)
    attention_fa2_backward_key_kernel(D* dqkv, const D* dout, const D* out, const D* qkv,
                                      const float* lse, MmaLayout l, FlashDropout drop,
                                      const float* row_stats) {
    extern __shared__ __align__(128) unsigned char smem[];
    cuda::fa2::backward_key_block<D, Tiles>(smem, dqkv, dout, out, qkv, lse, l, drop, row_stats);
}

// The row statistics of the RowStats pass 1s (cuda::fa2::RowStatsLayout), before the pass.
constexpr int kRowStatsThreads = 256;
template <int kHD>
__global__ void __launch_bounds__(kRowStatsThreads)
    attention_fa2_row_stats_kernel(float* row_stats, const D* dout, const D* out, const float* lse,
                                   MmaLayout l) {
    cuda::fa2::row_stats_block<D, kHD, kRowStatsThreads>(row_stats, dout, out, lse, l);
}

// The RowStats candidates' statistics buffer, the bench's own: allocated by the first call of a
// shape larger than any before (the sweep's, untimed; the engine's first step, which it runs
// before any capture) and kept for the process, as are the smaller ones before it (a CUDA graph
// captured with one may run again). Outside a capture only: one would be refused by the
// runtime's cudaMalloc. In the engine it would be a buffer the caller owns and the estimator
// accounts (docs/CUDA.md "Row statistics before pass 1").
float* row_stats_buffer(const char* op, const MmaLayout& l, cudaStream_t stream) {
    static float* buffer = nullptr;
    static std::int64_t floats = 0;
    // The smaller ones, kept reachable to the end (a static vector is destroyed before
    // LeakSanitizer looks, this one never is).
    static auto& smaller = *new std::vector<float*>;
    const std::int64_t need = cuda::fa2::RowStatsLayout::floats(l.B, l.NH, l.T);
    if (need > floats) {
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        NAPKIN_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
        if (capture != cudaStreamCaptureStatusNone)
            throw cuda::CudaError(std::string(op) +
                                  ": the row statistics' buffer of a larger shape would be "
                                  "allocated inside a CUDA graph capture (--cuda-graph off)");
        if (buffer != nullptr) smaller.push_back(buffer);
        NAPKIN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&buffer),
                                     static_cast<std::size_t>(need) * sizeof(float)));
        floats = need;
    }
    return buffer;
}

// Launches the row statistics' kernel into `stats`.
template <int kHD>
void launch_row_stats(const char* op, float* stats, const D* dout, const D* out, const float* lse,
                      const MmaLayout& l, cudaStream_t stream) {
    constexpr int kRows = kRowStatsThreads / (kHD / 8);
    const std::int64_t rows = cuda::fa2::RowStatsLayout::floats(l.B, l.NH, l.T) / 2;
    const unsigned grid = cuda::mma_detail::mma_grid(op, rows / kRows, 1);
    auto kernel = attention_fa2_row_stats_kernel<kHD>;
    kernel<<<grid, kRowStatsThreads, 0, stream>>>(stats, dout, out, lse, l);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class Tiles>
__global__ void __launch_bounds__(Tiles::kThreads, Tiles::kMinBlocks)
    attention_fa2_backward_query_kernel(D* dqkv, const D* dout, const D* out, const D* qkv,
                                        const float* lse, MmaLayout l, FlashDropout drop) {
    extern __shared__ __align__(128) unsigned char smem[];
    cuda::fa2::backward_query_block<D, Tiles>(smem, dqkv, dout, out, qkv, lse, l, drop);
}

// The entry points' checks, for the candidate's head dimension.
MmaLayout checked_layout(const char* op, const AttentionDims& d, std::int64_t HD,
                         std::initializer_list<const void*> pointers) {
    NAPKIN_CUDA_REQUIRE(d.HD == HD && cuda::mma_detail::fa2_supported(HD),
                        op << ": a candidate for HD " << HD << " called at HD " << d.HD
                           << " (or the device is older than sm_80)");
    for (const void* p : pointers)
        NAPKIN_CUDA_REQUIRE(reinterpret_cast<std::uintptr_t>(p) % 16 == 0,
                            op << ": pointers must be 16-byte aligned");
    return cuda::mma_detail::make_mma_layout(op, d.B, d.T, d.NH, d.KVH, d.HD);
}

// What a TMA kernel takes after its common arguments: `extra(qkv, dout, row_stats, l)` returns
// the call's tensor maps (boxes of kQRows query rows and kKvRows key rows; dout's when kDout; the
// row statistics' with kStatsQ-query items when kStatsQ > 0) as a tuple, or an empty tuple when
// not kTma. A map the driver refuses fails the call with `op` and why.
template <bool kTma, int kQRows = 0, int kKvRows = 0, bool kDout = false, int kStatsQ = 0>
auto tma_extra(const char* op) {
    return [op](const D* qkv, const D* dout, const float* stats, const MmaLayout& l) {
        if constexpr (kTma) {
            cuda::fa2::TmaMaps maps;
            std::string bad =
                cuda::fa2::make_tma_maps(&maps, qkv, l, kQRows, kKvRows, kDout ? dout : nullptr);
            if constexpr (kStatsQ > 0)
                if (bad.empty()) bad = cuda::fa2::make_stats_map<kStatsQ>(&maps.stats, stats, l);
            NAPKIN_CUDA_REQUIRE(bad.empty(), op << ": " << bad);
            return std::make_tuple(maps);
        } else {
            return std::tuple<>();
        }
    };
}

// A forward candidate's launch: the entry point's checks, then `with_dropout` or `without`,
// with `extra`'s values after the common arguments (tma_extra).
template <class Tiles, class Kernel, class Extra>
void launch_forward(const char* op, const AttentionFlashForwardArgs<bf16_t>& args,
                    const cuda::Launch& launch, Kernel with_dropout, Kernel without, Extra extra) {
    const MmaLayout l = checked_layout(op, args.dims, Tiles::kHD, {args.out, args.qkv});
    const FlashDropout drop = cuda::flash_dropout(op, args.dropout);
    if (l.B * l.T == 0) return;
    auto* out = cuda::dev(args.out);
    const auto* qkv = cuda::dev(args.qkv);
    const std::int64_t tiles = (l.T + Tiles::kBlockM - 1) / Tiles::kBlockM;
    const unsigned grid = cuda::mma_detail::mma_grid(op, tiles, l.B * l.NH);
    constexpr std::size_t smem = Tiles::smem_bytes();
    auto kernel = drop.on ? with_dropout : without;
    cuda::allow_smem(kernel, smem, op);
    std::apply(
        [&](const auto&... more) {
            kernel<<<grid, Tiles::kThreads, smem, launch.stream>>>(out, args.lse, qkv, l, drop,
                                                                   more...);
        },
        extra(qkv, nullptr, nullptr, l));
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class Tiles>
void forward(const AttentionFlashForwardArgs<bf16_t>& args, const cuda::Launch& launch) {
    launch_forward<Tiles>("attention_fa2_candidate_forward", args, launch,
                          attention_fa2_forward_kernel<Tiles, true>,
                          attention_fa2_forward_kernel<Tiles, false>, tma_extra<false>(nullptr));
}

template <class Tiles>
void forward_wgmma(const AttentionFlashForwardArgs<bf16_t>& args, const cuda::Launch& launch) {
    const char* op = "attention_wgmma_candidate_forward";
    const std::string why = fa2_sm90a_unavailable();
    NAPKIN_CUDA_REQUIRE(why.empty(), op << ": " << why);
    if constexpr (Tiles::kTma)
        launch_forward<Tiles>(op, args, launch, attention_wgmma_tma_forward_kernel<Tiles, true>,
                              attention_wgmma_tma_forward_kernel<Tiles, false>,
                              tma_extra<true, Tiles::kBlockM, Tiles::kBlockN>(op));
    else
        launch_forward<Tiles>(op, args, launch, attention_wgmma_forward_kernel<Tiles, true>,
                              attention_wgmma_forward_kernel<Tiles, false>, tma_extra<false>(op));
}

// Which passes a backward call launches: bit 0 pass 1 (dK, dV), bit 1 pass 2 (dQ).
constexpr int kBothPasses = 3;

// A backward candidate's launches: the entry point's checks, pass 1 by `key_kernel` with Key's
// threads, rows and shared memory, then pass 2 by `query_kernel` with Query's (kPasses: which),
// each with its extra's values after its common arguments (tma_extra).
template <class Key, class Query, int kPasses = kBothPasses, class KeyKernel, class QueryKernel,
          class KeyExtra = decltype(tma_extra<false>(nullptr)),
          class QueryExtra = decltype(tma_extra<false>(nullptr))>
void launch_backward(const char* op, const AttentionFlashBackwardArgs<bf16_t>& args,
                     const cuda::Launch& launch, KeyKernel key_kernel, QueryKernel query_kernel,
                     KeyExtra key_extra = tma_extra<false>(nullptr),
                     QueryExtra query_extra = tma_extra<false>(nullptr)) {
    const MmaLayout l =
        checked_layout(op, args.dims, Key::kHD, {args.dqkv, args.dout, args.out, args.qkv});
    const FlashDropout drop = cuda::flash_dropout(op, args.dropout);
    if (l.B * l.T == 0) return;
    auto* dqkv = cuda::dev(args.dqkv);
    const auto *dout = cuda::dev(args.dout), *out = cuda::dev(args.out);
    const auto* qkv = cuda::dev(args.qkv);
    if constexpr ((kPasses & 1) != 0) {
        const float* row_stats = nullptr;
        if constexpr (Key::kRowStats) {
            float* const stats = row_stats_buffer(op, l, launch.stream);
            launch_row_stats<Key::kHD>(op, stats, dout, out, args.lse, l, launch.stream);
            row_stats = stats;
        }
        constexpr std::size_t key_smem = Key::smem_bytes();
        cuda::allow_smem(key_kernel, key_smem, op);
        const unsigned key_grid =
            cuda::mma_detail::mma_grid(op, (l.T + Key::kKeys - 1) / Key::kKeys, l.B * l.KVH);
        std::apply(
            [&](const auto&... more) {
                key_kernel<<<key_grid, Key::kThreads, key_smem, launch.stream>>>(
                    dqkv, dout, out, qkv, args.lse, l, drop, row_stats, more...);
            },
            key_extra(qkv, dout, row_stats, l));
        NAPKIN_CUDA_CHECK_LAUNCH();
    }
    if constexpr ((kPasses & 2) == 0) return;
    constexpr std::size_t query_smem = Query::smem_bytes();
    cuda::allow_smem(query_kernel, query_smem, op);
    const unsigned query_grid =
        cuda::mma_detail::mma_grid(op, (l.T + Query::kQueries - 1) / Query::kQueries, l.B * l.NH);
    std::apply(
        [&](const auto&... more) {
            query_kernel<<<query_grid, Query::kThreads, query_smem, launch.stream>>>(
                dqkv, dout, out, qkv, args.lse, l, drop, more...);
        },
        query_extra(qkv, dout, nullptr, l));
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class Tiles, int kPasses = kBothPasses>
void backward(const AttentionFlashBackwardArgs<bf16_t>& args, const cuda::Launch& launch) {
    using Key = typename Tiles::KeyPass;
    using Query = typename Tiles::QueryPass;
    launch_backward<Key, Query, kPasses>("attention_fa2_candidate_backward", args, launch,
                                         attention_fa2_backward_key_kernel<Key>,
                                         attention_fa2_backward_query_kernel<Query>);
}

// Pass 2 on wgmma; pass 1 on wgmma too when Key is WgmmaKeyTiles, else the mma.sync key pass.
template <class Key, class Query, int kPasses = kBothPasses>
void backward_wgmma(const AttentionFlashBackwardArgs<bf16_t>& args, const cuda::Launch& launch) {
    const char* op = "attention_wgmma_candidate_backward";
    const std::string why = fa2_sm90a_unavailable();
    NAPKIN_CUDA_REQUIRE(why.empty(), op << ": " << why);
    auto query_kernel = [] {
        if constexpr (Query::kTma)
            return attention_wgmma_tma_backward_query_kernel<Query>;
        else
            return attention_wgmma_backward_query_kernel<Query>;
    }();
    auto query_extra =
        tma_extra<Query::kTma, Query::kQueries, Query::kBlockN, true>(op);  // Q, dout; K, V
    if constexpr (Key::kWgmma) {  // WgmmaKeyTiles, else KeyTiles
        auto key_kernel = [] {
            if constexpr (Key::kTma)
                return attention_wgmma_tma_backward_key_kernel<Key>;
            else
                return attention_wgmma_backward_key_kernel<Key>;
        }();
        // Items of Q, dout and statistics; K and V.
        auto key_extra = tma_extra<Key::kTma, Key::kQ, Key::kKeys, true, Key::kQ>(op);
        launch_backward<Key, Query, kPasses>(op, args, launch, key_kernel, query_kernel, key_extra,
                                             query_extra);
    } else {
        launch_backward<Key, Query, kPasses>(op, args, launch,
                                             attention_fa2_backward_key_kernel<Key>, query_kernel,
                                             tma_extra<false>(op), query_extra);
    }
}

void engine_forward(const AttentionFlashForwardArgs<bf16_t>& args, const cuda::Launch& launch) {
    cuda::attention_flash_mma_forward<bf16_t>(args, launch);
}
void engine_backward(const AttentionFlashBackwardArgs<bf16_t>& args, const cuda::Launch& launch) {
    cuda::attention_flash_mma_backward<bf16_t>(args, launch);
}

// kIsDefault: the engine's tiles, called through the engine's entry point (so that their kernels
// are not instantiated here again).
template <class Tiles, bool kIsDefault>
auto forward_fn() {
    if constexpr (kIsDefault)
        return &engine_forward;
    else
        return &forward<Tiles>;
}
template <class Tiles, bool kIsDefault>
auto backward_fn() {
    if constexpr (kIsDefault)
        return &engine_backward;
    else
        return &backward<Tiles>;
}

using ForwardFn = void (*)(const AttentionFlashForwardArgs<bf16_t>&, const cuda::Launch&);
using BackwardFn = void (*)(const AttentionFlashBackwardArgs<bf16_t>&, const cuda::Launch&);

// A forward's row of the table: one pass, Tiles' threads, rows and bytes.
template <class Tiles>
Fa2Candidate one_pass(const char* name, const char* tiles, bool is_default, ForwardFn fwd,
                      bool sm90a) {
    return Fa2Candidate{name,
                        Tiles::kHD,
                        false,
                        is_default,
                        tiles,
                        1,
                        {Tiles::kThreads, 0},
                        {Tiles::kBlockM, 0},
                        {Tiles::smem_bytes(), 0},
                        {Tiles::smem_read_per_mma(), 0.0},
                        fwd,
                        nullptr,
                        sm90a};
}

// A backward's row: pass 1 Key's, pass 2 Query's.
template <class Key, class Query>
Fa2Candidate two_pass(const char* name, const char* tiles, bool is_default, BackwardFn bwd,
                      bool sm90a) {
    return Fa2Candidate{name,
                        Key::kHD,
                        true,
                        is_default,
                        tiles,
                        2,
                        {Key::kThreads, Query::kThreads},
                        {Key::kKeys, Query::kQueries},
                        {Key::smem_bytes(), Query::smem_bytes()},
                        {Key::smem_read_per_mma(), Query::smem_read_per_mma()},
                        nullptr,
                        bwd,
                        sm90a};
}

template <class Tiles, bool kIsDefault = false>
Fa2Candidate forward_candidate(const char* name, const char* tiles) {
    return one_pass<Tiles>(name, tiles, kIsDefault, forward_fn<Tiles, kIsDefault>(), false);
}

template <class Tiles>
Fa2Candidate wgmma_forward_candidate(const char* name, const char* tiles) {
    return one_pass<Tiles>(name, tiles, false, &forward_wgmma<Tiles>, true);
}

// The passes alone: the engine's tiles too, instantiated here for that (the engine's entry point
// runs both).
template <class Tiles, bool kIsDefault = false>
Fa2Candidate backward_candidate(const char* name, const char* tiles) {
    Fa2Candidate c = two_pass<typename Tiles::KeyPass, typename Tiles::QueryPass>(
        name, tiles, kIsDefault, backward_fn<Tiles, kIsDefault>(), false);
    c.bwd_pass[0] = &backward<Tiles, 1>;
    c.bwd_pass[1] = &backward<Tiles, 2>;
    c.row_stats = Tiles::KeyPass::kRowStats;
    return c;
}

// Pass 2 on wgmma (WgmmaQueryTiles); pass 1 on mma.sync (KeyTiles) or wgmma (WgmmaKeyTiles).
template <class Key, class Query>
Fa2Candidate wgmma_backward_candidate(const char* name, const char* tiles) {
    Fa2Candidate c = two_pass<Key, Query>(name, tiles, false, &backward_wgmma<Key, Query>, true);
    c.bwd_pass[0] = &backward_wgmma<Key, Query, 1>;
    c.bwd_pass[1] = &backward_wgmma<Key, Query, 2>;
    c.row_stats = Key::kRowStats;
    return c;
}

using cuda::fa2::BackwardTiles;
using cuda::fa2::DefaultBackwardTiles;
using cuda::fa2::DefaultForwardTiles;
using cuda::fa2::ForwardTiles;
using cuda::fa2::KeyTiles;
using cuda::fa2::QueryTiles;

// ForwardTiles<HD, m-tiles a warp, keys a tile, stages, Q in registers, warps, min blocks>;
// KeyTiles<HD, m-tiles of keys a warp, queries an item, stages, K and V in registers, ...>;
// QueryTiles<HD, m-tiles of queries a warp, keys a tile, stages, Q and dout in registers, ...>.
using Key64 = DefaultBackwardTiles<64>::KeyPass;
using Query64 = DefaultBackwardTiles<64>::QueryPass;
using Key128 = DefaultBackwardTiles<128>::KeyPass;
using Query128 = DefaultBackwardTiles<128>::QueryPass;

// Each default first; the others differ from it as their names say (docs/CUDA.md has the
// arithmetic, ptxas's registers and spills, and the expectation for each).
const std::vector<Fa2Candidate> kCandidates = {
    forward_candidate<DefaultForwardTiles<64>, true>(
        "f64", "engine: 4 warps of 2 m-tiles, 32-key tiles, 3 stages, Q in registers"),
    forward_candidate<ForwardTiles<64, 2, 32, 3, true, 8, 1>>(
        "f64-w8", "8 warps (256 queries a block: K and V read once for twice the queries)"),
    forward_candidate<ForwardTiles<64, 2, 32, 4, true>>("f64-s4",
                                                        "4 stages (3 key tiles in flight)"),

    forward_candidate<DefaultForwardTiles<128>, true>(
        "f128", "engine: 4 warps of 1 m-tile, 64-key tiles, 2 stages, Q from the tile"),
    forward_candidate<ForwardTiles<128, 1, 64, 2, false, 8, 1>>(
        "f128-w8", "8 warps (128 queries a block: K and V read once for twice the queries)"),
    forward_candidate<ForwardTiles<128, 1, 32, 3, true>>(
        "f128-qreg", "Q in registers, 32-key tiles, 3 stages (256 B a product, not 288)"),
    forward_candidate<ForwardTiles<128, 1, 32, 3, true, 8, 1>>(
        "f128-w8-qreg", "8 warps, Q in registers, 32-key tiles, 3 stages"),
    wgmma_forward_candidate<cuda::fa2::WgmmaForwardTiles<64, 2, 128, 2>>(
        "f64-wgmma", "sm_90a wgmma: 2 warpgroups (128 queries), 128-key tiles, 2 stages"),
    wgmma_forward_candidate<cuda::fa2::WgmmaForwardTiles<128, 2, 64, 2>>(
        "f128-wgmma", "sm_90a wgmma: 2 warpgroups (128 queries), 64-key tiles, 2 stages"),
    wgmma_forward_candidate<cuda::fa2::WgmmaForwardTiles<64, 2, 128, 3, true>>(
        "f64-wgmma-ov", "f64-wgmma, 3 stages, softmax overlapped with the products"),
    wgmma_forward_candidate<cuda::fa2::WgmmaForwardTiles<128, 2, 64, 3, true>>(
        "f128-wgmma-ov", "f128-wgmma, 3 stages, softmax overlapped with the products"),
    wgmma_forward_candidate<cuda::fa2::WgmmaForwardTiles<64, 2, 128, 3, true, true>>(
        "f64-wgmma-pp",
        "f64-wgmma-ov with a producer warpgroup and the two warpgroups' products ping-ponged"),
    wgmma_forward_candidate<cuda::fa2::WgmmaForwardTiles<128, 2, 64, 3, true, true>>(
        "f128-wgmma-pp",
        "f128-wgmma-ov with a producer warpgroup and the two warpgroups' products ping-ponged"),
    wgmma_forward_candidate<cuda::fa2::WgmmaForwardTiles<64, 2, 128, 3, true, true, true>>(
        "f64-wgmma-tma", "f64-wgmma-pp, the producer's tiles by TMA (one thread, mbarriers)"),
    wgmma_forward_candidate<cuda::fa2::WgmmaForwardTiles<128, 2, 64, 3, true, true, true>>(
        "f128-wgmma-tma", "f128-wgmma-pp, the producer's tiles by TMA (one thread, mbarriers)"),
    wgmma_forward_candidate<cuda::fa2::WgmmaForwardTiles<128, 2, 128, 3, true, true, true>>(
        "f128-wgmma-tma-n128",
        "f128-wgmma-tma with 128-key tiles (FlashAttention-3's at HD 128), 225 KiB"),

    backward_candidate<DefaultBackwardTiles<64>, true>(
        "b64", "engine: pass 1 2 m-tiles, 32-query items; pass 2 2 m-tiles, 32-key tiles"),
    backward_candidate<
        BackwardTiles<KeyTiles<64, 2, 32, 3, false>, QueryTiles<64, 2, 32, 3, false>>>(
        "b64-s3", "both passes 3 stages"),
    backward_candidate<
        BackwardTiles<KeyTiles<64, 2, 32, 2, false, 8, 1>, QueryTiles<64, 2, 32, 2, false, 8, 1>>>(
        "b64-w8", "both passes 8 warps (256 keys, 256 queries a block)"),
    backward_candidate<BackwardTiles<Key64, QueryTiles<64, 2, 48, 2, false>>>(
        "b64-q-n48", "pass 2: 48-key tiles (185 B a product, not 213)"),
    backward_candidate<BackwardTiles<KeyTiles<64, 2, 32, 3, false, 4, 2, true>, Query64>>(
        "b64-rs",
        "pass 1: D and lse precomputed (Q, dout an item, not out too), 3 stages in 56.75 KiB"),
    wgmma_backward_candidate<Key64, cuda::fa2::WgmmaQueryTiles<64, 2, 64, 2>>(
        "b64-wgmma-q", "pass 2 on sm_90a wgmma: 2 warpgroups (128 queries), 64-key tiles"),
    wgmma_backward_candidate<Key64, cuda::fa2::WgmmaQueryTiles<64, 2, 64, 3, true>>(
        "b64-wgmma-qov", "b64-wgmma-q, 3 stages, dS overlapped with the products"),
    wgmma_backward_candidate<Key64, cuda::fa2::WgmmaQueryTiles<64, 2, 64, 3, true, true>>(
        "b64-wgmma-qpp", "b64-wgmma-qov with a producer warpgroup and the consumers ping-ponged"),
    wgmma_backward_candidate<Key64, cuda::fa2::WgmmaQueryTiles<64, 2, 64, 3, true, true, true>>(
        "b64-wgmma-qtma", "b64-wgmma-qpp, the producer's tiles by TMA (one thread, mbarriers)"),
    wgmma_backward_candidate<cuda::fa2::WgmmaKeyTiles<64, 2, 64, 2>,
                             cuda::fa2::WgmmaQueryTiles<64, 2, 64, 2>>(
        "b64-wgmma",
        "both passes on sm_90a wgmma: pass 1 2 warpgroups (128 keys), 64-query "
        "items; pass 2 as b64-wgmma-q"),
    wgmma_backward_candidate<cuda::fa2::WgmmaKeyTiles<64, 2, 32, 3, true>,
                             cuda::fa2::WgmmaQueryTiles<64, 2, 64, 2>>(
        "b64-wgmma-k32ov",
        "b64-wgmma, pass 1 with 32-query items, 3 stages and the next item's S^T, dP^T under the "
        "products"),
    wgmma_backward_candidate<cuda::fa2::WgmmaKeyTiles<64, 2, 64, 2, false, true>,
                             cuda::fa2::WgmmaQueryTiles<64, 2, 64, 2>>(
        "b64-wgmma-rs", "b64-wgmma, pass 1 with D and lse precomputed (Q, dout an item)"),
    wgmma_backward_candidate<cuda::fa2::WgmmaKeyTiles<64, 2, 32, 3, true, true>,
                             cuda::fa2::WgmmaQueryTiles<64, 2, 64, 2>>(
        "b64-wgmma-k32ov-rs", "b64-wgmma-k32ov, pass 1 with D and lse precomputed"),
    wgmma_backward_candidate<cuda::fa2::WgmmaKeyTiles<64, 2, 64, 3, true, true>,
                             cuda::fa2::WgmmaQueryTiles<64, 2, 64, 2>>(
        "b64-wgmma-ov-rs", "b64-wgmma-k32ov-rs with 64-query items (96 B a product, not 128)"),
    wgmma_backward_candidate<cuda::fa2::WgmmaKeyTiles<64, 2, 32, 3, true, true, true>,
                             cuda::fa2::WgmmaQueryTiles<64, 2, 64, 2>>(
        "b64-wgmma-kpp",
        "b64-wgmma-k32ov-rs with a producer warpgroup and the consumers ping-ponged in pass 1"),
    wgmma_backward_candidate<cuda::fa2::WgmmaKeyTiles<64, 2, 32, 3, true, true, true, true>,
                             cuda::fa2::WgmmaQueryTiles<64, 2, 64, 3, true, true, true>>(
        "b64-wgmma-tma",
        "b64-wgmma-kpp and b64-wgmma-qtma: both passes' producers by TMA (one thread, mbarriers)"),

    backward_candidate<DefaultBackwardTiles<128>, true>(
        "b128", "engine: pass 1 1 m-tile, 32-query items; pass 2 1 m-tile, 64-key tiles"),
    backward_candidate<BackwardTiles<KeyTiles<128, 1, 32, 2, false, 8, 1>,
                                     QueryTiles<128, 1, 64, 2, false, 8, 1>>>(
        "b128-w8", "both passes 8 warps (128 keys, 128 queries a block)"),
    backward_candidate<BackwardTiles<Key128, QueryTiles<128, 1, 32, 3, true>>>(
        "b128-q-reg", "pass 2: Q and dout in registers, 32-key tiles, 3 stages (256 B, not 299)"),
    backward_candidate<BackwardTiles<KeyTiles<128, 1, 32, 3, false>, Query128>>("b128-k-s3",
                                                                                "pass 1: 3 stages"),
    backward_candidate<BackwardTiles<KeyTiles<128, 1, 32, 3, false, 4, 2, true>, Query128>>(
        "b128-k-rs", "pass 1: D and lse precomputed (Q, dout an item, not out too), 3 stages"),
    wgmma_backward_candidate<Key128, cuda::fa2::WgmmaQueryTiles<128, 2, 64, 2>>(
        "b128-wgmma-q", "pass 2 on sm_90a wgmma: 2 warpgroups (128 queries), 64-key tiles"),
    wgmma_backward_candidate<Key128, cuda::fa2::WgmmaQueryTiles<128, 2, 64, 3, true>>(
        "b128-wgmma-qov", "b128-wgmma-q, 3 stages, dS overlapped with the products"),
    wgmma_backward_candidate<Key128, cuda::fa2::WgmmaQueryTiles<128, 2, 64, 3, true, true>>(
        "b128-wgmma-qpp", "b128-wgmma-qov with a producer warpgroup and the consumers ping-ponged"),
    wgmma_backward_candidate<Key128, cuda::fa2::WgmmaQueryTiles<128, 2, 64, 3, true, true, true>>(
        "b128-wgmma-qtma", "b128-wgmma-qpp, the producer's tiles by TMA (one thread, mbarriers)"),
    wgmma_backward_candidate<cuda::fa2::WgmmaKeyTiles<128, 2, 64, 2>,
                             cuda::fa2::WgmmaQueryTiles<128, 2, 64, 2>>(
        "b128-wgmma",
        "both passes on sm_90a wgmma: pass 1 2 warpgroups (128 keys), 64-query "
        "items; pass 2 as b128-wgmma-q"),
    wgmma_backward_candidate<cuda::fa2::WgmmaKeyTiles<128, 2, 32, 2>,
                             cuda::fa2::WgmmaQueryTiles<128, 2, 64, 2>>(
        "b128-wgmma-k32",
        "b128-wgmma with 32-query items in pass 1 (S^T and dP^T in half the registers)"),
    wgmma_backward_candidate<cuda::fa2::WgmmaKeyTiles<128, 2, 32, 3, true>,
                             cuda::fa2::WgmmaQueryTiles<128, 2, 64, 2>>(
        "b128-wgmma-k32ov",
        "b128-wgmma-k32, pass 1 with 3 stages and the next item's S^T, dP^T under the products"),
    wgmma_backward_candidate<cuda::fa2::WgmmaKeyTiles<128, 2, 32, 2, false, true>,
                             cuda::fa2::WgmmaQueryTiles<128, 2, 64, 2>>(
        "b128-wgmma-k32-rs", "b128-wgmma-k32, pass 1 with D and lse precomputed (Q, dout an item)"),
    wgmma_backward_candidate<cuda::fa2::WgmmaKeyTiles<128, 2, 32, 3, true, true>,
                             cuda::fa2::WgmmaQueryTiles<128, 2, 64, 2>>(
        "b128-wgmma-k32ov-rs", "b128-wgmma-k32ov, pass 1 with D and lse precomputed"),
    wgmma_backward_candidate<cuda::fa2::WgmmaKeyTiles<128, 2, 32, 3, true, true, true>,
                             cuda::fa2::WgmmaQueryTiles<128, 2, 64, 2>>(
        "b128-wgmma-kpp",
        "b128-wgmma-k32ov-rs with a producer warpgroup and the consumers ping-ponged in pass 1"),
    wgmma_backward_candidate<cuda::fa2::WgmmaKeyTiles<128, 2, 32, 3, true, true, true, true>,
                             cuda::fa2::WgmmaQueryTiles<128, 2, 64, 3, true, true, true>>(
        "b128-wgmma-tma",
        "b128-wgmma-kpp and b128-wgmma-qtma: both passes' producers by TMA (one thread, "
        "mbarriers)"),
};

}  // namespace

std::int64_t row_stats_floats(const AttentionDims& dims) {
    return cuda::fa2::RowStatsLayout::floats(dims.B, dims.NH, dims.T);
}

void row_stats(float* stats, const bf16_t* dout, const bf16_t* out, const float* lse,
               const AttentionDims& dims, const cuda::Launch& launch) {
    const char* op = "attention_fa2_row_stats";
    const MmaLayout l = checked_layout(op, dims, dims.HD, {dout, out});
    if (l.B * l.T == 0) return;
    (l.HD == 64 ? launch_row_stats<64> : launch_row_stats<128>)(op, stats, cuda::dev(dout),
                                                                cuda::dev(out), lse, l,
                                                                launch.stream);
}

const std::vector<Fa2Candidate>& fa2_candidates() {
    return kCandidates;
}

std::string fa2_sm90a_unavailable() {
    static const std::string why =
        cuda::wgmma::unavailable([](int* flag) { sm90a_flag_kernel<<<1, 1>>>(flag); });
    return why;
}

}  // namespace napkin::bench
