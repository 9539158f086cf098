#include "profiler/cupti_collector.h"

#include <cupti.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "profiler/cupti_records.h"

namespace napkin::profiler {

struct CuptiCollector::Impl {
    explicit Impl(Recorder& r) : recorder(r), translator(r) {}

    Recorder& recorder;
    CuptiTranslator translator;
    std::string error;
    bool active = false;
    std::uint64_t next_external = 1;
    std::atomic<std::uint64_t> failures{0};
    std::atomic<std::uint64_t> dropped{0};
    std::atomic<std::size_t> buffers_out{0};
    std::mutex mutex;                  // guards pending
    std::vector<GpuActivity> pending;  // parsed on CUPTI's thread, translated in flush()
    bool warned = false;

    // A failed CUPTI call: warn once, count, go on.
    bool check(CUptiResult r, const char* call) {
        if (r == CUPTI_SUCCESS) return true;
        failures.fetch_add(1);
        if (!warned) {
            const char* msg = nullptr;
            cuptiGetResultString(r, &msg);
            std::fprintf(stderr, "napkin: profiler: %s failed (%s); GPU activity may be incomplete\n", call,
                         msg != nullptr ? msg : "unknown CUPTI error");
            warned = true;
        }
        return false;
    }
    void parse(std::uint8_t* buffer, std::size_t valid);
};

namespace {

// CUPTI's buffer callbacks are plain C functions: they reach the one active collector here.
std::atomic<CuptiCollector::Impl*> g_active{nullptr};

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
    *buffer = nullptr;
    *size = 0;
    *max_records = 0;  // fill the buffer
    CuptiCollector::Impl* c = g_active.load();
    if (c == nullptr || c->buffers_out.load() >= CuptiCollector::kMaxBuffers) return;  // CUPTI drops, counts
    void* p = std::aligned_alloc(8, CuptiCollector::kBufferBytes);
    if (p == nullptr) return;
    c->buffers_out.fetch_add(1);
    *buffer = static_cast<std::uint8_t*>(p);
    *size = CuptiCollector::kBufferBytes;
}

void CUPTIAPI buffer_completed(CUcontext ctx, std::uint32_t stream, std::uint8_t* buffer, std::size_t, std::size_t valid) {
    CuptiCollector::Impl* c = g_active.load();
    if (c != nullptr) {
        c->parse(buffer, valid);
        std::size_t dropped = 0;
        if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS) c->dropped.fetch_add(dropped);
        c->buffers_out.fetch_sub(1);
    }
    std::free(buffer);
}

const char* memcpy_name(std::uint8_t kind) {
    switch (kind) {
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "memcpy HtoH";
        case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "memcpy PtoP";
        default: return "memcpy";
    }
}

std::int64_t steady_now_ns(const Recorder& r) { return r.now_ns(); }

}  // namespace

void CuptiCollector::Impl::parse(std::uint8_t* buffer, std::size_t valid) {
    std::vector<GpuActivity> out;
    CUpti_Activity* record = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        GpuActivity a;
        switch (record->kind) {
            case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
            case CUPTI_ACTIVITY_KIND_KERNEL: {
                const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
                a.kind = GpuActivityKind::kernel;
                a.name = k->name != nullptr ? k->name : "kernel";
                a.start_ns = k->start;
                a.end_ns = k->end;
                a.correlation_id = k->correlationId;
                a.device = k->deviceId;
                a.stream = k->streamId;
                a.grid[0] = k->gridX, a.grid[1] = k->gridY, a.grid[2] = k->gridZ;
                a.block[0] = k->blockX, a.block[1] = k->blockY, a.block[2] = k->blockZ;
                a.shared_bytes = k->staticSharedMemory + k->dynamicSharedMemory;
                a.registers = k->registersPerThread;
                break;
            }
            case CUPTI_ACTIVITY_KIND_MEMCPY: {
                const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
                a.kind = GpuActivityKind::memcpy;
                a.name = memcpy_name(m->copyKind);
                a.start_ns = m->start;
                a.end_ns = m->end;
                a.correlation_id = m->runtimeCorrelationId != 0 ? m->runtimeCorrelationId : m->correlationId;
                a.device = m->deviceId;
                a.stream = m->streamId;
                a.bytes = m->bytes;
                break;
            }
            case CUPTI_ACTIVITY_KIND_MEMSET: {
                const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
                a.kind = GpuActivityKind::memset;
                a.name = "memset";
                a.start_ns = m->start;
                a.end_ns = m->end;
                a.correlation_id = m->correlationId;
                a.device = m->deviceId;
                a.stream = m->streamId;
                a.bytes = m->bytes;
                break;
            }
            case CUPTI_ACTIVITY_KIND_RUNTIME: {
                const auto* api = reinterpret_cast<const CUpti_ActivityAPI*>(record);
                a.kind = GpuActivityKind::runtime;
                const char* name = nullptr;
                cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, api->cbid, &name);
                a.name = name != nullptr ? name : "cuda runtime call";
                a.start_ns = api->start;
                a.end_ns = api->end;
                a.correlation_id = api->correlationId;
                a.host_thread = api->threadId;
                break;
            }
            case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
                const auto* s = reinterpret_cast<const CUpti_ActivitySynchronization2*>(record);
                a.kind = GpuActivityKind::synchronization;
                a.name = "synchronize";
                a.start_ns = s->start;
                a.end_ns = s->end;
                a.correlation_id = s->correlationId;
                a.stream = s->streamId;
                break;
            }
            case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
                const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
                a.kind = GpuActivityKind::external_correlation;
                a.correlation_id = e->correlationId;
                a.external_id = e->externalId;
                break;
            }
            default:
                continue;
        }
        out.push_back(std::move(a));
    }
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& a : out) pending.push_back(std::move(a));
}

