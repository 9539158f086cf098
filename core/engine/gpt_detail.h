// The GPT orchestration's helpers that know no kernel backend (core/engine/gpt_impl.h): the
// storage dtype of an element type, the tensors an op keeps for backward (allocated from the
// plan's own list, so measured activations are the estimator's by construction), the layer's
// parameter slots, and the kernel name an op's device-track event carries.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "core/check.h"
#include "core/engine/gpt.h"
#include "core/half.h"
#include "kernels/attention.h"

namespace napkin {

namespace gpt_detail {

template <class T>
constexpr DType storage_dtype() {
    if constexpr (std::is_same_v<T, float>)
        return DType::f32;
    else if constexpr (std::is_same_v<T, bf16_t>)
        return DType::bf16;
    else
        return DType::f16;
}

// The tensors the ops of a block (or the prologue, the epilogue) keep, allocated from the plan's
// list under their names (prefix + kept_name: "h.3.attn.qkv.out"); looked up by id.
struct KeptTensors {
    std::vector<std::pair<KeptId, Tensor>> items;

    Tensor& get(KeptId id) {
        for (auto& [i, t] : items) {
            if (i == id) return t;
        }
        NAPKIN_ASSERT(false, "no kept tensor '" << kept_name(id) << "'");
        throw;  // unreachable
    }
    void keep(AccountingAllocator& alloc, const std::string& prefix, const PlanOp& op,
              bool recomputed_only) {
        for (int i = 0; i < op.n_saved; ++i) {
            const PlanTensor& t = op.saved[static_cast<std::size_t>(i)];
            if (recomputed_only && !t.recomputed) continue;
            items.emplace_back(t.id, Tensor(alloc, prefix + std::string(t.name()),
                                            MemCategory::activations, t.dtype, {t.numel}));
        }
    }
    void release_recomputed(const std::vector<PlanOp>& ops) {
        for (const PlanOp& op : ops) {
            for (int i = 0; i < op.n_saved; ++i) {
                const PlanTensor& t = op.saved[static_cast<std::size_t>(i)];
                if (!t.recomputed) continue;
                auto it = std::find_if(items.begin(), items.end(),
                                       [&](auto& p) { return p.first == t.id; });
                if (it != items.end()) items.erase(it);
            }
        }
    }
};

// A linear layer's LoRA adapter: A (parts*r, in) and B (out, r); null without adapters.
struct LoraSlots {
    ParamSlot *a = nullptr, *b = nullptr;
};

struct LayerParams {
    ParamSlot *ln1_w = nullptr, *ln1_b = nullptr, *qkv_w = nullptr, *qkv_b = nullptr,
              *proj_w = nullptr, *proj_b = nullptr, *ln2_w = nullptr, *ln2_b = nullptr,
              *fc_w = nullptr, *fc_b = nullptr, *down_w = nullptr, *down_b = nullptr;
    LoraSlots qkv_lora, proj_lora, fc_lora, down_lora;
};

// The CPU kernel an op runs, named as in kernels/ (the device track's event names, which the
// CUDA backend's kernels share).
inline std::string_view kernel_name(const PlanOp& op, bool backward, const ModelConfig& cfg) {
    switch (op.kind) {
        case OpKind::embedding:
            return backward ? "embedding_backward" : "embedding_forward";
        case OpKind::norm:
            if (cfg.norm == NormKind::layernorm)
                return backward ? "layernorm_backward" : "layernorm_forward";
            return backward ? "rmsnorm_backward" : "rmsnorm_forward";
        case OpKind::matmul:
            return backward ? "matmul_backward" : "matmul_forward";
        case OpKind::rope:
            return backward ? "rope_backward" : "rope_forward";
        case OpKind::attention: {
            const bool naive = std::get<AttentionShape>(op.shape).impl == AttentionImpl::naive;
            if (naive) return backward ? "attention_naive_backward" : "attention_naive_forward";
            return backward ? "attention_flash_backward" : "attention_flash_forward";
        }
        case OpKind::activation:
            if (cfg.mlp == MlpKind::gelu) return backward ? "gelu_backward" : "gelu_forward";
            return backward ? "swiglu_backward" : "swiglu_forward";
        case OpKind::residual:
            return backward ? "residual_backward" : "residual_forward";
        case OpKind::lora:
            return backward ? "lora_backward" : "lora_forward";
        case OpKind::cross_entropy:
            return "head_cross_entropy";
    }
    return "kernel";
}

}  // namespace gpt_detail

}  // namespace napkin
