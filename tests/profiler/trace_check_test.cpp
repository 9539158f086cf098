// The trace validator: accepts well-formed traces (nesting with shared boundaries, B/E pairs,
// flows) and rejects each kind of bad trace with one specific message.
#include "profiler/trace_check.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

namespace napkin::profiler {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json x(const char* name, double ts, double dur, int tid = 1) {
    return {{"name", name}, {"ph", "X"}, {"ts", ts}, {"dur", dur}, {"pid", 1}, {"tid", tid}};
}
json be(const char* ph, const char* name, double ts, int tid = 1) {
    return {{"name", name}, {"ph", ph}, {"ts", ts}, {"pid", 1}, {"tid", tid}};
}
json trace_of(json events) {
    return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ns"}};
}

// Expects exactly one problem, containing `text`.
void expect_one_problem(const json& trace, const std::string& text) {
    const TraceCheckResult r = check_trace_json(trace);
    ASSERT_EQ(r.problems.size(), 1u) << r.summary();
    EXPECT_NE(r.problems[0].find(text), std::string::npos)
        << "expected '" << text << "' in: " << r.problems[0];
}

TEST(TraceCheck, AcceptsNestedCompleteEvents) {
    const json t = trace_of({
        x("step", 0, 100),
        x("forward", 0, 40),    // starts with its parent
        x("op a", 0, 10),       // starts with both
        x("op b", 10, 30),      // starts where the previous ends, ends with its parent
        x("backward", 40, 60),  // ends with the step
        x("op c", 40.0005, 59.9995),
        x("late op", 99.9995, 0.001),  // 1 ns tolerance at the step's end
        x("other track", 5, 500, 2),   // another track is its own stack
        x("zero", 100, 0),
    });
    const TraceCheckResult r = check_trace_json(t);
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.count("X"), 9u);
    EXPECT_EQ(r.event_count, 9u);
}

