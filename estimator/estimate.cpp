// The estimator's arithmetic. Model-state memory follows the ZeRO paper's accounting per
// recipe (napkin_formulas.h); activations and FLOPs come from the op plan (core/op_plan.h);
// docs/ESTIMATOR.md walks through every term.
#include "estimator/estimate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

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
    if (!(in.mfu > 0 && in.mfu <= 1)) {
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

void Estimator::run(const EstimateInputs& in, Estimate& e) {
    validate(in);
    e = Estimate{};
    const int W = in.gpus;
    std::uint32_t notes = 0;

    // The model: the config, or napkin mode's derived shape (cached between calls).
    std::int64_t T = in.seq_len;
    const ModelConfig* cfg = &in.model;
    if (in.params_only) {
        if (T == 0) {
            T = 2048;
            notes |= kNoteSeqLenDefault;
        }
        if (shape_params_ != in.params || shape_seq_ != T) {
            shape_ = napkin_shape(in.params, T);
            shape_params_ = in.params;
            shape_seq_ = T;
        }
        cfg = &shape_;
        notes |= kNoteParamsOnlyShape | kNoteParamsOnlyFlops;
    } else {
        validate(in.model);
        if (T == 0) {
            T = default_seq_len(in.model);
            notes |= kNoteSeqLenDefault;
        }
        if (T > in.model.context_length) notes |= kNoteSeqBeyondContext;
    }
    const ModelConfig& c = *cfg;
    e.seq_len = T;
    e.n_layers = c.n_layers;
    e.d_model = c.d_model;

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
    build_op_plan(c, pin, plan_);
    const PlanTotals pt = plan_totals(plan_);
    const PrecisionDTypes pd = precision_dtypes(in.precision, in.optimizer, in.grads_fp32);

    // Parameters.
    e.params = count_params(c);
    const double n_total = in.params_only ? in.params : static_cast<double>(e.params.total);
    const double n_alloc = in.params_only ? in.params : static_cast<double>(e.params.allocated);
    e.total_params = n_total;
    const bool adapters = in.finetune != Finetune::full;
    const double lora_layer = adapters ? lora_params_per_layer(c, in.lora_rank) : 0.0;
    e.lora_params = lora_layer * c.n_layers;
    e.trainable_params = adapters ? e.lora_params : n_total;
    e.frozen_params = adapters ? n_total : 0.0;
    e.tokens = in.tokens > 0 ? in.tokens : 20.0 * n_total;
    if (in.tokens <= 0) notes |= kNoteTokensDefault;

    // Model states per GPU (ZeRO paper section 5, per recipe).
    const formulas::BytesPerParam bpp = formulas::bytes_per_param(in.precision, in.optimizer, in.grads_fp32);
    e.bytes_per_param = bpp;
    const double wb = bpp.weights;
    const double train_alloc = adapters ? e.lora_params : n_alloc;
    // Frozen base (LoRA/QLoRA): block linear weights in the working dtype or NF4, the rest
    // (embeddings, norms, biases, head) in the working dtype.
    const double frozen_linear = adapters ? (in.params_only ? n_alloc : static_cast<double>(c.n_layers) *
                                                                            static_cast<double>(e.params.linear_per_layer))
                                          : 0.0;
    const double frozen_other = adapters ? n_alloc - frozen_linear : 0.0;
    const double linear_bytes = in.finetune == Finetune::qlora ? formulas::kNf4BitsPerParam / 8.0 : wb;
    const bool z1 = in.zero >= 1, z2 = in.zero >= 2, z3 = in.zero >= 3;
    if (in.zero > 0 && W == 1) notes |= kNoteZeroOneGpu;
    if (in.link_bytes_per_s > 0 && W == 1) notes |= kNoteLinkOneGpu;
    if (in.finetune == Finetune::qlora &&
        (in.precision == Precision::fp32 || in.precision == Precision::fp8_amp))
        notes |= kNoteQloraPrecision;

    double frozen_linear_bytes = shard(frozen_linear, z3, W) * linear_bytes;
    if (in.finetune == Finetune::qlora && !in.params_only) {
        // NF4 as the engine stores it, tensor by tensor (kernels/nf4.h): codes, then the steps
        // and absmax codes, each rounded up to whole bytes and blocks.
        const std::int64_t C = c.d_model, fc_rows = c.mlp == MlpKind::swiglu ? 2 * c.d_ff : c.d_ff;
        const double per_layer = static_cast<double>(
            nf4_storage_bytes(c.qkv_dim() * C) + nf4_storage_bytes(C * C) +
            nf4_storage_bytes(fc_rows * C) + nf4_storage_bytes(C * c.d_ff));
        frozen_linear_bytes = shard(per_layer * c.n_layers, z3, W);
    }
    MemoryBytes gpu;
    gpu.weights = shard(train_alloc, z3, W) * wb + frozen_linear_bytes + shard(frozen_other, z3, W) * wb;
    gpu.master = shard(train_alloc, z1, W) * bpp.master;
    gpu.grads = shard(train_alloc, z2, W) * bpp.grads;
    gpu.optimizer = shard(train_alloc, z1, W) * bpp.optimizer;
    // A full model's states as the data-parallel engine lays them out (core/comm/shard_layout.h):
    // flat units padded to a multiple of W, so the numbers are the engine's to the byte.
    // With adapters the units hold the adapters alone; the frozen base is replicated below
    // ZeRO-3 and sharded per unit at 3 (frozen_layout). adamw-8bit aligns parameters and shards
    // to its state blocks at ZeRO 1-3.
    const ShardLayout layout = in.params_only ? shard_layout_flat(static_cast<std::int64_t>(train_alloc), W)
                                              : shard_layout(c, W, adapters ? in.lora_rank : 0,
                                                             z1 ? shard_alignment(in.optimizer) : 1);
    std::vector<FrozenUnit> frozen;  // ZeRO-3 with adapters: the frozen base's storage per unit
    if (!in.params_only) {
        const auto P = static_cast<double>(layout.padded()), S = static_cast<double>(layout.shard());
        gpu.weights = (z3 ? S : z1 ? P : train_alloc) * wb;
        if (adapters && !z3) gpu.weights += frozen_linear_bytes + frozen_other * wb;
        if (adapters && z3) {  // the frozen base's shards, as the engine lays them out
            frozen = frozen_layout(c, W, in.lora_rank, in.finetune == Finetune::qlora, static_cast<std::uint64_t>(wb));
            for (const FrozenUnit& f : frozen)
                gpu.weights += static_cast<double>(f.groups[0].shard + f.groups[1].shard) * wb;
        }
        gpu.master = (z1 ? S : train_alloc) * bpp.master;
        gpu.grads = (z2 ? S : P) * bpp.grads;
        gpu.optimizer = (z1 ? S : train_alloc) * bpp.optimizer;
    }

    // 8-bit optimizer states with a shape, as the engine stores them: a byte per element and an
    // fp32 absmax per 2048-element block; sharded (ZeRO 1-3), the shard S of block-aligned units
    // (every block whole in one shard) with S / 2048 absmax per moment.
    if (in.optimizer == OptimizerKind::adamw_8bit && !in.params_only && z1) {
        const auto S = static_cast<double>(layout.shard());
        gpu.optimizer = 2.0 * (S + 4.0 * S / static_cast<double>(kOptimizer8bitBlock));
    }
    // Unsharded (ZeRO-0): tensor by tensor, each tensor's blocks rounded up.
    if (in.optimizer == OptimizerKind::adamw_8bit && !in.params_only && !z1) {
        double bytes = 0;
        for (const ParamTensor& t : param_tensors(c, adapters ? in.lora_rank : 0)) {
            if (adapters && !t.adapter) continue;
            bytes += 2.0 * static_cast<double>(t.numel() + 4 * optimizer_8bit_blocks(t.numel()));
        }
        gpu.optimizer = bytes;
    }

    // One FSDP unit (a block, or the embedding / head) in its stored dtypes.
    const double layer_params = in.params_only ? n_alloc / c.n_layers : static_cast<double>(e.params.per_layer);
    const double layer_linear = in.params_only ? layer_params : static_cast<double>(e.params.linear_per_layer);
    const double layer_bytes = adapters ? layer_linear * linear_bytes + (layer_params - layer_linear) * wb +
                                              lora_layer * wb
                                        : layer_params * wb;
    const double emb_bytes =
        in.params_only ? 0.0 : static_cast<double>(c.padded_vocab_size * c.d_model) * wb;
    const double unit_bytes = std::max(layer_bytes, emb_bytes);

    MemoryBytes cpu;
    if (in.offload != Offload::none) {
        // The host steps the optimizer's shard (stages 1-3; all of it at stage 0) from an fp32
        // copy of that shard's gradients: napkin train's --offload optimizer (core/engine/zero.h).
        cpu.master = gpu.master;
        cpu.optimizer = gpu.optimizer;
        cpu.grads = shard(train_alloc, z1, W) * 4.0;
        if (!in.params_only) cpu.grads = (z1 ? static_cast<double>(layout.shard()) : train_alloc) * 4.0;
        gpu.master = 0;
        gpu.optimizer = 0;
    }
    if (in.offload == Offload::optimizer_params) {
        cpu.weights = gpu.weights;
        gpu.weights = 0;  // resident nothing; the units in flight are in temporaries
        const double layer_trainable = adapters ? lora_layer : layer_params;
        gpu.grads = 2.0 * layer_trainable * bpp.grads;
    }

    // Activations: both views, per micro-batch (data parallelism does not shard them).
    formulas::LayerActivationTerms terms{};
    terms.s = static_cast<double>(T);
    terms.b = static_cast<double>(in.micro_batch);
    terms.h = static_cast<double>(c.d_model);
    terms.a = c.n_heads;
    terms.qkv_width = static_cast<double>(c.qkv_dim());
    terms.ff_width = static_cast<double>(c.d_ff);
    terms.fc_width = static_cast<double>(c.mlp == MlpKind::swiglu ? 2 * c.d_ff : c.d_ff);
    terms.p = bytes_of(pd.activations);
    terms.dropout = c.dropout > 0;
    const bool flash = in.attention == AttentionImpl::flash;
    if (flash && in.checkpointing == Checkpointing::selective) notes |= kNoteSelectiveFlash;
    e.act_closed_form_layer_bytes = formulas::korthikanti_layer_bytes(terms, in.checkpointing, flash);
    const double sbh = terms.s * terms.b * terms.h;
    // Outside the blocks: the embedding output (and its dropout mask), and at the output the
    // final norm's output and the head's input gradient (the logits are chunked, not kept).
    e.act_closed_form_bytes = c.n_layers * e.act_closed_form_layer_bytes +
                              sbh * (terms.p + (terms.dropout ? 1.0 : 0.0)) + 2.0 * terms.p * sbh;
    e.act_detailed_kept_bytes = static_cast<double>(pt.kept_bytes);
    e.act_detailed_bytes = static_cast<double>(pt.activation_peak_bytes());
    e.act_detailed_layer_bytes = static_cast<double>(pt.block_kept_bytes + pt.block_recomputed_bytes);

    // Temporaries: the buffers the engine allocates once and keeps (core/engine/gpt_impl.h,
    // allocate_buffers), so the measured peak equals this to the byte (TrainCli test).
    TemporaryBytes tmp;
    const std::int64_t tokens_mb = in.micro_batch * T;
    const std::int64_t fc_rows = c.mlp == MlpKind::swiglu ? 2 * c.d_ff : c.d_ff;
    const std::int64_t narrow = std::max(c.d_model, c.d_ff), wide = std::max(c.qkv_dim(), fc_rows);
    const double widest = static_cast<double>(std::max({c.qkv_dim(), fc_rows, c.d_ff}));
    // dres and branch (N, C), dnarrow (N, max(C, F)), dwide (N, max(3C or QKV, F or 2F)); with
    // adapters their backward's dh (N, 3r), sized for qkv's three.
    tmp.activation_grads = static_cast<double>(tokens_mb * (2 * c.d_model + narrow + wide)) * terms.p;
    if (adapters) tmp.activation_grads += static_cast<double>(tokens_mb * 3 * in.lora_rank) * terms.p;
    const bool cpu_engine = in.engine == EstimateInputs::Engine::cpu;
    const bool wide16 = pd.activations != DType::f32;  // 16-bit storage: the CPU widens to fp32
    const std::int64_t chunk = in.loss_chunk_rows > 0 ? std::min(in.loss_chunk_rows, tokens_mb) : tokens_mb;
    // The head's scratch: the CPU's (16-bit storage widened to fp32), or the CUDA kernel's
    // (logits, dlogits in the storage type, dw's fp32 sum), as the engines allocate them.
    tmp.op_workspace =
        cpu_engine ? 4.0 * static_cast<double>(cpu::head_cross_entropy_scratch_floats(
                               chunk, c.d_model, c.padded_vocab_size, wide16))
                   : static_cast<double>(cuda::head_cross_entropy_scratch_bytes(
                         chunk, c.d_model, c.padded_vocab_size, pd.activations, true));
    if (in.attention == AttentionImpl::naive)
        tmp.attention_workspace =
            4.0 * static_cast<double>(cpu::attention_naive_backward_scratch_floats(in.micro_batch, T, c.n_heads));
    if ((z3 && W > 1) || in.offload == Offload::optimizer_params) tmp.param_gather = 2.0 * unit_bytes;
    // QLoRA: one NF4 linear weight at a time dequantized to the working dtype for its GEMM.
    if (in.finetune == Finetune::qlora)
        tmp.dequant = static_cast<double>(storage_bytes(
            pd.weights,
            static_cast<std::uint64_t>(widest) * static_cast<std::uint64_t>(c.d_model)));
    // fp8-amp: the block GEMMs' weight (E4M3) and output gradient (E5M2) casts, each with its
    // scale pair, sized for the largest GEMM (core/engine/gpt_impl.h, allocate_buffers).
    const Fp8CastNumel cast = fp8_cast_numel(plan_);
    if (cast.weight > 0)
        tmp.fp8_cast = static_cast<double>(
            storage_bytes(DType::f8e4m3, static_cast<std::uint64_t>(cast.weight)) +
            storage_bytes(DType::f8e5m2, static_cast<std::uint64_t>(cast.grad)) +
            2 * storage_bytes(DType::f32, kFp8ScaleFloats));
    if (!cpu_engine) {
        // 32 MiB (kernels/matmul.h), and under fp8-amp the fp8 backward's transposed operands
        // for the largest block GEMM, as the CUDA engine allocates them
        // (core/engine/cuda_kernels.h).
        std::size_t transposes = 0;
        for (const PlanOp& op : plan_.block) {
            if (op.kind != OpKind::matmul) continue;
            const auto& s = std::get<MatmulShape>(op.shape);
            if (s.in == DType::f8e4m3)
                transposes =
                    std::max(transposes, cuda::matmul_fp8_backward_scratch_bytes(s.M, s.N, s.K));
        }
        tmp.gemm_workspace = static_cast<double>(cuda::kMatmulWorkspaceBytes + transposes);
        // The optimizer step's global norm on the device (core/engine/cuda_device.cpp): its
        // partial sums, one row per tensor the step passes (with adapters, the A and B of a
        // block's four linears: the engine trains them in one process). Offloaded steps run on
        // the host.
        if (in.offload == Offload::none && !in.params_only) {
            const int tensors = grad_norm_tensors(layout, in.zero);
            tmp.grad_norm_workspace = static_cast<double>(
                cuda::kGradNormResultBytes + cuda::grad_sum_squares_scratch_bytes(tensors));
        }
        tmp.op_workspace += 4.0 * static_cast<double>(tokens_mb);  // the per-row losses, fp32
    } else if (wide16) {
        // The largest block GEMM or adapter, its operands widened (the CPU engine's scratch).
        tmp.gemm_workspace = 4.0 * static_cast<double>(cpu::gemm_scratch_floats(plan_.block, true));
    }

    if (in.ignore_activations) {
        notes |= kNoteActivationsIgnored;
    } else {
        gpu.activations = e.act_detailed_bytes;
        e.temporaries = tmp;
        gpu.temporaries = tmp.total();
    }
    e.gpu = gpu;
    e.cpu = cpu;
    e.comm = estimate_communication(layout, in.zero, in.grad_accum, pd.grads, pd.weights, in.link_bytes_per_s);
    // ZeRO-3 shards the frozen base too (gpu.weights above), so it is gathered as it is used.
    if (adapters && !in.params_only)
        add_frozen_base_gathers(e.comm, frozen, pd.weights, in.grad_accum);
    else if (adapters)
        add_frozen_base_gathers_flat(e.comm, n_alloc, linear_bytes, in.finetune == Finetune::qlora, pd.weights,
                                     in.grad_accum);
    e.gpu_capacity_bytes = in.gpu_memory_bytes;
    e.cpu_capacity_bytes = in.cpu_memory_bytes;
    e.fits_gpu = gpu.total() <= in.gpu_memory_bytes;
    e.cpu_node_bytes = cpu.total() * std::min(W, in.gpus_per_node);
    e.fits_cpu = cpu.total() == 0 || in.cpu_memory_bytes <= 0 || e.cpu_node_bytes <= in.cpu_memory_bytes;
    if (!e.fits_cpu) notes |= kNoteCpuDoesNotFit;

    // FLOPs.
    const double per_mb = tokens_mb;
    e.flops_6n_per_token = formulas::training_flops_per_token_6n(n_total);
    if (adapters) e.flops_adapters_per_token = formulas::adapter_training_flops_per_token(n_total, e.lora_params);
    e.flops_matmul_per_token = 6.0 * static_cast<double>(e.params.matmul);
    e.flops_attention_per_token = formulas::attention_flops_per_token(
        c.n_layers, static_cast<double>(T), static_cast<double>(c.d_model), in.causal_attention_flops);
    e.other_flops_per_token = static_cast<double>(pt.other_flops) / per_mb;
    const double recompute_per_token = static_cast<double>(pt.recompute_flops) / per_mb;
    if (in.params_only) {
        e.flops_matmul_per_token = e.flops_6n_per_token;
        e.model_flops_per_token = e.flops_6n_per_token;  // the lecture's napkin: 6N, nothing else
    } else {
        e.model_flops_per_token = static_cast<double>(pt.model_flops()) / per_mb;
    }
    e.hardware_flops_per_token = e.model_flops_per_token + recompute_per_token;
    e.tokens_per_step = per_mb * static_cast<double>(in.grad_accum) * W;
    e.model_flops_per_step = e.model_flops_per_token * e.tokens_per_step;
    e.hardware_flops_per_step = e.hardware_flops_per_token * e.tokens_per_step;
    e.run_flops_6nd = e.flops_6n_per_token * e.tokens;
    e.run_model_flops = e.model_flops_per_token * e.tokens;
    e.steps = std::ceil(e.tokens / e.tokens_per_step);
    if (e.tokens < e.tokens_per_step) notes |= kNoteRunUnderOneStep;

    // Time.
    e.peak_flops_per_s = in.peak_flops_per_s;
    if (in.precision == Precision::fp32) notes |= kNoteFp32Peak;
    if (in.peak_flops_per_s > 0) {
        e.step_seconds = formulas::training_seconds(e.model_flops_per_step, W, in.peak_flops_per_s, in.mfu);
        e.run_seconds = formulas::training_seconds(e.run_model_flops, W, in.peak_flops_per_s, in.mfu);
        e.hfu = in.mfu * e.hardware_flops_per_token / e.model_flops_per_token;
        if (in.measured_tokens_per_s > 0) {
            e.measured_mfu = formulas::mfu_from_throughput(in.measured_tokens_per_s, e.model_flops_per_token,
                                                           W, in.peak_flops_per_s);
        }
    } else {
        notes |= kNoteNoPeak;
    }
    e.notes = notes;
}

}  // namespace napkin
