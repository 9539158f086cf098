// gpt_detail::AnomalyCheck: napkin train --detect-anomaly's slots in the GPT engine, on either
// backend (core/engine/anomaly.h has the design): one nonfinite_check_many per op over the
// tensors it wrote, each into its slot of a zeroed per-micro-batch buffer, read after each op on
// the CPU (and in a GPU's replay), once per micro-batch on a GPU. Which tensors each op checks:
// core/engine/gpt_anomaly.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/check.h"
#include "core/engine/anomaly.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "profiler/event.h"

namespace napkin {

namespace gpt_detail {

// A tensor an op wrote or read, as the check sees it.
template <class T>
struct Checked {
    std::string name;
    const T* data = nullptr;
    std::int64_t n = 0;
    std::vector<std::int64_t> shape;
};

template <class Kernels>
class AnomalyCheck {
    using T = typename Kernels::Elem;

public:
    bool on() const { return !slots_.empty(); }
    // The buffer plan's slots (core/buffer_plan.h): `capacity` checked tensors per micro-batch,
    // plus one to measure inputs in.
    void enable(Tensor slots, std::size_t capacity) {
        NAPKIN_ASSERT(slots.bytes() == (capacity + 1) * sizeof(NonfiniteSlot),
                      "anomaly slots: " << slots.bytes() << " bytes for " << capacity + 1);
        slots_ = std::move(slots);
        capacity_ = capacity;
        host_.resize(capacity + 1);
    }
    // Read each op's slots as it ends (the CPU; a GPU's replay) rather than once per micro-batch.
    bool synchronous() const { return Kernels::kHostTimedKernels || replay_; }
    void set_replay(bool on) { replay_ = on; }
    // Profiling: the anomaly is marked on the host track, inside the op's range.
    void set_recorder(profiler::Recorder* rec) { rec_ = rec; }

    // The batched check's launches since begin() (the micro-batch's).
    std::size_t launches() const { return launches_; }

    void begin(Kernels& k) {
        log_.clear();
        launches_ = 0;
        k.zero(slots_.raw(), slots_.bytes());
    }

    // After an op: checks its outputs; synchronously, stops at the first bad one, measuring the
    // op's inputs.
    void op(Kernels& k, const OpSite& site, std::initializer_list<Checked<T>> outputs,
            std::initializer_list<Checked<T>> inputs) {
        const std::size_t first = log_.size();
        // One launch for the op's tensors (kNonfiniteBatch at a time): a GPT-2 step has about
        // 400 checked tensors, whose launches alone cost more than the checks' reading.
        NonfiniteCheckManyArgs<T> batch;
        for (const Checked<T>& c : outputs) {
            if (c.data == nullptr) continue;
            NAPKIN_ASSERT(log_.size() < capacity_, "anomaly slots: more checks than planned");
            batch.checks[batch.count++] = {.slot = slot(log_.size()), .x = c.data, .n = c.n};
            log_.add(CheckedEntry{site, c.name, c.shape, std::nullopt});
            if (batch.count == kNonfiniteBatch) launch(k, batch);
        }
        if (batch.count > 0) launch(k, batch);
        if (!synchronous() || log_.size() == first) return;
        read(k, first, log_.size());
        const std::size_t bad = log_.first_bad(host_.data(), first);
        if (bad < log_.size()) stop(measured(k, log_.anomaly(bad, host_[bad]), inputs));
    }
    // A value the host already holds (the mean loss), checked in order with the slots.
    void host_value(Kernels& k, const OpSite& site, std::string name, float v,
                    std::initializer_list<Checked<T>> inputs) {
        NonfiniteSlot r;
        if (std::isnan(v))
            r.nan = 1;
        else if (std::isinf(v))
            r.inf = 1;
        else
            r.max_finite = std::fabs(v);
        log_.add(CheckedEntry{site, std::move(name), {}, r});
        if (synchronous() && r.bad()) stop(measured(k, log_.anomaly(log_.size() - 1, r), inputs));
    }
    // The micro-batch's slots in one read: the first bad entry, or nothing.
    std::optional<Anomaly> first_found(Kernels& k) {
        read(k, 0, log_.size());
        const std::size_t bad = log_.first_bad(host_.data());
        if (bad == log_.size()) return std::nullopt;
        return log_.anomaly(bad, log_.entry(bad).host ? *log_.entry(bad).host : host_[bad]);
    }

private:
    [[noreturn]] void stop(Anomaly a) {
        if (rec_ != nullptr) {
            using profiler::Arg;
            rec_->record(profiler::InstantEvent{
                "anomaly: " + a.tensor + " (" + a.direction + " of " + a.op + ")",
                profiler::Category::marker,
                profiler::kHostTrack,
                rec_->now_ns(),
                {Arg{"op", a.op}, Arg{"block", std::int64_t{a.layer.value_or(-1)}},
                 Arg{"direction", a.direction}, Arg{"tensor", a.tensor},
                 Arg{"shape", shape_text(a.shape)}, Arg{"nan", static_cast<std::int64_t>(a.nan)},
                 Arg{"inf", static_cast<std::int64_t>(a.inf)}}});
        }
        throw AnomalyFound(std::move(a));
    }
    void launch(Kernels& k, NonfiniteCheckManyArgs<T>& batch) {
        k.nonfinite_check_many(batch);
        batch.count = 0;
        ++launches_;
    }
    NonfiniteSlot* slot(std::size_t i) { return slots_.template data<NonfiniteSlot>() + i; }
    void read(Kernels& k, std::size_t from, std::size_t to) {
        if (to > from)
            k.copy_to_host(host_.data() + from, slot(from), (to - from) * sizeof(NonfiniteSlot));
    }
    // The largest finite magnitude over the inputs, and the first one already non-finite.
    Anomaly measured(Kernels& k, Anomaly a, std::initializer_list<Checked<T>> inputs) {
        a.input_max_finite = 0.0;
        NonfiniteSlot* scratch = slot(capacity_);
        for (const Checked<T>& c : inputs) {
            if (c.data == nullptr) continue;
            NonfiniteSlot r;
            k.copy_from_host(scratch, &r, sizeof r);  // zeroed
            k.nonfinite_check({.slot = scratch, .x = c.data, .n = c.n});
            k.copy_to_host(&r, scratch, sizeof r);
            a.input_max_finite = std::max(*a.input_max_finite, static_cast<double>(r.max_finite));
            if (r.bad() && !a.bad_input)
                a.bad_input = Anomaly::BadInput{c.name, c.shape, r.nan, r.inf};
        }
        // None readable (an op in place, fp8 codes): not measured.
        if (std::all_of(inputs.begin(), inputs.end(),
                        [](const auto& c) { return c.data == nullptr; }))
            a.input_max_finite.reset();
        return a;
    }

    Tensor slots_;
    std::size_t capacity_ = 0;
    std::size_t launches_ = 0;
    std::vector<NonfiniteSlot> host_;
    AnomalyLog log_;
    bool replay_ = false;
    profiler::Recorder* rec_ = nullptr;
};

}  // namespace gpt_detail

}  // namespace napkin