TEST(TraceCheck, AcceptsEveryPhaseNapkinWrites) {
    const json t = trace_of({
        {{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", "napkin"}}}},
        {{"name", "process_sort_index"}, {"ph", "M"}, {"pid", 1}, {"args", {{"sort_index", 0}}}},
        {{"name", "thread_name"},
         {"ph", "M"},
         {"pid", 1},
         {"tid", 1},
         {"args", {{"name", "host"}}}},
        {{"name", "thread_sort_index"},
         {"ph", "M"},
         {"pid", 1},
         {"tid", 1},
         {"args", {{"sort_index", 0}}}},
        x("op", 0, 5),
        be("B", "region", 1),
        be("E", "region", 2),
        {{"name", "memory"},
         {"ph", "C"},
         {"ts", 0.5},
         {"pid", 1},
         {"args", {{"parameters", 10}, {"activations", 2.5}}}},
        {{"name", "mark"}, {"ph", "i"}, {"s", "t"}, {"ts", 3}, {"pid", 1}, {"tid", 1}},
        {{"name", "global"}, {"ph", "i"}, {"s", "g"}, {"ts", 3}, {"pid", 1}},
        {{"name", "launch"},
         {"ph", "s"},
         {"cat", "launch"},
         {"id", 7},
         {"ts", 1},
         {"pid", 1},
         {"tid", 1}},
        {{"name", "launch"},
         {"ph", "f"},
         {"cat", "launch"},
         {"id", 7},
         {"bp", "e"},
         {"ts", 2},
         {"pid", 1},
         {"tid", 2}},
    });
    const TraceCheckResult r = check_trace_json(t);
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.count("M"), 4u);
    EXPECT_EQ(r.count("B"), 1u);
    EXPECT_EQ(r.count("E"), 1u);
    EXPECT_EQ(r.count("C"), 1u);
    EXPECT_EQ(r.count("i"), 2u);
}

TEST(TraceCheck, AcceptsABareArray) {
    const TraceCheckResult r = check_trace_json(json::array({x("op", 0, 1)}));
    EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(TraceCheck, RejectsMissingDur) {
    json bad = x("h.0.attn.qkv", 1, 2);
    bad.erase("dur");
    expect_one_problem(trace_of({x("step", 0, 10), bad}),
                       "event 1 ('h.0.attn.qkv', ph X): missing 'dur'");
}

TEST(TraceCheck, RejectsNegativeDur) {
    expect_one_problem(trace_of({x("op", 5, -1)}), "negative 'dur'");
}

TEST(TraceCheck, RejectsPartialOverlap) {
    expect_one_problem(trace_of({x("a", 0, 10), x("b", 5, 10)}),
                       "pid 1 tid 1: partial overlap of event 0 ('a' 0.000..10.000 us) and "
                       "event 1 ('b' 5.000..15.000 us)");
}

TEST(TraceCheck, RejectsOverlapBeyondTheTolerance) {
    // 2 ns past the parent's end is not rounding.
    expect_one_problem(trace_of({x("a", 0, 10), x("b", 5, 5.002)}), "partial overlap");
}

TEST(TraceCheck, RejectsNonNumericCounter) {
    const json c = {{"name", "memory"},
                    {"ph", "C"},
                    {"ts", 1},
                    {"pid", 1},
                    {"args", {{"parameters", 10}, {"activations", "lots"}}}};
    expect_one_problem(trace_of({c}),
                       "event 0 ('memory', ph C): counter series 'activations' is not a number");
}

TEST(TraceCheck, RejectsCounterWithoutArgs) {
    const json c = {{"name", "memory"}, {"ph", "C"}, {"ts", 1}, {"pid", 1}};
    expect_one_problem(trace_of({c}), "counter without an 'args' object");
}

TEST(TraceCheck, RejectsUnknownMetadataName) {
    const json m = {
        {"name", "thread_color"}, {"ph", "M"}, {"pid", 1}, {"tid", 1}, {"args", {{"name", "red"}}}};
    expect_one_problem(trace_of({m}), "unknown metadata name 'thread_color'");
}

TEST(TraceCheck, RejectsMetadataWithoutItsArg) {
    const json m = {{"name", "thread_sort_index"},
                    {"ph", "M"},
                    {"pid", 1},
                    {"tid", 1},
                    {"args", {{"name", "host"}}}};
    expect_one_problem(trace_of({m}), "missing numeric 'args.sort_index'");
}

TEST(TraceCheck, RejectsEndWithoutBegin) {
    expect_one_problem(trace_of({be("B", "a", 0), be("E", "a", 1), be("E", "a", 2)}),
                       "pid 1 tid 1: E event 2 ('a' at 2.000 us) without a matching B");
}

TEST(TraceCheck, RejectsUnclosedBegin) {
    expect_one_problem(trace_of({be("B", "outer", 0), be("B", "inner", 1), be("E", "inner", 2)}),
                       "B event 0 ('outer' at 0.000 us) is never closed by an E");
}

TEST(TraceCheck, BeginEndBalanceIsPerTrack) {
    // An E on another track closes nothing: both ends are unmatched.
    const TraceCheckResult r = check_trace_json(trace_of({be("B", "a", 0, 1), be("E", "a", 1, 2)}));
    ASSERT_EQ(r.problems.size(), 2u) << r.summary();
    EXPECT_EQ(r.problems[0], "pid 1 tid 1: B event 0 ('a' at 0.000 us) is never closed by an E");
    EXPECT_EQ(r.problems[1], "pid 1 tid 2: E event 1 ('a' at 1.000 us) without a matching B");
}

TEST(TraceCheck, RejectsMismatchedEnd) {
    expect_one_problem(trace_of({be("B", "a", 0), be("E", "b", 1)}),
                       "E event 1 ('b') closes B event 0 ('a')");
}

TEST(TraceCheck, RejectsMissingFields) {
    json no_ts = x("op", 0, 1);
    no_ts.erase("ts");
    expect_one_problem(trace_of({no_ts}), "event 0 ('op', ph X): missing or non-numeric 'ts'");
    json no_tid = x("op", 0, 1);
    no_tid.erase("tid");
    expect_one_problem(trace_of({no_tid}), "missing 'tid'");
    json no_pid = x("op", 0, 1);
    no_pid.erase("pid");
    expect_one_problem(trace_of({no_pid}), "missing 'pid'");
    json no_name = x("op", 0, 1);
    no_name.erase("name");
    expect_one_problem(trace_of({no_name}), "missing string 'name'");
    expect_one_problem(trace_of({json{{"name", "op"}}}), "missing string 'ph'");
    expect_one_problem(trace_of({be("Q", "op", 0)}), "unknown phase 'Q'");
}

TEST(TraceCheck, RejectsFlowProblems) {
    const json no_id = {{"name", "l"}, {"ph", "s"}, {"ts", 1}, {"pid", 1}, {"tid", 1}};
    expect_one_problem(trace_of({no_id}), "flow without 'id'");
    const json orphan = {{"name", "l"}, {"ph", "f"}, {"id", 3}, {"bp", "e"},
                         {"ts", 1},     {"pid", 1},  {"tid", 2}};
    expect_one_problem(trace_of({orphan}), "flow end without a flow start");
    const json bad_bp = {{"name", "l"}, {"ph", "s"}, {"id", 3}, {"bp", "x"},
                         {"ts", 1},     {"pid", 1},  {"tid", 2}};
    expect_one_problem(trace_of({bad_bp}), "binding point 'bp' must be \"e\"");
}

TEST(TraceCheck, RejectsBadTopLevel) {
    expect_one_problem(json{{"events", json::array()}}, "missing 'traceEvents' array");
    expect_one_problem(json{{"traceEvents", json::array()}, {"displayTimeUnit", "s"}},
                       "'displayTimeUnit' must be");
    expect_one_problem(json(3), "expected an object");
    expect_one_problem(trace_of({3}), "event 0: not an object");
}

TEST(TraceCheck, CapsTheNumberOfProblems) {
    json events = json::array();
    for (int i = 0; i < 150; ++i)
        events.push_back(be("Q", "op", i));
    const TraceCheckResult r = check_trace_json(trace_of(events));
    EXPECT_EQ(r.problems.size(), TraceCheckResult::kMaxProblems);
    EXPECT_EQ(r.problems_omitted, 50u);
    EXPECT_NE(r.summary().find("... and 50 more problems"), std::string::npos);
}

TEST(TraceCheck, UnreadableFilesAreProblemsNotExceptions) {
    const fs::path dir = fs::temp_directory_path() /
                         ("napkin_trace_check_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir);
    const fs::path missing = dir / "missing.json";
    const TraceCheckResult r1 = check_trace_file(missing);
    ASSERT_EQ(r1.problems.size(), 1u);
    EXPECT_NE(r1.problems[0].find("cannot open"), std::string::npos);

    const fs::path truncated = dir / "truncated.json";
    std::ofstream(truncated) << R"({"traceEvents":[{"name":"op","ph":"X",)";
    const TraceCheckResult r2 = check_trace_file(truncated);
    ASSERT_EQ(r2.problems.size(), 1u);
    EXPECT_NE(r2.problems[0].find("not valid JSON"), std::string::npos);
    std::error_code ec;
    fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace napkin::profiler

namespace napkin::profiler {
namespace {

// The sample runs committed under traces/ (a CPU run, multi-rank ones, the H200's GPT-2 with
// CUPTI's records) pass the same checks as every trace the tests write.
TEST(TraceCheck, EveryCommittedSampleTracePasses) {
    const fs::path root = fs::path(NAPKIN_SOURCE_DIR) / "traces";
    int checked = 0;
    for (const auto& entry : fs::recursive_directory_iterator(root)) {
        if (entry.path().filename() != "trace.json") continue;
        const TraceCheckResult r = check_trace_file(entry.path());
        for (const auto& problem : r.problems) ADD_FAILURE() << entry.path() << ": " << problem;
        EXPECT_GT(r.count("X"), 0u) << entry.path();
        ++checked;
    }
    EXPECT_GE(checked, 4) << "sample traces under " << root;
}

}  // namespace
}  // namespace napkin::profiler
