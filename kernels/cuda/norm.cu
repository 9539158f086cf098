// LayerNorm and RMSNorm on the GPU (declared in kernels/norm.h; the CPU twin, the spec, is
// kernels/cpu/norm.cpp). The forward (the residual add fused into it, or not) and the input
// gradient: one warp per row, the row in registers as 16-byte vectors, where C is a whole number
// of vectors of at most kRowVecs per lane and the pointers are 16-byte aligned (GPT-2's rows);
// otherwise one block per row. Statistics in fp32 by warp or block reductions, two passes over
// the row as on the CPU.
//
// The backward in one pass where the warp path applies and the scratch holds the partials
// (norm_backward_scratch_bytes): blocks of norm_backward_rows_per_block(N) rows, each warp adding
// dout * xhat and dout from its registers into its own shared-memory column sums, the block's
// warps' sums added in warp order into one partial row per block, then the blocks' partials per
// column in block order into the gradient. Otherwise two passes: the input gradient, then the
// parameter gradients by blocks that own 32 columns and kNormRowsPerChunk rows, their fixed-order
// fp32 sums then added per column in chunk order by a second kernel into the gradient once (given
// scratch for the chunks' sums), or by blocks that own 32 columns and walk every row (without).
// One writer per element, no atomics: deterministic.
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/norm.h"

namespace napkin::cuda {

namespace {

constexpr int kMaxRowThreads = 512;
constexpr int kParamCols = 32;
constexpr int kParamRows = 16;

// One row (blockIdx.x) of the forward, the block's threads each holding their part of the row's
// sum (layernorm; mean null: RMSNorm, no centring, the sum unused).
template <class D>
__device__ void norm_forward_row(D* out, float* mean, float* rstd, const D* inp, const D* weight,
                                 const D* bias, std::int64_t C, float eps, float sum,
                                 float* shared) {
    const std::int64_t row = blockIdx.x;
    const D* x = inp + row * C;  // (C)
    D* y = out + row * C;        // (C)
    const float inv_c = 1.0f / static_cast<float>(C);
    float m = 0.0f;
    if (mean != nullptr) m = block_sum(sum, shared) * inv_c;
    float var = 0.0f;  // two passes: no cancellation when |mean| >> std
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        const float d = to_f32(x[c]) - m;
        var += d * d;
    }
    const float s = 1.0f / sqrtf(block_sum(var, shared) * inv_c + eps);
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float v = (to_f32(x[c]) - m) * s * to_f32(weight[c]);
        if (bias != nullptr) v += to_f32(bias[c]);
        y[c] = from_f32<D>(v);
    }
    if (threadIdx.x == 0) {
        if (mean != nullptr) mean[row] = m;
        rstd[row] = s;
    }
}

template <class D>
__global__ void norm_forward_kernel(D* out, float* mean, float* rstd, const D* inp, const D* weight,
                                    const D* bias, std::int64_t C, float eps) {
    __shared__ float shared[kWarpSize];
    const D* x = inp + blockIdx.x * C;  // (C)
    float sum = 0.0f;
    if (mean != nullptr) {
        for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x)
            sum += to_f32(x[c]);
    }
    norm_forward_row(out, mean, rstd, inp, weight, bias, C, eps, sum, shared);
}

// x (the row) = a + b rounded, the sum taken from the rounded values in the same pass; each
// thread reads back only the elements it wrote, so the row's passes need no barrier.
template <class D>
__global__ void residual_layernorm_forward_kernel(D* out, float* mean, float* rstd, D* x,
                                                  const D* a, const D* b, const D* weight,
                                                  const D* bias, std::int64_t C, float eps) {
    __shared__ float shared[kWarpSize];
    const std::int64_t at = blockIdx.x * C;
    float sum = 0.0f;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        const D v = from_f32<D>(to_f32(a[at + c]) + to_f32(b[at + c]));
        x[at + c] = v;
        sum += to_f32(v);
    }
    norm_forward_row(out, mean, rstd, x, weight, bias, C, eps, sum, shared);
}

