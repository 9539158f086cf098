// The fp8 GEMMs of fp8-amp (kernels/matmul.h) against a double-precision reference computed on
// the dequantized operands (code x scale_inv), with fresh random inputs at several shapes, odd
// ones included, outputs poisoned with NaN first; and their declared costs against an
// independent count.
#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/fp8.h"
#include "core/half.h"
#include "kernels/quantize.h"
#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

using test::Vec;

struct MatmulFp8TestCase {
    std::int64_t M, N, K;
};

// An fp8 operand: codes from a random bf16 tensor through quantize, and their scale pair.
template <class Q>
struct Operand {
    std::vector<Q> codes;
    float scale[kFp8ScaleFloats] = {};
    Vec dequantized;  // code x scale_inv, what the reference multiplies
};

template <class Q>
Operand<Q> random_operand(std::mt19937& rng, std::int64_t n, double stddev) {
    const auto x = test::to_storage<bf16_t>(test::random_normal(rng, n, 0.0, stddev));
    Operand<Q> o;
    o.codes.resize(static_cast<std::size_t>(n));
    cpu::quantize<Q, bf16_t>({o.codes.data(), o.scale, x.data(), n});
    for (const Q& q : o.codes)
        o.dequantized.push_back(static_cast<double>(static_cast<float>(q)) * o.scale[kFp8ScaleInv]);
    return o;
}

// codes (R, C) transposed to (C, R).
template <class Q>
std::vector<Q> transposed_codes(const std::vector<Q>& codes, std::int64_t R, std::int64_t C) {
    std::vector<Q> t(codes.size());
    for (std::int64_t r = 0; r < R; ++r)
        for (std::int64_t c = 0; c < C; ++c)
            t[static_cast<std::size_t>(c * R + r)] = codes[static_cast<std::size_t>(r * C + c)];
    return t;
}

// out (M, N) = a (M, K) @ b (N, K)^T, in double.
Vec product_nt(const Vec& a, const Vec& b, std::int64_t M, std::int64_t N, std::int64_t K) {
    Vec out(static_cast<std::size_t>(M * N));
    for (std::int64_t m = 0; m < M; ++m) {
        for (std::int64_t n = 0; n < N; ++n) {
            double s = 0;
            for (std::int64_t k = 0; k < K; ++k)
                s +=
                    a[static_cast<std::size_t>(m * K + k)] * b[static_cast<std::size_t>(n * K + k)];
            out[static_cast<std::size_t>(m * N + n)] = s;
        }
    }
    return out;
}

Vec transpose(const Vec& a, std::int64_t rows, std::int64_t cols) {
    Vec t(a.size());
    for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < cols; ++c)
            t[static_cast<std::size_t>(c * rows + r)] = a[static_cast<std::size_t>(r * cols + c)];
    }
    return t;
}

// The products are exact in fp32 and the K-term sums accumulate in fp32 (for_sum_of, scaled by
// the terms' size); then one rounding into bf16 (2^-8 relative, tolerance<bf16_t>).
test::Tolerance gemm_tolerance(std::int64_t terms, double term_size) {
    test::Tolerance t = test::tolerance<bf16_t>();
    t.abs = t.abs * term_size + static_cast<double>(terms) * 0x1p-23 * term_size;
    return t;
}

