// fp8-amp's part of the GPT engine's orchestration (core/engine/gpt_impl.h), Transformer
// Engine's recipe with per-tensor scaling, delayed or current (kernels/quantize.h has both):
//   - a block GEMM's input is kept by its producer (ln_1, attention, ln_2, the activation) as
//     E4M3 codes with a scale pair, as the op plan lists them ("ln_1.out", "ln_1.out.scale");
//     the producer writes its bf16 result into a staging buffer and casts it (cast_output);
//   - forward: the bf16 weight is cast to E4M3 into a transient, then the fp8 GEMM
//     out (bf16) = inp8 @ weight8^T [+ bias] (forward);
//   - backward: the bf16 output gradient is cast to E5M2 and the weight to E4M3 again, then
//     dinp += dout8 @ weight8 and dweight += dout8^T @ inp8 (fp8 GEMMs), dbias from the bf16
//     dout (backward). The casts are cast-transposes (quantize_transpose) that write what the
//     GEMMs read: the weight only as weight8^T (K, N), the gradient as dout8 and, on CUDA, whose
//     fp8 GEMMs take the TN form only, dout8^T too, into the GEMM scratch after cuBLASLt's
//     workspace (kernels/matmul.h); the CPU's sgemm reads dout8 transposed as it is;
//   - flash attention's backward reads its output O from the kept codes, dequantized into a
//     bf16 buffer (dequantized): the plan keeps attn.out once, in fp8.
// The two transients (a weight and an output gradient, with their scale pairs) are temporaries
// sized for the block's largest GEMM by the buffer plan (core/buffer_plan.h), which the
// estimator sums too.
// Delayed scaling (plan.in.fp8_amax_history H > 0): every cast names its site (Fp8Site: the
// layer and the GEMM's kept input), whose slot (op_plan.h, fp8_slots) holds an amax history and
// a scale pair (the buffer plan's fp8.amax_history and fp8.scales). Each cast records its amax
// into the slot's history; from the second step on it casts with the slot's scale pair, which
// end_step() (amax_history_roll, queued at each step's end: no host wait) computes from the
// history. The first step has no history yet and casts with current scaling (still recording).
// Within a step the scales do not change, so a checkpointing recompute casts the same codes.
// The output layer stays bf16 (core/op_plan.cpp). Kernel ranges: each cast is a "quantize" or
// "dequantize" kernel, each GEMM a "matmul_forward" / "matmul_backward" with the fp8 kernels'
// own costs (kernels/matmul.h); the step end's roll an "amax_history_roll" in "fp8.amax_roll".
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
#include "kernels/zero.h"

namespace napkin::gpt_detail {

inline bool is_fp8(const Tensor& t) {
    return t.dtype() == DType::f8e4m3;
}

// Where a cast happens: block `layer`'s GEMM whose kept input is `input` (ln_1.out: qkv,
// attn.out: the projection, ln_2.out: the MLP's up, mlp.act.out: its down projection).
struct Fp8Site {
    int layer = 0;
    KeptId input = KeptId::ln_1_out;
};

// The GEMM's index g in the block (op_plan.h, fp8_slots), from its kept input.
inline std::int64_t fp8_gemm_index(KeptId input) {
    switch (input) {
        case KeptId::ln_1_out:
            return 0;
        case KeptId::attn_out:
            return 1;
        case KeptId::ln_2_out:
            return 2;
        case KeptId::mlp_act_out:
            return 3;
        default:
            break;
    }
    NAPKIN_ASSERT(false, kept_name(input) << " is no fp8 GEMM input");
    return 0;
}

// Range: a callable (std::string_view kernel_name, const KernelCost& cost) that opens the next
// kernel range of the op in progress (GptImpl::kernel_range).
template <class Kernels>
class Fp8Casts {
    using T = typename Kernels::Elem;

public:
    // The transients from the buffer plan (none unless the plan's block GEMMs are fp8).
    // And the delayed-scaling state (none when H is 0), zeroed: no history yet.
    void allocate(GptBuffers& buffers, const OpPlan& plan, Kernels& k) {
        w8_ = buffers.take(BufferRole::fp8_weight);
        w8_scale_ = buffers.take(BufferRole::fp8_weight_scale);
        g8_ = buffers.take(BufferRole::fp8_grad);
        g8_scale_ = buffers.take(BufferRole::fp8_grad_scale);
        history_ = buffers.take(BufferRole::fp8_amax_history);
        scales_ = buffers.take(BufferRole::fp8_scales);
        NAPKIN_ASSERT(w8_.empty() || Kernels::kFp8, "this backend has no fp8 kernels");
        slots_ = fp8_slots(plan);
        H_ = plan.in.fp8_amax_history;
        if (history_.empty()) return;
        NAPKIN_ASSERT(slots_.gemms == 4,
                      "fp8 delayed scaling: " << slots_.gemms << " fp8 GEMMs per block, not 4");
        const ZeroSpan spans[] = {{history_.raw(), history_.bytes()},
                                  {scales_.raw(), scales_.bytes()}};
        k.zero(spans, 2);
    }

