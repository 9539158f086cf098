#include "profiler/host_range.h"

namespace napkin::profiler::detail {

void begin_range(std::optional<RangeEvent>& slot, Recorder& recorder, std::string_view name,
                 Category category, const KernelCost& cost, TrackId track) noexcept {
    try {
        RangeEvent& e = slot.emplace();
        e.name.assign(name);
        e.category = category;
        e.track = track;
        e.flops = cost.flops;
        e.bytes = cost.bytes();
        e.start_ns = recorder.now_ns();  // last: the copy of the name is not the range's time
    } catch (...) {                      // no memory for a name: the range is lost, the run goes on
        slot.reset();
        recorder.record_drop();
    }
}

void end_range(std::optional<RangeEvent>& slot, Recorder& recorder) noexcept {
    slot->dur_ns = recorder.now_ns() - slot->start_ns;
    recorder.record(std::move(*slot));
    slot.reset();
}

}  // namespace napkin::profiler::detail
