// The engine's CPU backend: the kernel calls of core/engine/gpt_impl.h forwarded to napkin::cpu
// (kernels/<op>.h), one wrapper per line of kernels/kernel_list.h, plus the handful of memory
// operations the orchestration does besides kernels (zeroing, parameter values in and out as
// fp32, the token check). Its twin is core/engine/cuda_kernels.h; what differs between the two
// backends is adapted here, never in the orchestration.
// Every pointer is host memory. Shapes as in kernels/<op>.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/allocator.h"
#include "core/check.h"
#include "core/fp8.h"
#include "core/half.h"
#include "core/op_plan.h"
#include "core/tensor.h"
#include "kernels/kernel_list.h"
#include "kernels/step_scalars.h"
#include "kernels/zero.h"

namespace napkin {

template <class T>
struct CpuKernels {
    using Elem = T;
    static constexpr DeviceKind kDevice = DeviceKind::cpu;
    // Kernels run on the calling thread, so timing the call times the kernel: the engine
    // writes a device track of its own (profiler::begin_kernel).
    static constexpr bool kHostTimedKernels = true;
    // fp8-amp's kernels (quantize, dequantize, the fp8 GEMMs) over bf16 storage.
    static constexpr bool kFp8 = std::is_same_v<T, bf16_t>;

    // The per-row losses of head_cross_entropy (N): host memory outside the accounting, as
    // always (the buffer plan lists no loss.rows for the CPU: `rows` is empty).
    // No step scalars either: the CPU's loss is the kernel's return value.
    void bind_losses(Tensor rows, Tensor scalars, std::int64_t N) {
        NAPKIN_ASSERT(rows.empty() && scalars.empty(),
                      "the CPU's losses are host memory outside the accounting");
        losses_.assign(static_cast<std::size_t>(N), 0.0f);
    }
    float* losses() { return losses_.data(); }
    StepScalars* step_scalars() { return nullptr; }
    void defer_loss(bool on) { NAPKIN_ASSERT(!on, "the CPU's loss is never deferred"); }

    // ---- memory
    void zero(void* p, std::size_t bytes) { std::memset(p, 0, bytes); }
    void zero(const ZeroSpan* spans, int count) { cpu::zero(spans, count); }
    // dst (n) in T = src (n) host fp32, rounded; out (n) host fp32 = src (n) in T.
    void store_floats(T* dst, const float* src, std::int64_t n) {
        for (std::int64_t k = 0; k < n; ++k)
            dst[k] = from_float<T>(src[k]);
    }
    void load_floats(float* out, const T* src, std::int64_t n) const {
        for (std::int64_t k = 0; k < n; ++k)
            out[k] = to_float(src[k]);
    }
    void copy_from_host(void* dst, const void* src, std::size_t bytes) {
        std::memcpy(dst, src, bytes);
    }
    void copy_to_host(void* dst, const void* src, std::size_t bytes) const {
        std::memcpy(dst, src, bytes);
    }
    // NF4 weights (QLoRA, kernels/nf4.h): host fp32 in, quantized; and dequantized back out.
    void store_nf4(std::uint8_t* codes, std::uint8_t* state, const float* src, std::int64_t n) {
        cpu::nf4_quantize(codes, state, src, n);
    }
    void load_nf4(float* out, const std::uint8_t* codes, const std::uint8_t* state,
                  std::int64_t n) const {
        cpu::nf4_dequantize<float>({out, codes, state, n});
    }
    // tokens (n) must lie in [0, V).
    void check_tokens(const std::int32_t* tokens, std::int64_t n, std::int64_t V) const {
        for (std::int64_t i = 0; i < n; ++i) {
            if (tokens[i] < 0 || tokens[i] >= V) {
                throw UsageError("token id " + std::to_string(tokens[i]) +
                                 " is outside the vocabulary [0, " + std::to_string(V) + ")");
            }
        }
    }

    // ---- kernels: k.<name>(args) is cpu::<name>(args), one per line of kernels/kernel_list.h
    // clang-format off
#define NAPKIN_CPU_KERNEL(name, Args) \
    void name(const Args<T>& a) { cpu::name(a); }
    NAPKIN_KERNELS(NAPKIN_CPU_KERNEL)
#undef NAPKIN_CPU_KERNEL
#define NAPKIN_CPU_FP8_KERNEL(member, name, Args) \
    void name(const Args& a) { cpu::name(a); }
    NAPKIN_FP8_KERNELS(NAPKIN_CPU_FP8_KERNEL)
#undef NAPKIN_CPU_FP8_KERNEL
    // clang-format on
    // Returns the mean loss over the M rows (the CPU kernel's own reduction).
    float head_cross_entropy(const HeadCrossEntropyArgs<T>& a) {
        return cpu::head_cross_entropy(a);
    }

private:
    std::vector<float> losses_;
};

}  // namespace napkin
