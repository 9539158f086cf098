// The estimator's arithmetic. Model-state memory follows the ZeRO paper's accounting per
// recipe (napkin_formulas.h); activations and FLOPs come from the op plan (core/op_plan.h);
// docs/ESTIMATOR.md walks through every term.
#include "estimator/estimate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/buffer_plan.h"
#include "core/check.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/matmul.h"
#include "kernels/nf4.h"
#include "kernels/optimizer.h"
#include "kernels/quantize.h"

namespace napkin {

namespace {

// Tensors the CUDA optimizer step's global-norm pass takes (core/engine/optimizer.cpp and
// zero.cpp): every parameter at ZeRO 0; at stages 1-3 the pieces of parameters inside a rank's
// shard of each unit, the largest count over the ranks (the ranks differ by a few at most).
int grad_norm_tensors(const ShardLayout& layout, int zero) {
    if (zero == 0) {  // the trained ones (a frozen parameter is in no unit)
        return static_cast<int>(std::count_if(layout.param_unit.begin(), layout.param_unit.end(),
                                              [](int u) { return u >= 0; }));
    }
    int most = 0;
    for (int r = 0; r < layout.world; ++r) {
        int count = 0;
        for (const ShardUnit& su : layout.units) {
            const std::int64_t lo = r * su.shard, hi = lo + su.shard;
            for (const std::size_t i : su.params) {
                const std::int64_t a = layout.param_offset[i], b = a + layout.param_numel[i];
                count += std::max(a, lo) < std::min(b, hi) ? 1 : 0;
            }
        }
        most = std::max(most, count);
    }
    return most;
}

double shard(double count, bool sharded, int gpus) {
    return sharded ? std::ceil(count / gpus) : count;
}

// Adapter parameters of one block: one adapter on each of the block's linear layers (QLoRA
// targets all of them; q, k, v and SwiGLU's gate and up each get their own).
double lora_params_per_layer(const ModelConfig& c, std::int64_t r) {
    const std::int64_t C = c.d_model, F = c.d_ff;
    const int fc_parts = c.mlp == MlpKind::swiglu ? 2 : 1;
    const std::int64_t fc_rows = fc_parts * F;
    return static_cast<double>(lora_params(LoraShape{0, c.qkv_dim(), C, r, 3}) +
                               lora_params(LoraShape{0, C, C, r, 1}) +
                               lora_params(LoraShape{0, fc_rows, C, r, fc_parts}) +
                               lora_params(LoraShape{0, C, F, r, 1}));
}

double bytes_of(DType t) { return dtype_bits(t) / 8.0; }

// What the steps of Estimator::run share: the model and its op plan, the recipe's dtypes, the
// parameter counts the memory terms use, and the data-parallel layout of the model states.
struct Terms {
    Terms(const EstimateInputs& in_, const ModelConfig& c_, const OpPlan& plan_, std::int64_t T_,
          std::uint32_t notes_)
        : in(in_),
          c(c_),
          plan(plan_),
          pt(plan_totals(plan_)),
          pd(precision_dtypes(in_.precision, in_.optimizer, in_.grads_fp32)),
          T(T_),
          W(in_.gpus),
          adapters(in_.finetune != Finetune::full),
          z1(in_.zero >= 1),
          z2(in_.zero >= 2),
          z3(in_.zero >= 3),
          notes(notes_) {}

