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
#include <gtest/gtest.h>

#include <barrier>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "core/comm/comm.h"
#include "core/engine/engine_device.h"
#include "core/engine/gpt.h"
#include "core/engine/optimizer.h"
#include "core/engine/zero.h"
#include "core/half.h"
#include "kernels/accumulate.h"
#include "kernels/optimizer.h"

namespace napkin {
namespace {

// ---- W ranks as W threads: the five collectives over the ranks' own buffers ----

struct ThreadGroup {
    explicit ThreadGroup(int w) : world(w), sync(w), buffers(static_cast<std::size_t>(w)) {}
    int world;
    std::barrier<> sync;
    std::vector<void*> buffers;  // each rank's buffer of the collective in progress
    std::vector<double> sums;    // rank 0 adds, every rank reads
};

class ThreadComm final : public Communicator {
public:
    ThreadComm(int rank, ThreadGroup& g) : Communicator(rank, g.world, rank), g_(g) {}
    std::string backend() const override { return "threads"; }
    [[noreturn]] void abort(int) override { std::abort(); }

protected:
    void do_all_reduce(void* buf, std::uint64_t count, Wire t) override {
        sum(buf, count, t);
        put(buf, 0, count, t);
        g_.sync.arrive_and_wait();
    }
    void do_reduce_scatter(void* buf, std::uint64_t shard, Wire t) override {
        sum(buf, shard * static_cast<std::uint64_t>(world_size()), t);
        put(buf, static_cast<std::uint64_t>(rank()) * shard, shard, t);
        g_.sync.arrive_and_wait();
    }
    void do_all_gather(void* buf, std::uint64_t shard, Wire t) override {
        publish(buf);
        const std::size_t bytes = shard * size(t);
        for (int q = 0; q < world_size(); ++q) {
            if (q == rank()) continue;
            std::memcpy(static_cast<char*>(buf) + static_cast<std::size_t>(q) * bytes,
                        static_cast<const char*>(g_.buffers[static_cast<std::size_t>(q)]) +
                            static_cast<std::size_t>(q) * bytes,
                        bytes);
        }
        g_.sync.arrive_and_wait();
    }
    void do_broadcast(void* buf, std::uint64_t bytes, int root) override {
        publish(buf);
        if (rank() != root) std::memcpy(buf, g_.buffers[static_cast<std::size_t>(root)], bytes);
        g_.sync.arrive_and_wait();
    }
    void do_barrier() override { g_.sync.arrive_and_wait(); }

private:
    static std::size_t size(Wire t) { return t == Wire::f64 ? 8 : t == Wire::f32 ? 4 : 2; }
    static double get(const void* p, std::uint64_t i, Wire t) {
        switch (t) {
            case Wire::f64: return static_cast<const double*>(p)[i];
            case Wire::f32: return static_cast<const float*>(p)[i];
            case Wire::bf16: return to_float(static_cast<const bf16_t*>(p)[i]);
            case Wire::f16: return to_float(static_cast<const f16_t*>(p)[i]);
        }
        return 0;
    }
    void publish(void* buf) {
        g_.buffers[static_cast<std::size_t>(rank())] = buf;
        g_.sync.arrive_and_wait();
    }
    // Rank 0 sums every rank's buffer in rank order (fp32 for fp32 and 16-bit wires, rounded
    // once into the wire type by put(), as NCCL and napkin's MPI op do; fp64 for scalars).
    void sum(void* buf, std::uint64_t n, Wire t) {
        publish(buf);
        if (rank() == 0) {
            g_.sums.assign(n, 0.0);
            for (std::uint64_t i = 0; i < n; ++i) {
                if (t == Wire::f64) {
                    double s = 0;
                    for (void* b : g_.buffers) s += get(b, i, t);
                    g_.sums[i] = s;
                } else {
                    float s = 0;
                    for (void* b : g_.buffers) s += static_cast<float>(get(b, i, t));
                    g_.sums[i] = s;
                }
            }
        }
        g_.sync.arrive_and_wait();
    }
    void put(void* buf, std::uint64_t first, std::uint64_t n, Wire t) {
        for (std::uint64_t i = first; i < first + n; ++i) {
            const double s = g_.sums[i];
            switch (t) {
                case Wire::f64: static_cast<double*>(buf)[i] = s; break;
                case Wire::f32: static_cast<float*>(buf)[i] = static_cast<float>(s); break;
                case Wire::bf16: static_cast<bf16_t*>(buf)[i] = bf16_t(static_cast<float>(s)); break;
                case Wire::f16: static_cast<f16_t*>(buf)[i] = f16_t(static_cast<float>(s)); break;
            }
        }
    }
    ThreadGroup& g_;
};

// ---- An EngineDevice over host memory whose kernels are the CPU's ----

// Host memory that calls itself device memory, as the engine's checks expect of a device's.
class HostAsDeviceMemory final : public RawMemory {
public:
    void* allocate(std::size_t bytes) override { return host_.allocate(bytes); }
    void deallocate(void* ptr, std::size_t bytes) noexcept override { host_.deallocate(ptr, bytes); }
    DeviceKind device() const override { return DeviceKind::cuda; }

private:
    HostMemory host_;
};

class HostDevice final : public EngineDevice {
public:
    DeviceKind kind() const override { return DeviceKind::cuda; }
    const std::string& name() const override { return name_; }
    RawMemory& memory() override { return memory_; }
    std::unique_ptr<Gpt> create_gpt(const ModelConfig& cfg, const PlanInputs& in, AccountingAllocator& alloc,
                                    std::uint64_t seed) override {
        return Gpt::create(cfg, in, alloc, seed);
    }
    void copy_to_device(void* dst, const void* src, std::size_t bytes) override { copy(dst, src, bytes); }
    void copy_to_host(void* dst, const void* src, std::size_t bytes) override { copy(dst, src, bytes); }
    void copy_on_device(void* dst, const void* src, std::size_t bytes) override { copy(dst, src, bytes); }
    void zero(void* dst, std::size_t bytes) override {
        ++calls;
        std::memset(dst, 0, bytes);
    }
    void accumulate(void* dst, const void* src, std::int64_t n, DType dtype) override {
        ++calls;
        if (dtype == DType::f32) cpu::accumulate(static_cast<float*>(dst), static_cast<const float*>(src), n);
        else if (dtype == DType::bf16) cpu::accumulate(static_cast<bf16_t*>(dst), static_cast<const bf16_t*>(src), n);
        else cpu::accumulate(static_cast<f16_t*>(dst), static_cast<const f16_t*>(src), n);
    }
    void synchronize() override {}
    void timer_start() override {}
    double timer_stop_seconds() override { return 0; }
    MemoryUse memory_use() override { return {}; }
    double grad_sum_squares(const OptimizerTensor* tensors, int count, AccountingAllocator&) override {
        ++calls;
        return cpu::grad_sum_squares(tensors, count);
    }
    void optimizer_update(const OptimizerHyper& h, const OptimizerTensor* tensors, int count,
                          DType state_dtype) override {
        ++calls;
        cpu::optimizer_update(h, tensors, count, state_dtype);
    }
    int calls = 0;  // how often the engine went through the device

private:
    void copy(void* dst, const void* src, std::size_t bytes) {
        ++calls;
        std::memcpy(dst, src, bytes);
    }
    std::string name_ = "host (test)";
    HostAsDeviceMemory memory_;
};

// ---- One data-parallel run: W threads, each a rank with its own model and allocator ----

struct RankResult {
    std::vector<float> losses, norms;
    std::array<std::int64_t, kMemCategoryCount> peaks{};
    int device_calls = 0;
};

constexpr int kSteps = 3, kMicro = 2;  // micro-batches per rank per step
constexpr std::int64_t kB = 1, kT = 16;

std::vector<RankResult> train(int world, int stage, Precision precision, bool on_device) {
    ModelConfig cfg = preset_or_throw("tiny");
    PlanInputs in;
    in.micro_batch = kB;
    in.seq_len = kT;
    in.precision = precision;
    in.optimizer = OptimizerKind::adamw;
    OptimizerConfig opt;
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
            std::unique_ptr<Gpt> model = Gpt::create(cfg, in, alloc, 1337);
            // The device run also takes the overlapped schedule (started collectives, buckets in
            // flight, ZeRO-3 prefetch; this communicator completes them at the start), which must
            // not change a bit either.
            ZeroEngine zero(stage, comm, *model, alloc, opt, pd, on_device ? &device : nullptr, on_device);
            std::unique_ptr<Optimizer> plain;
            if (stage == 0) plain = std::make_unique<Optimizer>(opt, *model, alloc, pd.optimizer_state,
                                                                on_device ? &device : nullptr);
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
            for (std::size_t c = 0; c < kMemCategoryCount; ++c) res.peaks[c] = alloc.peak_bytes(static_cast<MemCategory>(c));
            res.device_calls = device.calls;
        });
    }
    for (auto& t : threads) t.join();
    return results;
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
                const double tol = p == Precision::fp32 ? 2e-5 : 2e-3;
                for (int r = 0; r < world; ++r) {
                    const RankResult& a = host[static_cast<std::size_t>(r)];
                    const RankResult& b = dev[static_cast<std::size_t>(r)];
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
                // Every rank saw the same global loss.
                for (int r = 1; r < world; ++r)
                    EXPECT_EQ(dev[static_cast<std::size_t>(r)].losses, dev[0].losses);
            }
        }
    }
}

}  // namespace
}  // namespace napkin
