// A named, typed tensor over storage from the accounting allocator. Move-only; frees its block
// when it dies, so the allocator's current bytes always match the tensors alive. Row-major,
// contiguous; the shape is at most 4-D (B, NH, T, T is the largest the engine needs).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "core/allocator.h"
#include "core/check.h"
#include "core/dtype.h"

namespace napkin {

class Tensor {
public:
    Tensor() = default;
    Tensor(AccountingAllocator& alloc, std::string name, MemCategory category, DType dtype,
           std::initializer_list<std::int64_t> shape)
        : alloc_(&alloc), name_(std::move(name)), dtype_(dtype) {
        NAPKIN_ASSERT(shape.size() <= shape_.size(), "tensor " << name_ << ": more than 4 dimensions");
        numel_ = 1;
        for (std::int64_t d : shape) {
            NAPKIN_ASSERT(d >= 0, "tensor " << name_ << ": negative dimension " << d);
            shape_[static_cast<std::size_t>(rank_++)] = d;
            numel_ *= d;
        }
        block_ = alloc.allocate(name_, category, storage_bytes(dtype, static_cast<std::uint64_t>(numel_)));
    }
    // A view of `numel` elements at `ptr`, inside storage another tensor owns (the ZeRO engine's
    // flat unit buffers): it frees nothing and the allocator does not count it again.
    static Tensor view(std::string name, DType dtype, void* ptr, std::int64_t numel) {
        Tensor t;
        t.name_ = std::move(name);
        t.dtype_ = dtype;
        t.shape_[0] = numel;
        t.rank_ = 1;
        t.numel_ = numel;
        t.block_.ptr = ptr;
        t.block_.bytes = storage_bytes(dtype, static_cast<std::uint64_t>(numel));
        return t;
    }
    ~Tensor() { release(); }
    Tensor(Tensor&& o) noexcept { *this = std::move(o); }
    Tensor& operator=(Tensor&& o) noexcept {
        if (this != &o) {
            release();
            alloc_ = std::exchange(o.alloc_, nullptr);
            name_ = std::move(o.name_);
            dtype_ = o.dtype_;
            shape_ = o.shape_;
            rank_ = o.rank_;
            numel_ = std::exchange(o.numel_, 0);
            block_ = std::exchange(o.block_, MemBlock{});
        }
        return *this;
    }
    Tensor(const Tensor&) = delete;
    Tensor& operator=(const Tensor&) = delete;

    template <class T>
    T* data() {
        return static_cast<T*>(block_.ptr);
    }
    template <class T>
    const T* data() const {
        return static_cast<const T*>(block_.ptr);
    }
    void* raw() { return block_.ptr; }
    const void* raw() const { return block_.ptr; }

    bool empty() const { return block_.ptr == nullptr; }
    const std::string& name() const { return name_; }
    DType dtype() const { return dtype_; }
    MemCategory category() const { return block_.category; }
    int rank() const { return rank_; }
    std::int64_t dim(int i) const { return shape_[static_cast<std::size_t>(i)]; }
    std::int64_t numel() const { return numel_; }
    std::size_t bytes() const { return block_.bytes; }

    // Frees the storage now (a tensor that is no longer needed mid-step).
    void release() {
        if (alloc_ != nullptr) alloc_->free(block_);
        else block_ = MemBlock{};  // a view (or nothing): forget the pointer
        numel_ = 0;
    }

private:
    AccountingAllocator* alloc_ = nullptr;
    std::string name_;
    DType dtype_ = DType::f32;
    std::array<std::int64_t, 4> shape_{};
    int rank_ = 0;
    std::int64_t numel_ = 0;
    MemBlock block_;
};

}  // namespace napkin
