// The training recipe: how a step is run, independent of the model's shape. The estimator
// predicts from it and the engine executes it, so both read the same enums and the same
// per-recipe dtypes (precision_dtypes) from here.
#pragma once

#include <array>
#include <cstdint>

#include "core/dtype.h"
#include "core/enum_names.h"

namespace napkin {

enum class Precision : std::uint8_t {
    fp32,      // everything fp32: weights are their own master copy
    fp16_amp,  // fp16 working weights/activations, fp32 master + optimizer, dynamic loss scale
    bf16_amp,  // bf16 working weights/activations, fp32 master + optimizer
    bf16,      // pure bf16: weights, gradients and optimizer state all bf16, no master copy
    fp8_amp,   // bf16-amp plus fp8 GEMMs (E4M3 forward, E5M2 gradients, per-tensor scales)
};
inline constexpr std::array kPrecisionNames = {
    EnumName<Precision>{Precision::fp32, "fp32"},
    EnumName<Precision>{Precision::fp16_amp, "fp16-amp"},
    EnumName<Precision>{Precision::bf16_amp, "bf16-amp"},
    EnumName<Precision>{Precision::bf16, "bf16"},
    EnumName<Precision>{Precision::fp8_amp, "fp8-amp"},
};

enum class OptimizerKind : std::uint8_t { sgd, momentum, adagrad, rmsprop, adam, adamw, adamw_8bit };
inline constexpr std::array kOptimizerNames = {
    EnumName<OptimizerKind>{OptimizerKind::sgd, "sgd"},
    EnumName<OptimizerKind>{OptimizerKind::momentum, "momentum"},
    EnumName<OptimizerKind>{OptimizerKind::adagrad, "adagrad"},
    EnumName<OptimizerKind>{OptimizerKind::rmsprop, "rmsprop"},
    EnumName<OptimizerKind>{OptimizerKind::adam, "adam"},
    EnumName<OptimizerKind>{OptimizerKind::adamw, "adamw"},
    EnumName<OptimizerKind>{OptimizerKind::adamw_8bit, "adamw-8bit"},
};

enum class Checkpointing : std::uint8_t {
    none,       // keep every activation the backward needs
    full,       // keep each block's input, recompute the whole block in backward
    selective,  // recompute only the attention core (Korthikanti et al. 2022)
};
inline constexpr std::array kCheckpointingNames = {
    EnumName<Checkpointing>{Checkpointing::none, "none"},
    EnumName<Checkpointing>{Checkpointing::full, "full"},
    EnumName<Checkpointing>{Checkpointing::selective, "selective"},
};

enum class AttentionImpl : std::uint8_t {
    naive,  // materializes the (B, NH, T, T) probabilities and keeps them for backward
    flash,  // tiled online softmax: keeps only the output and a (B, NH, T) logsumexp
};
inline constexpr std::array kAttentionNames = {
    EnumName<AttentionImpl>{AttentionImpl::naive, "naive"},
    EnumName<AttentionImpl>{AttentionImpl::flash, "flash"},
};

enum class Offload : std::uint8_t {
    none,
    optimizer,         // ZeRO-Offload: fp32 master, optimizer state (and its step) on the host
    optimizer_params,  // also the parameters: the GPU holds only the layers in flight
};
inline constexpr std::array kOffloadNames = {
    EnumName<Offload>{Offload::none, "none"},
    EnumName<Offload>{Offload::optimizer, "optimizer"},
    EnumName<Offload>{Offload::optimizer_params, "optimizer+params"},
};

enum class Finetune : std::uint8_t {
    full,   // every parameter trainable
    lora,   // frozen base weights in the working dtype, trainable low-rank adapters
    qlora,  // frozen base linear weights in NF4 (double-quantized scales), trainable adapters
};
inline constexpr std::array kFinetuneNames = {
    EnumName<Finetune>{Finetune::full, "full"},
    EnumName<Finetune>{Finetune::lora, "lora"},
    EnumName<Finetune>{Finetune::qlora, "qlora"},
};

// The dtypes a precision recipe stores each kind of tensor in.
struct PrecisionDTypes {
    DType weights;          // working copy used by forward and backward
    bool has_master;        // a separate fp32 master copy that the optimizer updates
    DType grads;            // parameter gradients as accumulated and reduced
    DType activations;      // activations kept for backward (GEMM inputs: see gemm_saved)
    DType gemm_saved;       // GEMM inputs kept for backward (fp8 under fp8-amp)
    DType gemm_compute;     // the dtype whose peak FLOP/s the GEMMs run at
    DType optimizer_state;  // element type of optimizer moments (int8 for 8-bit optimizers)
};

// grads_fp32: keep gradients in fp32 under the AMP recipes (Megatron's main_grad: 18 bytes
// per parameter with AdamW) instead of the working dtype (the ZeRO paper's 16 bytes).
PrecisionDTypes precision_dtypes(Precision p, OptimizerKind opt, bool grads_fp32);

// Number of per-parameter optimizer moments: 0 (sgd), 1 (momentum, adagrad, rmsprop),
// 2 (adam, adamw, adamw-8bit).
int optimizer_state_count(OptimizerKind opt);

// 8-bit optimizers quantize each moment blockwise with one fp32 absmax per block
// (bitsandbytes: 2048 elements per block).
inline constexpr std::uint64_t kOptimizer8bitBlock = 2048;

}  // namespace napkin
