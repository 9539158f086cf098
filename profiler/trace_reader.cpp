// The per-event pass of the trace reader: each scanned event checked by the mode's rules and
// added to TraceData; then the structural pass (trace_index.cpp). Rules: docs/FORMATS.md.
#include "profiler/trace_reader.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>

#include "profiler/trace_build.h"

namespace napkin::profiler {

namespace detail {

void ProblemLog::problem(std::string text) {
    if (!strict()) return;
    if (result_.problems.size() < TraceReadResult::kMaxProblems) {
        result_.problems.push_back(std::move(text));
    } else {
        ++result_.problems_omitted;
    }
}

void ProblemLog::skip(std::string text) {
    if (strict()) {
        problem(std::move(text));
        return;
    }
    constexpr std::size_t kMaxWarnings = 5;
    ++out_.skipped_events;
    if (out_.warnings.size() < kMaxWarnings) out_.warnings.push_back(std::move(text));
}

std::string cut(std::string_view s) {
    constexpr std::size_t kMax = 80;
    return s.size() <= kMax ? std::string(s) : std::string(s.substr(0, kMax - 3)) + "...";
}

std::string event_label(std::size_t index, std::string_view name, std::string_view ph) {
    return "event " + std::to_string(index) + " ('" + cut(name) + "', ph " + cut(ph) + ")";
}

std::string micros_text(std::int64_t ns) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(ns) / 1000.0);
    return buf;
}

}  // namespace detail

namespace {

using namespace detail;

// |t| beyond this many ns is refused outright: differences of two such times fit in int64.
constexpr std::int64_t kMaxAbsNs = 4'000'000'000'000'000'000;

// "ts" or "dur" (microseconds, as written) to int64 ns, rounded half away from zero. Read from
// the decimal text, not from a double: Kineto's epoch microseconds (1.7e15 us, 19 digits) carry
// nanoseconds a double cannot hold. The common form, digits with an optional fraction, is read in
// one pass (this runs twice per event); exponents go through the double.
bool micros_to_ns(const ScannedField& f, std::int64_t& ns) {
    if (f.kind != JsonKind::number || f.text.empty()) return false;
    const char* p = f.text.data();
    const char* const end = p + f.text.size();
    const bool negative = *p == '-';
    p += negative ? 1 : 0;
    const auto digit = [&] { return p < end && static_cast<unsigned char>(*p - '0') <= 9; };
    const char* const whole_begin = p;
    std::uint64_t whole = 0;
    for (; digit() && p - whole_begin < 16; ++p)
        whole = whole * 10 + static_cast<std::uint64_t>(*p - '0');  // < 10^16 us: fits below
    std::uint64_t frac_ns = 0;
    if (!digit() && p < end && *p == '.') {
        ++p;
        std::uint64_t scale = 100;  // ns per digit: 100, 10, 1
        for (; digit() && scale > 0; ++p, scale /= 10)
            frac_ns += scale * static_cast<std::uint64_t>(*p - '0');
        if (digit() && *p >= '5') ++frac_ns;  // the tenth of a nanosecond decides
        while (digit())
            ++p;
    }
    if (p == end && p > whole_begin) {
        const std::uint64_t v = whole * 1000 + frac_ns;
        if (v > static_cast<std::uint64_t>(kMaxAbsNs)) return false;
        ns = negative ? -static_cast<std::int64_t>(v) : static_cast<std::int64_t>(v);
        return true;
    }
    double us = 0;  // an exponent, or more than 16 integer digits
    const auto [last, ec] = std::from_chars(f.text.data(), end, us);
    const double scaled = us * 1000.0;
    if (ec != std::errc{} || last != end || !(std::fabs(scaled) < static_cast<double>(kMaxAbsNs)))
        return false;
    ns = std::llround(scaled);
    return true;
}

}  // namespace

bool trace_time_ns(const ScannedField& f, std::int64_t& ns) {
    return micros_to_ns(f, ns);
}

bool is_absolute_time(std::int64_t t_ns) {
    return t_ns > kMaxSpanNs || t_ns < -kMaxSpanNs;
}

