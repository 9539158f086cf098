// napkin report RUN_DIR...: predicted against measured for one or several training runs, side
// by side in the terminal (or as JSON): memory by category, the closed-form numbers beside the
// detailed ones, step time against the roofline, tokens/s, MFU and HFU, and for profiled runs
// the ops that took the time. A data-parallel run (mpirun -n W napkin train --zero S) is read
// rank by rank (RUN_DIR, RUN_DIR/rank<r>): its column shows rank 0, and a table per run shows
// every rank's memory, bytes communicated, step time, tokens/s and time in collectives.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "core/check.h"
#include "profiler/run_folder.h"

namespace napkin::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using profiler::number_field;
using profiler::string_field;

struct ReportFlags {
    std::vector<std::string> runs;
    int top = 12;
    int warmup = 0;
    bool json = false;
};

// Memory categories as report.json names them, in the order the table shows them.
constexpr const char* kCategories[] = {"parameters",      "master_weights", "gradients",
                                       "optimizer_state", "activations",    "temporaries"};
// Measured only: the estimator has no category of its own for ZeRO's buckets and gathered units.
constexpr const char* kCommunication = "communication";

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// An optional number: null when the report predates the field (or the run was not profiled).
json optional_number(const json& doc, std::string_view path, const fs::path& file) {
    const json* at = &doc;
    std::size_t start = 0;
    while (true) {
        const std::size_t dot = path.find('.', start);
        const std::string key(path.substr(
            start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
        if (!at->is_object() || !at->contains(key) || (*at)[key].is_null()) return nullptr;
        at = &(*at)[key];
        if (dot == std::string_view::npos) break;
        start = dot + 1;
    }
    if (!at->is_number())
        throw InputError(file.string() + ": field '" + std::string(path) + "' is not a number");
    return *at;
}

// Field `key` of every step after the first `warmup` (UsageError when none is left).
std::vector<double> step_numbers(const profiler::RunReport& run, const char* key, int warmup) {
    const json& steps = profiler::field(run.report, "steps", run.file);
    if (!steps.is_array() || steps.empty()) {
        throw InputError(run.file.string() + ": field 'steps' is not a non-empty array");
    }
    if (static_cast<std::size_t>(warmup) >= steps.size()) {
        throw UsageError("--warmup " + std::to_string(warmup) + ": leaves no step of " +
                         run.file.string() + " (" + std::to_string(steps.size()) + " steps)");
    }
    std::vector<double> v;
    for (std::size_t i = static_cast<std::size_t>(warmup); i < steps.size(); ++i) {
        v.push_back(
            number_field(steps[i], key, run.file.string() + " steps[" + std::to_string(i) + "]"));
    }
    return v;
}

// The numbers the table and --json show for one run, read and type-checked once.
json summarize(const profiler::RunReport& run, int warmup) {
    const json& r = run.report;
    const fs::path& f = run.file;
    json s;
    s["dir"] = run.dir.string();
    s["label"] = run.label;
    s["model"] = string_field(r, "model.name", f);
    auto integer = [&](std::string_view path) {
        return static_cast<std::int64_t>(number_field(r, path, f));
    };
    s["n_layers"] = integer("model.n_layers");
    s["d_model"] = integer("model.d_model");
    for (const char* k : {"device", "precision", "optimizer", "checkpointing", "attention"}) {
        s[k] = string_field(r, std::string("run.") + k, f);
    }
    for (const char* k : {"micro_batch", "seq_len", "grad_accum", "steps"})
        s[k] = integer(std::string("run.") + k);
    // LoRA/QLoRA (reports before 2026-11-26 have no key: full fine-tuning).
    s["finetune"] = "full";
    if (const json& run_j = r.at("run"); run_j.contains("finetune")) {
        s["finetune"] = string_field(r, "run.finetune", f);
        if (s["finetune"] != "full") {
            s["finetune"] = s["finetune"].get<std::string>() + " r" +
                            std::to_string(integer("run.lora_rank"));
        }
    }
    for (const char* c : kCategories) {
        s["memory"][c] = {
            {"predicted", number_field(r, std::string("predicted.") + c, f)},
            {"measured", number_field(r, std::string("measured.peak_bytes.") + c, f)}};
    }
    s["peak_total_bytes"] = number_field(r, "measured.peak_total_bytes", f);
    // --offload optimizer: the model states in host memory (absent otherwise).
    s["host_memory"] = nullptr;
    if (!optional_number(r, "predicted.host_memory.master_weights", f).is_null()) {
        for (const char* c : {"master_weights", "gradients", "optimizer_state"}) {
            s["host_memory"][c] = {
                {"predicted", number_field(r, std::string("predicted.host_memory.") + c, f)},
                {"measured", number_field(r, std::string("measured.host_peak_bytes.") + c, f)}};
        }
    }
    s["closed_form"] = {
        {"model_state_bytes", optional_number(r, "predicted.closed_form.model_state_bytes", f)},
        {"bytes_per_param", optional_number(r, "predicted.closed_form.bytes_per_param", f)},
        {"activations", optional_number(r, "predicted.closed_form.activations", f)},
        {"model_flops_per_step",
         optional_number(r, "predicted.closed_form.model_flops_per_step", f)}};
    s["model_flops_per_step"] = number_field(r, "predicted.model_flops_per_step", f);

    const json& steps = profiler::field(r, "steps", f);
    if (!steps.is_array() || steps.empty())
        throw InputError(f.string() + ": field 'steps' is not a non-empty array");
    s["step_seconds_median"] = median(step_numbers(run, "seconds", warmup));
    s["loss_first"] = number_field(steps.front(), "loss", f.string() + " steps[0]");
    s["loss_last"] = number_field(steps.back(), "loss", f.string() + " steps[last]");
    s["tokens_per_s"] = number_field(r, "measured.tokens_per_s", f);
    s["mfu"] = number_field(r, "measured.mfu", f);
    // The whole run's MFU counts the first step's one-time costs (cuBLASLt's heuristics, the
    // caching allocator's first allocations, CUPTI's start): on a short run it is far below the
    // steady state, which the median step's gives.
    s["mfu_median"] = median(step_numbers(run, "mfu", warmup));
    s["hfu"] = optional_number(r, "measured.hfu", f);
    // peak_flops_per_s since the CUDA engine (a GPU's is its datasheet's, no sgemm); earlier
    // reports have only sgemm_peak_flops_per_s.
    const json peak = optional_number(r, "measured.peak_flops_per_s", f);
    s["peak_flops_per_s"] =
        peak.is_null() ? number_field(r, "measured.sgemm_peak_flops_per_s", f) : peak.get<double>();

    // Data parallelism (napkin train --zero under mpirun): this rank's share and its traffic.
    s["world"] = 1;
    s["zero"] = nullptr;
    s["comm_sent_predicted"] = nullptr;
    s["comm_sent_measured"] = nullptr;
    if (r.contains("communication") && !r["communication"].is_null()) {
        s["world"] = integer("communication.world");
        s["zero"] = integer("communication.zero");
        s["comm_sent_predicted"] =
            number_field(r, "communication.predicted_per_step.sent_bytes", f);
        s["comm_sent_measured"] =
            number_field(r, "communication.measured_per_step.state_sent_bytes", f);
    }

    s["roofline_step_seconds"] = nullptr;
    s["op_coverage_min"] = nullptr;
    s["ops"] = json::array();
    if (r.contains("profile") && !r["profile"].is_null()) {
        const json& p = r["profile"];
        const json& psteps = profiler::field(p, "steps", f);
        if (!psteps.is_array())
            throw InputError(f.string() + ": field 'profile.steps' is not an array");
        double roof = 0, cov = 1;
        for (const json& st : psteps) {
            roof += number_field(st, "roofline_seconds", f);
            cov = std::min(cov, number_field(st, "op_coverage", f));
        }
        if (!psteps.empty()) {
            s["roofline_step_seconds"] = roof / static_cast<double>(psteps.size());
            s["op_coverage_min"] = cov;
        }
        const json& ops = profiler::field(p, "ops", f);
        if (!ops.is_array()) throw InputError(f.string() + ": field 'profile.ops' is not an array");
        for (const json& o : ops) {
            s["ops"].push_back(
                {{"name", string_field(o, "name", f)},
                 {"calls_per_step", number_field(o, "calls_per_step", f)},
                 {"seconds_per_step", number_field(o, "seconds_per_step", f)},
                 {"roofline_seconds_per_step", number_field(o, "roofline_seconds_per_step", f)},
                 {"share_of_step", number_field(o, "share_of_step", f)},
                 {"achieved_flops_per_s", number_field(o, "achieved_flops_per_s", f)},
                 // The device records the op launched (reports before 2026-11-26: null).
                 {"device_seconds_per_step", optional_number(o, "device_seconds_per_step", f)},
                 {"device_flops_per_s", optional_number(o, "device_flops_per_s", f)}});
        }
    }
    return s;
}

// One rank of a run, as the per-rank table and --json's `ranks` show it.
json rank_summary(const profiler::RunReport& run, int warmup) {
    const json& r = run.report;
    const fs::path& f = run.file;
    json s;
    s["rank"] = run.rank;
    s["label"] = run.label;
    s["dir"] = run.dir.string();
    for (const char* c : kCategories) {
        s["memory"][c] = {
            {"predicted", number_field(r, std::string("predicted.") + c, f)},
            {"measured", number_field(r, std::string("measured.peak_bytes.") + c, f)}};
    }
    s["memory"][kCommunication] = {
        {"predicted", nullptr},
        {"measured", optional_number(r, std::string("measured.peak_bytes.") + kCommunication, f)}};
    s["peak_total_bytes"] = number_field(r, "measured.peak_total_bytes", f);
    const std::vector<double> secs = step_numbers(run, "seconds", warmup);
    s["steps_counted"] = secs.size();
    s["step_seconds_median"] = median(secs);
    s["tokens_per_s_median"] = median(step_numbers(run, "tokens_per_s", warmup));
    s["communication"] = nullptr;
    if (run.zero < 0) return s;
    // Bytes per step of the parameter and gradient collectives (what the estimator predicts), and
    // of everything (the loss and gradient-norm scalars too).
    auto pair = [&](const char* predicted, const char* measured) {
        return json{{"predicted", number_field(r, predicted, f)},
                    {"measured", number_field(r, measured, f)}};
    };
    json c;
    c["sent_bytes_per_step"] = pair("communication.predicted_per_step.sent_bytes",
                                    "communication.measured_per_step.state_sent_bytes");
    c["received_bytes_per_step"] = pair("communication.predicted_per_step.received_bytes",
                                        "communication.measured_per_step.state_received_bytes");
    c["all_sent_bytes_per_step"] = number_field(r, "communication.measured_per_step.sent_bytes", f);
    c["all_received_bytes_per_step"] =
        number_field(r, "communication.measured_per_step.received_bytes", f);
    // Time inside the collectives (blocking: waiting for the other ranks included); reports
    // written before napkin timed them have no steps[].comm_seconds.
    c["seconds_per_step_median"] = nullptr;
    c["share_of_step"] = nullptr;
    const json& steps = r["steps"];
    if (steps[static_cast<std::size_t>(warmup)].contains("comm_seconds")) {
        const std::vector<double> comm = step_numbers(run, "comm_seconds", warmup);
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
    const profiler::RunReport& first = run.ranks.front();
    for (const profiler::RunReport& rr : run.ranks) {
        const std::vector<double> secs = step_numbers(rr, "seconds", warmup);
        const std::vector<double> rate = step_numbers(rr, "tokens_per_s", warmup);
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
    for (const profiler::RunReport& rr : run.ranks)
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

// Every rank of a data-parallel run, one column each.
void print_ranks(const json& run) {
    const json& ranks = run["ranks"];
    const json& all = run["all_ranks"];
    std::printf("\nranks of %s: %zu ranks, ZeRO-%s; MB per rank, predicted / measured peak\n",
                run["label"].get<std::string>().c_str(), ranks.size(),
                run["zero"].is_null() ? "-" : run["zero"].dump().c_str());
    constexpr int kLabel = 30;
    constexpr int kWidth = 22;
    auto row = [&](const std::string& label, auto cell) {
        std::printf("%-*s", kLabel, label.c_str());
        for (const json& r : ranks)
            std::printf("%*s", kWidth, cell(r).c_str());
        std::printf("\n");
    };
    auto both = [](const json& v) { return mb(v["predicted"]) + " / " + mb(v["measured"]); };
    row("", [](const json& r) { return "rank " + r["rank"].dump(); });
    for (const char* c : kCategories) {
        row(std::string("  ") + c, [&](const json& r) { return both(r["memory"][c]); });
    }
    row("  communication", [&](const json& r) { return both(r["memory"][kCommunication]); });
    row("  total (measured peak)", [](const json& r) { return mb(r["peak_total_bytes"]); });
    auto comm = [&](const json& r, const char* key) {
        const json& c = r["communication"];
        return c.is_null() ? std::string("-") : both(c[key]);
    };
    row("sent MB/step (ring)", [&](const json& r) { return comm(r, "sent_bytes_per_step"); });
    row("received MB/step (ring)",
        [&](const json& r) { return comm(r, "received_bytes_per_step"); });
    row("step (median)", [](const json& r) { return ms(r["step_seconds_median"]); });
    row("tokens/s of the rank (median)",
        [](const json& r) { return fmt("%.0f", r["tokens_per_s_median"].get<double>()); });
    row("time in collectives (median)", [](const json& r) {
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

void print_table(const std::vector<json>& runs, int top) {
    constexpr int kLabel = 30;
    int width = 16;
    for (const json& r : runs)
        width = std::max(width, static_cast<int>(r["label"].get<std::string>().size()) + 2);
    auto row = [&](const std::string& label, auto cell) {
        std::printf("%-*s", kLabel, label.c_str());
        for (const json& r : runs)
            std::printf("%*s", width, cell(r).c_str());
        std::printf("\n");
    };
    auto str = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    row("run", [&](const json& r) { return r["label"].get<std::string>(); });
    row("model", [&](const json& r) {
        return str(r["model"]) + " L" + str(r["n_layers"]) + " C" + str(r["d_model"]);
    });
    row("device", [&](const json& r) { return str(r["device"]); });
    row("precision", [&](const json& r) { return str(r["precision"]); });
    row("optimizer", [&](const json& r) { return str(r["optimizer"]); });
    row("checkpointing", [&](const json& r) { return str(r["checkpointing"]); });
    row("attention", [&](const json& r) { return str(r["attention"]); });
    row("finetune", [&](const json& r) { return str(r["finetune"]); });
    row("B x T x G", [&](const json& r) {
        return str(r["micro_batch"]) + "x" + str(r["seq_len"]) + "x" + str(r["grad_accum"]);
    });
    row("steps", [&](const json& r) { return str(r["steps"]); });
    row("ranks, ZeRO stage", [&](const json& r) {
        return str(r["world"]) + ", " + (r["zero"].is_null() ? std::string("-") : str(r["zero"]));
    });
    std::printf("\nmemory, MB: predicted / measured peak\n");
    for (const char* c : kCategories) {
        row(std::string("  ") + c, [&](const json& r) {
            const json& m = r["memory"][c];
            return mb(m["predicted"]) + " / " + mb(m["measured"]);
        });
    }
    row("  communication (measured)",
        [&](const json& r) { return mb(r["ranks"][0]["memory"][kCommunication]["measured"]); });
    row("  total (measured peak)", [&](const json& r) { return mb(r["peak_total_bytes"]); });
    if (std::any_of(runs.begin(), runs.end(), [](const json& r) { return !r["host_memory"].is_null(); })) {
        for (const char* c : {"master_weights", "gradients", "optimizer_state"}) {
            row(std::string("  host (offloaded) ") + c, [&](const json& r) {
                if (r["host_memory"].is_null()) return std::string("-");
                const json& m = r["host_memory"][c];
                return mb(m["predicted"]) + " / " + mb(m["measured"]);
            });
        }
    }
    row("  closed form: model states",
        [&](const json& r) { return mb(r["closed_form"]["model_state_bytes"]); });
    row("    bytes per parameter", [&](const json& r) {
        const json& b = r["closed_form"]["bytes_per_param"];
        return b.is_null() ? std::string("-") : fmt("%.0f", b.get<double>());
    });
    row("  closed form: activations",
        [&](const json& r) { return mb(r["closed_form"]["activations"]); });
    row("communication MB/step/rank", [&](const json& r) {
        return r["comm_sent_predicted"].is_null()
                   ? std::string("-")
                   : mb(r["comm_sent_predicted"]) + " / " + mb(r["comm_sent_measured"]);
    });
    std::printf("\ntime and throughput\n");
    row("  step (median)", [&](const json& r) { return ms(r["step_seconds_median"]); });
    row("  step roofline (profiled)",
        [&](const json& r) { return ms(r["roofline_step_seconds"]); });
    row("  op ranges cover (min)", [&](const json& r) { return pct(r["op_coverage_min"]); });
    row("  tokens/s", [&](const json& r) { return fmt("%.0f", r["tokens_per_s"].get<double>()); });
    row("  tokens/s, all ranks (median)", [&](const json& r) {
        return fmt("%.0f", r["all_ranks"]["tokens_per_s_median"].get<double>());
    });
    row("  time in collectives (mean)",
        [&](const json& r) { return pct(r["all_ranks"]["comm_share_mean"]); });
    row("  model GFLOP/step",
        [&](const json& r) { return fmt("%.3f", r["model_flops_per_step"].get<double>() / 1e9); });
    row("    closed form (+ attn)", [&](const json& r) {  // 6N, or 4N + 6m with adapters
        const json& v = r["closed_form"]["model_flops_per_step"];
        return v.is_null() ? std::string("-") : fmt("%.3f", v.get<double>() / 1e9);
    });
    row("  peak GFLOP/s (MFU basis)",
        [&](const json& r) { return fmt("%.1f", r["peak_flops_per_s"].get<double>() / 1e9); });
    row("  MFU", [&](const json& r) { return pct(r["mfu"]); });
    row("  MFU, median step", [&](const json& r) { return pct(r["mfu_median"]); });
    row("  HFU", [&](const json& r) { return pct(r["hfu"]); });
    row("loss first -> last", [&](const json& r) {
        return fmt("%.3f", r["loss_first"].get<double>()) + " -> " +
               fmt("%.3f", r["loss_last"].get<double>());
    });

    for (const json& r : runs) {
        if (r["ranks"].size() > 1) print_ranks(r);
    }
    if (top <= 0) return;
    for (const json& r : runs) {
        if (r["ops"].empty()) continue;
        // On a GPU an op's host range times its launches (and any wait), not its work: the
        // table shows the device time of the records each op launched instead, where the report
        // has it.
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
            "\nops of %s, per step (top %d by %s; predicted = roofline max(FLOPs/peak, "
            "bytes/bandwidth))\n",
            r["label"].get<std::string>().c_str(), top,
            on_device ? "GPU time of the kernels each op launched" : "time");
        std::printf("  %-44s %6s %11s %7s %12s %8s %10s\n", "op", "calls",
                    on_device ? "GPU time" : "measured", "share", "predicted", "x pred", "GFLOP/s");
        int n = 0;
        for (const json* op : rows) {
            const json& o = *op;
            if (n++ >= top) break;
            const double meas = o[time_key].get<double>(),
                         roof = o["roofline_seconds_per_step"].get<double>();
            const double rate = on_device ? o["device_flops_per_s"].get<double>()
                                          : o["achieved_flops_per_s"].get<double>();
            const std::string share = on_device ? (step > 0 ? fmt("%.1f%%", 100 * meas / step) : "-")
                                                : pct(o["share_of_step"]);
            std::printf("  %-44s %6.0f %11s %7s %12s %8s %10.2f\n",
                        o["name"].get<std::string>().c_str(), o["calls_per_step"].get<double>(),
                        ms(meas).c_str(), share.c_str(), ms(roof).c_str(),
                        roof > 0 ? fmt("%.1f", meas / roof).c_str() : "-", rate / 1e9);
        }
    }
}

void run_report(const ReportFlags& f) {
    std::vector<json> runs;
    for (const std::string& dir : f.runs)
        runs.push_back(summarize_run(profiler::load_run_ranks(dir), f.warmup));
    if (f.json) {
        std::printf("%s\n", json{{"schema", "napkin-report/1"}, {"runs", runs}}.dump(2).c_str());
        return;
    }
    print_table(runs, f.top);
}

}  // namespace

void add_report_command(CLI::App& app) {
    auto f = std::make_shared<ReportFlags>();
    CLI::App* cmd = app.add_subcommand("report",
                                       "Predicted vs measured for napkin train runs, side by side "
                                       "(memory, FLOPs, time, MFU, ops)");
    cmd->add_option("runs", f->runs, "Run folders (napkin train --out) or their report.json files")
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
        "version.");
    cmd->callback([f] { run_report(*f); });
}

}  // namespace napkin::cli
