// The engine's side of the buffer plan (core/buffer_plan.h): every buffer of the plan allocated
// in the plan's order, as the plan names, types and sizes it; then each taken by the member that
// uses it (GptImpl::allocate_buffers, gpt_lora.h, gpt_fp8.h, a backend's losses). A buffer the
// plan does not list (LoRA's without adapters, the loss rows on the CPU) is taken empty.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <utility>

#include "core/allocator.h"
#include "core/buffer_plan.h"
#include "core/check.h"
#include "core/tensor.h"

namespace napkin::gpt_detail {

class GptBuffers {
public:
    GptBuffers(AccountingAllocator& alloc, const BufferPlan& plan) {
        for (const PlanBuffer& b : plan.buffers) {
            Tensor& t = tensors_[index(b.role)];
            NAPKIN_ASSERT(t.empty(), "buffer plan: " << b.name << " listed twice");
            t = Tensor(alloc, std::string(b.name), b.category, b.dtype, {b.numel});
        }
    }

    Tensor take(BufferRole role) { return std::move(tensors_[index(role)]); }

private:
    static std::size_t index(BufferRole role) { return static_cast<std::size_t>(role); }

    std::array<Tensor, kBufferRoleCount> tensors_;
};

}  // namespace napkin::gpt_detail