    const EstimateInputs& in;
    const ModelConfig& c;
    const OpPlan& plan;
    PlanTotals pt;
    PrecisionDTypes pd;
    std::int64_t T;
    int W;
    bool adapters;            // LoRA/QLoRA: the base frozen, adapters trained
    bool z1, z2, z3;          // ZeRO shards the optimizer states, the gradients, the weights
    double n_total = 0;       // published parameters (napkin mode: N)
    double n_alloc = 0;       // as allocated, embedding padded to Vp rows (napkin mode: N)
    double lora_layer = 0;    // adapter parameters per block
    double train_alloc = 0;   // trainable parameters as allocated
    double linear_bytes = 0;  // bytes per frozen linear weight (NF4's under QLoRA)
    ShardLayout layout;
    std::vector<FrozenUnit> frozen;  // ZeRO-3 with adapters: the frozen base's storage per unit
    std::uint32_t notes;
};

PlanInputs plan_inputs(const EstimateInputs& in, std::int64_t T) {
    PlanInputs pin;
    pin.micro_batch = in.micro_batch;
    pin.seq_len = T;
    pin.precision = in.precision;
    pin.optimizer = in.optimizer;
    pin.grads_fp32 = in.grads_fp32;
    pin.checkpointing = in.checkpointing;
    pin.attention = in.attention;
    pin.finetune = in.finetune;
    pin.lora_rank = in.lora_rank;
    pin.loss_chunk_rows = in.loss_chunk_rows;
    pin.causal_flops = in.causal_attention_flops;
    return pin;
}

// Parameters: the config's (napkin mode: N), the adapters', and D.
void count_parameters(Terms& x, Estimate& e) {
    const EstimateInputs& in = x.in;
    e.params = count_params(x.c);
    x.n_total = in.params_only ? in.params : static_cast<double>(e.params.total);
    x.n_alloc = in.params_only ? in.params : static_cast<double>(e.params.allocated);
    e.total_params = x.n_total;
    x.lora_layer = x.adapters ? lora_params_per_layer(x.c, in.lora_rank) : 0.0;
    e.lora_params = x.lora_layer * x.c.n_layers;
    e.trainable_params = x.adapters ? e.lora_params : x.n_total;
    e.frozen_params = x.adapters ? x.n_total : 0.0;
    e.tokens = in.tokens > 0 ? in.tokens : 20.0 * x.n_total;
    if (in.tokens <= 0) x.notes |= kNoteTokensDefault;
    x.train_alloc = x.adapters ? e.lora_params : x.n_alloc;
}

// The frozen base's block linear weights (LoRA/QLoRA) on a GPU, in the working dtype or NF4.
double frozen_linear_bytes(const Terms& x, double frozen_linear) {
    const ModelConfig& c = x.c;
    if (x.in.finetune != Finetune::qlora || x.in.params_only)
        return shard(frozen_linear, x.z3, x.W) * x.linear_bytes;
    // NF4 as the engine stores it, tensor by tensor (kernels/nf4.h): codes, then the steps and
    // absmax codes, each rounded up to whole bytes and blocks.
    const std::int64_t C = c.d_model, fc_rows = c.mlp == MlpKind::swiglu ? 2 * c.d_ff : c.d_ff;
    const double per_layer =
        static_cast<double>(nf4_storage_bytes(c.qkv_dim() * C) + nf4_storage_bytes(C * C) +
                            nf4_storage_bytes(fc_rows * C) + nf4_storage_bytes(C * c.d_ff));
    return shard(per_layer * c.n_layers, x.z3, x.W);
}

// 8-bit optimizer states with a shape, as the engine stores them: a byte per element and an fp32
// absmax per 2048-element block.
double optimizer_8bit_bytes(const Terms& x) {
    const EstimateInputs& in = x.in;
    if (x.z1) {
        // Sharded (ZeRO 1-3): the shard S of block-aligned units (every block whole in one
        // shard), with S / 2048 absmax per moment.
        const auto S = static_cast<double>(x.layout.shard());
        return 2.0 * (S + 4.0 * S / static_cast<double>(kOptimizer8bitBlock));
    }
    // Unsharded (ZeRO-0): tensor by tensor, each tensor's blocks rounded up.
    double bytes = 0;
    for (const ParamTensor& t : param_tensors(x.c, x.adapters ? in.lora_rank : 0)) {
        if (x.adapters && !t.adapter) continue;
        bytes += 2.0 * static_cast<double>(t.numel() + 4 * optimizer_8bit_blocks(t.numel()));
    }
    return bytes;
}

// Model states per GPU (ZeRO paper section 5, per recipe); for a full config, as the
// data-parallel engine lays them out (core/comm/shard_layout.h): flat units padded to a multiple
// of W, so the numbers are the engine's to the byte. With adapters the units hold the adapters
// alone; the frozen base is replicated below ZeRO-3 and sharded per unit at 3 (frozen_layout).
// adamw-8bit aligns parameters and shards to its state blocks at ZeRO 1-3.
MemoryBytes model_states(Terms& x, Estimate& e) {
    const EstimateInputs& in = x.in;
    const int W = x.W;
    const formulas::BytesPerParam bpp =
        formulas::bytes_per_param(in.precision, in.optimizer, in.grads_fp32);
    e.bytes_per_param = bpp;
    const double wb = bpp.weights;
    // Frozen base (LoRA/QLoRA): block linear weights in the working dtype or NF4, the rest
    // (embeddings, norms, biases, head) in the working dtype.
    const double frozen_linear =
        x.adapters ? (in.params_only ? x.n_alloc
                                     : static_cast<double>(x.c.n_layers) *
                                           static_cast<double>(e.params.linear_per_layer))
                   : 0.0;
    const double frozen_other = x.adapters ? x.n_alloc - frozen_linear : 0.0;
    x.linear_bytes = in.finetune == Finetune::qlora ? formulas::kNf4BitsPerParam / 8.0 : wb;
    const double frozen_linear_gpu = frozen_linear_bytes(x, frozen_linear);
    MemoryBytes gpu;
    gpu.weights =
        shard(x.train_alloc, x.z3, W) * wb + frozen_linear_gpu + shard(frozen_other, x.z3, W) * wb;
    gpu.master = shard(x.train_alloc, x.z1, W) * bpp.master;
    gpu.grads = shard(x.train_alloc, x.z2, W) * bpp.grads;
    gpu.optimizer = shard(x.train_alloc, x.z1, W) * bpp.optimizer;
    x.layout = in.params_only ? shard_layout_flat(static_cast<std::int64_t>(x.train_alloc), W)
                              : shard_layout(x.c, W, x.adapters ? in.lora_rank : 0,
                                             x.z1 ? shard_alignment(in.optimizer) : 1);
    if (in.params_only) return gpu;
    const auto P = static_cast<double>(x.layout.padded()),
               S = static_cast<double>(x.layout.shard());
    gpu.weights = (x.z3 ? S : x.z1 ? P : x.train_alloc) * wb;
    if (x.adapters && !x.z3) gpu.weights += frozen_linear_gpu + frozen_other * wb;
    if (x.adapters && x.z3) {  // the frozen base's shards, as the engine lays them out
        x.frozen = frozen_layout(x.c, W, in.lora_rank, in.finetune == Finetune::qlora,
                                 static_cast<std::uint64_t>(wb));
        for (const FrozenUnit& f : x.frozen)
            gpu.weights += static_cast<double>(f.groups[0].shard + f.groups[1].shard) * wb;
    }
    gpu.master = (x.z1 ? S : x.train_alloc) * bpp.master;
    gpu.grads = (x.z2 ? S : P) * bpp.grads;
    gpu.optimizer = (x.z1 ? S : x.train_alloc) * bpp.optimizer;
    if (in.optimizer == OptimizerKind::adamw_8bit) gpu.optimizer = optimizer_8bit_bytes(x);
    return gpu;
}

// One FSDP unit's parameters: a block's (napkin mode: N / L).
double layer_params(const Terms& x, const Estimate& e) {
    return x.in.params_only ? x.n_alloc / x.c.n_layers : static_cast<double>(e.params.per_layer);
}

// One FSDP unit (a block, or the embedding / head) in its stored dtypes.
double unit_bytes(const Terms& x, const Estimate& e) {
    const double wb = e.bytes_per_param.weights;
    const double layer = layer_params(x, e);
    const double layer_linear =
        x.in.params_only ? layer : static_cast<double>(e.params.linear_per_layer);
    const double layer_bytes =
        x.adapters ? layer_linear * x.linear_bytes + (layer - layer_linear) * wb + x.lora_layer * wb
                   : layer * wb;
    const double emb_bytes =
        x.in.params_only ? 0.0 : static_cast<double>(x.c.padded_vocab_size * x.c.d_model) * wb;
    return std::max(layer_bytes, emb_bytes);
}

// Offloaded states: the host steps the optimizer's shard (stages 1-3; all of it at stage 0) from
// an fp32 copy of that shard's gradients, napkin train's --offload optimizer
// (core/engine/zero.h); optimizer+params moves the weights there too.
MemoryBytes offload(const Terms& x, const Estimate& e, MemoryBytes& gpu) {
    const EstimateInputs& in = x.in;
    MemoryBytes cpu;
    if (in.offload != Offload::none) {
        cpu.master = gpu.master;
        cpu.optimizer = gpu.optimizer;
        cpu.grads = shard(x.train_alloc, x.z1, x.W) * 4.0;
        if (!in.params_only)
            cpu.grads = (x.z1 ? static_cast<double>(x.layout.shard()) : x.train_alloc) * 4.0;
        gpu.master = 0;
        gpu.optimizer = 0;
    }
    if (in.offload == Offload::optimizer_params) {
        cpu.weights = gpu.weights;
        gpu.weights = 0;  // resident nothing; the units in flight are in temporaries
        const double layer_trainable = x.adapters ? x.lora_layer : layer_params(x, e);
        gpu.grads = 2.0 * layer_trainable * e.bytes_per_param.grads;
    }
    return cpu;
}

// Activations: both views, per micro-batch (data parallelism does not shard them).
void activations(Terms& x, Estimate& e) {
    const EstimateInputs& in = x.in;
    const ModelConfig& c = x.c;
    formulas::LayerActivationTerms terms{};
    terms.s = static_cast<double>(x.T);
    terms.b = static_cast<double>(in.micro_batch);
    terms.h = static_cast<double>(c.d_model);
    terms.a = c.n_heads;
    terms.qkv_width = static_cast<double>(c.qkv_dim());
    terms.ff_width = static_cast<double>(c.d_ff);
    terms.fc_width = static_cast<double>(c.mlp == MlpKind::swiglu ? 2 * c.d_ff : c.d_ff);
    terms.p = bytes_of(x.pd.activations);
    terms.dropout = c.dropout > 0;
    const bool flash = in.attention == AttentionImpl::flash;
    if (flash && in.checkpointing == Checkpointing::selective) x.notes |= kNoteSelectiveFlash;
    e.act_closed_form_layer_bytes =
        formulas::korthikanti_layer_bytes(terms, in.checkpointing, flash);
    const double sbh = terms.s * terms.b * terms.h;
    // Outside the blocks: the embedding output (and its dropout mask), and at the output the
    // final norm's output and the head's input gradient (the logits are chunked, not kept).
    e.act_closed_form_bytes = c.n_layers * e.act_closed_form_layer_bytes +
                              sbh * (terms.p + (terms.dropout ? 1.0 : 0.0)) + 2.0 * terms.p * sbh;
    e.act_detailed_kept_bytes = static_cast<double>(x.pt.kept_bytes);
    e.act_detailed_bytes = static_cast<double>(x.pt.activation_peak_bytes());
    e.act_detailed_layer_bytes =
        static_cast<double>(x.pt.block_kept_bytes + x.pt.block_recomputed_bytes);
}

// The line of the itemized temporaries a buffer of the buffer plan is on.
double TemporaryBytes::*temporary_item(BufferRole role) {
    switch (role) {
        case BufferRole::grad_residual:
        case BufferRole::grad_narrow:
        case BufferRole::grad_wide:
        case BufferRole::branch_out:
        case BufferRole::lora_dh:
            return &TemporaryBytes::activation_grads;
        case BufferRole::loss_scratch:
        case BufferRole::loss_rows:
            return &TemporaryBytes::op_workspace;
        case BufferRole::attention_scratch:
            return &TemporaryBytes::attention_workspace;
        case BufferRole::nf4_dequantized:
            return &TemporaryBytes::dequant;
        case BufferRole::fp8_weight:
        case BufferRole::fp8_weight_scale:
        case BufferRole::fp8_grad:
        case BufferRole::fp8_grad_scale:
            return &TemporaryBytes::fp8_cast;
        case BufferRole::matmul_scratch:
            return &TemporaryBytes::gemm_workspace;
        case BufferRole::grad_norm_scratch:
            return &TemporaryBytes::grad_norm_workspace;
    }
    NAPKIN_ASSERT(false, "no temporaries line for buffer role " << static_cast<int>(role));
    return nullptr;
}

// Temporaries: the buffer plan's (core/buffer_plan.h), which the engine allocates, for the
// engine whose scratch the estimate counts; and the units ZeRO-3 or offloaded parameters gather
// (two: the one computing and the next), which the engine keeps in its `communication` category.
TemporaryBytes temporaries(const Terms& x, const Estimate& e, BufferPlan& buffers) {
    const EstimateInputs& in = x.in;
    const bool cuda = in.engine == EstimateInputs::Engine::cuda;
    // The device optimizer step's global norm: one partial-sum row per tensor the step passes.
    // Offloaded steps run on the host; napkin mode has no tensors.
    const int norm_tensors = cuda && in.offload == Offload::none && !in.params_only
                                 ? grad_norm_tensors(x.layout, in.zero)
                                 : 0;
    build_buffer_plan(x.plan, cuda ? DeviceKind::cuda : DeviceKind::cpu, norm_tensors, buffers);
    TemporaryBytes tmp;
    // Summed as whole bytes line by line, then converted once.
    for (const auto item :
         {&TemporaryBytes::activation_grads, &TemporaryBytes::op_workspace,
          &TemporaryBytes::attention_workspace, &TemporaryBytes::dequant, &TemporaryBytes::fp8_cast,
          &TemporaryBytes::gemm_workspace, &TemporaryBytes::grad_norm_workspace}) {
        std::uint64_t bytes = 0;
        for (const PlanBuffer& b : buffers.buffers) {
            if (temporary_item(b.role) == item) bytes += b.bytes();
        }
        tmp.*item = static_cast<double>(bytes);
    }
    if ((x.z3 && x.W > 1) || in.offload == Offload::optimizer_params)
        tmp.param_gather = 2.0 * unit_bytes(x, e);
    return tmp;
}

// Data-parallel communication per step per rank; ZeRO-3 shards the frozen base too (its
// weights in model_states), so it is gathered as it is used.
void communication(const Terms& x, Estimate& e) {
    const EstimateInputs& in = x.in;
    e.comm = estimate_communication(x.layout, in.zero, in.grad_accum, x.pd.grads, x.pd.weights,
                                    in.link_bytes_per_s);
    if (x.adapters && !in.params_only)
        add_frozen_base_gathers(e.comm, x.frozen, x.pd.weights, in.grad_accum);
    else if (x.adapters)
        add_frozen_base_gathers_flat(e.comm, x.n_alloc, x.linear_bytes,
                                     in.finetune == Finetune::qlora, x.pd.weights, in.grad_accum);
}

// Whether the GPU's memory and, with offloading, the node's host memory hold the run.
void capacity(Terms& x, Estimate& e) {
    const EstimateInputs& in = x.in;
    e.gpu_capacity_bytes = in.gpu_memory_bytes;
    e.cpu_capacity_bytes = in.cpu_memory_bytes;
    e.fits_gpu = e.gpu.total() <= in.gpu_memory_bytes;
    e.cpu_node_bytes = e.cpu.total() * std::min(x.W, in.gpus_per_node);
    e.fits_cpu =
        e.cpu.total() == 0 || in.cpu_memory_bytes <= 0 || e.cpu_node_bytes <= in.cpu_memory_bytes;
    if (!e.fits_cpu) x.notes |= kNoteCpuDoesNotFit;
}

// FLOPs per token from the closed forms and the op plan; per step and per run.
void flops(Terms& x, Estimate& e) {
    const EstimateInputs& in = x.in;
    const double per_mb = static_cast<double>(in.micro_batch * x.T);
    e.flops_6n_per_token = formulas::training_flops_per_token_6n(x.n_total);
    if (x.adapters)
        e.flops_adapters_per_token =
            formulas::adapter_training_flops_per_token(x.n_total, e.lora_params);
    e.flops_matmul_per_token = 6.0 * static_cast<double>(e.params.matmul);
    e.flops_attention_per_token = formulas::attention_flops_per_token(
        x.c.n_layers, static_cast<double>(x.T), static_cast<double>(x.c.d_model),
        in.causal_attention_flops);
    e.other_flops_per_token = static_cast<double>(x.pt.other_flops) / per_mb;
    const double recompute_per_token = static_cast<double>(x.pt.recompute_flops) / per_mb;
    if (in.params_only) {
        e.flops_matmul_per_token = e.flops_6n_per_token;
        e.model_flops_per_token = e.flops_6n_per_token;  // the lecture's napkin: 6N, nothing else
    } else {
        e.model_flops_per_token = static_cast<double>(x.pt.model_flops()) / per_mb;
    }
    e.hardware_flops_per_token = e.model_flops_per_token + recompute_per_token;
    e.tokens_per_step = per_mb * static_cast<double>(in.grad_accum) * x.W;
    e.model_flops_per_step = e.model_flops_per_token * e.tokens_per_step;
    e.hardware_flops_per_step = e.hardware_flops_per_token * e.tokens_per_step;
    e.run_flops_6nd = e.flops_6n_per_token * e.tokens;
    e.run_model_flops = e.model_flops_per_token * e.tokens;
    e.steps = std::ceil(e.tokens / e.tokens_per_step);
    if (e.tokens < e.tokens_per_step) x.notes |= kNoteRunUnderOneStep;
}

// The performance model's step (estimator/perf_model.h) over the rank's share of the states.
void predict_time(Terms& x, Estimate& e) {
    const EstimateInputs& in = x.in;
    StepShape s;
    s.grad_accum = in.grad_accum;
    s.world = x.W;
    s.zero = in.zero;
    s.offload = in.offload;
    s.optimizer = in.optimizer;
    s.grads_fp32 = in.grads_fp32;
    const auto S = static_cast<double>(x.layout.shard()),
               P = static_cast<double>(x.layout.padded());
    s.optimizer_elements = x.z1 ? S : x.train_alloc;
    s.grad_elements = x.z2 ? S : P;
    s.threads = in.threads;
    s.comm = &e.comm;
    s.link_bytes_per_s = in.link_bytes_per_s;
    s.overlap = in.overlap;
    e.step_time = predict_step_time(x.plan, s, *in.profile);
    e.time_predicted = true;
    e.step_seconds = e.step_time.step_seconds;
    x.notes |= kNoteTimePredicted;
}

// Time at the assumed MFU, or predicted op by op; the MFU a measured throughput means (PaLM
// appendix B).
void time(Terms& x, Estimate& e) {
    const EstimateInputs& in = x.in;
    e.peak_flops_per_s = in.peak_flops_per_s;
    if (in.precision == Precision::fp32) x.notes |= kNoteFp32Peak;
    if (in.mfu == 0) {
        predict_time(x, e);
        if (e.peak_flops_per_s <= 0) e.peak_flops_per_s = in.profile->peak_for(x.pd.gemm_compute);
    }
    if (e.peak_flops_per_s <= 0) {
        x.notes |= kNoteNoPeak;
        if (!e.time_predicted) return;
    }
    if (e.time_predicted) {
        e.mfu = e.peak_flops_per_s > 0
                    ? e.model_flops_per_step / (x.W * e.peak_flops_per_s * e.step_seconds)
                    : 0;
        e.run_seconds = e.tokens / e.tokens_per_step * e.step_seconds;
    } else {
        e.mfu = in.mfu;
        e.step_seconds =
            formulas::training_seconds(e.model_flops_per_step, x.W, in.peak_flops_per_s, in.mfu);
        e.run_seconds =
            formulas::training_seconds(e.run_model_flops, x.W, in.peak_flops_per_s, in.mfu);
    }
    e.tokens_per_s = e.tokens_per_step / e.step_seconds;
    e.hfu = e.mfu * e.hardware_flops_per_token / e.model_flops_per_token;
    if (in.measured_tokens_per_s > 0 && e.peak_flops_per_s > 0) {
        e.measured_mfu = formulas::mfu_from_throughput(
            in.measured_tokens_per_s, e.model_flops_per_token, x.W, e.peak_flops_per_s);
    }
}

}  // namespace

std::int64_t default_seq_len(const ModelConfig& cfg) { return std::min<std::int64_t>(cfg.context_length, 8192); }

ModelConfig napkin_shape(double n_params, std::int64_t seq_len) {
    // 12 L C^2 = N with C = 128 L  =>  L = cbrt(N / (12 * 128^2)).
    const double layers = std::cbrt(n_params / (12.0 * 128.0 * 128.0));
    ModelConfig c;
    c.name = "napkin";
    c.n_layers = std::max(1, static_cast<int>(std::lround(layers)));
    c.d_model = 128 * c.n_layers;
    c.n_heads = c.n_layers;  // head dim 128
    c.n_kv_heads = c.n_heads;
    c.d_ff = 4 * c.d_model;
    c.vocab_size = 32000;
    c.padded_vocab_size = 32000;
    c.context_length = seq_len;
    c.norm = NormKind::layernorm;
    c.positions = PositionKind::rope;  // no position table to size
    c.mlp = MlpKind::gelu;
    c.bias = false;
    c.tied_embeddings = true;
    return c;
}

void validate(const EstimateInputs& in) {
    // %g: an integer flag reads "(got -1)", not "(got -1.000000)".
    auto got = [](double v) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", v);
        return std::string(buf);
    };
    auto positive = [&](double v, const char* flag) {
        if (!(v > 0) || !std::isfinite(v)) {
            throw UsageError(std::string(flag) + ": must be positive (got " + got(v) + ")");
        }
    };
    // 0 means "not given" for these; anything else must be finite and positive.
    auto zero_or_positive = [&](double v, const char* flag) {
        if (v != 0) positive(v, flag);
    };
    auto at_most = [&](double v, double limit, const char* flag, const char* why) {
        if (v > limit) {
            throw UsageError(std::string(flag) + ": " + got(v) + " is beyond napkin's limit of " +
                             got(limit) + " (" + why + ")");
        }
    };
    if (in.params_only) {
        positive(in.params, "--params");
        at_most(in.params, kMaxParams, "--params", "the largest model the solver searches");
    }
    if (in.seq_len < 0) positive(static_cast<double>(in.seq_len), "--seq-len");
    positive(static_cast<double>(in.micro_batch), "--micro-batch");
    positive(static_cast<double>(in.grad_accum), "--grad-accum");
    positive(in.gpus, "--gpus");
    positive(in.gpus_per_node, "gpus per node");
    zero_or_positive(in.tokens, "--tokens");
    at_most(in.tokens, kMaxTokens, "--tokens", "20 x the largest --params");
    if (in.zero < 0 || in.zero > 3) {
        throw UsageError("--zero: must be 0, 1, 2 or 3 (got " + std::to_string(in.zero) + ")");
    }
    // 0: the performance model predicts the time, over a device profile.
    if (!(in.mfu > 0 && in.mfu <= 1) && !(in.mfu == 0 && in.profile != nullptr)) {
        throw UsageError("--mfu: must be in (0, 1] (got " + got(in.mfu) + ")");
    }
    if (in.finetune != Finetune::full && in.lora_rank <= 0) {
        throw UsageError("--lora-rank: must be a positive integer (got " + std::to_string(in.lora_rank) + ")");
    }
    zero_or_positive(in.peak_flops_per_s, "--peak-tflops");
    positive(in.gpu_memory_bytes, "--gpu-mem-gb");
    zero_or_positive(in.cpu_memory_bytes, "--cpu-mem-gb");
    zero_or_positive(in.measured_tokens_per_s, "--measured-tokens-per-s");
    zero_or_positive(in.link_bytes_per_s, "--link-gbps");
}

