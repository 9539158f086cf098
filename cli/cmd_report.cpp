// napkin report RUN_DIR...: predicted against measured for one or several training runs, side
// by side in the terminal (or as JSON): memory by category, the closed-form numbers beside the
// detailed ones, step time against the roofline, tokens/s, MFU and HFU, and for profiled runs
// the ops that took the time. A data-parallel run (mpirun -n W napkin train --zero S) is read
// rank by rank (RUN_DIR, RUN_DIR/rank<r>): its column shows rank 0, and a table per run shows
// every rank's memory, bytes communicated, step time, tokens/s and time in collectives.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/report_generate.h"
#include "cli/timing.h"
#include "core/check.h"
#include "profiler/run_folder.h"

namespace napkin::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using profiler::RankReport;
using profiler::StepReport;

struct ReportFlags {
    std::vector<std::string> runs;
    int top = 12;
    int warmup = 0;
    bool json = false;
};

// Memory categories as report.json names them, in the order the table shows them: the
// estimator's six (MemCategory order), `data` (predicted in reports written since the estimator
// counts the token batches), then `communication`, measured only (the estimator has no category
// of its own for ZeRO's buckets and gathered units).
constexpr const char* kCategories[] = {"parameters",      "master_weights", "gradients",
                                       "optimizer_state", "activations",    "temporaries"};
constexpr const char* kData = "data";
constexpr const char* kCommunication = "communication";

template <class T>
json or_null(const std::optional<T>& v) {
    return v ? json(*v) : json();
}

// Why napkin train stopped the run before its last step, when it did ("" otherwise): "step 8:
// the gradients were not finite", "step 2: --detect-anomaly found NaN or inf (forward of
// attn.qkv, block 0)". Steps counted from 1, as napkin train's lines.
std::string stop_reason(const profiler::RunReport& r) {
    if (r.diverged)
        return "step " + std::to_string(r.diverged->step + 1) + ": the gradients were not finite";
    if (!r.anomaly) return "";
    const profiler::AnomalyReport& a = *r.anomaly;
    return "step " + std::to_string(a.step + 1) + ": --detect-anomaly found NaN or inf (" +
           a.direction + " of " + a.op +
           (a.layer ? ", block " + std::to_string(*a.layer) : std::string()) + ")";
}

// A number of every step after the first `warmup` (UsageError when none is left; InputError
// when the run stopped in its first step and has none).
std::vector<double> step_numbers(const RankReport& run, int warmup,
                                 double (*number)(const StepReport&)) {
    const std::vector<StepReport>& steps = run.report.steps;
    if (steps.empty()) {
        throw InputError(run.file.string() + ": no step finished (" + stop_reason(run.report) +
                         ")");
    }
    if (static_cast<std::size_t>(warmup) >= steps.size()) {
        throw UsageError("--warmup " + std::to_string(warmup) + ": leaves no step of " +
                         run.file.string() + " (" + std::to_string(steps.size()) + " steps)");
    }
    std::vector<double> v;
    for (std::size_t i = static_cast<std::size_t>(warmup); i < steps.size(); ++i)
        v.push_back(number(steps[i]));
    return v;
}
double step_seconds(const StepReport& s) {
    return s.seconds;
}
double step_tokens_per_s(const StepReport& s) {
    return s.tokens_per_s;
}
double step_mfu(const StepReport& s) {
    return s.mfu;
}

// Predicted and measured bytes of each category, as the table and --json's `memory` show them.
json memory_summary(const profiler::RunReport& r) {
    json m;
    for (std::size_t c = 0; c < std::size(kCategories); ++c) {
        m[kCategories[c]] = {{"predicted", r.predicted.bytes[c]},
                             {"measured", static_cast<double>(*r.measured.peak_bytes[c])}};
    }
    m[kData] = {
        {"predicted", or_null(r.predicted.data)},
        {"measured", or_null(r.measured.peak_bytes[static_cast<std::size_t>(MemCategory::data)])}};
    return m;
}

