// Attention over a KV cache (kernels/decode_attention.h) against a double-precision reference
// written from the definition, with fresh random inputs and outputs poisoned with NaN: MHA, GQA
// and MQA, a prefill (pos 0, Tq > 1: the causal triangle), a decode step (Tq = 1 deep into the
// cache) and a chunk in between, each storage type; and the cache write, which must store k and
// v of the new positions and leave every other position as it was.
#include "kernels/decode_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/attention.h"
#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

using test::Vec;

struct DecodeAttentionTestCase {
    std::int64_t B, Tq, S, pos;
    int NH, KVH;
    std::int64_t HD;
};

std::int64_t row(const DecodeAttentionTestCase& c) {
    return (c.NH + 2 * static_cast<std::int64_t>(c.KVH)) * c.HD;
}

// out[b, t, h] = sum_j softmax_j(q . k_j / sqrt(HD)) v_j over j <= pos + t, kv-head h / (NH / KVH).
Vec reference(const Vec& qkv, const Vec& K, const Vec& V, const DecodeAttentionTestCase& c) {
    const std::int64_t kv = c.KVH * c.HD, group = c.NH / c.KVH;
    Vec out(static_cast<std::size_t>(c.B * c.Tq * c.NH * c.HD));
    for (std::int64_t b = 0; b < c.B; ++b) {
        for (std::int64_t t = 0; t < c.Tq; ++t) {
            for (std::int64_t h = 0; h < c.NH; ++h) {
                const double* q =
                    &qkv[static_cast<std::size_t>((b * c.Tq + t) * row(c) + h * c.HD)];
                const std::int64_t n = c.pos + t + 1;
                std::vector<double> s(static_cast<std::size_t>(n));
                double m = -1e300, sum = 0;
                for (std::int64_t j = 0; j < n; ++j) {
                    const double* k =
                        &K[static_cast<std::size_t>((b * c.S + j) * kv + (h / group) * c.HD)];
                    double dot = 0;
                    for (std::int64_t d = 0; d < c.HD; ++d)
                        dot += q[d] * k[d];
                    s[static_cast<std::size_t>(j)] = dot / std::sqrt(static_cast<double>(c.HD));
                    m = std::max(m, s[static_cast<std::size_t>(j)]);
                }
                for (double& x : s)
                    sum += x = std::exp(x - m);
                for (std::int64_t d = 0; d < c.HD; ++d) {
                    double o = 0;
                    for (std::int64_t j = 0; j < n; ++j)
                        o += s[static_cast<std::size_t>(j)] *
                             V[static_cast<std::size_t>((b * c.S + j) * kv + (h / group) * c.HD +
                                                        d)];
                    out[static_cast<std::size_t>(((b * c.Tq + t) * c.NH + h) * c.HD + d)] = o / sum;
                }
            }
        }
    }
    return out;
}

// The case's shape into a kv_cache_write or decode_attention call.
template <class Args>
Args with_case(Args a, const DecodeAttentionTestCase& c) {
    a.B = c.B;
    a.Tq = c.Tq;
    a.S = c.S;
    a.pos = c.pos;
    a.NH = c.NH;
    a.KVH = c.KVH;
    a.HD = c.HD;
    return a;
}

template <class T>
void check_case(const DecodeAttentionTestCase& c) {
    const unsigned seed = test::fresh_seed();
    SCOPED_TRACE(::testing::Message() << test::dtype_name<T>() << " B " << c.B << " Tq " << c.Tq
                                      << " S " << c.S << " pos " << c.pos << " NH " << c.NH
                                      << " KVH " << c.KVH << " HD " << c.HD << " seed " << seed);
    std::mt19937 rng(seed);
    const std::int64_t cache = c.B * c.S * c.KVH * c.HD;
    auto qkv = test::to_storage<T>(test::random_normal(rng, c.B * c.Tq * row(c)));
    auto K = test::to_storage<T>(test::random_normal(rng, cache));
    auto V = test::to_storage<T>(test::random_normal(rng, cache));
    const auto K0 = K, V0 = V;
    cpu::kv_cache_write<T>(with_case(
        KvCacheWriteArgs<T>{.k_cache = K.data(), .v_cache = V.data(), .qkv = qkv.data()}, c));
    // The cache: positions [pos, pos + Tq) hold k and v of qkv, bit for bit; the rest unchanged.
    const std::int64_t kv = c.KVH * c.HD;
    for (std::int64_t b = 0; b < c.B; ++b) {
        for (std::int64_t j = 0; j < c.S; ++j) {
            for (std::int64_t e = 0; e < kv; ++e) {
                const auto at = static_cast<std::size_t>((b * c.S + j) * kv + e);
                const bool written = j >= c.pos && j < c.pos + c.Tq;
                const auto src =
                    static_cast<std::size_t>((b * c.Tq + j - c.pos) * row(c) + c.NH * c.HD + e);
                ASSERT_EQ(to_float(K[at]), to_float(written ? qkv[src] : K0[at])) << b << " " << j;
                ASSERT_EQ(to_float(V[at]),
                          to_float(written ? qkv[src + static_cast<std::size_t>(kv)] : V0[at]));
            }
        }
    }
    auto out = test::nan_filled<T>(c.B * c.Tq * c.NH * c.HD);
    cpu::decode_attention<T>(with_case(
        DecodeAttentionArgs<T>{
            .out = out.data(), .qkv = qkv.data(), .k_cache = K.data(), .v_cache = V.data()},
        c));
    const Vec want = reference(test::as_seen(qkv), test::as_seen(K), test::as_seen(V), c);
    test::expect_close("out", test::as_seen(out), want,
                       test::for_sum_of(test::tolerance<T>(), c.pos + c.Tq + c.HD));
}

