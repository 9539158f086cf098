// The kernels a recorded forward and backward launched, counted by the op range that holds each:
// "<op without h.<l>. and " (recompute)"> <kernel>", e.g. "ln_2 residual_layernorm_forward" or
// "mlp.proj backward matmul_gelu_backward" (tests/engine/gpt_test.cpp, gpt_fusion_test.cpp).
#pragma once

#include <map>
#include <string>
#include <variant>
#include <vector>

#include "profiler/event.h"

namespace napkin::test {

inline std::map<std::string, int> kernels_by_op(profiler::Recorder& rec) {
    std::vector<profiler::RangeEvent> ops, kernels;
    for (auto& e : rec.take()) {
        if (auto* r = std::get_if<profiler::RangeEvent>(&e)) {
            if (r->category == profiler::Category::op) ops.push_back(*r);
            if (r->category == profiler::Category::kernel) kernels.push_back(*r);
        }
    }
    std::map<std::string, int> count;
    for (const auto& k : kernels) {
        for (const auto& o : ops) {
            if (k.start_ns < o.start_ns || k.start_ns + k.dur_ns > o.start_ns + o.dur_ns) continue;
            std::string op = o.name.substr(o.name.find('.', 2) + 1);
            if (const auto at = op.find(" (recompute)"); at != std::string::npos) op.resize(at);
            ++count[op + " " + k.name];
        }
    }
    return count;
}

}  // namespace napkin::test
