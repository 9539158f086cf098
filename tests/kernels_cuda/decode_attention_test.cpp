// Attention over a KV cache: the CUDA kernels against the CPU's (kernels/cpu/decode_attention.cpp)
// on fresh random inputs, outputs poisoned: MHA, GQA and MQA, a prefill's causal triangle, decode
// steps deep in a cache longer than one tile of keys, odd head dims and the largest one (512).
// The cache write is a copy: bit for bit, untouched positions included. Flash-decoding (a
// workspace given) against the same CPU reference: MHA, GQA and MQA, head dims 64 and 128,
// chunks that divide the keys and chunks that do not, a single key, one query and several (each
// with its own number of chunks), the largest kv-head group the split serves and one past it
// (the single-pass kernel); the same bits twice, under two schedules.
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

struct SplitCase {
    std::int64_t B, Tq, S, pos;
    int NH, KVH;
    std::int64_t HD, chunk;
};
constexpr SplitCase kSplitCases[] = {
    {2, 1, 100, 70, 8, 2, 64, 16},     // GQA, 71 keys: 4 chunks of 16 and one of 7
    {1, 1, 64, 63, 4, 1, 128, 8},      // MQA, 64 keys: 8 whole chunks
    {3, 1, 40, 31, 4, 4, 64, 16},      // MHA, 32 keys: 2 whole chunks
    {2, 1, 5, 0, 4, 2, 64, 8},         // a single key
    {2, 3, 50, 20, 4, 2, 128, 8},      // Tq 3: 21, 22, 23 keys, 3 chunks each
    {1, 9, 9, 0, 2, 1, 64, 4},         // a prefill's triangle: 1 to 3 chunks
    {1, 1, 300, 299, 8, 1, 128, 256},  // the engine's chunk at 300 keys: 256 + 44
    {1, 2, 40, 37, 32, 1, 128, 16},    // group 32 x 128 = 4096: 32 outputs a thread
    {1, 1, 20, 10, 64, 1, 128, 8},     // group 64 x 128, past the split: the single pass
};

template <class T>
class DecodeAttentionSplitCuda : public ::testing::Test {};
TYPED_TEST_SUITE(DecodeAttentionSplitCuda, StorageTypes);

TYPED_TEST(DecodeAttentionSplitCuda, SplitKeysMatchCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using E = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const SplitCase& c : kSplitCases) {
        SCOPED_TRACE(case_name<E>(c.B, c.Tq, c.S, c.pos, c.NH, c.KVH, c.HD, c.chunk));
        const std::int64_t cache = c.B * c.S * c.KVH * c.HD;
        const auto qkv = random_storage<E>(rng, c.B * c.Tq * (c.NH + 2 * c.KVH) * c.HD);
        const std::vector<E> K = random_storage<E>(rng, cache), V = random_storage<E>(rng, cache);
        DeviceBuffer<E> qkv_d(qkv), K_d(K), V_d(V);
        const std::int64_t n = c.B * c.Tq * c.NH * c.HD;
        std::vector<E> out = nan_filled<E>(n);
        cpu::decode_attention<E>(
            {out.data(), qkv.data(), K.data(), V.data(), c.B, c.Tq, c.S, c.pos, c.NH, c.KVH, c.HD});
        const std::int64_t floats =
            decode_attention_workspace_floats(c.B, c.Tq, c.NH, c.HD, c.pos + c.Tq, c.chunk);
        DeviceBuffer<float> ws(static_cast<std::size_t>(floats));
        std::vector<E> first;
        for (int run = 0; run < 2; ++run) {
            ws.poison();
            DeviceBuffer<E> out_d(static_cast<std::size_t>(n));
            out_d.poison();
            cuda::decode_attention<E>({out_d.get(), qkv_d.get(), K_d.get(), V_d.get(), c.B, c.Tq,
                                       c.S, c.pos, c.NH, c.KVH, c.HD, ws.get(), floats, c.chunk},
                                      {});
            const std::vector<E> got = out_d.download();
            if (run == 0) {
                expect_match("out", got, out, for_sum_of(tolerance<E>(), c.pos + c.Tq + c.HD));
                first = got;
            } else {
                expect_same_bits("out, second run", got, first);
            }
        }
    }
}

// A workspace smaller than the call's partials is refused before any launch.
TEST(DecodeAttentionSplitCuda, RefusesAWorkspaceTooSmall) {
    NAPKIN_SKIP_WITHOUT_GPU();
    const SplitCase c{1, 1, 40, 32, 4, 2, 64, 8};  // 33 keys: 5 chunks
    std::mt19937 rng(fresh_seed());
    const auto qkv = random_storage<float>(rng, c.B * c.Tq * (c.NH + 2 * c.KVH) * c.HD);
    DeviceBuffer<float> qkv_d(qkv), K_d(static_cast<std::size_t>(c.B * c.S * c.KVH * c.HD)),
        V_d(static_cast<std::size_t>(c.B * c.S * c.KVH * c.HD)),
        out_d(static_cast<std::size_t>(c.B * c.Tq * c.NH * c.HD));
    const std::int64_t floats =
        decode_attention_workspace_floats(c.B, c.Tq, c.NH, c.HD, c.pos + c.Tq, c.chunk);
    EXPECT_EQ(floats, 1 * 1 * 4 * 5 * (64 + 2));
    DeviceBuffer<float> ws(static_cast<std::size_t>(floats));
    EXPECT_THROW(cuda::decode_attention<float>(
                     {out_d.get(), qkv_d.get(), K_d.get(), V_d.get(), c.B, c.Tq, c.S, c.pos, c.NH,
                      c.KVH, c.HD, ws.get(), floats - 1, c.chunk},
                     {}),
                 std::exception);
}

}  // namespace
}  // namespace napkin
