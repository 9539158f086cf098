// memory.json (napkin-memory/1), and what the panels derive from it: memory by category over
// time, the live set at a time.
#include <algorithm>
#include <cmath>
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

}  // namespace napkin::viewer
