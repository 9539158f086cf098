// The inference estimate (estimator/inference.h): memory by counting the engine's tensors, time
// by the roofline of each phase over the device profile's rates. docs/INFERENCE.md derives it.
#include "estimator/inference.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/buffer_plan.h"
#include "core/check.h"
#include "estimator/solver.h"
#include "kernels/attention.h"
#include "kernels/lora.h"
#include "kernels/matmul.h"
#include "kernels/nf4.h"

namespace napkin {

namespace {

// Compute efficiency where the profile has no table for the GEMM dtype (and no bf16 one).
constexpr double kStandInEfficiency = 0.5;

double bytes_of(DType t) {
    return dtype_bits(t) / 8.0;
}

// One of the block's linear layers, out (M, N) = in (M, K) @ W (N, K)^T, and its LoRA parts.
struct Linear {
    std::int64_t N = 0, K = 0;
    int lora_parts = 1;
};

// attn.qkv, attn.proj, mlp.fc (gate and up under SwiGLU), mlp.proj (core/model_config.cpp).
std::array<Linear, 4> block_linears(const ModelConfig& c) {
    const bool swiglu = c.mlp == MlpKind::swiglu;
    return {Linear{c.qkv_dim(), c.d_model, 3}, Linear{c.d_model, c.q_dim(), 1},
            Linear{swiglu ? 2 * c.d_ff : c.d_ff, c.d_model, swiglu ? 2 : 1},
            Linear{c.d_model, c.d_ff, 1}};
}

bool has_bias(const ModelConfig& c, std::size_t linear) {
    return c.bias || (linear == 0 && c.qkv_bias);
}

// Whether a linear weight is widened into a temporary before its GEMM.
bool dequantized(const InferenceInputs& in) {
    switch (in.weights) {
        case WeightFormat::fp32:
        case WeightFormat::bf16:
        case WeightFormat::fp16:
            return false;
        case WeightFormat::fp8:
            return in.gemm_dtype != DType::f8e4m3;
        case WeightFormat::int8:
        case WeightFormat::int4:
        case WeightFormat::nf4:
            return true;
    }
    return true;
}

// The profile's rate for a GEMM or attention, or peak x --mfu without a profile.
struct Rates {
    const InferenceInputs& in;
    const GemmTable* gemm = nullptr;
    const AttentionTable* attention = nullptr;

