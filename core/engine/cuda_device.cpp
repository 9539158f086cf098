// The CUDA engine device (core/engine/engine_device.h): device `index` (0, or a data-parallel
// rank's local rank), one non-blocking stream and one
// cuBLASLt handle shared by the model's kernels and the optimizer's (so stream order is the
// only ordering needed), the caching device allocator under the accounting allocator, and the
// GptImpl instantiations over CudaKernels. Everything CUDA goes through the plugin's table
// (core/cuda/cuda_engine_api.h): this file includes no CUDA header and compiles in every build.
#include <array>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/buffer_plan.h"
#include "core/comm/comm_nccl.h"
#include "core/cuda/cuda_engine_api.h"
#include "core/device.h"
#include "core/engine/cuda_kernels.h"
#include "core/engine/engine_device.h"
#include "core/engine/generate_impl.h"
#include "core/engine/gpt_impl.h"
#include "core/tensor.h"

namespace napkin {

namespace {

// CUPTI activity through the plugin's table: napkin's side gets plain records only.
class PluginActivitySource final : public profiler::GpuActivitySource {
public:
    explicit PluginActivitySource(const CudaEngineApi& api) : api_(api) {}
    bool enable(std::string* error) noexcept override {
        char buf[256] = {};
        if (api_.activity_enable(buf, sizeof buf)) return true;
        if (error != nullptr) {
            try {
                *error = buf;
            } catch (...) {
            }
        }
        return false;
    }
    void disable() noexcept override { api_.activity_disable(); }
    void push_external(std::uint64_t id) noexcept override { api_.activity_push_external(id); }
    void pop_external() noexcept override { api_.activity_pop_external(); }
    std::uint64_t timestamp_ns() noexcept override { return api_.activity_timestamp(); }
    void flush(bool wait, std::vector<profiler::GpuActivity>* out,
               profiler::GpuActivityStats* stats) noexcept override {
        api_.activity_flush(wait, out, stats);
    }

private:
    const CudaEngineApi& api_;
};

// BatchUploads on CUDA: a second non-blocking stream for the host-to-device copies, two pinned
// staging buffers, and per slot two events: `copied` (on the copy stream, behind the slot's
// copies: the engine's stream waits for it, the host too before refilling the staging buffer)
// and `released` (on the engine's stream, behind the micro-batch that read the slot's device
// buffers: the copy stream waits for it before overwriting them). Must go before the device.
class CudaBatchUploads final : public BatchUploads {
public:
    CudaBatchUploads(const CudaEngineApi& api, CUstream_st* engine_stream, std::size_t bytes)
        : api_(api), engine_stream_(engine_stream) {
        copy_stream_ = api_.stream_create();
        try {
            for (void*& p : host_)
                p = api_.pinned_allocate(bytes);
        } catch (...) {
            free_all();
            throw;
        }
    }
    ~CudaBatchUploads() override {
        try {
            api_.stream_synchronize(copy_stream_);  // no copy may still read a staging buffer
        } catch (const std::exception&) {  // a destructor cannot throw; the error was the run's
        }
        free_all();
    }
    CudaBatchUploads(const CudaBatchUploads&) = delete;
    CudaBatchUploads& operator=(const CudaBatchUploads&) = delete;

    void* host(int slot) override {
        cuda::CudaEvent*& copied = copied_[index(slot)];
        // A query first: a wait on an event already done would still be a synchronization.
        if (copied != nullptr && !api_.event_done(copied)) api_.event_wait(copied);
        api_.event_destroy(copied);
        copied = nullptr;
        return host_[index(slot)];
    }
    void upload(int slot, void* dst, std::size_t offset, std::size_t bytes) override {
        cuda::CudaEvent*& released = released_[index(slot)];
        if (released != nullptr) {
            api_.stream_wait_event(copy_stream_, released);
            api_.event_destroy(released);
            released = nullptr;
        }
        api_.copy_to_device_queued(dst, static_cast<const char*>(host_[index(slot)]) + offset,
                                   bytes, copy_stream_);
    }
    void hand_over(int slot) override {
        cuda::CudaEvent*& copied = copied_[index(slot)];
        api_.event_destroy(copied);
        copied = api_.event_record(copy_stream_, false);
        api_.stream_wait_event(engine_stream_, copied);
    }
    void release(int slot) noexcept override {
        cuda::CudaEvent*& released = released_[index(slot)];
        api_.event_destroy(released);
        released = nullptr;
        try {
            released = api_.event_record(engine_stream_, false);
        } catch (const std::exception&) {  // the device failed; the next call reports it
        }
    }

private:
    static std::size_t index(int slot) {
        NAPKIN_ASSERT(slot == 0 || slot == 1, "batch upload slot " << slot);
        return static_cast<std::size_t>(slot);
    }
    void free_all() noexcept {
        for (std::size_t i = 0; i < 2; ++i) {
            api_.event_destroy(copied_[i]);
            api_.event_destroy(released_[i]);
            if (host_[i] != nullptr) api_.pinned_free(host_[i]);
        }
        api_.stream_destroy(copy_stream_);
    }

