// The engine's allocations against the buffer plan (core/buffer_plan.h), shared by the CPU
// engine's test (tests/engine/gpt_buffers_test.cpp) and the CUDA engine's
// (tests/engine_cuda/gpt_buffers_cuda_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/buffer_plan.h"
#include "core/engine/gpt.h"
#include "core/model_config.h"
#include "tests/engine/test_util.h"

namespace napkin::test {

using NamedBytes = std::vector<std::pair<std::string, std::int64_t>>;

// A recipe whose buffers a test holds against the plan.
struct BufferCase {
    const char* name;
    Precision precision;
    AttentionImpl attention;
    bool llama;  // rmsnorm, rotary, SwiGLU, GQA, untied head; else GPT-2's
    Finetune finetune = Finetune::full;
    Checkpointing checkpointing = Checkpointing::none;
};

inline void PrintTo(const BufferCase& c, std::ostream* os) {
    *os << c.name;
}

// The case's model (small_config with GPT-2's or Llama's switches).
inline ModelConfig buffer_case_model(const BufferCase& c) {
    return c.llama
               ? small_config(NormKind::rmsnorm, PositionKind::rope, MlpKind::swiglu, 2, false)
               : small_config(NormKind::layernorm, PositionKind::learned, MlpKind::gelu, 4, true);
}

// The case's recipe over B x T rows, in loss chunks of 10 rows, LoRA rank 4.
inline PlanInputs buffer_case_inputs(const BufferCase& c, std::int64_t B, std::int64_t T) {
    PlanInputs in;
    in.micro_batch = B;
    in.seq_len = T;
    in.precision = c.precision;
    in.attention = c.attention;
    in.checkpointing = c.checkpointing;
    in.loss_chunk_rows = 10;
    in.finetune = c.finetune;
    if (c.finetune != Finetune::full) in.lora_rank = 4;
    return in;
}

// The allocations in `category` the allocator has recorded, (name, bytes) in order.
inline NamedBytes allocations(const AccountingAllocator& alloc, MemCategory category) {
    NamedBytes out;
    for (const MemEvent& e : alloc.events()) {
        if (e.bytes > 0 && e.category == category)
            out.emplace_back(alloc.names()[e.name_id], e.bytes);
    }
    return out;
}

inline NamedBytes planned(const BufferPlan& plan) {
    NamedBytes out;
    for (const PlanBuffer& b : plan.buffers)
        out.emplace_back(std::string(b.name), static_cast<std::int64_t>(b.bytes()));
    return out;
}

// The model built over `alloc` allocates the plan's temporaries for `backend` and no other, in
// the plan's order, by name and bytes; and a micro-batch's forward and backward (`step`) add
// none: the temporaries' peak stays the plan's sum.
template <class Step>
void expect_buffers_as_planned(AccountingAllocator& alloc, const Gpt& gpt, DeviceKind backend,
                               Step&& step) {
    const BufferPlan plan = build_buffer_plan(gpt.plan(), backend);
    EXPECT_EQ(allocations(alloc, MemCategory::temporaries), planned(plan));
    step();
    EXPECT_EQ(alloc.peak_bytes(MemCategory::temporaries),
              static_cast<std::int64_t>(plan.bytes(MemCategory::temporaries)));
}

}  // namespace napkin::test
