// matmul against a double-precision reference with fresh random inputs, for each storage type,
// and its backward against finite differences of the reference.
#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/half.h"
#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

struct MatmulTestCase {
    std::int64_t M, N, K;
};

std::vector<double> random_vector(std::mt19937& rng, std::int64_t n) {
    std::normal_distribution<double> d(0.0, 1.0);
    std::vector<double> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = d(rng);
    return v;
}

template <class T>
std::vector<T> to_storage(const std::vector<double>& v) {
    std::vector<T> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = from_float<T>(static_cast<float>(v[i]));
    return out;
}

// The reference reads the values as the kernel sees them (rounded to T).
template <class T>
std::vector<double> as_seen(const std::vector<T>& v) {
    std::vector<double> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_float(v[i]);
    return out;
}

std::vector<double> reference_forward(const std::vector<double>& x, const std::vector<double>& w,
                                      const std::vector<double>& b, const MatmulTestCase& c) {
    std::vector<double> out(static_cast<std::size_t>(c.M * c.N));
    for (std::int64_t m = 0; m < c.M; ++m) {
        for (std::int64_t n = 0; n < c.N; ++n) {
            double s = b.empty() ? 0.0 : b[static_cast<std::size_t>(n)];
            for (std::int64_t k = 0; k < c.K; ++k) s += x[static_cast<std::size_t>(m * c.K + k)] * w[static_cast<std::size_t>(n * c.K + k)];
            out[static_cast<std::size_t>(m * c.N + n)] = s;
        }
    }
    return out;
}

template <class T>
double tolerance() {
    return std::is_same_v<T, float> ? 1e-4 : 3e-2;
}

template <class T>
void check_case(const MatmulTestCase& c, bool bias, unsigned seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed << " M " << c.M << " N " << c.N << " K " << c.K << " bias " << bias);
    std::mt19937 rng(seed);
    const auto x = to_storage<T>(random_vector(rng, c.M * c.K));
    const auto w = to_storage<T>(random_vector(rng, c.N * c.K));
    const auto b = bias ? to_storage<T>(random_vector(rng, c.N)) : std::vector<T>{};
    const auto g = random_vector(rng, c.M * c.N);  // dL/dout for L = sum(out * g)
    std::vector<float> scratch(static_cast<std::size_t>(cpu::matmul_scratch_floats(c.M, c.N, c.K)));

    std::vector<T> out(static_cast<std::size_t>(c.M * c.N));
    cpu::matmul_forward<T>(
        {out.data(), x.data(), w.data(), bias ? b.data() : nullptr, c.M, c.N, c.K, scratch.data()});
    const auto xs = as_seen(x), ws = as_seen(w), bs = as_seen(b);
    const auto ref = reference_forward(xs, ws, bs, c);
    for (std::size_t i = 0; i < out.size(); ++i) {
        ASSERT_NEAR(to_float(out[i]), ref[i], tolerance<T>() * (1.0 + std::fabs(ref[i]))) << "out " << i;
    }

    // Backward, accumulating into pre-filled buffers.
    const auto gT = to_storage<T>(g);
    const auto gs = as_seen(gT);
    std::vector<T> dx(x.size(), from_float<T>(0.5f)), dw(w.size(), from_float<T>(-0.25f)), db(b.size(), from_float<T>(1.0f));
    cpu::matmul_backward<T>({dx.data(), dw.data(), bias ? db.data() : nullptr, gT.data(), x.data(),
                             w.data(), c.M, c.N, c.K, scratch.data()});
    // Finite differences of the double reference: L(x) = sum(ref(x) * g).
    auto loss = [&](const std::vector<double>& xv, const std::vector<double>& wv, const std::vector<double>& bv) {
        const auto o = reference_forward(xv, wv, bv, c);
        double l = 0;
        for (std::size_t i = 0; i < o.size(); ++i) l += o[i] * gs[i];
        return l;
    };
    const double h = 1e-4;
    auto central = [&](int which, std::size_t i) {
        auto xv = xs, wv = ws, bv = bs;
        std::vector<double>& v = which == 0 ? xv : which == 1 ? wv : bv;
        const double saved = v[i];
        v[i] = saved + h;
        const double up = loss(xv, wv, bv);
        v[i] = saved - h;
        const double down = loss(xv, wv, bv);
        return (up - down) / (2 * h);
    };
    for (std::size_t i = 0; i < dx.size(); ++i) {
        ASSERT_NEAR(to_float(dx[i]) - 0.5, central(0, i), tolerance<T>() * (1.0 + std::fabs(central(0, i)))) << "dinp " << i;
    }
    for (std::size_t i = 0; i < dw.size(); ++i) {
        ASSERT_NEAR(to_float(dw[i]) + 0.25, central(1, i), tolerance<T>() * (1.0 + std::fabs(central(1, i)))) << "dweight " << i;
    }
    for (std::size_t i = 0; i < db.size(); ++i) {
        ASSERT_NEAR(to_float(db[i]) - 1.0, central(2, i), tolerance<T>() * (1.0 + std::fabs(central(2, i)))) << "dbias " << i;
    }
}

TEST(Matmul, FloatMatchesReferenceAndFiniteDifferences) {
    const unsigned seed = test::fresh_seed();
    for (const MatmulTestCase c : {MatmulTestCase{1, 1, 1}, MatmulTestCase{3, 5, 7},
                                   MatmulTestCase{17, 9, 33}, MatmulTestCase{8, 16, 4}}) {
        check_case<float>(c, true, seed);
        check_case<float>(c, false, seed + 1);
    }
}

TEST(Matmul, Bf16AndFp16Storage) {
    const unsigned seed = test::fresh_seed();
    for (const MatmulTestCase c : {MatmulTestCase{3, 5, 7}, MatmulTestCase{12, 6, 10}}) {
        check_case<bf16_t>(c, true, seed);
        check_case<f16_t>(c, true, seed + 1);
    }
}

}  // namespace
}  // namespace napkin