// dinp (row) += s * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * weight;
// RMSNorm (mean null) drops the mean(dnorm) term.
template <class D>
__global__ void norm_backward_kernel(D* dinp, const D* dout, const D* inp, const D* weight,
                                     const float* mean, const float* rstd, std::int64_t C) {
    __shared__ float shared[kWarpSize];
    const std::int64_t row = blockIdx.x;
    const D* x = inp + row * C;    // (C)
    const D* dy = dout + row * C;  // (C)
    D* dx = dinp + row * C;        // (C)
    const float m = mean != nullptr ? mean[row] : 0.0f;
    const float s = rstd[row];
    const float inv_c = 1.0f / static_cast<float>(C);
    float dn = 0.0f, dn_xhat = 0.0f;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        const float xhat = (to_f32(x[c]) - m) * s;
        const float dnorm = to_f32(dy[c]) * to_f32(weight[c]);
        dn += dnorm;
        dn_xhat += dnorm * xhat;
    }
    const float dnorm_mean = mean != nullptr ? block_sum(dn, shared) * inv_c : 0.0f;
    const float dnorm_xhat_mean = block_sum(dn_xhat, shared) * inv_c;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        const float xhat = (to_f32(x[c]) - m) * s;
        const float dnorm = to_f32(dy[c]) * to_f32(weight[c]);
        const float g = (dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * s;
        dx[c] = from_f32<D>(to_f32(dx[c]) + g);
    }
}

// The warp-per-row kernels (GPT-2's C = 768 and every C up to 2048 in bf16/fp16, 1024 in fp32,
// of whole 16-byte vectors): each warp owns one row, lane l holding the row's vectors l, l + 32,
// ... in registers (Pack, up to kRowVecs per lane), so the row is read from memory once, the
// statistics are warp shuffles with no block barrier, and every load and store is 16 bytes.
// Block: kRowWarps warps, one row each. Sums: each lane its vectors in order, then warp_sum.
constexpr int kRowVecs = 8;
constexpr int kRowWarps = 8;
static_assert(kWarpSize * kRowVecs * 16 == kNormWarpRowBytes, "kernels/norm.h's widest warp row");

template <class D>
bool warp_per_row(std::int64_t C) {
    return C % kVec<D> == 0 && C / kVec<D> <= static_cast<std::int64_t>(kWarpSize) * kRowVecs;
}

__device__ __forceinline__ std::int64_t warp_row() {
    return blockIdx.x * static_cast<std::int64_t>(kRowWarps) + threadIdx.x / kWarpSize;
}

// Forward of row warp_row(): x = a, or round(a + b) written to x_out where b is given (the fused
// residual); then out = (x - mean) * rstd * weight [+ bias] as norm_forward_row computes it
// (mean null: RMSNorm, mean 0).
template <class D>
__global__ void norm_forward_warp_kernel(D* out, float* mean, float* rstd, D* x_out, const D* a,
                                         const D* b, const D* weight, const D* bias, std::int64_t N,
                                         std::int64_t C, float eps) {
    constexpr int V = kVec<D>;
    const std::int64_t row = warp_row();
    if (row >= N) return;  // the whole warp, which synchronizes only with itself
    const int lane = static_cast<int>(threadIdx.x % kWarpSize);
    const std::int64_t at = row * C;
    const float inv_c = 1.0f / static_cast<float>(C);
    Pack<D, V> x[kRowVecs] = {};  // zeros past the row: never read, never warned of
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kRowVecs; ++k) {
        const std::int64_t c = static_cast<std::int64_t>(k * kWarpSize + lane) * V;
        if (c >= C) continue;
        x[k] = load_pack<V>(a + at + c);
        if (b != nullptr) {
            const Pack<D, V> y = load_pack<V>(b + at + c);
#pragma unroll
            for (int j = 0; j < V; ++j)
                x[k].v[j] = from_f32<D>(to_f32(x[k].v[j]) + to_f32(y.v[j]));
            store_pack<V>(x_out + at + c, x[k]);
        }
#pragma unroll
        for (int j = 0; j < V; ++j)
            sum += to_f32(x[k].v[j]);
    }
    const float m = mean != nullptr ? warp_sum(sum) * inv_c : 0.0f;
    float var = 0.0f;  // two passes, from registers: no cancellation when |mean| >> std
#pragma unroll
    for (int k = 0; k < kRowVecs; ++k) {
        if (static_cast<std::int64_t>(k * kWarpSize + lane) * V >= C) continue;
#pragma unroll
        for (int j = 0; j < V; ++j) {
            const float d = to_f32(x[k].v[j]) - m;
            var += d * d;
        }
    }
    const float s = 1.0f / sqrtf(warp_sum(var) * inv_c + eps);