// The run's recipe: model, device, precision, ... and the ranks.
void summarize_settings(const RankReport& run, json& s) {
    const profiler::RunReport& r = run.report;
    s["dir"] = run.dir.string();
    s["label"] = run.label;
    s["model"] = r.model.name;
    s["n_layers"] = static_cast<std::int64_t>(r.model.n_layers);
    s["d_model"] = r.model.d_model;
    s["device"] = r.run.device;
    s["precision"] = r.run.precision;
    s["fp8_amax_history"] = or_null(r.run.fp8_amax_history);  // fp8-amp's; null otherwise
    s["optimizer"] = r.run.optimizer;
    s["checkpointing"] = r.run.checkpointing;
    s["attention"] = r.run.attention;
    s["micro_batch"] = r.run.micro_batch;
    s["seq_len"] = r.run.seq_len;
    s["grad_accum"] = static_cast<std::int64_t>(r.run.grad_accum);
    s["steps"] = static_cast<std::int64_t>(r.run.steps);
    const std::string stopped = stop_reason(r);
    s["stopped"] = stopped.empty() ? json() : json(stopped);
    s["finetune"] = r.run.finetune == "full"
                        ? r.run.finetune
                        : r.run.finetune + " r" + std::to_string(*r.run.lora_rank);
    // Data parallelism (napkin train --zero under mpirun): this rank's share and its traffic.
    const auto& comm = r.communication;
    s["world"] = comm ? comm->world : 1;
    s["zero"] = comm ? json(comm->zero) : json();
    s["comm_sent_predicted"] = comm ? json(comm->predicted_per_step.sent_bytes) : json();
    s["comm_sent_measured"] =
        comm ? json(static_cast<double>(comm->measured_per_step.state_sent_bytes)) : json();
}

// Predicted against measured memory, and the closed forms beside the detailed prediction.
void summarize_memory(const profiler::RunReport& r, json& s) {
    s["memory"] = memory_summary(r);
    s["peak_total_bytes"] = static_cast<double>(r.measured.peak_total_bytes);
    // --offload optimizer: the model states in host memory (absent otherwise).
    s["host_memory"] = nullptr;
    if (const auto& p = r.predicted.host_memory) {
        const auto& m = r.measured.host_peak_bytes;  // there whenever the prediction is
        auto pair = [](double predicted, std::int64_t measured) {
            return json{{"predicted", predicted}, {"measured", static_cast<double>(measured)}};
        };
        s["host_memory"] = {{"master_weights", pair(p->master_weights, m->master_weights)},
                            {"gradients", pair(p->gradients, m->gradients)},
                            {"optimizer_state", pair(p->optimizer_state, m->optimizer_state)}};
    }
    // --paged-optimizer: the state in managed memory and its page traffic (absent otherwise).
    if (const auto& p = r.predicted.paged_optimizer) {
        const auto& m = r.measured.paged_optimizer;  // there whenever the prediction is
        auto pair = [](double predicted, std::optional<double> measured) {
            return json{{"predicted", predicted},
                        {"measured", measured ? json(*measured) : json()}};
        };
        const auto measured = [&](auto field) {
            return m ? std::optional<double>(static_cast<double>((*m).*field)) : std::nullopt;
        };
        s["paged_optimizer"] = {
            {"state", pair(p->state_bytes, measured(&profiler::PagedMeasurement::state_bytes))},
            {"to_device_per_step",
             pair(p->traffic_bytes_per_step / 2,
                  measured(&profiler::PagedMeasurement::to_device_bytes_per_step))},
            {"to_host_per_step",
             pair(p->traffic_bytes_per_step / 2,
                  measured(&profiler::PagedMeasurement::to_host_bytes_per_step))},
            {"seconds_per_step",
             pair(p->traffic_seconds_per_step,
                  measured(&profiler::PagedMeasurement::traffic_seconds_per_step))}};
    }
    const auto& cf = r.predicted.closed_form;
    s["closed_form"] = {{"model_state_bytes", cf ? json(cf->model_state_bytes) : json()},
                        {"bytes_per_param", cf ? json(cf->bytes_per_param) : json()},
                        {"activations", cf ? json(cf->activations) : json()},
                        {"model_flops_per_step", cf ? json(cf->model_flops_per_step) : json()}};
    s["model_flops_per_step"] = r.predicted.model_flops_per_step;
}

