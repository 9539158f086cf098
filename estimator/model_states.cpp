// Model states per GPU (weights, master, gradients, optimizer state), what is offloaded to the
// host, and the temporaries: the steps of Estimator::run that size memory other than activations
// (estimate_steps.h). docs/ESTIMATOR.md, sections 3, 5 and "3D parallelism".
#include <algorithm>
#include <cmath>

#include "core/buffer_plan.h"
#include "core/check.h"
#include "estimator/estimate_steps.h"
#include "kernels/nf4.h"
#include "kernels/optimizer.h"

namespace napkin::estimate_steps {

namespace {

// Tensors the CUDA optimizer step's global-norm pass takes (core/engine/optimizer.cpp and
// zero.cpp): every parameter at ZeRO 0; at stages 1-3 the pieces of parameters inside a rank's
// shard of each unit, the largest count over the ranks (the ranks differ by a few at most).
int grad_norm_tensors(const ShardLayout& layout, int zero) {
    const int trained = static_cast<int>(std::count_if(
        layout.param_unit.begin(), layout.param_unit.end(), [](int u) { return u >= 0; }));
    // Every trained parameter at ZeRO-0 (a frozen one is in no unit); beyond 1024 ranks that as
    // the bound too, rather than walking every rank (the partial sums are 2 KB per tensor).
    constexpr int kRanksWalked = 1024;
    if (zero == 0 || layout.world > kRanksWalked) return trained;
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

// The frozen base's block linear weights (LoRA/QLoRA) on a GPU, in the working dtype or NF4.
double frozen_linear_bytes(const Terms& x, double frozen_linear) {
    const ModelConfig& c = x.c;
    if (x.in.finetune != Finetune::qlora || x.in.params_only)
        return shard(frozen_linear, x.z3, x.W) * x.linear_bytes;
    // NF4 as the engine stores it, tensor by tensor (kernels/nf4.h): codes, then the steps and
    // absmax codes, each rounded up to whole bytes and blocks.
    const std::int64_t C = c.d_model, fc_rows = c.mlp == MlpKind::swiglu ? 2 * c.d_ff : c.d_ff;
    const double per_layer =
        static_cast<double>(nf4_storage_bytes(c.qkv_dim() * C) + nf4_storage_bytes(c.q_dim() * C) +
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

// One FSDP unit's parameters: a block's (napkin mode: N / L, rounded up to whole parameters).
double layer_params(const Terms& x, const Estimate& e) {
    return x.in.params_only ? std::ceil(x.n_alloc / x.c.n_layers)
                            : static_cast<double>(e.params.per_layer);
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
    return std::ceil(std::max(layer_bytes, emb_bytes));  // NF4's 4.127 bits: whole bytes
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
        case BufferRole::step_scalars:
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
        case BufferRole::fp8_amax_history:
        case BufferRole::fp8_scales:
            return &TemporaryBytes::fp8_history;
        case BufferRole::matmul_scratch:
            return &TemporaryBytes::gemm_workspace;
        case BufferRole::grad_norm_scratch:
            return &TemporaryBytes::grad_norm_workspace;
        case BufferRole::anomaly_slots:
            return &TemporaryBytes::anomaly_slots;
    }
    NAPKIN_ASSERT(false, "no temporaries line for buffer role " << static_cast<int>(role));
    return nullptr;
}

}  // namespace

formulas::BytesPerParam recipe_bytes_per_param(const EstimateInputs& in) {
    formulas::BytesPerParam b =
        formulas::bytes_per_param(in.precision, in.optimizer, in.grads_fp32);
    if (in.optimizer_fp32) b.optimizer = 4.0 * optimizer_state_count(in.optimizer);
    return b;
}

// Model states per GPU (ZeRO paper section 5, per recipe); for a full config, as the
// data-parallel engine lays them out (core/comm/shard_layout.h): flat units padded to a multiple
// of W, so the numbers are the engine's to the byte. With adapters the units hold the adapters
// alone; the frozen base is replicated below ZeRO-3 and sharded per unit at 3 (frozen_layout).
// adamw-8bit aligns parameters and shards to its state blocks at ZeRO 1-3.
MemoryBytes model_states(Terms& x, Estimate& e) {
    const EstimateInputs& in = x.in;
    const int W = x.W;
    const formulas::BytesPerParam bpp = recipe_bytes_per_param(in);
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
    // Napkin mode's fractional bytes per parameter (NF4's 4.127 bits, 8-bit states' absmax) in
    // whole bytes; a shape's are counted tensor by tensor below.
    for (double* bytes : {&gpu.weights, &gpu.master, &gpu.grads, &gpu.optimizer})
        *bytes = std::ceil(*bytes);
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

// QLoRA's paged optimizer (Dettmers et al. 2023, section 3: NVIDIA unified memory, the state
// evicted to CPU RAM under memory pressure and paged back for the update). napkin pages it in
// and out every step (core/engine/optimizer.h), so the traffic is the state both ways per step.
void page_optimizer(const Terms& x, Estimate& e) {
    PagedOptimizerEstimate p;
    p.state_bytes = e.gpu.optimizer;
    e.gpu.optimizer = 0;
    p.step_peak_bytes =
        e.gpu.model_states() + p.state_bytes + e.temporaries.grad_norm_workspace + e.gpu.data;
    p.device_peak_bytes = std::max(e.gpu.total(), p.step_peak_bytes);
    p.traffic_bytes_per_step = 2.0 * p.state_bytes;
    const DeviceProfile* profile = x.in.profile;
    if (profile != nullptr && profile->host_device &&
        profile->host_device->to_device_bytes_per_s > 0 &&
        profile->host_device->to_host_bytes_per_s > 0) {
        p.to_device_bytes_per_s = profile->host_device->to_device_bytes_per_s;
        p.to_host_bytes_per_s = profile->host_device->to_host_bytes_per_s;
    } else {
        p.to_device_bytes_per_s = p.to_host_bytes_per_s = kAssumedHostLinkBytesPerS;
        p.link_assumed = true;
    }
    p.traffic_seconds_per_step =
        p.state_bytes / p.to_device_bytes_per_s + p.state_bytes / p.to_host_bytes_per_s;
    e.paged = p;
}

double batch_data(const Terms& x) {
    // core/engine/trainer.cpp: batch.inputs and batch.targets (.1 for the second slot).
    const double slots = x.in.engine == EstimateInputs::Engine::cuda ? 2.0 : 1.0;
    return slots * 2.0 * static_cast<double>(x.in.micro_batch) * static_cast<double>(x.T) *
           static_cast<double>(sizeof(std::int32_t));
}

// Temporaries: the buffer plan's (core/buffer_plan.h), which the engine allocates, for the
// engine whose scratch the estimate counts; and the units ZeRO-3 or offloaded parameters gather
// (two: the one computing and the next), which the engine keeps in its `communication` category.
// With T P > 1 the buffers are one tensor-parallel rank's, the loss chunk on the last stage only,
// and the norm's partial sums counted for every tensor on the stage (an upper bound).
TemporaryBytes temporaries(const Terms& x, const StageView& v, const Estimate& e,
                           BufferPlan& buffers) {
    const EstimateInputs& in = x.in;
    const bool cuda = in.engine == EstimateInputs::Engine::cuda;
    // The device optimizer step's global norm: one partial-sum row per tensor the step passes.
    // Offloaded steps run on the host; napkin mode has no tensors.
    int norm_tensors = cuda && in.offload == Offload::none && !in.params_only
                           ? grad_norm_tensors(x.layout, in.zero)
                           : 0;
    if (x.model_parallel() && cuda) {
        ModelConfig stage = *x.rank;
        stage.n_layers = v.layers;
        norm_tensors = static_cast<int>(param_tensors(stage).size());
    }
    build_buffer_plan(*x.rank_plan, cuda ? DeviceKind::cuda : DeviceKind::cpu, norm_tensors,
                      buffers);
    TemporaryBytes tmp;
    // Summed as whole bytes line by line, then converted once.
    for (const auto item :
         {&TemporaryBytes::activation_grads, &TemporaryBytes::op_workspace,
          &TemporaryBytes::attention_workspace, &TemporaryBytes::dequant, &TemporaryBytes::fp8_cast,
          &TemporaryBytes::fp8_history, &TemporaryBytes::gemm_workspace,
          &TemporaryBytes::grad_norm_workspace, &TemporaryBytes::anomaly_slots}) {
        std::uint64_t bytes = 0;
        for (const PlanBuffer& b : buffers.buffers) {
            if (temporary_item(b.role) == item) bytes += b.bytes();
        }
        tmp.*item = static_cast<double>(bytes);
    }
    if (!v.last) tmp.op_workspace = 0;  // the loss runs on the last stage
    if (x.model_parallel()) {
        const ParamCounts& r = x.rank_counts;
        const double unit = static_cast<double>(std::max(r.per_layer, r.token_embedding));
        if (x.z3 && x.par.dp > 1) tmp.param_gather = 2.0 * unit * e.bytes_per_param.weights;
    } else if ((x.z3 && x.W > 1) || in.offload == Offload::optimizer_params) {
        tmp.param_gather = 2.0 * unit_bytes(x, e);
    }
    return tmp;
}

// Megatron-LM's layout (estimator/parallel.h): a GPU of stage v holds the rank's share of its
// blocks, the first stage the embedding (a vocabulary shard, and the position table whole), the
// last the final norm and the head (with tied embeddings a copy of the embedding shard, whose
// gradient the two stages all-reduce). ZeRO shards the states over the DP replicas as the ZeRO
// paper counts them, ceil(n / DP) per rank (Megatron-LM's distributed optimizer is stage 1).
MemoryBytes megatron_model_states(const Terms& x, const StageView& v, Estimate& e,
                                  double& stage_params) {
    const ParamCounts& r = x.rank_counts;
    // The embedding and the head as allocated: Vp rows (a shard of them under T > 1).
    const auto vocab_rows = static_cast<double>(x.rank->padded_vocab_size * x.rank->d_model);
    double n = static_cast<double>(v.layers) * static_cast<double>(r.per_layer);
    if (v.first) n += vocab_rows + static_cast<double>(r.position_embedding);
    if (v.last) {
        n += static_cast<double>(r.final_norm);
        if (!x.c.tied_embeddings || !v.first) n += vocab_rows;  // the head, or the tied copy
    }
    stage_params = n;
    const formulas::BytesPerParam bpp = recipe_bytes_per_param(x.in);
    e.bytes_per_param = bpp;
    const int dp = x.par.dp;
    MemoryBytes gpu;
    gpu.weights = shard(n, x.z3, dp) * bpp.weights;
    gpu.master = shard(n, x.z1, dp) * bpp.master;
    gpu.grads = shard(n, x.z2, dp) * bpp.grads;
    gpu.optimizer = shard(n, x.z1, dp) * bpp.optimizer;
    return gpu;
}

}  // namespace napkin::estimate_steps

namespace napkin {

PrecisionDTypes recipe_dtypes(const EstimateInputs& in) {
    PrecisionDTypes d = precision_dtypes(in.precision, in.optimizer, in.grads_fp32);
    if (in.optimizer_fp32) d.optimizer_state = DType::f32;
    return d;
}

}  // namespace napkin
