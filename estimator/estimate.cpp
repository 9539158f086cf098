// The estimator's arithmetic: the order of the steps (estimate_steps.h), the parameters, FLOPs and
// time. Model-state memory follows the ZeRO paper's accounting per recipe (model_states.cpp);
// activations and FLOPs come from the op plan (core/op_plan.h); 3D parallelism follows
// Megatron-LM's layout (parallel.h). docs/ESTIMATOR.md walks through every term.
#include "estimator/estimate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/check.h"
#include "estimator/estimate_steps.h"
#include "kernels/lora.h"

namespace napkin {

namespace {

using estimate_steps::StageView;
using estimate_steps::Terms;

// Adapter parameters of one block: one adapter on each of the block's linear layers (QLoRA
// targets all of them; q, k, v and SwiGLU's gate and up each get their own).
double lora_params_per_layer(const ModelConfig& c, std::int64_t r) {
    const std::int64_t C = c.d_model, F = c.d_ff;
    const int fc_parts = c.mlp == MlpKind::swiglu ? 2 : 1;
    const std::int64_t fc_rows = fc_parts * F;
    return static_cast<double>(lora_params(LoraShape{0, c.qkv_dim(), C, r, 3}) +
                               lora_params(LoraShape{0, C, c.q_dim(), r, 1}) +
                               lora_params(LoraShape{0, fc_rows, C, r, fc_parts}) +
                               lora_params(LoraShape{0, C, F, r, 1}));
}

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
    pin.detect_anomaly = in.detect_anomaly;
    pin.gemm_epilogues = in.gemm_epilogues;
    pin.fp8_amax_history = in.fp8_amax_history;
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
    // Chinchilla's D = 20 N is a pretraining budget: a fine-tuning run has no default length.
    e.tokens = in.tokens > 0 ? in.tokens : x.adapters ? 0.0 : 20.0 * x.n_total;
    if (in.tokens <= 0) x.notes |= x.adapters ? kNoteFinetuneNoTokens : kNoteTokensDefault;
    x.train_alloc = x.adapters ? e.lora_params : x.n_alloc;
}

// Whether the GPU's memory and, with offloading, the node's host memory hold the run.
void capacity(Terms& x, Estimate& e) {
    const EstimateInputs& in = x.in;
    e.gpu_capacity_bytes = in.gpu_memory_bytes;
    e.cpu_capacity_bytes = in.cpu_memory_bytes;
    e.fits_gpu = (e.paged ? e.paged->device_peak_bytes : e.gpu.total()) <= in.gpu_memory_bytes;
    e.cpu_node_bytes = e.cpu.total() * std::min(x.W, in.gpus_per_node);
    e.fits_cpu =
        e.cpu.total() == 0 || in.cpu_memory_bytes <= 0 || e.cpu_node_bytes <= in.cpu_memory_bytes;
    if (!e.fits_cpu) x.notes |= kNoteCpuDoesNotFit;
}

// One pipeline stage's memory per GPU into `e` (model states, activations, temporaries).
Estimate::StageSummary stage_memory(Terms& x, const StageView& v, BufferPlan& buffers,
                                    Estimate& e) {
    Estimate::StageSummary s;
    s.stage = v.stage;
    s.layers = v.layers;
    s.in_flight = v.in_flight;
    e.gpu = estimate_steps::megatron_model_states(x, v, e, s.params);
    estimate_steps::activations(x, v, e);
    if (!x.in.ignore_activations) {
        e.gpu.activations = e.act_detailed_bytes;
        e.temporaries = estimate_steps::temporaries(x, v, e, buffers);
        e.gpu.temporaries = e.temporaries.total();
        e.gpu.data = estimate_steps::batch_data(x);
    }
    s.gpu = e.gpu;
    return s;
}

// Memory per GPU: the whole model under data parallelism and ZeRO, or with T P > 1 the first
// and the last pipeline stage (the first holds the most micro-batches in flight and the
// embedding, the last the head and the loss), the larger shown.
void memory(Terms& x, BufferPlan& buffers, Estimate& e) {
    if (x.in.ignore_activations) x.notes |= kNoteActivationsIgnored;
    if (!x.model_parallel()) {
        e.gpu = estimate_steps::model_states(x, e);
        e.cpu = estimate_steps::offload(x, e, e.gpu);
        const StageView whole = estimate_steps::whole_model(x);
        estimate_steps::activations(x, whole, e);
        if (!x.in.ignore_activations) {
            e.gpu.activations = e.act_detailed_bytes;
            e.temporaries = estimate_steps::temporaries(x, whole, e, buffers);
            e.gpu.temporaries = e.temporaries.total();
            e.gpu.data = estimate_steps::batch_data(x);
        }
        if (x.in.paged_optimizer) estimate_steps::page_optimizer(x, e);
        return;
    }
    Estimate::Parallel& par = e.parallel;
    par.layout = x.par;
    Estimate last = e;
    par.stages.push_back(stage_memory(x, estimate_steps::pipeline_stage(x, 0), buffers, e));
    if (x.par.pp > 1) {
        par.stages.push_back(
            stage_memory(x, estimate_steps::pipeline_stage(x, x.par.pp - 1), buffers, last));
        if (last.gpu.total() > e.gpu.total()) {
            par.shown = 1;
            e.gpu = last.gpu;
            e.temporaries = last.temporaries;
            e.act_closed_form_bytes = last.act_closed_form_bytes;
            e.act_detailed_bytes = last.act_detailed_bytes;
            e.act_detailed_kept_bytes = last.act_detailed_kept_bytes;
        }
    }
    const double params = par.stages[static_cast<std::size_t>(par.shown)].params;
    x.layout = shard_layout_flat(static_cast<std::int64_t>(params), x.par.dp);
}

// What the tensor and pipeline groups of a stage's rank exchange per step (parallel.h).
ModelParallelTraffic stage_traffic(const Terms& x, int stage) {
    const EstimateInputs& in = x.in;
    TrafficInputs t;
    t.tokens = in.micro_batch * x.T;
    t.d_model = x.c.d_model;
    t.vocab_shard_rows = x.rank->padded_vocab_size;
    t.activations = x.pd.activations;
    t.grads = x.pd.grads;
    t.full_recompute = in.checkpointing == Checkpointing::full;
    t.tied_embeddings = x.c.tied_embeddings;
    return model_parallel_traffic(
        x.par, stage, t, group_links(x.par, in.gpus_per_node, in.node_link, in.network_link));
}

// fp8-amp's amax histories, slots x H fp32 (none without delayed scaling).
std::int64_t fp8_history_floats(const OpPlan& plan) {
    return fp8_slots(plan).total() * plan.in.fp8_amax_history;
}

// Data-parallel communication per step per rank; ZeRO-3 shards the frozen base too (its
// weights in model_states), so it is gathered as it is used. With T P > 1, the DP group's over
// the shown stage's parameters, and the tensor and pipeline groups' traffic.
void communication(Terms& x, Estimate& e) {
    const EstimateInputs& in = x.in;
    if (!x.model_parallel()) {
        e.comm = estimate_communication(x.layout, in.zero, in.grad_accum, x.pd.grads, x.pd.weights,
                                        in.link_bytes_per_s);
        if (x.adapters && !in.params_only)
            add_frozen_base_gathers(e.comm, x.frozen, x.pd.weights, in.grad_accum);
        else if (x.adapters)
            add_frozen_base_gathers_flat(e.comm, x.n_alloc, x.linear_bytes,
                                         in.finetune == Finetune::qlora, x.pd.weights,
                                         in.grad_accum);
        add_fp8_amax_reduce(e.comm, fp8_history_floats(*x.rank_plan));
        return;
    }
    const GroupLinks links = group_links(x.par, in.gpus_per_node, in.node_link, in.network_link);
    const bool given = in.link_bytes_per_s > 0;  // --link overrides the DP group's placement
    e.comm = estimate_communication(x.layout, in.zero, in.grad_accum, x.pd.grads, x.pd.weights,
                                    given ? in.link_bytes_per_s : links.data.bytes_per_s);
    if (!given) e.comm.link = links.data.name;
    add_fp8_amax_reduce(e.comm, fp8_history_floats(*x.rank_plan));
    Estimate::Parallel& par = e.parallel;
    par.traffic = stage_traffic(x, par.stages[static_cast<std::size_t>(par.shown)].stage);
    for (const GroupTraffic* g : {&par.traffic.tensor, &par.traffic.pipeline}) {
        if (g->sent_bytes > 0 && g->link.bytes_per_s <= 0) x.notes |= kNoteGroupWithoutLink;
    }
    if (x.par.dp > 1 && !given && links.data.bytes_per_s <= 0) x.notes |= kNoteGroupWithoutLink;
}

// FLOPs per token from the closed forms and the op plan; per step and per run.
void flops(Terms& x, Estimate& e) {
    const EstimateInputs& in = x.in;
    const double per_mb = static_cast<double>(in.micro_batch * x.T);
    e.flops_6n_per_token = formulas::training_flops_per_token_6n(x.n_total);
    if (!in.params_only) {
        e.flops_6n_non_embedding_per_token =
            formulas::training_flops_per_token_6n(static_cast<double>(e.params.non_embedding));
    }
    if (x.adapters)
        e.flops_adapters_per_token =
            formulas::adapter_training_flops_per_token(x.n_total, e.lora_params);
    e.flops_matmul_per_token = 6.0 * static_cast<double>(e.params.matmul);
    e.flops_attention_per_token = formulas::attention_flops_per_token(
        x.c.n_layers, static_cast<double>(x.T), static_cast<double>(x.c.d_model),
        in.causal_attention_flops);
    const double per_counted = static_cast<double>(x.flops_tokens);  // B T, or T (one sequence)
    e.other_flops_per_token = static_cast<double>(x.flops.other_flops) / per_counted;
    const double recompute_per_token = static_cast<double>(x.flops.recompute_flops) / per_counted;
    if (in.params_only) {
        e.flops_matmul_per_token = e.flops_6n_per_token;
        e.model_flops_per_token = e.flops_6n_per_token;  // the lecture's napkin: 6N, nothing else
    } else {
        e.model_flops_per_token = static_cast<double>(x.flops.model_flops()) / per_counted;
    }
    e.hardware_flops_per_token = e.model_flops_per_token + recompute_per_token;
    // B T G tokens per data-parallel replica (all the GPUs when T = P = 1).
    e.tokens_per_step = per_mb * static_cast<double>(in.grad_accum) * x.par.dp;
    e.model_flops_per_step = e.model_flops_per_token * e.tokens_per_step;
    e.hardware_flops_per_step = e.hardware_flops_per_token * e.tokens_per_step;
    e.run_flops_6nd = e.flops_6n_per_token * e.tokens;
    e.run_model_flops = e.model_flops_per_token * e.tokens;
    e.steps = std::ceil(e.tokens / e.tokens_per_step);
    if (e.tokens > 0 && e.tokens < e.tokens_per_step) x.notes |= kNoteRunUnderOneStep;
}

// The performance model's step (estimator/perf_model.h) over the rank's share of the states.
// With T P > 1, each of the first and the last stage (the others run the first's blocks without
// the embedding) with its own optimizer shard, data-parallel collectives, tensor and pipeline
// traffic and bubble; the slower one paces the pipeline.
void predict_time(Terms& x, Estimate& e) {
    const EstimateInputs& in = x.in;
    StepShape s;
    s.grad_accum = in.grad_accum;
    s.world = x.par.dp;
    s.zero = in.zero;
    s.offload = in.offload;
    s.optimizer = in.optimizer;
    s.grads_fp32 = in.grads_fp32;
    s.threads = in.threads;
    s.comm = &e.comm;
    s.link_bytes_per_s = in.link_bytes_per_s;
    s.overlap = in.overlap;
    if (!x.model_parallel()) {
        const auto S = static_cast<double>(x.layout.shard()),
                   P = static_cast<double>(x.layout.padded());
        s.optimizer_elements = x.z1 ? S : x.train_alloc;
        s.grad_elements = x.z2 ? S : P;
        e.step_time = predict_step_time(*x.rank_plan, s, *in.profile);
    } else {
        s.bubble_fraction = bubble_fraction(x.par);
        s.link_bytes_per_s = e.comm.link_bytes_per_s;  // --link's, or the DP group's placement
        for (const Estimate::StageSummary& st : e.parallel.stages) {
            const ShardLayout layout =
                shard_layout_flat(static_cast<std::int64_t>(st.params), x.par.dp);
            const CommunicationEstimate comm = estimate_communication(
                layout, in.zero, in.grad_accum, x.pd.grads, x.pd.weights, s.link_bytes_per_s);
            const ModelParallelTraffic traffic = stage_traffic(x, st.stage);
            s.comm = &comm;
            s.model_parallel = &traffic;
            s.layers = st.layers;
            s.first_stage = st.stage == 0;
            s.last_stage = st.stage == x.par.pp - 1;
            s.optimizer_elements = static_cast<double>(x.z1 ? layout.shard() : layout.padded());
            s.grad_elements = static_cast<double>(x.z2 ? layout.shard() : layout.padded());
            StepTime t = predict_step_time(*x.rank_plan, s, *in.profile);
            if (t.step_seconds > e.step_time.step_seconds) e.step_time = std::move(t);
        }
    }
    e.time_predicted = true;
    e.step_seconds = e.step_time.step_seconds;
    x.notes |= kNoteTimePredicted;
}

// The time at an assumed MFU (--mfu), with the pipeline bubble on top of it (Narayanan et al.
// 2021: the stages idle (P - 1) / (V M) of the ideal time), or predicted op by op.
void assumed_time(Terms& x, Estimate& e) {
    const EstimateInputs& in = x.in;
    e.mfu = in.mfu;
    e.step_seconds =
        formulas::training_seconds(e.model_flops_per_step, x.W, in.peak_flops_per_s, in.mfu);
    e.run_seconds = formulas::training_seconds(e.run_model_flops, x.W, in.peak_flops_per_s, in.mfu);
    if (x.par.pp > 1) {
        Estimate::Parallel& par = e.parallel;
        par.bubble_fraction = bubble_fraction(x.par);
        par.compute_seconds = e.step_seconds;
        par.bubble_seconds = e.step_seconds * par.bubble_fraction;
        e.step_seconds += par.bubble_seconds;
        e.run_seconds += e.run_seconds * par.bubble_fraction;
    }
}

// Time at the assumed MFU, or predicted op by op (and the bubble's share of it); what a measured
// throughput means: its MFU (PaLM appendix B), HFU and times.
void time(Terms& x, Estimate& e) {
    const EstimateInputs& in = x.in;
    e.peak_flops_per_s = in.peak_flops_per_s;
    if (in.precision == Precision::fp32) x.notes |= kNoteFp32Peak;
    if (in.measured_tokens_per_s > 0) {
        e.measured_step_seconds = e.tokens_per_step / in.measured_tokens_per_s;
        e.measured_run_seconds = e.tokens / in.measured_tokens_per_s;
    }
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
        if (x.par.pp > 1) {
            Estimate::Parallel& par = e.parallel;
            par.bubble_fraction = bubble_fraction(x.par);
            par.bubble_seconds =
                e.step_time.seconds[static_cast<std::size_t>(TimeBucket::pipeline_bubble)];
            par.compute_seconds = e.step_seconds - par.bubble_seconds;
        }
    } else {
        assumed_time(x, e);
    }
    e.tokens_per_s = e.tokens_per_step / e.step_seconds;
    e.hfu = e.mfu * e.hardware_flops_per_token / e.model_flops_per_token;
    if (in.measured_tokens_per_s > 0 && e.peak_flops_per_s > 0) {
        e.measured_mfu = formulas::mfu_from_throughput(
            in.measured_tokens_per_s, e.model_flops_per_token, x.W, e.peak_flops_per_s);
        e.measured_hfu = e.measured_mfu * e.hardware_flops_per_token / e.model_flops_per_token;
    }
}

