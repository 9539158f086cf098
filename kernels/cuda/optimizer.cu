// Optimizer updates on the GPU (declared in kernels/optimizer.h; the CPU twin, the spec, is
// kernels/cpu/optimizer.cpp, the engine's arithmetic). Multi-tensor: up to kMaxTensors
// parameters per launch travel in the kernel's parameter space, blockIdx.y picks the tensor and
// blockIdx.x strides over its elements, 4 per thread where its pointers are 16-byte aligned. The
// global norm's sum of squares is deterministic: fixed per-tensor blocks, fp64 partial sums, one
// final block that adds them in a fixed order. 8-bit states (adamw-8bit, the CPU's update_8bit):
// one thread block per quantization block of kOptimizer8bitBlock elements, its absmax a block
// maximum (order-free, so the CPU's bits).
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/optimizer.h"
#include "kernels/optimizer_rule.h"
#include "kernels/step_scalars_rule.h"

namespace napkin::cuda {

namespace {

// Kernel parameters: 4 KiB before CUDA 12.1 (and on pre-Volta GPUs), so each launch's
// descriptors stay well inside that (static_asserts below).
constexpr std::size_t kMaxParamBytes = 4096;
constexpr int kMaxTensors = 32;      // 32 * 72 bytes of descriptors
constexpr int kMaxTensors8bit = 16;  // 16 * 72 bytes, beside the two maps' 2056
constexpr int kBlock = 256;
constexpr unsigned kUpdateBlocksMax = 1024;  // per tensor; grid-stride beyond

template <int kCount>
struct TensorGroup {
    OptimizerTensor t[kCount];
    int count = 0;
};
using TensorList = TensorGroup<kMaxTensors>;
using TensorList8bit = TensorGroup<kMaxTensors8bit>;

// The dynamic-tree maps of 8-bit m (signed) and v (unsigned), built on the host by the CPU's own
// dynamic_map() so that the values are its bits. They ride in the launch's parameters, beside
// fewer descriptors (16, not 32, per launch), rather than in __constant__ memory filled once:
// no state outside the call (which device was filled, and when the copy is visible to another
// stream), and every launch carries its own maps. Each block copies them to shared memory, where
// the binary searches of dynamic_quantize read them (divergent reads of the constant bank that
// holds parameters would serialize).
struct Maps8bit {
    DynamicMap m, v;
};

static_assert(sizeof(OptimizerHyper) + sizeof(TensorList) + sizeof(DType) <= kMaxParamBytes,
              "optimizer_update_kernel's parameters exceed 4 KiB");
static_assert(sizeof(OptimizerHyper) + sizeof(TensorList8bit) + sizeof(Maps8bit) <= kMaxParamBytes,
              "optimizer_update_8bit_kernel's parameters exceed 4 KiB");
static_assert(sizeof(double*) + sizeof(TensorList) + sizeof(int) <= kMaxParamBytes,
              "grad_sum_squares_partial_kernel's parameters exceed 4 KiB");

// 8-bit states: kBlock threads per quantization block, each kPer8bit of its elements (strided
// by kBlock, so a warp's loads are contiguous), its new moments kept in registers until the
// block's absmax is known.
constexpr int kPer8bit = static_cast<int>(kOptimizer8bitBlock) / kBlock;
static_assert(kPer8bit * kBlock == static_cast<int>(kOptimizer8bitBlock),
              "a quantization block is a whole number of threads' elements");

__device__ __forceinline__ float load(const void* p, DType t, std::int64_t k) {
    switch (t) {
        case DType::bf16:
            return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[k]);
        case DType::f16:
            return __half2float(static_cast<const __half*>(p)[k]);
        default:
            return static_cast<const float*>(p)[k];
    }
}

__device__ __forceinline__ void store(void* p, DType t, std::int64_t k, float v) {
    switch (t) {
        case DType::bf16:
            static_cast<__nv_bfloat16*>(p)[k] = __float2bfloat16_rn(v);
            break;
        case DType::f16:
            static_cast<__half*>(p)[k] = __float2half_rn(v);
            break;
        default:
            static_cast<float*>(p)[k] = v;
            break;
    }
}

// W consecutive elements from k of a tensor of dtype t, widened (W = kOptVec: one 16-byte load
// of fp32, one 8-byte load of bf16/fp16, from a 16-byte aligned tensor).
template <int W>
__device__ __forceinline__ void load_n(float (&x)[W], const void* p, DType t, std::int64_t k) {
    auto widen = [&](const auto* q) {
        const auto packed = load_pack<W>(q + k);
#pragma unroll
        for (int j = 0; j < W; ++j)
            x[j] = to_f32(packed.v[j]);
    };
    switch (t) {
        case DType::bf16:
            widen(static_cast<const __nv_bfloat16*>(p));
            break;
        case DType::f16:
            widen(static_cast<const __half*>(p));
            break;
        default:
            widen(static_cast<const float*>(p));
            break;
    }
}

template <int W>
__device__ __forceinline__ void store_n(void* p, DType t, std::int64_t k, const float (&x)[W]) {
    auto narrow = [&](auto* q) {
        using D = std::remove_pointer_t<decltype(q)>;
        Pack<D, W> packed;
#pragma unroll
        for (int j = 0; j < W; ++j)
            packed.v[j] = from_f32<D>(x[j]);
        store_pack<W>(q + k, packed);
    };
    switch (t) {
        case DType::bf16:
            narrow(static_cast<__nv_bfloat16*>(p));
            break;
        case DType::f16:
            narrow(static_cast<__half*>(p));
            break;
        default:
            narrow(static_cast<float*>(p));
            break;
    }
}

// The update of elements [k, k + W) of t, element by element the rule (the CPU's bits).
template <int W>
__device__ __forceinline__ void update_elements(const OptimizerHyper& h, float scale,
                                                const OptimizerTensor& t, DType s, std::int64_t k) {
    float g[W], m[W] = {}, v[W] = {}, w[W];
    load_n<W>(g, t.grad, t.grad_dtype, k);
    if (t.m != nullptr) load_n<W>(m, t.m, s, k);
    if (t.v != nullptr) load_n<W>(v, t.v, s, k);
    if (t.master != nullptr)
        load_n<W>(w, t.master, DType::f32, k);
    else
        load_n<W>(w, t.weight, t.weight_dtype, k);
#pragma unroll
    for (int j = 0; j < W; ++j)
        w[j] = optimizer_rule(h, g[j] * scale, w[j], t.weight_decay, m[j], v[j]);
    if (t.m != nullptr) store_n<W>(t.m, s, k, m);
    if (t.v != nullptr) store_n<W>(t.v, s, k, v);
    if (t.master != nullptr) store_n<W>(t.master, DType::f32, k, w);
    if (t.weight != nullptr) store_n<W>(t.weight, t.weight_dtype, k, w);
}

// Elements per thread on the vector path: 16 bytes of fp32 (master, fp32 states), 8 of bf16.
constexpr int kOptVec = 4;

__device__ __forceinline__ bool vectors_fit(const OptimizerTensor& t) {
    const auto bits =
        reinterpret_cast<std::uintptr_t>(t.master) | reinterpret_cast<std::uintptr_t>(t.grad) |
        reinterpret_cast<std::uintptr_t>(t.m) | reinterpret_cast<std::uintptr_t>(t.v) |
        reinterpret_cast<std::uintptr_t>(t.weight);
    return bits % 16 == 0;
}

// blockIdx.y: the tensor; the grid strides over its kOptVec-element vectors (every pointer
// 16-byte aligned), then over the rest one element at a time. A gate's skip: every thread
// returns (kernels/step_scalars.h); its schedule, with schedule_from_gate: every thread reads
// the same three floats (one cache line with the skip and the scale).
__global__ void optimizer_update_kernel(OptimizerHyper hyper, TensorList list, DType s) {
    if (optimizer_skips(hyper)) return;
    const float scale = optimizer_grad_scale(hyper);
    const OptimizerHyper h = optimizer_scheduled(hyper);  // lr, bias corrections: maybe the gate's
    const OptimizerTensor& t = list.t[blockIdx.y];
    const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    std::int64_t done = 0;
    if (vectors_fit(t)) {
        const std::int64_t vectors = t.n / kOptVec;
        for (std::int64_t i = first; i < vectors; i += stride)
            update_elements<kOptVec>(h, scale, t, s, i * kOptVec);
        done = vectors * kOptVec;
    }
    for (std::int64_t k = done + first; k < t.n; k += stride)
        update_elements<1>(h, scale, t, s, k);
}

// adamw-8bit (the CPU's update_8bit, element for element): for each quantization block b of the
// tensor blockIdx.y (grid-stride over blocks): dequantize m = m_map[code] * m_absmax[b] (v
// alike), apply the rule, write w, then the block's new absmax (max |m|, max v; fmaxf ignores a
// NaN as the CPU's std::max(absmax, x) does), stored by thread 0 after every thread has read the
// old one (block_max synchronizes), and each new value / absmax quantized to the nearest code
// (absmax 0: the map's zero). The dequantizing product and the quantizing quotient are
// __fmul_rn / __fdiv_rn: never fused into a multiply-add, always IEEE-rounded, so that equal
// states give the CPU's codes; only the rule itself may differ in the last bit (contractions).
__global__ void optimizer_update_8bit_kernel(OptimizerHyper hyper, TensorList8bit list,
                                             Maps8bit maps) {
    if (optimizer_skips(hyper)) return;  // the whole grid: no barrier is skipped
    const float scale = optimizer_grad_scale(hyper);
    const OptimizerHyper h = optimizer_scheduled(hyper);  // lr, bias corrections: maybe the gate's
    const OptimizerTensor& t = list.t[blockIdx.y];
    constexpr auto kQuantBlock = static_cast<std::int64_t>(kOptimizer8bitBlock);
    const std::int64_t blocks = (t.n + kQuantBlock - 1) / kQuantBlock;  // optimizer_8bit_blocks
    if (static_cast<std::int64_t>(blockIdx.x) >= blocks) return;  // the whole block: no barrier
    // DynamicMap's default member initializers would be a dynamic initialization, which
    // __shared__ variables cannot have: raw storage, filled below.
    __shared__ __align__(16) unsigned char map_bytes[2 * sizeof(DynamicMap)];
    __shared__ float reduce[kWarpSize];
    auto* m_map = reinterpret_cast<DynamicMap*>(map_bytes);
    DynamicMap* v_map = m_map + 1;
    for (int i = static_cast<int>(threadIdx.x); i < 256; i += static_cast<int>(blockDim.x)) {
        m_map->value[i] = maps.m.value[i];
        v_map->value[i] = maps.v.value[i];
    }
    if (threadIdx.x == 0) {
        m_map->size = maps.m.size;
        v_map->size = maps.v.size;
    }
    __syncthreads();
    const std::uint8_t m_zero = dynamic_quantize(0.0f, *m_map);
    const float wd = t.weight_decay;
    auto* mq = static_cast<std::uint8_t*>(t.m);  // (n) codes
    auto* vq = static_cast<std::uint8_t*>(t.v);  // (n) codes
    for (std::int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
        const std::int64_t k0 = b * kQuantBlock;
        const float m_scale = t.m_absmax[b], v_scale = t.v_absmax[b];
        float ms[kPer8bit], vs[kPer8bit];
        float m_max = 0.0f, v_max = 0.0f;
#pragma unroll
        for (int j = 0; j < kPer8bit; ++j) {
            const std::int64_t k = k0 + j * kBlock + threadIdx.x;
            ms[j] = 0.0f;
            vs[j] = 0.0f;
            if (k >= t.n) continue;
            const float g = load(t.grad, t.grad_dtype, k) * scale;
            float m = __fmul_rn(m_map->value[mq[k]], m_scale);
            float v = __fmul_rn(v_map->value[vq[k]], v_scale);
            const float w = t.master != nullptr ? t.master[k] : load(t.weight, t.weight_dtype, k);
            const float wk = optimizer_rule(h, g, w, wd, m, v);
            if (t.master != nullptr) t.master[k] = wk;
            if (t.weight != nullptr) store(t.weight, t.weight_dtype, k, wk);
            ms[j] = m;
            vs[j] = v;
            m_max = fmaxf(m_max, fabsf(m));
            v_max = fmaxf(v_max, v);
        }
        m_max = block_max(m_max, reduce);
        v_max = block_max(v_max, reduce);
        if (threadIdx.x == 0) {
            t.m_absmax[b] = m_max;
            t.v_absmax[b] = v_max;
        }
#pragma unroll
        for (int j = 0; j < kPer8bit; ++j) {
            const std::int64_t k = k0 + j * kBlock + threadIdx.x;
            if (k >= t.n) continue;
            mq[k] = m_max > 0.0f ? dynamic_quantize(__fdiv_rn(ms[j], m_max), *m_map) : m_zero;
            vq[k] =
                v_max > 0.0f ? dynamic_quantize(__fdiv_rn(vs[j], v_max), *v_map) : std::uint8_t{0};
        }
    }
}

// Tree sum of one value per thread (blockDim.x == kBlock) in a fixed order; thread 0 gets it.
__device__ double block_sum_fixed(double v, double* shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int stride = kBlock / 2; stride > 0; stride /= 2) {
        if (static_cast<int>(threadIdx.x) < stride)
            shared[threadIdx.x] += shared[threadIdx.x + stride];
        __syncthreads();
    }
    return shared[0];
}

