// The one trace reader in both modes: the committed traces read alike strictly and leniently;
// a hand-made bad trace is every problem in the strict mode and the same events skipped in the
// lenient one; Kineto's absolute timestamps keep their nanoseconds and are rebased; flows bind
// whichever of their ends the file holds first; gzip, FIFOs and the raw event stream.
#include "profiler/trace_reader.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/profiler/temp_dir.h"

namespace napkin::profiler {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Reads `doc` in `mode`, expecting a trace without problems.
TraceData read_clean(const std::string& doc, TraceMode mode) {
    TraceData t;
    const TraceReadResult r = read_trace_text(doc, mode, t);
    EXPECT_TRUE(r.ok()) << r.error;
    EXPECT_TRUE(r.problems.empty()) << r.problems.front();
    return t;
}

std::uint32_t event_named(const TraceData& t, const std::string& name) {
    for (std::uint32_t i = 0; i < t.events.size(); ++i) {
        if (t.name_of(t.events[i]) == name) return i;
    }
    return kNone;
}

// Both modes build the same model from a valid trace: the lenient one only forgives more.
TEST(TraceReader, BothModesReadTheCommittedTracesAlike) {
    int read = 0;
    for (const auto& entry :
         fs::recursive_directory_iterator(fs::path(NAPKIN_SOURCE_DIR) / "traces")) {
        if (entry.path().filename() != "trace.json") continue;
        SCOPED_TRACE(entry.path().string());
        TraceData strict, lenient;
        const TraceReadResult s = read_trace_file(entry.path(), TraceMode::strict, strict);
        const TraceReadResult l = read_trace_file(entry.path(), TraceMode::lenient, lenient);
        ASSERT_TRUE(s.ok() && l.ok()) << s.error << l.error;
        EXPECT_TRUE(s.problems.empty()) << s.problems.front();
        EXPECT_EQ(lenient.skipped_events, 0);
        EXPECT_EQ(strict.schema, "napkin-trace/1");
        EXPECT_EQ(strict.time_origin_ns, 0);  // napkin counts from the run start: kept as is
        ASSERT_EQ(strict.events.size(), lenient.events.size());
        for (std::size_t i = 0; i < strict.events.size(); ++i) {
            const TraceEvent& a = strict.events[i];
            const TraceEvent& b = lenient.events[i];
            ASSERT_TRUE(a.start_ns == b.start_ns && a.dur_ns == b.dur_ns && a.depth == b.depth &&
                        a.lane == b.lane && a.flow_peer == b.flow_peer && a.index == b.index)
                << "event " << i;
        }
        EXPECT_EQ(strict.flows, lenient.flows);
        EXPECT_GT(strict.flows, 0);
        EXPECT_EQ(s.phase_counts, l.phase_counts);
        ++read;
    }
    EXPECT_GE(read, 4);
}

// One bad event of each kind: strictly, a problem each (and the good events checked as ever);
// leniently, the unusable ones skipped and counted, the rest drawn.
TEST(TraceReader, StrictListsEveryProblemLenientSkipsTheSameEvents) {
    const std::string doc = R"({"displayTimeUnit":"ns","traceEvents":[
        {"name":"step","ph":"X","ts":0,"dur":100,"pid":1,"tid":1},
        {"name":"op","ph":"X","ts":10,"dur":20,"pid":1,"tid":1},
        {"name":"no dur","ph":"X","ts":40,"pid":1,"tid":1},
        {"name":"negative","ph":"X","ts":40,"dur":-2,"pid":1,"tid":1},
        {"name":"no ts","ph":"X","dur":2,"pid":1,"tid":1},
        {"name":"no tid","ph":"X","ts":50,"dur":2,"pid":1},
        {"name":"overlap","ph":"X","ts":90,"dur":20,"pid":1,"tid":1},
        {"name":"mem","ph":"C","ts":5,"pid":1,"args":{"bytes":10,"note":"x"}},
        {"name":"thread_color","ph":"M","pid":1,"tid":1,"args":{"name":"red"}},
        {"name":"l","ph":"f","id":3,"bp":"e","ts":20,"pid":1,"tid":2},
        {"name":"mark","ph":"i","s":"q","ts":1,"pid":1,"tid":1},
        17
    ]})";
    TraceData strict, lenient;
    const TraceReadResult s = read_trace_text(doc, TraceMode::strict, strict);
    ASSERT_TRUE(s.ok()) << s.error;
    const std::vector<std::string> expected = {
        "event 2 ('no dur', ph X): missing 'dur'",
        "event 3 ('negative', ph X): negative 'dur' -2.000",
        "event 4 ('no ts', ph X): missing or non-numeric 'ts'",
        "event 5 ('no tid', ph X): missing 'tid'",
        "event 7 ('mem', ph C): counter series 'note' is not a number: x",
        "event 8 ('thread_color', ph M): unknown metadata name 'thread_color' (expected "
        "process_name, thread_name, process_sort_index or thread_sort_index)",
        "event 10 ('mark', ph i): instant scope 's' must be \"g\", \"p\" or \"t\", not q",
        "event 11: not an object",
        "pid 1 tid 1: partial overlap of event 0 ('step' 0.000..100.000 us) and event 6 "
        "('overlap' 90.000..110.000 us)",
        "event 9 ('l', ph f): flow end without a flow start ('s') of the same id",
    };
    EXPECT_EQ(s.problems, expected);
    EXPECT_EQ(s.phase_counts.at("X"), 7u);
    EXPECT_EQ(strict.event_count, 12);

    const TraceReadResult l = read_trace_text(doc, TraceMode::lenient, lenient);
    ASSERT_TRUE(l.ok()) << l.error;
    EXPECT_TRUE(l.problems.empty());
    // Left out: the negative duration, the missing ts, the non-object. "no dur" is drawn with 0,
    // "no tid" on tid "0", the overlap one level deeper.
    EXPECT_EQ(lenient.skipped_events, 3);
    ASSERT_EQ(lenient.warnings.size(), 3u);
    EXPECT_EQ(lenient.warnings[0], expected[1]);
    EXPECT_EQ(lenient.warnings[1], expected[2]);
    EXPECT_EQ(lenient.warnings[2], expected[7]);
    EXPECT_EQ(lenient.events.size(), 6u);  // step, op, no dur, no tid, overlap, mark
    const std::uint32_t overlap = event_named(lenient, "overlap");
    ASSERT_NE(overlap, kNone);
    EXPECT_EQ(lenient.events[overlap].depth, 1);
    ASSERT_EQ(lenient.counters.size(), 1u);
    EXPECT_EQ(lenient.counters[0].key, "bytes");
}

