// fp8-amp's part of the GPT engine's orchestration (core/engine/gpt_impl.h), Transformer
// Engine's recipe with current per-tensor scaling (kernels/quantize.h says why current):
//   - a block GEMM's input is kept by its producer (ln_1, attention, ln_2, the activation) as
//     E4M3 codes with a scale pair, as the op plan lists them ("ln_1.out", "ln_1.out.scale");
//     the producer writes its bf16 result into a staging buffer and casts it (cast_output);
//   - forward: the bf16 weight is cast to E4M3 into a transient, then the fp8 GEMM
//     out (bf16) = inp8 @ weight8^T [+ bias] (forward);
//   - backward: the bf16 output gradient is cast to E5M2 and the weight to E4M3 again, then
//     dinp += dout8 @ weight8 and dweight += dout8^T @ inp8 (fp8 GEMMs), dbias from the bf16
//     dout (backward);
//   - flash attention's backward reads its output O from the kept codes, dequantized into a
//     bf16 buffer (dequantized): the plan keeps attn.out once, in fp8.
// The two transients (a weight and an output gradient, with their scale pairs) are temporaries
// sized for the block's largest GEMM by the buffer plan (core/buffer_plan.h), which the
// estimator sums too. The output layer stays bf16 (core/op_plan.cpp). Kernel ranges: each cast
// is a "quantize" or "dequantize" kernel, each GEMM a "matmul_forward" / "matmul_backward" with
// the fp8 kernels' own costs (kernels/matmul.h).
#pragma once

#include <string_view>

#include "core/allocator.h"
#include "core/check.h"
#include "core/engine/gpt_buffers.h"
#include "core/fp8.h"
#include "core/op_plan.h"
#include "core/tensor.h"
#include "kernels/matmul.h"
#include "kernels/quantize.h"

namespace napkin::gpt_detail {

inline bool is_fp8(const Tensor& t) {
    return t.dtype() == DType::f8e4m3;
}

// Range: a callable (std::string_view kernel_name, const KernelCost& cost) that opens the next
// kernel range of the op in progress (GptImpl::kernel_range).
template <class Kernels>
class Fp8Casts {
    using T = typename Kernels::Elem;

public:
    // The transients from the buffer plan (none unless the plan's block GEMMs are fp8).
    void allocate(GptBuffers& buffers) {
        w8_ = buffers.take(BufferRole::fp8_weight);
        w8_scale_ = buffers.take(BufferRole::fp8_weight_scale);
        g8_ = buffers.take(BufferRole::fp8_grad);
        g8_scale_ = buffers.take(BufferRole::fp8_grad_scale);
        NAPKIN_ASSERT(w8_.empty() || Kernels::kFp8, "this backend has no fp8 kernels");
    }

    // kept (codes, n) and scale = the cast of staged (n, bf16).
    template <class Range>
    void cast_output(Kernels& k, Range&& range, Tensor& kept, Tensor& scale, const T* staged) {
        const std::int64_t n = kept.numel();
        range("quantize", quantize_cost({n, storage(), DType::f8e4m3}));
        if constexpr (Kernels::kFp8)
            k.quantize(Fp8QuantizeArgs<f8e4m3_t>{
                .out = kept.data<f8e4m3_t>(), .scale = scale.data<float>(), .inp = staged, .n = n});
    }

    // out (M, N) = inp (M, K) codes @ cast(weight (N, K))^T [+ bias (N)].
    template <class Range>
    void forward(Kernels& k, Range&& range, const MatmulShape& s, T* out, const Tensor& inp,
                 const Tensor& inp_scale, const T* weight, const T* bias, float* scratch) {
        cast_weight(k, range, s, weight);
        range("matmul_forward", matmul_fp8_forward_cost(s));
        if constexpr (Kernels::kFp8) {
            k.matmul_fp8_forward({.out = out,
                                  .inp = inp.data<f8e4m3_t>(),
                                  .inp_scale = inp_scale.data<float>(),
                                  .weight = w8_.data<f8e4m3_t>(),
                                  .weight_scale = w8_scale_.data<float>(),
                                  .bias = bias,
                                  .M = s.M,
                                  .N = s.N,
                                  .K = s.K,
                                  .scratch = scratch});
        }
    }

    // dinp (M, K) += cast(dout) @ cast(weight); dweight (N, K) += cast(dout)^T @ inp codes;
    // dbias (N) += column sums of dout (M, N). dweight and dbias may be null (frozen, no bias).
    template <class Range>
    void backward(Kernels& k, Range&& range, const MatmulShape& s, T* dinp, T* dweight, T* dbias,
                  const T* dout, const Tensor& inp, const Tensor& inp_scale, const T* weight,
                  float* scratch) {
        range("quantize", quantize_cost({s.M * s.N, storage(), DType::f8e5m2}));
        if constexpr (Kernels::kFp8)
            k.quantize(Fp8QuantizeArgs<f8e5m2_t>{.out = g8_.data<f8e5m2_t>(),
                                                 .scale = g8_scale_.data<float>(),
                                                 .inp = dout,
                                                 .n = s.M * s.N});
        cast_weight(k, range, s, weight);
        range("matmul_backward", matmul_fp8_backward_cost(s));
        if constexpr (Kernels::kFp8) {
            k.matmul_fp8_backward({.dinp = dinp,
                                   .dweight = dweight,
                                   .dbias = dbias,
                                   .dout = dout,
                                   .dout8 = g8_.data<f8e5m2_t>(),
                                   .dout_scale = g8_scale_.data<float>(),
                                   .inp = inp.data<f8e4m3_t>(),
                                   .inp_scale = inp_scale.data<float>(),
                                   .weight = w8_.data<f8e4m3_t>(),
                                   .weight_scale = w8_scale_.data<float>(),
                                   .M = s.M,
                                   .N = s.N,
                                   .K = s.K,
                                   .scratch = scratch});
        }
    }

    // into (n, bf16) = the kept codes (n) dequantized; returns into.
    template <class Range>
    const T* dequantized(Kernels& k, Range&& range, const Tensor& kept, const Tensor& scale,
                         T* into) {
        const std::int64_t n = kept.numel();
        range("dequantize", dequantize_cost({n, storage(), DType::f8e4m3}));
        if constexpr (Kernels::kFp8)
            k.dequantize(Fp8DequantizeArgs<f8e4m3_t>{
                .out = into, .inp = kept.data<f8e4m3_t>(), .scale = scale.data<float>(), .n = n});
        return into;
    }

private:
    static constexpr DType storage() { return DType::bf16; }

    template <class Range>
    void cast_weight(Kernels& k, Range&& range, const MatmulShape& s, const T* weight) {
        range("quantize", quantize_cost({s.N * s.K, storage(), DType::f8e4m3}));
        if constexpr (Kernels::kFp8)
            k.quantize(Fp8QuantizeArgs<f8e4m3_t>{.out = w8_.data<f8e4m3_t>(),
                                                 .scale = w8_scale_.data<float>(),
                                                 .inp = weight,
                                                 .n = s.N * s.K});
    }

    Tensor w8_, w8_scale_;  // one block weight (N, K) cast to E4M3
    Tensor g8_, g8_scale_;  // one output gradient (M, N) cast to E5M2
};

}  // namespace napkin::gpt_detail