// Blocks a tensor's sum of squares is split over: each thread adds at least kGradNormPerThread
// elements (a GPT-2 bias of 768 is one block, not 256 blocks of three elements each), at most
// kGradNormBlocks. On the emulator every block's 256 threads and 9 barriers are fibers and their
// switches: a tiny model's norm was 7168 blocks a step, most of an emulated step.
constexpr std::int64_t kGradNormPerThread = 16;
__device__ __host__ inline std::int64_t grad_norm_blocks(std::int64_t n) {
    const std::int64_t share = kGradNormPerThread * kBlock;
    const std::int64_t blocks = (n + share - 1) / share;
    return blocks < 1 ? 1 : (blocks > kGradNormBlocks ? kGradNormBlocks : blocks);
}

// partial[(first + y) * kGradNormBlocks + x] = sum of squares of block x's contiguous share of
// tensor y's gradient; slots past a tensor's grad_norm_blocks stay as zeroed.
__global__ void grad_sum_squares_partial_kernel(double* partial, TensorList list, int first) {
    __shared__ double shared[kBlock];
    const OptimizerTensor& t = list.t[blockIdx.y];
    const std::int64_t per = (t.n + grad_norm_blocks(t.n) - 1) / grad_norm_blocks(t.n);
    const std::int64_t begin = blockIdx.x * per;
    const std::int64_t end = min(t.n, begin + per);
    const std::int64_t slot =
        (first + static_cast<std::int64_t>(blockIdx.y)) * kGradNormBlocks + blockIdx.x;
    if (begin >= t.n) return;  // past this tensor's share (its slot stays 0): the whole block
    double acc = 0.0;
    for (std::int64_t k = begin + threadIdx.x; k < end; k += kBlock) {
        const double g = load(t.grad, t.grad_dtype, k);
        acc += g * g;
    }
    const double sum = block_sum_fixed(acc, shared);
    if (threadIdx.x == 0) partial[slot] = sum;
}