    const CudaEngineApi& api_;
    CUstream_st* engine_stream_ = nullptr;
    CUstream_st* copy_stream_ = nullptr;
    std::array<void*, 2> host_{};
    std::array<cuda::CudaEvent*, 2> copied_{}, released_{};
};

// A captured graph (core/cuda/cuda_graph.h), launched on the engine's stream.
class CudaDeviceGraph final : public DeviceGraph {
public:
    CudaDeviceGraph(const CudaEngineApi& api, CUstream_st* stream, cuda::CudaGraph* graph)
        : api_(api), stream_(stream), graph_(graph) {}
    ~CudaDeviceGraph() override { api_.graph_destroy(graph_); }
    CudaDeviceGraph(const CudaDeviceGraph&) = delete;
    CudaDeviceGraph& operator=(const CudaDeviceGraph&) = delete;
    void launch() override { api_.graph_launch(graph_, stream_); }

private:
    const CudaEngineApi& api_;
    CUstream_st* stream_ = nullptr;
    cuda::CudaGraph* graph_ = nullptr;
};

class CudaEngineDevice final : public EngineDevice {
public:
    CudaEngineDevice(const CudaEngineApi& api, int index) : api_(api) {
        char name[256] = {};
        api_.select_device(index, name, sizeof name, &sm_);
        name_ = name;
        stream_ = api_.stream_create();
        try {
            handle_ = api_.matmul_create_handle();
            memory_ = api_.memory_create();
        } catch (...) {
            api_.matmul_destroy_handle(handle_);
            api_.stream_destroy(stream_);
            throw;
        }
    }
    ~CudaEngineDevice() override {
        // Every tensor is gone by now (the trainer destroys the model and the allocator first);
        // queued work may still read them, so wait before returning the memory.
        try {
            api_.stream_synchronize(stream_);
        } catch (const std::exception&) {  // a destructor cannot throw; the error was the run's
        }
        api_.event_destroy(timer_start_);
        for (auto& [start, end] : prefetch_events_) {
            api_.event_destroy(start);
            api_.event_destroy(end);
        }
        api_.memory_destroy(paged_);
        api_.memory_destroy(memory_);
        api_.matmul_destroy_handle(handle_);
        api_.stream_destroy(stream_);
    }
    CudaEngineDevice(const CudaEngineDevice&) = delete;
    CudaEngineDevice& operator=(const CudaEngineDevice&) = delete;

    DeviceKind kind() const override { return DeviceKind::cuda; }
    const std::string& name() const override { return name_; }
    RawMemory& memory() override { return *memory_; }

    std::unique_ptr<Gpt> create_gpt(const ModelConfig& cfg, const PlanInputs& in,
                                    AccountingAllocator& alloc, std::uint64_t seed) override {
        check_engine_support(cfg, in);
        NAPKIN_ASSERT(alloc.device() == DeviceKind::cuda,
                      "the CUDA model needs an allocator over device memory");
        switch (in.precision) {
            case Precision::fp32:
                return make<float>(cfg, in, alloc, seed);
            case Precision::bf16_amp:
            case Precision::bf16:  // no master: the optimizer kernel updates the bf16 weights
                return make<bf16_t>(cfg, in, alloc, seed);
            case Precision::fp16_amp:
                return make<f16_t>(cfg, in, alloc, seed);
            case Precision::fp8_amp:
                check_fp8(cfg, in);
                return make<bf16_t>(cfg, in, alloc, seed);  // bf16 storage, fp8 GEMMs
        }
        throw UsageError("{precision}: not supported by the engine");
    }

    std::unique_ptr<Generator> create_generator(const ModelConfig& cfg, DType storage,
                                                const GenerateShape& shape,
                                                AccountingAllocator& alloc,
                                                std::uint64_t seed) override {
        NAPKIN_ASSERT(alloc.device() == DeviceKind::cuda,
                      "the CUDA model needs an allocator over device memory");
        if (storage == DType::bf16) {
            return std::make_unique<GeneratorImpl<CudaKernels<bf16_t>>>(
                cfg, shape, alloc, seed, CudaKernels<bf16_t>(api_, stream_, handle_));
        }
        return std::make_unique<GeneratorImpl<CudaKernels<float>>>(
            cfg, shape, alloc, seed, CudaKernels<float>(api_, stream_, handle_));
    }

