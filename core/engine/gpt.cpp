// The GPT engine on the CPU backend: the one orchestration (core/engine/gpt_impl.h) over
// CpuKernels (core/engine/cpu_kernels.h). The CUDA instantiation is core/engine/cuda_device.cpp.
#include "core/engine/gpt.h"

#include "core/check.h"
#include "core/engine/cpu_kernels.h"
#include "core/engine/gpt_impl.h"

namespace napkin {

void check_engine_support(const ModelConfig& cfg, const PlanInputs& in) {
    if (in.finetune != Finetune::full && in.precision == Precision::fp8_amp) {
        throw UsageError("{finetune} " + std::string(enum_name(kFinetuneNames, in.finetune)) +
                         ": not with {precision} fp8-amp in the engine (its adapters would read "
                         "the fp8 GEMM inputs; use bf16-amp)");
    }
    if (in.finetune != Finetune::full && in.lora_rank <= 0)
        throw UsageError("{lora_rank}: must be a positive integer (got " +
                         std::to_string(in.lora_rank) + ")");
    if (in.grads_fp32) throw UsageError("{grads_fp32}: not supported by the engine (for now)");
    validate(cfg);
    if (cfg.q_dim() != cfg.d_model || cfg.qkv_bias) {
        throw UsageError(cfg.name + ": " +
                         (cfg.qkv_bias ? "biases on q, k and v only"
                                       : "a head dim (" + std::to_string(cfg.head_dim()) +
                                             ") other than d_model / heads") +
                         " is modelled by napkin estimate, not trained by the engine");
    }
}

std::unique_ptr<Gpt> Gpt::create(const ModelConfig& cfg, const PlanInputs& in,
                                 AccountingAllocator& alloc, std::uint64_t seed) {
    check_engine_support(cfg, in);
    switch (in.precision) {
        case Precision::fp32:
            return std::make_unique<GptImpl<CpuKernels<float>>>(cfg, in, alloc, seed);
        case Precision::bf16_amp:
        case Precision::bf16:
        case Precision::fp8_amp:  // bf16 storage, fp8 GEMMs (core/engine/gpt_fp8.h)
            return std::make_unique<GptImpl<CpuKernels<bf16_t>>>(cfg, in, alloc, seed);
        case Precision::fp16_amp:
            return std::make_unique<GptImpl<CpuKernels<f16_t>>>(cfg, in, alloc, seed);
    }
    throw UsageError("{precision}: not supported by the engine");
}

}  // namespace napkin