// Time, throughput and MFU: the whole run's and the median step's after `warmup`.
void summarize_time(const RankReport& run, int warmup, json& s) {
    const profiler::RunReport& r = run.report;
    s["step_seconds_median"] = median(step_numbers(run, warmup, step_seconds));
    s["loss_first"] = r.steps.front().loss;
    s["loss_last"] = r.steps.back().loss;
    s["tokens_per_s"] = r.measured.tokens_per_s;
    s["mfu"] = r.measured.mfu;
    // The whole run's MFU counts the first step's one-time costs (cuBLASLt's heuristics, the
    // caching allocator's first allocations, CUPTI's start): on a short run it is far below the
    // steady state, which the median step's gives.
    s["mfu_median"] = median(step_numbers(run, warmup, step_mfu));
    s["hfu"] = or_null(r.measured.hfu);
    s["peak_flops_per_s"] = r.measured.mfu_peak_flops_per_s();
    // The performance model's step (report.json version 2; null before, or without a profile).
    const auto& t = r.predicted.time;
    s["predicted_step_seconds"] = t ? json(t->step_seconds) : json();
    s["predicted_time_profile"] = t ? json(t->profile) : json();
}

// The performance model's seconds per step for the op napkin report's row names, if predicted.
json model_seconds(const profiler::RunReport& r, const std::string& op) {
    if (!r.predicted.time) return nullptr;
    for (const profiler::PredictedOpTime& p : r.predicted.time->ops) {
        if (p.name == op) return p.seconds_per_step;
    }
    return nullptr;
}

// A profiled run's step roofline, op coverage and op table.
void summarize_profile(const profiler::RunReport& r, json& s) {
    s["roofline_step_seconds"] = nullptr;
    s["op_coverage_min"] = nullptr;
    s["ops"] = json::array();
    if (!r.profile) return;
    const profiler::ProfileReport& p = *r.profile;
    double roof = 0, cov = 1;
    for (const profiler::ProfileStepTime& st : p.steps) {
        roof += st.roofline_seconds;
        cov = std::min(cov, st.op_coverage);
    }
    if (!p.steps.empty()) {
        s["roofline_step_seconds"] = roof / static_cast<double>(p.steps.size());
        s["op_coverage_min"] = cov;
    }
    for (const profiler::ProfileRow& o : p.ops) {
        s["ops"].push_back({{"name", o.name},
                            {"calls_per_step", o.calls_per_step},
                            {"seconds_per_step", o.seconds_per_step},
                            {"roofline_seconds_per_step", o.roofline_seconds_per_step},
                            {"share_of_step", o.share_of_step},
                            {"achieved_flops_per_s", o.achieved_flops_per_s},
                            // The device records the op launched (null in reports before them).
                            {"device_seconds_per_step", or_null(o.device_seconds_per_step)},
                            {"device_flops_per_s", or_null(o.device_flops_per_s)},
                            {"model_seconds_per_step", model_seconds(r, o.name)}});
    }
}

// The numbers the table and --json show for one run.
json summarize(const RankReport& run, int warmup) {
    json s;
    summarize_settings(run, s);
    summarize_memory(run.report, s);
    summarize_time(run, warmup, s);
    summarize_profile(run.report, s);
    return s;
}

// Each counted step's time inside collectives; none when the report predates timing them.
std::vector<double> collective_seconds(const RankReport& run, int warmup) {
    const std::vector<StepReport>& steps = run.report.steps;
    std::vector<double> v;
    for (std::size_t i = static_cast<std::size_t>(warmup); i < steps.size(); ++i) {
        const auto& c = steps[i].comm;
        if (!c || !c->seconds) {
            if (v.empty()) return v;
            throw InputError(run.file.string() + ": steps[" + std::to_string(i) +
                             "].comm_seconds: expected a number (earlier steps have one), got "
                             "nothing");
        }
        v.push_back(*c->seconds);
    }
    return v;
}