    void copy_to_device(void* dst, const void* host_src, std::size_t bytes) override {
        api_.copy_to_device(dst, host_src, bytes, stream_);
    }
    void upload(void* dst, const void* host_src, std::size_t bytes) override {
        api_.copy_to_device_queued(dst, host_src, bytes, stream_);
    }
    std::unique_ptr<BatchUploads> batch_uploads(std::size_t bytes) override {
        return std::make_unique<CudaBatchUploads>(api_, stream_, bytes);
    }
    void copy_to_host(void* host_dst, const void* src, std::size_t bytes) override {
        api_.copy_to_host(host_dst, src, bytes, stream_);
    }
    void zero(void* dst, std::size_t bytes) override { api_.memset_zero(dst, bytes, stream_); }
    void copy_on_device(void* dst, const void* src, std::size_t bytes) override {
        api_.copy_on_device(dst, src, bytes, stream_);
    }
    void accumulate(void* dst, const void* src, std::int64_t n, DType dtype) override {
        switch (dtype) {
            case DType::f32:
                return api_.f32.accumulate(
                    {static_cast<float*>(dst), static_cast<const float*>(src), n}, {stream_});
            case DType::bf16:
                return api_.bf16.accumulate(
                    {static_cast<bf16_t*>(dst), static_cast<const bf16_t*>(src), n}, {stream_});
            case DType::f16:
                return api_.f16.accumulate(
                    {static_cast<f16_t*>(dst), static_cast<const f16_t*>(src), n}, {stream_});
            default:
                break;
        }
        NAPKIN_ASSERT(false, "accumulate: no kernel for " << dtype_name(dtype));
    }
    void synchronize() override { api_.stream_synchronize(stream_); }
    void timer_start() override {
        api_.event_destroy(timer_start_);
        timer_start_ = nullptr;
        timer_start_ = api_.event_record(stream_, true);
    }
    double timer_stop_seconds() override { return timer_stop_read(nullptr, nullptr, 0); }
    // Without bytes to read, the wait is on the mark itself.
    double timer_stop_read(void* host_dst, const void* src, std::size_t bytes) override {
        NAPKIN_ASSERT(timer_start_ != nullptr, "timer_stop without timer_start");
        cuda::CudaEvent* end = api_.event_record(stream_, true);
        double ms = 0;
        try {
            if (bytes > 0)
                api_.copy_to_host(host_dst, src, bytes, stream_);
            else
                api_.event_wait(end);
            ms = api_.event_elapsed_ms(timer_start_, end);
        } catch (...) {
            api_.event_destroy(end);
            throw;
        }
        api_.event_destroy(end);
        api_.event_destroy(timer_start_);
        timer_start_ = nullptr;
        return ms * 1e-3;
    }
    MemoryUse memory_use() override {
        std::uint64_t free = 0, total = 0;
        api_.memory_info(&free, &total);
        return {total - free, total};
    }

    double grad_sum_squares(const OptimizerTensor* tensors, int count,
                            AccountingAllocator& alloc) override {
        double sumsq = 0.0;
        queue_grad_sum_squares(tensors, count, alloc, [&](const double* result) {
            api_.copy_to_host(&sumsq, result, sizeof sumsq, stream_);
        });
        return sumsq;
    }
    void optimizer_gate(const OptimizerTensor* tensors, int count, AccountingAllocator& alloc,
                        float grad_scale, float grad_clip, StepScalars* gate) override {
        queue_grad_sum_squares(tensors, count, alloc, [&](const double* result) {
            api_.optimizer_gate(gate, result, grad_scale, grad_clip, stream_);
        });
    }
    void optimizer_update(const OptimizerHyper& h, const OptimizerTensor* tensors, int count,
                          DType state_dtype) override {
        api_.optimizer_update(h, tensors, count, state_dtype, stream_);
    }
    void step_schedule(StepScalars* gate, const StepSchedule& schedule) override {
        api_.step_schedule(gate, schedule, stream_);
    }
    bool can_capture() const override { return true; }
    void begin_capture() override { api_.graph_begin_capture(stream_); }
    std::unique_ptr<DeviceGraph> end_capture() override {
        return std::make_unique<CudaDeviceGraph>(api_, stream_, api_.graph_end_capture(stream_));
    }
    RawMemory* paged_memory() override {
        if (paged_ == nullptr) paged_ = api_.paged_memory_create();
        return paged_;
    }
    void begin_prefetch() override {
        NAPKIN_ASSERT(prefetch_start_ == nullptr, "begin_prefetch twice");
        prefetch_start_ = api_.event_record(stream_, true);
    }
    void prefetch(const void* ptr, std::size_t bytes, bool to_device) override {
        api_.prefetch(ptr, bytes, to_device, stream_);
        (to_device ? traffic_.to_device_bytes : traffic_.to_host_bytes) += bytes;
    }
    void end_prefetch() override {
        NAPKIN_ASSERT(prefetch_start_ != nullptr, "end_prefetch without begin_prefetch");
        cuda::CudaEvent* end = api_.event_record(stream_, true);
        prefetch_events_.emplace_back(prefetch_start_, end);
        prefetch_start_ = nullptr;
    }
    PageTraffic take_page_traffic() override {
        PageTraffic t = traffic_;
        for (auto& [start, end] : prefetch_events_) {
            api_.event_wait(end);
            t.seconds += 1e-3 * api_.event_elapsed_ms(start, end);
            api_.event_destroy(start);
            api_.event_destroy(end);
        }
        prefetch_events_.clear();
        traffic_ = {};
        return t;
    }
    std::unique_ptr<Communicator> collectives(Communicator& bootstrap) override {
        return make_nccl_communicator(bootstrap);
    }
    std::unique_ptr<profiler::GpuActivitySource> activity_source() override {
        return std::make_unique<PluginActivitySource>(api_);
    }

private:
    // The global norm's pass, then then(result), result the sum of squares in device memory,
    // while the scratch lives. The scratch (the buffer plan's grad_norm_scratch): the result
    // (one double, padded to 256 bytes) then the per-block partials. Freed on return with work
    // still queued: the caching allocator hands it out again only to work queued after it on
    // this one stream.
    template <class Then>
    void queue_grad_sum_squares(const OptimizerTensor* tensors, int count,
                                AccountingAllocator& alloc, Then&& then) {
        const PlanBuffer b = grad_norm_scratch(count);
        Tensor scratch(alloc, std::string(b.name), b.category, b.dtype, {b.numel});
        auto* base = static_cast<unsigned char*>(scratch.raw());
        auto* result = reinterpret_cast<double*>(base);
        api_.grad_sum_squares(result, tensors, count, base + cuda::kGradNormResultBytes, stream_);
        then(result);
    }

