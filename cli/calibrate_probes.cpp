#include "cli/calibrate_probes.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/check.h"
#include "estimator/perf_model.h"

namespace napkin::cli {

namespace {

// Probes as (C, NH, V, B, T). CPU: each width at a few token counts, GPT-2's head (V 50304) at
// small M, T 256 for attention's growth in T; the naive attention on a subset. GPU: GPT-2 and
// wider shapes at the token counts training runs use.
struct Shape {
    std::int64_t C;
    int NH;
    std::int64_t V, B, T;
    bool naive_too;
};
constexpr Shape kCpuShapes[] = {
    {64, 2, 256, 4, 64, false},    {128, 4, 256, 8, 64, true},      {128, 4, 256, 8, 256, true},
    {256, 4, 2048, 4, 128, false}, {256, 8, 2048, 16, 128, true},   {512, 8, 8192, 2, 128, false},
    {512, 8, 8192, 8, 256, false}, {768, 12, 50304, 1, 128, false}, {768, 12, 50304, 4, 64, false},
    {768, 12, 8192, 8, 128, true},
};
constexpr Shape kCpuQuick[] = {
    {64, 2, 256, 4, 64, true}, {128, 4, 256, 8, 64, false}, {256, 4, 1024, 2, 128, false}};
constexpr Shape kGpuShapes[] = {
    {256, 4, 8192, 8, 512, true},      {768, 12, 50304, 8, 1024, true},
    {768, 12, 50304, 32, 1024, false}, {1024, 16, 50304, 16, 1024, false},
    {1536, 12, 50304, 8, 1024, false}, {2048, 16, 32000, 4, 2048, true},
    {4096, 32, 32000, 2, 2048, false},
};
constexpr Shape kGpuQuick[] = {{256, 4, 8192, 8, 512, true}, {768, 12, 50304, 8, 1024, false}};

double log_mean_exp(const std::vector<double>& logs) {
    double sum = 0;
    for (double v : logs)
        sum += v;
    return std::exp(sum / static_cast<double>(logs.size()));
}

DType act_dtype(const OpPlan& plan) {
    return precision_dtypes(plan.in.precision, plan.in.optimizer, plan.in.grads_fp32).activations;
}

}  // namespace

std::string Probe::label() const {
    return "C=" + std::to_string(C) + " NH=" + std::to_string(NH) + " V=" + std::to_string(V) +
           " B=" + std::to_string(B) + " T=" + std::to_string(T) + " " +
           std::string(enum_name(kPrecisionNames, precision)) + " " +
           std::string(enum_name(kAttentionNames, attention));
}

std::vector<Probe> calibration_probes(DeviceKind device, const std::vector<Precision>& precisions,
                                      bool quick) {
    std::vector<Shape> shapes;
    if (device == DeviceKind::cuda && quick)
        shapes.assign(std::begin(kGpuQuick), std::end(kGpuQuick));
    else if (device == DeviceKind::cuda)
        shapes.assign(std::begin(kGpuShapes), std::end(kGpuShapes));
    else if (quick)
        shapes.assign(std::begin(kCpuQuick), std::end(kCpuQuick));
    else
        shapes.assign(std::begin(kCpuShapes), std::end(kCpuShapes));
    std::vector<Probe> out;
    for (Precision p : precisions) {
        for (const Shape& s : shapes) {
            out.push_back({s.C, s.NH, s.V, s.B, s.T, p, AttentionImpl::flash});
            if (s.naive_too) out.push_back({s.C, s.NH, s.V, s.B, s.T, p, AttentionImpl::naive});
        }
    }
    return out;
}

ModelConfig probe_model(const Probe& p) {
    ModelConfig c;
    c.name = "probe";
    c.n_layers = 1;
    c.d_model = p.C;
    c.n_heads = p.NH;
    c.n_kv_heads = p.NH;
    c.d_ff = 4 * p.C;
    c.vocab_size = p.V;
    c.padded_vocab_size = pad_vocab(p.V);
    c.context_length = p.T;
    return c;
}

PlanInputs probe_plan_inputs(const Probe& p) {
    PlanInputs in;
    in.micro_batch = p.B;
    in.seq_len = p.T;
    in.precision = p.precision;
    in.attention = p.attention;
    return in;
}

void SectionBuilder::gemm(DType dtype, GemmPass pass, std::int64_t m, std::int64_t n,
                          std::int64_t k, double flops, double seconds) {
    if (flops > 0 && seconds > 0)
        gemm_[{dtype, pass, m, n, k}].push_back(std::log(flops / seconds));
}

void SectionBuilder::stream(StreamOp op, DType dtype, double bytes, double seconds) {
    if (bytes > 0 && seconds > 0) stream_[{op, dtype, bytes}].push_back(std::log(bytes / seconds));
}

// The block's ops, forward and backward (each row sums the layers: one here).
void SectionBuilder::add_block(const OpPlan& plan, const ProbeMeasure& m) {
    const DType act = act_dtype(plan);
    auto seconds_of = [&](const std::string& name) {
        const auto it = m.ops.find(name);
        return it == m.ops.end() || it->second.calls <= 0 ? 0.0
                                                          : it->second.seconds / it->second.calls;
    };
    for (const PlanOp& op : plan.block) {
        const std::string name(op.name());
        const double fwd = seconds_of(name), bwd = seconds_of(name + " backward");
        const KernelCost back = [&] {
            KernelCost c = op.bwd_input;
            c += op.bwd_weight;
            return c;
        }();
        if (op.kind == OpKind::matmul) {
            const auto& s = std::get<MatmulShape>(op.shape);
            gemm(s.in, GemmPass::forward, s.M, s.N, s.K, static_cast<double>(op.fwd.flops), fwd);
            gemm(s.in, op.bwd_weight.flops > 0 ? GemmPass::backward : GemmPass::backward_input, s.M,
                 s.N, s.K, static_cast<double>(back.flops), bwd);
        } else if (op.kind == OpKind::attention) {
            const auto& s = std::get<AttentionShape>(op.shape);
            const std::int64_t bh = s.B * s.NH;
            if (fwd > 0)
                attention_[{s.impl, s.dt, Direction::forward, s.T, s.HD, bh}].push_back(
                    std::log(op.fwd.flops / fwd));
            if (bwd > 0)
                attention_[{s.impl, s.dt, Direction::backward, s.T, s.HD, bh}].push_back(
                    std::log(back.flops / bwd));
        } else if (op.kind != OpKind::cross_entropy) {
            const auto [f_op, b_op] = [&]() -> std::pair<StreamOp, StreamOp> {
                switch (op.kind) {
                    case OpKind::norm:
                        return {StreamOp::norm_forward, StreamOp::norm_backward};
                    case OpKind::activation:
                        return {StreamOp::activation_forward, StreamOp::activation_backward};
                    case OpKind::residual:
                        return {StreamOp::residual_forward, StreamOp::residual_backward};
                    case OpKind::rope:
                        return {StreamOp::rope_forward, StreamOp::rope_backward};
                    default:
                        return {StreamOp::lora_forward, StreamOp::lora_backward};
                }
            }();
            stream(f_op, act, static_cast<double>(op.fwd.bytes()), fwd);
            stream(b_op, act, static_cast<double>(back.bytes()), bwd);
        }
    }
}

void SectionBuilder::add(const OpPlan& plan, const ProbeMeasure& m) {
    NAPKIN_ASSERT(plan.n_layers == 1, "a calibration probe has one layer");
    add_block(plan, m);
    const DType act = act_dtype(plan);
    auto per_call = [&](const char* name) {
        const auto it = m.ops.find(name);
        return it == m.ops.end() || it->second.calls <= 0 ? 0.0
                                                          : it->second.seconds / it->second.calls;
    };
    const PlanOp& emb = plan.prologue.front();
    stream(StreamOp::embedding_forward, act, static_cast<double>(emb.fwd.bytes()),
           per_call("embedding"));
    stream(StreamOp::embedding_backward, act, static_cast<double>(emb.bwd_weight.bytes()),
           per_call("embedding backward"));
    const PlanOp& ln_f = plan.epilogue[0];
    stream(StreamOp::norm_forward, act, static_cast<double>(ln_f.fwd.bytes()), per_call("ln_f"));
    KernelCost lnb = ln_f.bwd_input;
    lnb += ln_f.bwd_weight;
    stream(StreamOp::norm_backward, act, static_cast<double>(lnb.bytes()),
           per_call("ln_f backward"));
    const PlanOp& head = plan.epilogue[1];
    const auto& hs = std::get<MatmulShape>(head.shape);
    const double head_flops = static_cast<double>(
        head.fwd.flops + head.bwd_input.flops + head.bwd_weight.flops + plan.epilogue[2].fwd.flops);
    gemm(hs.in, GemmPass::head, hs.M, hs.N, hs.K, head_flops,
         per_call("lm_head+loss (fused forward and backward)"));
    const PrecisionDTypes pd =
        precision_dtypes(plan.in.precision, plan.in.optimizer, plan.in.grads_fp32);
    stream(StreamOp::optimizer, act,
           optimizer_update_bytes(m.trainable_elements, plan.in.optimizer, plan.in.precision,
                                  plan.in.grads_fp32),
           per_call("optimizer"));
    stream(StreamOp::zero_grads, pd.grads, m.trainable_elements * dtype_bits(pd.grads) / 8.0,
           per_call("zero_grads"));
    stream(StreamOp::data, act, 8.0 * static_cast<double>(plan.in.micro_batch * plan.in.seq_len),
           per_call("data"));
    double in_ops = 0, calls = 0;
    for (const auto& [name, o] : m.ops) {
        in_ops += o.seconds;
        calls += o.calls;
    }
    residuals_.emplace_back(calls, std::max(0.0, m.step_seconds - in_ops));
}

ComputeSection SectionBuilder::build(int threads) const {
    ComputeSection s;
    s.threads = threads;
    for (const auto& [key, logs] : gemm_) {
        const auto& [dtype, pass, m, n, k] = key;
        auto it = std::find_if(s.gemm.begin(), s.gemm.end(), [&](const GemmTable& t) {
            return t.dtype == dtype && t.pass == pass;
        });
        if (it == s.gemm.end()) it = s.gemm.insert(s.gemm.end(), GemmTable{dtype, pass, {}});
        it->points.push_back({m, n, k, log_mean_exp(logs)});
    }
    for (const auto& [key, logs] : attention_) {
        const auto& [impl, dtype, dir, T, HD, BH] = key;
        auto it =
            std::find_if(s.attention.begin(), s.attention.end(), [&](const AttentionTable& t) {
                return t.impl == impl && t.dtype == dtype && t.direction == dir;
            });
        if (it == s.attention.end())
            it = s.attention.insert(s.attention.end(), AttentionTable{impl, dtype, true, dir, {}});
        it->points.push_back({T, HD, BH, log_mean_exp(logs)});
    }
    for (const auto& [key, logs] : stream_) {
        const auto& [op, dtype, bytes] = key;
        auto it = std::find_if(s.streaming.begin(), s.streaming.end(), [&](const StreamTable& t) {
            return t.op == op && t.dtype == dtype;
        });
        if (it == s.streaming.end())
            it = s.streaming.insert(s.streaming.end(), StreamTable{op, dtype, {}});
        it->points.push_back({bytes, log_mean_exp(logs)});  // in bytes order: the map's
    }
    if (!residuals_.empty()) {
        const LineFit f = fit_line(residuals_);
        s.overhead = {f.slope, f.intercept};
    }
    return s;
}

}  // namespace napkin::cli
