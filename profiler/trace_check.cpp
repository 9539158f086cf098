#include "profiler/trace_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <string_view>
#include <utility>

namespace napkin::profiler {

namespace {

using json = nlohmann::json;

constexpr double kTolUs = 1e-3;  // 1 ns: the writer's timestamps are exact to the nanosecond

// Every phase of the Trace Event format; only those napkin writes are checked in depth.
constexpr std::string_view kKnownPhases[] = {"B", "E", "X", "i", "I", "C", "b", "n",
                                             "e", "s", "t", "f", "P", "N", "O", "D",
                                             "M", "V", "v", "R", "c", "(", ")"};

bool known_phase(std::string_view ph) {
    return std::find(std::begin(kKnownPhases), std::end(kKnownPhases), ph) !=
           std::end(kKnownPhases);
}

bool finite_number(const json& v) {
    return v.is_number() && std::isfinite(v.get<double>());
}

// e[key] when it is a string, else `fallback` (json::value() throws on a wrong type).
std::string string_field(const json& e, const char* key, const std::string& fallback) {
    auto it = e.find(key);
    return it != e.end() && it->is_string() ? it->get<std::string>() : fallback;
}

std::string us(double v) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.3f", v);
    return buf;
}

// A compact, bounded rendering of an identifier for messages.
std::string show(const json& v) {
    std::string s = v.is_string() ? v.get<std::string>()
                                  : v.dump(-1, ' ', false, json::error_handler_t::replace);
    if (s.size() > 80) s = s.substr(0, 77) + "...";
    return s;
}

struct Interval {
    double start = 0;
    double end = 0;
    std::size_t index = 0;
    std::string name;
};

struct Mark {  // a B or E event
    double ts = 0;
    std::size_t index = 0;
    bool begin = true;
    std::string name;
};

class Checker {
public:
    explicit Checker(TraceCheckResult& r) : r_(r) {}

    void problem(std::string text) {
        if (r_.problems.size() < TraceCheckResult::kMaxProblems) {
            r_.problems.push_back(std::move(text));
        } else {
            ++r_.problems_omitted;
        }
    }

    void check_document(const json& doc) {
        const json* events = nullptr;
        if (doc.is_array()) {
            events = &doc;
        } else if (doc.is_object()) {
            auto it = doc.find("traceEvents");
            if (it == doc.end() || !it->is_array()) {
                problem("top level: missing 'traceEvents' array");
                return;
            }
            events = &*it;
            if (auto u = doc.find("displayTimeUnit"); u != doc.end()) {
                if (!u->is_string() || (*u != "ms" && *u != "ns")) {
                    problem("top level: 'displayTimeUnit' must be \"ms\" or \"ns\", not " +
                            show(*u));
                }
            }
            if (auto o = doc.find("otherData"); o != doc.end() && !o->is_object()) {
                problem("top level: 'otherData' must be an object");
            }
        } else {
            problem("top level: expected an object with 'traceEvents' or an array of events");
            return;
        }
        for (std::size_t i = 0; i < events->size(); ++i)
            check_event(i, (*events)[i]);
        r_.event_count = events->size();
        check_nesting();
        check_begin_end();
        check_flows();
    }

private:
    std::string where(std::size_t i, const json& e) const {
        std::string name = "?";
        std::string ph = "?";
        if (auto n = e.find("name"); n != e.end() && n->is_string()) name = show(*n);
        if (auto p = e.find("ph"); p != e.end() && p->is_string()) ph = show(*p);
        return "event " + std::to_string(i) + " ('" + name + "', ph " + ph + ")";
    }

    static std::string track_key(const json& e) {
        const auto tid = e.find("tid");
        return "pid " + show(e.at("pid")) + " tid " +
               (tid == e.end() ? std::string("-") : show(*tid));
    }