CuptiCollector::CuptiCollector(Recorder& recorder) : impl_(std::make_unique<Impl>(recorder)) {
    Impl* expected = nullptr;
    if (!g_active.compare_exchange_strong(expected, impl_.get())) {
        impl_->error = "another CUPTI collector is active in this process";
        return;
    }
    Impl& c = *impl_;
    std::uint64_t t = 0;
    if (!c.check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks")) {
        c.error = "CUPTI activity callbacks could not be registered";
        g_active.store(nullptr);
        return;
    }
    for (CUpti_ActivityKind kind :
         {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
          CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION}) {
        c.check(cuptiActivityEnable(kind), "cuptiActivityEnable");
    }
    if (c.check(cuptiGetTimestamp(&t), "cuptiGetTimestamp")) c.translator.clock().add_pair(t, steady_now_ns(c.recorder));
    c.active = c.failures.load() == 0;
    if (!c.active) c.error = "CUPTI activity collection could not be enabled (see the warning above)";
}

CuptiCollector::~CuptiCollector() {
    if (g_active.load() != impl_.get()) return;
    flush(true);
    for (CUpti_ActivityKind kind :
         {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
          CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION}) {
        cuptiActivityDisable(kind);
    }
    g_active.store(nullptr);
}

bool CuptiCollector::active() const { return impl_->active; }
const std::string& CuptiCollector::error() const { return impl_->error; }

void CuptiCollector::push_kernel(std::string name, const KernelCost& cost) {
    if (!impl_->active) return;
    const std::uint64_t id = impl_->next_external++;
    impl_->translator.register_external(id, std::move(name), cost);
    impl_->check(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id),
                 "cuptiActivityPushExternalCorrelationId");
}

void CuptiCollector::pop_kernel() {
    if (!impl_->active) return;
    std::uint64_t last = 0;
    impl_->check(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last),
                 "cuptiActivityPopExternalCorrelationId");
}

void CuptiCollector::flush(bool wait) {
    Impl& c = *impl_;
    if (!c.active) return;
    // Without FORCED, CUPTI delivers only completed buffers and does not wait for the device.
    c.check(cuptiActivityFlushAll(wait ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0), "cuptiActivityFlushAll");
    std::uint64_t t = 0;
    if (c.check(cuptiGetTimestamp(&t), "cuptiGetTimestamp")) c.translator.clock().add_pair(t, steady_now_ns(c.recorder));
    std::vector<GpuActivity> batch;
    {
        std::lock_guard<std::mutex> lock(c.mutex);
        batch.swap(c.pending);
    }
    c.translator.add(batch);
}

std::uint64_t CuptiCollector::dropped() const { return impl_->dropped.load(); }
std::uint64_t CuptiCollector::failures() const { return impl_->failures.load(); }
std::uint64_t CuptiCollector::kernels() const { return impl_->translator.kernels(); }

}  // namespace napkin::profiler
