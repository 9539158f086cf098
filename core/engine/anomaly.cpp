#include "core/engine/anomaly.h"

#include <cstdio>

#include "core/safetensors.h"

namespace napkin {

std::string anomaly_message(const Anomaly& a) {
    char magnitude[32] = "not measured";
    if (a.input_max_finite) std::snprintf(magnitude, sizeof magnitude, "%.3g", *a.input_max_finite);
    // Steps counted from 1, as napkin train's progress lines ("step 7/200"); report.json's from 0.
    std::string s = "step " + std::to_string(a.step + 1) + ", " + a.direction + " of " + a.op;
    if (a.layer) s += " (block " + std::to_string(*a.layer) + ")";
    s += ": " + a.tensor + " " + shape_text(a.shape) + " has " + std::to_string(a.nan) + " NaN, " +
         std::to_string(a.inf) + " inf; largest finite input magnitude " + magnitude;
    if (a.bad_input) {
        s += "; input " + a.bad_input->tensor + " " + shape_text(a.bad_input->shape) + " has " +
             std::to_string(a.bad_input->nan) + " NaN, " + std::to_string(a.bad_input->inf) +
             " inf";
    }
    return s;
}

std::size_t AnomalyLog::first_bad(const NonfiniteSlot* slots, std::size_t from) const {
    for (std::size_t i = from; i < entries_.size(); ++i) {
        const NonfiniteSlot& r = entries_[i].host ? *entries_[i].host : slots[i];
        if (r.bad()) return i;
    }
    return entries_.size();
}

Anomaly AnomalyLog::anomaly(std::size_t i, const NonfiniteSlot& result) const {
    const CheckedEntry& e = entries_[i];
    Anomaly a;
    a.op = std::string(e.site.op);
    if (e.site.layer >= 0) a.layer = e.site.layer;
    a.direction = e.site.backward ? "backward" : "forward";
    a.tensor = e.tensor;
    a.shape = e.shape;
    a.nan = result.nan;
    a.inf = result.inf;
    return a;
}

}  // namespace napkin
