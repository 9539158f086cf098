// The performance model's arithmetic (estimator/perf_model.h; docs/ESTIMATOR.md, "Time").
#include "estimator/perf_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/check.h"
#include "kernels/attention.h"
#include "kernels/nf4.h"

namespace napkin {

namespace {

// Where a profile has no table for an op, a fraction of its section's ceilings stands in, and a
// note says so: the GEMM dtype's peak, the memory bandwidth.
constexpr double kMissingGemmEfficiency = 0.5;
constexpr double kMissingAttentionEfficiency = 0.1;
constexpr double kMissingStreamEfficiency = 0.5;

double bytes_of_dtype(DType t) {
    return dtype_bits(t) / 8.0;
}

// The profile's section for the run and the notes the lookups leave.
struct Tables {
    const DeviceProfile& profile;
    const ComputeSection& section;
    std::vector<std::string>& notes;

    void note(const std::string& s) const {
        if (std::find(notes.begin(), notes.end(), s) == notes.end()) notes.push_back(s);
    }

    // dtypes that stand in for each other, nearest first: the 16-bit pair, fp8 runs as 16-bit
    // where it is not measured, fp32 last.
    static std::vector<DType> stand_ins(DType t) {
        switch (t) {
            case DType::bf16:
                return {DType::bf16, DType::f16, DType::f32};
            case DType::f16:
                return {DType::f16, DType::bf16, DType::f32};
            case DType::f8e4m3:
            case DType::f8e5m2:
                return {t, DType::bf16, DType::f16, DType::f32};
            default:
                return {t, DType::bf16, DType::f16};
        }
    }

    const GemmTable* gemm(DType dtype, GemmPass pass) const {
        // A frozen weight's backward runs at the backward rate when it has no table of its own;
        // a backward at the forward's.
        std::vector<GemmPass> passes{pass};
        if (pass == GemmPass::backward_input) passes.push_back(GemmPass::backward);
        if (pass != GemmPass::forward && pass != GemmPass::head)
            passes.push_back(GemmPass::forward);
        for (DType d : stand_ins(dtype)) {
            for (GemmPass p : passes) {
                for (const GemmTable& t : section.gemm) {
                    if (t.dtype != d || t.pass != p) continue;
                    if (d != dtype || p != pass) {
                        note("no " + std::string(dtype_name(dtype)) + " " +
                             std::string(enum_name(kGemmPassNames, pass)) + " GEMM table: the " +
                             std::string(dtype_name(d)) + " " +
                             std::string(enum_name(kGemmPassNames, p)) + " one stands in");
                    }
                    return &t;
                }
            }
        }
        return nullptr;
    }

    // The MFU basis for `dtype`, else fp32's, else the profile's largest (the reader requires
    // one): what a missing table's default efficiency multiplies.
    double peak(DType dtype) const {
        if (profile.peak_for(dtype) > 0) return profile.peak_for(dtype);
        if (profile.peak_for(DType::f32) > 0) return profile.peak_for(DType::f32);
        double most = 0;
        for (const auto& entry : profile.peak_flops_per_s)
            most = std::max(most, entry.second);
        NAPKIN_ASSERT(most > 0, "a device profile without a peak");
        return most;
    }

    double gemm_seconds(DType dtype, GemmPass pass, std::int64_t m, std::int64_t n, std::int64_t k,
                        double flops) const {
        if (flops <= 0) return 0;
        if (const GemmTable* t = gemm(dtype, pass)) return flops / t->flops_per_s(m, n, k);
        note("no GEMM table: " + std::to_string(static_cast<int>(100 * kMissingGemmEfficiency)) +
             "% of the peak stands in");
        return flops / (kMissingGemmEfficiency * peak(dtype));
    }

    double attention_seconds(const AttentionShape& s, Direction dir) const {
        for (DType d : stand_ins(s.dt)) {
            for (const AttentionTable& t : section.attention) {
                if (t.impl != s.impl || t.dtype != d || t.direction != dir) continue;
                if (d != s.dt) {
                    note("no " + std::string(dtype_name(s.dt)) + " attention table: the " +
                         std::string(dtype_name(d)) + " one stands in");
                }
                // The table's rate counts FLOPs by its own mask convention.
                AttentionShape counted = s;
                counted.causal = t.causal;
                const double flops = static_cast<double>(
                    dir == Direction::forward ? attention_forward_cost(counted).flops
                                              : attention_backward_cost(counted).flops);
                return flops / t.flops_per_s(s.T, s.HD, s.B * s.NH);
            }
        }
        note("no " + std::string(enum_name(kAttentionNames, s.impl)) + " attention table: " +
             std::to_string(static_cast<int>(100 * kMissingAttentionEfficiency)) +
             "% of the peak stands in");
        const double flops =
            static_cast<double>(dir == Direction::forward ? attention_forward_cost(s).flops
                                                          : attention_backward_cost(s).flops);
        return flops / (kMissingAttentionEfficiency * peak(s.dt));
    }

