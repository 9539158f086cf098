// Token and position embedding: the CUDA kernels against the CPU's (kernels/cpu/embedding.cpp)
// with repeated tokens (a small vocabulary) and odd shapes; forward into a poisoned output,
// backward scatter-adding into pre-filled tables, with and without learned positions.
#include "kernels/embedding.h"

#include <gtest/gtest.h>

#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

struct EmbeddingTestCase {
    std::int64_t B, T, C, Vp;
};
constexpr EmbeddingTestCase kEmbeddingTestCases[] = {
    {1, 1, 1, 1}, {2, 5, 7, 3}, {3, 17, 33, 11}, {4, 64, 768, 50}, {2, 300, 1100, 1000}};

template <class T>
class EmbeddingCuda : public ::testing::Test {};
TYPED_TEST_SUITE(EmbeddingCuda, StorageTypes);

TYPED_TEST(EmbeddingCuda, ForwardAndBackwardMatchCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using E = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const EmbeddingTestCase& c : kEmbeddingTestCases) {
        for (bool positions : {true, false}) {
            SCOPED_TRACE(case_name<E>(c.B, c.T, c.C, c.Vp) + (positions ? " wpe" : ""));
            const std::int64_t BT = c.B * c.T;
            std::uniform_int_distribution<std::int32_t> tok(0, static_cast<std::int32_t>(c.Vp - 1));
            std::vector<std::int32_t> tokens(static_cast<std::size_t>(BT));
            for (auto& t : tokens)
                t = tok(rng);
            const auto wte = random_storage<E>(rng, c.Vp * c.C),
                       wpe = random_storage<E>(rng, c.T * c.C);
            const auto dout = random_storage<E>(rng, BT * c.C);
            const auto dwte0 = random_storage<E>(rng, c.Vp * c.C),
                       dwpe0 = random_storage<E>(rng, c.T * c.C);
            std::vector<E> out(static_cast<std::size_t>(BT * c.C)), dwte = dwte0, dwpe = dwpe0;
            cpu::embedding_forward<E>({out.data(), tokens.data(), wte.data(),
                                       positions ? wpe.data() : nullptr, c.B, c.T, c.C});
            cpu::embedding_backward<E>({dwte.data(), positions ? dwpe.data() : nullptr, dout.data(),
                                        tokens.data(), c.B, c.T, c.C});

            DeviceBuffer<std::int32_t> tokens_d(tokens);
            DeviceBuffer<E> wte_d(wte), wpe_d(wpe), out_d(out.size()), dout_d(dout), dwte_d(dwte0),
                dwpe_d(dwpe0);
            out_d.poison();
            cuda::embedding_forward<E>({out_d.get(), tokens_d.get(), wte_d.get(),
                                        positions ? wpe_d.get() : nullptr, c.B, c.T, c.C},
                                       {});
            cuda::embedding_backward<E>({dwte_d.get(), positions ? dwpe_d.get() : nullptr,
                                         dout_d.get(), tokens_d.get(), c.B, c.T, c.C},
                                        {});
            expect_match("out", out_d.download(), out, tolerance<E>());
            expect_match("dwte", dwte_d.download(), dwte, for_sum_of(tolerance<E>(), BT));
            expect_match("dwpe", dwpe_d.download(), dwpe, for_sum_of(tolerance<E>(), c.B));
        }
    }
}

}  // namespace
}  // namespace napkin