    void check_event(std::size_t i, const json& e) {
        if (!e.is_object()) {
            problem("event " + std::to_string(i) + ": not an object");
            return;
        }
        const std::string at = where(i, e);
        auto ph_it = e.find("ph");
        if (ph_it == e.end() || !ph_it->is_string()) {
            problem(at + ": missing string 'ph'");
            return;
        }
        const std::string ph = ph_it->get<std::string>();
        ++r_.phase_counts[ph];
        if (!known_phase(ph)) {
            problem(at + ": unknown phase '" + show(*ph_it) + "'");
            return;
        }

        bool fields_ok = true;
        auto name_it = e.find("name");
        // An E may omit its name: it closes the innermost B of its track.
        if (ph != "E" && (name_it == e.end() || !name_it->is_string())) {
            problem(at + ": missing string 'name'");
            fields_ok = false;
        }
        auto pid_it = e.find("pid");
        if (pid_it == e.end() || !(pid_it->is_number() || pid_it->is_string())) {
            problem(at + ": missing 'pid'");
            fields_ok = false;
        }
        auto ts_it = e.find("ts");
        if (ph != "M" && (ts_it == e.end() || !finite_number(*ts_it))) {
            problem(at + ": missing or non-numeric 'ts'");
            fields_ok = false;
        }
        const bool thread_scoped = ph == "X" || ph == "B" || ph == "E" || ph == "s" || ph == "t" ||
                                   ph == "f" ||
                                   ((ph == "i" || ph == "I") && string_field(e, "s", "t") == "t");
        auto tid_it = e.find("tid");
        if (thread_scoped && (tid_it == e.end() || !(tid_it->is_number() || tid_it->is_string()))) {
            problem(at + ": missing 'tid'");
            fields_ok = false;
        }
        if (!fields_ok) return;

        const double ts = ph == "M" ? 0.0 : ts_it->get<double>();
        const std::string name = name_it == e.end() ? std::string() : name_it->get<std::string>();
        if (ph == "X") {
            auto dur = e.find("dur");
            if (dur == e.end()) {
                problem(at + ": missing 'dur'");
            } else if (!finite_number(*dur)) {
                problem(at + ": non-numeric 'dur' " + show(*dur));
            } else if (dur->get<double>() < 0) {
                problem(at + ": negative 'dur' " + us(dur->get<double>()));
            } else {
                complete_[track_key(e)].push_back(Interval{ts, ts + dur->get<double>(), i, name});
            }
        } else if (ph == "B" || ph == "E") {
            marks_[track_key(e)].push_back(Mark{ts, i, ph == "B", name});
        } else if (ph == "C") {
            check_counter(at, e);
        } else if (ph == "M") {
            check_metadata(at, name, e);
        } else if (ph == "i" || ph == "I") {
            auto s = e.find("s");
            if (s != e.end() && !(s->is_string() && (*s == "g" || *s == "p" || *s == "t"))) {
                problem(at + ": instant scope 's' must be \"g\", \"p\" or \"t\", not " + show(*s));
            }
        } else if (ph == "s" || ph == "t" || ph == "f") {
            check_flow(at, ph, ts, e);
        }
    }

    void check_counter(const std::string& at, const json& e) {
        auto args = e.find("args");
        if (args == e.end() || !args->is_object() || args->empty()) {
            problem(at + ": counter without an 'args' object of values");
            return;
        }
        for (auto it = args->begin(); it != args->end(); ++it) {
            if (!finite_number(it.value())) {
                problem(at + ": counter series '" + it.key() +
                        "' is not a number: " + show(it.value()));
            }
        }
    }

    void check_metadata(const std::string& at, const std::string& name, const json& e) {
        const bool is_name = name == "process_name" || name == "thread_name";
        const bool is_sort = name == "process_sort_index" || name == "thread_sort_index";
        if (!is_name && !is_sort) {
            problem(at + ": unknown metadata name '" + name +
                    "' (expected process_name, thread_name, process_sort_index or "
                    "thread_sort_index)");
            return;
        }
        if (name.rfind("thread_", 0) == 0 && !e.contains("tid")) {
            problem(at + ": thread metadata without 'tid'");
        }
        auto args = e.find("args");
        if (args == e.end() || !args->is_object()) {
            problem(at + ": metadata without an 'args' object");
            return;
        }
        if (is_name) {
            auto v = args->find("name");
            if (v == args->end() || !v->is_string()) problem(at + ": missing string 'args.name'");
        } else {
            auto v = args->find("sort_index");
            if (v == args->end() || !finite_number(*v)) {
                problem(at + ": missing numeric 'args.sort_index'");
            }
        }
    }

