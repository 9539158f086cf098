// LoRA's and QLoRA's part of the GPT engine's orchestration (core/engine/gpt_impl.h), as
// gpt_fp8.h is fp8-amp's:
//   - each block linear's adapter is the op plan's "<linear>.lora", right after its GEMM: the
//     forward adds scale * (x A^T) B^T to the GEMM's output and keeps h = x A^T; the backward,
//     which runs before the frozen GEMM's, writes the adapters' gradients and starts the input
//     gradient with dh A, to which the GEMM's backward adds dY W (kernels/lora.h);
//   - QLoRA's frozen linear weights are NF4 (kernels/nf4.h): each GEMM, forward and backward,
//     reads its weight dequantized into one transient of the largest linear's size ("nf4"
//     kernel ranges of their own).
// The temporaries, the adapters' dh (B T, 3 r: qkv's three adapters) and the dequantized weight,
// are the buffer plan's (core/buffer_plan.h), which the estimator sums too.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/allocator.h"
#include "core/engine/gpt.h"
#include "core/engine/gpt_buffers.h"
#include "core/engine/gpt_detail.h"
#include "core/op_plan.h"
#include "core/tensor.h"
#include "kernels/lora.h"
#include "kernels/nf4.h"

namespace napkin::gpt_detail {

template <class Kernels>
class Adapters {
    using T = typename Kernels::Elem;

public:
    // The scale alpha / r and the transients, the adapters' dh and the dequantized weight, from
    // the buffer plan (nothing when full fine-tuning).
    void allocate(const OpPlan& plan, GptBuffers& buffers) {
        const PlanInputs& in = plan.in;
        if (in.finetune == Finetune::full) return;
        const float alpha = in.lora_alpha > 0 ? in.lora_alpha : static_cast<float>(in.lora_rank);
        scale_ = alpha / static_cast<float>(in.lora_rank);
        dh_ = buffers.take(BufferRole::lora_dh);
        dequant_ = buffers.take(BufferRole::nf4_dequantized);
    }

    // A linear weight as its GEMM reads it: the working copy, or its NF4 codes dequantized.
    // Range: as in gpt_fp8.h, opens the op's next kernel range.
    template <class Range>
    const T* weight(Kernels& k, Range&& range, const ParamSlot& w) {
        if (w.weight.dtype() != DType::nf4) return w.weight.template data<T>();
        range("nf4_dequantize", nf4_dequantize_cost({w.numel, storage_dtype<T>()}));
        k.nf4_dequantize({.out = dequant_.template data<T>(),
                          .codes = w.weight.template data<std::uint8_t>(),
                          .state = w.quant.template data<std::uint8_t>(),
                          .n = w.numel});
        return dequant_.template data<T>();
    }

    // out (the GEMM's output, M x N) += scale * (inp @ A^T) @ B^T; h (M, parts r) kept.
    void forward(Kernels& k, const PlanOp& op, const LoraSlots& s, const T* inp, T* h, T* out,
                 float* scratch) {
        k.lora_forward({.out = out,
                        .h = h,
                        .inp = inp,
                        .a = s.a->weight.template data<T>(),
                        .b = s.b->weight.template data<T>(),
                        .s = std::get<LoraShape>(op.shape),
                        .scale = scale_,
                        .scratch = scratch});
    }

    // The adapter's gradients from dout (the GEMM's output gradient), and dh A added into dinp.
    void backward(Kernels& k, const PlanOp& op, const LoraSlots& s, T* dinp, const T* dout,
                  const T* inp, const T* h, float* scratch) {
        k.lora_backward({.dinp = dinp,
                         .da = s.a->grad.template data<T>(),
                         .db = s.b->grad.template data<T>(),
                         .dh = dh_.template data<T>(),
                         .dout = dout,
                         .inp = inp,
                         .h = h,
                         .a = s.a->weight.template data<T>(),
                         .b = s.b->weight.template data<T>(),
                         .s = std::get<LoraShape>(op.shape),
                         .scale = scale_,
                         .scratch = scratch});
    }

private:
    float scale_ = 1.0f;  // alpha / r
    Tensor dh_, dequant_;
};

}  // namespace napkin::gpt_detail