// An older Kineto stamps Unix-epoch microseconds with three decimals: 19 significant digits, more
// than a double holds. They are read exactly, and the trace is rebased to its first event.
TEST(TraceReader, EpochMicrosecondsKeepTheirNanosecondsAndAreRebased) {
    const std::string doc = R"({"traceEvents":[
        {"ph":"M","name":"process_name","pid":7,"tid":0,"ts":1700000000000000.000,"args":{"name":"python"}},
        {"ph":"X","name":"ProfilerStep#1","pid":7,"tid":7,"ts":1700000000000100.001,"dur":50.002},
        {"ph":"X","name":"aten::mm","pid":7,"tid":7,"ts":1700000000000100.002,"dur":50.001},
        {"ph":"X","name":"gemm","pid":0,"tid":7,"ts":1700000000000120.999,"dur":1.001,"cat":"kernel"},
        {"ph":"C","name":"mem","pid":7,"ts":1700000000000099.500,"args":{"allocated":1}}
    ]})";
    for (const TraceMode mode : {TraceMode::strict, TraceMode::lenient}) {
        const TraceData t = read_clean(doc, mode);
        EXPECT_EQ(t.time_origin_ns, 1'700'000'000'000'099'500);  // the counter came first
        EXPECT_EQ(t.t_min_ns, 501);
        const TraceEvent& step = t.events[event_named(t, "ProfilerStep#1")];
        const TraceEvent& mm = t.events[event_named(t, "aten::mm")];
        EXPECT_EQ(step.start_ns, 501);
        EXPECT_EQ(mm.start_ns, 502);
        EXPECT_EQ(mm.end_ns(), step.end_ns());  // 100.002 + 50.001 == 100.001 + 50.002, exactly
        EXPECT_EQ(mm.depth, 1);
        EXPECT_EQ(t.events[event_named(t, "gemm")].dur_ns, 1001);
        ASSERT_EQ(t.counters.size(), 1u);
        EXPECT_EQ(t.counters[0].t_ns[0], 0);
    }
}

