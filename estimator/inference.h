// The inference estimate: memory and time of serving a decoder-only model, a prefill of B
// prompts of Tp tokens followed by the decode of G new tokens per sequence, on one GPU.
// docs/INFERENCE.md derives every formula and works GPT-2 and Llama examples by hand.
//
//   weights      every parameter tensor as the engine allocates it (core/model_config.h's
//                param_tensors: embedding rows padded to Vp); the blocks' linear weights in the
//                chosen format (16-bit, fp8, int8, int4, NF4 with its double-quantized scales as
//                kernels/nf4.h stores them), the rest (embeddings, norms, biases, an untied head)
//                in the 16-bit dtype; LoRA adapters once each beside the one base.
//   KV cache     2 L KVH HD bytes(kv) per token, (Tp + G) tokens per sequence, B sequences.
//   activations  the largest step's: inside a block, the residual stream plus the two widest
//                buffers alive at once, M tokens wide (prefill M = B Tp, decode M = B), and the
//                fp32 logits of each sequence's last position.
//   time         prefill: compute-bound, the GEMMs and attention at the device profile's rates
//                (or peak x --mfu); each decode step: the larger of its bytes (weights, adapters
//                in use, the KV cache read) over the memory bandwidth and its FLOPs at the
//                profile's rates, summed over the G - 1 steps, whose context grows by one each.
// estimate_inference takes a config and returns a struct, as Estimator::run does, so that an
// engine measuring a generation can put its numbers beside the prediction.
// Tests: tests/estimator/inference_test.cpp.
#pragma once

#include <array>
#include <cstdint>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/enum_names.h"
#include "core/model_config.h"
#include "estimator/device_profile.h"

namespace napkin {

// How the blocks' linear weights are stored.
enum class WeightFormat : std::uint8_t { fp32, bf16, fp16, fp8, int8, int4, nf4 };
inline constexpr std::array kWeightFormatNames = {
    EnumName<WeightFormat>{WeightFormat::fp32, "fp32"},
    EnumName<WeightFormat>{WeightFormat::bf16, "bf16"},
    EnumName<WeightFormat>{WeightFormat::fp16, "fp16"},
    EnumName<WeightFormat>{WeightFormat::fp8, "fp8"},
    EnumName<WeightFormat>{WeightFormat::int8, "int8"},
    EnumName<WeightFormat>{WeightFormat::int4, "int4"},
    EnumName<WeightFormat>{WeightFormat::nf4, "nf4"},
};

// The KV cache's element type: fp8 (E4M3) and int8 with one scale per tensor, held as a kernel
// argument (no per-element storage).
enum class KvFormat : std::uint8_t { fp32, bf16, fp16, fp8, int8 };
inline constexpr std::array kKvFormatNames = {
    EnumName<KvFormat>{KvFormat::fp32, "fp32"}, EnumName<KvFormat>{KvFormat::bf16, "bf16"},
    EnumName<KvFormat>{KvFormat::fp16, "fp16"}, EnumName<KvFormat>{KvFormat::fp8, "fp8"},
    EnumName<KvFormat>{KvFormat::int8, "int8"},
};
int kv_bytes_per_element(KvFormat f);

// int4's group along K (GPTQ's and AWQ's default), each with an fp16 scale and an fp16 zero.
inline constexpr std::int64_t kInt4Group = 128;

// Bytes of one linear weight (N, K) stored in `f`:
//   fp32/bf16/fp16  N K x 4 or 2
//   fp8             N K + 4                  (one fp32 scale per tensor, as fp8-amp keeps it)
//   int8            N K + 2 N                (an fp16 absmax per output row, LLM.int8's)
//   int4            ceil(N K / 2) + 4 N ceil(K / 128)   (fp16 scale and zero per group)
//   nf4             kernels/nf4.h's nf4_storage_bytes(N K): codes, fp32 steps, absmax codes
double linear_weight_bytes(WeightFormat f, std::int64_t N, std::int64_t K);

struct InferenceInputs {
    ModelConfig model;
    WeightFormat weights = WeightFormat::bf16;
    KvFormat kv = KvFormat::bf16;
    std::int64_t batch = 1;       // B sequences decoded together
    std::int64_t prompt_len = 1;  // Tp tokens per prompt
    std::int64_t gen_len = 1;     // G tokens generated per sequence (the first by the prefill)
    int adapters = 0;             // LoRA adapters held beside the base (0: none)
    std::int64_t lora_rank = 64;

