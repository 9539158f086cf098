// Trace loading: Chrome Trace Event JSON (napkin's, or any other tool's) into TraceData.
// See run_data.h for the rules; docs/FORMATS.md for napkin's own format.
#include "viewer/run_data.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "viewer/run_json.h"

namespace napkin::viewer {

namespace {

namespace ondemand = simdjson::ondemand;

constexpr std::size_t kMaxWarnings = 5;
constexpr std::size_t kMaxOtherArgsBytes = 512;

void warn(TraceData& out, std::string msg) {
    if (out.warnings.size() < kMaxWarnings) out.warnings.push_back(std::move(msg));
}

// One entry of an event's "args", read before the phase is known (fields come in any order).
// Views point into the parser's buffers, valid while the document is iterated.
struct ArgItem {
    std::string_view key;
    ondemand::json_type type = ondemand::json_type::null;
    double number = 0;      // type number
    std::string_view text;  // type string (unescaped), number/boolean/null (raw token)
};

// Reads a value's scalar as text: strings unescaped, numbers and literals as written, containers
// as a placeholder (skipped unread). Errors other than a type mismatch abort the document.
simdjson::error_code scalar_text(ondemand::value& v, ondemand::json_type& type,
                                 std::string_view& out) {
    if (auto err = v.type().get(type)) return err;
    switch (type) {
        case ondemand::json_type::string:
            return v.get_string().get(out);
        case ondemand::json_type::object:
            out = "{...}";
            return simdjson::SUCCESS;
        case ondemand::json_type::array:
            out = "[...]";
            return simdjson::SUCCESS;
        default: {
            out = v.raw_json_token();
            while (!out.empty() && (out.back() == ' ' || out.back() == '\n' || out.back() == '\r' ||
                                    out.back() == '\t' || out.back() == ',' || out.back() == '}' ||
                                    out.back() == ']')) {
                out.remove_suffix(1);
            }
            return simdjson::SUCCESS;
        }
    }
}

class TraceBuilder {
public:
    explicit TraceBuilder(TraceData& out) : out_(out) {}

    // An error here is the document's (syntax, truncation, depth): parsing stops.
    simdjson::error_code add_event(ondemand::value ev, std::size_t index);
    void finish();

private:
    std::uint32_t lane_of(std::string_view pid, std::string_view tid);
    void skip(std::size_t index, std::string_view name, const char* why);
    void metadata(std::string_view name, std::string_view pid, std::string_view tid);
    void counter(std::string_view pid, std::string_view name, std::int64_t t_ns);
    std::uint32_t store_args();
    simdjson::error_code read_args(ondemand::value& v);

