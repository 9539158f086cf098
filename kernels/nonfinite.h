// nonfinite_check: the reduction behind napkin train --detect-anomaly (core/engine/anomaly.h).
// Over a tensor x (n) in a storage type T it counts the NaN and the infinite elements and takes
// the largest finite magnitude, and ACCUMULATES them into a slot (counts added, magnitude the
// larger), so that one step's checks write one zeroed buffer of slots and, on a GPU, the host
// reads it once per micro-batch instead of synchronizing after every op. Counts and a maximum
// are the same in any order: deterministic on every backend.
// Cost: one read of x, 2 comparisons per element (counted as FLOPs), one slot written.
// CPU: kernels/cpu/nonfinite.cpp (the spec), tested in tests/kernels/nonfinite_test.cpp. CUDA:
// kernels/cuda/nonfinite.cu, tested against the CPU in tests/kernels_cuda/nonfinite_test.cpp.
#pragma once

#include "kernels/cost.h"
#include "kernels/launch.h"

namespace napkin {

// One checked tensor's result: 24 bytes, the layout the CUDA kernel's atomics write.
struct NonfiniteSlot {
    unsigned long long nan = 0;  // elements that are NaN
    unsigned long long inf = 0;  // elements that are +-inf
    float max_finite = 0.0f;     // max |x| over the finite elements (0 when none)
    unsigned pad = 0;
    bool bad() const { return nan != 0 || inf != 0; }
};
static_assert(sizeof(NonfiniteSlot) == 24, "the device writes this layout");

inline KernelCost nonfinite_check_cost(std::int64_t n, DType dt) {
    return {2ull * static_cast<std::uint64_t>(n), nbytes(dt, n), sizeof(NonfiniteSlot), 0};
}

// slot += (NaN count, inf count, max finite |x|) of x (n); the slot starts zeroed.
template <class T>
struct NonfiniteCheckArgs {
    NonfiniteSlot* slot = nullptr;  // (1)
    const T* x = nullptr;           // (n)
    std::int64_t n = 0;
};

// Up to kNonfiniteBatch checks in one launch: each of checks[0, count) as nonfinite_check
// would do it (its own slot), so an op's outputs (or gradients) cost one launch, not one per
// tensor. The checks travel in the launch's arguments (kNonfiniteBatch x 24 bytes): no device
// array to fill and no copy before the launch.
inline constexpr int kNonfiniteBatch = 8;
template <class T>
struct NonfiniteCheckManyArgs {
    NonfiniteCheckArgs<T> checks[kNonfiniteBatch] = {};
    int count = 0;  // 0..kNonfiniteBatch
};

namespace cpu {

template <class T>
void nonfinite_check(const NonfiniteCheckArgs<T>& args);
template <class T>
void nonfinite_check_many(const NonfiniteCheckManyArgs<T>& args);

}  // namespace cpu

namespace cuda {

// Device pointers (the slot too), queued on launch.stream; no synchronization.
template <class T>
void nonfinite_check(const NonfiniteCheckArgs<T>& args, const Launch& launch);
template <class T>
void nonfinite_check_many(const NonfiniteCheckManyArgs<T>& args, const Launch& launch);

}  // namespace cuda

}  // namespace napkin
