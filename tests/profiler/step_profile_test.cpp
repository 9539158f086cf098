// StepProfile on synthetic events: op rows summed over layers, kernels, step coverage, the
// roofline, and the JSON section report.json carries.
#include <algorithm>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "profiler/step_profile.h"

namespace p = napkin::profiler;

namespace {

p::RangeEvent range(std::string name, p::Category cat, std::int64_t start, std::int64_t dur,
                    std::uint64_t flops = 0, std::uint64_t bytes = 0,
                    p::TrackId track = p::kHostTrack) {
    p::RangeEvent r;
    r.name = std::move(name);
    r.category = cat;
    r.track = track;
    r.start_ns = start;
    r.dur_ns = dur;
    r.flops = flops;
    r.bytes = bytes;
    return r;
}

// One step of 1000 ns: two layers' qkv (100 ns each), a backward op, the optimizer, a layer
// range (not an op: ignored), and kernels on the device track.
std::vector<p::Event> one_step(std::int64_t t0, const std::string& name) {
    std::vector<p::Event> ev;
    ev.push_back(range("h.0.attn.qkv", p::Category::op, t0 + 10, 100, 2000, 100));
    ev.push_back(
        range("matmul_forward", p::Category::kernel, t0 + 12, 95, 2000, 100, p::kDeviceTrack));
    ev.push_back(range("h.1.attn.qkv", p::Category::op, t0 + 120, 100, 2000, 100));
    ev.push_back(
        range("matmul_forward", p::Category::kernel, t0 + 122, 95, 2000, 100, p::kDeviceTrack));
    ev.push_back(range("h.1", p::Category::layer, t0 + 115, 110));
    ev.push_back(range("h.1.attn.qkv backward", p::Category::op, t0 + 300, 400, 4000, 200));
    ev.push_back(range("optimizer", p::Category::optimizer, t0 + 750, 200, 0, 1000));
    ev.push_back(range(name, p::Category::step, t0, 1000));
    return ev;
}

}  // namespace

TEST(StepProfile, OpKeyStripsTheLayerPrefix) {
    EXPECT_EQ(p::StepProfile::op_key("h.12.attn.qkv backward"), "attn.qkv backward");
    EXPECT_EQ(p::StepProfile::op_key("h.0.ln_1 (recompute)"), "ln_1 (recompute)");
    EXPECT_EQ(p::StepProfile::op_key("ln_f"), "ln_f");
    EXPECT_EQ(p::StepProfile::op_key("h.x.attn"), "h.x.attn");
    EXPECT_EQ(p::StepProfile::op_key("h.3"), "h.3");
    EXPECT_EQ(p::StepProfile::op_key("h."), "h.");
}

TEST(StepProfile, SumsOpsKernelsAndSteps) {
    p::StepProfile sp(p::Roofline{1e12, 1e10});  // 1 TFLOP/s, 10 GB/s
    sp.add(one_step(0, "step 0"));
    sp.add(one_step(5000, "step 1"));

    ASSERT_EQ(sp.steps().size(), 2u);
    for (const auto& s : sp.steps()) {
        EXPECT_EQ(s.dur_ns, 1000);
        EXPECT_EQ(s.op_ns, 100 + 100 + 400 + 200);
        EXPECT_DOUBLE_EQ(s.coverage(), 0.8);
        EXPECT_EQ(s.kernel_ns, 190);
    }

    const auto ops = sp.ops();
    ASSERT_EQ(ops.size(), 3u);                    // qkv (both layers), qkv backward, optimizer
    EXPECT_EQ(ops[0].name, "attn.qkv backward");  // 800 ns over the run, first by total time
    const auto qkv = std::find_if(ops.begin(), ops.end(),
                                  [](const p::WorkStats& w) { return w.name == "attn.qkv"; });
    ASSERT_NE(qkv, ops.end());
    EXPECT_EQ(qkv->calls, 4u);
    EXPECT_EQ(qkv->total_ns, 400);
    EXPECT_EQ(qkv->flops, 8000u);
    // Roofline per call: max(2000 / 1e12, 100 / 1e10) = 1e-8 s (bandwidth-bound).
    EXPECT_NEAR(qkv->roofline_seconds, 4e-8, 1e-20);

    const auto kernels = sp.kernels();
    ASSERT_EQ(kernels.size(), 1u);
    EXPECT_EQ(kernels[0].name, "matmul_forward");
    EXPECT_EQ(kernels[0].calls, 4u);

    const nlohmann::json j = sp.to_json();
    EXPECT_EQ(j["steps_profiled"], 2);
    EXPECT_EQ(j["steps"].size(), 2u);
    EXPECT_DOUBLE_EQ(j["steps"][0]["op_coverage"].get<double>(), 0.8);
    const auto& row = j["ops"][0];
    EXPECT_EQ(row["name"], "attn.qkv backward");
    EXPECT_EQ(row["category"], "op");
    EXPECT_DOUBLE_EQ(row["calls_per_step"].get<double>(), 1.0);
    EXPECT_DOUBLE_EQ(row["seconds_per_step"].get<double>(), 400e-9);
    EXPECT_DOUBLE_EQ(row["flops_per_step"].get<double>(), 4000.0);
    EXPECT_DOUBLE_EQ(row["achieved_flops_per_s"].get<double>(), 4000.0 / 400e-9);
    EXPECT_DOUBLE_EQ(row["share_of_step"].get<double>(), 0.4);
}