    double stream_seconds(StreamOp op, DType dtype, double bytes) const {
        if (bytes <= 0) return 0;
        for (DType d : stand_ins(dtype)) {
            for (const StreamTable& t : section.streaming) {
                if (t.op == op && t.dtype == d) return bytes / t.bytes_per_s(bytes);
            }
        }
        for (const StreamTable& t : section.streaming) {  // another dtype's, quietly: bytes scale
            if (t.op == op) return bytes / t.bytes_per_s(bytes);
        }
        note("no " + std::string(enum_name(kStreamOpNames, op)) +
             " table: " + std::to_string(static_cast<int>(100 * kMissingStreamEfficiency)) +
             "% of the memory bandwidth stands in");
        return bytes / (kMissingStreamEfficiency * profile.memory_bytes_per_s);
    }
};

StreamOp stream_op(OpKind kind, Direction dir) {
    const bool fwd = dir == Direction::forward;
    switch (kind) {
        case OpKind::embedding:
            return fwd ? StreamOp::embedding_forward : StreamOp::embedding_backward;
        case OpKind::norm:
            return fwd ? StreamOp::norm_forward : StreamOp::norm_backward;
        case OpKind::rope:
            return fwd ? StreamOp::rope_forward : StreamOp::rope_backward;
        case OpKind::activation:
            return fwd ? StreamOp::activation_forward : StreamOp::activation_backward;
        case OpKind::residual:
            return fwd ? StreamOp::residual_forward : StreamOp::residual_backward;
        case OpKind::lora:
            return fwd ? StreamOp::lora_forward : StreamOp::lora_backward;
        default:
            break;
    }
    NAPKIN_ASSERT(false, "op kind " << static_cast<int>(kind) << " is not a streaming op");
    return StreamOp::residual_forward;
}

// One op of the plan, one call: its time and bucket.
struct OpCall {
    double seconds = 0;
    TimeBucket bucket = TimeBucket::memory_bound;
};

// QLoRA widens a frozen NF4 weight before each of its GEMMs: the codes read, the values written.
double dequantize_seconds(const Tables& t, const MatmulShape& s, DType act) {
    if (s.weight != DType::nf4) return 0;
    return t.stream_seconds(
        StreamOp::dequantize, act,
        static_cast<double>(nf4_storage_bytes(s.N * s.K) + nbytes(act, s.N * s.K)));
}

OpCall forward_call(const Tables& t, const PlanOp& op, DType act) {
    switch (op.kind) {
        case OpKind::matmul: {
            const auto& s = std::get<MatmulShape>(op.shape);
            double sec = t.gemm_seconds(s.in, GemmPass::forward, s.M, s.N, s.K,
                                        static_cast<double>(op.fwd.flops));
            return {sec + dequantize_seconds(t, s, act), TimeBucket::gemm};
        }
        case OpKind::attention:
            return {t.attention_seconds(std::get<AttentionShape>(op.shape), Direction::forward),
                    TimeBucket::attention};
        case OpKind::cross_entropy:
            return {0, TimeBucket::gemm};  // with the head (epilogue)
        default:
            return {t.stream_seconds(stream_op(op.kind, Direction::forward), act,
                                     static_cast<double>(op.fwd.bytes())),
                    TimeBucket::memory_bound};
    }
}

OpCall backward_call(const Tables& t, const PlanOp& op, DType act) {
    const KernelCost& in = op.bwd_input;
    const KernelCost& w = op.bwd_weight;
    switch (op.kind) {
        case OpKind::matmul: {
            const auto& s = std::get<MatmulShape>(op.shape);
            const bool trained = w.flops > 0;
            double sec =
                t.gemm_seconds(s.in, trained ? GemmPass::backward : GemmPass::backward_input, s.M,
                               s.N, s.K, static_cast<double>(in.flops + w.flops));
            return {sec + dequantize_seconds(t, s, act), TimeBucket::gemm};
        }
        case OpKind::attention:
            return {t.attention_seconds(std::get<AttentionShape>(op.shape), Direction::backward),
                    TimeBucket::attention};
        case OpKind::cross_entropy:
            return {0, TimeBucket::gemm};
        default:
            return {t.stream_seconds(stream_op(op.kind, Direction::backward), act,
                                     static_cast<double>(in.bytes() + w.bytes())),
                    TimeBucket::memory_bound};
    }
}

// What the engine rebuilds of a block in its backward (gpt_impl.h block_forward(l, true)):
// under full checkpointing every op but those whose kept tensors all stay; under selective the
// attention core, for its probabilities.
bool recomputed(const PlanOp& op, Checkpointing ckpt) {
    if (ckpt == Checkpointing::none) return false;
    bool rebuilds = ckpt == Checkpointing::full && op.n_saved == 0;
    for (int i = 0; i < op.n_saved; ++i)
        rebuilds |= op.saved[static_cast<std::size_t>(i)].recomputed;
    return rebuilds;
}

// The step's rows, added in order, and the sums of its phases.
class Rows {
public:
    explicit Rows(StepTime& out) : out_(out) {}
    void add(std::string name, TimeBucket bucket, double calls, double seconds_per_call,
             double flops_per_call, double bytes_per_call) {
        if (calls <= 0) return;
        out_.ops.push_back({std::move(name), bucket, calls, calls * seconds_per_call,
                            calls * flops_per_call, calls * bytes_per_call});
        op_calls_ += bucket == TimeBucket::communication ? 0 : calls;
    }
    double op_calls() const { return op_calls_; }

private:
    StepTime& out_;
    double op_calls_ = 0;
};

// The blocks a rank runs: its pipeline stage's, or all of the plan's.
double rank_layers(const OpPlan& plan, const StepShape& s) {
    return static_cast<double>(s.layers > 0 ? s.layers : plan.n_layers);
}

// Forward, recomputation and backward of one micro-batch, times G, of the stage's blocks (the
// embedding on the first stage, the head and the loss on the last); returns the seconds of the
// forward and of the backward (recomputation included) of all G, for the overlap and the bubble.
std::pair<double, double> add_micro_batches(const Tables& t, const OpPlan& plan, const StepShape& s,
                                            Rows& rows) {
    const DType act =
        precision_dtypes(plan.in.precision, plan.in.optimizer, plan.in.grads_fp32).activations;
    const auto G = static_cast<double>(s.grad_accum);
    const double L = rank_layers(plan, s);
    const double first = s.first_stage ? 1 : 0, last = s.last_stage ? 1 : 0;
    double fwd = 0, bwd = 0;
    auto add = [&](std::string name, double calls, OpCall c, const KernelCost& cost, bool forward) {
        rows.add(std::move(name), c.bucket, calls, c.seconds, static_cast<double>(cost.flops),
                 static_cast<double>(cost.bytes()));
        (forward ? fwd : bwd) += calls * c.seconds;
    };
    const PlanOp& emb = plan.prologue.front();
    add("embedding", G * first, forward_call(t, emb, act), emb.fwd, true);
    for (const PlanOp& op : plan.block)
        add(std::string(op.name()), G * L, forward_call(t, op, act), op.fwd, true);
    const PlanOp& ln_f = plan.epilogue[0];
    add("ln_f", G * last, forward_call(t, ln_f, act), ln_f.fwd, true);
    // The head and the loss run fused, forward and backward, chunk by chunk: one op.
    const PlanOp& head = plan.epilogue[1];
    KernelCost hc = head.fwd;
    hc += head.bwd_input;
    hc += head.bwd_weight;
    hc += plan.epilogue[2].fwd;
    const auto& hs = std::get<MatmulShape>(head.shape);
    add("lm_head+loss (fused forward and backward)", G * last,
        {t.gemm_seconds(hs.in, GemmPass::head, hs.M, hs.N, hs.K, static_cast<double>(hc.flops)),
         TimeBucket::gemm},
        hc, false);
    KernelCost lnb = ln_f.bwd_input;
    lnb += ln_f.bwd_weight;
    add("ln_f backward", G * last, backward_call(t, ln_f, act), lnb, false);
    for (auto it = plan.block.rbegin(); it != plan.block.rend(); ++it) {
        const PlanOp& op = *it;
        if (recomputed(op, plan.in.checkpointing))
            add(std::string(op.name()) + " (recompute)", G * L, forward_call(t, op, act), op.fwd,
                false);
    }
    for (auto it = plan.block.rbegin(); it != plan.block.rend(); ++it) {
        KernelCost c = it->bwd_input;
        c += it->bwd_weight;
        add(std::string(it->name()) + " backward", G * L, backward_call(t, *it, act), c, false);
    }
    if (emb.bwd_weight.bytes() > 0)
        add("embedding backward", G * first, backward_call(t, emb, act), emb.bwd_weight, false);
    return {fwd, bwd};
}

// The collectives' seconds: the profile's measured fit for (op, W), else the link's ring
// bandwidth with no latency; 0 with neither (a note says so).
double collective_seconds(const Tables& t, const CommLine& line, int world,
                          double link_bytes_per_s) {
    if (const CollectiveTable* c = t.profile.collective(line.op, world))
        return line.calls * c->latency_seconds + line.sent_bytes / c->bytes_per_s;
    if (link_bytes_per_s > 0) return line.sent_bytes / link_bytes_per_s;
    t.note("no link and no measured collectives for " + std::to_string(world) +
           " ranks: communication is not timed ({link})");
    return 0;
}

// Each data-parallel collective line, and the part of them the step waits for.
void add_data_parallel(const Tables& t, const OpPlan& plan, const StepShape& s, double fwd,
                       double bwd, Rows& rows, StepTime& out) {
    if (s.comm == nullptr || s.world <= 1) return;
    double grads = 0, gathers = 0, after_step = 0;
    for (const CommLine& line : s.comm->lines) {
        const double sec = collective_seconds(t, line, s.world, s.link_bytes_per_s);
        rows.add(std::string(enum_name(kCollectiveNames, line.op)) + " " + line.what,
                 TimeBucket::communication, line.calls, line.calls > 0 ? sec / line.calls : 0, 0,
                 line.calls > 0 ? line.sent_bytes / line.calls : 0);
        if (line.what == "gradients")
            grads += sec;
        else if (s.zero >= 3)
            gathers += sec;
        else
            after_step += sec;
    }
    const double all = grads + gathers + after_step;
    double exposed = all;
    if (s.overlap == Overlap::on) {
        // A unit's gradient collective runs beside the backward of the units before it: the last
        // unit's is exposed, and what the backward cannot hide. ZeRO 0-1 reduce in the last
        // micro-batch only. ZeRO-3's gathers are prefetched a region ahead: the first is
        // exposed, and what the passes cannot hide.
        const double units = rank_layers(plan, s) + 2.0;
        const double hiding_bwd = s.zero >= 2 ? bwd : bwd / static_cast<double>(s.grad_accum);
        const double exposed_grads = std::max(grads / units, grads - hiding_bwd);
        const double exposed_gathers = std::max(gathers / (2 * units), gathers - (fwd + bwd));
        // Both share the rank's one link: together they hide behind the passes at most once.
        exposed =
            std::max(exposed_grads + exposed_gathers, grads + gathers - (fwd + bwd)) + after_step;
    }
    out.comm_seconds += all;
    out.comm_exposed_seconds += exposed;
}

// The tensor- and pipeline-parallel lines, each over its group's link (bytes sent / bandwidth,
// parallel.h's ring volumes), all exposed: Megatron-LM's tensor-parallel collectives sit between
// a layer's GEMMs, and a stage waits for its neighbour's activations and gradients.
void add_model_parallel(const Tables& t, const StepShape& s, Rows& rows, StepTime& out) {
    if (s.model_parallel == nullptr) return;
    for (const GroupTraffic* g : {&s.model_parallel->tensor, &s.model_parallel->pipeline}) {
        if (g->sent_bytes > 0 && g->link.bytes_per_s <= 0)
            t.note("no link for the " + g->group + " group: its traffic is not timed");
        for (const GroupLine& line : g->lines) {
            const double sec = g->link.bytes_per_s > 0 ? line.sent_bytes / g->link.bytes_per_s : 0;
            rows.add(g->group + " " + line.op + " " + line.what, TimeBucket::communication,
                     line.calls, line.calls > 0 ? sec / line.calls : 0, 0,
                     line.calls > 0 ? line.sent_bytes / line.calls : 0);
            out.comm_seconds += sec;
            out.comm_exposed_seconds += sec;
        }
    }
}

// The optimizer step: on the device (bytes of the update at the optimizer's bandwidth), or
// offloaded: the gradient shard to the host, the update there, the new weights back.
void add_optimizer(const Tables& t, const OpPlan& plan, const StepShape& s, Rows& rows) {
    const PrecisionDTypes pd = precision_dtypes(plan.in.precision, s.optimizer, s.grads_fp32);
    const double bytes =
        optimizer_update_bytes(s.optimizer_elements, s.optimizer, plan.in.precision, s.grads_fp32);
    if (s.offload == Offload::none) {
        rows.add("optimizer", TimeBucket::optimizer, 1,
                 t.stream_seconds(StreamOp::optimizer, pd.activations, bytes), 0, bytes);
        return;
    }
    const HostDeviceCopy copy = t.profile.host_device.value_or(HostDeviceCopy{});
    if (!t.profile.host_device)
        t.note("no host-device copy rates: offload transfers are not timed");
    const double down = s.optimizer_elements * bytes_of_dtype(pd.grads);
    const double up = s.optimizer_elements * bytes_of_dtype(pd.weights);
    double sec = 0;
    if (copy.to_host_bytes_per_s > 0)
        sec += down / copy.to_host_bytes_per_s + up / copy.to_device_bytes_per_s;
    if (copy.host_optimizer_bytes_per_s > 0) sec += bytes / copy.host_optimizer_bytes_per_s;
    rows.add("optimizer", TimeBucket::optimizer, 1, sec, 0, bytes + down + up);
}

}  // namespace

double optimizer_update_bytes(double elements, OptimizerKind opt, Precision precision,
                              bool grads_fp32) {
    const PrecisionDTypes pd = precision_dtypes(precision, opt, grads_fp32);
    double state = optimizer_state_count(opt) * bytes_of_dtype(pd.optimizer_state);
    if (pd.optimizer_state == DType::i8)
        state += optimizer_state_count(opt) * 4.0 / static_cast<double>(kOptimizer8bitBlock);
    const double grad = bytes_of_dtype(pd.grads), weight = bytes_of_dtype(pd.weights);
    const double read = 2 * grad + state + (pd.has_master ? 4.0 : weight);
    const double written = state + weight + (pd.has_master ? 4.0 : 0.0);
    return elements * (read + written);
}

StepTime predict_step_time(const OpPlan& plan, const StepShape& s, const DeviceProfile& profile) {
    StepTime out;
    const ComputeSection* section = profile.section(s.threads);
    if (section == nullptr) throw UsageError("the device profile has no compute section");
    const Tables t{profile, *section, out.notes};
    if (s.threads > 0 && section->threads != s.threads) {
        t.note("no section for " + std::to_string(s.threads) + " threads: the " +
               std::to_string(section->threads) + "-thread one stands in");
    }
    Rows rows(out);
    const auto G = static_cast<double>(s.grad_accum);
    const PrecisionDTypes pd = precision_dtypes(plan.in.precision, s.optimizer, s.grads_fp32);
    // Every rank reads all W G micro-batches of the global batch (core/engine/trainer.cpp).
    const double batch_bytes = 8.0 * static_cast<double>(plan.in.micro_batch * plan.in.seq_len);
    rows.add("data", TimeBucket::overhead, G * s.world,
             t.stream_seconds(StreamOp::data, pd.activations, batch_bytes), 0, batch_bytes);
    const double grad_bytes = s.grad_elements * bytes_of_dtype(pd.grads);
    rows.add("zero_grads", TimeBucket::memory_bound, 1,
             t.stream_seconds(StreamOp::zero_grads, pd.grads, grad_bytes), 0, grad_bytes);
    const auto [fwd, bwd] = add_micro_batches(t, plan, s, rows);
    add_optimizer(t, plan, s, rows);
    add_data_parallel(t, plan, s, fwd, bwd, rows, out);
    add_model_parallel(t, s, rows, out);
    out.seconds[static_cast<std::size_t>(TimeBucket::pipeline_bubble)] =
        s.bubble_fraction * (fwd + bwd);
    for (const OpTime& op : out.ops) {
        if (op.bucket != TimeBucket::communication)
            out.seconds[static_cast<std::size_t>(op.bucket)] += op.seconds_per_step;
    }
    out.seconds[static_cast<std::size_t>(TimeBucket::communication)] = out.comm_exposed_seconds;
    out.seconds[static_cast<std::size_t>(TimeBucket::overhead)] +=
        rows.op_calls() * section->overhead.op_seconds + section->overhead.step_seconds;
    for (double v : out.seconds)
        out.step_seconds += v;
    return out;
}

}  // namespace napkin