// One rank of a run, as the per-rank table and --json's `ranks` show it.
json rank_summary(const RankReport& run, int warmup) {
    const profiler::RunReport& r = run.report;
    json s;
    s["rank"] = run.rank;
    s["label"] = run.label;
    s["dir"] = run.dir.string();
    s["memory"] = memory_summary(r);
    const auto& comm_peak =
        r.measured.peak_bytes[static_cast<std::size_t>(MemCategory::communication)];
    s["memory"][kCommunication] = {{"predicted", nullptr}, {"measured", or_null(comm_peak)}};
    s["peak_total_bytes"] = static_cast<double>(r.measured.peak_total_bytes);
    const std::vector<double> secs = step_numbers(run, warmup, step_seconds);
    s["steps_counted"] = secs.size();
    s["step_seconds_median"] = median(secs);
    s["tokens_per_s_median"] = median(step_numbers(run, warmup, step_tokens_per_s));
    s["communication"] = nullptr;
    if (!r.communication) return s;
    // Bytes per step of the parameter and gradient collectives (what the estimator predicts), and
    // of everything (the loss and gradient-norm scalars too).
    const profiler::CommunicationReport::PerStep& m = r.communication->measured_per_step;
    const profiler::CommunicationReport::Predicted& p = r.communication->predicted_per_step;
    auto pair = [](double predicted, std::uint64_t measured) {
        return json{{"predicted", predicted}, {"measured", static_cast<double>(measured)}};
    };
    json c;
    c["sent_bytes_per_step"] = pair(p.sent_bytes, m.state_sent_bytes);
    c["received_bytes_per_step"] = pair(p.received_bytes, m.state_received_bytes);
    c["all_sent_bytes_per_step"] = static_cast<double>(m.sent_bytes);
    c["all_received_bytes_per_step"] = static_cast<double>(m.received_bytes);
    // Time inside the collectives (blocking: waiting for the other ranks included); reports
    // written before napkin timed them have no steps[].comm_seconds.
    c["seconds_per_step_median"] = nullptr;
    c["share_of_step"] = nullptr;
    const std::vector<double> comm = collective_seconds(run, warmup);
    if (!comm.empty()) {
        double in_comm = 0, total = 0;
        for (std::size_t i = 0; i < comm.size(); ++i) {
            in_comm += comm[i];
            total += secs[i];
        }
        c["seconds_per_step_median"] = median(comm);
        c["share_of_step"] = total > 0 ? in_comm / total : 0.0;
    }
    s["communication"] = c;
    return s;
}

// The run as a whole. Every step ends in collectives that wait for the slowest rank, so a step
// takes the longest of the ranks' times, and the run's tokens/s is all ranks' tokens over it.
json all_ranks_summary(const profiler::RunRanks& run, const std::vector<json>& ranks, int warmup) {
    std::vector<double> step_max, tokens;
    const RankReport& first = run.ranks.front();
    for (const RankReport& rr : run.ranks) {
        const std::vector<double> secs = step_numbers(rr, warmup, step_seconds);
        const std::vector<double> rate = step_numbers(rr, warmup, step_tokens_per_s);
        if (step_max.empty()) {
            step_max.assign(secs.size(), 0.0);
            tokens.assign(secs.size(), 0.0);
        } else if (secs.size() != step_max.size()) {
            throw InputError(rr.file.string() + ": " + std::to_string(secs.size() + warmup) +
                             " steps, but " + first.file.string() + " has " +
                             std::to_string(step_max.size() + warmup));
        }
        for (std::size_t i = 0; i < secs.size(); ++i) {
            step_max[i] = std::max(step_max[i], secs[i]);
            tokens[i] += rate[i] * secs[i];
        }
    }
    std::vector<double> rate(step_max.size());
    for (std::size_t i = 0; i < rate.size(); ++i)
        rate[i] = step_max[i] > 0 ? tokens[i] / step_max[i] : 0.0;
    json s;
    s["ranks"] = ranks.size();
    s["step_seconds_median"] = median(step_max);
    s["tokens_per_s_median"] = median(rate);
    double peak = 0, share_sum = 0, share_max = 0;
    bool shares = true;
    for (const json& r : ranks) {
        peak = std::max(peak, r["peak_total_bytes"].get<double>());
        const json& c = r["communication"];
        if (c.is_null() || c["share_of_step"].is_null()) {
            shares = false;
            continue;
        }
        share_sum += c["share_of_step"].get<double>();
        share_max = std::max(share_max, c["share_of_step"].get<double>());
    }
    s["peak_total_bytes_max"] = peak;
    s["comm_share_mean"] = shares ? json(share_sum / static_cast<double>(ranks.size())) : json();
    s["comm_share_max"] = shares ? json(share_max) : json();
    return s;
}

