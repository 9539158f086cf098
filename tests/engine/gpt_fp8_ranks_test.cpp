// fp8-amp's delayed scaling under ZeRO (core/engine/gpt_fp8.h, ZeroEngine::reduce_fp8_amaxes):
// 2 ranks as 2 threads (tests/engine/host_device.h), on the host and on the stand-in device.
// Each step the ranks reduce their amaxes to the maximum before the roll, so after every step
// every rank holds the same amax histories and scale pairs bit for bit, and the run follows one
// process accumulating the same global batch (whose history entry takes the maximum over all
// its micro-batches: after the first step the very same state). Sharded checkpoints hold
// the state (rank 0's file) and resume bit for bit; another history length is refused by name
// on every rank. tests/comm/zero_mpi_test.cpp runs the same over real MPI ranks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/engine/trainer.h"
#include "core/engine/zero_checkpoint.h"
#include "tests/engine/host_device.h"
#include "tests/engine/test_util.h"

namespace napkin {
namespace {

namespace fs = std::filesystem;

constexpr int kFp8World = 2;

TrainOptions fp8_rank_options(int zero, std::int64_t history, int grad_accum) {
    TrainOptions o;
    o.model = preset_or_throw("tiny");
    o.plan.micro_batch = 2;  // B T = 64: every GEMM dimension a multiple of 16
    o.plan.seq_len = 32;
    o.plan.precision = Precision::fp8_amp;
    o.plan.fp8_amax_history = history;
    o.grad_accum = grad_accum;
    o.steps = 4;
    o.optimizer.lr = 3e-3f;
    o.optimizer.warmup_steps = 2;
    o.optimizer.total_steps = 4;
    o.zero = zero;
    return o;
}

// A rank's delayed-scaling state after a step: its histories, then its scale pairs.
std::vector<float> fp8_state(Trainer& t) {
    std::vector<float> out;
    for (Tensor* x : {t.model().fp8_amax_history(), t.model().fp8_scales()}) {
        const float* p = x->data<float>();
        out.insert(out.end(), p, p + x->numel());
    }
    return out;
}

struct Fp8RankRun {
    std::vector<float> losses;
    std::vector<std::vector<float>> states;  // per step
    std::string error;                       // what loading the checkpoint threw, if it did
};

struct Fp8Leg {
    bool on_device = false;
    int steps = 0;
    fs::path save = {};                   // non-empty: a sharded checkpoint after the steps
    std::optional<Manifest> resume = {};  // the checkpoint to start from
};

std::vector<Fp8RankRun> run_ranks(const TrainOptions& o, const Fp8Leg& leg) {
    test::ThreadGroup group(kFp8World);
    std::vector<Fp8RankRun> out(kFp8World);
    std::vector<std::thread> threads;
    for (int r = 0; r < kFp8World; ++r) {
        threads.emplace_back([&, r] {
            test::ThreadComm comm(r, group);
            TrainOptions ro = o;
            ro.device = leg.on_device ? DeviceKind::cuda : DeviceKind::cpu;
            Trainer t(ro, &comm, "test", {},
                      leg.on_device ? std::make_unique<test::HostDevice>() : nullptr);
            Fp8RankRun& res = out[static_cast<std::size_t>(r)];
            if (leg.resume) {
                try {
                    load_sharded_checkpoint(*leg.resume, t);
                } catch (const InputError& e) {
                    res.error = e.what();
                    return;  // before any collective: every rank refuses alike
                }
            }
            for (int s = 0; s < leg.steps; ++s) {
                res.losses.push_back(t.step().loss);
                res.states.push_back(fp8_state(t));
            }
            if (!leg.save.empty()) save_sharded_checkpoint(leg.save, t);
        });
    }
    for (auto& th : threads)
        th.join();
    return out;
}

// Bit for bit the same floats.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every rank's histories and scales equal after every step (and not all zero: delayed scaling
// ran); the losses within 2e-3 of one process accumulating the 2 x 2 micro-batches (bf16
// gradients summed over ranks in another order, as ZeroMpi.TwoRanksInBf16 allows).
TEST(GptFp8Ranks, RanksAgreeOnTheScalesAndFollowOneProcess) {
    for (const bool on_device : {false, true}) {
        for (const int zero : {1, 3}) {
            SCOPED_TRACE(std::string(on_device ? "device" : "host") + ", ZeRO-" +
                         std::to_string(zero));
            const std::vector<Fp8RankRun> ranks =
                run_ranks(fp8_rank_options(zero, 4, 2), {.on_device = on_device, .steps = 4});
            Trainer one(fp8_rank_options(0, 4, 4));
            for (std::size_t s = 0; s < 4; ++s) {
                const std::vector<float>& a = ranks[0].states.at(s);
                EXPECT_TRUE(same_bits(a, ranks[1].states.at(s))) << "step " << s + 1;
                float top = 0;
                for (const float x : a)
                    top = std::max(top, x);
                EXPECT_GT(top, 0.0f) << "no amax recorded at step " << s + 1;
                const float want = one.step().loss;
                for (const Fp8RankRun& r : ranks) {
                    ASSERT_TRUE(std::isfinite(r.losses[s]));
                    EXPECT_NEAR(r.losses[s], want, 2e-3 * want) << "step " << s + 1;
                }
                // After the first step (the same weights on both sides) the ranks' reduced state
                // is the one process's bit for bit: the maximum over the ranks' micro-batches is
                // the maximum over all of them. Later the weights differ in their last bits and
                // a gradient's amax, one element's magnitude, by up to a few percent.
                if (s == 0) {
                    EXPECT_TRUE(same_bits(a, fp8_state(one)));
                }
            }
        }
    }
}

// Two steps, a sharded checkpoint, two more from it: the uninterrupted run's losses and states
// bit for bit. A trainer of another history length is refused by name on every rank.
TEST(GptFp8Ranks, ShardedCheckpointResumesBitForBit) {
    for (const int zero : {1, 3}) {
        SCOPED_TRACE("ZeRO-" + std::to_string(zero));
        const fs::path dir = test::scratch_dir("fp8_ranks_ckpt" + std::to_string(zero));
        const TrainOptions o = fp8_rank_options(zero, 4, 2);
        const std::vector<Fp8RankRun> whole = run_ranks(o, {.steps = 4});
        run_ranks(o, {.steps = 2, .save = dir});
        const std::optional<Manifest> m = last_complete_checkpoint(dir);
        ASSERT_TRUE(m.has_value());
        const std::vector<Fp8RankRun> resumed = run_ranks(o, {.steps = 2, .resume = m});
        for (int r = 0; r < kFp8World; ++r) {
            const auto& a = resumed[static_cast<std::size_t>(r)];
            const auto& b = whole[static_cast<std::size_t>(r)];
            ASSERT_TRUE(a.error.empty()) << a.error;
            for (std::size_t s = 0; s < 2; ++s) {
                EXPECT_EQ(a.losses.at(s), b.losses.at(s + 2)) << "rank " << r << ", step " << s + 3;
                EXPECT_TRUE(same_bits(a.states.at(s), b.states.at(s + 2)))
                    << "rank " << r << ", step " << s + 3;
            }
        }
        const std::vector<Fp8RankRun> other =
            run_ranks(fp8_rank_options(zero, 8, 2), {.steps = 1, .resume = m});
        for (const Fp8RankRun& r : other) {
            test::expect_contains(r.error,
                                  "fp8 amax history length differs: 4 (checkpoint) vs 8 (trainer)");
            EXPECT_EQ(r.error.find('\n'), std::string::npos) << r.error;
        }
        // Consolidated: one process of the same global batch continues with the same state.
        const fs::path file = dir / "whole.safetensors";
        consolidate_checkpoint(*m, file.string());
        Trainer one(fp8_rank_options(0, 4, 4));
        load_checkpoint(file.string(), one);
        EXPECT_TRUE(same_bits(fp8_state(one), whole[0].states.at(1)));
        fs::remove_all(dir);
    }
}

}  // namespace
}  // namespace napkin
