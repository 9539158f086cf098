#include "core/recipe.h"

namespace napkin {

PrecisionDTypes precision_dtypes(Precision p, OptimizerKind opt, bool grads_fp32) {
    PrecisionDTypes d{};
    switch (p) {
        case Precision::fp32:
            d = {DType::f32, false, DType::f32, DType::f32, DType::f32, DType::f32, DType::f32};
            break;
        case Precision::fp16_amp:
            d = {DType::f16, true, DType::f16, DType::f16, DType::f16, DType::f16, DType::f32};
            break;
        case Precision::bf16_amp:
            d = {DType::bf16, true, DType::bf16, DType::bf16, DType::bf16, DType::bf16, DType::f32};
            break;
        case Precision::bf16:
            d = {DType::bf16, false, DType::bf16, DType::bf16, DType::bf16, DType::bf16, DType::bf16};
            break;
        case Precision::fp8_amp:
            // Transformer Engine style: bf16 weights and activations, GEMM inputs cast to fp8
            // and the fp8 copies kept for the weight-gradient GEMMs.
            d = {DType::bf16,   true, DType::bf16, DType::bf16, DType::f8e4m3, DType::f8e4m3,
                 DType::f32};
            break;
    }
    if (grads_fp32 && d.has_master) d.grads = DType::f32;
    if (opt == OptimizerKind::adamw_8bit) d.optimizer_state = DType::i8;
    return d;
}

int optimizer_state_count(OptimizerKind opt) {
    switch (opt) {
        case OptimizerKind::sgd: return 0;
        case OptimizerKind::momentum:
        case OptimizerKind::adagrad:
        case OptimizerKind::rmsprop: return 1;
        case OptimizerKind::adam:
        case OptimizerKind::adamw:
        case OptimizerKind::adamw_8bit: return 2;
    }
    return 0;
}

}  // namespace napkin
