#include "estimator/napkin_formulas.h"

#include <cmath>

#include "core/dtype.h"

namespace napkin::formulas {

BytesPerParam bytes_per_param(Precision p, OptimizerKind opt, bool grads_fp32) {
    const PrecisionDTypes d = precision_dtypes(p, opt, grads_fp32);
    BytesPerParam b;
    b.weights = dtype_bits(d.weights) / 8.0;
    b.master = d.has_master ? 4.0 : 0.0;
    b.grads = dtype_bits(d.grads) / 8.0;
    const int states = optimizer_state_count(opt);
    b.optimizer = states * (dtype_bits(d.optimizer_state) / 8.0);
    if (opt == OptimizerKind::adamw_8bit) {
        // One fp32 absmax per block of each moment (bitsandbytes blockwise quantization).
        b.optimizer += states * 4.0 / static_cast<double>(kOptimizer8bitBlock);
    }
    return b;
}

double zero_model_state_bytes(const BytesPerParam& b, double psi, int stage, int nd) {
    const double shard = psi / nd;
    const double weights = stage >= 3 ? b.weights * shard : b.weights * psi;
    const double grads = stage >= 2 ? b.grads * shard : b.grads * psi;
    const double states = stage >= 1 ? (b.master + b.optimizer) * shard : (b.master + b.optimizer) * psi;
    return weights + grads + states;
}

double korthikanti_layer_bytes(const LayerActivationTerms& t, Checkpointing ckpt, bool flash) {
    const double sbh = t.s * t.b * t.h;
    const bool split_all = t.sequence_parallel && t.t > 1;
    if (ckpt == Checkpointing::full) return split_all ? sbh * t.p / t.t : sbh * t.p;
    // 4 + q/h: the two norm inputs and the two GEMM inputs they feed, and the attention output.
    const double widths =
        4.0 + t.q_width / t.h + t.qkv_width / t.h + t.fc_width / t.h + t.ff_width / t.h;
    const double masks = t.dropout ? 2.0 : 0.0;
    double linear = sbh * (t.p * widths + masks);
    if (t.t > 1) {
        const double whole = 4.0 * t.p + masks;     // Korthikanti's 10 at p = 2
        const double split = t.p * (widths - 4.0);  // and 24
        linear = sbh * ((split_all ? whole / t.t : whole) + split / t.t);
    }
    if (ckpt == Checkpointing::selective || flash) return linear;
    const double scores = t.a * t.s * t.s * t.b * (t.p + (t.dropout ? 1.0 + t.p : 0.0)) / t.t;
    return linear + scores;
}

}  // namespace napkin::formulas
