// memory.json (napkin-memory/1) and report.json (napkin-train-report/1), and what the panels
// derive from them: memory by category over time, the live set at a time.
#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "viewer/run_data.h"
#include "viewer/run_json.h"

namespace napkin::viewer {

namespace {

constexpr double kMaxUs = 8.64e12;  // +-100 days, as for trace timestamps

bool read_strings(simdjson::dom::element parent, const char* key, std::vector<std::string>& out) {
    simdjson::dom::array arr;
    if (parent[key].get_array().get(arr)) return false;
    for (simdjson::dom::element e : arr) {
        std::string_view s;
        out.emplace_back(e.get_string().get(s) ? std::string_view("?") : s);
    }
    return true;
}

bool read_int64(simdjson::dom::element e, std::int64_t& out) {
    double d = 0;
    if (e.type() == simdjson::dom::element_type::INT64) return !e.get_int64().get(out);
    if (!json::number(e, d) || !(std::fabs(d) < 9.2e18) || d != std::floor(d)) return false;
    out = static_cast<std::int64_t>(d);
    return true;
}

bool read_uint64(simdjson::dom::element e, std::uint64_t& out) {
    if (e.type() == simdjson::dom::element_type::UINT64) return !e.get_uint64().get(out);
    std::int64_t i = 0;
    if (!read_int64(e, i) || i < 0) return false;
    out = static_cast<std::uint64_t>(i);
    return true;
}

// Running totals by category, one sample per distinct time (the state after its last row).
void build_series(MemoryData& m) {
    const std::size_t nc = m.categories.size();
    std::vector<double> running(nc, 0.0);
    double total = 0;
    m.t_ns.clear();
    m.by_category.clear();
    m.total.clear();
    m.peak_bytes = 0;
    for (std::size_t i = 0; i < m.rows.size(); ++i) {
        const MemoryRow& r = m.rows[i];
        running[r.category] += static_cast<double>(r.bytes_delta);
        total += static_cast<double>(r.bytes_delta);
        if (i + 1 < m.rows.size() && m.rows[i + 1].t_ns == r.t_ns) continue;
        m.t_ns.push_back(r.t_ns);
        m.by_category.insert(m.by_category.end(), running.begin(), running.end());
        m.total.push_back(total);
        if (total > m.peak_bytes) {
            m.peak_bytes = total;
            m.peak_t_ns = r.t_ns;
        }
    }
}

}  // namespace

std::string parse_memory_document(simdjson::dom::element root, MemoryData& out) {
    out = MemoryData{};
    if (root.type() != simdjson::dom::element_type::OBJECT)
        return "not a memory snapshot: expected an object";
    std::string_view device;
    if (!root["device"].get_string().get(device)) out.device = std::string(device);
    if (!read_strings(root, "categories", out.categories) || out.categories.empty()) {
        return "no \"categories\" array (not a napkin memory snapshot)";
    }
    if (out.categories.size() > 256) return "more than 256 memory categories";
    read_strings(root, "names", out.names);
    if (out.names.empty()) out.names.emplace_back("");
    simdjson::dom::array timeline;
    if (root["timeline"].get_array().get(timeline)) return "no \"timeline\" array";
    for (simdjson::dom::element row : timeline) {
        simdjson::dom::array a;
        if (row.get_array().get(a) || a.size() < 4) {
            ++out.skipped_rows;
            continue;
        }
        double t_us = 0;
        std::int64_t delta = 0, cat = 0, name = 0;
        std::uint64_t address = 0;
        if (!json::number(a.at(0), t_us) || !(std::fabs(t_us) < kMaxUs) ||
            !read_int64(a.at(1).value_unsafe(), delta) ||
            !read_int64(a.at(2).value_unsafe(), cat) || cat < 0 ||
            cat >= static_cast<std::int64_t>(out.categories.size()) ||
            !read_int64(a.at(3).value_unsafe(), name)) {
            ++out.skipped_rows;
            continue;
        }
        if (a.size() >= 5) {
            simdjson::dom::element addr;
            if (!a.at(4).get(addr)) read_uint64(addr, address);
        }
        if (name < 0 || name >= static_cast<std::int64_t>(out.names.size())) name = 0;
        MemoryRow r;
        r.t_ns = std::llround(t_us * 1000.0);
        r.bytes_delta = delta;
        r.category = static_cast<std::uint32_t>(cat);
        r.name = static_cast<std::uint32_t>(name);
        r.address = address;
        out.rows.push_back(r);
    }
    // Rows are written in order; keep the order of equal times when sorting another writer's.
    if (!std::is_sorted(out.rows.begin(), out.rows.end(),
                        [](const MemoryRow& a, const MemoryRow& b) { return a.t_ns < b.t_ns; })) {
        std::stable_sort(out.rows.begin(), out.rows.end(),
                         [](const MemoryRow& a, const MemoryRow& b) { return a.t_ns < b.t_ns; });
    }
    build_series(out);
    return "";
}

bool memory_from_counters(const TraceData& trace, MemoryData& out) {
    std::vector<const CounterSeries*> series;
    for (const CounterSeries& s : trace.counters) {
        if (s.name == "memory" && !s.t_ns.empty()) series.push_back(&s);
    }
    if (series.empty()) return false;
    out = MemoryData{};
    out.from_counters = true;
    for (const CounterSeries* s : series)
        out.categories.push_back(s->key);
    std::vector<std::int64_t> times;
    for (const CounterSeries* s : series)
        times.insert(times.end(), s->t_ns.begin(), s->t_ns.end());
    std::sort(times.begin(), times.end());
    times.erase(std::unique(times.begin(), times.end()), times.end());
    std::vector<std::size_t> pos(series.size(), 0);
    for (std::int64_t t : times) {
        double total = 0;
        for (std::size_t c = 0; c < series.size(); ++c) {
            const CounterSeries& s = *series[c];
            while (pos[c] + 1 < s.t_ns.size() && s.t_ns[pos[c] + 1] <= t)
                ++pos[c];
            const double v = s.t_ns[pos[c]] <= t ? s.values[pos[c]] : 0.0;
            out.by_category.push_back(v);
            total += v;
        }
        out.t_ns.push_back(t);
        out.total.push_back(total);
        if (total > out.peak_bytes) {
            out.peak_bytes = total;
            out.peak_t_ns = t;
        }
    }
    return true;
}

std::vector<LiveBlock> RunData::live_at(std::int64_t t_ns) const {
    std::unordered_map<std::uint64_t, std::size_t> live;  // address -> row
    for (std::size_t i = 0; i < memory.rows.size() && memory.rows[i].t_ns <= t_ns; ++i) {
        const MemoryRow& r = memory.rows[i];
        if (r.bytes_delta > 0) {
            live[r.address] = i;
        } else if (r.bytes_delta < 0) {
            live.erase(r.address);
        }
    }
    std::vector<LiveBlock> out;
    out.reserve(live.size());
    for (const auto& [address, i] : live) {
        const MemoryRow& r = memory.rows[i];
        LiveBlock b;
        b.category = memory.categories[r.category];
        b.name = memory.names[r.name];
        b.bytes = r.bytes_delta;
        b.t_allocated_ns = r.t_ns;
        if (has_trace) {
            std::uint32_t e = trace.host_event_at(r.t_ns, "op");
            if (e == kNone) e = trace.host_event_at(r.t_ns, "");
            if (e != kNone) b.op = trace.name_of(trace.events[e]);
        }
        out.push_back(std::move(b));
    }
    std::sort(out.begin(), out.end(), [](const LiveBlock& a, const LiveBlock& b) {
        if (a.bytes != b.bytes) return a.bytes > b.bytes;
        return a.t_allocated_ns < b.t_allocated_ns;
    });
    return out;
}

std::string parse_report_document(simdjson::dom::element root, ReportData& out) {
    out = ReportData{};
    if (root.type() != simdjson::dom::element_type::OBJECT)
        return "not a run report: expected an object";
    simdjson::dom::element model;
    if (!root["model"].get(model) && model.type() == simdjson::dom::element_type::OBJECT) {
        out.model_json = simdjson::minify(model);
        std::string_view name;
        if (!model["name"].get_string().get(name)) out.model_name = std::string(name);
    }
    simdjson::dom::object run;
    if (!root["run"].get_object().get(run)) {
        for (simdjson::dom::key_value_pair kv : run) {
            out.run.emplace_back(std::string(kv.key), json::scalar_text(kv.value));
        }
    }
    simdjson::dom::object predicted;
    if (!root["predicted"].get_object().get(predicted)) {
        for (simdjson::dom::key_value_pair kv : predicted) {
            double v = 0;
            if (json::number(kv.value, v) && std::isfinite(v))
                out.predicted[std::string(kv.key)] = v;
        }
    }
    simdjson::dom::object measured;
    if (!root["measured"].get_object().get(measured)) {
        for (simdjson::dom::key_value_pair kv : measured) {
            double v = 0;
            simdjson::dom::object sub;
            if (kv.key == "peak_bytes" && !kv.value.get_object().get(sub)) {
                for (simdjson::dom::key_value_pair p : sub) {
                    if (json::number(p.value, v) && std::isfinite(v))
                        out.measured_peak[std::string(p.key)] = v;
                }
            } else if (json::number(kv.value, v) && std::isfinite(v)) {
                out.measured[std::string(kv.key)] = v;
            }
        }
    }
    simdjson::dom::array steps;
    if (!root["steps"].get_array().get(steps)) {
        for (simdjson::dom::element s : steps) {
            double v = 0;
            if (s.type() == simdjson::dom::element_type::OBJECT && json::number(s["seconds"], v) &&
                std::isfinite(v)) {
                out.step_seconds.push_back(v);
            }
        }
    }
    simdjson::dom::object comm;
    if (!root["communication"].get_object().get(comm)) {
        for (simdjson::dom::key_value_pair kv : comm) {
            double v = 0;
            simdjson::dom::object sub;
            std::string_view text;
            if (json::number(kv.value, v) && std::isfinite(v)) {
                out.communication[std::string(kv.key)] = v;
            } else if (kv.key == "backend" && !kv.value.get_string().get(text)) {
                out.comm_backend = std::string(text);
            } else if (!kv.value.get_object().get(sub)) {
                for (simdjson::dom::key_value_pair p : sub) {
                    if (json::number(p.value, v) && std::isfinite(v))
                        out.communication[std::string(kv.key) + "." + std::string(p.key)] = v;
                }
            }
        }
    }
    if (!root["steps"].get_array().get(steps)) {
        for (simdjson::dom::element s : steps) {
            double v = 0;
            if (s.type() == simdjson::dom::element_type::OBJECT &&
                json::number(s["comm_seconds"], v) && std::isfinite(v)) {
                out.comm_seconds.push_back(v);
            }
        }
    }
    if (out.run.empty() && out.predicted.empty() && out.measured.empty()) {
        return "no \"run\", \"predicted\" or \"measured\" (not a napkin run report)";
    }
    return "";
}

std::string ReportData::run_value(std::string_view key) const {
    for (const auto& [k, v] : run) {
        if (k == key) return v;
    }
    return "";
}

double ReportData::measured_value(std::string_view key) const {
    auto it = measured.find(std::string(key));
    return it == measured.end() ? std::numeric_limits<double>::quiet_NaN() : it->second;
}

double ReportData::comm_value(std::string_view key) const {
    auto it = communication.find(std::string(key));
    return it == communication.end() ? std::numeric_limits<double>::quiet_NaN() : it->second;
}

double ReportData::predicted_total_bytes() const {
    double total = 0;
    for (const auto& [k, v] : predicted) {
        if (k.find("flops") == std::string::npos) total += v;
    }
    return total;
}

double ReportData::median_step_seconds() const {
    if (step_seconds.empty()) return std::numeric_limits<double>::quiet_NaN();
    std::vector<double> s = step_seconds;
    std::sort(s.begin(), s.end());
    const std::size_t n = s.size();
    return n % 2 == 1 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

}  // namespace napkin::viewer
