// The compare view's table (declared in viewer/run_data.h): one row per setting or result, one
// column per run, built from the reports alone so that it is tested without a display.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

#include "viewer/format.h"
#include "viewer/run_data.h"

namespace napkin::viewer {

namespace {

constexpr const char* kCategories[] = {"parameters",      "master_weights", "gradients",
                                       "optimizer_state", "activations",    "temporaries"};

double get(const std::map<std::string, double>& m, const std::string& key) {
    auto it = m.find(key);
    return it == m.end() ? NAN : it->second;
}

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

}  // namespace

std::vector<CompareRow> compare_table(const std::vector<const RunData*>& runs) {
    std::vector<CompareRow> rows;
    auto add = [&](const std::string& key, const std::function<std::string(const ReportData&)>& f) {
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
    add("model", [](const ReportData& r) { return r.model_name; });
    for (const char* k : {"precision", "checkpointing", "attention", "finetune", "optimizer", "micro_batch",
                          "seq_len", "grad_accum", "steps", "device"}) {
        if (any([k](const ReportData& r) { return !r.run_value(k).empty(); }))
            add(k, [k](const ReportData& r) { return r.run_value(k); });
    }
    // Data parallelism: report.json's "communication" (absent: one process, no ZeRO).
    const bool parallel = any([](const ReportData& r) { return !r.communication.empty(); });
    if (parallel) {
        add("ZeRO stage", [](const ReportData& r) {
            return r.communication.empty() ? std::string("none (1 process)")
                                           : integer_or(r.comm_value("zero"), "-");
        });
        add("world size",
            [](const ReportData& r) { return integer_or(r.comm_value("world"), "1"); });
        add("rank shown",
            [](const ReportData& r) { return integer_or(r.comm_value("rank"), "0"); });
        add("comm backend", [](const ReportData& r) { return r.comm_backend; });
    }

    // Results.
    add("predicted total",
        [](const ReportData& r) { return fmt_bytes_short(r.predicted_total_bytes()); });
    add("measured peak",
        [](const ReportData& r) { return bytes_or_dash(r.measured_value("peak_total_bytes")); });
    for (const char* c : kCategories) {
        add(std::string(c) + " pred / meas", [c](const ReportData& r) {
            return bytes_or_dash(get(r.predicted, c)) + " / " +
                   bytes_or_dash(get(r.measured_peak, c));
        });
    }
    if (any([](const ReportData& r) { return r.measured_peak.count("communication") != 0; })) {
        // Measured only: ZeRO's buckets and gathered units have no category in the estimator.
        add("communication (meas)", [](const ReportData& r) {
            return bytes_or_dash(get(r.measured_peak, "communication"));
        });
    }
    if (parallel) {
        add("sent / step, pred / meas", [](const ReportData& r) {
            if (r.communication.empty()) return std::string("-");
            return bytes_or_dash(r.comm_value("predicted_per_step.sent_bytes")) + " / " +
                   bytes_or_dash(r.comm_value("measured_per_step.state_sent_bytes"));
        });
        add("received / step, pred / meas", [](const ReportData& r) {
            if (r.communication.empty()) return std::string("-");
            return bytes_or_dash(r.comm_value("predicted_per_step.received_bytes")) + " / " +
                   bytes_or_dash(r.comm_value("measured_per_step.state_received_bytes"));
        });
        add("all sent / step (meas)", [](const ReportData& r) {
            return bytes_or_dash(r.comm_value("measured_per_step.sent_bytes"));
        });
        add("in collectives / step", [](const ReportData& r) {
            const double c = median(r.comm_seconds), s = r.median_step_seconds();
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
    add("step time (median)", [](const ReportData& r) {
        const double s = r.median_step_seconds();
        return std::isfinite(s) ? fmt_duration_ns(s * 1e9) : std::string("-");
    });
    add("tokens/s",
        [](const ReportData& r) { return integer_or(r.measured_value("tokens_per_s"), "-"); });
    add("MFU", [](const ReportData& r) {
        const double m = r.measured_value("mfu");
        if (!std::isfinite(m)) return std::string("-");
        char b[32];
        std::snprintf(b, sizeof b, "%.2f%%", 100.0 * m);
        return std::string(b);
    });
    return rows;
}

}  // namespace napkin::viewer