const ModelConfig& Estimator::model(const EstimateInputs& in, std::int64_t& T,
                                    std::uint32_t& notes) {
    T = in.seq_len;
    if (in.params_only) {
        if (T == 0) {
            T = 2048;
            notes |= kNoteSeqLenDefault;
        }
        if (shape_params_ != in.params || shape_seq_ != T) {  // napkin mode's shape, cached
            shape_ = napkin_shape(in.params, T);
            shape_params_ = in.params;
            shape_seq_ = T;
        }
        notes |= kNoteParamsOnlyShape | kNoteParamsOnlyFlops;
        return shape_;
    }
    validate(in.model);
    if (T == 0) {
        T = default_seq_len(in.model);
        notes |= kNoteSeqLenDefault;
    }
    if (T > in.model.context_length) notes |= kNoteSeqBeyondContext;
    return in.model;
}

void Estimator::run(const EstimateInputs& in, Estimate& e) {
    validate(in);
    e = Estimate{};
    std::int64_t T = 0;
    std::uint32_t notes = 0;
    const ModelConfig& c = model(in, T, notes);
    build_op_plan(c, plan_inputs(in, T), plan_);
    Terms x(in, c, plan_, T, notes);
    e.seq_len = T;
    e.n_layers = c.n_layers;
    e.d_model = c.d_model;
    if (in.zero > 0 && x.W == 1) x.notes |= kNoteZeroOneGpu;
    if (in.link_bytes_per_s > 0 && x.W == 1) x.notes |= kNoteLinkOneGpu;
    if (in.finetune == Finetune::qlora &&
        (in.precision == Precision::fp32 || in.precision == Precision::fp8_amp))
        x.notes |= kNoteQloraPrecision;

    count_parameters(x, e);
    e.gpu = model_states(x, e);
    e.cpu = offload(x, e, e.gpu);
    activations(x, e);
    if (in.ignore_activations) {
        x.notes |= kNoteActivationsIgnored;
    } else {
        e.gpu.activations = e.act_detailed_bytes;
        e.temporaries = temporaries(x, e, buffers_);
        e.gpu.temporaries = e.temporaries.total();
    }
    communication(x, e);
    capacity(x, e);
    flops(x, e);
    time(x, e);
    e.notes = x.notes;
}

}  // namespace napkin
