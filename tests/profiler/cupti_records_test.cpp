// The CUPTI translator on synthetic records: kernels on per-stream tracks with the engine's
// names and costs, launch -> kernel flows whichever arrives first, the clock map, and a trace
// written from it that passes the validator.
#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "profiler/chrome_trace_writer.h"
#include "profiler/cupti_records.h"
#include "profiler/trace_check.h"
#include "tests/profiler/temp_dir.h"

namespace p = napkin::profiler;

namespace {

p::GpuActivity launch(std::uint32_t corr, std::uint64_t start, std::uint64_t end) {
    p::GpuActivity a;
    a.kind = p::GpuActivityKind::runtime;
    a.name = "cudaLaunchKernel";
    a.correlation_id = corr;
    a.start_ns = start;
    a.end_ns = end;
    a.host_thread = 7;
    return a;
}

p::GpuActivity device_record(p::GpuActivityKind kind, std::string name, std::uint32_t corr,
                             std::uint64_t start, std::uint64_t end, std::uint32_t stream = 7) {
    p::GpuActivity a;
    a.kind = kind;
    a.name = std::move(name);
    a.correlation_id = corr;
    a.start_ns = start;
    a.end_ns = end;
    a.stream = stream;
    return a;
}

p::GpuActivity kernel(std::uint32_t corr, std::uint64_t start, std::uint64_t end,
                      std::uint32_t stream = 7) {
    p::GpuActivity a = device_record(
        p::GpuActivityKind::kernel, "_Z21matmul_forward_kernelPfPKfS1_i", corr, start, end, stream);
    a.grid[0] = 128;
    a.block[0] = 256;
    return a;
}

p::GpuActivity memset_record(std::uint32_t corr, std::uint64_t start, std::uint64_t end,
                             std::uint64_t bytes) {
    p::GpuActivity a = device_record(p::GpuActivityKind::memset, "memset", corr, start, end);
    a.bytes = bytes;
    return a;
}

p::GpuActivity external(std::uint32_t corr, std::uint64_t ext) {
    p::GpuActivity a;
    a.kind = p::GpuActivityKind::external_correlation;
    a.correlation_id = corr;
    a.external_id = ext;
    return a;
}

// The recorder's events and tracks written as a Chrome trace at `path`, then validated: every
// problem the validator finds fails the test.
p::TraceCheckResult write_and_check(p::Recorder& rec, const std::filesystem::path& path) {
    p::ChromeTraceWriter w(path);
    w.write(rec.take());
    w.write_tracks(rec.tracks());
    EXPECT_TRUE(w.close().ok);
    auto check = p::check_trace_file(path);
    for (const auto& problem : check.problems)
        ADD_FAILURE() << problem;
    return check;
}

template <class E>
std::vector<E> of(const std::vector<p::Event>& events) {
    std::vector<E> out;
    for (const auto& e : events) {
        if (const auto* x = std::get_if<E>(&e)) out.push_back(*x);
    }
    return out;
}

}  // namespace

