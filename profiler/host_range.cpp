#include "profiler/host_range.h"

namespace napkin::profiler::detail {

namespace {

bool names_op(const RangeEvent& e) {
    return e.track == kHostTrack &&
           (e.category == Category::op || e.category == Category::optimizer);
}

}  // namespace

void begin_range(std::optional<RangeEvent>& slot, Recorder& recorder, std::string_view name,
                 Category category, const KernelCost& cost, TrackId track) noexcept {
    try {
        RangeEvent& e = slot.emplace();
        e.name.assign(name);
        e.category = category;
        e.track = track;
        e.flops = cost.flops;
        e.bytes = cost.bytes();
        if (names_op(e)) recorder.set_open_op(name);
        e.start_ns = recorder.now_ns();  // last: the copy of the name is not the range's time
    } catch (...) {                      // no memory for a name: the range is lost, the run goes on
        slot.reset();
        recorder.record_drop();
    }
}

void end_range(std::optional<RangeEvent>& slot, Recorder& recorder) noexcept {
    if (names_op(*slot)) recorder.clear_open_op();
    slot->dur_ns = recorder.now_ns() - slot->start_ns;
    recorder.record(std::move(*slot));
    slot.reset();
}

}  // namespace napkin::profiler::detail

#if defined(NAPKIN_HAVE_NVTX)
#include <nvtx3/nvToolsExt.h>

namespace napkin::profiler::detail {

namespace {

// The "napkin" domain, its categories named after profiler::Category (ids from 1: NVTX's 0 is
// "no category"). Made on first use; without a tool attached NVTX3 returns at once.
nvtxDomainHandle_t napkin_domain() noexcept {
    static const nvtxDomainHandle_t domain = [] {
        nvtxDomainHandle_t d = nvtxDomainCreateA("napkin");
        for (const auto& c : kCategoryNames) {
            nvtxDomainNameCategoryA(d, static_cast<std::uint32_t>(c.value) + 1, c.name.data());
        }
        return d;
    }();
    return domain;
}

}  // namespace

void nvtx_push(std::string_view name, Category category) noexcept {
    // NVTX wants a NUL-terminated string and copies it at once.
    char buf[128];
    const std::size_t n = name.size() < sizeof buf - 1 ? name.size() : sizeof buf - 1;
    name.copy(buf, n);
    buf[n] = '\0';
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.category = static_cast<std::uint32_t>(category) + 1;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = buf;
    nvtxDomainRangePushEx(napkin_domain(), &a);
}

void nvtx_pop() noexcept {
    nvtxDomainRangePop(napkin_domain());
}

}  // namespace napkin::profiler::detail
#endif
