// The Trainer on a device, the path a CUDA run takes, checked on the CPU: HostDevice stands in
// for the GPU and W threads for the ranks (tests/engine/host_device.h). With --offload optimizer
// the device run must follow the host run bit for bit at the Trainer's level (batches copied in,
// losses summed over ranks, the sharded step on the host), and its sharded checkpoints, whose
// master and moments are read from host memory while the weights come from the device, must
// resume on either path and repeat the uninterrupted run bit for bit.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "core/engine/trainer.h"
#include "core/engine/zero_checkpoint.h"
#include "tests/engine/host_device.h"
#include "tests/engine/test_util.h"

namespace napkin {
namespace {

namespace fs = std::filesystem;

constexpr int kWorld = 2;

TrainOptions options(int zero) {
    TrainOptions o;
    o.model = preset_or_throw("tiny");
    o.plan.micro_batch = 1;
    o.plan.seq_len = 16;
    o.plan.precision = Precision::bf16_amp;
    o.steps = 4;
    o.grad_accum = 2;
    o.optimizer.warmup_steps = 1;
    o.optimizer.total_steps = 4;
    o.optimizer.grad_clip = 0.5f;  // clipping on: the global norm matters
    o.zero = zero;
    return o;
}

struct Leg {
    bool on_device = false;
    bool offload = false;
    int steps = 0;
    fs::path save;                   // non-empty: a sharded checkpoint after the steps
    std::optional<Manifest> resume;  // the checkpoint to start from
};

struct RankRun {
    std::vector<StepRecord> steps;
    std::int64_t device_optimizer_peak = -1, host_optimizer_peak = -1;
};

// One leg of a run on kWorld threads; each rank's records.
std::vector<RankRun> run(const TrainOptions& base, const Leg& leg) {
    test::ThreadGroup group(kWorld);
    std::vector<RankRun> out(kWorld);
    std::vector<std::thread> threads;
    for (int r = 0; r < kWorld; ++r) {
        threads.emplace_back([&, r] {
            test::ThreadComm comm(r, group);
            TrainOptions o = base;
            o.device = leg.on_device ? DeviceKind::cuda : DeviceKind::cpu;
            o.offload_optimizer = leg.offload;
            Trainer t(o, &comm, "test", {}, leg.on_device ? std::make_unique<test::HostDevice>() : nullptr);
            if (leg.resume) load_sharded_checkpoint(*leg.resume, t);
            RankRun& res = out[static_cast<std::size_t>(r)];
            for (int s = 0; s < leg.steps; ++s)
                res.steps.push_back(t.step());
            if (!leg.save.empty()) save_sharded_checkpoint(leg.save, t);
            res.device_optimizer_peak = t.allocator().peak_bytes(MemCategory::optimizer_state);
            res.host_optimizer_peak = t.host_allocator().peak_bytes(MemCategory::optimizer_state);
        });
    }
    for (auto& th : threads) th.join();
    return out;
}

void expect_same(const std::vector<RankRun>& got, const std::vector<RankRun>& want, std::size_t first,
                 const std::string& what) {
    for (int r = 0; r < kWorld; ++r) {
        const auto& g = got[static_cast<std::size_t>(r)].steps;
        const auto& w = want[static_cast<std::size_t>(r)].steps;
        ASSERT_LE(first + g.size(), w.size()) << what;
        for (std::size_t k = 0; k < g.size(); ++k) {
            const StepRecord& a = g[k];
            const StepRecord& b = w[first + k];
            EXPECT_EQ(a.step, b.step) << what;
            EXPECT_TRUE(std::isfinite(a.loss)) << what;
            EXPECT_EQ(a.loss, b.loss) << what << ", rank " << r << ", step " << a.step;
            EXPECT_EQ(a.grad_norm, b.grad_norm) << what << ", rank " << r << ", step " << a.step;
        }
    }
}

TEST(TrainerOnADevice, OffloadedOptimizerFollowsTheHostRunAndResumesEitherWay) {
    for (int zero = 1; zero <= 3; ++zero) {
        SCOPED_TRACE("ZeRO-" + std::to_string(zero));
        const TrainOptions o = options(zero);
        const fs::path dir = test::scratch_dir("napkin_trdev_") / ("zero" + std::to_string(zero));
        const auto ref = run(o, Leg{false, false, 4, {}, std::nullopt});

        // The first two steps with the optimizer on the host, then a checkpoint.
        const auto first = run(o, Leg{true, true, 2, dir, std::nullopt});
        expect_same(first, ref, 0, "offloaded, steps 1-2");
        for (const RankRun& r : first) {
            EXPECT_EQ(r.device_optimizer_peak, 0) << "the moments stayed on the device";
            EXPECT_GT(r.host_optimizer_peak, 0) << "no moments in host memory";
        }
        const std::optional<Manifest> m = last_complete_checkpoint(dir);
        ASSERT_TRUE(m.has_value());
        ASSERT_EQ(m->step, 2);

        // The rest: offloaded again, and on the host path, from the same checkpoint.
        expect_same(run(o, Leg{true, true, 2, {}, m}), ref, 2, "offloaded, resumed");
        expect_same(run(o, Leg{false, false, 2, {}, m}), ref, 2, "host path, resumed from the offloaded run");

        // And the other way: the host path's checkpoint resumed with the optimizer offloaded.
        const fs::path host_dir = dir.string() + "-host";
        run(o, Leg{false, false, 2, host_dir, std::nullopt});
        const std::optional<Manifest> hm = last_complete_checkpoint(host_dir);
        ASSERT_TRUE(hm.has_value());
        expect_same(run(o, Leg{true, true, 2, {}, hm}), ref, 2, "offloaded, resumed from the host run");
    }
}

TEST(TrainerOnADevice, OffloadIsRefusedWhereItCannotRun) {
    using test::error_of;
    using test::expect_contains;
    TrainOptions o = options(1);
    o.offload_optimizer = true;
    o.device = DeviceKind::cpu;
    expect_contains(error_of<UsageError>([&] { Trainer t(o); }),
                    "offload_optimizer: needs device cuda");
    o.device = DeviceKind::cuda;
    o.zero = 0;
    expect_contains(error_of<UsageError>([&] {
                        Trainer t(o, nullptr, "", {}, std::make_unique<test::HostDevice>());
                    }),
                    "offload_optimizer: needs zero 1, 2 or 3");
    o.zero = 2;
    o.plan.precision = Precision::fp32;
    expect_contains(error_of<UsageError>([&] {
                        Trainer t(o, nullptr, "", {}, std::make_unique<test::HostDevice>());
                    }),
                    "offload_optimizer: needs a mixed-precision recipe");
}

}  // namespace
}  // namespace napkin