    explicit Rates(const InferenceInputs& i) : in(i) {
        if (in.profile == nullptr) return;
        const ComputeSection* s = in.profile->section(0);
        if (s == nullptr) return;
        const DType act = working_dtype(in.weights);
        for (const DType want : {in.gemm_dtype, DType::bf16}) {
            for (const GemmTable& t : s->gemm)
                if (gemm == nullptr && t.dtype == want && t.pass == GemmPass::forward) gemm = &t;
        }
        for (const DType want : {act, DType::bf16}) {
            for (const AttentionTable& t : s->attention) {
                if (attention == nullptr && t.dtype == want && t.impl == AttentionImpl::flash &&
                    t.causal && t.direction == Direction::forward)
                    attention = &t;
            }
        }
    }
    double fallback() const {
        return in.profile == nullptr ? in.peak_flops_per_s * in.mfu
                                     : in.peak_flops_per_s * kStandInEfficiency;
    }
    double gemm_seconds(double flops, std::int64_t M, std::int64_t N, std::int64_t K) const {
        return flops / (gemm != nullptr ? gemm->flops_per_s(M, N, K) : fallback());
    }
    double attention_seconds(double flops, std::int64_t T, std::int64_t HD, std::int64_t BH) const {
        return flops / (attention != nullptr ? attention->flops_per_s(T, HD, BH) : fallback());
    }
};

void check_inputs(const InferenceInputs& in) {
    validate(in.model);
    if (in.batch < 1) throw UsageError("{batch}: must be a positive integer");
    if (in.prompt_len < 1) throw UsageError("{prompt_len}: must be a positive integer");
    if (in.gen_len < 1) throw UsageError("{gen_len}: must be a positive integer");
    if (in.adapters < 0) throw UsageError("{adapters}: must be 0 or a positive integer");
    if (in.adapters > 0 && in.lora_rank < 1)
        throw UsageError("{lora_rank}: must be a positive integer");
    if (!(in.memory_bytes_per_s > 0) || !(in.gpu_memory_bytes > 0))
        throw UsageError("{gpu}: the inference estimate needs the GPU's bandwidth and memory");
    if (!(in.peak_flops_per_s > 0) && in.profile == nullptr)
        throw UsageError("{peak_flops_per_s}: the GPU has no peak for " +
                         std::string(dtype_name(in.gemm_dtype)) + " GEMMs; give one");
    if (in.profile == nullptr && !(in.mfu > 0 && in.mfu <= 1))
        throw UsageError("{mfu}: must be in (0, 1]");
    const std::int64_t context = in.prompt_len + in.gen_len;
    if (in.model.positions == PositionKind::learned && context > in.model.context_length) {
        throw UsageError("{prompt_len} + {gen_len}: " + std::to_string(context) +
                         " positions exceed the learned position table's " +
                         std::to_string(in.model.context_length));
    }
}

// Weights: the linear weights in their format, the rest in the working dtype; the adapters.
void count_weights(const InferenceInputs& in, InferenceEstimate& e) {
    const ModelConfig& c = in.model;
    const DType w = working_dtype(in.weights);
    double embedding_tables = 0;  // read B rows per step, not whole: left out of decode's bytes
    for (const ParamTensor& t : param_tensors(c, in.adapters > 0 ? in.lora_rank : 0)) {
        const double n = static_cast<double>(t.numel());
        if (t.linear_weight) {
            e.memory.linear_weights += linear_weight_bytes(in.weights, t.shape[0], t.shape[1]);
        } else if (t.adapter) {
            e.adapter_params += n;
        } else {
            e.memory.other_weights += n * bytes_of(w);
            if (t.name == "wpe" || (t.name == "wte" && !c.tied_embeddings))
                embedding_tables += n * bytes_of(w);
        }
    }
    const double adapter_bytes = e.adapter_params * bytes_of(w);
    e.memory.adapters = in.adapters * adapter_bytes;
    // Each step reads the base once and each adapter its sequences use: min(adapters, B).
    e.decode_weight_bytes =
        e.memory.linear_weights + e.memory.other_weights - embedding_tables +
        static_cast<double>(std::min<std::int64_t>(in.adapters, in.batch)) * adapter_bytes;
}

void count_kv(const InferenceInputs& in, InferenceMemory& m) {
    const ModelConfig& c = in.model;
    const double kvb = kv_bytes_per_element(in.kv), L = c.n_layers;
    const double HD = static_cast<double>(c.head_dim());
    m.kv_per_token_layer = 2.0 * c.n_kv_heads * HD * kvb;
    m.kv_per_token = L * m.kv_per_token_layer;
    m.kv_per_token_mha = L * 2.0 * c.n_heads * HD * kvb;
    m.kv_per_token_mqa = L * 2.0 * HD * kvb;
    m.kv_per_sequence = m.kv_per_token * static_cast<double>(in.prompt_len + in.gen_len);
    m.kv_total = m.kv_per_sequence * static_cast<double>(in.batch);
}

// One step of M tokens (B sequences): the residual stream plus, at the widest op of a block,
// its input and output (and a LoRA adapter's intermediate, parts x r), all in the working dtype;
// and the fp32 logits of each sequence's last position, (B, Vp).
double step_activations(const InferenceInputs& in, double M) {
    const ModelConfig& c = in.model;
    const std::int64_t r = in.adapters > 0 ? in.lora_rank : 0;
    const auto [qkv, proj, fc, down] = block_linears(c);
    // (in + out) of each op of a block, in order: qkv, attention, proj, fc, activation, proj.
    const std::int64_t widths[] = {qkv.K + qkv.N + qkv.lora_parts * r,
                                   c.qkv_dim() + c.q_dim(),
                                   proj.K + proj.N + proj.lora_parts * r,
                                   fc.K + fc.N + fc.lora_parts * r,
                                   fc.N + c.d_ff,
                                   down.K + down.N + down.lora_parts * r};
    const double widest =
        static_cast<double>(*std::max_element(std::begin(widths), std::end(widths)));
    const double a = bytes_of(working_dtype(in.weights));
    return a * M * (static_cast<double>(c.d_model) + widest) +
           4.0 * static_cast<double>(in.batch) * static_cast<double>(c.padded_vocab_size);
}

void count_memory(const InferenceInputs& in, InferenceEstimate& e) {
    InferenceMemory& m = e.memory;
    count_kv(in, m);
    m.prefill_activations = step_activations(in, static_cast<double>(in.batch * in.prompt_len));
    m.decode_activations = in.gen_len > 1 ? step_activations(in, static_cast<double>(in.batch)) : 0;
    m.gemm_workspace = static_cast<double>(cuda::kMatmulWorkspaceBytes);
    if (dequantized(in)) {
        std::int64_t widest = 0;
        for (const Linear& l : block_linears(in.model))
            widest = std::max(widest, l.N * l.K);
        m.dequant = static_cast<double>(widest) * bytes_of(in.gemm_dtype);
    }
    m.total = m.weights() + m.kv_total + std::max(m.prefill_activations, m.decode_activations) +
              m.gemm_workspace + m.dequant;
    e.fits = m.total <= in.gpu_memory_bytes;
}

// A step of M = B T tokens per pass over the weights, each attending to `keys` positions
// (prefill: T = Tp, the causal triangle; decode: T = 1 against S cached keys), with the head on
// each sequence's last position. kv_read: the cache's bytes it reads.
StepCost step_cost(const InferenceInputs& in, const Rates& rates, std::int64_t T, std::int64_t keys,
                   double weight_bytes, double kv_read) {
    const ModelConfig& c = in.model;
    const std::int64_t B = in.batch, M = B * T, HD = c.head_dim();
    const DType act = working_dtype(in.weights);
    StepCost s;
    double layer_flops = 0, layer_seconds = 0;
    const auto linears = block_linears(c);
    for (std::size_t i = 0; i < linears.size(); ++i) {
        const Linear& l = linears[i];
        const double f = static_cast<double>(
            matmul_forward_cost({M, l.N, l.K, has_bias(c, i), in.gemm_dtype, act, in.gemm_dtype})
                .flops);
        layer_flops += f;
        layer_seconds += rates.gemm_seconds(f, M, l.N, l.K);
        if (in.adapters > 0) {
            const double fa = static_cast<double>(
                lora_forward_cost({M, l.N, l.K, in.lora_rank, l.lora_parts, act, act}).flops);
            layer_flops += fa;
            layer_seconds += rates.gemm_seconds(fa, M, in.lora_rank, l.K);
        }
    }
    // Attention: prefill's causal pairs T (T + 1) / 2 per head, decode's S keys per head; 4 HD
    // FLOPs per pair (Q K^T and P V), kernels/attention.h.
    const AttentionShape shape{B, T, c.n_heads, c.n_kv_heads, HD, true, AttentionImpl::flash, act};
    const double attn = T > 1 ? static_cast<double>(attention_forward_cost(shape).flops)
                              : 4.0 * B * c.n_heads * HD * static_cast<double>(keys);
    layer_flops += attn;
    layer_seconds += rates.attention_seconds(attn, keys, HD, B * c.n_heads);
    const std::int64_t Vp = c.padded_vocab_size;
    const double head = static_cast<double>(
        matmul_forward_cost({B, Vp, c.d_model, false, in.gemm_dtype, DType::f32, in.gemm_dtype})
            .flops);
    s.flops = c.n_layers * layer_flops + head;
    s.compute_seconds = c.n_layers * layer_seconds + rates.gemm_seconds(head, B, Vp, c.d_model);
    s.bytes = weight_bytes + kv_read;
    s.memory_seconds = s.bytes / in.memory_bytes_per_s;
    return s;
}

void estimate_time(const InferenceInputs& in, InferenceEstimate& e) {
    const Rates rates(in);
    const double B = static_cast<double>(in.batch), Tp = static_cast<double>(in.prompt_len);
    const double kv_tok = e.memory.kv_per_token;
    // Prefill reads the weights once and writes the prompts' K and V.
    e.prefill = step_cost(in, rates, in.prompt_len, in.prompt_len, e.decode_weight_bytes, 0.0);
    e.prefill.bytes += B * Tp * kv_tok;
    e.prefill.memory_seconds = e.prefill.bytes / in.memory_bytes_per_s;
    e.decode_steps = in.gen_len - 1;
    for (std::int64_t j = 1; j <= e.decode_steps; ++j) {
        const std::int64_t S = in.prompt_len + j;
        const StepCost s =
            step_cost(in, rates, 1, S, e.decode_weight_bytes, B * static_cast<double>(S) * kv_tok);
        e.decode_seconds += s.seconds();
        e.decode_memory_bound_steps += s.memory_bound() ? 1 : 0;
        if (j == 1) e.decode_first = s;
        if (j == e.decode_steps) e.decode_last = s;
    }
    if (e.decode_steps > 0) {
        e.seconds_per_token = e.decode_seconds / static_cast<double>(e.decode_steps);
        e.tokens_per_s_per_sequence = 1.0 / e.seconds_per_token;
        e.tokens_per_s = B / e.seconds_per_token;
    }
    e.total_seconds = e.prefill.seconds() + e.decode_seconds;
}

// The smallest batch whose first decode step is compute-bound (0: none up to 2^24).
double compute_bound_batch(const InferenceInputs& base, const InferenceEstimate& e) {
    InferenceInputs in = base;
    const Rates rates(in);
    const std::int64_t S = in.prompt_len + 1;
    const auto memory_bound = [&](double b) {
        in.batch = static_cast<std::int64_t>(b);
        return step_cost(in, rates, 1, S, e.decode_weight_bytes,
                         b * static_cast<double>(S) * e.memory.kv_per_token)
            .memory_bound();
    };
    if (!memory_bound(1)) return 1;
    constexpr double kLimit = 1 << 24;
    int evaluations = 0;
    const double last = largest_fitting(1, kLimit, memory_bound, evaluations);
    return last >= kLimit ? 0 : last + 1;
}

}  // namespace

int kv_bytes_per_element(KvFormat f) {
    switch (f) {
        case KvFormat::fp32:
            return 4;
        case KvFormat::bf16:
        case KvFormat::fp16:
            return 2;
        case KvFormat::fp8:
        case KvFormat::int8:
            return 1;
    }
    return 0;
}

DType working_dtype(WeightFormat f) {
    if (f == WeightFormat::fp32) return DType::f32;
    return f == WeightFormat::fp16 ? DType::f16 : DType::bf16;
}

double linear_weight_bytes(WeightFormat f, std::int64_t N, std::int64_t K) {
    const double n = static_cast<double>(N) * static_cast<double>(K);
    switch (f) {
        case WeightFormat::fp32:
            return 4 * n;
        case WeightFormat::bf16:
        case WeightFormat::fp16:
            return 2 * n;
        case WeightFormat::fp8:
            return n + 4;
        case WeightFormat::int8:
            return n + 2.0 * static_cast<double>(N);
        case WeightFormat::int4:
            return std::ceil(n / 2) + 4.0 * static_cast<double>(N) *
                                          static_cast<double>((K + kInt4Group - 1) / kInt4Group);
        case WeightFormat::nf4:
            return static_cast<double>(nf4_storage_bytes(N * K));
    }
    return 0;
}

InferenceEstimate estimate_inference(const InferenceInputs& in) {
    check_inputs(in);
    InferenceEstimate e;
    e.params = count_params(in.model);
    count_weights(in, e);
    count_memory(in, e);
    estimate_time(in, e);
    e.compute_bound_batch = compute_bound_batch(in, e);
    e.past_context = in.prompt_len + in.gen_len > in.model.context_length;
    return e;
}

InferenceSolve solve_inference(const InferenceInputs& base, InferenceSolveFor what,
                               InferenceInputs& solved) {
    solved = base;
    std::int64_t& x = what == InferenceSolveFor::max_batch ? solved.batch : solved.prompt_len;
    double limit = 1 << 24;
    if (what == InferenceSolveFor::max_context && base.model.positions == PositionKind::learned) {
        limit = static_cast<double>(base.model.context_length - base.gen_len);
        if (limit < 1) {
            throw UsageError(
                "{gen_len}: leaves no room for a prompt in the learned position "
                "table's " +
                std::to_string(base.model.context_length) + " rows");
        }
    }
    InferenceSolve r;
    const auto fits = [&](double v) {
        x = static_cast<std::int64_t>(v);
        return estimate_inference(solved).fits;
    };
    ++r.evaluations;
    if (fits(1)) {
        r.value = largest_fitting(1, limit, fits, r.evaluations);
        r.at_limit = r.value >= limit;
    }
    x = r.value > 0 ? static_cast<std::int64_t>(r.value) : 1;
    r.at = estimate_inference(solved);
    return r;
}

InferenceEngineMemory inference_engine_memory(const InferenceInputs& in, const InferenceEstimate& e,
                                              DeviceKind device, bool flash_decoding) {
    const bool fp32 = in.weights == WeightFormat::fp32 && in.kv == KvFormat::fp32;
    const bool bf16 = in.weights == WeightFormat::bf16 && in.kv == KvFormat::bf16;
    if (!(fp32 || bf16) || in.adapters > 0) {
        throw UsageError(
            "the inference engine holds weights and cache in fp32 or bf16, without "
            "adapters");
    }
    const ModelConfig& c = in.model;
    const double a = fp32 ? 4.0 : 2.0, B = static_cast<double>(in.batch);
    const auto M = in.batch * in.prompt_len;
    const double Vp = static_cast<double>(c.padded_vocab_size);
    InferenceEngineMemory m;
    m.parameters = e.memory.weights();
    m.kv_cache = e.memory.kv_total;
    m.activations = e.memory.prefill_activations - 4.0 * B * Vp + a * B * Vp;
    // The norms' stats (2 fp32 per token), the GEMM scratch and flash-decoding's partials, which
    // the engine allocates from the same sizes (core/buffer_plan.h's generate_buffers).
    const GenerateBuffers b =
        generate_buffers(c, {in.batch, in.prompt_len, in.gen_len, flash_decoding},
                         fp32 ? DType::f32 : DType::bf16, device);
    m.temporaries = 2.0 * 4.0 * static_cast<double>(M) +
                    4.0 * static_cast<double>(b.matmul_scratch_floats) +
                    4.0 * static_cast<double>(b.decode_workspace_floats);
    m.data = 4.0 * static_cast<double>(M);
    return m;
}

}  // namespace napkin
