// The ZeRO engine's device path (core/engine/zero.cpp with an EngineDevice, what CUDA runs over
// NCCL) checked on the CPU: a host-memory EngineDevice whose "device kernels" are the CPU's
// multi-tensor ones, and W ranks as W threads of one process over an in-process communicator.
// Each stage trains on 2 and 3 ranks (3: uneven shards and padding) with the device path and
// with the host path (the device run with --overlap's schedule too), and the two must give the
// same losses and gradient norms (up to the order of the norm's fp64 sum) and the same peak
// bytes in the model-state categories. This tests
// the orchestration of the GPU path (views into shards, the multi-tensor update's tensor list,
// copies and accumulation through the device) in every CI run; the CUDA kernels themselves are
// checked against the CPU's in tests/kernels_cuda (label gpu).
//
// --offload optimizer takes the same device path with the optimizer's side in host memory: its
// step is the host path's own code, so it must follow the host path bit for bit, with the
// master and moments measured in the host allocator exactly where the estimator puts them.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "core/engine/gpt.h"
#include "core/engine/optimizer.h"
#include "core/engine/zero.h"
#include "estimator/estimate.h"
#include "tests/engine/host_device.h"

namespace napkin {
namespace {

using test::HostDevice;
using test::ThreadComm;
using test::ThreadGroup;

// ---- One data-parallel run: W threads, each a rank with its own model and allocator ----

struct RankResult {
    std::vector<float> losses, norms;
    std::array<std::int64_t, kMemCategoryCount> peaks{};
    std::array<std::int64_t, kMemCategoryCount> host_peaks{};  // offload: the host allocator's
    int device_calls = 0;
};

constexpr int kSteps = 3, kMicro = 2;  // micro-batches per rank per step
constexpr std::int64_t kB = 1, kT = 16;

std::vector<RankResult> train(int world, int stage, Precision precision, bool on_device, bool offload = false,
                              Finetune finetune = Finetune::full, OptimizerKind optimizer = OptimizerKind::adamw) {
    ModelConfig cfg = preset_or_throw("tiny");
    PlanInputs in;
    in.finetune = finetune;
    in.lora_rank = finetune == Finetune::full ? 0 : 4;
    in.micro_batch = kB;
    in.seq_len = kT;
    in.precision = precision;
    in.optimizer = optimizer;
    OptimizerConfig opt;
    opt.kind = optimizer;
    opt.lr = 3e-3f;
    opt.total_steps = kSteps;
    opt.grad_clip = 0.5f;  // clipping on: the global norm matters
    const PrecisionDTypes pd = precision_dtypes(precision, opt.kind, false);
    ThreadGroup group(world);
    std::vector<RankResult> results(static_cast<std::size_t>(world));
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
        threads.emplace_back([&, r] {
            ThreadComm comm(r, group);
            HostDevice device;
            HostMemory host;
            AccountingAllocator alloc(on_device ? device.memory() : static_cast<RawMemory&>(host));
            AccountingAllocator host_alloc(host);
            std::unique_ptr<Gpt> model = Gpt::create(cfg, in, alloc, 1337);
            // The device run also takes the overlapped schedule (started collectives, buckets in
            // flight, ZeRO-3 prefetch; this communicator completes them at the start), which must
            // not change a bit either.
            ZeroEngine zero(stage, comm, *model, alloc, opt, pd, on_device ? &device : nullptr, on_device,
                            offload ? &host_alloc : nullptr);
            std::unique_ptr<Optimizer> plain;
            if (stage == 0) plain = std::make_unique<Optimizer>(opt, *model, alloc, pd.optimizer_state,
                                                                on_device ? &device : nullptr);
            // Peaks of the training steps (the model's whole master copy, before the engine
            // shards it, is not a step's).
            alloc.reset_peaks();
            host_alloc.reset_peaks();
            RankResult& res = results[static_cast<std::size_t>(r)];
            std::vector<std::int32_t> x(kB * kT), y(kB * kT);
            for (int s = 0; s < kSteps; ++s) {
                zero.zero_grads();
                double loss = 0;
                for (int m = 0; m < kMicro; ++m) {
                    std::mt19937 rng(static_cast<unsigned>(1000 * s + 10 * r + m));  // the same data both ways
                    for (std::size_t i = 0; i < x.size(); ++i) {
                        x[i] = static_cast<std::int32_t>(rng() % 256);
                        y[i] = static_cast<std::int32_t>(rng() % 256);
                    }
                    zero.begin_micro_batch(m == kMicro - 1);
                    loss += model->forward_backward(x.data(), y.data(), 1.0f / (kMicro * world));
                }
                loss = zero.sum_over_ranks(loss);
                const StepStats st = zero.step(s, 1.0f, plain.get());
                res.losses.push_back(static_cast<float>(loss / (kMicro * world)));
                res.norms.push_back(st.grad_norm);
            }
            for (std::size_t c = 0; c < kMemCategoryCount; ++c) {
                res.peaks[c] = alloc.peak_bytes(static_cast<MemCategory>(c));
                res.host_peaks[c] = host_alloc.peak_bytes(static_cast<MemCategory>(c));
            }
            res.device_calls = device.calls;
        });
    }
    for (auto& t : threads) t.join();
    return results;
}

// Each rank of the device run against the host run's: losses and norms within tol (relative;
// norms 10 tol), the same peak bytes in the model-state categories and activations.
void expect_device_follows_host(const std::vector<RankResult>& host, const std::vector<RankResult>& dev,
                                double tol) {
    ASSERT_EQ(host.size(), dev.size());
    for (std::size_t r = 0; r < host.size(); ++r) {
        const RankResult& a = host[r];
        const RankResult& b = dev[r];
        EXPECT_GT(b.device_calls, 0) << "the device path was not taken";
        ASSERT_EQ(a.losses.size(), b.losses.size());
        for (std::size_t s = 0; s < a.losses.size(); ++s) {
            EXPECT_TRUE(std::isfinite(b.losses[s]));
            EXPECT_NEAR(b.losses[s], a.losses[s], tol * std::abs(a.losses[s])) << "rank " << r << " step " << s;
            EXPECT_NEAR(b.norms[s], a.norms[s], 10 * tol * std::abs(a.norms[s])) << "rank " << r << " step " << s;
        }
        for (MemCategory c : {MemCategory::parameters, MemCategory::master_weights, MemCategory::gradients,
                              MemCategory::optimizer_state, MemCategory::activations}) {
            EXPECT_EQ(b.peaks[static_cast<std::size_t>(c)], a.peaks[static_cast<std::size_t>(c)])
                << "rank " << r << " " << enum_name(kMemCategoryNames, c);
        }
    }
}

TEST(ZeroDevicePath, FollowsTheHostPathOnTwoAndThreeRanks) {
    for (Precision p : {Precision::fp32, Precision::bf16_amp}) {
        for (int world : {2, 3}) {
            for (int stage = 0; stage <= 3; ++stage) {
                SCOPED_TRACE(std::string(enum_name(kPrecisionNames, p)) + ", " + std::to_string(world) +
                             " ranks, ZeRO-" + std::to_string(stage));
                const auto host = train(world, stage, p, false);
                const auto dev = train(world, stage, p, true);
                // The norm's fp64 sum runs in another order (per tensor in 64 blocks on the
                // device path, element by element on the host's): a few ulps, which the clip
                // factor carries into the update.
                expect_device_follows_host(host, dev, p == Precision::fp32 ? 2e-5 : 2e-3);
                // Every rank saw the same global loss.
                for (int r = 1; r < world; ++r)
                    EXPECT_EQ(dev[static_cast<std::size_t>(r)].losses, dev[0].losses);
            }
        }
    }
}

TEST(ZeroDevicePath, OffloadedOptimizerFollowsTheHostPathBitForBit) {
    const ModelConfig cfg = preset_or_throw("tiny");
    for (int world : {2, 3}) {
        for (int stage = 1; stage <= 3; ++stage) {
            SCOPED_TRACE(std::to_string(world) + " ranks, ZeRO-" + std::to_string(stage) + ", --offload optimizer");
            const auto host = train(world, stage, Precision::bf16_amp, false);
            const auto off = train(world, stage, Precision::bf16_amp, true, true);
            // The estimator's host bytes per rank for this run (the layout's padded shards).
            EstimateInputs ei;
            ei.model = cfg;
            ei.seq_len = kT;
            ei.micro_batch = kB;
            ei.precision = Precision::bf16_amp;
            ei.optimizer = OptimizerKind::adamw;
            ei.gpus = world;
            ei.zero = stage;
            ei.offload = Offload::optimizer;
            ei.engine = EstimateInputs::Engine::cpu;
            ei.peak_flops_per_s = 1e12;  // any: only its memory is compared
            ei.gpu_memory_bytes = 1e15;
            const Estimate pred = Estimator{}.run(ei);
            auto at = [](const std::array<std::int64_t, kMemCategoryCount>& a, MemCategory c) {
                return a[static_cast<std::size_t>(c)];
            };
            for (int r = 0; r < world; ++r) {
                const RankResult& a = host[static_cast<std::size_t>(r)];
                const RankResult& b = off[static_cast<std::size_t>(r)];
                EXPECT_GT(b.device_calls, 0) << "the device path was not taken";
                EXPECT_EQ(b.losses, a.losses) << "rank " << r;
                EXPECT_EQ(b.norms, a.norms) << "rank " << r;
                for (float l : b.losses) EXPECT_TRUE(std::isfinite(l));
                // On the device: the weights and gradients alone of the model states.
                for (MemCategory c : {MemCategory::parameters, MemCategory::gradients, MemCategory::activations})
                    EXPECT_EQ(at(b.peaks, c), at(a.peaks, c)) << "rank " << r << " " << enum_name(kMemCategoryNames, c);
                EXPECT_EQ(at(b.peaks, MemCategory::master_weights), 0);
                EXPECT_EQ(at(b.peaks, MemCategory::optimizer_state), 0);
                // On the host: what the device held in the host path, plus the fp32 gradient shard.
                EXPECT_EQ(at(b.host_peaks, MemCategory::master_weights), at(a.peaks, MemCategory::master_weights));
                EXPECT_EQ(at(b.host_peaks, MemCategory::optimizer_state), at(a.peaks, MemCategory::optimizer_state));
                EXPECT_EQ(static_cast<double>(at(b.host_peaks, MemCategory::master_weights)), pred.cpu.master);
                EXPECT_EQ(static_cast<double>(at(b.host_peaks, MemCategory::optimizer_state)), pred.cpu.optimizer);
                EXPECT_EQ(static_cast<double>(at(b.host_peaks, MemCategory::gradients)), pred.cpu.grads);
                EXPECT_EQ(pred.gpu.master, 0);
                EXPECT_EQ(pred.gpu.optimizer, 0);
            }
        }
    }
}

// LoRA/QLoRA: the units hold the adapters, and the frozen base stays in the model on every rank
// (stages 0-2) or is sharded and gathered per region (3); the device path (and offload's, bit for
// bit) follows the host path as for a full model.
TEST(ZeroDevicePath, AdaptersFollowTheHostPath) {
    // QLoRA covers both frozen groups (NF4 linears; embeddings, norms and biases in bf16); 3
    // ranks, uneven shards; offload at stage 3, whose host step sees the adapters alone.
    for (int stage = 0; stage <= 3; ++stage) {
        SCOPED_TRACE("qlora, 3 ranks, ZeRO-" + std::to_string(stage));
        const auto host = train(3, stage, Precision::bf16_amp, false, false, Finetune::qlora);
        const auto dev = train(3, stage, Precision::bf16_amp, true, false, Finetune::qlora);
        expect_device_follows_host(host, dev, 2e-3);
        if (stage < 3) continue;
        const auto off = train(3, stage, Precision::bf16_amp, true, true, Finetune::qlora);
        for (std::size_t r = 0; r < host.size(); ++r) EXPECT_EQ(off[r].losses, host[r].losses) << "rank " << r;
    }
}

// adamw-8bit: the device path's absmax pointers into block-aligned shards (3 ranks, stages 1-3),
// and offload's host step, bit for bit, at stage 2.
TEST(ZeroDevicePath, EightBitStatesFollowTheHostPath) {
    for (int stage = 1; stage <= 3; ++stage) {
        SCOPED_TRACE("adamw-8bit, 3 ranks, ZeRO-" + std::to_string(stage));
        const auto host = train(3, stage, Precision::bf16_amp, false, false, Finetune::full, OptimizerKind::adamw_8bit);
        const auto dev = train(3, stage, Precision::bf16_amp, true, false, Finetune::full, OptimizerKind::adamw_8bit);
        expect_device_follows_host(host, dev, 2e-3);
        if (stage != 2) continue;
        const auto off = train(3, stage, Precision::bf16_amp, true, true, Finetune::full, OptimizerKind::adamw_8bit);
        for (std::size_t r = 0; r < host.size(); ++r) EXPECT_EQ(off[r].losses, host[r].losses) << "rank " << r;
    }
}

// Offload needs what it moves: a device, a sharded optimizer, a master copy.
TEST(ZeroDevicePath, OffloadRefusesWhatItCannotMove) {
    const ModelConfig cfg = preset_or_throw("tiny");
    PlanInputs in;
    in.micro_batch = 1;
    in.seq_len = 8;
    OptimizerConfig opt;
    auto refuses = [&](int stage, Precision p, bool with_device, const std::string& what) {
        ThreadGroup group(1);
        ThreadComm comm(0, group);
        HostDevice device;
        HostMemory host;
        AccountingAllocator alloc(with_device ? device.memory() : static_cast<RawMemory&>(host));
        AccountingAllocator host_alloc(host);
        in.precision = p;
        std::unique_ptr<Gpt> model = Gpt::create(cfg, in, alloc, 1);
        try {
            ZeroEngine zero(stage, comm, *model, alloc, opt, precision_dtypes(p, opt.kind, false),
                            with_device ? &device : nullptr, false, &host_alloc);
            ADD_FAILURE() << "accepted: " << what;
        } catch (const UsageError& e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
    };
    refuses(1, Precision::bf16_amp, false, "needs device cuda");
    refuses(0, Precision::bf16_amp, true, "needs zero 1, 2 or 3");
    refuses(2, Precision::fp32, true, "needs a mixed-precision recipe");
}

}  // namespace
}  // namespace napkin