namespace {

enum class PhaseClass : std::uint8_t { handled, ignored, unknown };

// Every phase of the Trace Event format: those napkin draws and checks, and the rest.
PhaseClass classify(std::string_view ph) {
    if (ph.size() != 1) return PhaseClass::unknown;
    switch (ph[0]) {
        case 'X':
        case 'B':
        case 'E':
        case 'i':
        case 'I':
        case 'R':
        case 'C':
        case 'M':
        case 's':
        case 't':
        case 'f':
            return PhaseClass::handled;
        case 'b':
        case 'n':
        case 'e':
        case 'P':
        case 'N':
        case 'O':
        case 'D':
        case 'V':
        case 'v':
        case 'c':
        case '(':
        case ')':
            return PhaseClass::ignored;
        default:
            return PhaseClass::unknown;
    }
}

bool thread_scoped(char ph, const ScannedEvent& e) {
    switch (ph) {
        case 'X':
        case 'B':
        case 'E':
        case 's':
        case 't':
        case 'f':
            return true;
        case 'i':
        case 'I':  // an instant without a scope is a thread's
            return !e.scope.is_string() || e.scope.text == "t";
        default:
            return false;
    }
}

class TraceBuilder {
public:
    explicit TraceBuilder(TraceBuild& b) : b_(b), out_(b.out) {}

    void add(const ScannedEvent& e);
    // The phase counts into the result.
    void finish(TraceReadResult& r) const;

private:
    struct Where {  // an event's identity after the checks: what lane, when
        std::string_view name, pid, tid;
        std::int64_t t_ns = 0;
    };
    bool common_fields(const ScannedEvent& e, char ph, Where& w);
    bool place(const ScannedEvent& e, std::int64_t& t_ns);
    void range(const ScannedEvent& e, const Where& w);
    void instant(const ScannedEvent& e, const Where& w);
    void begin_end(const ScannedEvent& e, char ph, const Where& w);
    void counter(const ScannedEvent& e, const Where& w);
    void metadata(const ScannedEvent& e, const Where& w);
    void flow(const ScannedEvent& e, char ph, const Where& w);

    std::uint32_t lane_of(std::string_view pid, std::string_view tid);
    std::uint32_t store_args(const ScannedEvent& e);
    std::string label(const ScannedEvent& e) const {
        return event_label(e.index, e.name.is_string() ? e.name.text : "?",
                           e.ph.is_string() ? e.ph.text : "?");
    }
    void reject(const ScannedEvent& e, std::string_view why) {
        b_.log.skip(label(e) + ": " + std::string(why));
    }
    void problem(const ScannedEvent& e, std::string_view why) {
        if (b_.log.strict()) b_.log.problem(label(e) + ": " + std::string(why));
    }