const DecodeAttentionTestCase kDecodeAttentionTestCases[] = {
    {2, 7, 9, 0, 4, 4, 8},     // MHA prefill, two slots left for decoding
    {3, 1, 40, 37, 6, 2, 16},  // GQA decode step deep in the cache
    {1, 5, 70, 33, 8, 1, 32},  // MQA chunk of five queries after 33 cached
    {2, 1, 3, 0, 2, 1, 6},     // one key
};

TEST(DecodeAttention, MatchesTheReferenceFloat) {
    for (const DecodeAttentionTestCase& c : kDecodeAttentionTestCases)
        check_case<float>(c);
}
TEST(DecodeAttention, MatchesTheReferenceBf16) {
    for (const DecodeAttentionTestCase& c : kDecodeAttentionTestCases)
        check_case<bf16_t>(c);
}
TEST(DecodeAttention, MatchesTheReferenceF16) {
    for (const DecodeAttentionTestCase& c : kDecodeAttentionTestCases)
        check_case<f16_t>(c);
}

// Its FLOPs: 4 HD per (query head, key) pair, sum over t of pos + t + 1 keys.
TEST(DecodeAttention, CostCountsTheCausalPairs) {
    const DecodeAttentionShape prefill{.B = 2, .Tq = 5, .pos = 0, .NH = 3, .KVH = 1, .HD = 8};
    EXPECT_EQ(decode_attention_cost(prefill).flops, 4ull * 8 * 2 * 3 * (1 + 2 + 3 + 4 + 5));
    const DecodeAttentionShape step{.B = 2, .Tq = 1, .pos = 10, .NH = 3, .KVH = 1, .HD = 8};
    EXPECT_EQ(decode_attention_cost(step).flops, 4ull * 8 * 2 * 3 * 11);
    // The same FLOPs as the training kernel's causal attention over the whole prompt.
    const AttentionShape whole{.B = 2, .T = 5, .NH = 3, .KVH = 1, .HD = 8};
    EXPECT_EQ(decode_attention_cost(prefill).flops, attention_forward_cost(whole).flops);
    // Flash-decoding's split (chunks of 4 of the step's 11 keys: 3): the same FLOPs, plus its
    // partials, written then read back: 4 B NH 3 (HD + 2) bytes, also the call's workspace.
    DecodeAttentionShape split = step;
    split.chunk = 4;
    const KernelCost single = decode_attention_cost(step), two_pass = decode_attention_cost(split);
    const std::uint64_t partials = 4ull * 2 * 3 * 3 * (8 + 2);
    EXPECT_EQ(two_pass.flops, single.flops);
    EXPECT_EQ(two_pass.bytes_written, single.bytes_written + partials);
    EXPECT_EQ(two_pass.bytes_read, single.bytes_read + partials);
    EXPECT_EQ(two_pass.workspace_bytes, partials);
    EXPECT_EQ(single.workspace_bytes, 0u);
    EXPECT_EQ(decode_attention_workspace_floats(2, 1, 3, 8, 11, 4), 2 * 3 * 3 * (8 + 2));
    EXPECT_EQ(decode_attention_splits(128, 128), 1);
    EXPECT_EQ(decode_attention_splits(129, 128), 2);
    // The split's limits: kv-head groups of at most 64 heads and 4096 elements.
    EXPECT_TRUE(decode_attention_can_split(12, 12, 64));   // GPT-2
    EXPECT_TRUE(decode_attention_can_split(32, 8, 128));   // Llama 3 8B
    EXPECT_TRUE(decode_attention_can_split(32, 1, 128));   // MQA, 4096 elements
    EXPECT_FALSE(decode_attention_can_split(64, 1, 128));  // 8192
    EXPECT_FALSE(decode_attention_can_split(65, 1, 16));   // 65 heads
}

}  // namespace
}  // namespace napkin
