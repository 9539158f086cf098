// Device profiles: the tables' interpolation, the one reader and the one writer
// (estimator/device_profile.h; the format in docs/FORMATS.md, "Device profiles").
#include "estimator/device_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <tuple>
#include <utility>

#include "core/bounded_read.h"
#include "core/check.h"
#include "core/durable_file.h"
#include "core/json_reader.h"

namespace napkin {

using json = nlohmann::json;

namespace {

// Inverse-distance weighting of log values over the nearest points: each point's distance is
// the Euclidean one in log2 coordinates, its weight 1 / d^3, over the kNearest closest (so far
// points do not flatten a well-sampled neighbourhood). At a point, that point's value.
template <std::size_t D>
double idw_log(const std::vector<std::array<double, D + 1>>& points,
               const std::array<double, D>& at) {
    constexpr std::size_t kNearest = 4;
    std::vector<std::pair<double, double>> by_distance;  // (d^2, log value)
    by_distance.reserve(points.size());
    for (const auto& p : points) {
        double d2 = 0;
        for (std::size_t i = 0; i < D; ++i)
            d2 += (p[i] - at[i]) * (p[i] - at[i]);
        by_distance.emplace_back(d2, p[D]);
    }
    const std::size_t n = std::min(kNearest, by_distance.size());
    std::partial_sort(by_distance.begin(), by_distance.begin() + static_cast<std::ptrdiff_t>(n),
                      by_distance.end());
    if (by_distance.front().first < 1e-12) return by_distance.front().second;
    double sum_w = 0, sum = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const double w = 1.0 / std::pow(by_distance[i].first, 1.5);
        sum_w += w;
        sum += w * by_distance[i].second;
    }
    return sum / sum_w;
}

double log2_of(std::int64_t v) {
    return std::log2(static_cast<double>(std::max<std::int64_t>(v, 1)));
}

}  // namespace

double GemmTable::flops_per_s(std::int64_t m, std::int64_t n, std::int64_t k) const {
    NAPKIN_ASSERT(!points.empty(), "a GEMM table without points");
    std::vector<std::array<double, 4>> logs;
    logs.reserve(points.size());
    for (const GemmPoint& p : points)
        logs.push_back({log2_of(p.m), log2_of(p.n), log2_of(p.k), std::log(p.flops_per_s)});
    return std::exp(idw_log<3>(logs, {log2_of(m), log2_of(n), log2_of(k)}));
}

double AttentionTable::flops_per_s(std::int64_t seq_len, std::int64_t head_dim,
                                   std::int64_t batch_heads) const {
    NAPKIN_ASSERT(!points.empty(), "an attention table without points");
    std::vector<std::array<double, 4>> logs;
    logs.reserve(points.size());
    for (const AttentionPoint& p : points) {
        logs.push_back({log2_of(p.seq_len), log2_of(p.head_dim), log2_of(p.batch_heads),
                        std::log(p.flops_per_s)});
    }
    return std::exp(idw_log<3>(logs, {log2_of(seq_len), log2_of(head_dim), log2_of(batch_heads)}));
}

double StreamTable::bytes_per_s(double bytes) const {
    NAPKIN_ASSERT(!points.empty(), "a streaming table without points");
    // Points are sorted by bytes (the reader and the calibration keep them so).
    if (bytes <= points.front().bytes) return points.front().bytes_per_s;
    if (bytes >= points.back().bytes) return points.back().bytes_per_s;
    const auto hi = std::upper_bound(points.begin(), points.end(), bytes,
                                     [](double b, const StreamPoint& p) { return b < p.bytes; });
    const StreamPoint& a = *(hi - 1);
    const StreamPoint& b = *hi;
    const double f = std::log(bytes / a.bytes) / std::log(b.bytes / a.bytes);
    return std::exp(std::log(a.bytes_per_s) +
                    f * (std::log(b.bytes_per_s) - std::log(a.bytes_per_s)));
}

double DeviceProfile::peak_for(DType gemm_dtype) const {
    for (const auto& [dtype, peak] : peak_flops_per_s) {
        if (dtype == gemm_dtype) return peak;
    }
    return 0;
}

const ComputeSection* DeviceProfile::section(int threads) const {
    const ComputeSection* best = nullptr;
    for (const ComputeSection& s : compute) {
        if (best == nullptr) {
            best = &s;
        } else if (threads <= 0) {
            if (s.threads > best->threads) best = &s;
        } else if (std::abs(s.threads - threads) < std::abs(best->threads - threads)) {
            best = &s;
        }
    }
    return best;
}

const CollectiveTable* DeviceProfile::collective(Collective op, int world) const {
    for (const CollectiveTable& c : collectives) {
        if (c.op == op && c.world == world) return &c;
    }
    return nullptr;
}

