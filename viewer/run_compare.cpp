// The compare view's table (declared in viewer/run_data.h): one row per setting or result, one
// column per run, built from the reports alone so that it is tested without a display.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "viewer/format.h"
#include "viewer/run_data.h"

namespace napkin::viewer {

namespace {

constexpr const char* kCategories[] = {"parameters",      "master_weights", "gradients",
                                       "optimizer_state", "activations",    "temporaries"};

std::string bytes_or_dash(double v) {
    return std::isfinite(v) ? fmt_bytes_short(v) : std::string("-");
}

std::string integer_or(double v, const char* otherwise) {
    if (!std::isfinite(v)) return otherwise;
    char b[32];
    std::snprintf(b, sizeof b, "%.0f", v);
    return b;
}

double median(std::vector<double> v) {
    if (v.empty()) return NAN;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// A measured category's peak; NaN when the report has none.
double measured_peak(const ReportData& r, MemCategory c) {
    const std::optional<std::int64_t>& v = r.measured.peak_bytes[static_cast<std::size_t>(c)];
    return v ? static_cast<double>(*v) : NAN;
}

// Each step's time in collectives, where the report has it.
std::vector<double> comm_seconds(const ReportData& r) {
    std::vector<double> out;
    for (const profiler::StepReport& s : r.steps) {
        if (s.comm && s.comm->seconds) out.push_back(*s.comm->seconds);
    }
    return out;
}

using Row = std::function<std::string(const ReportData&)>;

// Data parallelism: report.json's "communication" (absent: one process, no ZeRO).
void add_parallel_settings(const std::function<void(const std::string&, const Row&)>& add) {
    using Comm = profiler::CommunicationReport;
    auto comm = [](const ReportData& r, auto get, std::string otherwise) {
        return r.communication ? get(*r.communication) : otherwise;
    };
    add("ZeRO stage", [&](const ReportData& r) {
        return comm(
            r, [](const Comm& c) { return std::to_string(c.zero); }, "none (1 process)");
    });
    add("world size", [&](const ReportData& r) {
        return comm(
            r, [](const Comm& c) { return std::to_string(c.world); }, "1");
    });
    add("rank shown", [&](const ReportData& r) {
        return comm(
            r, [](const Comm& c) { return std::to_string(c.rank); }, "0");
    });
    add("comm backend", [&](const ReportData& r) {
        return comm(
            r, [](const Comm& c) { return c.backend; }, "");
    });
}

// Bytes communicated per step, predicted and measured, and the time in collectives.
void add_parallel_results(const std::function<void(const std::string&, const Row&)>& add) {
    add("sent / step, pred / meas", [](const ReportData& r) {
        if (!r.communication) return std::string("-");
        return bytes_or_dash(r.communication->predicted_per_step.sent_bytes) + " / " +
               bytes_or_dash(
                   static_cast<double>(r.communication->measured_per_step.state_sent_bytes));
    });
    add("received / step, pred / meas", [](const ReportData& r) {
        if (!r.communication) return std::string("-");
        return bytes_or_dash(r.communication->predicted_per_step.received_bytes) + " / " +
               bytes_or_dash(
                   static_cast<double>(r.communication->measured_per_step.state_received_bytes));
    });
    add("all sent / step (meas)", [](const ReportData& r) {
        return r.communication ? bytes_or_dash(static_cast<double>(
                                     r.communication->measured_per_step.sent_bytes))
                               : std::string("-");
    });
    add("in collectives / step", [](const ReportData& r) {
        const double c = median(comm_seconds(r)), s = median_step_seconds(r);
        if (!std::isfinite(c)) return std::string("-");
        std::string out = fmt_duration_ns(c * 1e9);
        if (std::isfinite(s) && s > 0) {
            char b[32];
            std::snprintf(b, sizeof b, " (%.0f%%)", 100.0 * c / s);
            out += b;
        }
        return out;
    });
}

// The performance model's step (predicted.time): its seconds beside the measured median, and
// where it says the time goes (seconds_by_bucket: gemm, attention, memory_bound, ...).
void add_time_prediction(const std::function<void(const std::string&, const Row&)>& add,
                         const std::vector<const RunData*>& runs) {
    add("step time (predicted)", [](const ReportData& r) {
        return r.predicted.time ? fmt_duration_ns(r.predicted.time->step_seconds * 1e9)
                                : std::string("-");
    });
    add("measured / predicted step", [](const ReportData& r) {
        const double s = median_step_seconds(r);
        if (!r.predicted.time || !std::isfinite(s) || r.predicted.time->step_seconds <= 0)
            return std::string("-");
        char b[32];
        std::snprintf(b, sizeof b, "%.2fx", s / r.predicted.time->step_seconds);
        return std::string(b);
    });
    std::vector<std::string> buckets;
    for (const RunData* run : runs) {
        if (!run->report.predicted.time) continue;
        for (const auto& [bucket, seconds] : run->report.predicted.time->seconds_by_bucket) {
            if (std::find(buckets.begin(), buckets.end(), bucket) == buckets.end())
                buckets.push_back(bucket);
        }
    }
    for (const std::string& bucket : buckets) {
        add("  " + bucket + " (predicted)", [bucket](const ReportData& r) {
            if (!r.predicted.time) return std::string("-");
            const auto it = r.predicted.time->seconds_by_bucket.find(bucket);
            return it == r.predicted.time->seconds_by_bucket.end()
                       ? std::string("-")
                       : fmt_duration_ns(it->second * 1e9);
        });
    }
}

}  // namespace

double predicted_total_bytes(const ReportData& r) {
    double total = 0;
    for (double b : r.predicted.bytes)
        total += b;
    return total + r.predicted.data.value_or(0);
}

double median_step_seconds(const ReportData& r) {
    std::vector<double> s;
    for (const profiler::StepReport& step : r.steps)
        s.push_back(step.seconds);
    return median(std::move(s));
}

std::vector<CompareRow> compare_table(const std::vector<const RunData*>& runs) {
    std::vector<CompareRow> rows;
    auto add = [&](const std::string& key, const Row& f) {
        CompareRow row{key, {}, false};
        for (const RunData* r : runs) {
            std::string v = f(r->report);
            row.values.push_back(v.empty() ? "-" : std::move(v));
        }
        row.differs = std::any_of(row.values.begin(), row.values.end(),
                                  [&](const std::string& v) { return v != row.values.front(); });
        rows.push_back(std::move(row));
    };
    auto any = [&](const std::function<bool(const ReportData&)>& f) {
        return std::any_of(runs.begin(), runs.end(),
                           [&](const RunData* r) { return f(r->report); });
    };

    // Settings.
    add("model", [](const ReportData& r) { return r.model.name; });
    add("precision", [](const ReportData& r) { return r.run.precision; });
    add("checkpointing", [](const ReportData& r) { return r.run.checkpointing; });
    add("attention", [](const ReportData& r) { return r.run.attention; });
    add("finetune", [](const ReportData& r) { return r.run.finetune; });
    add("optimizer", [](const ReportData& r) { return r.run.optimizer; });
    add("micro_batch", [](const ReportData& r) { return std::to_string(r.run.micro_batch); });
    add("seq_len", [](const ReportData& r) { return std::to_string(r.run.seq_len); });
    add("grad_accum", [](const ReportData& r) { return std::to_string(r.run.grad_accum); });
    add("steps", [](const ReportData& r) { return std::to_string(r.run.steps); });
    add("device", [](const ReportData& r) { return r.run.device; });
    const bool parallel = any([](const ReportData& r) { return r.communication.has_value(); });
    if (parallel) add_parallel_settings(add);

    // Results.
    add("predicted total",
        [](const ReportData& r) { return fmt_bytes_short(predicted_total_bytes(r)); });
    add("measured peak", [](const ReportData& r) {
        return bytes_or_dash(static_cast<double>(r.measured.peak_total_bytes));
    });
    for (std::size_t c = 0; c < std::size(kCategories); ++c) {
        add(std::string(kCategories[c]) + " pred / meas", [c](const ReportData& r) {
            return bytes_or_dash(r.predicted.bytes[c]) + " / " +
                   bytes_or_dash(measured_peak(r, static_cast<MemCategory>(c)));
        });
    }
    add("data pred / meas", [](const ReportData& r) {
        return bytes_or_dash(r.predicted.data.value_or(NAN)) + " / " +
               bytes_or_dash(measured_peak(r, MemCategory::data));
    });
    if (any([](const ReportData& r) {
            return std::isfinite(measured_peak(r, MemCategory::communication));
        })) {
        // Measured only: ZeRO's buckets and gathered units have no category in the estimator.
        add("communication (meas)", [](const ReportData& r) {
            return bytes_or_dash(measured_peak(r, MemCategory::communication));
        });
    }
    if (parallel) add_parallel_results(add);
    add("step time (median)", [](const ReportData& r) {
        const double s = median_step_seconds(r);
        return std::isfinite(s) ? fmt_duration_ns(s * 1e9) : std::string("-");
    });
    if (any([](const ReportData& r) { return r.predicted.time.has_value(); }))
        add_time_prediction(add, runs);
    add("tokens/s", [](const ReportData& r) { return integer_or(r.measured.tokens_per_s, "-"); });
    add("MFU", [](const ReportData& r) {
        char b[32];
        std::snprintf(b, sizeof b, "%.2f%%", 100.0 * r.measured.mfu);
        return std::isfinite(r.measured.mfu) ? std::string(b) : std::string("-");
    });
    return rows;
}

}  // namespace napkin::viewer
