// The device a training run's tensors live on, for everything the trainer and the optimizer do
// besides the model's own kernels: the raw memory under the accounting allocator, the model
// built over this device's kernels, copies of the token batch in, the optimizer's passes
// (global gradient norm, update) with the multi-tensor kernels of kernels/optimizer.h.
//
// The CPU needs none of it: a null EngineDevice* means host memory and the CPU code paths,
// which stay exactly as they were. The one implementation is CUDA's (core/engine/cuda_device.cpp,
// over the plugin's table core/cuda/cuda_engine_api.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/allocator.h"
#include "core/comm/comm.h"
#include "core/engine/generate.h"
#include "core/engine/gpt.h"
#include "core/model_config.h"
#include "core/op_plan.h"
#include "kernels/optimizer.h"
#include "kernels/step_scalars.h"
#include "profiler/cupti_collector.h"

namespace napkin {

// The token batches' uploads, double-buffered on a copy stream (CUDA; docs/CUDA.md "Batches on a
// copy stream"). Two slots, each a pinned host staging buffer (read the data into host(s)) and
// the trainer's device buffers for that slot. Micro-batch k takes slot k % 2: its copies run on
// the copy stream while the engine's stream still computes micro-batch k - 1, and the engine's
// stream waits for them (an event) before its first kernel of k.
class BatchUploads {
public:
    virtual ~BatchUploads() = default;
    // Slot `slot`'s (0 or 1) staging buffer, of the bytes asked for, once the copies that last
    // read it have finished (a host wait only while they still run).
    virtual void* host(int slot) = 0;
    // Queued on the copy stream, behind the engine stream's work up to release(slot): dst
    // (device) = host(slot) + offset, bytes.
    virtual void upload(int slot, void* dst, std::size_t offset, std::size_t bytes) = 0;
    // The engine's stream waits for the slot's uploads before the work queued after this call.
    virtual void hand_over(int slot) = 0;
    // The slot's device buffers are free once the engine stream's work queued so far has run.
    // Never throws (a failed record leaves the slot waited for by the next step's one wait).
    virtual void release(int slot) noexcept = 0;
};

// Device work captured once and launched as one (a CUDA graph; docs/CUDA.md "CUDA graphs"),
// queued on the engine's stream in order with the rest of its work.
class DeviceGraph {
public:
    virtual ~DeviceGraph() = default;
    virtual void launch() = 0;
};

class EngineDevice {
public:
    virtual ~EngineDevice() = default;

    virtual DeviceKind kind() const = 0;
    virtual const std::string& name() const = 0;  // "NVIDIA H100 80GB HBM3"
    // Raw memory for the run's accounting allocator; outlives every tensor of the run.
    virtual RawMemory& memory() = 0;
    // The model on this device (Gpt::create's checks and initialization; the same weights as
    // the CPU engine's for the same seed).
    virtual std::unique_ptr<Gpt> create_gpt(const ModelConfig& cfg, const PlanInputs& in,
                                            AccountingAllocator& alloc, std::uint64_t seed) = 0;
    // The inference engine on this device (Generator::create checks the shape first).
    virtual std::unique_ptr<Generator> create_generator(const ModelConfig& cfg, DType storage,
                                                        const GenerateShape& shape,
                                                        AccountingAllocator& alloc,
                                                        std::uint64_t seed) = 0;

    // dst (device) = host_src, bytes; returns when the copy is done (host_src may be reused).
    virtual void copy_to_device(void* dst, const void* host_src, std::size_t bytes) = 0;
    // The same, queued: returns once host_src is staged (it may be reused) without waiting for
    // the device; the copy runs in stream order (the trainer's batches).
    virtual void upload(void* dst, const void* host_src, std::size_t bytes) = 0;
    // The batches' double-buffered uploads with staging buffers of `bytes` each (CUDA); null:
    // the device has no copy stream (the trainer then uses upload()).
    virtual std::unique_ptr<BatchUploads> batch_uploads(std::size_t /*bytes*/) { return nullptr; }
    // host_dst = src (device), bytes; waits for the work queued before it, then for the copy.
    virtual void copy_to_host(void* host_dst, const void* src, std::size_t bytes) = 0;
    virtual void zero(void* dst, std::size_t bytes) = 0;  // queued
    // The ZeRO engine's shard work (core/engine/zero.cpp), queued: dst = src (both device
    // memory), and dst (n of dtype f32, bf16 or f16) += src, kernels/accumulate.h.
    virtual void copy_on_device(void* dst, const void* src, std::size_t bytes) = 0;
    virtual void accumulate(void* dst, const void* src, std::int64_t n, DType dtype) = 0;
    virtual void synchronize() = 0;  // waits for everything queued
    // The device's own time of a stretch of work on the engine's stream (CUDA events):
    // timer_start marks the stream now; timer_stop_seconds marks it again, waits for that mark
    // (so everything queued before it has run, as synchronize()) and returns the seconds between.
    virtual void timer_start() = 0;
    virtual double timer_stop_seconds() = 0;
    // The step's one wait: marks the stream as timer_stop_seconds does, then copies src (device,
    // bytes) to host_dst, which waits for everything queued, the mark included; returns the
    // seconds since timer_start.
    virtual double timer_stop_read(void* host_dst, const void* src, std::size_t bytes) = 0;
    // The driver's view of the whole device (cudaMemGetInfo): bytes in use by anyone (this
    // context, its libraries, other processes) and the capacity.
    struct MemoryUse {
        std::uint64_t used_bytes = 0, total_bytes = 0;
    };
    virtual MemoryUse memory_use() = 0;