__global__ void grad_sum_squares_final_kernel(double* sumsq, const double* partial,
                                              std::int64_t n) {
    __shared__ double shared[kBlock];
    double acc = 0.0;
    for (std::int64_t i = threadIdx.x; i < n; i += kBlock)
        acc += partial[i];
    const double sum = block_sum_fixed(acc, shared);
    if (threadIdx.x == 0) *sumsq = sum;
}

__global__ void grad_unscale_check_kernel(int* found_nonfinite, TensorList list, float scale) {
    const OptimizerTensor& t = list.t[blockIdx.y];
    bool bad = false;
    for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < t.n;
         k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const float v = load(t.grad, t.grad_dtype, k) * scale;
        bad = bad || !isfinite(v);
        store(t.grad, t.grad_dtype, k, v);
    }
    if (bad) *found_nonfinite = 1;  // every writer writes the same value
}

// Calls launch(list, first, max_n) for each group of up to kCount tensors.
template <int kCount = kMaxTensors, class Launch>
void for_each_group(const OptimizerTensor* tensors, int count, Launch&& launch) {
    NAPKIN_CUDA_REQUIRE(count >= 0 && (count == 0 || tensors != nullptr),
                        "optimizer: " << count << " tensors");
    for (int first = 0; first < count; first += kCount) {
        TensorGroup<kCount> list;
        list.count = std::min(kCount, count - first);
        std::int64_t max_n = 0;
        for (int i = 0; i < list.count; ++i) {
            list.t[i] = tensors[first + i];
            NAPKIN_CUDA_REQUIRE(list.t[i].n >= 0,
                                "optimizer: tensor " << first + i << " has n " << list.t[i].n);
            max_n = std::max(max_n, list.t[i].n);
        }
        launch(list, first, max_n);
    }
}

}  // namespace