// A run folder's entry in the table and in --json: rank 0's numbers (the whole run when it is
// one process), every rank's, and the run's as a whole.
json summarize_run(const profiler::RunRanks& run, int warmup) {
    json s = summarize(run.ranks.front(), warmup);
    s["label"] = run.ranks.size() > 1 ? run.label : run.ranks.front().label;
    std::vector<json> each;
    for (const RankReport& rr : run.ranks)
        each.push_back(rank_summary(rr, warmup));
    s["all_ranks"] = all_ranks_summary(run, each, warmup);
    s["ranks"] = each;
    return s;
}

std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}
std::string mb(const json& v) {
    return v.is_null() ? "-" : fmt("%.2f", v.get<double>() / 1e6);
}
std::string pct(const json& v) {
    return v.is_null() ? "-" : fmt("%.1f%%", 100 * v.get<double>());
}
std::string ms(const json& v) {
    return v.is_null() ? "-" : fmt("%.2f ms", v.get<double>() * 1e3);
}

// Rows of cells, one column per run (or rank): a label, then each column's text right-aligned.
class Columns {
public:
    Columns(std::vector<const json*> columns, int width)
        : columns_(std::move(columns)), width_(width) {}

    template <class Cell>
    void row(const std::string& label, Cell cell) const {
        std::printf("%-*s", kLabelWidth, label.c_str());
        for (const json* c : columns_)  // two spaces apart even when a cell outgrows the width
            std::printf("  %*s", width_ - 2, cell(*c).c_str());
        std::printf("\n");
    }

private:
    static constexpr int kLabelWidth = 30;
    std::vector<const json*> columns_;
    int width_;
};

std::string both_mb(const json& v) {
    return mb(v["predicted"]) + " / " + mb(v["measured"]);
}

// Every rank of a data-parallel run, one column each.
void print_ranks(const json& run) {
    const json& ranks = run["ranks"];
    const json& all = run["all_ranks"];
    std::printf("\nranks of %s: %zu ranks, ZeRO-%s; MB per rank, predicted / measured peak\n",
                run["label"].get<std::string>().c_str(), ranks.size(),
                run["zero"].is_null() ? "-" : run["zero"].dump().c_str());
    std::vector<const json*> columns;
    for (const json& r : ranks)
        columns.push_back(&r);
    const Columns t(std::move(columns), 22);
    t.row("", [](const json& r) { return "rank " + r["rank"].dump(); });
    for (const char* c : kCategories) {
        t.row(std::string("  ") + c, [&](const json& r) { return both_mb(r["memory"][c]); });
    }
    t.row("  data", [&](const json& r) { return both_mb(r["memory"][kData]); });
    t.row("  communication", [&](const json& r) { return both_mb(r["memory"][kCommunication]); });
    t.row("  total (measured peak)", [](const json& r) { return mb(r["peak_total_bytes"]); });
    auto comm = [&](const json& r, const char* key) {
        const json& c = r["communication"];
        return c.is_null() ? std::string("-") : both_mb(c[key]);
    };
    t.row("sent MB/step (ring)", [&](const json& r) { return comm(r, "sent_bytes_per_step"); });
    t.row("received MB/step (ring)",
          [&](const json& r) { return comm(r, "received_bytes_per_step"); });
    t.row("step (median)", [](const json& r) { return ms(r["step_seconds_median"]); });
    t.row("tokens/s of the rank (median)",
          [](const json& r) { return fmt("%.0f", r["tokens_per_s_median"].get<double>()); });
    t.row("time in collectives (median)", [](const json& r) {
        const json& c = r["communication"];
        if (c.is_null() || c["seconds_per_step_median"].is_null()) return std::string("-");
        return ms(c["seconds_per_step_median"]) + " " + pct(c["share_of_step"]);
    });
    std::printf(
        "all %zu ranks: step %s (the slowest rank's, median), %.0f tokens/s, peak %s MB on the "
        "largest rank, time in collectives %s of the step (mean over ranks)\n",
        ranks.size(), ms(all["step_seconds_median"]).c_str(),
        all["tokens_per_s_median"].get<double>(), mb(all["peak_total_bytes_max"]).c_str(),
        pct(all["comm_share_mean"]).c_str());
}