    // kept (codes, n) and scale = the cast of staged (n, bf16), the GEMM input of `site`.
    template <class Range>
    void cast_output(Kernels& k, Range&& range, Tensor& kept, Tensor& scale, const T* staged,
                     const Fp8Site& site) {
        const std::int64_t n = kept.numel();
        range("quantize", quantize_cost({n, storage(), DType::f8e4m3}));
        if constexpr (Kernels::kFp8)
            k.quantize(
                cast_args(kept.data<f8e4m3_t>(), scale.data<float>(), staged, n, input_slot(site)));
    }

    // The delayed-scaling step end: each slot's scale pair for the next step from its history,
    // then the histories shifted (kernels/quantize.h). Nothing without histories.
    template <class Range>
    void end_step(Kernels& k, Range&& range) {
        if (history_.empty()) return;
        range("amax_history_roll", amax_history_roll_cost({slots_.total(), H_}));
        if constexpr (Kernels::kFp8)
            k.amax_history_roll({.history = history_.data<float>(),
                                 .scales = scales_.data<float>(),
                                 .slots = slots_.total(),
                                 .e4m3_slots = slots_.e4m3,
                                 .H = H_});
        delayed_ = true;
    }

    // The delayed-scaling state, for checkpoints (empty tensors when H is 0); restored() after
    // a checkpoint wrote them: steps_done > 0 means a step has rolled them, so the next casts
    // use the scale pairs.
    Tensor& amax_history() { return history_; }
    Tensor& scales() { return scales_; }
    void restored(int steps_done) { delayed_ = !history_.empty() && steps_done > 0; }