// traces/h200-gpt2's kernels abut exactly in integer ns, where ts + dur in double would put a
// child past its parent (4952392.531 + 98.37 > 4952490.901).
TEST(TraceReader, TimesAreExactNanoseconds) {
    const std::string doc = R"([
        {"ph":"X","name":"a","pid":1,"tid":1,"ts":4952392.531,"dur":98.37},
        {"ph":"X","name":"b","pid":1,"tid":1,"ts":4952490.901,"dur":1},
        {"ph":"X","name":"tiny","pid":1,"tid":2,"ts":0.0004,"dur":0.0005},
        {"ph":"X","name":"exp","pid":1,"tid":2,"ts":1.5e3,"dur":2E-3}
    ])";
    const TraceData t = read_clean(doc, TraceMode::strict);
    const TraceEvent& a = t.events[event_named(t, "a")];
    const TraceEvent& b = t.events[event_named(t, "b")];
    EXPECT_EQ(a.end_ns(), 4'952'490'901);
    EXPECT_EQ(b.start_ns, a.end_ns());
    EXPECT_EQ(a.depth, b.depth);
    EXPECT_EQ(t.events[event_named(t, "tiny")].start_ns, 0);  // 0.4 ns rounds down
    EXPECT_EQ(t.events[event_named(t, "tiny")].dur_ns, 1);    // 0.5 ns rounds away from zero
    EXPECT_EQ(t.events[event_named(t, "exp")].start_ns, 1'500'000);
    EXPECT_EQ(t.events[event_named(t, "exp")].dur_ns, 2);
}

// Kineto writes some flows' "f" before their "s"; both bind, ac2g (launch -> kernel) and fwdbwd
// (forward op -> backward function) alike, and the strict mode has nothing to say.
TEST(TraceReader, FlowsBindWhicheverEndComesFirstInTheFile) {
    const std::string doc = R"({"traceEvents":[
        {"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":30,"dur":10},
        {"ph":"f","id":5,"pid":0,"tid":7,"ts":30,"cat":"ac2g","name":"ac2g","bp":"e"},
        {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":10,"dur":5},
        {"ph":"s","id":5,"pid":1,"tid":1,"ts":10,"cat":"ac2g","name":"ac2g"},
        {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":0,"dur":20},
        {"ph":"X","cat":"cpu_op","name":"MmBackward0","pid":1,"tid":2,"ts":50,"dur":20},
        {"ph":"f","id":5,"pid":1,"tid":2,"ts":50,"cat":"fwdbwd","name":"fwdbwd","bp":"e"},
        {"ph":"s","id":5,"pid":1,"tid":1,"ts":0,"cat":"fwdbwd","name":"fwdbwd"}
    ]})";
    for (const TraceMode mode : {TraceMode::strict, TraceMode::lenient}) {
        const TraceData t = read_clean(doc, mode);
        EXPECT_EQ(t.flows, 2);
        const std::uint32_t gemm = event_named(t, "gemm"),
                            launch = event_named(t, "cudaLaunchKernel");
        EXPECT_EQ(t.events[gemm].flow_peer, launch);
        EXPECT_EQ(t.events[launch].flow_peer, gemm);
        // The forward op's flow starts at its start: the op encloses it (the launch does not).
        EXPECT_EQ(t.events[event_named(t, "MmBackward0")].flow_peer, event_named(t, "aten::mm"));
        EXPECT_TRUE(t.lanes[t.events[gemm].lane].device);
    }
    // A flow that ends before any of its starts is a problem, and stays unbound.
    TraceData t;
    const TraceReadResult r = read_trace_text(R"([
        {"ph":"s","id":1,"pid":1,"tid":1,"ts":9,"cat":"c","name":"n"},
        {"ph":"f","id":1,"pid":1,"tid":1,"ts":5,"cat":"c","name":"n","bp":"e"}])",
                                              TraceMode::strict, t);
    ASSERT_EQ(r.problems.size(), 1u);
    EXPECT_EQ(r.problems[0],
              "event 1 ('n', ph f): flow ends at 5.000 us, before it starts at 9.000 us");
}

TEST(TraceReader, TheEventStreamHandsOverEachEventsOwnText) {
    const std::string text =
        R"({"traceEvents": [ {"ph":"X", "name":"a\"b", "args":{"x":[1,{"y":2}]}} ,
        3, {"ph":"i","name":"m"}], "otherData": {"schema": "napkin-trace/1"}, "displayTimeUnit": "ms"})";
    std::string padded = text + std::string(kTracePadding, '\0');
    std::vector<std::string> texts;
    std::vector<std::string> names;
    ScannedDocument doc;
    const std::string err = scan_trace(
        padded.data(), text.size(),
        [&](const ScannedEvent& e) {
            texts.emplace_back(e.json);
            names.emplace_back(e.is_object ? e.name.text : "-");
        },
        doc);
    ASSERT_EQ(err, "");
    EXPECT_EQ(texts,
              (std::vector<std::string>{R"({"ph":"X", "name":"a\"b", "args":{"x":[1,{"y":2}]}})",
                                        "", R"({"ph":"i","name":"m"})"}));
    EXPECT_EQ(names, (std::vector<std::string>{"a\"b", "-", "m"}));
    EXPECT_EQ(doc.event_count, 3u);
    EXPECT_EQ(doc.schema.text, "napkin-trace/1");
    EXPECT_EQ(doc.display_time_unit.text, "ms");
    EXPECT_FALSE(doc.is_array);
}