void check_case(const MatmulFp8TestCase& c, bool bias, unsigned seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed << " M " << c.M << " N " << c.N << " K "
                                    << c.K << " bias " << bias);
    std::mt19937 rng(seed);
    // Activations of size ~1, weights ~0.02 (GPT-2's init), gradients ~1e-3: the scales differ.
    // The prefills of the accumulated gradients are of the products' size, so both count.
    const auto x = random_operand<f8e4m3_t>(rng, c.M * c.K, 1.0);
    const auto w = random_operand<f8e4m3_t>(rng, c.N * c.K, 0.02);
    const auto b = test::to_storage<bf16_t>(test::random_normal(rng, c.N));
    const auto dout = test::to_storage<bf16_t>(test::random_normal(rng, c.M * c.N, 0.0, 1e-3));
    std::vector<f8e5m2_t> g8(dout.size());
    float g_scale[kFp8ScaleFloats];
    cpu::quantize<f8e5m2_t, bf16_t>({g8.data(), g_scale, dout.data(), c.M * c.N});
    Vec gd;
    for (const f8e5m2_t& q : g8)
        gd.push_back(static_cast<double>(static_cast<float>(q)) * g_scale[kFp8ScaleInv]);
    std::vector<float> scratch(static_cast<std::size_t>(cpu::matmul_scratch_floats(c.M, c.N, c.K)));

    // Forward.
    auto out = test::nan_filled<bf16_t>(c.M * c.N);
    cpu::matmul_fp8_forward({out.data(), x.codes.data(), x.scale, w.codes.data(), w.scale,
                             bias ? b.data() : nullptr, c.M, c.N, c.K, scratch.data()});
    Vec ref = product_nt(x.dequantized, w.dequantized, c.M, c.N, c.K);
    if (bias) {
        const Vec bs = test::as_seen(b);
        for (std::int64_t i = 0; i < c.M * c.N; ++i)
            ref[static_cast<std::size_t>(i)] += bs[static_cast<std::size_t>(i % c.N)];
    }
    test::expect_close("out", test::as_seen(out), ref,
                       gemm_tolerance(c.K, 1.0 * 0.02 * std::sqrt(c.K)));

    // Backward, accumulating into pre-filled buffers.
    const float dx0 = 1e-4f, dw0 = -1e-3f, db0 = 1e-3f;
    std::vector<bf16_t> dx(x.codes.size(), bf16_t(dx0)), dw(w.codes.size(), bf16_t(dw0)),
        db(static_cast<std::size_t>(c.N), bf16_t(db0));
    // The weight's codes transposed, (K, N), as the backward's cast writes them.
    const auto wt = transposed_codes(w.codes, c.N, c.K);
    cpu::matmul_fp8_backward({dx.data(), dw.data(), bias ? db.data() : nullptr, dout.data(),
                              g8.data(), nullptr, g_scale, x.codes.data(), x.scale, wt.data(),
                              w.scale, c.M, c.N, c.K, scratch.data()});
    // dinp (M, K) = dout (M, N) @ weight (N, K) = product_nt(dout, weight^T); dweight (N, K) =
    // dout^T @ inp.
    Vec ref_dx = product_nt(gd, transpose(w.dequantized, c.N, c.K), c.M, c.K, c.N);
    Vec ref_dw =
        product_nt(transpose(gd, c.M, c.N), transpose(x.dequantized, c.M, c.K), c.N, c.K, c.M);
    for (double& v : ref_dx)
        v += to_float(bf16_t(dx0));
    for (double& v : ref_dw)
        v += to_float(bf16_t(dw0));
    test::expect_close("dinp", test::as_seen(dx), ref_dx,
                       gemm_tolerance(c.N, 1e-3 * 0.02 * std::sqrt(c.N) + 1e-4));
    test::expect_close("dweight", test::as_seen(dw), ref_dw,
                       gemm_tolerance(c.M, 1e-3 * std::sqrt(c.M) + 1e-3));
    if (bias) {
        // dbias from the bf16 gradient, not its fp8 copy.
        const Vec ds = test::as_seen(dout);
        Vec ref_db(static_cast<std::size_t>(c.N), to_float(bf16_t(db0)));
        for (std::int64_t i = 0; i < c.M * c.N; ++i)
            ref_db[static_cast<std::size_t>(i % c.N)] += ds[static_cast<std::size_t>(i)];
        test::expect_close("dbias", test::as_seen(db), ref_db,
                           gemm_tolerance(c.M, 1e-3 * std::sqrt(c.M) + 1e-3));
    }
}