namespace {

void optimizer_update_8bit(const OptimizerHyper& h, const OptimizerTensor* tensors, int count,
                           CUstream_st* stream) {
    static const Maps8bit maps{dynamic_map(true), dynamic_map(false)};
    for_each_group<kMaxTensors8bit>(
        tensors, count, [&](const TensorList8bit& list, int first, std::int64_t max_n) {
            for (int i = 0; i < list.count; ++i) {
                const OptimizerTensor& t = list.t[i];
                NAPKIN_CUDA_REQUIRE(t.master != nullptr || t.weight != nullptr,
                                    "optimizer_update: tensor "
                                        << first + i << " has neither a master nor a weight");
                NAPKIN_CUDA_REQUIRE(t.m != nullptr && t.v != nullptr && t.m_absmax != nullptr &&
                                        t.v_absmax != nullptr,
                                    "optimizer_update: tensor "
                                        << first + i
                                        << ": 8-bit states need m, v and their absmax");
            }
            if (max_n == 0) return;
            const auto blocks = static_cast<std::uint64_t>(optimizer_8bit_blocks(max_n));
            const dim3 grid(
                static_cast<unsigned>(std::min<std::uint64_t>(blocks, kUpdateBlocksMax)),
                static_cast<unsigned>(list.count));
            optimizer_update_8bit_kernel<<<grid, kBlock, 0, stream>>>(h, list, maps);
            NAPKIN_CUDA_CHECK_LAUNCH();
        });
}

}  // namespace

