#include "profiler/step_profile.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

namespace napkin::profiler {

namespace {

// The op a device record names (arg "op"), or null.
const std::string* named_op(const RangeEvent& r) {
    for (const Arg& a : r.args) {
        if (a.key == "op") return std::get_if<std::string>(&a.value);
    }
    return nullptr;
}

}  // namespace

double Roofline::seconds(double flops, double bytes) const {
    const double compute = flops_per_s > 0 ? flops / flops_per_s : 0.0;
    const double memory = bytes_per_s > 0 ? bytes / bytes_per_s : 0.0;
    return std::max(compute, memory);
}

std::string StepProfile::op_key(const std::string& name) {
    // "h.<digits>." prefix.
    if (name.size() < 4 || name[0] != 'h' || name[1] != '.') return name;
    std::size_t i = 2;
    while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])))
        ++i;
    if (i == 2 || i >= name.size() || name[i] != '.') return name;
    return name.substr(i + 1);
}

void StepProfile::add(const std::vector<Event>& events) {
    // This batch's steps first: ranges are recorded when they end, so a step follows its ops.
    const std::size_t first_step = steps_.size();
    for (const Event& e : events) {
        const auto* r = std::get_if<RangeEvent>(&e);
        if (r == nullptr || r->category != Category::step) continue;
        steps_.push_back(StepTiming{r->name, r->start_ns, r->dur_ns, 0, 0, 0.0});
    }
    auto step_of = [&](const RangeEvent& r) -> StepTiming* {
        for (std::size_t i = first_step; i < steps_.size(); ++i) {
            StepTiming& s = steps_[i];
            if (r.start_ns >= s.start_ns && r.start_ns + r.dur_ns <= s.start_ns + s.dur_ns)
                return &s;
        }
        return nullptr;
    };
    std::vector<OpSpan> op_spans;  // for the launches below
    std::vector<const RangeEvent*> device_records;
    for (const Event& e : events) {
        const auto* r = std::get_if<RangeEvent>(&e);
        if (r == nullptr) continue;
        const bool is_op = r->track == kHostTrack &&
                           (r->category == Category::op || r->category == Category::optimizer);
        const bool is_kernel = r->category == Category::kernel;
        if (!is_op && !is_kernel) continue;
        const std::string key = is_op ? op_key(r->name) : r->name;
        WorkStats& w = (is_op ? ops_ : kernels_)[key];
        if (is_op) op_spans.push_back(OpSpan{r->start_ns, r->start_ns + r->dur_ns, &w});
        if (is_kernel && r->track != kHostTrack) device_records.push_back(r);
        if (w.calls == 0) {
            w.name = key;
            w.category = r->category;
        }
        const double roof =
            roofline_.seconds(static_cast<double>(r->flops), static_cast<double>(r->bytes));
        ++w.calls;
        w.total_ns += r->dur_ns;
        w.flops += r->flops;
        w.bytes += r->bytes;
        w.roofline_seconds += roof;
        if (StepTiming* s = step_of(*r)) {
            if (is_op) {
                s->op_ns += r->dur_ns;
                s->roofline_seconds += roof;
            } else {
                s->kernel_ns += r->dur_ns;
            }
        }
    }
    attribute_to_ops(events, op_spans, device_records);
}

