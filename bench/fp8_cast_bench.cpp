// fp8-amp's backward casts and transposes per block linear (core/engine/gpt_fp8.h) at GPT-2
// 124M's shapes (C 768, F 3072), B T = 64 x 1024, bf16 storage, delayed scaling (one read of
// each tensor per cast), in one process:
//   - the account (no GPU needed): per GEMM of a block, the bytes the casts and transposes that
//     feed its backward GEMMs move, from the kernels' cost functions (kernels/quantize.h), in
//     three ways: "old" the casts writing row-major codes and three byte transposes (weight8,
//     dout8, inp8); "now" the cast-transposes writing weight8^T alone and dout8 with dout8^T,
//     then inp8's transpose; "kept^T" what keeping inp8^T from the forward's cast would leave
//     (its extra write in the forward counted, the backward's transpose gone; not done). The
//     GEMMs' own operand reads are the same in all three and left out. Time at the H200's HBM
//     bandwidth (estimator/hardware.cpp: 4.8 TB/s), the launches one after another;
//   - on a GPU, the median microseconds of "old" (quantize + transpose_fp8, now the 16-byte
//     tiled transpose: the 32 x 32 byte-per-thread kernel it replaced is gone) and of "now"
//     (quantize_transpose), each against the account's time, and GB/s.
//
//   fp8_cast_bench [--account] [--reps N] [--warmup N] [--shape gpt2-b64|tiny]
//
// --account prints the account alone. --shape tiny (M 256, C 64, F 256): a dry run, for
// fp8_cast_bench_emu on the CUDA emulator. Without a GPU it prints the account and one line.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/cuda_bench.h"
#include "core/fp8.h"
#include "estimator/hardware.h"
#include "kernels/quantize.h"

