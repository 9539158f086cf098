// Rotary embedding: the CUDA kernels against the CPU's (kernels/cpu/rope.cpp) with GQA and MQA
// layouts, small and odd head counts, long positions (the angle in double) and a position
// offset; v heads must come out untouched.
#include "kernels/rope.h"

#include <gtest/gtest.h>

#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

struct RopeTestCase {
    std::int64_t B, T;
    int NH, KVH;
    std::int64_t HD, pos_offset;
};
constexpr RopeTestCase kRopeTestCases[] = {{1, 1, 1, 1, 2, 0},
                                           {2, 7, 4, 2, 6, 3},
                                           {1, 33, 8, 1, 64, 0},
                                           {2, 65, 6, 3, 128, 100000},
                                           {1, 5, 2, 2, 10, 7}};

template <class T>
class RopeCuda : public ::testing::Test {};
TYPED_TEST_SUITE(RopeCuda, StorageTypes);

TYPED_TEST(RopeCuda, ForwardAndBackwardMatchCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using E = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const RopeTestCase& c : kRopeTestCases) {
        SCOPED_TRACE(case_name<E>(c.B, c.T, c.NH, c.KVH, c.HD, c.pos_offset));
        const std::int64_t n = c.B * c.T * (c.NH + 2 * c.KVH) * c.HD;
        const auto qkv0 = random_storage<E>(rng, n);
        for (bool backward : {false, true}) {
            std::vector<E> qkv = qkv0;
            DeviceBuffer<E> qkv_d(qkv0);
            if (backward) {
                cpu::rope_backward<E>(
                    {qkv.data(), c.B, c.T, c.NH, c.KVH, c.HD, 10000.0f, c.pos_offset});
                cuda::rope_backward<E>(
                    {qkv_d.get(), c.B, c.T, c.NH, c.KVH, c.HD, 10000.0f, c.pos_offset}, {});
            } else {
                cpu::rope_forward<E>(
                    {qkv.data(), c.B, c.T, c.NH, c.KVH, c.HD, 10000.0f, c.pos_offset});
                cuda::rope_forward<E>(
                    {qkv_d.get(), c.B, c.T, c.NH, c.KVH, c.HD, 10000.0f, c.pos_offset}, {});
            }
            expect_match(backward ? "backward" : "forward", qkv_d.download(), qkv, tolerance<E>());
        }
    }
}

}  // namespace
}  // namespace napkin