// Every count of the op plan is a 64-bit integer: a bound on the FLOPs per token tells whether a
// micro-batch's (or one sequence's) could pass 2^64. The bound per token over-counts every term of the plan, so that no partial sum wraps:
// 8.5 per parameter (6 model FLOPs, 2 more when full recomputation reruns the forward, biases),
// 20 L T NH HD for the attention pairs (12, and up to 6 recomputed), elementwise work per layer
// and the loss's.
double flops_bound_per_token(const ModelConfig& c, std::int64_t T, std::int64_t lora_rank) {
    const ParamCounts p = count_params(c);
    const double L = c.n_layers, C = static_cast<double>(c.d_model);
    const double widths = C + static_cast<double>(c.qkv_dim() + 2 * c.d_ff + c.q_dim());
    const double lora = lora_rank > 0 ? L * static_cast<double>(lora_rank) * 4 * widths : 0.0;
    return 8.5 * (static_cast<double>(p.allocated) + lora) +
           20.0 * L * static_cast<double>(T) * static_cast<double>(c.q_dim()) + 64.0 * L * widths +
           16.0 * L * c.n_heads * static_cast<double>(T) +
           32.0 * static_cast<double>(c.padded_vocab_size);
}

constexpr double kMaxCountedFlops = 1.8e19;  // below 2^64 = 1.845e19