std::string profile_mismatch(const DeviceProfile& p, const DeviceIdentity& present) {
    const DeviceIdentity& d = p.device;
    auto describe = [](const DeviceIdentity& x) {
        std::string s = "'" + x.name + "'";
        if (x.kind == DeviceKind::cpu)
            s += " with " + std::to_string(x.logical_cpus) + " logical CPUs";
        if (!x.gpu.empty()) s += " (" + x.gpu + ")";
        return s;
    };
    bool same = d.kind == present.kind;
    if (same && d.kind == DeviceKind::cpu)
        same = d.name == present.name && d.logical_cpus == present.logical_cpus;
    // A GPU matches by its table entry when both name one (an estimate knows only that), else
    // by the driver's name.
    if (same && d.kind == DeviceKind::cuda)
        same =
            !d.gpu.empty() && !present.gpu.empty() ? d.gpu == present.gpu : d.name == present.name;
    if (same) return "";
    return "measured on " + describe(d) + ", not on " + describe(present);
}

LineFit fit_line(const std::vector<std::pair<double, double>>& xy) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    const auto n = static_cast<double>(xy.size());
    for (const auto& [x, y] : xy) {
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
    }
    const double det = n * sxx - sx * sx;
    LineFit f;
    if (det > 0) {
        f.intercept = (sy * sxx - sx * sxy) / det;
        f.slope = (n * sxy - sx * sy) / det;
    } else {
        f.intercept = n > 0 ? sy / n : 0.0;
    }
    if (f.intercept < 0 || f.slope < 0) {
        f.intercept = std::max(f.intercept, 0.0);
        double num = 0;
        for (const auto& [x, y] : xy)
            num += x * (y - f.intercept);
        f.slope = sxx > 0 ? std::max(num / sxx, 0.0) : 0.0;
    }
    return f;
}

namespace {

// Each of `now`'s tables replaces the one of `into` with the same key, or joins them.
template <class Table, class Key>
void merge_tables(std::vector<Table>& into, const std::vector<Table>& now, Key key) {
    for (const Table& t : now) {
        std::erase_if(into, [&](const Table& o) { return key(o) == key(t); });
        into.push_back(t);
    }
}

}  // namespace

DeviceProfile merge_profiles(DeviceProfile old, const DeviceProfile& now) {
    for (const ComputeSection& s : now.compute) {
        const auto same =
            std::find_if(old.compute.begin(), old.compute.end(),
                         [&](const ComputeSection& o) { return o.threads == s.threads; });
        if (same == old.compute.end()) {
            old.compute.push_back(s);
            continue;
        }
        merge_tables(same->gemm, s.gemm,
                     [](const GemmTable& t) { return std::pair(t.dtype, t.pass); });
        merge_tables(same->attention, s.attention, [](const AttentionTable& t) {
            return std::tuple(t.impl, t.dtype, t.causal, t.direction);
        });
        merge_tables(same->streaming, s.streaming,
                     [](const StreamTable& t) { return std::pair(t.op, t.dtype); });
    }
    merge_tables(old.collectives, now.collectives,
                 [](const CollectiveTable& c) { return std::pair(c.op, c.world); });
    std::sort(
        old.compute.begin(), old.compute.end(),
        [](const ComputeSection& a, const ComputeSection& b) { return a.threads > b.threads; });
    old.made.command += "; " + now.made.command;
    old.made.conditions += "; " + now.made.conditions;
    return old;
}

CollectiveTable fit_collective(Collective op, int world,
                               const std::vector<std::pair<double, double>>& bytes_seconds) {
    NAPKIN_ASSERT(!bytes_seconds.empty(), "no collective points to fit");
    CollectiveTable t;
    t.op = op;
    t.world = world;
    for (const auto& [bytes, seconds] : bytes_seconds)
        t.points.push_back({bytes, seconds > 0 ? bytes / seconds : 0.0});
    std::sort(t.points.begin(), t.points.end(),
              [](const StreamPoint& a, const StreamPoint& b) { return a.bytes < b.bytes; });
    const LineFit f = fit_line(bytes_seconds);
    t.latency_seconds = f.intercept;
    t.bytes_per_s = f.slope > 0 ? 1.0 / f.slope : 0.0;
    return t;
}

// ---- Reading ---------------------------------------------------------------------------------

