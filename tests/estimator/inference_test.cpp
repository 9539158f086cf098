// The inference estimate against counts made by hand from the published shapes (GPT-2 124M,
// Llama 2 7B with MHA, Llama 3 8B with GQA), decode time against its formula, and the solver.
#include "estimator/inference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "estimator/hardware.h"
#include "estimator/profile_catalog.h"

namespace napkin {
namespace {

constexpr double kH100Peak = 989.5e12, kH100Bandwidth = 3.35e12, kH100Memory = 80e9;
constexpr double kWorkspace = 32.0 * 1024 * 1024;  // cuBLASLt's, kernels/matmul.h

InferenceInputs inputs(const char* preset, std::int64_t B, std::int64_t Tp, std::int64_t G) {
    InferenceInputs in;
    in.model = preset_or_throw(preset);
    in.batch = B;
    in.prompt_len = Tp;
    in.gen_len = G;
    in.peak_flops_per_s = kH100Peak;
    in.memory_bytes_per_s = kH100Bandwidth;
    in.gpu_memory_bytes = kH100Memory;
    in.mfu = 0.5;
    return in;
}

// NF4 of n elements (n a multiple of 64): n/2 code bytes, an absmax byte per 64, an fp32 step per
// 256 blocks (QLoRA's double quantization, Dettmers et al. 2023).
double nf4_bytes(double n) {
    return n / 2 + n / 64 + 4 * std::ceil(n / 64 / 256);
}

// GPT-2 124M: L 12, C 768, 12 heads of 64, F 3072, Vp 50304, 1024 positions, tied, biases.
TEST(Inference, Gpt2MemoryIsTheHandCount) {
    const InferenceEstimate e = estimate_inference(inputs("gpt2", 1, 512, 512));
    const double linear = 12.0 * (2304 * 768 + 768 * 768 + 3072 * 768 + 768 * 3072);  // 84,934,656
    EXPECT_EQ(linear, 84934656);
    // wte (Vp C), wpe (1024 C), per layer two layernorms (2 x 2C) and the biases (3C + C + 4C + C),
    // ln_f (2C).
    const double other = 50304.0 * 768 + 1024 * 768 + 12 * (4 * 768 + 9 * 768) + 2 * 768;
    EXPECT_EQ(linear + other, 124475904);  // count_params().allocated
    EXPECT_EQ(e.memory.linear_weights, 2 * linear);
    EXPECT_EQ(e.memory.other_weights, 2 * other);
    // 2 (K, V) x L x KVH x HD x 2 bytes.
    EXPECT_EQ(e.memory.kv_per_token, 2.0 * 12 * 12 * 64 * 2);
    EXPECT_EQ(e.memory.kv_per_token, 36864);
    EXPECT_EQ(e.memory.kv_per_token_mha, 36864);
    EXPECT_EQ(e.memory.kv_per_token_mqa, 36864 / 12);
    EXPECT_EQ(e.memory.kv_total, 36864.0 * 1024);
    // Widest op: the GELU, fc out (F) in and F out; plus the residual C; fp32 logits (B, Vp).
    EXPECT_EQ(e.memory.prefill_activations, 2.0 * 512 * (768 + 3072 + 3072) + 4 * 50304);
    EXPECT_EQ(e.memory.decode_activations, 2.0 * 1 * (768 + 3072 + 3072) + 4 * 50304);
    EXPECT_EQ(e.memory.gemm_workspace, kWorkspace);
    EXPECT_EQ(e.memory.dequant, 0);
    EXPECT_EQ(e.memory.total, 327534080);
    EXPECT_TRUE(e.fits);
    // Tied: the head reads the whole embedding; only the position table is looked up by row.
    EXPECT_EQ(e.decode_weight_bytes, 2 * (linear + other - 1024 * 768));
}

// Llama 2 7B: L 32, C 4096, 32 heads (MHA) of 128, F 11008 (SwiGLU), V = Vp = 32000, untied.
TEST(Inference, Llama2Nf4MemoryIsTheHandCount) {
    InferenceInputs in = inputs("llama2-7b", 4, 1024, 1024);
    in.weights = WeightFormat::nf4;
    const InferenceEstimate e = estimate_inference(in);
    const double qkv = 12288.0 * 4096, o = 4096.0 * 4096, up = 22016.0 * 4096,
                 down = 4096.0 * 11008;
    EXPECT_EQ(e.memory.linear_weights,
              32 * (nf4_bytes(qkv) + nf4_bytes(o) + nf4_bytes(up) + nf4_bytes(down)));
    // wte, lm_head (Vp C each), two RMSNorm weights per layer, the final one; bf16.
    EXPECT_EQ(e.memory.other_weights, 2 * (2 * 32000.0 * 4096 + 32 * 2 * 4096 + 4096));
    EXPECT_EQ(e.memory.kv_per_token, 2.0 * 32 * 32 * 128 * 2);  // 524,288: MHA
    EXPECT_EQ(e.memory.kv_per_token_mha, e.memory.kv_per_token);
    EXPECT_EQ(e.memory.kv_total, 524288.0 * 2048 * 4);
    // The widest linear (gate and up, 2F x C) widened to bf16 for its GEMM.
    EXPECT_EQ(e.memory.dequant, 2 * up);
    // Widest op: gate and up in (2F), F out; M = B Tp.
    EXPECT_EQ(e.memory.prefill_activations, 2.0 * 4096 * (4096 + 22016 + 11008) + 4 * 4 * 32000);
    EXPECT_EQ(e.memory.total, e.memory.linear_weights + e.memory.other_weights + e.memory.kv_total +
                                  e.memory.prefill_activations + kWorkspace + e.memory.dequant);
    // Untied: the embedding table is looked up by row, the head read whole.
    EXPECT_EQ(e.decode_weight_bytes,
              e.memory.linear_weights + e.memory.other_weights - 2 * 32000.0 * 4096);
}

// Llama 3 8B: GQA with 8 kv-heads of 128 over 32 query heads: a quarter of MHA's cache.
TEST(Inference, Llama3GqaCacheIsAQuarterOfMha) {
    InferenceInputs in = inputs("llama3-8b", 8, 2048, 512);
    in.kv = KvFormat::fp8;
    in.weights = WeightFormat::int4;
    const InferenceEstimate e = estimate_inference(in);
    EXPECT_EQ(e.memory.kv_per_token, 2.0 * 32 * 8 * 128 * 1);  // 65,536
    EXPECT_EQ(e.memory.kv_per_token_mha, 4 * e.memory.kv_per_token);
    EXPECT_EQ(e.memory.kv_per_token_mqa, e.memory.kv_per_token / 8);
    EXPECT_EQ(e.memory.kv_per_sequence, 65536.0 * 2560);
    EXPECT_EQ(e.memory.kv_total, 8 * 65536.0 * 2560);
    // int4: half a byte per weight, an fp16 scale and zero per 128 inputs of each row.
    const auto int4 = [](double N, double K) { return N * K / 2 + 4 * N * (K / 128); };
    EXPECT_EQ(e.memory.linear_weights,
              32 * (int4(6144, 4096) + int4(4096, 4096) + int4(28672, 4096) + int4(4096, 14336)));
    EXPECT_EQ(e.memory.other_weights, 2 * (2 * 128256.0 * 4096 + 32 * 2 * 4096 + 4096));
}

TEST(Inference, WeightFormatsCountTheirScales) {
    EXPECT_EQ(linear_weight_bytes(WeightFormat::fp8, 768, 3072), 768.0 * 3072 + 4);
    EXPECT_EQ(linear_weight_bytes(WeightFormat::int8, 768, 3072), 768.0 * 3072 + 2 * 768);
    EXPECT_EQ(linear_weight_bytes(WeightFormat::int4, 768, 3072), 768.0 * 1536 + 4 * 768 * 24);
    EXPECT_EQ(linear_weight_bytes(WeightFormat::nf4, 768, 3072), nf4_bytes(768.0 * 3072));
    EXPECT_EQ(linear_weight_bytes(WeightFormat::fp16, 768, 3072), 2 * 768.0 * 3072);
}

// LoRA: the base once, each adapter beside it; a decode step reads the adapters its batch uses.
TEST(Inference, AdaptersAddToTheBaseOnce) {
    InferenceInputs in = inputs("gpt2", 2, 128, 16);
    const InferenceEstimate base = estimate_inference(in);
    in.adapters = 3;
    in.lora_rank = 8;
    const InferenceEstimate e = estimate_inference(in);
    // Per layer r (parts K + N) for qkv (3 parts), proj, fc, proj.
    const double one = 12.0 * 8 * ((3 * 768 + 2304) + (768 + 768) + (768 + 3072) + (3072 + 768));
    EXPECT_EQ(e.adapter_params, one);
    EXPECT_EQ(e.memory.adapters, 3 * 2 * one);
    EXPECT_EQ(e.memory.linear_weights + e.memory.other_weights,
              base.memory.linear_weights + base.memory.other_weights);
    EXPECT_EQ(e.decode_weight_bytes, base.decode_weight_bytes + 2 * 2 * one);  // min(3, B = 2)
    EXPECT_GT(e.decode_first.flops, base.decode_first.flops);
}

// Decode step j: max(FLOPs / (peak x MFU), (weights + B (Tp + j) kv) / bandwidth), summed.
TEST(Inference, DecodeTimeIsTheFormula) {
    const std::int64_t B = 3, Tp = 100, G = 5;
    const InferenceInputs in = inputs("gpt2", B, Tp, G);
    const InferenceEstimate e = estimate_inference(in);
    ASSERT_EQ(e.decode_steps, G - 1);
    const double linear_flops = 2.0 * B * 7077888 + B * (2304 + 768 + 3072 + 768);  // + biases
    double total = 0;
    for (std::int64_t j = 1; j < G; ++j) {
        const double S = static_cast<double>(Tp + j);
        const double flops = 12 * (linear_flops + 4.0 * B * 12 * 64 * S) + 2.0 * B * 50304 * 768;
        const double bytes = e.decode_weight_bytes + B * S * 36864;
        const double seconds = std::max(flops / (kH100Peak * 0.5), bytes / kH100Bandwidth);
        if (j == 1) {
            EXPECT_DOUBLE_EQ(e.decode_first.flops, flops);
            EXPECT_DOUBLE_EQ(e.decode_first.bytes, bytes);
            EXPECT_TRUE(e.decode_first.memory_bound());
        }
        total += seconds;
    }
    EXPECT_DOUBLE_EQ(e.decode_seconds, total);
    EXPECT_DOUBLE_EQ(e.seconds_per_token, total / (G - 1));
    EXPECT_DOUBLE_EQ(e.tokens_per_s, B * (G - 1) / total);
    EXPECT_DOUBLE_EQ(e.tokens_per_s_per_sequence, (G - 1) / total);
    // Prefill: B Tp tokens, the causal pairs Tp (Tp + 1) / 2, the head on the last positions.
    const double prefill_flops =
        12 * (2.0 * B * Tp * 7077888 + B * Tp * 6912.0 + 4.0 * B * 12 * 64 * (Tp * (Tp + 1) / 2)) +
        2.0 * B * 50304 * 768;
    EXPECT_DOUBLE_EQ(e.prefill.flops, prefill_flops);
    EXPECT_DOUBLE_EQ(e.total_seconds, e.prefill.seconds() + total);
}

// A large batch amortizes the weights: decode turns compute-bound past the crossover.
TEST(Inference, DecodeTurnsComputeBoundAtTheCrossover) {
    InferenceInputs in = inputs("llama3-8b", 1, 16, 2);
    const InferenceEstimate e = estimate_inference(in);
    ASSERT_GT(e.compute_bound_batch, 1);
    in.batch = static_cast<std::int64_t>(e.compute_bound_batch);
    EXPECT_FALSE(estimate_inference(in).decode_first.memory_bound());
    in.batch -= 1;
    EXPECT_TRUE(estimate_inference(in).decode_first.memory_bound());
}

// The device profile's rates stand in for peak x MFU (the datasheet profile: flat tables).
TEST(Inference, TheProfileTimesTheCompute) {
    const DeviceProfile p = datasheet_profile(*find_gpu("h100-sxm"));
    InferenceInputs in = inputs("gpt2", 1, 512, 2);
    in.profile = &p;
    const InferenceEstimate e = estimate_inference(in);
    EXPECT_GT(e.prefill.compute_seconds, 0);
    EXPECT_LE(e.prefill.compute_seconds, e.prefill.flops / (kH100Peak * 0.25));
    EXPECT_GT(e.prefill.compute_seconds, e.prefill.flops / kH100Peak);
}

TEST(Inference, SolvesTheLargestBatchAndContext) {
    InferenceInputs in = inputs("llama2-7b", 1, 2048, 2048);
    InferenceInputs solved;
    const InferenceSolve r = solve_inference(in, InferenceSolveFor::max_batch, solved);
    ASSERT_GT(r.value, 1);
    EXPECT_FALSE(r.at_limit);
    EXPECT_TRUE(r.at.fits);
    EXPECT_EQ(solved.batch, static_cast<std::int64_t>(r.value));
    in.batch = solved.batch + 1;
    EXPECT_FALSE(estimate_inference(in).fits);

    in.batch = 4;
    const InferenceSolve c = solve_inference(in, InferenceSolveFor::max_context, solved);
    ASSERT_GT(c.value, 1);
    EXPECT_TRUE(c.at.fits);
    in.prompt_len = static_cast<std::int64_t>(c.value) + 1;
    EXPECT_FALSE(estimate_inference(in).fits);
    EXPECT_TRUE(estimate_inference(solved).past_context);  // RoPE runs past 4096 here
}

TEST(Inference, LearnedPositionsBoundTheContext) {
    EXPECT_THROW(estimate_inference(inputs("gpt2", 1, 1000, 25)), UsageError);
    EXPECT_NO_THROW(estimate_inference(inputs("gpt2", 1, 1000, 24)));
    EXPECT_THROW(estimate_inference(inputs("gpt2", 0, 10, 10)), UsageError);
}

TEST(Inference, OneTokenHasNoDecodeStep) {
    const InferenceEstimate e = estimate_inference(inputs("gpt2", 1, 64, 1));
    EXPECT_EQ(e.decode_steps, 0);
    EXPECT_EQ(e.decode_seconds, 0);
    EXPECT_EQ(e.memory.decode_activations, 0);
    EXPECT_EQ(e.total_seconds, e.prefill.seconds());
}

// The engine's temporaries on CUDA with flash-decoding: the decode steps' partials, 4 B NH
// ceil(S / 128) (HD + 2) bytes (docs/INFERENCE.md: GPT-2, B 1, 1,024 positions: 25,344); none on
// the CPU or with it off.
TEST(Inference, FlashDecodingWorkspaceIsAnEngineTemporary) {
    InferenceInputs in = inputs("gpt2", 1, 512, 512);
    in.weights = WeightFormat::fp32;
    in.kv = KvFormat::fp32;
    const InferenceEstimate e = estimate_inference(in);
    const double off = inference_engine_memory(in, e, DeviceKind::cuda, false).temporaries;
    EXPECT_EQ(inference_engine_memory(in, e, DeviceKind::cuda, true).temporaries - off, 25'344);
    EXPECT_EQ(off, 2.0 * 4 * 512 + kWorkspace);
    EXPECT_EQ(inference_engine_memory(in, e, DeviceKind::cpu, true).temporaries,
              inference_engine_memory(in, e, DeviceKind::cpu, false).temporaries);
    in.batch = 3;
    in.prompt_len = 100;
    in.gen_len = 157;  // 257 positions: 3 chunks
    const InferenceEstimate e3 = estimate_inference(in);
    EXPECT_EQ(inference_engine_memory(in, e3, DeviceKind::cuda, true).temporaries -
                  inference_engine_memory(in, e3, DeviceKind::cuda, false).temporaries,
              4.0 * 3 * 12 * 3 * 66);
}

}  // namespace
}  // namespace napkin
