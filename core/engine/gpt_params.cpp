#include "core/engine/gpt_params.h"

#include <algorithm>
#include <cmath>

#include "kernels/nf4.h"

namespace napkin::gpt_detail {

std::vector<ParamSlot> allocate_params(AccountingAllocator& alloc, const ModelConfig& cfg,
                                       const PlanInputs& in, DType storage, bool master) {
    const bool adapters = in.finetune != Finetune::full;
    const bool nf4 = in.finetune == Finetune::qlora;
    std::vector<ParamSlot> params;
    for (const ParamTensor& pt : param_tensors(cfg, adapters ? in.lora_rank : 0)) {
        ParamSlot s;
        s.name = pt.name;
        s.numel = pt.numel();
        s.decay = pt.shape.size() >= 2;
        s.trainable = !adapters || pt.adapter;
        s.adapter = pt.adapter;
        if (nf4 && pt.linear_weight) {
            s.weight = Tensor(alloc, pt.name, MemCategory::parameters, DType::nf4, {s.numel});
            s.quant = Tensor(alloc, pt.name + ".nf4_state", MemCategory::parameters, DType::i8,
                             {static_cast<std::int64_t>(nf4_state_bytes(s.numel))});
        } else {
            s.weight = Tensor(alloc, pt.name, MemCategory::parameters, storage, {s.numel});
        }
        if (s.trainable) {
            s.grad = Tensor(alloc, pt.name + ".grad", MemCategory::gradients, storage, {s.numel});
            if (master) {
                s.master = Tensor(alloc, pt.name + ".master", MemCategory::master_weights,
                                  DType::f32, {s.numel});
            }
        }
        params.push_back(std::move(s));
    }
    return params;
}

void initial_values(const ParamSlot& p, const ModelConfig& cfg, std::mt19937_64& rng,
                    std::vector<float>& out) {
    out.assign(static_cast<std::size_t>(p.numel), 0.0f);
    const bool is_norm = p.name.find("ln_") != std::string::npos;
    const bool is_bias = p.name.ends_with(".bias");
    const bool lora_a = p.name.ends_with(".lora_a"), lora_b = p.name.ends_with(".lora_b");
    if (lora_a) {
        // in_features: d_ff for the down projection's adapter, d_model for the others.
        const std::int64_t in =
            p.name.find(".mlp.proj.") != std::string::npos ? cfg.d_ff : cfg.d_model;
        const float bound = 1.0f / std::sqrt(static_cast<float>(in));
        std::uniform_real_distribution<float> ud(-bound, bound);
        for (float& v : out)
            v = ud(rng);
    } else if (is_norm && !is_bias) {
        std::fill(out.begin(), out.end(), 1.0f);
    } else if (p.decay && !lora_b) {  // B stays zero
        const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(cfg.n_layers));
        const bool residual = p.name.find("attn.proj.weight") != std::string::npos ||
                              p.name.find("mlp.proj.weight") != std::string::npos;
        std::normal_distribution<float> nd(0.0f, residual ? residual_std : 0.02f);
        std::int64_t rows_used = p.numel;
        if (p.name == "wte" || p.name == "lm_head") rows_used = cfg.vocab_size * cfg.d_model;
        for (std::int64_t k = 0; k < rows_used; ++k)
            out[static_cast<std::size_t>(k)] = nd(rng);
    }
}

ParamSlot* find_param(std::vector<ParamSlot>& params, const std::string& name) {
    for (ParamSlot& p : params) {
        if (p.name == name) return &p;
    }
    return nullptr;
}

LayerParams layer_params(std::vector<ParamSlot>& params, int l) {
    const std::string h = "h." + std::to_string(l) + ".";
    auto find = [&](const char* name) { return find_param(params, h + name); };
    LayerParams lp;
    lp.ln1_w = find("ln_1.weight");
    lp.ln1_b = find("ln_1.bias");
    lp.qkv_w = find("attn.qkv.weight");
    lp.qkv_b = find("attn.qkv.bias");
    lp.proj_w = find("attn.proj.weight");
    lp.proj_b = find("attn.proj.bias");
    lp.ln2_w = find("ln_2.weight");
    lp.ln2_b = find("ln_2.bias");
    lp.fc_w = find("mlp.fc.weight");
    lp.fc_b = find("mlp.fc.bias");
    lp.down_w = find("mlp.proj.weight");
    lp.down_b = find("mlp.proj.bias");
    lp.qkv_lora = {find("attn.qkv.lora_a"), find("attn.qkv.lora_b")};
    lp.proj_lora = {find("attn.proj.lora_a"), find("attn.proj.lora_b")};
    lp.fc_lora = {find("mlp.fc.lora_a"), find("mlp.fc.lora_b")};
    lp.down_lora = {find("mlp.proj.lora_a"), find("mlp.proj.lora_b")};
    return lp;
}

}  // namespace napkin::gpt_detail