    // out (M, N) = inp (M, K) codes @ cast(weight (N, K))^T [+ bias (N)].
    template <class Range>
    void forward(Kernels& k, Range&& range, const MatmulShape& s, T* out, const Tensor& inp,
                 const Tensor& inp_scale, const T* weight, const T* bias, float* scratch,
                 const Fp8Site& site) {
        cast_weight(k, range, s, weight, site);
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
                  float* scratch, const Fp8Site& site) {
        f8e5m2_t* g8_t = nullptr;  // dout8^T, which only CUDA's dweight GEMM reads
        if constexpr (Kernels::kDevice == DeviceKind::cuda)
            if (dweight != nullptr) g8_t = cuda::matmul_fp8_dout_t(scratch);
        range("quantize", quantize_transpose_cost({.R = s.M,
                                                   .C = s.N,
                                                   .in = storage(),
                                                   .fp8 = DType::f8e5m2,
                                                   .rows = true,
                                                   .transposed = g8_t != nullptr}));
        if constexpr (Kernels::kFp8) {
            Fp8QuantizeTransposeArgs<f8e5m2_t> a{.out = g8_.data<f8e5m2_t>(),
                                                 .out_t = g8_t,
                                                 .scale = g8_scale_.data<float>(),
                                                 .inp = dout,
                                                 .R = s.M,
                                                 .C = s.N};
            k.quantize_transpose(with_slot(a, grad_slot(site)));
        }
        // weight8^T (K, N) alone: the dinp GEMM's operand.
        range("quantize", quantize_transpose_cost({.R = s.N,
                                                   .C = s.K,
                                                   .in = storage(),
                                                   .fp8 = DType::f8e4m3,
                                                   .rows = false,
                                                   .transposed = true}));
        if constexpr (Kernels::kFp8) {
            Fp8QuantizeTransposeArgs<f8e4m3_t> a{.out_t = w8_.data<f8e4m3_t>(),
                                                 .scale = w8_scale_.data<float>(),
                                                 .inp = weight,
                                                 .R = s.N,
                                                 .C = s.K};
            k.quantize_transpose(with_slot(a, weight_slot(site)));
        }
        range("matmul_backward", matmul_fp8_backward_cost(s));
        if constexpr (Kernels::kFp8) {
            k.matmul_fp8_backward({.dinp = dinp,
                                   .dweight = dweight,
                                   .dbias = dbias,
                                   .dout = dout,
                                   .dout8 = g8_.data<f8e5m2_t>(),
                                   .dout8_t = g8_t,
                                   .dout_scale = g8_scale_.data<float>(),
                                   .inp = inp.data<f8e4m3_t>(),
                                   .inp_scale = inp_scale.data<float>(),
                                   .weight_t = w8_.data<f8e4m3_t>(),
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
    void cast_weight(Kernels& k, Range&& range, const MatmulShape& s, const T* weight,
                     const Fp8Site& site) {
        range("quantize", quantize_cost({s.N * s.K, storage(), DType::f8e4m3}));
        if constexpr (Kernels::kFp8)
            k.quantize(cast_args(w8_.data<f8e4m3_t>(), w8_scale_.data<float>(), weight, s.N * s.K,
                                 weight_slot(site)));
    }

    // A cast's arguments: current scaling, or the slot's delayed pair once a step has rolled
    // them; the amax recorded into the slot's history whenever there is one.
    template <class Q>
    Fp8QuantizeArgs<Q> cast_args(Q* out, float* scale, const T* inp, std::int64_t n,
                                 std::int64_t slot) {
        return with_slot(Fp8QuantizeArgs<Q>{.out = out, .scale = scale, .inp = inp, .n = n}, slot);
    }
    template <class Args>
    Args with_slot(Args a, std::int64_t slot) {
        if (history_.empty()) return a;
        a.amax = history_.data<float>() + slot * H_;
        if (delayed_) a.delayed = scales_.data<float>() + slot * kFp8ScaleFloats;
        return a;
    }
    std::int64_t site_index(const Fp8Site& site) const {
        return site.layer * slots_.gemms + fp8_gemm_index(site.input);
    }
    std::int64_t input_slot(const Fp8Site& site) const { return 2 * site_index(site); }
    std::int64_t weight_slot(const Fp8Site& site) const { return 2 * site_index(site) + 1; }
    std::int64_t grad_slot(const Fp8Site& site) const { return slots_.e4m3 + site_index(site); }

    Tensor w8_, w8_scale_;  // one block weight cast to E4M3: (N, K) forward, (K, N) backward
    Tensor g8_, g8_scale_;  // one output gradient (M, N) cast to E5M2
    // Delayed scaling: (slots, H) amax histories and (slots, kFp8ScaleFloats) scale pairs.
    Tensor history_, scales_;
    Fp8Slots slots_;
    std::int64_t H_ = 0;
    bool delayed_ = false;  // a step has rolled the histories: cast with the slots' pairs
};

}  // namespace napkin::gpt_detail
