// GeneratorImpl's ops (core/engine/generate_impl.h): one step of M = B Tq tokens. Each op opens
// its range (named as the training engine's ops, "h.3.attn.qkv") with its kernel's analytic cost
// and calls the backend. Included at the end of generate_impl.h.
#pragma once

#include <string>

#include "core/engine/generate_impl.h"  // NOLINT(build/include): the class these members belong to
#include "core/op_plan.h"

namespace napkin {

namespace generate_detail {
// An op's name in the op plan's words (core/op_plan.h's roles), "h.<l>." before a block's: the
// trace's ranges and report's ops match the training engine's by construction.
inline std::string op_name(OpRole role) {
    return std::string(enum_name(kOpRoleNames, role));
}
inline std::string op_name(int l, OpRole role) {
    return "h." + std::to_string(l) + "." + op_name(role);
}
}  // namespace generate_detail

template <class Kernels>
void GeneratorImpl<Kernels>::embed(std::int64_t Tq) {
    const std::int64_t C = cfg_.d_model;
    Scope s;
    open(s, generate_detail::op_name(OpRole::embedding), "embedding_forward",
         embedding_forward_cost({.B = shape_.batch,
                                 .T = Tq,
                                 .C = C,
                                 .learned_positions = p_wpe_ != nullptr,
                                 .dt = dtype()}));
    // The position table from row pos_: every sequence is at the same position.
    k_.embedding_forward({.out = x(),
                          .tokens = tokens_.template data<std::int32_t>(),
                          .wte = w(p_wte_),
                          .wpe = p_wpe_ != nullptr ? w(p_wpe_) + pos_ * C : nullptr,
                          .B = shape_.batch,
                          .T = Tq,
                          .C = C});
}

template <class Kernels>
void GeneratorImpl<Kernels>::norm(const std::string& name, T* out, const T* inp, std::int64_t rows,
                                  const ParamSlot* weight, const ParamSlot* bias) {
    const std::int64_t C = cfg_.d_model;
    const NormShape shape{.N = rows,
                          .C = C,
                          .kind = cfg_.norm,
                          .bias = bias != nullptr,
                          .in = dtype(),
                          .out = dtype()};
    Scope s;
    float* stats = stats_.template data<float>();  // mean (rows), then rstd (rows)
    if (cfg_.norm == NormKind::layernorm) {
        open(s, name, "layernorm_forward", norm_forward_cost(shape));
        k_.layernorm_forward({.out = out,
                              .mean = stats,
                              .rstd = stats + rows,
                              .inp = inp,
                              .weight = w(weight),
                              .bias = w(bias),
                              .N = rows,
                              .C = C});
    } else {
        open(s, name, "rmsnorm_forward", norm_forward_cost(shape));
        k_.rmsnorm_forward(
            {.out = out, .rstd = stats, .inp = inp, .weight = w(weight), .N = rows, .C = C});
    }
}

template <class Kernels>
void GeneratorImpl<Kernels>::linear(const std::string& name, T* out, const T* inp, std::int64_t M,
                                    const ParamSlot* weight, const ParamSlot* bias, std::int64_t N,
                                    std::int64_t K) {
    Scope s;
    open(s, name, "matmul_forward",
         matmul_forward_cost({.M = M,
                              .N = N,
                              .K = K,
                              .bias = bias != nullptr,
                              .in = dtype(),
                              .out = dtype(),
                              .weight = dtype()}));
    k_.matmul_forward({.out = out,
                       .inp = inp,
                       .weight = w(weight),
                       .bias = w(bias),
                       .M = M,
                       .N = N,
                       .K = K,
                       .scratch = scratch_.template data<float>()});
}

// residual += branch (n elements).
template <class Kernels>
void GeneratorImpl<Kernels>::residual_add(const std::string& name, const T* branch,
                                          std::int64_t n) {
    Scope s;
    open(s, name, "residual_forward",
         residual_forward_cost({.N = n / cfg_.d_model, .C = cfg_.d_model, .dt = dtype()}));
    k_.residual_forward({.out = x(), .a = x(), .b = branch, .n = n});
}

// ln_1, qkv, RoPE, the new keys and values into the cache, attention over it, proj, the add.
template <class Kernels>
void GeneratorImpl<Kernels>::attention_half(int l, std::int64_t Tq) {
    const gpt_detail::LayerParams& p = layers_[static_cast<std::size_t>(l)];
    const std::int64_t B = shape_.batch, M = B * Tq, C = cfg_.d_model, HD = cfg_.head_dim();
    const int NH = cfg_.n_heads, KVH = cfg_.n_kv_heads;
    norm(generate_detail::op_name(l, OpRole::ln_1), lo(), x(), M, p.ln1_w, p.ln1_b);
    T* qkv = hi(M * cfg_.qkv_dim());
    linear(generate_detail::op_name(l, OpRole::attn_qkv), qkv, lo(), M, p.qkv_w, p.qkv_b,
           cfg_.qkv_dim(), C);
    if (cfg_.positions == PositionKind::rope) {
        Scope s;
        open(s, generate_detail::op_name(l, OpRole::attn_rope), "rope_forward",
             rope_forward_cost({.B = B, .T = Tq, .NH = NH, .KVH = KVH, .HD = HD, .dt = dtype()}));
        k_.rope_forward(
            {.qkv = qkv, .B = B, .T = Tq, .NH = NH, .KVH = KVH, .HD = HD, .pos_offset = pos_});
    }
    // Layer l's keys, then its values: (B, S, KVH, HD) each.
    const std::int64_t S = shape_.positions(), layer = B * S * cfg_.kv_dim();
    T* k_cache = cache_.template data<T>() + 2 * l * layer;
    // Flash-decoding's split for the decode steps when the backend allocated its workspace; the
    // prefill's B Tp NH single-pass blocks already fill the device.
    const bool split = decode_ws_.numel() > 0 && Tq == 1;
    DecodeAttentionShape shape{
        .B = B, .Tq = Tq, .pos = pos_, .NH = NH, .KVH = KVH, .HD = HD, .dt = dtype()};
    {
        Scope s;
        // attn.kv_cache: decoding's own op, in no training plan.
        open(s, "h." + std::to_string(l) + ".attn.kv_cache", "kv_cache_write",
             kv_cache_write_cost(shape));
        k_.kv_cache_write(cache_step(
            KvCacheWriteArgs<T>{.k_cache = k_cache, .v_cache = k_cache + layer, .qkv = qkv}, Tq));
    }
    {
        Scope s;
        if (split) shape.chunk = kDecodeAttentionChunk;
        open(s, generate_detail::op_name(l, OpRole::attn_core), "decode_attention",
             decode_attention_cost(shape));
        k_.decode_attention(cache_step(
            DecodeAttentionArgs<T>{.out = lo(),
                                   .qkv = qkv,
                                   .k_cache = k_cache,
                                   .v_cache = k_cache + layer,
                                   .workspace = split ? decode_ws_.template data<float>() : nullptr,
                                   .workspace_floats = split ? decode_ws_.numel() : 0,
                                   .chunk = kDecodeAttentionChunk},
            Tq));
    }
    linear(generate_detail::op_name(l, OpRole::attn_proj), hi(M * C), lo(), M, p.proj_w, p.proj_b,
           C, cfg_.q_dim());
    residual_add(generate_detail::op_name(l, OpRole::attn_res), hi(M * C), M * C);
}

// ln_2, fc, the activation, the down projection, the add.
template <class Kernels>
void GeneratorImpl<Kernels>::mlp_half(int l, std::int64_t Tq) {
    const gpt_detail::LayerParams& p = layers_[static_cast<std::size_t>(l)];
    const std::int64_t M = shape_.batch * Tq, C = cfg_.d_model, F = cfg_.d_ff;
    const bool swiglu = cfg_.mlp == MlpKind::swiglu;
    const std::int64_t fc_rows = swiglu ? 2 * F : F;
    norm(generate_detail::op_name(l, OpRole::ln_2), lo(), x(), M, p.ln2_w, p.ln2_b);
    linear(generate_detail::op_name(l, OpRole::mlp_fc), hi(M * fc_rows), lo(), M, p.fc_w, p.fc_b,
           fc_rows, C);
    {
        Scope s;
        open(s, generate_detail::op_name(l, OpRole::mlp_act),
             swiglu ? "swiglu_forward" : "gelu_forward",
             activation_forward_cost(
                 {.N = M, .F = F, .kind = cfg_.mlp, .dt = dtype(), .out = dtype()}));
        if (swiglu) {
            k_.swiglu_forward({.out = lo(), .inp = hi(M * fc_rows), .N = M, .F = F});
        } else {
            k_.gelu_forward({.out = lo(), .inp = hi(M * fc_rows), .n = M * F});
        }
    }
    linear(generate_detail::op_name(l, OpRole::mlp_proj), hi(M * C), lo(), M, p.down_w, p.down_b, C,
           F);
    residual_add(generate_detail::op_name(l, OpRole::mlp_res), hi(M * C), M * C);
}

// ln_f on each sequence's last position (one row each, into the arena's low end), then the head:
// logits (B, Vp) against the token embedding (tied) or lm_head.
template <class Kernels>
void GeneratorImpl<Kernels>::head(std::int64_t Tq) {
    const std::int64_t B = shape_.batch, C = cfg_.d_model;
    for (std::int64_t b = 0; b < B; ++b)
        norm(generate_detail::op_name(OpRole::ln_f), lo() + b * C, x() + (b * Tq + Tq - 1) * C, 1,
             p_lnf_w_, p_lnf_b_);
    linear(generate_detail::op_name(OpRole::lm_head), logits_.template data<T>(), lo(), B,
           p_head_ != nullptr ? p_head_ : p_wte_, nullptr, cfg_.padded_vocab_size, C);
}

}  // namespace napkin