    // Hardware. gemm_dtype: what the GEMMs compute in (the 16-bit dtype, or fp8 for fp8 weights
    // where the GPU has fp8 tensor cores); a weight stored otherwise is widened into a
    // temporary before its GEMM, one at a time, as napkin's engine does with NF4.
    DType gemm_dtype = DType::bf16;
    double peak_flops_per_s = 0;             // of gemm_dtype
    double memory_bytes_per_s = 0;           // what decode streams at
    double gpu_memory_bytes = 0;             // capacity
    double mfu = 0.5;                        // compute efficiency when `profile` is null
    const DeviceProfile* profile = nullptr;  // GEMM and attention rates (not owned)
};

// The 16-bit dtype everything but the quantized linear weights is kept in: fp16 under fp16
// weights, fp32 under fp32, bf16 otherwise.
DType working_dtype(WeightFormat f);

struct InferenceMemory {
    double linear_weights = 0;  // the blocks' linear weights in their format
    double other_weights = 0;   // embeddings, norms, biases, an untied head (working dtype)
    double adapters = 0;        // all adapters (working dtype)
    double weights() const { return linear_weights + other_weights + adapters; }
    // KV cache.
    double kv_per_token_layer = 0;  // 2 KVH HD bytes(kv)
    double kv_per_token = 0;        // x L
    double kv_per_token_mha = 0;    // with KVH = NH
    double kv_per_token_mqa = 0;    // with KVH = 1
    double kv_per_sequence = 0;     // x (Tp + G)
    double kv_total = 0;            // x B
    // Activations and workspace of each phase's step.
    double prefill_activations = 0;
    double decode_activations = 0;
    double gemm_workspace = 0;  // cuBLASLt's
    double dequant = 0;         // the widest linear weight widened to the GEMM dtype
    // Weights + the whole cache (allocated before the prefill, as a serving engine reserves it)
    // + the larger step's activations + workspace.
    double total = 0;
};

// One step's bytes, FLOPs and time, and which ceiling set it.
struct StepCost {
    double flops = 0;
    double bytes = 0;            // read from memory (decode: weights, adapters, KV)
    double compute_seconds = 0;  // FLOPs at the GEMM and attention rates
    double memory_seconds = 0;   // bytes / memory_bytes_per_s
    double seconds() const {
        return compute_seconds > memory_seconds ? compute_seconds : memory_seconds;
    }
    bool memory_bound() const { return memory_seconds >= compute_seconds; }
};

struct InferenceEstimate {
    ParamCounts params;
    double adapter_params = 0;  // one adapter's
    InferenceMemory memory;
    bool fits = false;

    // Prefill: B Tp tokens at once; its logits give each sequence its first new token.
    StepCost prefill;
    // Decode: G - 1 steps, step j (1..G-1) feeding one token per sequence and reading Tp + j
    // cached positions.
    std::int64_t decode_steps = 0;
    StepCost decode_first, decode_last;    // steps 1 and G - 1
    double decode_weight_bytes = 0;        // per step: weights read (no embedding tables)
    double decode_seconds = 0;             // all steps
    double decode_memory_bound_steps = 0;  // how many of them the bandwidth bounds
    double seconds_per_token = 0;          // decode_seconds / steps (0 without steps)
    double tokens_per_s_per_sequence = 0;  // 1 / seconds_per_token
    double tokens_per_s = 0;               // B / seconds_per_token, all sequences
    double total_seconds = 0;              // prefill + decode
    // Batch at which a decode step's FLOPs time catches its bytes time (weights only, context
    // Tp): the arithmetic-intensity crossover; 0 when no batch reaches it below 2^24.
    double compute_bound_batch = 0;
    bool past_context = false;  // Tp + G exceeds the model's context length
};

// Throws UsageError on inputs out of range (a zero batch or length, no bandwidth...).
InferenceEstimate estimate_inference(const InferenceInputs& in);

// What napkin's inference engine (core/engine/generate.h, `napkin generate`) allocates for
// these inputs, by allocator category, in bytes: the engine-exact breakdown beside the
// serving-style one above, for weights and cache in the working dtype (--weights fp32 or bf16,
// the same --kv-cache). Everything is allocated once, before the prefill, so each is also the
// category's peak:
//   parameters   every parameter tensor, a bytes each (InferenceMemory's weights())
//   kv_cache     B (Tp + G) x KV per token (InferenceMemory's kv_total)
//   activations  the prefill's step as InferenceMemory's prefill_activations, but with the
//                logits in the working dtype: a B Tp (C + W) + a B Vp
//   temporaries  the norms' fp32 mean and rstd (2 x 4 B Tp) and the GEMM scratch: on the CPU in
//                16-bit the largest GEMM's operands widened to fp32 (kernels/matmul.h's
//                matmul_scratch_floats, the head's at M = B included), none in fp32; on CUDA
//                cuBLASLt's workspace (gemm_workspace), and with flash-decoding the decode
//                steps' split-KV partials, 4 B NH ceil((Tp + G) / 128) (HD + 2) (none on the CPU,
//                whose engine has one attention kernel, nor for a kv-head group past the split
//                kernel's limits; kernels/decode_attention.h)
//   data         the token ids, 4 B Tp
struct InferenceEngineMemory {
    double parameters = 0, kv_cache = 0, activations = 0, temporaries = 0, data = 0;
    double total() const { return parameters + kv_cache + activations + temporaries + data; }
};
// Throws UsageError when weights or cache are not both fp32 or both bf16 (the engine's dtypes)
// or adapters are asked for. The device and flash_decoding are the engine's (`napkin generate
// --device`, `--flash-decoding`): the temporaries differ by both.
InferenceEngineMemory inference_engine_memory(const InferenceInputs& in, const InferenceEstimate& e,
                                              DeviceKind device, bool flash_decoding);

// --solve under --inference: the largest batch (max-batch) or prompt length at the given G
// (max-context) that fits, by solver.h's doubling then bisection, up to 2^24.
struct InferenceSolve {
    double value = 0;  // 0 when even 1 does not fit
    bool at_limit = false;
    int evaluations = 0;
    InferenceEstimate at;  // at `value` (at 1 when nothing fits)
};
enum class InferenceSolveFor : std::uint8_t { max_batch, max_context };
InferenceSolve solve_inference(const InferenceInputs& base, InferenceSolveFor what,
                               InferenceInputs& solved);

}  // namespace napkin
