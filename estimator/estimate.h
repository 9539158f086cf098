// The estimator: memory per GPU, FLOPs and time of a training run, from a model config (or a
// bare parameter count), a recipe and the hardware. It reports the closed-form napkin view
// (napkin_formulas.h) and the detailed view summed from the op plan side by side.
//
// Units everywhere: bytes, FLOPs, seconds. GB = 1e9 bytes and GiB = 2^30 bytes only when
// printed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/buffer_plan.h"
#include "core/model_config.h"
#include "core/op_plan.h"
#include "core/recipe.h"
#include "estimator/communication.h"
#include "estimator/device_profile.h"
#include "estimator/napkin_formulas.h"
#include "estimator/parallel.h"
#include "estimator/perf_model.h"

namespace napkin {

struct EstimateInputs {
    // The model: a full config, or (napkin mode) only a parameter count, from which a dense
    // GPT-like shape is derived for the activation terms (napkin_shape()).
    ModelConfig model;
    bool params_only = false;
    double params = 0;  // --params N (params_only)

    // Data.
    std::int64_t seq_len = 0;  // T; 0 means the default (min(context, 8192), 2048 with --params)
    std::int64_t micro_batch = 1;  // B
    std::int64_t grad_accum = 1;   // G
    double tokens = 0;             // D; 0 means 20 N (Chinchilla, Hoffmann et al. 2022)

    // Recipe.
    Precision precision = Precision::bf16_amp;
    OptimizerKind optimizer = OptimizerKind::adamw;
    bool grads_fp32 = false;  // fp32 gradients beside the fp32 master (18 instead of 16 B/param)
    // Optimizer moments in fp32 under the pure 16-bit recipe (--precision bf16): QLoRA's own
    // recipe, bf16 adapters and gradients, fp32 (paged) AdamW states, no fp32 master.
    bool optimizer_fp32 = false;
    Checkpointing checkpointing = Checkpointing::none;
    AttentionImpl attention = AttentionImpl::flash;
    bool causal_attention_flops = true;  // 6LTC (causal) vs 12LTC (PaLM) per token
    std::int64_t loss_chunk_rows = 1024;
    bool detect_anomaly = false;  // napkin train --detect-anomaly: its slots among the temporaries
    bool gemm_epilogues = false;  // napkin train --fusion on, on a GPU (PlanInputs'): the op costs
    std::int64_t fp8_amax_history = 16;  // fp8-amp's amax history length (PlanInputs'); 0: current

    // Parallelism. gpus = T P DP: data parallelism (with ZeRO) over DP = gpus / (T P) replicas
    // of a model split T ways by tensor and P ways by pipeline parallelism (estimator/parallel.h).
    int gpus = 1;  // W: all GPUs (data-parallel ones when T = P = 1)
    int zero = 0;  // 0..3, over the data-parallel group
    int tp = 1;    // T
    int pp = 1;    // P; the pipeline's micro-batches per step are grad_accum (M = G)
    int vpp = 1;   // V: interleaved chunks per GPU
    bool sequence_parallel = false;
    LinkChoice node_link;     // inside a node (NVLink): tensor-parallel groups and small ones
    LinkChoice network_link;  // across nodes
    Offload offload = Offload::none;
    // QLoRA's paged optimizer (napkin train --paged-optimizer): the optimizer state in managed
    // memory preferred on the host, prefetched to the GPU for the update and back after it.
    bool paged_optimizer = false;
    int gpus_per_node = 8;  // for host memory: offloaded states of a node's GPUs share its RAM

    // Fine-tuning.
    Finetune finetune = Finetune::full;
    std::int64_t lora_rank = 64;

    // Hardware.
    double peak_flops_per_s = 0;   // of the GEMM dtype; 0 = none known (no time estimate)
    double gpu_memory_bytes = 0;   // capacity per GPU
    double cpu_memory_bytes = 0;   // host memory per node
    double mfu = 0.5;              // assumed; 0: predicted by the performance model over `profile`
    double link_bytes_per_s = 0;  // data-parallel link, one direction (estimator/links.h); 0 = no time
    // The performance model (estimator/perf_model.h): the device's profile (not owned; needed
    // when mfu is 0), the threads of a CPU rank (0: the profile's largest section) and whether
    // the collectives overlap the passes.
    const DeviceProfile* profile = nullptr;
    int threads = 0;
    Overlap overlap = Overlap::off;