    // The optimizer's passes over every parameter at once (tensors: host array of device
    // pointers, kernels/optimizer.h). grad_sum_squares waits for its result; scratch is
    // allocated from `alloc` as a temporary.
    virtual double grad_sum_squares(const OptimizerTensor* tensors, int count,
                                    AccountingAllocator& alloc) = 0;
    // The same pass with its result left on the device, then optimizer_gate into *gate
    // (device memory, kernels/step_scalars.h): the norm, the clip factor and the skip flag
    // that an update with OptimizerHyper::gate reads. Queued; nothing is read back.
    virtual void optimizer_gate(const OptimizerTensor* tensors, int count,
                                AccountingAllocator& alloc, float grad_scale, float grad_clip,
                                StepScalars* gate) = 0;
    virtual void optimizer_update(const OptimizerHyper& h, const OptimizerTensor* tensors,
                                  int count, DType state_dtype) = 0;
    // gate->schedule (device memory) = schedule, queued in stream order: what an update with
    // OptimizerHyper::schedule_from_gate reads (CUDA: a one-thread kernel whose arguments carry
    // the values, so no host memory must outlive the call). The default copies and waits.
    virtual void step_schedule(StepScalars* gate, const StepSchedule& schedule) {
        copy_to_device(&gate->schedule, &schedule, sizeof schedule);
    }

    // CUDA graphs (napkin train --cuda-graph): between begin_capture and end_capture, the work
    // queued on the engine's stream is recorded, not run, and anything that would wait for the
    // device, allocate device memory or use another stream without joining fails; the graph
    // end_capture returns runs that work at each launch(), reading and writing the addresses it
    // was captured with. can_capture: whether the device has graphs (else end_capture is null).
    virtual bool can_capture() const { return false; }
    virtual void begin_capture() {}
    virtual std::unique_ptr<DeviceGraph> end_capture() { return nullptr; }

    // Paged memory (napkin train --paged-optimizer, QLoRA's paged optimizer): raw memory the
    // device can page out to the host (CUDA managed memory preferred on the host), for an
    // accounting allocator of its own; null where the device has none. prefetch queues the move
    // of [ptr, ptr + bytes) (whole tensors of that memory) to the device or back to the host,
    // counted, and timed with events on the stream around each batch of prefetches
    // (begin_prefetch .. end_prefetch). take_page_traffic returns the counts since the last
    // call and waits for the batches' end events (free after the step's own wait).
    struct PageTraffic {
        std::uint64_t to_device_bytes = 0, to_host_bytes = 0;
        double seconds = 0;  // the prefetches' time on the stream
    };
    virtual RawMemory* paged_memory() { return nullptr; }
    virtual void begin_prefetch() {}
    virtual void prefetch(const void* /*ptr*/, std::size_t /*bytes*/, bool /*to_device*/) {}
    virtual void end_prefetch() {}
    virtual PageTraffic take_page_traffic() { return {}; }

    // The collectives between ranks whose tensors live on devices like this one, bootstrapped
    // by the launcher's communicator: NCCL on CUDA (core/comm/comm_nccl.h). Null: `bootstrap`
    // itself serves them (a device whose memory the host can read, as tests' stand-ins).
    virtual std::unique_ptr<Communicator> collectives(Communicator& bootstrap) = 0;

    // The device's own activity for the profiler (CUPTI through the plugin's table on CUDA):
    // kernels, copies, API calls (profiler/cupti_collector.h). Null when there is none.
    virtual std::unique_ptr<profiler::GpuActivitySource> activity_source() { return nullptr; }
};

// The device for `kind`: null for the CPU; for CUDA device `index` (a data-parallel rank's local
// rank, else 0) through the plugin, or UsageError "--device cuda: no CUDA device (<reason>)"
// when the build has no CUDA or no device is present.
std::unique_ptr<EngineDevice> open_engine_device(DeviceKind kind, int index = 0);

}  // namespace napkin
