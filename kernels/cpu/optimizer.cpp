// Optimizer updates on the CPU (declared in kernels/optimizer.h): the element arithmetic of
// core/engine/optimizer.cpp's Optimizer::step, per tensor, as the reference for the CUDA twin.
#include "kernels/optimizer.h"
#include "kernels/optimizer_rule.h"
#include "kernels/step_scalars_rule.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/half.h"

namespace napkin::cpu {

namespace {

float load(const void* p, DType t, std::int64_t k) {
    switch (t) {
        case DType::bf16:
            return to_float(static_cast<const bf16_t*>(p)[k]);
        case DType::f16:
            return to_float(static_cast<const f16_t*>(p)[k]);
        default:
            return static_cast<const float*>(p)[k];
    }
}

void store(void* p, DType t, std::int64_t k, float v) {
    switch (t) {
        case DType::bf16:
            static_cast<bf16_t*>(p)[k] = bf16_t(v);
            break;
        case DType::f16:
            static_cast<f16_t*>(p)[k] = f16_t(v);
            break;
        default:
            static_cast<float*>(p)[k] = v;
            break;
    }
}

void update(const OptimizerHyper& h, const OptimizerTensor& t, DType s) {
    const float wd = t.weight_decay, scale = optimizer_grad_scale(h);
#pragma omp parallel for if (t.n > 16384)
    for (std::int64_t k = 0; k < t.n; ++k) {
        const float g = load(t.grad, t.grad_dtype, k) * scale;
        float m = t.m != nullptr ? load(t.m, s, k) : 0.0f;
        float v = t.v != nullptr ? load(t.v, s, k) : 0.0f;
        const float w = t.master != nullptr ? t.master[k] : load(t.weight, t.weight_dtype, k);
        const float wk = optimizer_rule(h, g, w, wd, m, v);
        if (t.m != nullptr) store(t.m, s, k, m);
        if (t.v != nullptr) store(t.v, s, k, v);
        if (t.master != nullptr) t.master[k] = wk;
        if (t.weight != nullptr) store(t.weight, t.weight_dtype, k, wk);
    }
}

// 8-bit states, one block of kOptimizer8bitBlock elements at a time: dequantize, the rule in
// fp32, then the block's new absmax and the nearest codes.
void update_8bit(const OptimizerHyper& h, const OptimizerTensor& t) {
    static const DynamicMap m_map = dynamic_map(true), v_map = dynamic_map(false);
    const float wd = t.weight_decay, scale = optimizer_grad_scale(h);
    const std::int64_t blocks = optimizer_8bit_blocks(t.n);
    constexpr auto kBlock = static_cast<std::int64_t>(kOptimizer8bitBlock);
    auto* mq = static_cast<std::uint8_t*>(t.m);
    auto* vq = static_cast<std::uint8_t*>(t.v);
#pragma omp parallel for if (t.n > 16384)
    for (std::int64_t b = 0; b < blocks; ++b) {
        float ms[kBlock], vs[kBlock];
        const std::int64_t k0 = b * kBlock, k1 = std::min(t.n, k0 + kBlock);
        float m_max = 0.0f, v_max = 0.0f;
        for (std::int64_t k = k0; k < k1; ++k) {
            const float g = load(t.grad, t.grad_dtype, k) * scale;
            float m = m_map.value[mq[k]] * t.m_absmax[b];
            float v = v_map.value[vq[k]] * t.v_absmax[b];
            const float w = t.master != nullptr ? t.master[k] : load(t.weight, t.weight_dtype, k);
            const float wk = optimizer_rule(h, g, w, wd, m, v);
            if (t.master != nullptr) t.master[k] = wk;
            if (t.weight != nullptr) store(t.weight, t.weight_dtype, k, wk);
            ms[k - k0] = m;
            vs[k - k0] = v;
            m_max = std::max(m_max, std::fabs(m));
            v_max = std::max(v_max, v);
        }
        t.m_absmax[b] = m_max;
        t.v_absmax[b] = v_max;
        for (std::int64_t k = k0; k < k1; ++k) {
            mq[k] = m_max > 0.0f ? dynamic_quantize(ms[k - k0] / m_max, m_map)
                                 : dynamic_quantize(0.0f, m_map);
            vq[k] = v_max > 0.0f ? dynamic_quantize(vs[k - k0] / v_max, v_map) : 0;
        }
    }
}

}  // namespace

void optimizer_update(const OptimizerHyper& h, const OptimizerTensor* tensors, int count,
                      DType state_dtype) {
    NAPKIN_ASSERT(
        state_dtype == DType::f32 || state_dtype == DType::bf16 || state_dtype == DType::i8,
        "optimizer_update: state dtype " << dtype_name(state_dtype));
    NAPKIN_ASSERT(!h.schedule_from_gate || h.gate != nullptr,
                  "optimizer_update: schedule_from_gate without a gate");
    if (optimizer_skips(h)) return;  // the gate's non-finite norm: no update
    const OptimizerHyper hs = optimizer_scheduled(h);
    for (int i = 0; i < count; ++i) {
        const OptimizerTensor& t = tensors[i];
        NAPKIN_ASSERT(t.master != nullptr || t.weight != nullptr,
                      "optimizer_update: tensor " << i << " has neither a master nor a weight");
        if (state_dtype == DType::i8) {
            NAPKIN_ASSERT(
                t.m != nullptr && t.v != nullptr && t.m_absmax != nullptr && t.v_absmax != nullptr,
                "optimizer_update: tensor " << i << ": 8-bit states need m, v and their absmax");
            update_8bit(hs, t);
        } else {
            update(hs, t, state_dtype);
        }
    }
}

double grad_sum_squares(const OptimizerTensor* tensors, int count) {
    double sumsq = 0.0;
    for (int i = 0; i < count; ++i) {
        const OptimizerTensor& t = tensors[i];
        constexpr std::int64_t kBlocks = 64;
        double parts[kBlocks] = {};
        const std::int64_t per = (t.n + kBlocks - 1) / kBlocks;
#pragma omp parallel for if (t.n > 65536)
        for (std::int64_t b = 0; b < kBlocks; ++b) {
            double acc = 0.0;
            for (std::int64_t k = b * per; k < std::min(t.n, (b + 1) * per); ++k) {
                const double g = load(t.grad, t.grad_dtype, k);
                acc += g * g;
            }
            parts[b] = acc;
        }
        for (double part : parts)
            sumsq += part;
    }
    return sumsq;
}

bool grad_unscale_check(const OptimizerTensor* tensors, int count, float scale) {
    bool nonfinite = false;
    for (int i = 0; i < count; ++i) {
        const OptimizerTensor& t = tensors[i];
        void* g = t.grad;
        for (std::int64_t k = 0; k < t.n; ++k) {
            const float v = load(g, t.grad_dtype, k) * scale;
            nonfinite = nonfinite || !std::isfinite(v);
            store(g, t.grad_dtype, k, v);
        }
    }
    return nonfinite;
}

}  // namespace napkin::cpu