TEST(StepProfile, RangesOutsideAStepCountOnlyTowardTheirRows) {
    p::StepProfile sp;
    std::vector<p::Event> ev;
    ev.push_back(range("data", p::Category::op, 0, 50));
    sp.add(ev);
    EXPECT_TRUE(sp.steps().empty());
    ASSERT_EQ(sp.ops().size(), 1u);
    EXPECT_EQ(sp.ops()[0].total_ns, 50);
    EXPECT_EQ(sp.ops()[0].roofline_seconds, 0.0);  // no roofline known
    const nlohmann::json j = sp.to_json();
    EXPECT_EQ(j["ops"][0]["share_of_step"], 0.0);
}

// On a GPU the host only queues work: an op range lasts as long as its launches (or a wait), and
// its kernels run later. Each device record counts toward the op whose range holds the launch its
// flow starts at: here a qkv op launches two kernels that run after the op has ended, the
// backward op one, and a kernel without a flow (the batch's copy) counts toward no op.
TEST(StepProfile, DeviceRecordsCountTowardTheOpThatLaunchedThem) {
    const p::TrackId gpu = 100, api = 2;
    std::vector<p::Event> ev;
    auto flow = [&](std::uint64_t id, p::TrackId track, std::int64_t t, p::FlowPhase phase) {
        p::FlowEvent f;
        f.name = "launch";
        f.track = track;
        f.t_ns = t;
        f.id = id;
        f.phase = phase;
        ev.push_back(f);
    };
    ev.push_back(range("h.0.attn.qkv", p::Category::op, 10, 20, 3000));
    ev.push_back(range("h.0.attn.qkv backward", p::Category::op, 40, 10, 6000));
    ev.push_back(
        range("matmul_forward", p::Category::kernel, 100, 300, 1000, 0, gpu));  // launched at 12
    ev.push_back(
        range("matmul_forward", p::Category::kernel, 400, 600, 2000, 0, gpu));  // launched at 25
    ev.push_back(range("matmul_backward", p::Category::kernel, 1000, 2000, 6000, 0, gpu));  // at 45
    ev.push_back(range("memcpy HtoD", p::Category::kernel, 3000, 50, 0, 0, gpu));  // no flow
    flow(1, api, 12, p::FlowPhase::start);
    flow(1, gpu, 250, p::FlowPhase::end);
    flow(2, api, 25, p::FlowPhase::start);
    flow(2, gpu, 700, p::FlowPhase::end);
    flow(3, api, 45, p::FlowPhase::start);
    flow(3, gpu, 2000, p::FlowPhase::end);
    flow(4, api, 60, p::FlowPhase::start);  // a launch after every op range: counts nowhere
    ev.push_back(range("step 0", p::Category::step, 0, 3100));
    p::StepProfile sp;
    sp.add(ev);
    const auto ops = sp.ops();
    const auto row = [&](const std::string& name) {
        return *std::find_if(ops.begin(), ops.end(),
                             [&](const p::WorkStats& w) { return w.name == name; });
    };
    EXPECT_EQ(row("attn.qkv").total_ns, 20);  // the host's range, unchanged
    EXPECT_EQ(row("attn.qkv").device_ns, 900);
    EXPECT_EQ(row("attn.qkv").device_records, 2u);
    EXPECT_EQ(row("attn.qkv backward").device_ns, 2000);
    EXPECT_EQ(row("attn.qkv backward").device_records, 1u);
    const nlohmann::json j = sp.to_json();
    for (const auto& o : j["ops"]) {
        if (o["name"] == "attn.qkv") {
            EXPECT_DOUBLE_EQ(o["device_seconds_per_step"].get<double>(), 900e-9);
            EXPECT_DOUBLE_EQ(o["device_records_per_step"].get<double>(), 2.0);
            EXPECT_DOUBLE_EQ(o["device_flops_per_s"].get<double>(), 3000.0 / 900e-9);
        }
    }
    for (const auto& k : j["kernels"])
        EXPECT_FALSE(k.contains("device_seconds_per_step"));
}

// A device record that names its op (arg "op": a graph launch's, whose micro-batch opened no op
// range) counts toward that op, even with no range of it in the batch and no flow.
TEST(StepProfile, DeviceRecordsNamingTheirOpCountTowardIt) {
    const p::TrackId gpu = 100;
    std::vector<p::Event> ev;
    auto named = [&](std::string op, std::int64_t start, std::int64_t dur) {
        p::RangeEvent r = range("matmul_backward", p::Category::kernel, start, dur, 1000, 0, gpu);
        r.args.push_back(p::Arg{"op", std::move(op)});
        ev.push_back(r);
    };
    ev.push_back(range("h.0.attn.qkv", p::Category::op, 10, 20, 3000));
    named("h.1.attn.qkv", 100, 300);
    named("h.0.mlp.fc backward", 400, 200);
    named("cuda_graph", 600, 50);
    ev.push_back(range("step 0", p::Category::step, 0, 1000));
    p::StepProfile sp;
    sp.add(ev);
    const auto ops = sp.ops();
    const auto row = [&](const std::string& name) {
        const auto it = std::find_if(ops.begin(), ops.end(),
                                     [&](const p::WorkStats& w) { return w.name == name; });
        EXPECT_NE(it, ops.end()) << name;
        return it != ops.end() ? *it : p::WorkStats{};
    };
    EXPECT_EQ(row("attn.qkv").device_ns, 300);
    EXPECT_EQ(row("attn.qkv").calls, 1u);
    EXPECT_EQ(row("mlp.fc backward").device_records, 1u);
    EXPECT_EQ(row("mlp.fc backward").calls, 0u);  // no host range: device columns only
    EXPECT_EQ(row("cuda_graph").device_ns, 50);
}