std::string str(const json& v) {
    return v.is_string() ? v.get<std::string>() : v.dump();
}

void print_settings(const Columns& t, const std::vector<json>& runs) {
    t.row("run", [&](const json& r) { return r["label"].get<std::string>(); });
    t.row("model", [&](const json& r) {
        return str(r["model"]) + " L" + str(r["n_layers"]) + " C" + str(r["d_model"]);
    });
    for (const char* key :
         {"device", "precision", "optimizer", "checkpointing", "attention", "finetune"})
        t.row(key, [&](const json& r) { return str(r[key]); });
    // fp8-amp's scaling: delayed over the last H steps' amaxes, or current (H 0).
    if (std::any_of(runs.begin(), runs.end(),
                    [](const json& r) { return r["precision"] == "fp8-amp"; })) {
        t.row("fp8 amax history", [&](const json& r) {
            const json& h = r["fp8_amax_history"];
            if (h.is_null()) return std::string("-");
            return h.get<std::int64_t>() == 0 ? std::string("0 (current scaling)") : str(h);
        });
    }
    t.row("B x T x G", [&](const json& r) {
        return str(r["micro_batch"]) + "x" + str(r["seq_len"]) + "x" + str(r["grad_accum"]);
    });
    t.row("steps", [&](const json& r) { return str(r["steps"]); });
    if (std::any_of(runs.begin(), runs.end(),
                    [](const json& r) { return !r["stopped"].is_null(); }))
        t.row("stopped", [&](const json& r) {
            return r["stopped"].is_null() ? std::string("-") : r["stopped"].get<std::string>();
        });
    t.row("ranks, ZeRO stage", [&](const json& r) {
        return str(r["world"]) + ", " + (r["zero"].is_null() ? std::string("-") : str(r["zero"]));
    });
}

void print_memory(const Columns& t, const std::vector<json>& runs) {
    std::printf("\nmemory, MB: predicted / measured peak\n");
    for (const char* c : kCategories)
        t.row(std::string("  ") + c, [&](const json& r) { return both_mb(r["memory"][c]); });
    t.row("  data", [&](const json& r) { return both_mb(r["memory"][kData]); });
    t.row("  communication (measured)",
          [&](const json& r) { return mb(r["ranks"][0]["memory"][kCommunication]["measured"]); });
    t.row("  total (measured peak)", [&](const json& r) { return mb(r["peak_total_bytes"]); });
    if (std::any_of(runs.begin(), runs.end(),
                    [](const json& r) { return !r["host_memory"].is_null(); })) {
        for (const char* c : {"master_weights", "gradients", "optimizer_state"}) {
            t.row(std::string("  host (offloaded) ") + c, [&](const json& r) {
                return r["host_memory"].is_null() ? std::string("-") : both_mb(r["host_memory"][c]);
            });
        }
    }
    if (std::any_of(runs.begin(), runs.end(),
                    [](const json& r) { return r.contains("paged_optimizer"); })) {
        const std::pair<const char*, const char*> rows[] = {
            {"state", "  paged optimizer state"},
            {"to_device_per_step", "    paged in per step"},
            {"to_host_per_step", "    paged out per step"}};
        for (const auto& [c, label] : rows) {
            t.row(label, [&](const json& r) {
                return r.contains("paged_optimizer") ? both_mb(r["paged_optimizer"][c])
                                                     : std::string("-");
            });
        }
        t.row("    paging ms per step", [&](const json& r) {
            if (!r.contains("paged_optimizer")) return std::string("-");
            const json& p = r["paged_optimizer"]["seconds_per_step"];
            return fmt("%.3f", 1e3 * p["predicted"].get<double>()) + " / " +
                   (p["measured"].is_null() ? std::string("-")
                                            : fmt("%.3f", 1e3 * p["measured"].get<double>()));
        });
    }
    t.row("  closed form: model states",
          [&](const json& r) { return mb(r["closed_form"]["model_state_bytes"]); });
    t.row("    bytes per parameter", [&](const json& r) {
        const json& b = r["closed_form"]["bytes_per_param"];
        return b.is_null() ? std::string("-") : fmt("%.0f", b.get<double>());
    });
    t.row("  closed form: activations",
          [&](const json& r) { return mb(r["closed_form"]["activations"]); });
    t.row("communication MB/step/rank", [&](const json& r) {
        return r["comm_sent_predicted"].is_null()
                   ? std::string("-")
                   : mb(r["comm_sent_predicted"]) + " / " + mb(r["comm_sent_measured"]);
    });
}

