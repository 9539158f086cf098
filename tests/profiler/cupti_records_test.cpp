// The CUPTI translator on synthetic records: kernels on per-stream tracks with the engine's
// names and costs, launch -> kernel flows whichever arrives first, the clock map, and a trace
// written from it that passes the validator.
#include <algorithm>

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

p::GpuActivity kernel(std::uint32_t corr, std::uint64_t start, std::uint64_t end, std::uint32_t stream = 7) {
    p::GpuActivity a;
    a.kind = p::GpuActivityKind::kernel;
    a.name = "_Z21matmul_forward_kernelPfPKfS1_i";
    a.correlation_id = corr;
    a.start_ns = start;
    a.end_ns = end;
    a.stream = stream;
    a.grid[0] = 128;
    a.block[0] = 256;
    return a;
}

p::GpuActivity external(std::uint32_t corr, std::uint64_t ext) {
    p::GpuActivity a;
    a.kind = p::GpuActivityKind::external_correlation;
    a.correlation_id = corr;
    a.external_id = ext;
    return a;
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

    const auto k1 = std::find_if(ranges.begin(), ranges.end(), [](const p::RangeEvent& r) { return r.name == "matmul_forward"; });
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
    p::ChromeTraceWriter w(dir.path() / "trace.json");
    w.write(rec.take());
    w.write_tracks(rec.tracks());
    ASSERT_TRUE(w.close().ok);
    const auto check = p::check_trace_file(dir.path() / "trace.json");
    for (const auto& problem : check.problems) ADD_FAILURE() << problem;
    EXPECT_EQ(check.count("X"), 101u);
    EXPECT_EQ(check.count("s"), 50u);
    EXPECT_EQ(check.count("f"), 50u);
}