    TraceData& out_;
    std::unordered_map<std::string, std::uint32_t> lane_ids_;
    std::string last_pid_, last_tid_;
    std::uint32_t last_lane_ = kNone;
    std::unordered_map<std::string, ProcessInfo> processes_;
    std::vector<std::vector<Event>> open_;  // per lane: "B" ranges waiting for their "E"
    std::vector<RawFlow> flows_;
    std::unordered_map<std::string, std::uint32_t> counter_ids_;
    std::vector<ArgItem> args_;  // the current event's
};

std::uint32_t TraceBuilder::lane_of(std::string_view pid, std::string_view tid) {
    if (last_lane_ != kNone && pid == last_pid_ && tid == last_tid_) return last_lane_;
    std::string key;
    key.reserve(pid.size() + tid.size() + 1);
    key.append(pid).push_back('\x1f');
    key.append(tid);
    auto [it, inserted] =
        lane_ids_.try_emplace(std::move(key), static_cast<std::uint32_t>(out_.lanes.size()));
    if (inserted) {
        Lane lane;
        lane.pid = std::string(pid);
        lane.tid = std::string(tid);
        lane.name = lane.tid;
        lane.sort = json::leading_integer(tid);
        out_.lanes.push_back(std::move(lane));
        open_.emplace_back();
    }
    last_pid_.assign(pid);
    last_tid_.assign(tid);
    last_lane_ = it->second;
    return it->second;
}

void TraceBuilder::skip(std::size_t index, std::string_view name, const char* why) {
    ++out_.skipped_events;
    char buf[160];
    std::snprintf(buf, sizeof buf, "event %zu ('%.*s'): %s", index,
                  static_cast<int>(std::min<std::size_t>(name.size(), 60)), name.data(), why);
    warn(out_, buf);
}

void TraceBuilder::metadata(std::string_view name, std::string_view pid, std::string_view tid) {
    for (const ArgItem& a : args_) {
        const bool text = a.type == ondemand::json_type::string;
        const bool number = a.type == ondemand::json_type::number && std::fabs(a.number) < 1e15;
        if (name == "process_name" && a.key == "name" && text) {
            processes_[std::string(pid)].name = std::string(a.text);
        } else if (name == "process_sort_index" && a.key == "sort_index" && number) {
            ProcessInfo& p = processes_[std::string(pid)];
            p.sort = static_cast<std::int64_t>(a.number);
            p.has_sort = true;
        } else if (name == "thread_name" && a.key == "name" && text) {
            out_.lanes[lane_of(pid, tid)].name = std::string(a.text);
        } else if (name == "thread_sort_index" && a.key == "sort_index" && number) {
            out_.lanes[lane_of(pid, tid)].sort = static_cast<std::int64_t>(a.number);
        }
    }
}

void TraceBuilder::counter(std::string_view pid, std::string_view name, std::int64_t t_ns) {
    for (const ArgItem& a : args_) {
        if (a.type != ondemand::json_type::number || !std::isfinite(a.number)) continue;
        std::string key =
            std::string(pid) + '\x1f' + std::string(name) + '\x1f' + std::string(a.key);
        auto [it, inserted] = counter_ids_.try_emplace(
            std::move(key), static_cast<std::uint32_t>(out_.counters.size()));
        if (inserted) {
            CounterSeries s;
            s.pid = std::string(pid);
            s.name = std::string(name);
            s.key = std::string(a.key);
            out_.counters.push_back(std::move(s));
        }
        CounterSeries& s = out_.counters[it->second];
        s.t_ns.push_back(t_ns);
        s.values.push_back(a.number);
    }
}

simdjson::error_code TraceBuilder::read_args(ondemand::value& v) {
    ondemand::json_type type;
    if (auto err = v.type().get(type)) return err;
    if (type != ondemand::json_type::object) return simdjson::SUCCESS;  // not an object: ignored
    ondemand::object obj;
    if (auto err = v.get_object().get(obj)) return err;
    for (auto field_result : obj) {
        if (auto err = field_result.error()) return err;
        ondemand::field& field = field_result.value_unsafe();
        ArgItem a;
        if (auto err = field.unescaped_key().get(a.key)) return err;
        ondemand::value value = field.value();
        if (auto err = scalar_text(value, a.type, a.text)) return err;
        if (a.type == ondemand::json_type::number) {
            if (auto err = value.get_double().get(a.number)) return err;
        }
        if (args_.size() < 256) args_.push_back(a);
    }
    return simdjson::SUCCESS;
}

std::uint32_t TraceBuilder::store_args() {
    if (args_.empty()) return kNone;
    EventArgs a;
    bool any = false;
    for (const ArgItem& item : args_) {
        double* slot = nullptr;
        if (item.key == "flops")
            slot = &a.flops;
        else if (item.key == "bytes")
            slot = &a.bytes;
        else if (item.key == "achieved_gflop_per_s")
            slot = &a.achieved_gflop_per_s;
        else if (item.key == "achieved_gb_per_s")
            slot = &a.achieved_gb_per_s;
        if (slot != nullptr && item.type == ondemand::json_type::number &&
            std::isfinite(item.number)) {
            *slot = item.number;
            any = true;
            continue;
        }
        if (item.key == "flop_per_byte") continue;  // derived: bytes and flops are kept
        if (a.other.size() >= kMaxOtherArgsBytes) continue;
        if (!a.other.empty()) a.other += ", ";
        a.other.append(item.key).append(": ").append(item.text);
        any = true;
    }
    if (a.other.size() > kMaxOtherArgsBytes) {
        a.other.resize(kMaxOtherArgsBytes);
        a.other += "...";
    }
    if (!any) return kNone;
    out_.args.push_back(std::move(a));
    return static_cast<std::uint32_t>(out_.args.size() - 1);
}

simdjson::error_code TraceBuilder::add_event(ondemand::value ev, std::size_t index) {
    ondemand::json_type type;
    if (auto err = ev.type().get(type)) return err;
    if (type != ondemand::json_type::object) {
        skip(index, "", "not an object");
        return simdjson::SUCCESS;
    }
    ondemand::object obj;
    if (auto err = ev.get_object().get(obj)) return err;
    std::string_view name, ph, cat, bp, scope, pid = "0", tid = "0", id;
    double ts = 0, dur = 0;
    bool has_ts = false, has_dur = false, has_id = false, bad_ts = false, bad_dur = false;
    args_.clear();
    for (auto field_result : obj) {
        if (auto err = field_result.error()) return err;
        ondemand::field& field = field_result.value_unsafe();
        std::string_view k;
        if (auto err = field.unescaped_key().get(k)) return err;
        ondemand::value v = field.value();
        ondemand::json_type t;
        std::string_view text;
        if (k == "ts" || k == "dur") {
            if (auto err = v.type().get(t)) return err;
            double number = 0;
            const bool ok = t == ondemand::json_type::number;
            if (ok) {
                if (auto err = v.get_double().get(number)) return err;
            }
            (k == "ts" ? has_ts : has_dur) = true;
            (k == "ts" ? bad_ts : bad_dur) = !ok;
            (k == "ts" ? ts : dur) = number;
        } else if (k == "args") {
            if (auto err = read_args(v)) return err;
        } else if (k == "name" || k == "ph" || k == "cat" || k == "pid" || k == "tid" ||
                   k == "id" || k == "bind_id" || k == "bp" || k == "s") {
            if (auto err = scalar_text(v, t, text)) return err;
            const bool is_string = t == ondemand::json_type::string;
            if (k == "name")
                name = is_string ? text : std::string_view{};
            else if (k == "ph")
                ph = is_string ? text : std::string_view{};
            else if (k == "cat")
                cat = is_string ? text : std::string_view{};
            else if (k == "bp")
                bp = is_string ? text : std::string_view{};
            else if (k == "s")
                scope = is_string ? text : std::string_view{};
            else if (k == "pid")
                pid = text;
            else if (k == "tid")
                tid = text;
            else {
                id = text;
                has_id = true;
            }
        }
        // Other fields are skipped unread.
    }
    if (ph.size() != 1) {
        skip(index, name, "missing or invalid 'ph'");
        return simdjson::SUCCESS;
    }
    const char phase = ph[0];
    if (phase == 'M') {
        metadata(name, pid, tid);
        return simdjson::SUCCESS;
    }
    // Every other phase is placed in time: a finite ts within +-100 days.
    constexpr double kMaxUs = 8.64e12;
    if (!has_ts || bad_ts || !(std::fabs(ts) < kMaxUs)) {
        skip(index, name, "'ts' is missing or not a finite number within +-100 days");
        return simdjson::SUCCESS;
    }
    const std::int64_t t_ns = std::llround(ts * 1000.0);
    switch (phase) {
        case 'X':
        case 'i':
        case 'I':
        case 'R':
        case 'B': {
            if (phase == 'X' && (bad_dur || !(dur >= 0 && dur < kMaxUs))) {
                skip(index, name, "'dur' is not a number in [0, 100 days)");
                return simdjson::SUCCESS;
            }
            Event e;
            e.start_ns = t_ns;
            e.dur_ns = (phase == 'X' && has_dur) ? std::llround(dur * 1000.0) : 0;
            e.instant = phase != 'X' && phase != 'B';
            e.name = out_.strings.intern(name);
            e.cat = out_.strings.intern(cat);
            // Process- and global-scoped instants have no thread: they go on the tid "0" lane.
            e.lane = lane_of(
                pid, (e.instant && scope != "t" && !scope.empty()) ? std::string_view("0") : tid);
            e.args = store_args();
            if (phase == 'B') {
                open_[e.lane].push_back(e);
            } else {
                out_.events.push_back(e);
            }
            return simdjson::SUCCESS;
        }
        case 'E': {
            auto& open = open_[lane_of(pid, tid)];
            if (open.empty()) {
                skip(index, name, "'E' without a matching 'B'");
                return simdjson::SUCCESS;
            }
            Event e = open.back();
            open.pop_back();
            if (t_ns < e.start_ns) {
                skip(index, name, "'E' before its 'B'");
                return simdjson::SUCCESS;
            }
            e.dur_ns = t_ns - e.start_ns;
            if (e.args == kNone) e.args = store_args();
            out_.events.push_back(e);
            return simdjson::SUCCESS;
        }
        case 'C':
            counter(pid, name, t_ns);
            return simdjson::SUCCESS;
        case 's':
        case 'f':
        case 't':
            if (!has_id) {
                skip(index, name, "flow event without 'id'");
                return simdjson::SUCCESS;
            }
            if (phase == 't') {
                ++out_.ignored_events;
                return simdjson::SUCCESS;
            }
            flows_.push_back({std::string(cat) + '\x1f' + std::string(id), lane_of(pid, tid), t_ns,
                              phase == 's', phase == 's' || bp == "e"});
            return simdjson::SUCCESS;
        default:
            ++out_.ignored_events;
            return simdjson::SUCCESS;
    }
}

void TraceBuilder::finish() {
    index_trace(out_, processes_, open_, flows_);
}

}  // namespace

namespace {

// The members of a trace object: "traceEvents", "otherData" (for its schema), and a top-level
// "schema" when asked for; anything else is skipped unread.
template <class ReadEvents>
simdjson::error_code read_root(ondemand::object& root, TraceData& out, std::string* top_schema,
                               bool& found, ReadEvents&& read_events) {
    for (auto field_result : root) {
        if (auto err = field_result.error()) return err;
        ondemand::field& field = field_result.value_unsafe();
        std::string_view key;
        if (auto err = field.unescaped_key().get(key)) return err;
        ondemand::value v = field.value();
        ondemand::json_type t;
        if (auto err = v.type().get(t)) return err;
        if (key == "traceEvents" && t == ondemand::json_type::array) {
            ondemand::array events;
            if (auto err = v.get_array().get(events)) return err;
            if (auto err = read_events(events)) return err;
            found = true;
        } else if (key == "otherData" && t == ondemand::json_type::object) {
            ondemand::value sv;
            const auto err = v.find_field_unordered("schema").get(sv);
            if (err && err != simdjson::NO_SUCH_FIELD) return err;
            std::string_view schema;
            if (!err && !sv.get_string().get(schema)) out.schema = std::string(schema);
        } else if (key == "schema" && t == ondemand::json_type::string && top_schema != nullptr) {
            std::string_view schema;
            if (auto err = v.get_string().get(schema)) return err;
            *top_schema = std::string(schema);
        }
    }
    return simdjson::SUCCESS;
}

}  // namespace

std::string parse_trace(std::string_view text, TraceData& out) {
    const simdjson::padded_string padded(text);
    return parse_trace_padded(padded, out, nullptr);
}

std::string parse_trace_padded(simdjson::padded_string_view text, TraceData& out,
                               std::string* top_schema) {
    out = TraceData{};
    if (text.size() == 0) return "empty file";
    ondemand::parser parser;
    if (auto err = parser.allocate(text.size(), kMaxJsonDepth)) return simdjson::error_message(err);
    ondemand::document doc;
    if (auto err = parser.iterate(text).get(doc)) return simdjson::error_message(err);
    TraceBuilder builder(out);
    std::size_t index = 0;
    auto read_events = [&](ondemand::array events) -> simdjson::error_code {
        for (auto ev : events) {
            ondemand::value v;
            if (auto err = ev.get(v)) return err;
            if (auto err = builder.add_event(v, index++)) return err;
        }
        return simdjson::SUCCESS;
    };
    ondemand::json_type type;
    if (auto err = doc.type().get(type)) return simdjson::error_message(err);
    simdjson::error_code err = simdjson::SUCCESS;
    bool found = false;
    if (type == ondemand::json_type::array) {
        ondemand::array events;
        err = doc.get_array().get(events);
        if (!err) err = read_events(events);
        found = true;
    } else if (type == ondemand::json_type::object) {
        ondemand::object root;
        // An object that failed to open is never iterated (simdjson assumes a valid iterator).
        err = doc.get_object().get(root);
        if (!err) err = read_root(root, out, top_schema, found, read_events);
    } else {
        return "not a Chrome trace: expected an object with \"traceEvents\" or an array of events";
    }
    // The whole document must be valid JSON, also past the events.
    const char* rest = nullptr;
    if (!err && !doc.current_location().get(rest)) err = simdjson::TRAILING_CONTENT;
    if (err) {
        out = TraceData{};
        return simdjson::error_message(err);
    }
    if (!found) return "no \"traceEvents\" array (not a Chrome trace)";
    builder.finish();
    return "";
}

}  // namespace napkin::viewer
