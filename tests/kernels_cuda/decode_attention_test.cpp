// Attention over a KV cache: the CUDA kernels against the CPU's (kernels/cpu/decode_attention.cpp)
// on fresh random inputs, outputs poisoned: MHA, GQA and MQA, a prefill's causal triangle, decode
// steps deep in a cache longer than one tile of keys, odd head dims and the largest one (512).
// The cache write is a copy: bit for bit, untouched positions included.
#include "kernels/decode_attention.h"

#include <gtest/gtest.h>

#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

struct DecodeAttentionTestCase {
    std::int64_t B, Tq, S, pos;
    int NH, KVH;
    std::int64_t HD;
};
constexpr DecodeAttentionTestCase kDecodeAttentionTestCases[] = {
    {2, 7, 9, 0, 4, 4, 8}, {3, 1, 100, 70, 6, 2, 16}, {1, 5, 70, 33, 8, 1, 36},
    {2, 1, 3, 0, 2, 1, 6}, {1, 2, 40, 31, 2, 2, 512}, {2, 33, 33, 0, 3, 1, 130}};

template <class T>
class DecodeAttentionCuda : public ::testing::Test {};
TYPED_TEST_SUITE(DecodeAttentionCuda, StorageTypes);

TYPED_TEST(DecodeAttentionCuda, CacheWriteAndAttentionMatchCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using E = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const DecodeAttentionTestCase& c : kDecodeAttentionTestCases) {
        SCOPED_TRACE(case_name<E>(c.B, c.Tq, c.S, c.pos, c.NH, c.KVH, c.HD));
        const std::int64_t cache = c.B * c.S * c.KVH * c.HD;
        const auto qkv = random_storage<E>(rng, c.B * c.Tq * (c.NH + 2 * c.KVH) * c.HD);
        std::vector<E> K = random_storage<E>(rng, cache), V = random_storage<E>(rng, cache);
        DeviceBuffer<E> qkv_d(qkv), K_d(K), V_d(V);
        const KvCacheWriteArgs<E> w{K.data(), V.data(), qkv.data(), c.B,   c.Tq,
                                    c.S,      c.pos,    c.NH,       c.KVH, c.HD};
        cpu::kv_cache_write<E>(w);
        cuda::kv_cache_write<E>(
            {K_d.get(), V_d.get(), qkv_d.get(), c.B, c.Tq, c.S, c.pos, c.NH, c.KVH, c.HD}, {});
        expect_same_bits("k_cache", K_d.download(), K);
        expect_same_bits("v_cache", V_d.download(), V);
        const std::int64_t n = c.B * c.Tq * c.NH * c.HD;
        std::vector<E> out = nan_filled<E>(n);
        DeviceBuffer<E> out_d(static_cast<std::size_t>(n));
        out_d.poison();
        cpu::decode_attention<E>(
            {out.data(), qkv.data(), K.data(), V.data(), c.B, c.Tq, c.S, c.pos, c.NH, c.KVH, c.HD});
        cuda::decode_attention<E>({out_d.get(), qkv_d.get(), K_d.get(), V_d.get(), c.B, c.Tq, c.S,
                                   c.pos, c.NH, c.KVH, c.HD},
                                  {});
        expect_match("out", out_d.download(), out, for_sum_of(tolerance<E>(), c.pos + c.Tq + c.HD));
    }
}

}  // namespace
}  // namespace napkin