#pragma unroll
    for (int k = 0; k < kRowVecs; ++k) {
        const std::int64_t c = static_cast<std::int64_t>(k * kWarpSize + lane) * V;
        if (c >= C) continue;
        const Pack<D, V> w = load_pack<V>(weight + c);
        Pack<D, V> bv{};
        if (bias != nullptr) bv = load_pack<V>(bias + c);
        Pack<D, V> y;
#pragma unroll
        for (int j = 0; j < V; ++j) {
            float v = (to_f32(x[k].v[j]) - m) * s * to_f32(w.v[j]);
            if (bias != nullptr) v += to_f32(bv.v[j]);
            y.v[j] = from_f32<D>(v);
        }
        store_pack<V>(out + at + c, y);
    }
    if (lane == 0) {
        if (mean != nullptr) mean[row] = m;
        rstd[row] = s;
    }
}

// norm_backward_kernel's input gradient for one row, by one warp, inp and dout held in
// registers. With acc (the warp's column sums, lane-major: the sum of column (k 32 + lane) V + j
// at acc[(k V + j) 32 + lane], so a warp's 32 lanes touch 32 banks), dout * xhat is added into
// acc[0 ..) and, with db (acc + cpad), dout into db: each lane only its own columns, so no
// barrier; the same registers, no second read of inp or dout.
template <int Vecs, class D>
__device__ __forceinline__ void norm_backward_row(D* dinp, const D* dout, const D* inp,
                                                  const D* weight, const float* mean,
                                                  const float* rstd, std::int64_t row,
                                                  std::int64_t C, int lane, float* acc, float* db) {
    constexpr int V = kVec<D>;
    const std::int64_t at = row * C;
    const float m = mean != nullptr ? mean[row] : 0.0f;
    const float s = rstd[row];
    const float inv_c = 1.0f / static_cast<float>(C);
    Pack<D, V> x[Vecs] = {}, dy[Vecs] = {};
    float dn = 0.0f, dn_xhat = 0.0f;
#pragma unroll
    for (int k = 0; k < Vecs; ++k) {
        const std::int64_t c = static_cast<std::int64_t>(k * kWarpSize + lane) * V;
        if (c >= C) continue;
        x[k] = load_pack<V>(inp + at + c);
        dy[k] = load_pack<V>(dout + at + c);
        const Pack<D, V> w = load_pack<V>(weight + c);
#pragma unroll
        for (int j = 0; j < V; ++j) {
            const float xhat = (to_f32(x[k].v[j]) - m) * s;
            const float dnorm = to_f32(dy[k].v[j]) * to_f32(w.v[j]);
            dn += dnorm;
            dn_xhat += dnorm * xhat;
            if (acc != nullptr) acc[(k * V + j) * kWarpSize + lane] += to_f32(dy[k].v[j]) * xhat;
            if (db != nullptr) db[(k * V + j) * kWarpSize + lane] += to_f32(dy[k].v[j]);
        }
    }
    const float dnorm_mean = mean != nullptr ? warp_sum(dn) * inv_c : 0.0f;
    const float dnorm_xhat_mean = warp_sum(dn_xhat) * inv_c;
#pragma unroll
    for (int k = 0; k < Vecs; ++k) {
        const std::int64_t c = static_cast<std::int64_t>(k * kWarpSize + lane) * V;
        if (c >= C) continue;
        const Pack<D, V> w = load_pack<V>(weight + c);
        Pack<D, V> dx = load_pack<V>(dinp + at + c);
#pragma unroll
        for (int j = 0; j < V; ++j) {
            const float xhat = (to_f32(x[k].v[j]) - m) * s;
            const float dnorm = to_f32(dy[k].v[j]) * to_f32(w.v[j]);
            const float g = (dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * s;
            dx.v[j] = from_f32<D>(to_f32(dx.v[j]) + g);
        }
        store_pack<V>(dinp + at + c, dx);
    }
}

template <class D>
__global__ void norm_backward_warp_kernel(D* dinp, const D* dout, const D* inp, const D* weight,
                                          const float* mean, const float* rstd, std::int64_t N,
                                          std::int64_t C) {
    const std::int64_t row = warp_row();
    if (row >= N) return;
    const int lane = static_cast<int>(threadIdx.x % kWarpSize);
    norm_backward_row<kRowVecs>(dinp, dout, inp, weight, mean, rstd, row, C, lane,
                                static_cast<float*>(nullptr), static_cast<float*>(nullptr));
}

// The one-pass backward: block b owns rows [b R, b R + R) (R = rows, the last block fewer), its
// warp w the rows b R + w, b R + w + warps, ...; each warp computes dinp of its rows as
// norm_backward_warp_kernel does and, from the same registers, sums dout * xhat (and dout, where
// db_part is given) per column into its own slice of shared memory (cpad floats a sum: C rounded
// up to whole 32-lane rows of vectors). Then the block adds its warps' sums in warp order and
// writes them once: dw_part[b][col], db_part[b][col]. Every sum in a fixed order, no atomics.
// Block: warps x 32 threads; dynamic shared memory warps (1 or 2) cpad floats. Vecs: the most
// vectors of a row a lane holds (registers); two blocks a multiprocessor where Vecs <= 4 (at most
// 128 registers: 119 at sm_90 for bf16, no spills), the widest rows taking what they need.
template <int Vecs, class D>
__global__ void __launch_bounds__(kRowWarps* kWarpSize, Vecs <= 4 ? 2 : 1)
    norm_backward_one_pass_kernel(D* dinp, float* dw_part, float* db_part, const D* dout,
                                  const D* inp, const D* weight, const float* mean,
                                  const float* rstd, std::int64_t N, std::int64_t C,
                                  std::int64_t cpad, std::int64_t rows) {
    extern __shared__ float sums[];  // [warps][dw, db][cpad], lane-major as norm_backward_row's
    const int warps = static_cast<int>(blockDim.x / kWarpSize);
    const int warp = static_cast<int>(threadIdx.x / kWarpSize);
    const int lane = static_cast<int>(threadIdx.x % kWarpSize);
    const int parts = db_part != nullptr ? 2 : 1;
    float* acc = sums + static_cast<std::int64_t>(warp) * parts * cpad;
    float* db = db_part != nullptr ? acc + cpad : nullptr;
    for (std::int64_t i = lane; i < parts * cpad; i += kWarpSize)
        acc[i] = 0.0f;  // each lane its own slots (i % 32 == lane), which only it touches
    const std::int64_t r0 = blockIdx.x * rows;
    const std::int64_t r1 = r0 + rows < N ? r0 + rows : N;
    for (std::int64_t row = r0 + warp; row < r1; row += warps)
        norm_backward_row<Vecs>(dinp, dout, inp, weight, mean, rstd, row, C, lane, acc, db);
    __syncthreads();
    constexpr int V = kVec<D>;
    for (std::int64_t i = threadIdx.x; i < cpad; i += blockDim.x) {
        // Slot i = (k V + j) 32 + l holds column (k 32 + l) V + j.
        const std::int64_t l = i % kWarpSize, kj = i / kWarpSize;
        const std::int64_t col = (kj / V * kWarpSize + l) * V + kj % V;
        if (col >= C) continue;
        float dw = 0.0f, dbs = 0.0f;
        for (int w = 0; w < warps; ++w) {
            dw += sums[static_cast<std::int64_t>(w) * parts * cpad + i];
            if (db_part != nullptr)
                dbs += sums[(static_cast<std::int64_t>(w) * parts + 1) * cpad + i];
        }
        dw_part[blockIdx.x * C + col] = dw;
        if (db_part != nullptr) db_part[blockIdx.x * C + col] = dbs;
    }
}

unsigned warp_row_blocks(std::int64_t N) {
    return static_cast<unsigned>((N + kRowWarps - 1) / kRowWarps);
}

// The block's column sums over rows [r0, r1) of dout * xhat (dw) and of dout (db), xhat from
// inp, mean (null: RMSNorm) and rstd: threadIdx.y walks the rows Rows apart, then the threads of
// row 0 add the Rows partials in order. True on the threads left holding a column's sums
// (threadIdx.y 0, col < C). Block (kParamCols, Rows), the whole block calling.
template <int Rows, class D>
__device__ bool column_sums(float& dw_sum, float& db_sum, const D* dout, const D* inp,
                            const float* mean, const float* rstd, std::int64_t C, std::int64_t col,
                            std::int64_t r0, std::int64_t r1) {
    __shared__ float dw_part[Rows][kParamCols];
    __shared__ float db_part[Rows][kParamCols];
    float dw = 0.0f, db = 0.0f;
    if (col < C) {
        for (std::int64_t n = r0 + threadIdx.y; n < r1; n += Rows) {
            const float g = to_f32(dout[n * C + col]);
            const float m = mean != nullptr ? mean[n] : 0.0f;
            dw += g * (to_f32(inp[n * C + col]) - m) * rstd[n];
            db += g;
        }
    }
    dw_part[threadIdx.y][threadIdx.x] = dw;
    db_part[threadIdx.y][threadIdx.x] = db;
    __syncthreads();
    if (threadIdx.y != 0 || col >= C) return false;
    dw_sum = 0.0f;
    db_sum = 0.0f;
    for (int r = 0; r < Rows; ++r) {
        dw_sum += dw_part[r][threadIdx.x];
        db_sum += db_part[r][threadIdx.x];
    }
    return true;
}

// dweight (C) += sum over rows of dout * xhat; dbias (C) += sum over rows of dout (either null).
// Block (32, 16): threadIdx.x one of the block's 32 columns, threadIdx.y a stride of rows.
template <class D>
__global__ void norm_backward_params_kernel(D* dweight, D* dbias, const D* dout, const D* inp,
                                            const float* mean, const float* rstd, std::int64_t N,
                                            std::int64_t C) {
    const std::int64_t col = blockIdx.x * static_cast<std::int64_t>(kParamCols) + threadIdx.x;
    float dw_sum, db_sum;
    if (!column_sums<kParamRows>(dw_sum, db_sum, dout, inp, mean, rstd, C, col, 0, N)) return;
    if (dweight != nullptr) dweight[col] = from_f32<D>(to_f32(dweight[col]) + dw_sum);
    if (dbias != nullptr) dbias[col] = from_f32<D>(to_f32(dbias[col]) + db_sum);
}

// Stage 1 of the parameter gradients with scratch: block (x, chunk) sums rows [chunk R, chunk R +
// R) of 32 columns into dw_part[chunk][col] and db_part[chunk][col] (R = rows, at least
// kNormRowsPerChunk). Block (32, 8): threadIdx.x a column, threadIdx.y a stride of the rows.
constexpr int kChunkRows = 8;

template <class D>
__global__ void norm_backward_params_chunk_kernel(float* dw_part, float* db_part, const D* dout,
                                                  const D* inp, const float* mean,
                                                  const float* rstd, std::int64_t N, std::int64_t C,
                                                  std::int64_t rows) {
    const std::int64_t col = blockIdx.x * static_cast<std::int64_t>(kParamCols) + threadIdx.x;
    const std::int64_t chunk = blockIdx.y;
    const std::int64_t r0 = chunk * rows;
    const std::int64_t r1 = r0 + rows < N ? r0 + rows : N;
    float dw_sum, db_sum;
    if (!column_sums<kChunkRows>(dw_sum, db_sum, dout, inp, mean, rstd, C, col, r0, r1)) return;
    dw_part[chunk * C + col] = dw_sum;
    db_part[chunk * C + col] = db_sum;
}

// Stage 2: per column, the chunks' sums added in chunk order, then into the gradient once.
template <class D>
__global__ void norm_backward_params_sum_kernel(D* dweight, D* dbias, const float* dw_part,
                                                const float* db_part, std::int64_t chunks,
                                                std::int64_t C) {
    const std::int64_t col = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
    if (col >= C) return;
    float dw = 0.0f, db = 0.0f;
    for (std::int64_t k = 0; k < chunks; ++k) {
        dw += dw_part[k * C + col];
        if (dbias != nullptr) db += db_part[k * C + col];
    }
    if (dweight != nullptr) dweight[col] = from_f32<D>(to_f32(dweight[col]) + dw);
    if (dbias != nullptr) dbias[col] = from_f32<D>(to_f32(dbias[col]) + db);
}

void check_shape(const char* op, std::int64_t N, std::int64_t C) {
    NAPKIN_CUDA_REQUIRE(N >= 0 && C > 0, op << ": N " << N << ", C " << C);
    NAPKIN_CUDA_REQUIRE(N <= kMaxGridX, op << ": N " << N << " rows exceed one grid");
}

template <class D>
void launch_forward(D* out, float* mean, float* rstd, const D* inp, const D* weight, const D* bias,
                    std::int64_t N, std::int64_t C, float eps, cudaStream_t stream) {
    if (N == 0) return;
    if (warp_per_row<D>(C) && aligned16(out, inp, weight, bias)) {
        norm_forward_warp_kernel<<<warp_row_blocks(N), kRowWarps * kWarpSize, 0, stream>>>(
            out, mean, rstd, static_cast<D*>(nullptr), inp, static_cast<const D*>(nullptr), weight,
            bias, N, C, eps);
        NAPKIN_CUDA_CHECK_LAUNCH();
        return;
    }
    norm_forward_kernel<<<static_cast<unsigned>(N), block_for_row(C, kMaxRowThreads), 0, stream>>>(
        out, mean, rstd, inp, weight, bias, C, eps);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

// The one-pass kernel's shared memory: each warp's sums (dw, and db where asked) of cpad floats,
// as many warps (at most kRowWarps) as fit in kOnePassSmemBytes, which every GPU from sm_80 on
// grants a block (99 KiB on sm_86/89). GPT-2's C = 768 with a bias: 8 warps, 48 KiB.
constexpr std::int64_t kOnePassSmemBytes = 96 << 10;

struct OnePassShape {
    int warps = 0;
    std::int64_t cpad = 0;  // C rounded up to a whole number of 32-lane rows of vectors
    std::size_t smem_bytes = 0;
};

template <class D>
OnePassShape one_pass_shape(std::int64_t C, bool with_db) {
    constexpr std::int64_t lane_row = static_cast<std::int64_t>(kWarpSize) * kVec<D>;
    OnePassShape p;
    p.cpad = (C + lane_row - 1) / lane_row * lane_row;
    const std::int64_t per_warp =
        (with_db ? 2 : 1) * p.cpad * static_cast<std::int64_t>(sizeof(float));
    const std::int64_t fit = kOnePassSmemBytes / per_warp;
    p.warps = static_cast<int>(fit < kRowWarps ? (fit < 1 ? 1 : fit) : kRowWarps);
    p.smem_bytes = static_cast<std::size_t>(p.warps * per_warp);
    return p;
}

// True (and launched) where the one-pass kernel applies: parameter gradients wanted, rows for the
// warp path, aligned pointers and scratch for the partials.
template <class D>
bool launch_one_pass(D* dinp, D* dweight, D* dbias, const D* dout, const D* inp, const D* weight,
                     const float* mean, const float* rstd, std::int64_t N, std::int64_t C,
                     cudaStream_t stream, void* scratch, std::size_t scratch_bytes) {
    if (N == 0 || (dweight == nullptr && dbias == nullptr)) return false;
    if (!warp_per_row<D>(C) || !aligned16(dinp, dout, inp, weight)) return false;
    if (scratch == nullptr || scratch_bytes < norm_backward_scratch_bytes(N, C)) return false;
    const std::int64_t rows = norm_backward_rows_per_block(N);
    const std::int64_t blocks = (N + rows - 1) / rows;
    auto* dw_part = static_cast<float*>(scratch);
    float* db_part = dbias != nullptr ? dw_part + blocks * C : nullptr;
    const OnePassShape p = one_pass_shape<D>(C, dbias != nullptr);
    // Registers for the lane's vectors of the row: 2, 4 or kRowVecs (GPT-2's C = 768 in bf16:
    // 3 a lane, the 4 instance), so narrow rows do not pay for the widest's.
    const std::int64_t vecs = (C / kVec<D> + kWarpSize - 1) / kWarpSize;
    auto* kernel = vecs <= 2   ? norm_backward_one_pass_kernel<2, D>
                   : vecs <= 4 ? norm_backward_one_pass_kernel<4, D>
                               : norm_backward_one_pass_kernel<kRowVecs, D>;
    allow_smem(kernel, p.smem_bytes, "layernorm/rmsnorm backward");
    kernel<<<static_cast<unsigned>(blocks), p.warps * kWarpSize, p.smem_bytes, stream>>>(
        dinp, dw_part, db_part, dout, inp, weight, mean, rstd, N, C, p.cpad, rows);
    NAPKIN_CUDA_CHECK_LAUNCH();
    constexpr int kSumBlock = 256;
    norm_backward_params_sum_kernel<<<static_cast<unsigned>((C + kSumBlock - 1) / kSumBlock),
                                      kSumBlock, 0, stream>>>(dweight, dbias, dw_part, db_part,
                                                              blocks, C);
    NAPKIN_CUDA_CHECK_LAUNCH();
    return true;
}

// The backward: one pass where launch_one_pass applies (one_pass), else the input gradient then
// the parameter gradients, which read inp and dout a second time.
template <class D>
void launch_backward(D* dinp, D* dweight, D* dbias, const D* dout, const D* inp, const D* weight,
                     const float* mean, const float* rstd, std::int64_t N, std::int64_t C,
                     cudaStream_t stream, void* scratch, std::size_t scratch_bytes, bool one_pass) {
    if (one_pass && launch_one_pass(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C,
                                    stream, scratch, scratch_bytes))
        return;
    if (N > 0 && warp_per_row<D>(C) && aligned16(dinp, dout, inp, weight)) {
        norm_backward_warp_kernel<<<warp_row_blocks(N), kRowWarps * kWarpSize, 0, stream>>>(
            dinp, dout, inp, weight, mean, rstd, N, C);
        NAPKIN_CUDA_CHECK_LAUNCH();
    } else if (N > 0) {
        norm_backward_kernel<<<static_cast<unsigned>(N), block_for_row(C, kMaxRowThreads), 0,
                               stream>>>(dinp, dout, inp, weight, mean, rstd, C);
        NAPKIN_CUDA_CHECK_LAUNCH();
    }
    if (dweight == nullptr && dbias == nullptr) return;
    // Chunks of kNormRowsPerChunk rows, or longer where the scratch holds fewer chunks' sums.
    const std::int64_t fit = static_cast<std::int64_t>(scratch_bytes / (2 * sizeof(float))) / C;
    std::int64_t rows = kNormRowsPerChunk;
    if (fit >= 2 && fit * rows < N) rows = (N + fit - 1) / fit;
    const std::int64_t chunks = (N + rows - 1) / rows;
    if (scratch != nullptr && chunks > 1 && chunks <= fit && chunks <= 65535) {
        auto* dw_part = static_cast<float*>(scratch);
        float* db_part = dw_part + chunks * C;
        const dim3 grid(static_cast<unsigned>((C + kParamCols - 1) / kParamCols),
                        static_cast<unsigned>(chunks));
        norm_backward_params_chunk_kernel<<<grid, dim3(kParamCols, kChunkRows), 0, stream>>>(
            dw_part, db_part, dout, inp, mean, rstd, N, C, rows);
        NAPKIN_CUDA_CHECK_LAUNCH();
        constexpr int kSumBlock = 256;
        norm_backward_params_sum_kernel<<<static_cast<unsigned>((C + kSumBlock - 1) / kSumBlock),
                                          kSumBlock, 0, stream>>>(dweight, dbias, dw_part, db_part,
                                                                  chunks, C);
        NAPKIN_CUDA_CHECK_LAUNCH();
        return;
    }
    const dim3 block(kParamCols, kParamRows);
    const auto grid = static_cast<unsigned>((C + kParamCols - 1) / kParamCols);
    norm_backward_params_kernel<<<grid, block, 0, stream>>>(dweight, dbias, dout, inp, mean, rstd,
                                                            N, C);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class T>
void layernorm_backward_on(const LayernormBackwardArgs<T>& args, const Launch& launch,
                           bool one_pass) {
    const auto& [dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, scratch,
                 scratch_bytes] = args;
    check_shape("layernorm_backward", N, C);
    NAPKIN_CUDA_REQUIRE(mean != nullptr, "layernorm_backward: mean is required");
    launch_backward(dev(dinp), dev(dweight), dev(dbias), dev(dout), dev(inp), dev(weight), mean,
                    rstd, N, C, launch.stream, scratch, scratch_bytes, one_pass);
}

template <class T>
void rmsnorm_backward_on(const RmsnormBackwardArgs<T>& args, const Launch& launch, bool one_pass) {
    const auto& [dinp, dweight, dout, inp, weight, rstd, N, C, scratch, scratch_bytes] = args;
    check_shape("rmsnorm_backward", N, C);
    launch_backward(dev(dinp), dev(dweight), static_cast<device_t<T>*>(nullptr), dev(dout),
                    dev(inp), dev(weight), static_cast<const float*>(nullptr), rstd, N, C,
                    launch.stream, scratch, scratch_bytes, one_pass);
}

}  // namespace

template <class T>
void layernorm_forward(const LayernormForwardArgs<T>& args, const Launch& launch) {
    const auto& [out, mean, rstd, inp, weight, bias, N, C, eps] = args;
    cudaStream_t stream = launch.stream;
    check_shape("layernorm_forward", N, C);
    NAPKIN_CUDA_REQUIRE(mean != nullptr, "layernorm_forward: mean is required");
    launch_forward(dev(out), mean, rstd, dev(inp), dev(weight), dev(bias), N, C, eps, stream);
}

template <class T>
void layernorm_backward(const LayernormBackwardArgs<T>& args, const Launch& launch) {
    layernorm_backward_on(args, launch, true);
}

template <class T>
void layernorm_backward_two_pass(const LayernormBackwardArgs<T>& args, const Launch& launch) {
    layernorm_backward_on(args, launch, false);
}

template <class T>
void rmsnorm_backward(const RmsnormBackwardArgs<T>& args, const Launch& launch) {
    rmsnorm_backward_on(args, launch, true);
}

template <class T>
void rmsnorm_backward_two_pass(const RmsnormBackwardArgs<T>& args, const Launch& launch) {
    rmsnorm_backward_on(args, launch, false);
}

template <class T>
void rmsnorm_forward(const RmsnormForwardArgs<T>& args, const Launch& launch) {
    const auto& [out, rstd, inp, weight, N, C, eps] = args;
    cudaStream_t stream = launch.stream;
    check_shape("rmsnorm_forward", N, C);
    launch_forward(dev(out), static_cast<float*>(nullptr), rstd, dev(inp), dev(weight),
                   static_cast<const device_t<T>*>(nullptr), N, C, eps, stream);
}

template <class T>
void residual_layernorm_forward(const ResidualLayernormForwardArgs<T>& args, const Launch& launch) {
    const auto& [out, mean, rstd, x, a, b, weight, bias, N, C, eps] = args;
    check_shape("residual_layernorm_forward", N, C);
    NAPKIN_CUDA_REQUIRE(mean != nullptr, "residual_layernorm_forward: mean is required");
    if (N == 0) return;
    using D = device_t<T>;
    if (warp_per_row<D>(C) && aligned16(out, x, a, b, weight, bias)) {
        norm_forward_warp_kernel<<<warp_row_blocks(N), kRowWarps * kWarpSize, 0, launch.stream>>>(
            dev(out), mean, rstd, dev(x), dev(a), dev(b), dev(weight), dev(bias), N, C, eps);
        NAPKIN_CUDA_CHECK_LAUNCH();
        return;
    }
    residual_layernorm_forward_kernel<<<static_cast<unsigned>(N), block_for_row(C, kMaxRowThreads),
                                        0, launch.stream>>>(dev(out), mean, rstd, dev(x), dev(a),
                                                            dev(b), dev(weight), dev(bias), C, eps);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

#define NAPKIN_CUDA_NORM_INSTANTIATE(T)                                                           \
    template void layernorm_forward<T>(const LayernormForwardArgs<T>&, const Launch&);            \
    template void layernorm_backward<T>(const LayernormBackwardArgs<T>&, const Launch&);          \
    template void rmsnorm_forward<T>(const RmsnormForwardArgs<T>&, const Launch&);                \
    template void rmsnorm_backward<T>(const RmsnormBackwardArgs<T>&, const Launch&);              \
    template void layernorm_backward_two_pass<T>(const LayernormBackwardArgs<T>&, const Launch&); \
    template void rmsnorm_backward_two_pass<T>(const RmsnormBackwardArgs<T>&, const Launch&);     \
    template void residual_layernorm_forward<T>(const ResidualLayernormForwardArgs<T>&,           \
                                                const Launch&);
NAPKIN_CUDA_NORM_INSTANTIATE(float)
NAPKIN_CUDA_NORM_INSTANTIATE(bf16_t)
NAPKIN_CUDA_NORM_INSTANTIATE(f16_t)
#undef NAPKIN_CUDA_NORM_INSTANTIATE

}  // namespace napkin::cuda
