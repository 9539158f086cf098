// The CUPTI collector's napkin side on a fake activity source (label unit, no GPU): what the
// plugin hands over (plain GpuActivity records, stats) becomes events on the recorder with the
// engine's names and costs through push/pop, GPU time lands on the run clock, dropped records
// and failures are counted in the summary, a source that cannot enable leaves it inactive,
// and the trace written from it passes the validator. The real source (CUPTI in the plugin)
// runs in tests/engine_cuda/profile_cuda_test.cpp (label gpu).
#include <algorithm>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "profiler/chrome_trace_writer.h"
#include "profiler/cupti_collector.h"
#include "profiler/trace_check.h"
#include "tests/profiler/temp_dir.h"

namespace p = napkin::profiler;

namespace {

// A device whose clock is the run clock plus a fixed offset, and which launches one kernel
// (with its runtime call) for each push/pop pair, as CUPTI would report it.
class FakeSource final : public p::GpuActivitySource {
public:
    explicit FakeSource(const p::Recorder& rec) : rec_(rec) {}
    bool enable(std::string* error) noexcept override {
        ++enables;
        if (refuse) *error = "CUPTI_ERROR_NOT_INITIALIZED";
        return !refuse;
    }
    void disable() noexcept override { ++disables; }
    void push_external(std::uint64_t id) noexcept override { stack_.push_back(id); }
    void pop_external() noexcept override {
        // The call made while the id was pushed: a launch, its external correlation and kernel.
        const std::uint64_t t = timestamp_ns();
        const std::uint32_t corr = next_corr_++;
        p::GpuActivity launch;
        launch.kind = p::GpuActivityKind::runtime;
        launch.name = "cudaLaunchKernel";
        launch.correlation_id = corr;
        launch.start_ns = std::max(t, thread_free_);  // one host thread: calls in turn
        launch.end_ns = launch.start_ns + 1000;
        thread_free_ = launch.end_ns;
        p::GpuActivity ext;
        ext.kind = p::GpuActivityKind::external_correlation;
        ext.correlation_id = corr;
        ext.external_id = stack_.back();
        p::GpuActivity k;
        k.kind = p::GpuActivityKind::kernel;
        k.name = "_Z13some_kernelv";
        k.correlation_id = corr;
        k.start_ns = std::max(t + 2000, stream_free_);  // one stream: kernels run in turn
        k.end_ns = k.start_ns + 10'000;
        stream_free_ = k.end_ns;
        k.stream = 14;
        pending_.push_back(launch);
        pending_.push_back(ext);
        pending_.push_back(k);
        stack_.pop_back();
    }
    std::uint64_t timestamp_ns() noexcept override {
        return static_cast<std::uint64_t>(rec_.now_ns()) + kOffset;
    }
    void flush(bool, std::vector<p::GpuActivity>* out,
               p::GpuActivityStats* stats) noexcept override {
        stats_.records += pending_.size();
        for (auto& a : pending_)
            out->push_back(a);
        pending_.clear();
        *stats = stats_;
    }

    static constexpr std::uint64_t kOffset = 1'700'000'000'000'000'000ull;  // CUPTI's epoch
    bool refuse = false;
    int enables = 0, disables = 0;
    p::GpuActivityStats stats_;

private:
    const p::Recorder& rec_;
    std::vector<std::uint64_t> stack_;
    std::vector<p::GpuActivity> pending_;
    std::uint32_t next_corr_ = 1;
    std::uint64_t stream_free_ = 0, thread_free_ = 0;
};

}  // namespace