    TraceBuild& b_;
    TraceData& out_;
    std::unordered_map<std::string, std::uint32_t> lane_ids_, counter_ids_;
    std::string last_pid_, last_tid_, key_;
    std::uint32_t last_lane_ = kNone;
    bool origin_set_ = false;
    std::array<std::size_t, 128> single_phases_{};
    std::map<std::string, std::size_t> other_phases_;
};

void TraceBuilder::add(const ScannedEvent& e) {
    if (!e.is_object) {
        b_.log.skip("event " + std::to_string(e.index) + ": not an object");
        return;
    }
    if (!e.ph.is_string()) return reject(e, "missing string 'ph'");
    const std::string_view ph = e.ph.text;
    if (ph.size() == 1 && static_cast<unsigned char>(ph[0]) < 128) {
        ++single_phases_[static_cast<unsigned char>(ph[0])];
    } else {
        ++other_phases_[std::string(ph)];
    }
    const PhaseClass kind = classify(ph);
    if (kind == PhaseClass::unknown) return reject(e, "unknown phase '" + cut(ph) + "'");
    Where w;
    if (!common_fields(e, ph[0], w)) return;
    if (kind == PhaseClass::ignored) {
        ++out_.ignored_events;
        return;
    }
    switch (ph[0]) {
        case 'X':
            return range(e, w);
        case 'i':
        case 'I':
        case 'R':
            return instant(e, w);
        case 'B':
        case 'E':
            return begin_end(e, ph[0], w);
        case 'C':
            return counter(e, w);
        case 'M':
            return metadata(e, w);
        default:
            return flow(e, ph[0], w);
    }
}

// name, pid, ts, tid: required by the strict mode (each missing one a problem), defaulted by the
// lenient one, except a time it cannot place.
bool TraceBuilder::common_fields(const ScannedEvent& e, char ph, Where& w) {
    const bool strict = b_.log.strict();
    bool ok = true;
    // An E may omit its name: it closes the innermost B of its track.
    if (ph != 'E' && !e.name.is_string() && strict) {
        problem(e, "missing string 'name'");
        ok = false;
    }
    if (!e.pid.is_scalar_id() && strict) {
        problem(e, "missing 'pid'");
        ok = false;
    }
    if (ph != 'M' && !place(e, w.t_ns)) ok = false;
    if (thread_scoped(ph, e) && !e.tid.is_scalar_id() && strict) {
        problem(e, "missing 'tid'");
        ok = false;
    }
    w.name = e.name.is_string() ? e.name.text : std::string_view();
    w.pid = e.pid.present() ? e.pid.text : std::string_view("0");
    w.tid = e.tid.present() ? e.tid.text : std::string_view("0");
    return ok;
}

// The event's time on the trace's clock; false (the event rejected) when it has none.
bool TraceBuilder::place(const ScannedEvent& e, std::int64_t& t_ns) {
    std::int64_t ns = 0;
    if (!micros_to_ns(e.ts, ns)) {
        reject(e, e.ts.kind == JsonKind::number ? "'ts' " + cut(e.ts.text) + " is out of range"
                                                : std::string("missing or non-numeric 'ts'"));
        return false;
    }
    if (!origin_set_) {  // the first timestamp says whether the trace counts from 0
        origin_set_ = true;
        if (ns > kMaxSpanNs || ns < -kMaxSpanNs) b_.origin_ns = ns;
    }
    t_ns = ns - b_.origin_ns;
    if (t_ns > kMaxSpanNs || t_ns < -kMaxSpanNs) {
        reject(e, "'ts' " + cut(e.ts.text) + " is more than 100 days from the trace's start");
        return false;
    }
    return true;
}

void TraceBuilder::range(const ScannedEvent& e, const Where& w) {
    std::int64_t dur = 0;
    if (!e.dur.present()) {
        if (b_.log.strict()) return reject(e, "missing 'dur'");
    } else if (e.dur.kind != JsonKind::number) {
        return reject(e, "non-numeric 'dur' " + cut(e.dur.text));
    } else if (!micros_to_ns(e.dur, dur) || dur > kMaxSpanNs) {
        return reject(e, "'dur' " + cut(e.dur.text) + " is longer than 100 days");
    } else if (dur < 0) {
        return reject(e, "negative 'dur' " + micros_text(dur));
    }
    TraceEvent ev;
    ev.start_ns = w.t_ns;
    ev.dur_ns = dur;
    ev.name = out_.strings.intern(w.name);
    ev.cat = out_.strings.intern(e.cat.is_string() ? e.cat.text : std::string_view());
    ev.lane = lane_of(w.pid, w.tid);
    ev.args = store_args(e);
    ev.index = static_cast<std::uint32_t>(e.index);
    out_.events.push_back(ev);
}

void TraceBuilder::instant(const ScannedEvent& e, const Where& w) {
    const std::string_view scope = e.scope.is_string() ? e.scope.text : std::string_view();
    if (e.ph.text != "R" && e.scope.present() && scope != "g" && scope != "p" && scope != "t") {
        problem(e, "instant scope 's' must be \"g\", \"p\" or \"t\", not " + cut(e.scope.text));
    }
    TraceEvent ev;
    ev.start_ns = w.t_ns;
    ev.instant = true;
    ev.name = out_.strings.intern(w.name);
    ev.cat = out_.strings.intern(e.cat.is_string() ? e.cat.text : std::string_view());
    // Process- and global-scoped instants have no thread: they go on the tid "0" lane.
    ev.lane = lane_of(w.pid, scope.empty() || scope == "t" ? w.tid : std::string_view("0"));
    ev.args = store_args(e);
    ev.index = static_cast<std::uint32_t>(e.index);
    out_.events.push_back(ev);
}

void TraceBuilder::begin_end(const ScannedEvent& e, char ph, const Where& w) {
    BeginEndMark m;
    m.t_ns = w.t_ns;
    m.index = static_cast<std::uint32_t>(e.index);
    m.name = out_.strings.intern(w.name);
    m.cat = out_.strings.intern(e.cat.is_string() ? e.cat.text : std::string_view());
    m.lane = lane_of(w.pid, w.tid);
    m.args = store_args(e);
    m.begin = ph == 'B';
    b_.marks.push_back(m);
}

// Each numeric key of args is a sample of the series (pid, name, key).
void TraceBuilder::counter(const ScannedEvent& e, const Where& w) {
    if (!e.args_object || e.args.empty()) {
        problem(e, "counter without an 'args' object of values");
        return;
    }
    for (const ScannedArg& a : e.args) {
        if (a.value.kind != JsonKind::number || !std::isfinite(a.value.number)) {
            problem(e, "counter series '" + cut(a.key) + "' is not a number: " + cut(a.value.text));
            continue;
        }
        key_.assign(w.pid).push_back('\x1f');
        key_.append(w.name).push_back('\x1f');
        key_.append(a.key);
        auto [it, inserted] =
            counter_ids_.try_emplace(key_, static_cast<std::uint32_t>(out_.counters.size()));
        if (inserted) {
            CounterSeries s;
            s.pid = std::string(w.pid);
            s.name = std::string(w.name);
            s.key = std::string(a.key);
            out_.counters.push_back(std::move(s));
        }
        CounterSeries& s = out_.counters[it->second];
        s.t_ns.push_back(w.t_ns);
        s.values.push_back(a.value.number);
    }
}

// process_name, thread_name (args.name), process_sort_index, thread_sort_index
// (args.sort_index); nothing else is metadata napkin knows.
void TraceBuilder::metadata(const ScannedEvent& e, const Where& w) {
    const std::string_view name = w.name;
    const bool is_name = name == "process_name" || name == "thread_name";
    const bool is_sort = name == "process_sort_index" || name == "thread_sort_index";
    if (!is_name && !is_sort) {
        problem(e, "unknown metadata name '" + cut(name) +
                       "' (expected process_name, thread_name, process_sort_index or "
                       "thread_sort_index)");
        return;
    }
    const bool thread = name.starts_with("thread_");
    if (thread && !e.tid.present()) problem(e, "thread metadata without 'tid'");
    if (!e.args_object) {
        problem(e, "metadata without an 'args' object");
        return;
    }
    const ScannedField* value = nullptr;
    for (const ScannedArg& a : e.args) {
        if (a.key == (is_name ? "name" : "sort_index")) value = &a.value;
    }
    if (is_name && (value == nullptr || !value->is_string())) {
        problem(e, "missing string 'args.name'");
        return;
    }
    if (is_sort && (value == nullptr || value->kind != JsonKind::number)) {
        problem(e, "missing numeric 'args.sort_index'");
        return;
    }
    if (is_sort && !(std::fabs(value->number) < 1e15)) return;  // no order to keep
    if (thread) {
        TraceLane& lane = out_.lanes[lane_of(w.pid, w.tid)];
        if (is_name) lane.name = std::string(value->text);
        if (is_sort) lane.sort = static_cast<std::int64_t>(value->number);
        return;
    }
    ProcessInfo& p = b_.processes[std::string(w.pid)];
    if (is_name) p.name = std::string(value->text);
    if (is_sort) {
        p.sort = static_cast<std::int64_t>(value->number);
        p.has_sort = true;
    }
}

void TraceBuilder::flow(const ScannedEvent& e, char ph, const Where& w) {
    if (!e.id.is_scalar_id()) return reject(e, "flow without 'id'");
    const bool bound_enclosing = e.bp.is_string() && e.bp.text == "e";
    if (e.bp.present() && !bound_enclosing)
        problem(e, "flow binding point 'bp' must be \"e\", not " + cut(e.bp.text));
    if (ph == 't') {  // a step of a flow: neither drawn nor needed to bind its ends
        ++out_.ignored_events;
        return;
    }
    FlowPoint f;
    f.t_ns = w.t_ns;
    f.key.cat = out_.strings.intern(e.cat.is_string() ? e.cat.text : std::string_view());
    const std::string_view id = e.id.text;
    const auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), f.key.id);
    // 7 and "7" are one id, as Chrome reads them.
    f.key.text_id = ec != std::errc{} || end != id.data() + id.size();
    if (f.key.text_id) f.key.id = out_.strings.intern(id);
    f.lane = lane_of(w.pid, w.tid);
    f.index = static_cast<std::uint32_t>(e.index);
    f.name = b_.log.strict() ? out_.strings.intern(w.name) : 0;  // for messages
    f.start = ph == 's';
    f.enclosing = f.start || bound_enclosing;
    b_.flows.push_back(f);
}