namespace napkin {
namespace {

struct CastShape {
    const char* name;
    std::int64_t M, C, F;  // M = B T rows
};

const std::vector<CastShape>& cast_shapes() {
    static const std::vector<CastShape> s = {{"gpt2-b64", 64 * 1024, 768, 3072},
                                             {"tiny", 256, 64, 256}};
    return s;
}

struct Linear {
    const char* name;
    std::int64_t N, K;
};

std::vector<Linear> block_linears(const CastShape& s) {
    return {
        {"qkv", 3 * s.C, s.C}, {"attn.proj", s.C, s.C}, {"fc", s.F, s.C}, {"fc.proj", s.C, s.F}};
}

std::uint64_t moved(const KernelCost& c) {
    return c.bytes_read + c.bytes_written;
}

// Bytes and launches of each way for one linear's backward (M, N, K).
struct CastAccount {
    std::uint64_t old_bytes = 0, now_bytes = 0, kept_bytes = 0;
    int old_launches = 0, now_launches = 0, kept_launches = 0;
};

CastAccount cast_account(std::int64_t M, std::int64_t N, std::int64_t K) {
    const DType bf = DType::bf16, e4 = DType::f8e4m3, e5 = DType::f8e5m2;
    CastAccount a;
    a.old_bytes = moved(quantize_cost({M * N, bf, e5})) + moved(quantize_cost({N * K, bf, e4})) +
                  moved(transpose_fp8_cost(N, K)) + moved(transpose_fp8_cost(M, N)) +
                  moved(transpose_fp8_cost(M, K));
    a.old_launches = 5;
    a.now_bytes = moved(quantize_transpose_cost({M, N, bf, e5, true, true})) +
                  moved(quantize_transpose_cost({N, K, bf, e4, false, true})) +
                  moved(transpose_fp8_cost(M, K));
    a.now_launches = 3;
    // The forward's cast of inp writing inp8^T beside inp8: M K bytes more there, no transpose.
    a.kept_bytes = a.now_bytes - moved(transpose_fp8_cost(M, K)) + nbytes(e4, M * K);
    a.kept_launches = 2;
    return a;
}

double hbm_us(std::uint64_t bytes) {
    return static_cast<double>(bytes) / (find_gpu("h200")->bandwidth_tbs * 1e12) * 1e6;
}

void print_account(const CastShape& s) {
    std::printf(
        "\n%s: M %lld, C %lld, F %lld; bf16, delayed scaling; per linear's backward, the "
        "casts and transposes only; us at the H200's %.1f TB/s\n",
        s.name, static_cast<long long>(s.M), static_cast<long long>(s.C),
        static_cast<long long>(s.F), find_gpu("h200")->bandwidth_tbs);
    std::printf("%-10s %6s %6s %9s %9s %9s %8s %8s %8s %9s\n", "linear", "N", "K", "old MB",
                "now MB", "kept^T MB", "old us", "now us", "kept us", "launches");
    CastAccount total;
    for (const Linear& l : block_linears(s)) {
        const CastAccount a = cast_account(s.M, l.N, l.K);
        std::printf("%-10s %6lld %6lld %9.1f %9.1f %9.1f %8.1f %8.1f %8.1f %3d/%d/%d\n", l.name,
                    static_cast<long long>(l.N), static_cast<long long>(l.K), a.old_bytes / 1e6,
                    a.now_bytes / 1e6, a.kept_bytes / 1e6, hbm_us(a.old_bytes), hbm_us(a.now_bytes),
                    hbm_us(a.kept_bytes), a.old_launches, a.now_launches, a.kept_launches);
        total.old_bytes += a.old_bytes, total.now_bytes += a.now_bytes;
        total.kept_bytes += a.kept_bytes;
    }
    std::printf("%-10s %6s %6s %9.1f %9.1f %9.1f %8.1f %8.1f %8.1f\n", "block", "", "",
                total.old_bytes / 1e6, total.now_bytes / 1e6, total.kept_bytes / 1e6,
                hbm_us(total.old_bytes), hbm_us(total.now_bytes), hbm_us(total.kept_bytes));
}

int run(const bench::BenchFlags& flags, const cudaDeviceProp& prop) {
    cudaStream_t stream = nullptr;  // the default stream
    const cuda::Launch launch{stream, nullptr};
    std::mt19937 rng(20);
    std::printf("\n%s; median of %d calls after %d; account: the table's\n", prop.name, flags.reps,
                flags.warmup);
    std::printf("%-9s %-10s %-4s %10s %10s %8s %8s\n", "shape", "linear", "way", "median us",
                "account us", "x acct", "GB/s");
    for (const CastShape& s : cast_shapes()) {
        if (flags.shape.empty() ? s.name == std::string("tiny") : flags.shape != s.name) continue;
        for (const Linear& l : block_linears(s)) {
            const std::int64_t M = s.M, N = l.N, K = l.K;
            bench::DeviceBuffer<bf16_t> dout(M * N, &rng), w(N * K, &rng);
            bench::DeviceBuffer<std::uint8_t> g8(M * N, nullptr), g8t(M * N, nullptr),
                w8(N * K, nullptr), w8t(N * K, nullptr), x8(M * K, nullptr), x8t(M * K, nullptr);
            bench::DeviceBuffer<float> pairs(4 * kFp8ScaleFloats, nullptr), amax(2, nullptr);
            const std::vector<float> pair = {1.0f, 0, 0, 0, 1.0f, 0, 0, 0};
            NAPKIN_CUDA_CHECK(cudaMemcpy(pairs.get(), pair.data(), sizeof(float) * pair.size(),
                                         cudaMemcpyHostToDevice));
            float* delayed = pairs.get();
            float* g_scale = pairs.get() + kFp8ScaleFloats;
            float* w_scale = pairs.get() + 2 * kFp8ScaleFloats;
            auto* g8p = reinterpret_cast<f8e5m2_t*>(g8.get());
            auto* g8tp = reinterpret_cast<f8e5m2_t*>(g8t.get());
            auto* w8p = reinterpret_cast<f8e4m3_t*>(w8.get());
            auto* w8tp = reinterpret_cast<f8e4m3_t*>(w8t.get());
            const auto old_way = [&] {
                cuda::quantize<f8e5m2_t, bf16_t>(
                    {g8p, g_scale, dout.get(), M * N, delayed, amax.get()}, launch);
                cuda::quantize<f8e4m3_t, bf16_t>(
                    {w8p, w_scale, w.get(), N * K, delayed, amax.get() + 1}, launch);
                cuda::transpose_fp8({w8t.get(), w8.get(), N, K}, launch);
                cuda::transpose_fp8({g8t.get(), g8.get(), M, N}, launch);
                cuda::transpose_fp8({x8t.get(), x8.get(), M, K}, launch);
            };
            const auto now_way = [&] {
                cuda::quantize_transpose<f8e5m2_t, bf16_t>(
                    {g8p, g8tp, g_scale, dout.get(), M, N, delayed, amax.get()}, launch);
                cuda::quantize_transpose<f8e4m3_t, bf16_t>(
                    {nullptr, w8tp, w_scale, w.get(), N, K, delayed, amax.get() + 1}, launch);
                cuda::transpose_fp8({x8t.get(), x8.get(), M, K}, launch);
            };
            const CastAccount a = cast_account(M, N, K);
            const struct {
                const char* way;
                std::function<void()> call;
                std::uint64_t bytes;
            } ways[] = {{"old", old_way, a.old_bytes}, {"now", now_way, a.now_bytes}};
            for (const auto& w_ : ways) {
                const double ms = bench::median_ms(w_.call, stream, flags.warmup, flags.reps);
                const double us = ms * 1e3, acct = hbm_us(w_.bytes);
                std::printf("%-9s %-10s %-4s %10.1f %10.1f %8.2f %8.0f\n", s.name, l.name, w_.way,
                            us, acct, us / acct, static_cast<double>(w_.bytes) / (ms * 1e6));
            }
        }
    }
    return 0;
}

}  // namespace
}  // namespace napkin

int main(int argc, char** argv) {
    using namespace napkin;
    const std::string usage =
        "usage: fp8_cast_bench [--account] [--reps N] [--warmup N] [--shape gpt2-b64|tiny]\n";
    bench::BenchFlags flags;
    flags.switches["account"] = false;
    bench::parse_flags(argc, argv, "fp8_cast_bench", usage, {"gpt2-b64", "tiny"}, flags);
    for (const CastShape& s : cast_shapes())
        if (flags.shape.empty() ? s.name != std::string("tiny") : flags.shape == s.name)
            print_account(s);
    if (flags.switches.at("account")) return 0;
    const auto prop = bench::first_device("fp8_cast_bench");
    if (!prop) return 0;
    return run(flags, *prop);
}