    void check_flow(const std::string& at, const std::string& ph, double ts, const json& e) {
        auto id = e.find("id");
        if (id == e.end() || !(id->is_number() || id->is_string())) {
            problem(at + ": flow without 'id'");
            return;
        }
        if (auto bp = e.find("bp"); bp != e.end() && *bp != "e") {
            problem(at + ": flow binding point 'bp' must be \"e\", not " + show(*bp));
        }
        const std::string key = string_field(e, "cat", "") + "#" + show(*id);
        if (ph == "s") {
            auto [it, inserted] = flow_starts_.emplace(key, ts);
            if (!inserted) it->second = std::min(it->second, ts);
        } else if (ph == "f") {
            flow_ends_.push_back({key, ts, at});
        }
    }

    // X events of one track must nest like a call stack.
    void check_nesting() {
        for (auto& [track, intervals] : complete_) {
            std::sort(intervals.begin(), intervals.end(), [](const Interval& a, const Interval& b) {
                if (a.start != b.start) return a.start < b.start;
                if (a.end != b.end) return a.end > b.end;  // the parent first
                return a.index < b.index;
            });
            std::vector<const Interval*> stack;
            for (const auto& iv : intervals) {
                while (!stack.empty() && stack.back()->end <= iv.start + kTolUs)
                    stack.pop_back();
                if (!stack.empty() && iv.end > stack.back()->end + kTolUs) {
                    const Interval& p = *stack.back();
                    problem(track + ": partial overlap of event " + std::to_string(p.index) +
                            " ('" + p.name + "' " + us(p.start) + ".." + us(p.end) +
                            " us) and event " + std::to_string(iv.index) + " ('" + iv.name + "' " +
                            us(iv.start) + ".." + us(iv.end) + " us)");
                    continue;
                }
                stack.push_back(&iv);
            }
        }
    }

    void check_begin_end() {
        for (auto& [track, marks] : marks_) {
            std::stable_sort(marks.begin(), marks.end(),
                             [](const Mark& a, const Mark& b) { return a.ts < b.ts; });
            std::vector<const Mark*> open;
            for (const auto& m : marks) {
                if (m.begin) {
                    open.push_back(&m);
                    continue;
                }
                if (open.empty()) {
                    problem(track + ": E event " + std::to_string(m.index) + " ('" + m.name +
                            "' at " + us(m.ts) + " us) without a matching B");
                    continue;
                }
                if (!m.name.empty() && m.name != open.back()->name) {
                    problem(track + ": E event " + std::to_string(m.index) + " ('" + m.name +
                            "') closes B event " + std::to_string(open.back()->index) + " ('" +
                            open.back()->name + "')");
                }
                open.pop_back();
            }
            for (const Mark* m : open) {
                problem(track + ": B event " + std::to_string(m->index) + " ('" + m->name +
                        "' at " + us(m->ts) + " us) is never closed by an E");
            }
        }
    }

    void check_flows() {
        for (const auto& f : flow_ends_) {
            auto it = flow_starts_.find(f.key);
            if (it == flow_starts_.end()) {
                problem(f.at + ": flow end without a flow start ('s') of the same id");
            } else if (it->second > f.ts + kTolUs) {
                problem(f.at + ": flow ends at " + us(f.ts) + " us, before it starts at " +
                        us(it->second) + " us");
            }
        }
    }

    struct FlowEnd {
        std::string key;
        double ts;
        std::string at;
    };

    TraceCheckResult& r_;
    std::map<std::string, std::vector<Interval>> complete_;
    std::map<std::string, std::vector<Mark>> marks_;
    std::map<std::string, double> flow_starts_;
    std::vector<FlowEnd> flow_ends_;
};

}  // namespace

std::string TraceCheckResult::summary() const {
    std::string out;
    for (const auto& p : problems)
        out += p + "\n";
    if (problems_omitted > 0) {
        out += "... and " + std::to_string(problems_omitted) + " more problems\n";
    }
    return out;
}

TraceCheckResult check_trace_json(const json& trace) {
    TraceCheckResult r;
    try {
        Checker(r).check_document(trace);
    } catch (const std::exception& ex) {  // a shape the checks did not foresee
        r.problems.push_back(std::string("cannot check: ") + ex.what());
    }
    return r;
}

TraceCheckResult check_trace_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        TraceCheckResult r;
        r.problems.push_back(path.string() + ": cannot open");
        return r;
    }
    json doc;
    try {
        doc = json::parse(in);
    } catch (const json::exception& ex) {
        TraceCheckResult r;
        r.problems.push_back(path.string() + ": not valid JSON (" + ex.what() + ")");
        return r;
    }
    return check_trace_json(doc);
}

}  // namespace napkin::profiler
