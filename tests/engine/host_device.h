// Test stand-ins for what a CUDA run has, in host memory, so the engine's device path runs in
// every CI job: W ranks as W threads over an in-process communicator (ThreadComm), and an
// EngineDevice whose memory is the host's and whose "kernels" are the CPU's (HostDevice).
// Used by zero_device_test.cpp (the ZeRO engine) and trainer_device_test.cpp (the Trainer).
#pragma once

#include <algorithm>
#include <barrier>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/comm.h"
#include "core/engine/engine_device.h"
#include "core/engine/gpt.h"
#include "core/half.h"
#include "kernels/accumulate.h"
#include "kernels/optimizer.h"
#include "kernels/step_scalars.h"

namespace napkin::test {

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
    static std::size_t size(Wire t) { return wire_size(t); }
    static double get(const void* p, std::uint64_t i, Wire t) {
        switch (t) {
            case Wire::f64: return static_cast<const double*>(p)[i];
            case Wire::f32:
            case Wire::f32_max: return static_cast<const float*>(p)[i];
            case Wire::bf16: return to_float(static_cast<const bf16_t*>(p)[i]);
            case Wire::f16: return to_float(static_cast<const f16_t*>(p)[i]);
        }
        return 0;
    }
    void publish(void* buf) {
        g_.buffers[static_cast<std::size_t>(rank())] = buf;
        g_.sync.arrive_and_wait();
    }
    // Rank 0 sums (f32_max: takes the maximum of) every rank's buffer in rank order (fp32 for fp32 and 16-bit wires, rounded
    // once into the wire type by put(), as NCCL and napkin's MPI op do; fp64 for scalars).
    void sum(void* buf, std::uint64_t n, Wire t) {
        publish(buf);
        if (rank() == 0) {
            g_.sums.assign(n, 0.0);
            for (std::uint64_t i = 0; i < n; ++i) {
                if (t == Wire::f32_max) {  // fp8-amp's amaxes: the maximum
                    float m = static_cast<float>(get(g_.buffers[0], i, t));
                    for (void* b : g_.buffers) m = std::max(m, static_cast<float>(get(b, i, t)));
                    g_.sums[i] = m;
                } else if (t == Wire::f64) {
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
                case Wire::f32:
                case Wire::f32_max: static_cast<float*>(buf)[i] = static_cast<float>(s); break;
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
    std::unique_ptr<Generator> create_generator(const ModelConfig& cfg, DType storage,
                                                const GenerateShape& shape, AccountingAllocator& alloc,
                                                std::uint64_t seed) override {
        return Generator::create(cfg, storage, shape, alloc, seed);
    }
    void copy_to_device(void* dst, const void* src, std::size_t bytes) override { copy(dst, src, bytes); }
    void upload(void* dst, const void* src, std::size_t bytes) override { copy(dst, src, bytes); }
    void copy_to_host(void* dst, const void* src, std::size_t bytes) override { copy(dst, src, bytes); }
    void copy_on_device(void* dst, const void* src, std::size_t bytes) override { copy(dst, src, bytes); }
    void zero(void* dst, std::size_t bytes) override {
        ++calls;
        std::memset(dst, 0, bytes);
    }
    void accumulate(void* dst, const void* src, std::int64_t n, DType dtype) override {
        ++calls;
        if (dtype == DType::f32)
            cpu::accumulate<float>({static_cast<float*>(dst), static_cast<const float*>(src), n});
        else if (dtype == DType::bf16)
            cpu::accumulate<bf16_t>(
                {static_cast<bf16_t*>(dst), static_cast<const bf16_t*>(src), n});
        else
            cpu::accumulate<f16_t>({static_cast<f16_t*>(dst), static_cast<const f16_t*>(src), n});
    }
    void synchronize() override {}
    void timer_start() override {}
    double timer_stop_seconds() override { return 0; }
    double timer_stop_read(void* dst, const void* src, std::size_t bytes) override {
        copy(dst, src, bytes);
        return 0;
    }
    MemoryUse memory_use() override { return {}; }
    std::unique_ptr<Communicator> collectives(Communicator&) override { return nullptr; }
    double grad_sum_squares(const OptimizerTensor* tensors, int count, AccountingAllocator&) override {
        ++calls;
        return cpu::grad_sum_squares(tensors, count);
    }
    void optimizer_gate(const OptimizerTensor* tensors, int count, AccountingAllocator&, float grad_scale,
                        float grad_clip, StepScalars* gate) override {
        ++calls;
        const double sumsq = cpu::grad_sum_squares(tensors, count);
        cpu::optimizer_gate(gate, &sumsq, grad_scale, grad_clip);
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

}  // namespace napkin::test