void print_time(const Columns& t) {
    std::printf("\ntime and throughput\n");
    t.row("  step (median)", [&](const json& r) { return ms(r["step_seconds_median"]); });
    t.row("  step, predicted (model)",
          [&](const json& r) { return ms(r["predicted_step_seconds"]); });
    t.row("    measured / predicted", [&](const json& r) {
        const json& p = r["predicted_step_seconds"];
        return p.is_number() && p.get<double>() > 0
                   ? fmt("%.2f", r["step_seconds_median"].get<double>() / p.get<double>())
                   : std::string("-");
    });
    t.row("  step roofline (profiled)",
          [&](const json& r) { return ms(r["roofline_step_seconds"]); });
    t.row("  op ranges cover (min)", [&](const json& r) { return pct(r["op_coverage_min"]); });
    t.row("  tokens/s",
          [&](const json& r) { return fmt("%.0f", r["tokens_per_s"].get<double>()); });
    t.row("  tokens/s, all ranks (median)", [&](const json& r) {
        return fmt("%.0f", r["all_ranks"]["tokens_per_s_median"].get<double>());
    });
    t.row("  time in collectives (mean)",
          [&](const json& r) { return pct(r["all_ranks"]["comm_share_mean"]); });
    t.row("  model GFLOP/step", [&](const json& r) {
        return fmt("%.3f", r["model_flops_per_step"].get<double>() / 1e9);
    });
    t.row("    closed form (+ attn)", [&](const json& r) {  // 6N, or 4N + 6m with adapters
        const json& v = r["closed_form"]["model_flops_per_step"];
        return v.is_null() ? std::string("-") : fmt("%.3f", v.get<double>() / 1e9);
    });
    t.row("  peak GFLOP/s (MFU basis)",
          [&](const json& r) { return fmt("%.1f", r["peak_flops_per_s"].get<double>() / 1e9); });
    t.row("  MFU", [&](const json& r) { return pct(r["mfu"]); });
    t.row("  MFU, median step", [&](const json& r) { return pct(r["mfu_median"]); });
    t.row("  HFU", [&](const json& r) { return pct(r["hfu"]); });
    t.row("loss first -> last", [&](const json& r) {
        return fmt("%.3f", r["loss_first"].get<double>()) + " -> " +
               fmt("%.3f", r["loss_last"].get<double>());
    });
}

// A profiled run's ops by time. On a GPU an op's host range times its launches (and any wait),
// not its work: the table shows the device time of the records each op launched instead, where
// the report has it.
void print_ops(const json& r, int top) {
    const bool on_device = r["device"].get<std::string>().rfind("cuda", 0) == 0 &&
                           std::any_of(r["ops"].begin(), r["ops"].end(), [](const json& o) {
                               return o["device_seconds_per_step"].is_number() &&
                                      o["device_seconds_per_step"].get<double>() > 0;
                           });
    const char* time_key = on_device ? "device_seconds_per_step" : "seconds_per_step";
    std::vector<const json*> rows;
    for (const json& o : r["ops"])
        rows.push_back(&o);
    std::stable_sort(rows.begin(), rows.end(), [&](const json* a, const json* b) {
        return (*a)[time_key].get<double>() > (*b)[time_key].get<double>();
    });
    const double step = r["step_seconds_median"].get<double>();
    std::printf(
        "\nops of %s, per step (top %d by %s; roofline = max(FLOPs/peak, bytes/bandwidth); "
        "model = the performance model's prediction)\n",
        r["label"].get<std::string>().c_str(), top,
        on_device ? "GPU time of the kernels each op launched" : "time");
    std::printf("  %-44s %6s %11s %7s %12s %8s %12s %8s %10s\n", "op", "calls",
                on_device ? "GPU time" : "measured", "share", "roofline", "x roof", "model",
                "x model", "GFLOP/s");
    for (std::size_t n = 0; n < rows.size() && n < static_cast<std::size_t>(top); ++n) {
        const json& o = *rows[n];
        const double meas = o[time_key].get<double>(),
                     roof = o["roofline_seconds_per_step"].get<double>();
        const double rate = on_device ? o["device_flops_per_s"].get<double>()
                                      : o["achieved_flops_per_s"].get<double>();
        const std::string share = on_device ? (step > 0 ? fmt("%.1f%%", 100 * meas / step) : "-")
                                            : pct(o["share_of_step"]);
        const json& model = o["model_seconds_per_step"];
        const bool has_model = model.is_number() && model.get<double>() > 0;
        std::printf("  %-44s %6.0f %11s %7s %12s %8s %12s %8s %10.2f\n",
                    o["name"].get<std::string>().c_str(), o["calls_per_step"].get<double>(),
                    ms(meas).c_str(), share.c_str(), ms(roof).c_str(),
                    roof > 0 ? fmt("%.1f", meas / roof).c_str() : "-", ms(model).c_str(),
                    has_model ? fmt("%.2f", meas / model.get<double>()).c_str() : "-", rate / 1e9);
    }
}