TEST(CuptiCollector, NamesCostsClockAndFlowsFromTheSource) {
    p::Recorder rec;
    FakeSource src(rec);
    napkin::KernelCost cost;
    cost.flops = 123'456;
    cost.bytes_read = 100;
    std::int64_t before = 0, after = 0;
    {
        p::CuptiCollector c(rec, src);
        ASSERT_TRUE(c.active()) << c.error();
        before = rec.now_ns();
        for (int i = 0; i < 3; ++i) {
            p::KernelScope k;
            k.tagged(&c, "matmul_forward", cost);
        }  // pops
        after = rec.now_ns();
        c.flush(true);
        c.finish();
        EXPECT_EQ(c.kernels(), 3u);
        EXPECT_EQ(c.dropped(), 0u);
        EXPECT_EQ(c.failures(), 0u);
        const nlohmann::json s = c.summary();
        EXPECT_EQ(s["kernels"], 3);
        EXPECT_EQ(s["tagged"], 3);
        EXPECT_EQ(s["records"], 9);
        EXPECT_EQ(s["unmatched_flows"], 0);
    }
    EXPECT_EQ(src.enables, 1);
    EXPECT_EQ(src.disables, 1);
    const auto events = rec.take();
    int kernels = 0, flow_ends = 0;
    for (const auto& e : events) {
        if (const auto* r = std::get_if<p::RangeEvent>(&e)) {
            if (r->category != p::Category::kernel) continue;
            ++kernels;
            EXPECT_EQ(r->name, "matmul_forward");
            EXPECT_EQ(r->flops, cost.flops);
            EXPECT_EQ(r->bytes, cost.bytes());
            // The device measured 10 us; the clock map may fit a rate off by at most 1e-5 (the
            // pairs' read windows bound it), and each end rounds to a nanosecond.
            EXPECT_NEAR(r->dur_ns, 10'000, 1);
            // On the run clock: within the pushes' window (plus the fake's 2 us launch gap),
            // give or take the pairing error of a clock read, which is as long as the thread is
            // descheduled between the two reads: 20 ms, not 100 us (that failed once with two
            // cores shared by several builds). A wrong mapping is off by CUPTI's epoch, 1.7e18.
            constexpr std::int64_t kPairing = 20'000'000;
            EXPECT_GE(r->start_ns, before - kPairing);
            EXPECT_LE(r->start_ns, after + 3 * 11'000 + kPairing);
        }
        if (const auto* f = std::get_if<p::FlowEvent>(&e))
            flow_ends += f->phase == p::FlowPhase::end;
    }
    EXPECT_EQ(kernels, 3);
    EXPECT_EQ(flow_ends, 3);

    napkin::profiler::test::TempDir dir;
    p::ChromeTraceWriter w(dir.path() / "trace.json");
    w.write(events);
    w.write_tracks(rec.tracks());
    ASSERT_TRUE(w.close().ok);
    const auto check = p::check_trace_file(dir.path() / "trace.json");
    for (const auto& problem : check.problems)
        ADD_FAILURE() << problem;
}

TEST(CuptiCollector, CountsWhatTheSourceLost) {
    p::Recorder rec;
    FakeSource src(rec);
    src.stats_.dropped_records = 17;
    src.stats_.buffers_refused = 2;
    src.stats_.failures = 1;
    p::CuptiCollector c(rec, src);
    c.flush(false);
    EXPECT_EQ(c.dropped(), 17u);  // the refused buffers' records are among CUPTI's dropped ones
    EXPECT_EQ(c.failures(), 1u);
    const nlohmann::json s = c.summary();
    EXPECT_EQ(s["dropped_records"], 17);
    EXPECT_EQ(s["buffers_refused"], 2);
    EXPECT_EQ(s["cupti_failures"], 1);
}

TEST(CuptiCollector, InactiveWhenTheSourceCannotEnable) {
    p::Recorder rec;
    FakeSource src(rec);
    src.refuse = true;
    {
        p::CuptiCollector c(rec, src);
        EXPECT_FALSE(c.active());
        EXPECT_EQ(c.error(), "CUPTI_ERROR_NOT_INITIALIZED");
        p::KernelScope k;
        k.tagged(&c, "matmul_forward", {});  // harmless
        k.reset();
        c.flush(true);
    }
    EXPECT_EQ(src.disables, 0);
    EXPECT_EQ(rec.size(), 0u);
}