// The FLOPs the estimate counts: the plan's, or, where a micro-batch's could pass 2^64, those of
// one sequence (every op's FLOPs are B times one sequence's, so per token they are the same).
// Refuses a sequence whose own FLOPs could pass 2^64.
void count_flops_without_wrapping(Terms& x, const ModelConfig& c, const PlanInputs& pin,
                                  OpPlan& one_sequence) {
    const double per_token =
        flops_bound_per_token(c, pin.seq_len, pin.finetune != Finetune::full ? pin.lora_rank : 0);
    const auto T = static_cast<double>(pin.seq_len);
    x.flops = x.pt;
    x.flops_tokens = pin.micro_batch * pin.seq_len;
    if (per_token * T * static_cast<double>(pin.micro_batch) <= kMaxCountedFlops) return;
    if (per_token * T > kMaxCountedFlops) {
        char line[256];
        std::snprintf(line, sizeof line,
                      "{seq_len}: %lld tokens could need %.3g FLOPs per sequence, beyond napkin's "
                      "64-bit counts (%.3g)",
                      static_cast<long long>(pin.seq_len), per_token * T, kMaxCountedFlops);
        throw UsageError(line);
    }
    PlanInputs one = pin;
    one.micro_batch = 1;
    build_op_plan(c, one, one_sequence);
    x.flops = plan_totals(one_sequence);
    x.flops_tokens = pin.seq_len;
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

// The 3D layout's flags alone; parallel_layout checks them against the model.
static void validate_parallel(const EstimateInputs& in) {
    for (const auto& [v, flag] : {std::pair{in.tp, "{tp}"}, {in.pp, "{pp}"}, {in.vpp, "{vpp}"}}) {
        if (v < 1) {
            throw UsageError(std::string(flag) + ": must be a positive integer (got " +
                             std::to_string(v) + ")");
        }
    }
    if (in.tp * static_cast<std::int64_t>(in.pp) == 1) return;
    if (in.params_only) {
        throw UsageError(
            "{tp}/{pp}: need a model shape ({model}, {config} or {layers}, {d_model} "
            "and {heads}), not {params}");
    }
    if (in.finetune != Finetune::full) {
        throw UsageError(
            "{tp}/{pp}: napkin models 3D parallelism for full training (not {finetune} " +
            std::string(enum_name(kFinetuneNames, in.finetune)) + ")");
    }
    if (in.paged_optimizer) {
        throw UsageError(
            "{tp}/{pp}: napkin models 3D parallelism with the states on the GPUs (not "
            "{paged_optimizer})");
    }
    if (in.offload != Offload::none) {
        throw UsageError(
            "{tp}/{pp}: napkin models 3D parallelism with the states on the GPUs (not "
            "{offload} " +
            std::string(enum_name(kOffloadNames, in.offload)) + ")");
    }
    for (const LinkChoice* l : {&in.node_link, &in.network_link}) {
        if (!(l->bytes_per_s >= 0) || !std::isfinite(l->bytes_per_s)) {
            throw UsageError("{node_link}/{net_link}: a bandwidth must be finite and positive");
        }
    }
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
        positive(in.params, "{params}");
        at_most(in.params, kMaxParams, "{params}", "the largest model the solver searches");
    }
    if (in.seq_len < 0) positive(static_cast<double>(in.seq_len), "{seq_len}");
    positive(static_cast<double>(in.micro_batch), "{micro_batch}");
    positive(static_cast<double>(in.grad_accum), "{grad_accum}");
    positive(in.gpus, "{gpus}");
    positive(in.gpus_per_node, "gpus per node");
    zero_or_positive(in.tokens, "{tokens}");
    at_most(in.tokens, kMaxTokens, "{tokens}", "20 x the largest {params}");
    if (in.zero < 0 || in.zero > 3) {
        throw UsageError("{zero}: must be 0, 1, 2 or 3 (got " + std::to_string(in.zero) + ")");
    }
    // 0: the performance model predicts the time, over a device profile.
    if (!(in.mfu > 0 && in.mfu <= 1) && !(in.mfu == 0 && in.profile != nullptr)) {
        throw UsageError("{mfu}: must be in (0, 1] (got " + got(in.mfu) + ")");
    }
    if (in.finetune != Finetune::full && in.lora_rank <= 0) {
        throw UsageError("{lora_rank}: must be a positive integer (got " +
                         std::to_string(in.lora_rank) + ")");
    }
    zero_or_positive(in.peak_flops_per_s, "{peak_flops_per_s}");
    positive(in.gpu_memory_bytes, "{gpu_memory_bytes}");
    zero_or_positive(in.cpu_memory_bytes, "{cpu_memory_bytes}");
    zero_or_positive(in.measured_tokens_per_s, "{measured_tokens_per_s}");
    zero_or_positive(in.link_bytes_per_s, "{link_bytes_per_s}");
    validate_parallel(in);
    if (in.optimizer_fp32 && in.precision != Precision::bf16) {
        throw UsageError(
            "{fp32_optimizer_state}: for {precision} bf16 (the mixed-precision recipes "
            "keep fp32 states already; got {precision} " +
            std::string(enum_name(kPrecisionNames, in.precision)) + ")");
    }
    if (in.optimizer_fp32 && in.optimizer == OptimizerKind::adamw_8bit) {
        throw UsageError("{fp32_optimizer_state}: not with {optimizer} adamw-8bit");
    }
    if (in.paged_optimizer && in.offload != Offload::none) {
        throw UsageError(
            "{paged_optimizer}: not with {offload} (the state is either paged or offloaded)");
    }
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
    const PlanInputs pin = plan_inputs(in, T);
    build_op_plan(c, pin, plan_);  // checks the tensors' sizes; its FLOPs are checked below
    Terms x(in, c, plan_, T, notes);
    count_flops_without_wrapping(x, c, pin, flops_plan_);
    x.par = parallel_layout(in.gpus, in.tp, in.pp, in.vpp, in.sequence_parallel, in.grad_accum, c);
    x.rank = &c;
    x.rank_plan = &plan_;
    if (x.model_parallel()) {
        rank_config_ = tp_rank_config(c, in.tp);
        build_op_plan(rank_config_, pin, rank_plan_);
        x.rank = &rank_config_;
        x.rank_plan = &rank_plan_;
        if (c.n_layers % in.pp != 0) x.notes |= kNoteUnevenStages;
        if (in.pp > 1 && in.grad_accum < in.pp) x.notes |= kNoteFewMicroBatches;
    }
    x.rank_counts = count_params(*x.rank);
    e.seq_len = T;
    e.n_layers = c.n_layers;
    e.d_model = c.d_model;
    if (in.zero > 0 && x.par.dp == 1) x.notes |= kNoteZeroOneGpu;
    if (in.link_bytes_per_s > 0 && x.W == 1) x.notes |= kNoteLinkOneGpu;
    if (in.finetune == Finetune::qlora &&
        (in.precision == Precision::fp32 || in.precision == Precision::fp8_amp))
        x.notes |= kNoteQloraPrecision;
    if (in.offload != Offload::none && in.zero == 0 && x.W > 1) x.notes |= kNoteOffloadReplicated;

    count_parameters(x, e);
    memory(x, buffers_, e);
    communication(x, e);
    capacity(x, e);
    flops(x, e);
    time(x, e);
    e.notes = x.notes;
}

}  // namespace napkin