    // Measured.
    double measured_tokens_per_s = 0;  // whole job; 0 = not given

    bool ignore_activations = false;  // model states only (weights, grads, optimizer), as the lectures count

    // Whose scratch the temporaries count: a GPU's (cuBLASLt workspace; the default, and what
    // every napkin question assumes) or napkin train's CPU engine (fp32 widening scratch for
    // its 16-bit GEMMs and loss chunk, no GEMM workspace). docs/ESTIMATOR.md section 5.
    enum class Engine : std::uint8_t { cuda, cpu } engine = Engine::cuda;
};

// Things the estimate wants the reader to know; printed as notes, listed in JSON.
enum Note : std::uint32_t {
    kNoteParamsOnlyShape = 1u << 0,     // activations from a derived shape
    kNoteParamsOnlyFlops = 1u << 1,     // 6N only, no attention term
    kNoteTokensDefault = 1u << 2,       // D = 20 N
    kNoteNoPeak = 1u << 3,              // no peak for the GEMM dtype: no time estimate
    kNoteSelectiveFlash = 1u << 4,      // selective recompute is what flash already does
    kNoteActivationsIgnored = 1u << 5,  // --ignore-activations
    kNoteSeqBeyondContext = 1u << 6,    // RoPE model run past its context length
    kNoteZeroOneGpu = 1u << 7,          // ZeRO over one GPU shards nothing
    kNoteCpuDoesNotFit = 1u << 8,       // offloaded states exceed host memory
    kNoteFp32Peak = 1u << 9,            // fp32 recipe counted at the non-tensor-core fp32 peak
    kNoteSeqLenDefault = 1u << 10,      // T was not given
    kNoteLinkOneGpu = 1u << 11,         // a link given for one GPU: no traffic to time
    kNoteRunUnderOneStep = 1u << 12,    // D is less than one step's tokens
    kNoteQloraPrecision = 1u << 13,     // QLoRA under a recipe other than the paper's 16-bit one
    kNoteOffloadReplicated = 1u << 14,  // offload at ZeRO-0 on several GPUs: a host copy per rank
    kNoteFinetuneNoTokens = 1u << 15,   // fine-tuning without --tokens: no run length
    kNoteUnevenStages = 1u << 16,       // P does not divide L
    kNoteFewMicroBatches = 1u << 17,    // M < P: the pipeline never fills
    kNoteGroupWithoutLink = 1u << 18,   // a model-parallel group with no known link: no time
    kNoteTimePredicted = 1u << 19,      // time from the performance model, not an assumed MFU
};

struct MemoryBytes {
    double weights = 0;
    double master = 0;
    double grads = 0;
    double optimizer = 0;
    double activations = 0;
    double temporaries = 0;
    // The token batches (inputs and targets, int32, B x T each): one micro-batch's on the CPU
    // engine, two on CUDA, whose batches go up double-buffered on a copy stream.
    double data = 0;
    double model_states() const { return weights + master + grads + optimizer; }
    double total() const { return model_states() + activations + temporaries + data; }
};

// Temporaries, itemized (all included in MemoryBytes::temporaries): the buffer plan's
// (core/buffer_plan.h), which the engine allocates once and keeps, so they add; and the units
// ZeRO-3 or offloaded parameters gather.
struct TemporaryBytes {
    double activation_grads = 0;     // the backward's gradient buffers: residual, branch, narrow, wide
    double op_workspace = 0;         // the loss chunk: logits (CPU 16-bit: widened head operands; GPU: row losses)
    double attention_workspace = 0;  // naive attention's dS (B, NH, T, T) fp32; 0 with flash
    double param_gather = 0;         // ZeRO-3 / offloaded parameters gathered for 2 units
    double dequant = 0;              // QLoRA: one linear weight dequantized to the working dtype
    double fp8_cast = 0;  // fp8-amp: a weight and an output gradient cast to fp8 per GEMM
    double fp8_history = 0;  // fp8-amp, delayed scaling: amax histories and scale pairs
    double gemm_workspace = 0;       // cuBLASLt workspace (GPU); fp32 widening scratch (CPU, 16-bit)
    double grad_norm_workspace = 0;  // the global norm's per-block partial sums (GPU optimizer step)
    double anomaly_slots = 0;        // --detect-anomaly: 24 bytes per checked tensor
    double total() const {
        return activation_grads + op_workspace + attention_workspace + param_gather + dequant +
               fp8_cast + fp8_history + gemm_workspace + grad_norm_workspace + anomaly_slots;
    }
};

// The paged optimizer (EstimateInputs::paged_optimizer; docs/ESTIMATOR.md "Paged optimizer
// states"): the state leaves the GPU's categories (MemoryBytes::optimizer is 0) for managed
// memory, and comes back for the update.
// PCIe 4.0 x16's practical copy rate each way (32 GB/s raw), for page traffic when no device
// profile measured the host link.
inline constexpr double kAssumedHostLinkBytesPerS = 25e9;

struct PagedOptimizerEstimate {
    double state_bytes = 0;  // in managed memory: what MemoryBytes::optimizer would have held
    // The update's resident set: the model states without the optimizer's, the state paged in,
    // and the global norm's workspace (a framework that frees activations before the step).
    double step_peak_bytes = 0;
    double device_peak_bytes = 0;       // max(forward/backward total, step_peak_bytes)
    double traffic_bytes_per_step = 0;  // 2 x state_bytes: to the GPU before, back after
    double to_device_bytes_per_s = 0, to_host_bytes_per_s = 0;  // the host link's rates
    bool link_assumed = false;            // no device profile's copy rates: PCIe 4.0 x16 assumed
    double traffic_seconds_per_step = 0;  // state / to-device rate + state / to-host rate
};

struct Estimate {
    // Parameters.
    ParamCounts params;          // of the config (napkin mode: of the derived shape)
    double total_params = 0;     // published count (napkin mode: N)
    double trainable_params = 0;
    double frozen_params = 0;
    double lora_params = 0;
    std::int64_t seq_len = 0;    // T used
    int n_layers = 0;            // L and C of the model (napkin mode: of the derived shape)
    std::int64_t d_model = 0;
    double tokens = 0;           // D used
    formulas::BytesPerParam bytes_per_param;  // of the trainable parameters under the recipe