std::uint32_t TraceBuilder::lane_of(std::string_view pid, std::string_view tid) {
    if (last_lane_ != kNone && pid == last_pid_ && tid == last_tid_) return last_lane_;
    key_.assign(pid).push_back('\x1f');
    key_.append(tid);
    auto [it, inserted] =
        lane_ids_.try_emplace(key_, static_cast<std::uint32_t>(out_.lanes.size()));
    if (inserted) {
        TraceLane lane;
        lane.pid = std::string(pid);
        lane.tid = std::string(tid);
        lane.name = lane.tid;
        lane.sort = leading_integer(tid);  // until a thread_sort_index says otherwise
        out_.lanes.push_back(std::move(lane));
    }
    last_pid_.assign(pid);
    last_tid_.assign(tid);
    last_lane_ = it->second;
    return it->second;
}

// The args napkin reads as numbers (FLOPs, bytes, achieved rates), the rest as text.
std::uint32_t TraceBuilder::store_args(const ScannedEvent& e) {
    constexpr std::size_t kMaxOtherBytes = 512;
    if (e.args.empty()) return kNone;
    EventArgs a;
    bool any = false;
    for (const ScannedArg& item : e.args) {
        double* slot = nullptr;
        if (item.key == "flops")
            slot = &a.flops;
        else if (item.key == "bytes")
            slot = &a.bytes;
        else if (item.key == "achieved_gflop_per_s")
            slot = &a.achieved_gflop_per_s;
        else if (item.key == "achieved_gb_per_s")
            slot = &a.achieved_gb_per_s;
        if (slot != nullptr && item.value.kind == JsonKind::number &&
            std::isfinite(item.value.number)) {
            *slot = item.value.number;
            any = true;
            continue;
        }
        if (item.key == "flop_per_byte") continue;  // derived: bytes and flops are kept
        if (a.other.size() >= kMaxOtherBytes) continue;
        if (!a.other.empty()) a.other += ", ";
        a.other.append(item.key).append(": ").append(item.value.text);
        any = true;
    }
    if (a.other.size() > kMaxOtherBytes) {
        a.other.resize(kMaxOtherBytes);
        a.other += "...";
    }
    if (!any) return kNone;
    out_.args.push_back(std::move(a));
    return static_cast<std::uint32_t>(out_.args.size() - 1);
}

