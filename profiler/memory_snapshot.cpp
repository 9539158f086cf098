#include "profiler/memory_snapshot.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <utility>

#include "core/durable_file.h"
#include "profiler/chrome_trace_writer.h"

namespace napkin::profiler {

namespace {

using ojson = nlohmann::ordered_json;

std::size_t index_of(MemCategory c) {
    return static_cast<std::size_t>(c);
}

std::string_view category_name(MemCategory c) {
    return enum_name(kMemCategoryNames, c);
}

ojson by_category_json(const std::array<std::int64_t, kMemCategoryCount>& bytes) {
    ojson j = ojson::object();
    for (const auto& entry : kMemCategoryNames)
        j[entry.name] = bytes[index_of(entry.value)];
    return j;
}

std::string name_of(const std::vector<std::string>& names, std::uint32_t id) {
    return id < names.size() ? names[id] : std::string("?");
}

ojson timeline_row(const MemEvent& e, std::int64_t run_offset_ns) {
    return ojson::array(
        {trace_us(e.t_ns + run_offset_ns), e.bytes, index_of(e.category), e.name_id, e.address});
}

// Everything but the timeline, which the caller streams or appends.
ojson snapshot_head(const AccountingAllocator& allocator, std::int64_t run_offset_ns) {
    const auto& events = allocator.events();
    const auto& names = allocator.names();

    ojson j;
    j["schema"] = "napkin-memory/1";
    j["device"] = enum_name(kDeviceKindNames, allocator.device());
    ojson categories = ojson::array();
    for (const auto& entry : kMemCategoryNames)
        categories.push_back(entry.name);
    j["categories"] = std::move(categories);
    j["names"] = names;

    std::array<std::int64_t, kMemCategoryCount> final_bytes{};
    std::int64_t final_total = 0;
    for (const auto& e : events) {
        final_bytes[index_of(e.category)] += e.bytes;
        final_total += e.bytes;
    }
    j["final"] = {{"total_bytes", final_total}, {"by_category", by_category_json(final_bytes)}};

    const MemoryPeak peak = find_memory_peak(events);
    ojson live = ojson::array();
    for (const auto& b : peak.live) {
        live.push_back({{"name", name_of(names, b.name_id)},
                        {"category", category_name(b.category)},
                        {"bytes", b.bytes},
                        {"address", b.address},
                        {"t_us_allocated", trace_us(b.t_ns_allocated + run_offset_ns)}});
    }
    j["peak"] = {{"t_us", trace_us(peak.t_ns + run_offset_ns)},
                 {"total_bytes", peak.total_bytes},
                 {"by_category", by_category_json(peak.by_category)},
                 {"live", std::move(live)}};
    return j;
}

}  // namespace

MemoryPeak find_memory_peak(const std::vector<MemEvent>& events) {
    // Pass 1: where the running total first reaches its maximum.
    std::int64_t total = 0;
    std::int64_t best = 0;
    std::size_t best_end = 0;  // events [0, best_end) make the peak state
    for (std::size_t i = 0; i < events.size(); ++i) {
        total += events[i].bytes;
        if (total > best) {
            best = total;
            best_end = i + 1;
        }
    }

    // Pass 2: replay up to the peak, keeping the live blocks by address.
    MemoryPeak peak;
    std::unordered_map<std::uint64_t, std::size_t> live;  // address -> index of its allocation
    for (std::size_t i = 0; i < best_end; ++i) {
        const MemEvent& e = events[i];
        peak.by_category[index_of(e.category)] += e.bytes;
        peak.total_bytes += e.bytes;
        if (e.bytes > 0) {
            live[e.address] = i;
        } else {
            live.erase(e.address);
        }
    }
    if (best_end > 0) peak.t_ns = events[best_end - 1].t_ns;
    peak.live.reserve(live.size());
    for (const auto& [address, i] : live) {
        const MemEvent& e = events[i];
        peak.live.push_back(LiveBlock{e.name_id, e.category, e.bytes, address, e.t_ns});
    }
    std::sort(peak.live.begin(), peak.live.end(), [](const LiveBlock& a, const LiveBlock& b) {
        if (a.bytes != b.bytes) return a.bytes > b.bytes;
        if (a.t_ns_allocated != b.t_ns_allocated) return a.t_ns_allocated < b.t_ns_allocated;
        return a.address < b.address;
    });
    return peak;
}

ojson memory_snapshot_json(const AccountingAllocator& allocator, std::int64_t run_offset_ns) {
    ojson j = snapshot_head(allocator, run_offset_ns);
    ojson timeline = ojson::array();
    for (const auto& e : allocator.events())
        timeline.push_back(timeline_row(e, run_offset_ns));
    j["timeline"] = std::move(timeline);
    return j;
}

WriteResult write_memory_snapshot(const AccountingAllocator& allocator,
                                  const std::filesystem::path& path, std::int64_t run_offset_ns) {
    try {
        DurableFile file(path);
        // The head is one dump; the timeline (one row per allocation or free, possibly
        // millions) streams row by row, so the document never sits whole in memory.
        std::string head = snapshot_head(allocator, run_offset_ns)
                               .dump(-1, ' ', false, ojson::error_handler_t::replace);
        head.pop_back();  // the closing '}'
        file.write(head);
        file.write(",\"timeline\":[");
        bool first = true;
        for (const auto& e : allocator.events()) {
            if (!first) file.write(",");
            file.write("\n");
            file.write(timeline_row(e, run_offset_ns).dump());
            first = false;
        }
        file.write("\n]}\n");
        if (!file.commit()) return WriteResult{false, file.error()};
        return WriteResult{};
    } catch (const std::exception& ex) {  // out of memory building the head
        return WriteResult{false, path.string() + ": " + ex.what()};
    }
}

std::vector<CounterEvent> memory_counter_events(const std::vector<MemEvent>& events,
                                                std::int64_t run_offset_ns) {
    std::vector<CounterEvent> out;
    std::array<std::int64_t, kMemCategoryCount> bytes{};
    std::int64_t total = 0;
    for (std::size_t i = 0; i < events.size(); ++i) {
        const MemEvent& e = events[i];
        bytes[index_of(e.category)] += e.bytes;
        total += e.bytes;
        if (i + 1 < events.size() && events[i + 1].t_ns == e.t_ns) continue;
        const std::int64_t t_ns = e.t_ns + run_offset_ns;
        CounterEvent by_category{kMemoryCounter, t_ns, {}};
        by_category.values.reserve(kMemCategoryCount);
        for (const auto& entry : kMemCategoryNames) {
            by_category.values.push_back(CounterValue{
                std::string(entry.name), static_cast<double>(bytes[index_of(entry.value)])});
        }
        out.push_back(std::move(by_category));
        out.push_back(CounterEvent{
            kMemoryTotalCounter, t_ns, {CounterValue{"bytes", static_cast<double>(total)}}});
    }
    return out;
}

}  // namespace napkin::profiler
