// Causal attention, naive and flash, forward and backward: the CUDA kernels against the CPU's
// (kernels/cpu/attention.cpp) with MHA, GQA and MQA layouts, odd sequence lengths (partial
// tiles), odd head dimensions and the largest one (256). Forward outputs (out, P, lse) are
// poisoned first; backward accumulates into a pre-filled dqkv.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

struct Case {
    std::int64_t B, T;
    int NH, KVH;
    std::int64_t HD;
};
constexpr Case kCases[] = {{1, 1, 1, 1, 1},   {2, 7, 4, 2, 8},     {1, 33, 2, 1, 64},
                           {2, 65, 6, 3, 24}, {1, 100, 4, 4, 128}, {1, 40, 2, 2, 256},
                           {1, 17, 2, 1, 5},  {1, 129, 3, 1, 32}};

struct Tensors {
    std::int64_t qkv_n, out_n, heads_T;
};

Tensors sizes(const Case& c) {
    return {c.B * c.T * (c.NH + 2 * c.KVH) * c.HD, c.B * c.T * c.NH * c.HD, c.B * c.NH * c.T};
}

template <class T>
class AttentionCuda : public ::testing::Test {};
TYPED_TEST_SUITE(AttentionCuda, StorageTypes);

TYPED_TEST(AttentionCuda, NaiveMatchesCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using E = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const Case& c : kCases) {
        SCOPED_TRACE(case_name<E>(c.B, c.T, c.NH, c.KVH, c.HD));
        const Tensors n = sizes(c);
        const auto qkv = random_storage<E>(rng, n.qkv_n), dout = random_storage<E>(rng, n.out_n);
        const auto dqkv0 = random_storage<E>(rng, n.qkv_n, 0.1);
        std::vector<E> out(static_cast<std::size_t>(n.out_n)),
            p(static_cast<std::size_t>(n.heads_T * c.T));
        std::vector<E> dqkv = dqkv0;
        std::vector<float> scratch(
            static_cast<std::size_t>(cpu::attention_naive_backward_scratch_floats(c.B, c.T, c.NH)));
        cpu::attention_naive_forward(out.data(), p.data(), qkv.data(), c.B, c.T, c.NH, c.KVH, c.HD);
        cpu::attention_naive_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(),
                                      p.data(), c.B, c.T, c.NH, c.KVH, c.HD);

        DeviceBuffer<E> qkv_d(qkv), dout_d(dout), out_d(out.size()), p_d(p.size()), dqkv_d(dqkv0);
        DeviceBuffer<float> scratch_d(scratch.size());
        out_d.poison();
        p_d.poison();
        scratch_d.poison();
        cuda::attention_naive_forward(out_d.get(), p_d.get(), qkv_d.get(), c.B, c.T, c.NH, c.KVH,
                                      c.HD, nullptr);
        expect_match("out", out_d.download(), out, for_sum_of(tolerance<E>(), c.T + c.HD));
        expect_match("P", p_d.download(), p, for_sum_of(tolerance<E>(), c.HD));
        // Backward from the CPU's P, so that only the backward is compared.
        p_d.upload(p);
        cuda::attention_naive_backward(dqkv_d.get(), scratch_d.get(), dout_d.get(), qkv_d.get(),
                                       p_d.get(), c.B, c.T, c.NH, c.KVH, c.HD, nullptr);
        expect_match("dqkv", dqkv_d.download(), dqkv,
                     for_sum_of(tolerance<E>(), (c.NH / c.KVH) * c.T * c.HD));
    }
}

TYPED_TEST(AttentionCuda, FlashMatchesCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using E = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const Case& c : kCases) {
        SCOPED_TRACE(case_name<E>(c.B, c.T, c.NH, c.KVH, c.HD));
        const Tensors n = sizes(c);
        const auto qkv = random_storage<E>(rng, n.qkv_n), dout = random_storage<E>(rng, n.out_n);
        const auto dqkv0 = random_storage<E>(rng, n.qkv_n, 0.1);
        std::vector<E> out(static_cast<std::size_t>(n.out_n)), dqkv = dqkv0;
        std::vector<float> lse(static_cast<std::size_t>(n.heads_T));
        cpu::attention_flash_forward(out.data(), lse.data(), qkv.data(), c.B, c.T, c.NH, c.KVH,
                                     c.HD);
        cpu::attention_flash_backward(dqkv.data(), dout.data(), out.data(), qkv.data(), lse.data(),
                                      c.B, c.T, c.NH, c.KVH, c.HD);

        DeviceBuffer<E> qkv_d(qkv), dout_d(dout), out_d(out.size()), dqkv_d(dqkv0);
        DeviceBuffer<float> lse_d(lse.size());
        out_d.poison();
        lse_d.poison();
        cuda::attention_flash_forward(out_d.get(), lse_d.get(), qkv_d.get(), c.B, c.T, c.NH, c.KVH,
                                      c.HD, nullptr);
        expect_match("out", out_d.download(), out, for_sum_of(tolerance<E>(), c.T + c.HD));
        expect_match("lse", lse_d.download(), lse, for_sum_of(Tolerance{1e-5, 1e-5}, c.T + c.HD));
        // Backward from the CPU's out and lse.
        out_d.upload(out);
        lse_d.upload(lse);
        cuda::attention_flash_backward(dqkv_d.get(), dout_d.get(), out_d.get(), qkv_d.get(),
                                       lse_d.get(), c.B, c.T, c.NH, c.KVH, c.HD, nullptr);
        expect_match("dqkv", dqkv_d.download(), dqkv,
                     for_sum_of(tolerance<E>(), (c.NH / c.KVH) * c.T * c.HD));

        // The flash and naive paths agree with each other on the GPU too.
        DeviceBuffer<E> naive_out(out.size()), p_d(static_cast<std::size_t>(n.heads_T * c.T));
        naive_out.poison();
        cuda::attention_naive_forward(naive_out.get(), p_d.get(), qkv_d.get(), c.B, c.T, c.NH,
                                      c.KVH, c.HD, nullptr);
        expect_match("flash vs naive out", out_d.download(), naive_out.download(),
                     for_sum_of(tolerance<E>(), c.T + c.HD));
    }
}

}  // namespace
}  // namespace napkin
