// napkin train --detect-anomaly: after every op of a micro-batch, forward and backward, the
// op's outputs (activations, input gradients, parameter gradients) are counted for NaN and inf
// by one batched reduction per op (kernels/nonfinite.h nonfinite_check_many), each tensor into
// its slot of a per-micro-batch buffer. The first slot with a bad count names the op (its role and
// block), the direction, the tensor and its shape; the op's inputs are then measured (largest
// finite magnitude, and the first input already non-finite, such as a NaN weight) to say where the
// value came from.
//
// On the CPU each op's slots are read as soon as it ends (host memory: no cost beyond the
// pass) and the run stops at the first bad one. On a GPU the slots stay on the device: the host
// reads the buffer once, when the micro-batch ends, and only when something was found replays
// the micro-batch (weights and batch are unchanged: the optimizer has not run) reading each op's
// slots at once, to name the first op and measure its inputs while they still exist.
// The GptImpl side (which tensors each op role checks) is core/engine/gpt_anomaly.h; the record
// is report.json's "anomaly" (profiler/run_report.h); docs/ANOMALY.md. Tests:
// tests/engine/anomaly_test.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/nonfinite.h"
#include "profiler/run_report.h"

namespace napkin {

using Anomaly = profiler::AnomalyReport;

// "step 7, backward of attn.proj (block 3): d attn.out (4, 64, 768) has 12 NaN, 0 inf; largest
// finite input magnitude 3.4e+38", then "; input attn.proj.weight (768, 768) has 1 NaN, 0 inf"
// when an input was already bad. Shapes as core/safetensors.h's shape_text writes them.
std::string anomaly_message(const Anomaly& a);

// Thrown by the engine at the first non-finite value; the trainer fills in the step.
class AnomalyFound : public std::runtime_error {
public:
    explicit AnomalyFound(Anomaly a)
        : std::runtime_error(anomaly_message(a)), anomaly_(std::move(a)) {}
    const Anomaly& anomaly() const { return anomaly_; }
    Anomaly& anomaly() { return anomaly_; }

private:
    Anomaly anomaly_;
};

// Where an op ran: its plan name, its block (-1 outside the blocks) and direction.
struct OpSite {
    std::string_view op;
    int layer = -1;
    bool backward = false;
};

// What one slot checked, in the order the micro-batch checked it.
struct CheckedEntry {
    OpSite site;
    std::string tensor;
    std::vector<std::int64_t> shape;
    std::optional<NonfiniteSlot> host;  // a value checked on the host (the loss), not in a slot
};

// The slots' bookkeeping, without the device: entries in order, the first bad one found.
class AnomalyLog {
public:
    void clear() { entries_.clear(); }
    std::size_t size() const { return entries_.size(); }
    std::size_t add(CheckedEntry e) {
        entries_.push_back(std::move(e));
        return entries_.size() - 1;
    }
    const CheckedEntry& entry(std::size_t i) const { return entries_[i]; }
    // The first entry from `from` whose result (slots[i], or its host value) is bad; size()
    // when none.
    std::size_t first_bad(const NonfiniteSlot* slots, std::size_t from = 0) const;
    // The anomaly of entry i with its result; the inputs not measured.
    Anomaly anomaly(std::size_t i, const NonfiniteSlot& result) const;

private:
    std::vector<CheckedEntry> entries_;
};

}  // namespace napkin