void optimizer_update(const OptimizerHyper& h, const OptimizerTensor* tensors, int count,
                      DType state_dtype, CUstream_st* stream) {
    NAPKIN_CUDA_REQUIRE(
        state_dtype == DType::f32 || state_dtype == DType::bf16 || state_dtype == DType::i8,
        "optimizer_update: state dtype " << static_cast<int>(state_dtype));
    NAPKIN_CUDA_REQUIRE(!h.schedule_from_gate || h.gate != nullptr,
                        "optimizer_update: schedule_from_gate without a gate");
    if (state_dtype == DType::i8) {
        optimizer_update_8bit(h, tensors, count, stream);
        return;
    }
    for_each_group(tensors, count, [&](const TensorList& list, int first, std::int64_t max_n) {
        for (int i = 0; i < list.count; ++i) {
            NAPKIN_CUDA_REQUIRE(
                list.t[i].master != nullptr || list.t[i].weight != nullptr,
                "optimizer_update: tensor " << first + i << " has neither a master nor a weight");
        }
        if (max_n == 0) return;
        const dim3 grid(
            std::min(grid_for((max_n + kOptVec - 1) / kOptVec, kBlock), kUpdateBlocksMax),
            static_cast<unsigned>(list.count));
        optimizer_update_kernel<<<grid, kBlock, 0, stream>>>(h, list, state_dtype);
        NAPKIN_CUDA_CHECK_LAUNCH();
    });
}

void grad_sum_squares(double* sumsq, const OptimizerTensor* tensors, int count, void* scratch,
                      CUstream_st* stream) {
    NAPKIN_CUDA_REQUIRE(scratch != nullptr, "grad_sum_squares: scratch is required");
    auto* partial = static_cast<double*>(scratch);  // (count, kGradNormBlocks)
    NAPKIN_CUDA_CHECK(cudaMemsetAsync(
        partial, 0, static_cast<std::size_t>(count) * kGradNormBlocks * sizeof(double), stream));
    for_each_group(tensors, count, [&](const TensorList& list, int first, std::int64_t max_n) {
        const dim3 grid(static_cast<unsigned>(grad_norm_blocks(max_n)),
                        static_cast<unsigned>(list.count));
        grad_sum_squares_partial_kernel<<<grid, kBlock, 0, stream>>>(partial, list, first);
        NAPKIN_CUDA_CHECK_LAUNCH();
    });
    grad_sum_squares_final_kernel<<<1, kBlock, 0, stream>>>(
        sumsq, partial, static_cast<std::int64_t>(count) * kGradNormBlocks);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

void grad_unscale_check(int* found_nonfinite, const OptimizerTensor* tensors, int count,
                        float scale, CUstream_st* stream) {
    for_each_group(tensors, count, [&](const TensorList& list, int, std::int64_t max_n) {
        if (max_n == 0) return;
        const dim3 grid(std::min(grid_for(max_n, kBlock), kUpdateBlocksMax),
                        static_cast<unsigned>(list.count));
        grad_unscale_check_kernel<<<grid, kBlock, 0, stream>>>(found_nonfinite, list, scale);
        NAPKIN_CUDA_CHECK_LAUNCH();
    });
}

}  // namespace napkin::cuda