TEST(TraceReader, DocumentsThatAreNoTraceAreOneLine) {
    const std::pair<std::string, std::string> cases[] = {
        {"", "empty file"},
        {"not json", "not valid JSON ("},
        {"42", "not a Chrome trace: expected an object with 'traceEvents' or an array of events"},
        {R"({"events": []})", "not a Chrome trace: missing 'traceEvents' array"},
        {R"({"traceEvents": [)", "not valid JSON ("},
        {R"({"traceEvents": []} x)", "not valid JSON ("},
    };
    for (const auto& [doc, want] : cases) {
        for (const TraceMode mode : {TraceMode::strict, TraceMode::lenient}) {
            TraceData t;
            const TraceReadResult r = read_trace_text(doc, mode, t);
            EXPECT_EQ(r.error.rfind(want, 0), 0u) << doc << " -> " << r.error;
            EXPECT_EQ(r.error.find('\n'), std::string::npos);
            EXPECT_TRUE(t.events.empty());
        }
    }
    // napkin's own memory.json or report.json given as a trace says what it is.
    TraceData t;
    const TraceReadResult r =
        read_trace_text(R"({"schema": "napkin-memory/1"})", TraceMode::lenient, t);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.top_schema, "napkin-memory/1");
}

// The strict mode refuses any invalid JSON; the lenient one skips what nobody reads unchecked
// (the viewer draws what it can, as fast as it can).
TEST(TraceReader, OnlyTheStrictModeValidatesValuesNobodyReads) {
    const std::string doc =
        R"([{"ph":"X","name":"a","pid":1,"tid":1,"ts":1,"dur":1,"args":{"x":[1,,2]}}])";
    TraceData t;
    EXPECT_EQ(read_trace_text(doc, TraceMode::strict, t).error.rfind("not valid JSON (", 0), 0u);
    EXPECT_TRUE(read_trace_text(doc, TraceMode::lenient, t).ok());
    EXPECT_EQ(t.events.size(), 1u);
}

TEST(TraceReader, FilesPlainGzippedOrNotRegular) {
    TempDir dir;
    const fs::path plain = fs::path(NAPKIN_SOURCE_DIR) / "traces" / "cpu-tiny" / "trace.json";
    TraceData a, b;
    ASSERT_TRUE(read_trace_file(plain, TraceMode::strict, a).ok());
    const fs::path gz = dir.path() / "trace.json.gz";
    ASSERT_EQ(std::system(("gzip -c " + plain.string() + " > " + gz.string()).c_str()), 0);
    const TraceReadResult r = read_trace_file(gz, TraceMode::strict, b);
    if (!gzip_supported()) {
        EXPECT_NE(r.error.find("built without zlib"), std::string::npos) << r.error;
        GTEST_SKIP() << "napkin was built without zlib";
    }
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_TRUE(r.problems.empty());
    EXPECT_EQ(b.events.size(), a.events.size());
    EXPECT_EQ(b.flows, a.flows);
    // Compressed bytes in memory read the same.
    const std::string bytes = slurp(gz);
    TraceData c;
    ASSERT_TRUE(read_trace_text(bytes, TraceMode::strict, c).ok());
    EXPECT_EQ(c.events.size(), a.events.size());
    // Truncated or corrupt compressed data is one line, not a crash.
    std::ofstream(gz, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    EXPECT_EQ(read_trace_file(gz, TraceMode::lenient, b).error,
              "not a valid gzip file (truncated)");
    std::string flipped = bytes;
    flipped[flipped.size() / 2] ^= 0x55;
    flipped[flipped.size() / 2 + 1] ^= 0x55;
    std::ofstream(gz, std::ios::binary) << flipped;
    EXPECT_EQ(read_trace_file(gz, TraceMode::lenient, b).error.rfind("not a valid gzip file (", 0),
              0u);
}

TEST(TraceReader, AFifoOrAFolderIsRefusedWithoutWaiting) {
    TempDir dir;
    const fs::path fifo = dir.path() / "trace.json";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    TraceData t;
    EXPECT_EQ(read_trace_file(fifo, TraceMode::lenient, t).error, "not a regular file");
    EXPECT_EQ(read_trace_file(dir.path(), TraceMode::lenient, t).error, "not a regular file");
    EXPECT_EQ(read_trace_file(dir.path() / "missing.json", TraceMode::strict, t).error,
              "cannot open the file (No such file or directory)");
}

}  // namespace
}  // namespace napkin::profiler