    // Memory per GPU, and per node's host RAM for offloaded states.
    MemoryBytes gpu;
    MemoryBytes cpu;  // per GPU's share; cpu_node_bytes sums a node
    TemporaryBytes temporaries;
    std::optional<PagedOptimizerEstimate> paged;  // --paged-optimizer
    double cpu_node_bytes = 0;
    double gpu_capacity_bytes = 0;
    double cpu_capacity_bytes = 0;
    bool fits_gpu = false;
    bool fits_cpu = true;
    bool fits() const { return fits_gpu && fits_cpu; }

    // Activations per GPU, both views: one micro-batch (a pipeline stage: those in flight).
    double act_closed_form_bytes = 0;   // Korthikanti (generalized), all layers + embedding
    double act_closed_form_layer_bytes = 0;
    double act_detailed_bytes = 0;      // op plan: kept + one block rebuilt in backward
    double act_detailed_kept_bytes = 0;  // op plan: kept through the forward
    double act_detailed_layer_bytes = 0;  // op plan: one block, kept or rebuilt

    // FLOPs.
    double flops_6n_per_token = 0;             // 6 N (N = total params)
    double flops_6n_non_embedding_per_token = 0;  // 6 N with Kaplan et al.'s N (no embeddings)
    double flops_adapters_per_token = 0;       // LoRA/QLoRA: 4 N + 6 N_adapters; 0 otherwise
    double flops_matmul_per_token = 0;         // 6 N_matmul (linear layers and head)
    double flops_attention_per_token = 0;      // closed form (6 or 12) L T C
    double model_flops_per_token = 0;          // the op plan's model FLOPs per token (MFU basis)
    double hardware_flops_per_token = 0;       // plus recomputation
    double other_flops_per_token = 0;          // elementwise work (not in MFU)
    double tokens_per_step = 0;                // B T G W
    double model_flops_per_step = 0;           // all GPUs
    double hardware_flops_per_step = 0;
    double run_flops_6nd = 0;
    double run_model_flops = 0;