    // fp8-amp needs fp8 tensor cores (sm_89: Ada, Hopper and later) and, for cuBLASLt's fp8
    // kernels, every block GEMM dimension a multiple of 16 (kernels/matmul.h).
    void check_fp8(const ModelConfig& cfg, const PlanInputs& in) const {
        if (sm_ < 89) {
            throw UsageError("{precision} fp8-amp: " + name_ + " (sm_" + std::to_string(sm_) +
                             ") has no fp8 tensor cores (sm_89 or later: Ada, Hopper); "
                             "{precision} bf16-amp runs on it");
        }
        const std::int64_t fc_rows = cfg.mlp == MlpKind::swiglu ? 2 * cfg.d_ff : cfg.d_ff;
        const std::pair<const char*, std::int64_t> dims[] = {
            {"d_model", cfg.d_model},
            {"d_ff", cfg.d_ff},
            {"the MLP's input width", fc_rows},
            {"the QKV width", cfg.qkv_dim()},
            {"micro-batch x seq-len", in.micro_batch * in.seq_len}};
        for (const auto& [what, v] : dims) {
            if (v % cuda::kFp8GemmMultiple != 0) {
                throw UsageError("{precision} fp8-amp on CUDA: " + std::string(what) + " is " +
                                 std::to_string(v) +
                                 ", and cuBLASLt's fp8 GEMMs need multiples of " +
                                 std::to_string(cuda::kFp8GemmMultiple));
            }
        }
    }

    template <class T>
    std::unique_ptr<Gpt> make(const ModelConfig& cfg, const PlanInputs& in,
                              AccountingAllocator& alloc, std::uint64_t seed) {
        return std::make_unique<GptImpl<CudaKernels<T>>>(cfg, in, alloc, seed,
                                                         CudaKernels<T>(api_, stream_, handle_));
    }

    const CudaEngineApi& api_;
    std::string name_;
    int sm_ = 0;  // compute capability, 10 major + minor
    CUstream_st* stream_ = nullptr;
    cublasLtContext* handle_ = nullptr;
    RawMemory* memory_ = nullptr;
    cuda::CudaEvent* timer_start_ = nullptr;     // timer_start's, until timer_stop_seconds
    RawMemory* paged_ = nullptr;                 // managed memory, made on first use
    cuda::CudaEvent* prefetch_start_ = nullptr;  // begin_prefetch's, until end_prefetch
    std::vector<std::pair<cuda::CudaEvent*, cuda::CudaEvent*>> prefetch_events_;  // untaken
    PageTraffic traffic_;                                                         // untaken
};

}  // namespace

std::unique_ptr<EngineDevice> open_engine_device(DeviceKind kind, int index) {
    if (kind == DeviceKind::cpu) return nullptr;
    std::string reason;
    const CudaEngineApi* api = cuda_engine_api(&reason);
    if (api == nullptr) throw UsageError("{device} cuda: no CUDA device (" + reason + ")");
    return std::make_unique<CudaEngineDevice>(*api, index);
}

}  // namespace napkin