namespace {

// A row of `n` positive numbers: [a, b, ...].
std::vector<double> row(const JsonField& f, std::size_t n) {
    if (!f.present() || !f.value().is_array() || f.value().size() != n)
        f.expected("an array of " + std::to_string(n) + " positive numbers");
    return f.elements(&JsonField::positive);
}

template <class Read>
auto nonempty_points(const JsonField& f, Read read) {
    auto points = f.elements(read);
    if (points.empty()) f.expected("an array of points");
    return points;
}

GemmTable read_gemm(const JsonField& f) {
    GemmTable t;
    t.dtype = f["dtype"].enumeration(kDTypeNames);
    t.pass = f["pass"].enumeration(kGemmPassNames);
    t.points = nonempty_points(f["points"], [](const JsonField& p) {
        const std::vector<double> r = row(p, 4);
        return GemmPoint{static_cast<std::int64_t>(r[0]), static_cast<std::int64_t>(r[1]),
                         static_cast<std::int64_t>(r[2]), r[3]};
    });
    return t;
}

AttentionTable read_attention(const JsonField& f) {
    AttentionTable t;
    t.impl = f["impl"].enumeration(kAttentionNames);
    t.dtype = f["dtype"].enumeration(kDTypeNames);
    t.causal = f["causal"].boolean();
    t.direction = f["direction"].enumeration(kDirectionNames);
    t.points = nonempty_points(f["points"], [](const JsonField& p) {
        const std::vector<double> r = row(p, 4);
        return AttentionPoint{static_cast<std::int64_t>(r[0]), static_cast<std::int64_t>(r[1]),
                              static_cast<std::int64_t>(r[2]), r[3]};
    });
    return t;
}

std::vector<StreamPoint> read_stream_points(const JsonField& f) {
    std::vector<StreamPoint> points = nonempty_points(f, [](const JsonField& p) {
        const std::vector<double> r = row(p, 2);
        return StreamPoint{r[0], r[1]};
    });
    std::sort(points.begin(), points.end(),
              [](const StreamPoint& a, const StreamPoint& b) { return a.bytes < b.bytes; });
    return points;
}

ComputeSection read_section(const JsonField& f) {
    ComputeSection s;
    s.threads = f["threads"].integer<int>(0);
    s.gemm = f["gemm"].elements(read_gemm);
    s.attention = f["attention"].elements(read_attention);
    s.streaming = f["streaming"].elements([](const JsonField& t) {
        return StreamTable{t["op"].enumeration(kStreamOpNames), t["dtype"].enumeration(kDTypeNames),
                           read_stream_points(t["points"])};
    });
    s.overhead = {f["overhead"]["op_seconds"].non_negative(),
                  f["overhead"]["step_seconds"].non_negative()};
    return s;
}

CollectiveTable read_collective(const JsonField& f) {
    CollectiveTable c;
    c.op = f["op"].enumeration(kCollectiveNames);
    c.world = f["world"].integer<int>(1);
    c.latency_seconds = f["latency_seconds"].non_negative();
    c.bytes_per_s = f["bytes_per_s"].positive();
    c.points = read_stream_points(f["points"]);
    return c;
}

void read_identity(const JsonField& f, DeviceProfile& p) {
    const JsonField d = f["device"];
    p.device.kind = d["kind"].enumeration(kDeviceKindNames);
    p.device.name = d["name"].string();
    if (p.device.kind == DeviceKind::cpu) p.device.logical_cpus = d["logical_cpus"].integer<int>(1);
    p.device.gpu = d["gpu"].optional(&JsonField::string).value_or("");
    p.device.memory_bytes = d["memory_bytes"].positive();
    const JsonField m = f["made"];
    p.made = {m["source"].string(), m["command"].string(), m["build"].string(), m["date"].string(),
              m["conditions"].string()};
}

}  // namespace

DeviceProfile parse_device_profile(std::string_view text) {
    json doc;
    try {
        doc = json::parse(text.begin(), text.end());
    } catch (const json::exception& e) {
        throw InputError(std::string("not valid JSON (") + e.what() + ")");
    }
    // Profiles hold measured figures; a tool that rewrites one through doubles writes 8.0.
    const JsonSource source =
        JsonSource::raising<InputError>("", JsonSource::Integers::integral_values);
    const JsonField f = JsonField(doc, source).object();
    f["schema"].schema_version(kProfileSchemaName, kProfileSchemaVersion);
    DeviceProfile p;
    read_identity(f, p);
    f["peak_flops_per_s"].members([&](const std::string& name, const JsonField& peak) {
        const auto dtype = find_enum(kDTypeNames, name);
        if (!dtype) peak.fail("unknown dtype (expected " + enum_choices(kDTypeNames) + ")");
        p.peak_flops_per_s.emplace_back(*dtype, peak.positive());
    });
    if (p.peak_flops_per_s.empty()) f["peak_flops_per_s"].expected("a peak for some dtype");
    p.memory_bytes_per_s = f["memory_bytes_per_s"].positive();
    p.compute = f["compute"].elements(read_section);
    if (p.compute.empty()) f["compute"].expected("at least one section");
    p.host_device = f["host_device"].optional([](const JsonField& h) {
        return HostDeviceCopy{h["to_device_bytes_per_s"].positive(),
                              h["to_host_bytes_per_s"].positive(),
                              h["host_optimizer_bytes_per_s"].positive()};
    });
    p.collectives = f["collectives"].elements(read_collective);
    p.gaps = f["gaps"].elements(&JsonField::string);
    return p;
}