    // Time (0 when no peak is known and no profile predicts it).
    double peak_flops_per_s = 0;
    double mfu = 0;  // what the time means: the assumed MFU, or the predicted one
    double step_seconds = 0;
    double run_seconds = 0;
    double steps = 0;
    double hfu = 0;  // hardware FLOPs utilization the MFU implies
    double measured_mfu = 0;
    double measured_hfu = 0;           // the measured MFU x hardware / model FLOPs
    double measured_step_seconds = 0;  // B T G DP tokens at the measured rate
    double measured_run_seconds = 0;   // D tokens at the measured rate
    double tokens_per_s = 0;  // all GPUs, tokens_per_step / step_seconds
    // The performance model's step, op by op (time_predicted: the time above is its; otherwise
    // the assumed MFU's and this is empty).
    bool time_predicted = false;
    StepTime step_time;

    // Data-parallel communication per step per rank (estimator/communication.h).
    CommunicationEstimate comm;

    // 3D parallelism (T P > 1): the layout, the stages, the bubble, the model-parallel traffic.
    struct StageSummary {
        int stage = 0;
        int layers = 0;
        double in_flight = 1;  // micro-batches whose activations the stage holds at its peak
        double params = 0;     // parameters on one GPU of the stage
        MemoryBytes gpu;
    };
    struct Parallel {
        ParallelLayout layout;
        std::vector<StageSummary> stages;  // the first and, with P > 1, the last stage
        int shown = 0;                     // index into stages: the one `gpu` shows (the larger)
        double bubble_fraction = 0;        // (P - 1) / (V M) of the compute time
        double compute_seconds = 0;        // the step at the assumed MFU, without the bubble
        double bubble_seconds = 0;
        ModelParallelTraffic traffic;  // of the shown stage's GPUs
    } parallel;

    std::uint32_t notes = 0;
};

// The recipe's dtypes: precision_dtypes(), with fp32 optimizer states under optimizer_fp32.
PrecisionDTypes recipe_dtypes(const EstimateInputs& in);

// The default T for a config: min(context, 8192).
std::int64_t default_seq_len(const ModelConfig& cfg);

// A dense GPT-like shape of about N parameters, for napkin mode: L layers with d_model = 128 L
// (Kaplan et al.'s aspect ratio), 128-wide heads, d_ff = 4 C, 12 L C^2 = N.
ModelConfig napkin_shape(double n_params, std::int64_t seq_len);

// Reusable: keeps the op plan, the buffer plan and the derived config between calls, so a sweep
// allocates little per estimate. run() takes its steps in order: the model and its op plan,
// parameters, model states (and what is offloaded), activations, temporaries, communication,
// capacity, FLOPs, time (estimate.cpp).
class Estimator {
public:
    // Throws UsageError on inconsistent inputs (zero GPUs, ZeRO stage 4, MFU outside (0, 1]...).
    void run(const EstimateInputs& in, Estimate& out);
    Estimate run(const EstimateInputs& in) {
        Estimate e;
        run(in, e);
        return e;
    }
    const OpPlan& plan() const { return plan_; }

private:
    // The model: the config, or napkin mode's derived shape; T, 0 resolved to its default.
    const ModelConfig& model(const EstimateInputs& in, std::int64_t& T, std::uint32_t& notes);

    OpPlan plan_;
    BufferPlan buffers_;  // the temporaries' buffers (core/buffer_plan.h)
    ModelConfig rank_config_;  // with T P > 1: one tensor-parallel rank's share (parallel.h)
    OpPlan rank_plan_;         // and its op plan
    OpPlan flops_plan_;        // one sequence's, where a micro-batch's FLOPs could pass 2^64
    ModelConfig shape_;  // napkin mode's derived config
    double shape_params_ = -1;
    std::int64_t shape_seq_ = -1;
};

// The largest --params and --tokens napkin takes: the largest model the solver searches, and
// the default D = 20 N of that model. Every count and time stays finite below them.
inline constexpr double kMaxParams = 1e15;
inline constexpr double kMaxTokens = 20 * kMaxParams;

// Validates the inputs that do not depend on the model (flags): throws UsageError. Every number
// must be finite; 0 means "not given" where the field says so.
void validate(const EstimateInputs& in);

}  // namespace napkin
