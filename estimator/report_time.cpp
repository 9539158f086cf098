// The performance model in napkin estimate's output: the predicted step, tokens/s and MFU, where
// the time goes, the slowest ops, and the same in JSON (docs/ESTIMATOR.md, "JSON output").
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "estimator/report.h"

namespace napkin {

namespace {

std::string percent(double part, double whole) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%5.1f%%", whole > 0 ? 100 * part / whole : 0.0);
    return buf;
}

constexpr const char* kBucketLabels[kTimeBucketCount] = {
    "GEMMs",         "attention", "memory-bound ops", "optimizer",
    "communication", "overhead",  "pipeline bubble"};

}  // namespace

std::string format_time_model(const EstimateInputs& in, const Estimate& e,
                              const ReportContext& ctx) {
    const StepTime& st = e.step_time;
    std::ostringstream os;
    char line[256];
    os << "\ntime, predicted op by op (" << ctx.profile << ")\n";
    std::snprintf(line, sizeof line, "  step %s, %.0f tokens/s on %d x %s",
                  fmt_duration(e.step_seconds).c_str(), e.tokens_per_s, in.gpus, ctx.gpu.c_str());
    os << line;
    if (e.mfu > 0) {
        std::snprintf(line, sizeof line, ", MFU %.1f%% (HFU %.1f%%) of %.1f TFLOP/s", 100 * e.mfu,
                      100 * e.hfu, e.peak_flops_per_s / 1e12);
        os << line;
    }
    os << "\n  run " << fmt_duration(e.run_seconds) << " (" << fmt_count(e.steps) << " steps)\n";
    os << "  where a step's time goes (per rank):\n";
    for (std::size_t b = 0; b < kTimeBucketCount; ++b) {
        // No pipeline, no bubble: its line only where there is one.
        if (static_cast<TimeBucket>(b) == TimeBucket::pipeline_bubble && st.seconds[b] == 0)
            continue;
        std::snprintf(line, sizeof line, "    %-18s %12s %s", kBucketLabels[b],
                      fmt_duration(st.seconds[b]).c_str(),
                      percent(st.seconds[b], e.step_seconds).c_str());
        os << line;
        if (static_cast<TimeBucket>(b) == TimeBucket::communication && st.comm_seconds > 0)
            os << "  exposed, of " << fmt_duration(st.comm_seconds) << " ({overlap} "
               << enum_name(kOverlapNames, in.overlap) << ")";
        os << "\n";
    }
    std::vector<const OpTime*> ops;
    for (const OpTime& op : st.ops)
        ops.push_back(&op);
    std::stable_sort(ops.begin(), ops.end(), [](const OpTime* a, const OpTime* b) {
        return a->seconds_per_step > b->seconds_per_step;
    });
    os << "  slowest ops per step:";
    for (std::size_t i = 0; i < ops.size() && i < 5; ++i)
        os << (i ? ", " : " ") << ops[i]->name << " " << fmt_duration(ops[i]->seconds_per_step);
    os << "\n";
    if (in.measured_tokens_per_s > 0 && e.measured_mfu > 0) {
        std::snprintf(line, sizeof line, "  measured %.0f tokens/s means MFU %.3f\n",
                      in.measured_tokens_per_s, e.measured_mfu);
        os << line;
    }
    for (const std::string& n : st.notes)
        os << "  (" << n << ")\n";
    return os.str();
}

void add_time_model_json(const Estimate& e, const ReportContext& ctx, nlohmann::json& time) {
    using nlohmann::json;
    time["tokens_per_s"] = e.tokens_per_s > 0 ? json(e.tokens_per_s) : json(nullptr);
    if (!e.time_predicted) {
        time["model"] = nullptr;
        return;
    }
    const StepTime& st = e.step_time;
    json buckets = json::object();
    for (std::size_t b = 0; b < kTimeBucketCount; ++b)
        buckets[std::string(kTimeBucketNames[b].name)] = st.seconds[b];
    json ops = json::array();
    for (const OpTime& op : st.ops) {
        ops.push_back({{"name", op.name},
                       {"bucket", enum_name(kTimeBucketNames, op.bucket)},
                       {"calls_per_step", op.calls_per_step},
                       {"seconds_per_step", op.seconds_per_step},
                       {"flops_per_step", op.flops_per_step},
                       {"bytes_per_step", op.bytes_per_step}});
    }
    time["model"] = {{"profile", ctx.profile},
                     {"step_seconds", st.step_seconds},
                     {"seconds", buckets},
                     {"communication_seconds", st.comm_seconds},
                     {"communication_exposed_seconds", st.comm_exposed_seconds},
                     {"ops", ops},
                     {"notes", st.notes}};
}