DeviceProfile read_device_profile(const std::string& path) {
    // Bounded and never blocking (core/bounded_read.h): a FIFO or /dev/zero is refused at once.
    std::string text;
    if (std::string err = read_bounded_file(path, kMaxProfileBytes, text); !err.empty())
        throw InputError(path + ": " + err);
    try {
        return parse_device_profile(text);
    } catch (const InputError& e) {
        throw InputError(path + ": " + e.what());
    }
}

// ---- Writing ---------------------------------------------------------------------------------

json to_json(const DeviceProfile& p) {
    json j;
    j["schema"] = std::string(kProfileSchemaName) + "/" + std::to_string(kProfileSchemaVersion);
    j["device"] = {{"kind", enum_name(kDeviceKindNames, p.device.kind)}, {"name", p.device.name}};
    if (p.device.kind == DeviceKind::cpu) j["device"]["logical_cpus"] = p.device.logical_cpus;
    if (!p.device.gpu.empty()) j["device"]["gpu"] = p.device.gpu;
    j["device"]["memory_bytes"] = p.device.memory_bytes;
    j["made"] = {{"source", p.made.source},
                 {"command", p.made.command},
                 {"build", p.made.build},
                 {"date", p.made.date},
                 {"conditions", p.made.conditions}};
    j["peak_flops_per_s"] = json::object();
    for (const auto& [dtype, peak] : p.peak_flops_per_s)
        j["peak_flops_per_s"][std::string(dtype_name(dtype))] = peak;
    j["memory_bytes_per_s"] = p.memory_bytes_per_s;
    j["compute"] = json::array();
    for (const ComputeSection& s : p.compute) {
        json sj{
            {"threads", s.threads},
            {"gemm", json::array()},
            {"attention", json::array()},
            {"streaming", json::array()},
            {"overhead",
             {{"op_seconds", s.overhead.op_seconds}, {"step_seconds", s.overhead.step_seconds}}}};
        for (const GemmTable& t : s.gemm) {
            json pts = json::array();
            for (const GemmPoint& q : t.points)
                pts.push_back({q.m, q.n, q.k, q.flops_per_s});
            sj["gemm"].push_back({{"dtype", dtype_name(t.dtype)},
                                  {"pass", enum_name(kGemmPassNames, t.pass)},
                                  {"points", pts}});
        }
        for (const AttentionTable& t : s.attention) {
            json pts = json::array();
            for (const AttentionPoint& q : t.points)
                pts.push_back({q.seq_len, q.head_dim, q.batch_heads, q.flops_per_s});
            sj["attention"].push_back({{"impl", enum_name(kAttentionNames, t.impl)},
                                       {"dtype", dtype_name(t.dtype)},
                                       {"causal", t.causal},
                                       {"direction", enum_name(kDirectionNames, t.direction)},
                                       {"points", pts}});
        }
        for (const StreamTable& t : s.streaming) {
            json pts = json::array();
            for (const StreamPoint& q : t.points)
                pts.push_back({q.bytes, q.bytes_per_s});
            sj["streaming"].push_back({{"op", enum_name(kStreamOpNames, t.op)},
                                       {"dtype", dtype_name(t.dtype)},
                                       {"points", pts}});
        }
        j["compute"].push_back(std::move(sj));
    }
    j["host_device"] = nullptr;
    if (p.host_device) {
        j["host_device"] = {
            {"to_device_bytes_per_s", p.host_device->to_device_bytes_per_s},
            {"to_host_bytes_per_s", p.host_device->to_host_bytes_per_s},
            {"host_optimizer_bytes_per_s", p.host_device->host_optimizer_bytes_per_s}};
    }
    j["collectives"] = json::array();
    for (const CollectiveTable& c : p.collectives) {
        json pts = json::array();
        for (const StreamPoint& q : c.points)
            pts.push_back({q.bytes, q.bytes_per_s});
        j["collectives"].push_back({{"op", enum_name(kCollectiveNames, c.op)},
                                    {"world", c.world},
                                    {"latency_seconds", c.latency_seconds},
                                    {"bytes_per_s", c.bytes_per_s},
                                    {"points", pts}});
    }
    j["gaps"] = p.gaps;
    return j;
}

void write_device_profile(const DeviceProfile& p, const std::string& path) {
    write_file_durably(path, to_json(p).dump(2) + "\n");
}

}  // namespace napkin