TEST(MatmulFp8, MatchesReferenceOnDequantizedOperands) {
    const unsigned seed = test::fresh_seed();
    int i = 0;
    for (const MatmulFp8TestCase c :
         {MatmulFp8TestCase{1, 1, 1}, MatmulFp8TestCase{3, 5, 7}, MatmulFp8TestCase{17, 9, 33},
          MatmulFp8TestCase{16, 48, 32}, MatmulFp8TestCase{64, 96, 80},
          MatmulFp8TestCase{37, 11, 130}}) {
        check_case(c, true, seed + static_cast<unsigned>(i++));
        check_case(c, false, seed + static_cast<unsigned>(i++));
    }
}

// Only the gradients asked for are written.
TEST(MatmulFp8, NullGradientsAreSkipped) {
    std::mt19937 rng(test::fresh_seed());
    const std::int64_t M = 5, N = 3, K = 4;
    const auto x = random_operand<f8e4m3_t>(rng, M * K, 1.0);
    const auto w = random_operand<f8e4m3_t>(rng, N * K, 1.0);
    const auto dout = test::to_storage<bf16_t>(test::random_normal(rng, M * N));
    std::vector<f8e5m2_t> g8(dout.size());
    float gs[kFp8ScaleFloats];
    cpu::quantize<f8e5m2_t, bf16_t>({g8.data(), gs, dout.data(), M * N});
    std::vector<float> scratch(static_cast<std::size_t>(cpu::matmul_scratch_floats(M, N, K)));
    const auto wt = transposed_codes(w.codes, N, K);
    std::vector<bf16_t> dx(static_cast<std::size_t>(M * K), bf16_t(7.0f));
    cpu::matmul_fp8_backward({dx.data(), nullptr, nullptr, nullptr, g8.data(), nullptr, gs,
                              x.codes.data(), x.scale, wt.data(), w.scale, M, N, K,
                              scratch.data()});
    std::vector<bf16_t> dw(static_cast<std::size_t>(N * K), bf16_t(7.0f));
    cpu::matmul_fp8_backward({nullptr, dw.data(), nullptr, nullptr, g8.data(), nullptr, gs,
                              x.codes.data(), x.scale, wt.data(), w.scale, M, N, K,
                              scratch.data()});
    int changed_dx = 0, changed_dw = 0;
    for (auto v : dx)
        changed_dx += to_float(v) != 7.0f;
    for (auto v : dw)
        changed_dw += to_float(v) != 7.0f;
    EXPECT_GT(changed_dx, 0);
    EXPECT_GT(changed_dw, 0);
}

// Costs against a count by hand: M = 3, N = 5, K = 7 with bias, bf16 out.
TEST(MatmulFp8, CostsCountFp8OperandsAtOneByte) {
    const MatmulShape s{3, 5, 7, true, DType::f8e4m3, DType::bf16, DType::f8e4m3};
    const KernelCost f = matmul_fp8_forward_cost(s);
    EXPECT_EQ(f.flops, 2u * 3 * 5 * 7 + 3 * 5);
    EXPECT_EQ(f.bytes_read, 3u * 7 + 5 * 7 + 2 * 5);
    EXPECT_EQ(f.bytes_written, 2u * 3 * 5);
    const KernelCost b = matmul_fp8_backward_cost(s);
    EXPECT_EQ(b.flops, 4u * 3 * 5 * 7 + 3 * 5);
    // dout8, weight8, inp8; dinp and dweight read to accumulate; the bf16 dout and dbias.
    EXPECT_EQ(b.bytes_read, 15u + 35 + 21 + 2 * 21 + 2 * 35 + 2 * 15 + 2 * 5);
    EXPECT_EQ(b.bytes_written, 2u * 21 + 2 * 35 + 2 * 5);
}

}  // namespace
}  // namespace napkin