void StepProfile::attribute_to_ops(const std::vector<Event>& events, std::vector<OpSpan>& op_spans,
                                   const std::vector<const RangeEvent*>& device_records) {
    // Flows: id -> launch time, and per track the (time, id) of each flow's end.
    std::map<std::uint64_t, std::int64_t> launched_at;
    std::map<TrackId, std::vector<std::pair<std::int64_t, std::uint64_t>>> ends;
    for (const Event& e : events) {
        const auto* f = std::get_if<FlowEvent>(&e);
        if (f == nullptr) continue;
        if (f->phase == FlowPhase::start)
            launched_at[f->id] = f->t_ns;
        else
            ends[f->track].emplace_back(f->t_ns, f->id);
    }
    for (auto& [track, list] : ends)
        std::sort(list.begin(), list.end());
    std::sort(op_spans.begin(), op_spans.end(),
              [](const OpSpan& a, const OpSpan& b) { return a.start < b.start; });
    for (const RangeEvent* r : device_records) {
        if (const std::string* op = named_op(*r)) {
            WorkStats& w = ops_[op_key(*op)];
            if (w.calls == 0 && w.device_records == 0) {
                w.name = op_key(*op);
                w.category = *op == "optimizer" ? Category::optimizer : Category::op;
            }
            ++w.device_records;
            w.device_ns += r->dur_ns;
            continue;
        }
        const auto on_track = ends.find(r->track);
        if (on_track == ends.end()) continue;
        const auto& list = on_track->second;
        const auto end = std::lower_bound(list.begin(), list.end(),
                                          std::make_pair(r->start_ns, std::uint64_t{0}));
        if (end == list.end() || end->first > r->start_ns + r->dur_ns) continue;  // no launch flow
        const auto launch = launched_at.find(end->second);
        if (launch == launched_at.end()) continue;
        // The last op range starting at or before the launch, if it is still open then.
        auto op = std::upper_bound(op_spans.begin(), op_spans.end(), launch->second,
                                   [](std::int64_t t, const OpSpan& s) { return t < s.start; });
        if (op == op_spans.begin()) continue;
        --op;
        if (launch->second > op->end) continue;
        ++op->row->device_records;
        op->row->device_ns += r->dur_ns;
    }
}

std::vector<WorkStats> StepProfile::sorted(const std::map<std::string, WorkStats>& rows) {
    std::vector<WorkStats> out;
    out.reserve(rows.size());
    for (const auto& [key, w] : rows)
        out.push_back(w);
    std::stable_sort(out.begin(), out.end(), [](const WorkStats& a, const WorkStats& b) {
        return a.total_ns > b.total_ns;
    });
    return out;
}

ProfileReport StepProfile::report() const {
    const double n_steps = steps_.empty() ? 1.0 : static_cast<double>(steps_.size());
    ProfileReport out;
    out.steps_profiled = steps_.size();
    out.roofline = {roofline_.flops_per_s, roofline_.bytes_per_s};
    double step_seconds = 0;
    for (const StepTiming& s : steps_) {
        step_seconds += static_cast<double>(s.dur_ns) * 1e-9;
        out.steps.push_back({s.name, static_cast<double>(s.dur_ns) * 1e-9,
                             static_cast<double>(s.op_ns) * 1e-9, s.coverage(),
                             static_cast<double>(s.kernel_ns) * 1e-9, s.roofline_seconds});
    }
    auto rows_of = [&](const std::vector<WorkStats>& list) {
        std::vector<ProfileRow> rows;
        for (const WorkStats& w : list) {
            const double seconds = static_cast<double>(w.total_ns) * 1e-9;
            ProfileRow r{w.name,
                         std::string(enum_name(kCategoryNames, w.category)),
                         static_cast<double>(w.calls) / n_steps,
                         seconds / n_steps,
                         w.roofline_seconds / n_steps,
                         static_cast<double>(w.flops) / n_steps,
                         static_cast<double>(w.bytes) / n_steps,
                         seconds > 0 ? static_cast<double>(w.flops) / seconds : 0.0,
                         seconds > 0 ? static_cast<double>(w.bytes) / seconds : 0.0,
                         step_seconds > 0 ? seconds / step_seconds : 0.0,
                         {},
                         {},
                         {}};
            if (w.category != Category::kernel) {  // ops: the device records they launched
                const double device = static_cast<double>(w.device_ns) * 1e-9;
                r.device_records_per_step = static_cast<double>(w.device_records) / n_steps;
                r.device_seconds_per_step = device / n_steps;
                r.device_flops_per_s = device > 0 ? static_cast<double>(w.flops) / device : 0.0;
            }
            rows.push_back(std::move(r));
        }
        return rows;
    };
    out.ops = rows_of(ops());
    out.kernels = rows_of(kernels());
    return out;
}

nlohmann::json StepProfile::to_json() const {
    return report();
}

}  // namespace napkin::profiler