void TraceBuilder::finish(TraceReadResult& r) const {
    for (std::size_t c = 0; c < single_phases_.size(); ++c) {
        if (single_phases_[c] > 0)
            r.phase_counts[std::string(1, static_cast<char>(c))] = single_phases_[c];
    }
    for (const auto& [ph, n] : other_phases_)
        r.phase_counts[ph] += n;
}

// The document's own fields (strict): put before the events' problems.
void check_document(const ScannedDocument& doc, TraceReadResult& r) {
    std::vector<std::string> top;
    const DocumentField& unit = doc.display_time_unit;
    if (unit.present() && !(unit.is_string() && (unit.text == "ms" || unit.text == "ns"))) {
        top.push_back("top level: 'displayTimeUnit' must be \"ms\" or \"ns\", not " +
                      cut(unit.text));
    }
    if (doc.other_data.present() && doc.other_data.kind != JsonKind::object)
        top.push_back("top level: 'otherData' must be an object");
    r.problems.insert(r.problems.begin(), top.begin(), top.end());
    while (r.problems.size() > TraceReadResult::kMaxProblems) {
        r.problems.pop_back();
        ++r.problems_omitted;
    }
}

TraceReadResult unreadable(std::string why, TraceData& out) {
    out = TraceData{};
    TraceReadResult r;
    r.error = std::move(why);
    return r;
}

}  // namespace

TraceReadResult read_trace(const char* data, std::size_t size, TraceMode mode, TraceData& out) {
    out = TraceData{};
    TraceReadResult r;
    TraceBuild b(mode, r, out);
    TraceBuilder builder(b);
    out.events.reserve(size / 256);  // napkin's ranges take 150-250 bytes: no regrowth
    ScannedDocument doc;
    if (mode == TraceMode::strict) r.error = check_json_syntax(data, size);  // every byte
    if (r.error.empty())
        r.error = scan_trace(
            data, size, [&](const ScannedEvent& e) { builder.add(e); }, doc);
    if (doc.top_schema.is_string()) r.top_schema = doc.top_schema.text;
    builder.finish(r);
    if (!r.error.empty()) {
        out = TraceData{};
        return r;
    }
    out.event_count = static_cast<std::int64_t>(doc.event_count);
    if (doc.schema.is_string()) out.schema = doc.schema.text;
    if (mode == TraceMode::strict) check_document(doc, r);
    index_trace(b);
    if (mode == TraceMode::lenient && out.skipped_events * 2 > out.event_count) {
        r.error = "most events are invalid: " + std::to_string(out.skipped_events) + " of " +
                  std::to_string(out.event_count) +
                  " left out (the first: " + out.warnings.front() + ")";
        out = TraceData{};
    }
    return r;
}

TraceReadResult read_trace_text(std::string_view text, TraceMode mode, TraceData& out) {
    JsonText padded;
    if (std::string err = padded.assign(text); !err.empty()) return unreadable(std::move(err), out);
    return read_trace(padded.data(), padded.size(), mode, out);
}

TraceReadResult read_trace_file(const std::filesystem::path& path, TraceMode mode, TraceData& out) {
    JsonText text;
    if (std::string err = text.open(path); !err.empty()) return unreadable(std::move(err), out);
    return read_trace(text.data(), text.size(), mode, out);
}

}  // namespace napkin::profiler
