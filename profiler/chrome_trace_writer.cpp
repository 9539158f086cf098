#include "profiler/chrome_trace_writer.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <utility>

namespace napkin::profiler {

namespace {

using ojson = nlohmann::ordered_json;

// Invalid UTF-8 in a name must not throw out of a writer: replace it.
std::string dump(const ojson& j) {
    return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string dump(const nlohmann::json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ojson arg_value(const ArgValue& v) {
    return std::visit([](const auto& x) { return ojson(x); }, v);
}

// Key order is for people reading the file: name, cat, ph, ts, dur, pid, tid, then the rest.
ojson event_head(std::string_view name, std::string_view category, const char* phase,
                 std::int64_t t_ns) {
    ojson j{{"name", name}};
    if (!category.empty()) j["cat"] = category;
    j["ph"] = phase;
    j["ts"] = trace_us(t_ns);
    return j;
}

}  // namespace

double trace_dur_us(std::int64_t start_ns, std::int64_t dur_ns) {
    const double ts = trace_us(start_ns), end = trace_us(start_ns + dur_ns);
    const double quotient = trace_us(dur_ns);  // "98.37": kept whenever it adds up exactly
    if (ts + quotient == end) return quotient;
    double dur = end - ts;  // exact when ts >= end / 2 (Sterbenz), else within half an ulp
    // Round-to-nearest can land ts + dur one ulp either side of end: step onto it from below.
    for (int i = 0; i < 4 && dur > 0 && ts + dur > end; ++i)
        dur = std::nextafter(dur, 0.0);
    for (int i = 0; i < 4 && ts + dur < end; ++i) {
        const double up = std::nextafter(dur, end);
        if (ts + up > end) break;
        dur = up;
    }
    return dur;
}

// ---- ChromeTraceWriter --------------------------------------------------------------------

ojson range_args(const RangeEvent& e) {
    ojson args = ojson::object();
    if (e.flops > 0 || e.bytes > 0) {
        args["flops"] = e.flops;
        args["bytes"] = e.bytes;
        if (e.dur_ns > 0) {
            // flop / ns = GFLOP/s and byte / ns = GB/s (10^9, not 2^30).
            const double dur = static_cast<double>(e.dur_ns);
            args["achieved_gflop_per_s"] = static_cast<double>(e.flops) / dur;
            args["achieved_gb_per_s"] = static_cast<double>(e.bytes) / dur;
        }
        if (e.bytes > 0) {
            args["flop_per_byte"] = static_cast<double>(e.flops) / static_cast<double>(e.bytes);
        }
    }
    for (const auto& a : e.args)
        args[a.key] = arg_value(a.value);
    return args;
}

ChromeTraceWriter::ChromeTraceWriter(std::filesystem::path path, ChromeTraceOptions options)
    : file_(std::move(path)), options_(std::move(options)) {
    if (!options_.other_data.is_object()) options_.other_data = nlohmann::json::object();
    file_.write("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    try {
        write_object(ojson{{"name", "process_name"},
                           {"ph", "M"},
                           {"pid", options_.pid},
                           {"args", {{"name", options_.process_name}}}});
        write_object(ojson{{"name", "process_sort_index"},
                           {"ph", "M"},
                           {"pid", options_.pid},
                           {"args", {{"sort_index", options_.process_sort_index}}}});
    } catch (...) {
        ++events_failed_;
    }
}

void ChromeTraceWriter::write_object(const ojson& event) {
    if (closed_) return;
    std::string text = events_written_ == 0 ? std::string() : std::string(",\n");
    text += dump(event);
    file_.write(text);
    ++events_written_;
}

void ChromeTraceWriter::write_track(const Track& track) {
    if (closed_ || !ok()) return;
    try {
        write_object(ojson{{"name", "thread_name"},
                           {"ph", "M"},
                           {"pid", options_.pid},
                           {"tid", track.id},
                           {"args", {{"name", track.name}}}});
        write_object(ojson{{"name", "thread_sort_index"},
                           {"ph", "M"},
                           {"pid", options_.pid},
                           {"tid", track.id},
                           {"args", {{"sort_index", track.sort_index}}}});
    } catch (...) {
        ++events_failed_;
    }
}

void ChromeTraceWriter::write_tracks(const std::vector<Track>& tracks) {
    for (const auto& t : tracks)
        write_track(t);
}

void ChromeTraceWriter::write_range(const RangeEvent& e) {
    if (closed_ || !ok()) return;
    try {
        ojson j = event_head(e.name, enum_name(kCategoryNames, e.category), "X", e.start_ns);
        j["dur"] = trace_dur_us(e.start_ns, e.dur_ns < 0 ? 0 : e.dur_ns);
        j["pid"] = options_.pid;
        j["tid"] = e.track;
        ojson args = range_args(e);
        if (!args.empty()) j["args"] = std::move(args);
        write_object(j);
    } catch (...) {  // an unserializable event is lost and counted, not the trace
        ++events_failed_;
    }
}

void ChromeTraceWriter::write_counter(const CounterEvent& e) {
    if (closed_ || !ok() || e.values.empty()) return;
    try {
        // Counters belong to the process, not to a track: no "tid".
        ojson j = event_head(e.name, "", "C", e.t_ns);
        j["pid"] = options_.pid;
        ojson args = ojson::object();
        for (const auto& v : e.values)
            args[v.series] = v.value;
        j["args"] = std::move(args);
        write_object(j);
    } catch (...) {
        ++events_failed_;
    }
}

void ChromeTraceWriter::write_instant(const InstantEvent& e) {
    if (closed_ || !ok()) return;
    try {
        ojson j = event_head(e.name, enum_name(kCategoryNames, e.category), "i", e.t_ns);
        j["pid"] = options_.pid;
        j["tid"] = e.track;
        j["s"] = "t";
        if (!e.args.empty()) {
            ojson args = ojson::object();
            for (const auto& a : e.args)
                args[a.key] = arg_value(a.value);
            j["args"] = std::move(args);
        }
        write_object(j);
    } catch (...) {
        ++events_failed_;
    }
}

void ChromeTraceWriter::write_flow(const FlowEvent& e) {
    if (closed_ || !ok()) return;
    try {
        const char* phase = e.phase == FlowPhase::start ? "s" : "f";
        ojson j = event_head(e.name, enum_name(kCategoryNames, e.category), phase, e.t_ns);
        j["pid"] = options_.pid;
        j["tid"] = e.track;
        j["id"] = e.id;
        // The end binds to the range enclosing it (the kernel), not to the next one.
        if (e.phase == FlowPhase::end) j["bp"] = "e";
        write_object(j);
    } catch (...) {
        ++events_failed_;
    }
}

void ChromeTraceWriter::write(const Event& event) {
    std::visit(
        [this](const auto& e) {
            using T = std::decay_t<decltype(e)>;
            if constexpr (std::is_same_v<T, RangeEvent>) {
                write_range(e);
            } else if constexpr (std::is_same_v<T, CounterEvent>) {
                write_counter(e);
            } else if constexpr (std::is_same_v<T, InstantEvent>) {
                write_instant(e);
            } else {
                write_flow(e);
            }
        },
        event);
}

void ChromeTraceWriter::write(const std::vector<Event>& events) {
    for (const auto& e : events)
        write(e);
}

void ChromeTraceWriter::set_other_data(const std::string& key, nlohmann::json value) {
    try {
        options_.other_data[key] = std::move(value);
    } catch (...) {  // out of memory: the key is missing from the metadata, the trace is whole
    }
}

WriteResult ChromeTraceWriter::close() {
    if (closed_) return close_result_;
    std::string tail;
    try {
        nlohmann::json other = options_.other_data;
        other["schema"] = "napkin-trace/1";
        other["events_written"] = events_written_;
        other["events_failed"] = events_failed_;
        tail = "\n],\"otherData\":" + dump(other) + "}\n";
    } catch (...) {  // out of memory: the trace is still whole, without its run metadata
        tail = "\n],\"otherData\":{}}\n";
    }
    file_.write(tail);
    closed_ = true;
    close_result_ = file_.commit() ? WriteResult{} : WriteResult{false, file_.error()};
    return close_result_;
}

}  // namespace napkin::profiler