TEST(ClockSync, MapsCuptiTimeOntoTheRunClock) {
    p::ClockSync c;
    EXPECT_EQ(c.to_run_ns(5000), 5000);  // no pair: unchanged
    c.add_pair(1'000'000, 100);
    EXPECT_EQ(c.to_run_ns(1'000'500), 600);
    c.add_pair(2'000'000, 100 + 1'000'100);  // the run clock runs 1e-4 fast
    EXPECT_EQ(c.to_run_ns(1'500'000), 100 + 500'050);
    c.add_pair(3'000'000, 5);  // a jump: the rate is kept
    EXPECT_EQ(c.to_run_ns(1'500'000), 100 + 500'050);
}

// A pair is only as good as its host read: a read that took 40 us (a preempted thread, a
// sanitizer) puts 4e-5 of error on a rate fitted over 1 ms, so no rate is fitted from it; the
// same pairs read in 10 ns fit the drift.
TEST(ClockSync, SlowReadsFitNoRate) {
    p::ClockSync slow;
    slow.add_pair(1'000'000, 0, 40'000);
    slow.add_pair(2'000'000, 1'000'400, 40'000);  // 4e-4 "fast": the reads' error, not drift
    EXPECT_EQ(slow.rate(), 1.0);
    EXPECT_EQ(slow.to_run_ns(1'010'000), 10'000);
    p::ClockSync quick;
    quick.add_pair(1'000'000, 0, 10);
    quick.add_pair(11'000'000, 10'000'050, 10);  // 5e-6 fast over 10 ms, known to 1e-9
    EXPECT_DOUBLE_EQ(quick.rate(), 1.000005);
    p::ClockSync jump;
    jump.add_pair(1'000'000, 0);
    jump.add_pair(2'000'000, 1'002'000);  // 2e-3: no clock drifts that much, it jumped
    EXPECT_EQ(jump.rate(), 1.0);
}

// CUPTI's clock counts from the Unix epoch (~1.7e18 ns), where a double steps by 256 ns: the
// map keeps nanoseconds exact there, and pairs too close together fit no rate.
TEST(ClockSync, ExactAtEpochScaleTimestamps) {
    p::ClockSync c;
    const std::uint64_t epoch = 1'700'000'000'123'456'789ull;
    c.add_pair(epoch, 1000);
    c.add_pair(epoch + 5000, 1000 + 4990);  // 5 us apart: jitter, not drift; rate stays 1
    EXPECT_EQ(c.to_run_ns(epoch + 10'001), 11'001);
    EXPECT_EQ(c.to_run_ns(epoch + 10'001) - c.to_run_ns(epoch + 1), 10'000);
    EXPECT_EQ(c.to_run_ns(epoch - 1), 999);  // before the first pair
}

TEST(CuptiTranslator, KernelsFlowsAndCosts) {
    p::Recorder rec;
    p::CuptiTranslator tr(rec);
    tr.clock().add_pair(1'000'000, 0);
    napkin::KernelCost cost;
    cost.flops = 2'000'000;
    cost.bytes_read = 1000;
    cost.bytes_written = 500;
    tr.register_external(42, "matmul_forward", cost);
    // Batch 1: a launch whose kernel arrives later, and a kernel whose launch arrives later.
    tr.add({launch(1, 1'000'100, 1'000'200), external(1, 42), kernel(2, 1'000'900, 1'001'000, 9)});
    // Batch 2: the other halves.
    tr.add({kernel(1, 1'000'300, 1'000'800), launch(2, 1'000'250, 1'000'290)});

    const std::vector<p::Event> ev = rec.take();
    const auto ranges = of<p::RangeEvent>(ev);
    const auto flows = of<p::FlowEvent>(ev);
    ASSERT_EQ(ranges.size(), 4u);
    ASSERT_EQ(flows.size(), 4u);  // two flows, both ends each
    EXPECT_EQ(tr.kernels(), 2u);

    const auto k1 = std::find_if(ranges.begin(), ranges.end(),
                                 [](const p::RangeEvent& r) { return r.name == "matmul_forward"; });
    ASSERT_NE(k1, ranges.end());
    EXPECT_EQ(k1->category, p::Category::kernel);
    EXPECT_EQ(k1->start_ns, 300);
    EXPECT_EQ(k1->dur_ns, 500);
    EXPECT_EQ(k1->flops, 2'000'000u);
    EXPECT_EQ(k1->bytes, 1500u);
    // The unregistered kernel keeps its demangled CUDA name.
    EXPECT_TRUE(std::any_of(ranges.begin(), ranges.end(), [](const p::RangeEvent& r) {
        return r.name.rfind("matmul_forward_kernel(", 0) == 0;
    }));
    // Each flow: start on the api track inside the launch, end on the kernel's stream track.
    const auto tracks = rec.tracks();
    auto track_name = [&](p::TrackId id) {
        for (const auto& t : tracks) {
            if (t.id == id) return t.name;
        }
        return std::string("?");
    };
    for (const auto& f : flows) {
        if (f.phase == p::FlowPhase::start) {
            EXPECT_EQ(track_name(f.track), "cuda api");
        } else {
            EXPECT_EQ(track_name(f.track).rfind("GPU 0 stream ", 0), 0u);
        }
    }
    EXPECT_EQ(tr.unmatched_flows(), 0u);
}

TEST(CuptiTranslator, WritesAValidTrace) {
    napkin::profiler::test::TempDir dir;
    p::Recorder rec;
    p::CuptiTranslator tr(rec);
    std::vector<p::GpuActivity> batch;
    for (std::uint32_t i = 1; i <= 50; ++i) {
        batch.push_back(launch(i, 1000 * i, 1000 * i + 100));
        batch.push_back(kernel(i, 1000 * i + 200, 1000 * i + 900, i % 2 ? 7 : 13));
    }
    p::GpuActivity copy;
    copy.kind = p::GpuActivityKind::memcpy;
    copy.name = "memcpy HtoD";
    copy.start_ns = 60'000;
    copy.end_ns = 61'000;
    copy.bytes = 4096;
    copy.stream = 7;
    batch.push_back(copy);
    tr.add(batch);
    const auto check = write_and_check(rec, dir.path() / "trace.json");
    EXPECT_EQ(check.count("X"), 101u);
    EXPECT_EQ(check.count("s"), 50u);
    EXPECT_EQ(check.count("f"), 50u);
}

// One engine call that ran three kernels (a backward matmul: dinp and dweight GEMMs, a bias
// reduction): each gets the call's name, a share of its cost in proportion to its duration,
// and the shares add up to the cost exactly.
TEST(CuptiTranslator, SplitsACallsCostOverItsKernels) {
    p::Recorder rec;
    p::CuptiTranslator tr(rec);
    tr.clock().add_pair(0, 0);
    napkin::KernelCost cost;
    cost.flops = 1'000'001;  // odd: the last share takes the remainder
    cost.bytes_read = 3000;
    tr.register_external(7, "matmul_backward", cost);
    tr.add({launch(1, 0, 10), external(1, 7), launch(2, 20, 30), external(2, 7), launch(3, 40, 50),
            external(3, 7), kernel(1, 100, 200), kernel(2, 200, 400), kernel(3, 400, 500)});
    const auto ranges = of<p::RangeEvent>(rec.take());
    std::uint64_t flops = 0, bytes = 0;
    int calls = 0;
    for (const auto& r : ranges) {
        if (r.name != "matmul_backward") continue;
        ++calls;
        flops += r.flops;
        bytes += r.bytes;
        // The same achieved rate on each: flops / duration within rounding.
        EXPECT_NEAR(static_cast<double>(r.flops) / static_cast<double>(r.dur_ns),
                    1'000'001.0 / 400.0, 1.0);
        bool split = false, own = false;
        for (const auto& a : r.args) {
            split |= a.key == "cost_split" && std::get<std::int64_t>(a.value) == 3;
            own |= a.key == "kernel" &&
                   std::get<std::string>(a.value).rfind("matmul_forward_kernel(", 0) == 0;
        }
        EXPECT_TRUE(split);
        EXPECT_TRUE(own);
    }
    EXPECT_EQ(calls, 3);
    EXPECT_EQ(flops, cost.flops);
    EXPECT_EQ(bytes, cost.bytes());
    EXPECT_EQ(tr.tagged(), 3u);
}

// cuBLASLt launches through the driver API: a driver record is a launch like a runtime one.
TEST(CuptiTranslator, DriverLaunchesStartFlows) {
    p::Recorder rec;
    p::CuptiTranslator tr(rec);
    p::GpuActivity drv = launch(5, 100, 200);
    drv.kind = p::GpuActivityKind::driver;
    drv.name = "cuLaunchKernelEx";
    tr.add({drv, kernel(5, 300, 400)});
    const auto ev = rec.take();
    EXPECT_EQ(of<p::FlowEvent>(ev).size(), 2u);
    const auto ranges = of<p::RangeEvent>(ev);
    ASSERT_EQ(ranges.size(), 2u);
    const auto api = std::find_if(ranges.begin(), ranges.end(), [](const p::RangeEvent& r) {
        return r.name == "cuLaunchKernelEx";
    });
    ASSERT_NE(api, ranges.end());
    EXPECT_EQ(api->category, p::Category::launch);
    tr.finish();
    EXPECT_EQ(tr.unmatched_flows(), 0u);
}

// Memsets and copies inside an engine call take its name and cost too (the engine's "memset").
TEST(CuptiTranslator, TaggedMemsetTakesTheEngineCost) {
    p::Recorder rec;
    p::CuptiTranslator tr(rec);
    napkin::KernelCost cost;
    cost.bytes_written = 4096;
    tr.register_external(3, "memset", cost);
    const p::GpuActivity set = memset_record(9, 50, 60, 4096);
    tr.add({launch(9, 10, 20), external(9, 3), set});
    const auto ranges = of<p::RangeEvent>(rec.take());
    const auto m = std::find_if(ranges.begin(), ranges.end(), [](const p::RangeEvent& r) {
        return r.category == p::Category::kernel;
    });
    ASSERT_NE(m, ranges.end());
    EXPECT_EQ(m->name, "memset");
    EXPECT_EQ(m->bytes, 4096u);
    EXPECT_EQ(m->flops, 0u);
}

// A GEMM call that clears its output first (cuBLASLt's split-K: a memset, then the GEMM): the
// FLOPs go to the kernel alone, the memset gets none (not the call's FLOPs at 1 us, "517 TFLOP/s"
// in traces/h200-gpt2), the bytes are still split over both by duration.
TEST(CuptiTranslator, FlopsGoOnlyToTheCallsKernels) {
    p::Recorder rec;
    p::CuptiTranslator tr(rec);
    napkin::KernelCost cost;
    cost.flops = 1'000'000;
    cost.bytes_read = 2000;
    tr.register_external(4, "h.0.mlp.fc", cost);
    const p::GpuActivity set = memset_record(1, 100, 101, 64);
    tr.add({launch(1, 0, 10), external(1, 4), launch(2, 20, 30), external(2, 4), set,
            kernel(2, 110, 209)});
    const auto ranges = of<p::RangeEvent>(rec.take());
    std::uint64_t flops = 0, bytes = 0;
    for (const auto& r : ranges) {
        if (r.name != "h.0.mlp.fc") continue;
        flops += r.flops;
        bytes += r.bytes;
        EXPECT_EQ(r.flops, r.dur_ns == 1 ? 0u : cost.flops);  // the memset: none
    }
    EXPECT_EQ(flops, cost.flops);
    EXPECT_EQ(bytes, cost.bytes());
}

// A kernel whose launch never comes is counted when collection ends, never silent.
TEST(CuptiTranslator, CountsKernelsWithoutALaunchAtTheEnd) {
    p::Recorder rec;
    p::CuptiTranslator tr(rec);
    tr.add({kernel(11, 100, 200), kernel(12, 300, 400), launch(12, 250, 260)});
    EXPECT_EQ(tr.unmatched_flows(), 0u);  // 11's launch may still come in a later batch
    tr.finish();
    EXPECT_EQ(tr.unmatched_flows(), 1u);
}

// Programmatic dependent launch: on Hopper a kernel can begin while its predecessor on the same
// stream drains (seen on an H200 between cuBLASLt's GEMM and the next kernel, 0.13 us). The later
// kernel's event starts where the earlier one's ends, with the trimmed time in its args, so the
// stream's track still nests; kernels in another batch and on other streams are left alone.
TEST(CuptiTranslator, TrimsAKernelThatStartsBeforeItsPredecessorEnds) {
    napkin::profiler::test::TempDir dir;
    p::Recorder rec;
    p::CuptiTranslator tr(rec);
    tr.clock().add_pair(0, 0);
    // Out of order in the batch, as CUPTI may deliver them; kernel 3 overlaps kernel 2 by 130 ns,
    // kernel 4 (the next batch) overlaps kernel 3 by 30 ns, kernel 5 on stream 13 overlaps none.
    tr.add({launch(1, 0, 10), launch(2, 20, 30), launch(3, 40, 50), kernel(3, 1870, 2500),
            kernel(1, 100, 1000), kernel(2, 1000, 2000)});
    tr.add(
        {launch(4, 60, 70), launch(5, 80, 90), kernel(4, 2470, 3000), kernel(5, 1500, 2600, 13)});
    std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>>
        by_corr;  // corr -> (start, early)
    for (const auto& r : of<p::RangeEvent>(rec.take())) {
        if (r.category != p::Category::kernel) continue;
        std::int64_t corr = 0, early = 0;
        for (const auto& a : r.args) {
            if (a.key == "correlation") corr = std::get<std::int64_t>(a.value);
            if (a.key == "started_early_ns") early = std::get<std::int64_t>(a.value);
        }
        by_corr[corr] = {r.start_ns, early};
        EXPECT_GT(r.dur_ns, 0);
    }
    ASSERT_EQ(by_corr.size(), 5u);
    EXPECT_EQ(by_corr[1], std::make_pair(std::int64_t{100}, std::int64_t{0}));
    EXPECT_EQ(by_corr[2],
              std::make_pair(std::int64_t{1000}, std::int64_t{0}));  // touching is not overlap
    EXPECT_EQ(by_corr[3], std::make_pair(std::int64_t{2000}, std::int64_t{130}));
    EXPECT_EQ(by_corr[4], std::make_pair(std::int64_t{2500}, std::int64_t{30}));
    EXPECT_EQ(by_corr[5], std::make_pair(std::int64_t{1500}, std::int64_t{0}));

    // And the written trace nests.
    p::Recorder rec2;
    p::CuptiTranslator tr2(rec2);
    tr2.add({launch(1, 0, 10), launch(2, 20, 30), kernel(1, 100, 1000), kernel(2, 870, 1500)});
    write_and_check(rec2, dir.path() / "trace.json");
}

// CUDA graphs: a launch's records share its correlation id and carry their node's id; nodes map
// to the engine's calls through graph_node records. Each record takes its call's name, share of
// cost and op, each launch splits the call's cost anew, each record gets a flow of its own
// (launch first or last), and a node of no call is named "cuda_graph", not dropped.
TEST(CuptiTranslator, GraphLaunchedRecordsTakeTheirNodesCall) {
    p::Recorder rec;
    p::CuptiTranslator tr(rec);
    tr.clock().add_pair(0, 0);
    napkin::KernelCost cost;
    cost.flops = 3000;
    cost.bytes_read = 300;
    tr.register_external(7, "matmul_backward", cost, "h.0.attn.qkv backward");
    const auto node = [](std::uint64_t id, std::uint64_t ext) {
        p::GpuActivity a;
        a.kind = p::GpuActivityKind::graph_node;
        a.graph_node_id = id;
        a.external_id = ext;
        return a;
    };
    const auto in_graph = [](p::GpuActivity a, std::uint64_t id) {
        a.graph_id = 3;
        a.graph_node_id = id;
        return a;
    };
    p::GpuActivity graph_launch = launch(50, 0, 10);
    graph_launch.name = "cudaGraphLaunch_v10000";
    p::GpuActivity second_launch = launch(60, 1000, 1010);
    second_launch.name = "cudaGraphLaunch_v10000";
    // Two nodes of call 7 (the clones 21, 22 of captured nodes 11, 12), and node 23 of none.
    tr.add({node(11, 7), node(12, 7), node(21, 7), node(22, 7), graph_launch,
            in_graph(kernel(50, 100, 200), 21), in_graph(kernel(50, 200, 300), 22),
            in_graph(kernel(50, 300, 400), 23)});
    tr.add({in_graph(kernel(60, 1100, 1200), 21), in_graph(kernel(60, 1200, 1300), 22),
            second_launch});  // the launch after its records
    const std::vector<p::Event> events = rec.take();
    std::uint64_t flops = 0;
    int tagged = 0, unmapped = 0;
    for (const auto& r : of<p::RangeEvent>(events)) {
        if (r.category != p::Category::kernel) continue;
        std::string op;
        bool node_arg = false;
        for (const auto& a : r.args) {
            if (a.key == "op") op = std::get<std::string>(a.value);
            node_arg |= a.key == "graph_node";
        }
        EXPECT_TRUE(node_arg) << r.name;
        if (r.name == "matmul_backward") {
            ++tagged;
            flops += r.flops;
            EXPECT_EQ(op, "h.0.attn.qkv backward");
        } else {
            ++unmapped;
            EXPECT_EQ(op, "cuda_graph");
            EXPECT_EQ(r.flops, 0u);
        }
    }
    EXPECT_EQ(tagged, 4);
    EXPECT_EQ(unmapped, 1);
    EXPECT_EQ(flops, 2 * cost.flops);  // each launch shares the call's cost over its two nodes
    std::map<std::uint64_t, int> ends;
    for (const auto& f : of<p::FlowEvent>(events))
        ends[f.id] += f.phase == p::FlowPhase::end;
    EXPECT_EQ(ends.size(), 5u);  // one flow per record
    for (const auto& [id, n] : ends)
        EXPECT_EQ(n, 1) << "flow " << id;
    tr.finish();
    EXPECT_EQ(tr.unmatched_flows(), 0u);
}
