// The Chrome trace writer: every event written is parsed back (names, times to the nanosecond,
// args), the validator accepts the result, and a writer that is not closed leaves no file.
#include "profiler/chrome_trace_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "profiler/host_range.h"
#include "profiler/trace_check.h"
#include "profiler/trace_reader.h"
#include "tests/profiler/double_nesting.h"
#include "tests/profiler/temp_dir.h"

namespace napkin::profiler {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using test::TempDir;

json read_json(const fs::path& path) {
    std::ifstream in(path);
    return json::parse(in);
}

RangeEvent range(std::string name, Category cat, TrackId track, std::int64_t start_ns,
                 std::int64_t dur_ns, std::uint64_t flops = 0, std::uint64_t bytes = 0) {
    RangeEvent e;
    e.name = std::move(name);
    e.category = cat;
    e.track = track;
    e.start_ns = start_ns;
    e.dur_ns = dur_ns;
    e.flops = flops;
    e.bytes = bytes;
    return e;
}

TEST(ChromeTraceWriter, RoundTripsEveryEvent) {
    TempDir dir;
    const fs::path path = dir.path() / "trace.json";

    // One step: forward with two ops (sub-microsecond times), kernels on the device track,
    // launch flows between them, memory counters, an instant.
    std::vector<Event> events;
    events.push_back(
        range("h.0.attn.qkv", Category::op, kHostTrack, 1'001, 2'345, 2'000'000, 40'000));
    events.push_back(range("h.0.attn.proj", Category::op, kHostTrack, 3'346, 1'000));
    events.push_back(range("forward", Category::forward, kHostTrack, 1'000, 5'000));
    events.push_back(range("backward", Category::backward, kHostTrack, 6'000, 9'999));
    events.push_back(range("step 0", Category::step, kHostTrack, 0, 20'000));
    events.push_back(
        range("matmul_forward", Category::kernel, kDeviceTrack, 1'500, 1'234, 2'000'000, 40'000));
    // A run an hour long still keeps the nanoseconds.
    events.push_back(range("late", Category::marker, kHostTrack, 3'600'000'000'001, 7));
    events.push_back(
        FlowEvent{"launch", Category::launch, kHostTrack, 1'100, 42, FlowPhase::start});
    events.push_back(
        FlowEvent{"launch", Category::launch, kDeviceTrack, 1'600, 42, FlowPhase::end});
    events.push_back(CounterEvent{"memory", 500, {{"parameters", 1024.0}, {"activations", 0.0}}});
    events.push_back(
        CounterEvent{"memory", 2'500, {{"parameters", 1024.0}, {"activations", 4096.0}}});
    events.push_back(InstantEvent{"checkpoint", Category::marker, kHostTrack, 19'999, {}});
    std::get<RangeEvent>(events[0]).args.push_back(Arg{"tokens", std::int64_t{64}});

    Recorder rec;
    ChromeTraceOptions options;
    options.process_name = "napkin run cpu-tiny";
    options.other_data = {{"model", "gpt2-tiny"}};
    ChromeTraceWriter writer(path, options);
    ASSERT_TRUE(writer.ok()) << writer.error();
    writer.write_tracks(rec.tracks());
    writer.write(events);
    writer.set_other_data("dropped_events", 0);
    EXPECT_FALSE(fs::exists(path));  // streaming into the temporary until close()
    const WriteResult closed = writer.close();
    ASSERT_TRUE(closed.ok) << closed.error;
    EXPECT_TRUE(fs::exists(path));
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"trace.json"});

    const json doc = read_json(path);
    EXPECT_EQ(doc["displayTimeUnit"], "ns");
    EXPECT_EQ(doc["otherData"]["model"], "gpt2-tiny");
    EXPECT_EQ(doc["otherData"]["dropped_events"], 0);
    EXPECT_EQ(doc["otherData"]["schema"], "napkin-trace/1");
    EXPECT_EQ(doc["otherData"]["events_failed"], 0);
    const json& trace = doc["traceEvents"];
    // 2 process + 2x2 track metadata + the events.
    ASSERT_EQ(trace.size(), 2 + 4 + events.size());
    EXPECT_EQ(doc["otherData"]["events_written"], trace.size());

    std::size_t non_metadata = 0;
    for (const auto& e : trace) {
        EXPECT_EQ(e["pid"], 1);
        if (e["ph"] != "M") ++non_metadata;
    }
    EXPECT_EQ(non_metadata, events.size());

    // Every event written is read back with its name, phase and times.
    std::size_t i = 0;
    for (const auto& e : trace) {
        if (e["ph"] == "M") continue;
        const Event& src = events[i++];
        if (const auto* r = std::get_if<RangeEvent>(&src)) {
            EXPECT_EQ(e["ph"], "X");
            EXPECT_EQ(e["name"], r->name);
            EXPECT_EQ(e["tid"], r->track);
            EXPECT_EQ(e["cat"], enum_name(kCategoryNames, r->category));
            EXPECT_NEAR(e["ts"].get<double>(), static_cast<double>(r->start_ns) / 1000.0, 1e-3);
            EXPECT_NEAR(e["dur"].get<double>(), static_cast<double>(r->dur_ns) / 1000.0, 1e-3);
            // The nanoseconds come back exactly.
            EXPECT_EQ(std::llround(e["ts"].get<double>() * 1000.0), r->start_ns);
            EXPECT_EQ(std::llround(e["dur"].get<double>() * 1000.0), r->dur_ns);
        } else if (const auto* c = std::get_if<CounterEvent>(&src)) {
            EXPECT_EQ(e["ph"], "C");
            EXPECT_EQ(e["name"], c->name);
            EXPECT_NEAR(e["ts"].get<double>(), static_cast<double>(c->t_ns) / 1000.0, 1e-3);
            for (const auto& v : c->values)
                EXPECT_EQ(e["args"][v.series], v.value);
        } else if (const auto* f = std::get_if<FlowEvent>(&src)) {
            EXPECT_EQ(e["ph"], f->phase == FlowPhase::start ? "s" : "f");
            EXPECT_EQ(e["id"], f->id);
            EXPECT_EQ(e["tid"], f->track);
            EXPECT_EQ(e.contains("bp"), f->phase == FlowPhase::end);
        } else if (const auto* in = std::get_if<InstantEvent>(&src)) {
            EXPECT_EQ(e["ph"], "i");
            EXPECT_EQ(e["s"], "t");
            EXPECT_EQ(e["name"], in->name);
        }
    }

    // Exact sub-microsecond digits, not a rounded print.
    EXPECT_DOUBLE_EQ(trace[6]["ts"].get<double>(), 1.001);
    EXPECT_DOUBLE_EQ(trace[6]["dur"].get<double>(), 2.345);
    EXPECT_NEAR(trace[12]["ts"].get<double>(), 3'600'000'000.001, 1e-4);

    // Kernel args: the work and the rates derived from it.
    const json& args = trace[6]["args"];
    EXPECT_EQ(args["flops"], 2'000'000);
    EXPECT_EQ(args["bytes"], 40'000);
    EXPECT_NEAR(args["achieved_gflop_per_s"].get<double>(), 2e6 / 2345.0, 1e-9);
    EXPECT_NEAR(args["achieved_gb_per_s"].get<double>(), 4e4 / 2345.0, 1e-9);
    EXPECT_DOUBLE_EQ(args["flop_per_byte"].get<double>(), 50.0);
    EXPECT_EQ(args["tokens"], 64);
    EXPECT_FALSE(trace[8].contains("args"));  // "forward" did no work of its own

    // Metadata names the process and both tracks.
    EXPECT_EQ(trace[0]["name"], "process_name");
    EXPECT_EQ(trace[0]["args"]["name"], "napkin run cpu-tiny");
    EXPECT_EQ(trace[2]["name"], "thread_name");
    EXPECT_EQ(trace[2]["tid"], kHostTrack);
    EXPECT_EQ(trace[2]["args"]["name"], "host");
    EXPECT_EQ(trace[4]["args"]["name"], "device (cpu kernels)");

    const TraceCheckResult check = check_trace_file(path);
    EXPECT_TRUE(check.ok()) << check.summary();
    EXPECT_EQ(check.event_count, trace.size());
    EXPECT_EQ(check.count("X"), 7u);
    EXPECT_EQ(check.count("M"), 6u);
    EXPECT_EQ(check.count("C"), 2u);
    EXPECT_EQ(check.count("s"), 1u);
    EXPECT_EQ(check.count("f"), 1u);
    EXPECT_EQ(check.count("i"), 1u);
}

TEST(ChromeTraceWriter, RecorderToWriterEndToEnd) {
    TempDir dir;
    const fs::path path = dir.path() / "trace.json";
    Recorder rec(3);  // a step's three ranges fit; its fourth event does not
    ChromeTraceWriter writer(path);
    writer.write_tracks(rec.tracks());
    for (int step = 0; step < 3; ++step) {
        {
            ScopedRange s(&rec, "step " + std::to_string(step), Category::step);
            for (int l = 0; l < 2; ++l) {
                ScopedRange op(&rec, "h." + std::to_string(l) + ".mlp.fc", Category::op,
                               KernelCost{100, 10, 10, 0});
            }
        }
        rec.counter("loss", rec.now_ns(), 3.5 - step);  // dropped: over the cap
        writer.write(rec.take());  // once a step: the cap bounds a step, not the run
    }
    writer.set_other_data("dropped_events", rec.dropped());
    ASSERT_TRUE(writer.close().ok);

    const TraceCheckResult check = check_trace_file(path);
    EXPECT_TRUE(check.ok()) << check.summary();
    EXPECT_EQ(check.count("X"), 9u);
    EXPECT_EQ(check.count("C"), 0u);
    EXPECT_EQ(read_json(path)["otherData"]["dropped_events"], 3);
}

TEST(ChromeTraceWriter, UnclosedWriterLeavesNoFile) {
    TempDir dir;
    const fs::path path = dir.path() / "trace.json";
    {
        ChromeTraceWriter writer(path);
        writer.write_range(range("op", Category::op, kHostTrack, 0, 10));
        writer.flush();
        EXPECT_TRUE(fs::exists(writer.tmp_path()));
    }
    EXPECT_TRUE(dir.entries().empty());
}

TEST(ChromeTraceWriter, UnclosedWriterKeepsAnOlderTrace) {
    TempDir dir;
    const fs::path path = dir.path() / "trace.json";
    {
        ChromeTraceWriter first(path);
        ASSERT_TRUE(first.close().ok);
    }
    const auto before = read_json(path);
    {
        ChromeTraceWriter second(path);
        second.write_range(range("op", Category::op, kHostTrack, 0, 10));
    }
    EXPECT_EQ(read_json(path), before);
}

TEST(ChromeTraceWriter, UnwritablePathReportsInsteadOfThrowing) {
    TempDir dir;
    const fs::path path = dir.path() / "no" / "such" / "folder" / "trace.json";
    ChromeTraceWriter writer(path);
    EXPECT_FALSE(writer.ok());
    EXPECT_EQ(writer.error().rfind(path.string() + ": cannot create a file in ", 0), 0u)
        << writer.error();
    writer.write_range(range("op", Category::op, kHostTrack, 0, 10));  // a no-op
    const WriteResult r = writer.close();
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.error, writer.error());
    EXPECT_FALSE(writer.close().ok);  // closing again repeats the answer
    EXPECT_FALSE(fs::exists(path));
}

TEST(ChromeTraceWriter, EmptyTraceIsValid) {
    TempDir dir;
    const fs::path path = dir.path() / "trace.json";
    ChromeTraceWriter writer(path);
    ASSERT_TRUE(writer.close().ok);
    const TraceCheckResult check = check_trace_file(path);
    EXPECT_TRUE(check.ok()) << check.summary();
    EXPECT_EQ(check.count("M"), 2u);
}

TEST(ChromeTraceWriter, InvalidUtf8NameIsReplacedNotThrown) {
    TempDir dir;
    const fs::path path = dir.path() / "trace.json";
    ChromeTraceWriter writer(path);
    writer.write_range(range(std::string("bad\xff name"), Category::op, kHostTrack, 0, 10));
    ASSERT_TRUE(writer.close().ok);
    const TraceCheckResult check = check_trace_file(path);
    EXPECT_TRUE(check.ok()) << check.summary();
    EXPECT_EQ(check.count("X"), 1u);
}

TEST(ChromeTraceWriter, RangeArgsOnlyForWork) {
    RangeEvent idle = range("step", Category::step, kHostTrack, 0, 10);
    EXPECT_TRUE(range_args(idle).empty());
    RangeEvent instant_kernel = range("k", Category::kernel, kDeviceTrack, 0, 0, 8, 0);
    const auto args = range_args(instant_kernel);
    EXPECT_EQ(args["flops"], 8);
    EXPECT_FALSE(args.contains("achieved_gflop_per_s"));  // no rate from a zero duration
    EXPECT_FALSE(args.contains("flop_per_byte"));         // nor an intensity from zero bytes
}

// "dur" is the double that puts ts + dur on the range's end: the pair of
// traces/h200-gpt2 (4952392.531 + 98.37 = 4952490.901000001 in double, past the successor's
// 4952490.901) and a sweep of starts up to 10^4 s and lengths up to 10 s. Read back from its
// shortest decimal text (as nlohmann writes it), it is the nanoseconds it was made from.
TEST(TraceDurUs, EndsExactlyWhereTheRangeEnds) {
    EXPECT_GT(trace_us(4'952'392'531) + trace_us(98'370), trace_us(4'952'490'901));  // the fault
    std::mt19937_64 rng(22);
    std::uniform_int_distribution<std::int64_t> start(0, 10'000'000'000'000),
        len(0, 10'000'000'000);
    for (int i = 0; i < 200'000; ++i) {
        const std::int64_t s = i == 0 ? 4'952'392'531 : start(rng) >> (i % 40);
        const std::int64_t d = i == 0 ? 98'370 : len(rng) >> (i % 34);
        const double dur = trace_dur_us(s, d);
        // Never past the end; on it exactly whenever the start is at least half the end (every
        // range but those near the trace's zero: ts + dur then cannot be off by a rounding tie).
        ASSERT_LE(trace_us(s) + dur, trace_us(s + d)) << s << " + " << d;
        if (2 * s >= s + d) {
            ASSERT_EQ(trace_us(s) + dur, trace_us(s + d)) << s << " + " << d;
        }
        const std::string text = json(dur).dump();
        ScannedField f;
        f.kind = JsonKind::number;
        f.text = text;
        std::int64_t back = -1;
        ASSERT_TRUE(trace_time_ns(f, back)) << text;
        ASSERT_EQ(back, d) << text;
    }
}

// A written trace nests in double: kernels abutting at times whose quotients do not add up.
TEST(TraceDurUs, WrittenTraceNestsInDouble) {
    TempDir dir;
    const fs::path path = dir.path() / "trace.json";
    ChromeTraceWriter writer(path);
    writer.write_range(range("step", Category::step, kHostTrack, 4'952'000'000, 1'000'000));
    std::int64_t t = 4'952'392'531;
    for (const std::int64_t d : {98'370, 17, 333, 1'001, 98'370, 7})
        writer.write_range(range("k", Category::kernel, kHostTrack, (t += d) - d, d));
    ASSERT_TRUE(writer.close().ok);
    const std::vector<std::string> faults = napkin::test::double_nesting_faults(read_json(path));
    EXPECT_TRUE(faults.empty()) << faults.front();
}

// Every sample trace under traces/ (each rank's too) nests when ts + dur is added in double.
TEST(TraceDurUs, EverySampleTraceNestsInDouble) {
    int checked = 0;
    for (const auto& entry :
         fs::recursive_directory_iterator(fs::path(NAPKIN_SOURCE_DIR) / "traces")) {
        if (entry.path().filename() != "trace.json") continue;
        const std::vector<std::string> faults =
            napkin::test::double_nesting_faults(read_json(entry.path()));
        EXPECT_TRUE(faults.empty())
            << entry.path() << ": " << faults.size() << " faults, first " << faults.front();
        ++checked;
    }
    EXPECT_GE(checked, 4);
}

}  // namespace
}  // namespace napkin::profiler