void print_table(const std::vector<json>& runs, int top) {
    int width = 21;  // "74270.00 / 74270.00" (an 80 GB run's MB, predicted / measured) and two
    std::vector<const json*> columns;
    for (const json& r : runs) {
        width = std::max(width, static_cast<int>(r["label"].get<std::string>().size()) + 2);
        columns.push_back(&r);
    }
    const Columns t(std::move(columns), width);
    print_settings(t, runs);
    print_memory(t, runs);
    print_time(t);
    for (const json& r : runs) {
        if (r["ranks"].size() > 1) print_ranks(r);
    }
    if (top <= 0) return;
    for (const json& r : runs) {
        if (!r["ops"].empty()) print_ops(r, top);
    }
}

// Training runs side by side, then each generate run's inference report (cli/report_generate.h).
void run_report(const ReportFlags& f) {
    std::vector<json> runs, generate_runs;
    for (const std::string& dir : f.runs) {
        if (run_kind(dir) == RunKind::generate)
            generate_runs.push_back(summarize_generate_run(dir));
        else
            runs.push_back(summarize_run(profiler::load_run_ranks(dir), f.warmup));
    }
    if (f.json) {
        const json doc = {
            {"schema", "napkin-report/1"}, {"runs", runs}, {"generate_runs", generate_runs}};
        std::printf("%s\n", doc.dump(2).c_str());
        return;
    }
    if (!runs.empty()) print_table(runs, f.top);
    if (!runs.empty() && !generate_runs.empty()) std::printf("\n");
    print_generate_runs(generate_runs);
}

}  // namespace

void add_report_command(CLI::App& app) {
    auto f = std::make_shared<ReportFlags>();
    CLI::App* cmd = app.add_subcommand("report",
                                       "Predicted vs measured for napkin train runs, side by side "
                                       "(memory, FLOPs, time, MFU, ops), and for napkin generate "
                                       "runs (memory, prefill and decode time, tokens/s)");
    cmd->add_option("runs", f->runs,
                    "Run folders (napkin train --out, napkin generate --out) or their report.json "
                    "or generate.json files")
        ->required();
    cmd->add_option("--top", f->top, "Ops listed per profiled run (0: none)")
        ->capture_default_str()
        ->check(non_negative_integer());
    cmd->add_option("--warmup", f->warmup,
                    "Steps left out of the medians (step time, tokens/s, collectives)")
        ->capture_default_str()
        ->check(non_negative_integer());
    cmd->add_flag("--json", f->json,
                  "Print the numbers as JSON (schema napkin-report/1) instead of a table");
    cmd->footer(
        "A data-parallel run (mpirun -n W napkin train --zero S --out RUN_DIR) is read rank by "
        "rank: RUN_DIR "
        "and RUN_DIR/rank1 .. rank<W-1>.\nErrors (exit 1): a missing folder or rank folder, ranks "
        "that "
        "disagree on the world size or stage, malformed or truncated JSON, a report from another "
        "format "
        "version, a folder with neither report.json nor generate.json.\nA generate run's "
        "report: memory by category and time (prefill, decode per token, tokens/s), predicted "
        "and measured; --json lists it under generate_runs[].");
    cmd->callback([f] { run_report(*f); });
}

}  // namespace napkin::cli
