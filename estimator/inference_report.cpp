// The inference estimate as text, --explain and JSON (estimator/inference_report.h).
#include "estimator/inference_report.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "estimator/report.h"

namespace napkin {

namespace {

std::string weights_name(WeightFormat f) {
    return std::string(enum_name(kWeightFormatNames, f));
}
std::string kv_name(KvFormat f) {
    return std::string(enum_name(kKvFormatNames, f));
}
std::string n(double v) {
    return fmt_count(v);
}
std::string bound(const StepCost& s) {
    return s.memory_bound() ? "memory-bound" : "compute-bound";
}

void row(std::ostream& os, const std::string& label, double bytes, const std::string& detail = "") {
    char buf[96];
    std::snprintf(buf, sizeof buf, "  %-28s %17s B  ", label.c_str(), n(bytes).c_str());
    os << buf << fmt_bytes(bytes) << (detail.empty() ? "" : "  " + detail) << "\n";
}

void text_memory(std::ostream& os, const InferenceInputs& in, const InferenceEstimate& e) {
    const InferenceMemory& m = e.memory;
    const std::string work(dtype_name(working_dtype(in.weights)));
    os << "Memory on the GPU\n";
    row(os, "linear weights (" + weights_name(in.weights) + ")", m.linear_weights);
    row(os, "other weights (" + work + ")", m.other_weights, "embeddings, norms, biases");
    if (in.adapters > 0)
        row(os, "LoRA adapters (" + work + ")", m.adapters,
            std::to_string(in.adapters) + " x " + n(e.adapter_params) + " params at rank " +
                std::to_string(in.lora_rank));
    row(os, "KV cache (" + kv_name(in.kv) + ")", m.kv_total,
        n(m.kv_per_token) + " B/token, " + n(m.kv_per_sequence) + " B/sequence");
    const ModelConfig& c = in.model;
    os << "    per token: MHA (KVH = " << c.n_heads << ") " << n(m.kv_per_token_mha)
       << " B; this model (KVH = " << c.n_kv_heads << ") " << n(m.kv_per_token)
       << " B; MQA (KVH = 1) " << n(m.kv_per_token_mqa) << " B";
    if (c.n_kv_heads < c.n_heads)
        os << ": NH / KVH = " << fmt_exact(m.kv_per_token_mha / m.kv_per_token)
           << "x less than MHA";
    os << "\n";
    row(os, "activations, prefill", m.prefill_activations,
        n(static_cast<double>(in.batch * in.prompt_len)) + " tokens");
    if (m.decode_activations > 0) row(os, "activations, decode", m.decode_activations);
    row(os, "GEMM workspace", m.gemm_workspace);
    if (m.dequant > 0)
        row(os, "dequantized weight (" + std::string(dtype_name(in.gemm_dtype)) + ")", m.dequant,
            "the widest linear, one at a time");
    row(os, "total", m.total);
    os << "  " << (e.fits ? "fits" : "DOES NOT FIT") << " in " << fmt_bytes(in.gpu_memory_bytes)
       << " (" << fmt_number("%.1f", 100 * m.total / in.gpu_memory_bytes) << "%)\n";
}

void text_step(std::ostream& os, const char* label, const StepCost& s) {
    os << "  " << label << fmt_duration(s.seconds()) << " (" << bound(s) << ": FLOPs "
       << fmt_sci(s.flops) << " in " << fmt_duration(s.compute_seconds) << ", "
       << fmt_bytes(s.bytes) << " in " << fmt_duration(s.memory_seconds) << ")\n";
}

void text_time(std::ostream& os, const InferenceInputs& in, const InferenceEstimate& e,
               const InferenceContext& ctx) {
    os << "Time (" << ctx.time_source << "; bandwidth "
       << fmt_number("%.0f", in.memory_bytes_per_s / 1e9) << " GB/s)\n";
    text_step(os, "prefill (time to first token) ", e.prefill);
    if (e.decode_steps == 0) {
        os << "  decode: none ({gen_len} 1: the prefill gives the only token)\n";
    } else {
        text_step(os, "decode step 1                 ", e.decode_first);
        text_step(os, "decode step G-1               ", e.decode_last);
        os << "  decode, " << e.decode_steps << " steps: " << fmt_duration(e.decode_seconds) << ", "
           << fmt_duration(e.seconds_per_token) << " per token on average ("
           << n(e.decode_memory_bound_steps) << " memory-bound)\n"
           << "  tokens/s: " << fmt_number("%.1f", e.tokens_per_s_per_sequence) << " per sequence, "
           << fmt_number("%.1f", e.tokens_per_s) << " in all (B = " << in.batch << ")\n";
    }
    if (e.compute_bound_batch > 0)
        os << "  decode turns compute-bound from B = " << n(e.compute_bound_batch) << "\n";
    else
        os << "  decode stays memory-bound at any batch: the KV cache read grows with B as fast "
              "as the FLOPs\n";
    os << "  total: " << fmt_duration(e.total_seconds) << "\n";
}

std::string step_explain(const StepCost& s) {
    return "max(FLOPs " + fmt_sci(s.flops) + " -> " + fmt_duration(s.compute_seconds) + ", " +
           n(s.bytes) + " B -> " + fmt_duration(s.memory_seconds) +
           ") = " + fmt_duration(s.seconds()) + ", " + bound(s);
}

void explain_memory(std::ostream& os, const InferenceInputs& in, const InferenceEstimate& e) {
    const ModelConfig& c = in.model;
    const InferenceMemory& m = e.memory;
    os << "1. Weights (every tensor as the engine allocates it; embedding rows padded to Vp = "
       << c.padded_vocab_size << ")\n"
       << "   linear weight (N, K) in " << weights_name(in.weights) << ": ";
    switch (in.weights) {
        case WeightFormat::fp32:
            os << "4 N K";
            break;
        case WeightFormat::bf16:
        case WeightFormat::fp16:
            os << "2 N K";
            break;
        case WeightFormat::fp8:
            os << "N K + 4 (an fp32 scale per tensor)";
            break;
        case WeightFormat::int8:
            os << "N K + 2 N (an fp16 absmax per row; LLM.int8, Dettmers et al. 2022)";
            break;
        case WeightFormat::int4:
            os << "ceil(N K / 2) + 4 N ceil(K / 128) (fp16 scale and zero per 128; GPTQ/AWQ)";
            break;
        case WeightFormat::nf4:
            os << "ceil(N K / 2) + 4 ceil(N K / 16384) + ceil(N K / 64) (QLoRA, Dettmers et al. "
                  "2023; kernels/nf4.h)";
            break;
    }
    os << "\n   linear weights = " << c.n_layers
       << " layers x (qkv + proj + fc + proj) = " << n(m.linear_weights)
       << " B\n   other weights = " << n(m.other_weights) << " B in "
       << dtype_name(working_dtype(in.weights)) << "\n";
    if (in.adapters > 0)
        os << "   adapters = " << in.adapters << " x " << n(e.adapter_params) << " params x "
           << dtype_bits(working_dtype(in.weights)) / 8 << " B = " << n(m.adapters)
           << " B (the base once, each adapter beside it)\n";
    os << "2. KV cache (Shazeer 2019, MQA; Ainslie et al. 2023, GQA)\n"
       << "   per token = 2 (K, V) x L x KVH x HD x bytes = 2 x " << c.n_layers << " x "
       << c.n_kv_heads << " x " << c.head_dim() << " x " << kv_bytes_per_element(in.kv) << " = "
       << n(m.kv_per_token) << " B (MHA, KVH = NH = " << c.n_heads << ": " << n(m.kv_per_token_mha)
       << " B; MQA, KVH = 1: " << n(m.kv_per_token_mqa) << " B)\n"
       << "   total = per token x (Tp + G) x B = " << n(m.kv_per_token) << " x "
       << in.prompt_len + in.gen_len << " x " << in.batch << " = " << n(m.kv_total) << " B\n"
       << "3. Activations of a step of M tokens = a M (C + widest op's in + out) + 4 B Vp (fp32 "
          "logits of the last positions)\n   prefill M = B Tp = "
       << in.batch * in.prompt_len << ": " << n(m.prefill_activations)
       << " B; decode M = B: " << n(m.decode_activations) << " B\n"
       << "   workspace: cuBLASLt " << n(m.gemm_workspace) << " B + dequantized weight "
       << n(m.dequant)
       << " B\n   total = weights + KV + max(prefill, decode) + workspace = " << n(m.total)
       << " B\n";
}

void explain_time(std::ostream& os, const InferenceInputs& in, const InferenceEstimate& e) {
    os << "4. Prefill: per token 2 FLOPs per linear weight (Kaplan et al. 2020) + attention 4 NH "
          "HD per causal pair; the head on the last position\n"
       << "   " << step_explain(e.prefill) << "\n"
       << "5. Decode step j (1..G-1) reads the weights (no embedding tables) and B (Tp + j) "
          "cached positions, once per token (Pope et al. 2022; flash-decoding splits the KV "
          "read so one sequence reaches the bandwidth)\n"
       << "   bytes_j = " << n(e.decode_weight_bytes) << " + " << in.batch << " x (Tp + j) x "
       << n(e.memory.kv_per_token) << "; time_j = max(FLOPs_j / rate, bytes_j / "
       << fmt_number("%.0f", in.memory_bytes_per_s / 1e9) << " GB/s)\n";
    if (e.decode_steps > 0) {
        os << "   step 1: " << step_explain(e.decode_first)
           << "\n   step G-1: " << step_explain(e.decode_last)
           << "\n   per token = sum / (G - 1) = " << fmt_duration(e.seconds_per_token)
           << "; tokens/s = B / per token = " << fmt_number("%.1f", e.tokens_per_s) << "\n";
    }
}

nlohmann::json step_json(const StepCost& s) {
    return {{"flops", s.flops},
            {"bytes", s.bytes},
            {"compute_seconds", s.compute_seconds},
            {"memory_seconds", s.memory_seconds},
            {"seconds", s.seconds()},
            {"bound", s.memory_bound() ? "memory" : "compute"}};
}

nlohmann::json memory_json(const InferenceInputs& in, const InferenceEstimate& e) {
    const InferenceMemory& m = e.memory;
    return {{"linear_weights", m.linear_weights},
            {"other_weights", m.other_weights},
            {"adapters", m.adapters},
            {"kv_cache",
             {{"per_token_layer", m.kv_per_token_layer},
              {"per_token", m.kv_per_token},
              {"per_token_mha", m.kv_per_token_mha},
              {"per_token_mqa", m.kv_per_token_mqa},
              {"per_sequence", m.kv_per_sequence},
              {"total", m.kv_total}}},
            {"prefill_activations", m.prefill_activations},
            {"decode_activations", m.decode_activations},
            {"gemm_workspace", m.gemm_workspace},
            {"dequant", m.dequant},
            {"total", m.total},
            {"capacity", in.gpu_memory_bytes},
            {"fits", e.fits}};
}

}  // namespace

std::string format_inference_text(const InferenceInputs& in, const InferenceEstimate& e,
                                  const InferenceContext& ctx) {
    std::ostringstream os;
    os << "napkin estimate {inference}: " << in.model.name << " (" << ctx.model_source << ") on "
       << ctx.gpu << " (" << ctx.gpu_full_name << ")\n"
       << "weights " << weights_name(in.weights) << " (GEMMs in " << dtype_name(in.gemm_dtype)
       << "), KV cache " << kv_name(in.kv) << "; batch " << in.batch << ", prompt " << in.prompt_len
       << ", generate " << in.gen_len << "\n";
    if (ctx.solved != nullptr) {
        os << "{solve} " << ctx.solve << ": "
           << (ctx.solved->value > 0 ? n(ctx.solved->value) : std::string("nothing fits"))
           << (ctx.solved->at_limit ? " (the search's limit; the answer is at least this)" : "")
           << "\n";
    }
    os << "Parameters " << n(static_cast<double>(e.params.total)) << "\n";
    text_memory(os, in, e);
    text_time(os, in, e, ctx);
    if (e.past_context)
        os << "note: Tp + G = " << in.prompt_len + in.gen_len << " passes the model's context "
           << in.model.context_length << " (RoPE runs on; quality is another matter)\n";
    return os.str();
}

std::string format_inference_explain(const InferenceInputs& in, const InferenceEstimate& e) {
    std::ostringstream os;
    explain_memory(os, in, e);
    explain_time(os, in, e);
    return os.str();
}

nlohmann::json inference_to_json(const InferenceInputs& in, const InferenceEstimate& e,
                                 const InferenceContext& ctx) {
    nlohmann::json j;
    j["schema"] = kInferenceSchema;
    j["model"] = {{"name", in.model.name},
                  {"source", ctx.model_source},
                  {"params", e.params.total},
                  {"adapter_params", e.adapter_params}};
    j["inputs"] = {{"weights", weights_name(in.weights)},
                   {"kv_cache", kv_name(in.kv)},
                   {"gemm_dtype", dtype_name(in.gemm_dtype)},
                   {"batch", in.batch},
                   {"prompt_len", in.prompt_len},
                   {"gen_len", in.gen_len},
                   {"adapters", in.adapters},
                   {"lora_rank", in.adapters > 0 ? in.lora_rank : 0}};
    j["gpu"] = {{"name", ctx.gpu},
                {"memory_bytes", in.gpu_memory_bytes},
                {"memory_bytes_per_s", in.memory_bytes_per_s},
                {"peak_flops_per_s", in.peak_flops_per_s}};
    j["memory"] = memory_json(in, e);
    j["time"] = {{"source", ctx.time_source},
                 {"prefill", step_json(e.prefill)},
                 {"decode",
                  {{"steps", e.decode_steps},
                   {"first", e.decode_steps > 0 ? step_json(e.decode_first) : nlohmann::json()},
                   {"last", e.decode_steps > 0 ? step_json(e.decode_last) : nlohmann::json()},
                   {"seconds", e.decode_seconds},
                   {"memory_bound_steps", e.decode_memory_bound_steps},
                   {"seconds_per_token", e.seconds_per_token},
                   {"tokens_per_s_per_sequence", e.tokens_per_s_per_sequence},
                   {"tokens_per_s", e.tokens_per_s}}},
                 {"compute_bound_batch", e.compute_bound_batch},
                 {"total_seconds", e.total_seconds}};
    j["solve"] = ctx.solved == nullptr ? nlohmann::json()
                                       : nlohmann::json{{"for", ctx.solve},
                                                        {"value", ctx.solved->value},
                                                        {"at_limit", ctx.solved->at_limit},
                                                        {"evaluations", ctx.solved->evaluations}};
    j["past_context"] = e.past_context;
    integers_as_integers(j);
    return j;
}

}  // namespace napkin