namespace {

// snprintf into a string: the solve table's columns (a line is well under 256 characters).
template <class... Args>
std::string formatted(const char* fmt, Args... args) {
    char line[256];
    std::snprintf(line, sizeof line, fmt, args...);
    return line;
}

// One candidate's columns after the recipe's: rate, step, MFU and memory.
std::string candidate_speed(const SolveCandidate& c, double gpu_capacity_bytes) {
    return formatted("%12.0f %10s %6.1f%% %9.2f GB %3.0f%%\n", c.tokens_per_s,
                     fmt_duration(c.step_seconds).c_str(), 100 * c.mfu, c.gpu_bytes / 1e9,
                     gpu_capacity_bytes > 0 ? 100 * c.gpu_bytes / gpu_capacity_bytes : 0.0);
}

}  // namespace

std::string format_fastest(const SolveResult& solved, double gpu_capacity_bytes, bool layout) {
    std::ostringstream os;
    const char* kind = layout ? "fastest-layout" : "fastest";
    if (solved.candidates.empty()) {
        os << "\nsolve " << kind << ": nothing fits (" << solved.evaluations << " estimates)\n";
        return os.str();
    }
    os << "\nsolve " << kind << ": the highest predicted tokens/s that fits (" << solved.evaluations
       << " estimates)\n";
    const std::string speed_header =
        formatted(" %12s %10s %7s %16s\n", "tokens/s", "step", "MFU", "memory per GPU");
    if (layout) {
        os << formatted("  %3s %3s %3s %5s %6s %5s %-10s %5s", "TP", "PP", "VPP", "DP", "M", "B",
                        "ckpt", "ZeRO")
           << speed_header;
    } else {
        os << formatted("  %-9s %7s %-10s %-6s %5s", "precision", "B", "ckpt", "attn", "ZeRO")
           << speed_header;
    }
    for (const SolveCandidate& c : solved.candidates) {
        const std::string ckpt(enum_name(kCheckpointingNames, c.checkpointing));
        if (layout) {
            os << formatted("  %3d %3d %3d %5d %6lld %5lld %-10s %5d ", c.tp, c.pp, c.vpp, c.dp,
                            static_cast<long long>(c.micro_batches),
                            static_cast<long long>(c.micro_batch), ckpt.c_str(), c.zero);
        } else {
            os << formatted("  %-9s %7lld %-10s %-6s %5d ",
                            std::string(enum_name(kPrecisionNames, c.precision)).c_str(),
                            static_cast<long long>(c.micro_batch), ckpt.c_str(),
                            std::string(enum_name(kAttentionNames, c.attention)).c_str(), c.zero);
        }
        os << candidate_speed(c, gpu_capacity_bytes);
    }
    os << "  (the estimate above is the first)\n";
    return os.str();
}

nlohmann::json fastest_json(const SolveResult& solved, bool layout) {
    nlohmann::json out = nlohmann::json::array();
    for (const SolveCandidate& c : solved.candidates) {
        nlohmann::json j = {{"precision", enum_name(kPrecisionNames, c.precision)},
                            {"micro_batch", c.micro_batch},
                            {"checkpointing", enum_name(kCheckpointingNames, c.checkpointing)},
                            {"attention", enum_name(kAttentionNames, c.attention)},
                            {"zero", c.zero},
                            {"tokens_per_s", c.tokens_per_s},
                            {"step_seconds", c.step_seconds},
                            {"mfu", c.mfu},
                            {"gpu_bytes", c.gpu_bytes}};
        if (layout) {
            j["tp"] = c.tp;
            j["pp"] = c.pp;
            j["vpp"] = c.vpp;
            j["dp"] = c.dp;
            j["micro_batches"] = c.micro_batches;
            j["sequence_parallel"] = c.tp > 1;
        }
        out.push_back(std::move(j));
    }
    return out;
}

}  // namespace napkin
