// The LM head and the loss (cuda::head_cross_entropy, bf16 storage, the head's gradient taken)
// at GPT-2 124M's shape (V 50257, Vp 50304, C 768, T 1024) at B 8 and B 64, for several chunk
// sizes, in one process:
//   - the account: per launch of one call, its FLOPs, bytes and roofline on the H100 SXM
//     (estimator/hardware.cpp: 989.5 TFLOP/s dense bf16, 3.35 TB/s), each launch's
//     max(FLOPs / peak, bytes / bandwidth), summed: launches run one after another;
//   - on a GPU, the median ms of the whole op (the two-pass row kernel), of the same op with the
//     three-pass row kernel it replaced, and of its GEMMs alone (the same cuBLASLt calls, no row
//     kernel), each against the account's roofline of what it runs.
// The bytes are each tensor read or written once per launch, as docs/CUDA.md ("The LM head and
// the loss") derives them; the scratch is head_cross_entropy_scratch_bytes, what the engine and
// the estimator count.
//
//   head_ce_bench [--account] [--reps N] [--warmup N] [--shape gpt2-b8|gpt2-b64|tiny] [--json F]
//
// --account prints the account alone (no GPU needed). --shape tiny (300 rows, V 1000): a dry run,
// for head_ce_bench_emu on the CUDA emulator. Without a GPU it prints the account and one line.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/cuda_bench.h"
#include "estimator/hardware.h"
#include "kernels/cross_entropy.h"
#include "kernels/matmul.h"

namespace napkin {
namespace {

using cuda::detail::HeadCrossEntropyRows;

struct Shape {
    const char* name;
    std::int64_t M, V, Vp, C;  // M = B T rows
    std::vector<std::int64_t> chunks;
};

const std::vector<Shape>& shapes() {
    static const std::vector<Shape> s = {
        {"gpt2-b8", 8 * 1024, 50257, 50304, 768, {1024, 2048, 4096, 8192}},
        {"gpt2-b64", 64 * 1024, 50257, 50304, 768, {1024, 2048, 4096, 8192}},
        {"tiny", 300, 1000, 1024, 64, {64, 128}},
    };
    return s;
}

// One launch kind of one call: its count, FLOPs and bytes summed over the call, and the sum of
// each launch's roofline on the H100 SXM.
struct LaunchAccount {
    const char* name;
    std::int64_t launches = 0;
    double flops = 0, bytes = 0, roofline_s = 0;
};

struct Account {
    std::vector<LaunchAccount> launches;
    double roofline_s() const {
        double s = 0;
        for (const LaunchAccount& l : launches)
            s += l.roofline_s;
        return s;
    }
};

// The launches of one head_cross_entropy call at bf16 (kernels/cross_entropy.h's
// head_cross_entropy_chunk_costs, chunk by chunk). `rows`: which row kernel, or none.
Account account(const Shape& s, std::int64_t chunk, HeadCrossEntropyRows rows) {
    const GpuSpec& gpu = *find_gpu("h100-sxm");
    const double peak = gpu.tflops_bf16 * 1e12, bw = gpu.bandwidth_tbs * 1e12;
    LaunchAccount logits{"logits GEMM x w^T -> fp32"}, row{"row kernel"}, dx{"dx GEMM dlogits w"},
        dw{"dw GEMM dlogits^T x -> dw32"}, acc{"dw += dw32"};
    const auto add = [&](LaunchAccount& l, const KernelCost& c) {
        const auto flops = static_cast<double>(c.flops), bytes = static_cast<double>(c.bytes());
        ++l.launches;
        l.flops += flops;
        l.bytes += bytes;
        l.roofline_s += std::max(flops / peak, bytes / bw);
    };
    const int reads = rows == HeadCrossEntropyRows::three_pass ? 3 : 2;
    for (std::int64_t r0 = 0; r0 < s.M; r0 += chunk) {
        const HeadCrossEntropyLaunchCosts c = head_cross_entropy_chunk_costs(
            std::min(chunk, s.M - r0), s.V, s.Vp, s.C, r0 == 0, reads);
        add(logits, c.logits);
        if (rows != HeadCrossEntropyRows::none) add(row, c.rows);
        add(dx, c.dx);
        add(dw, c.dw);
    }
    add(acc, head_cross_entropy_accumulate_cost(s.Vp, s.C));
    Account a;
    a.launches = {logits};
    if (rows != HeadCrossEntropyRows::none) a.launches.push_back(row);
    a.launches.insert(a.launches.end(), {dx, dw, acc});
    return a;
}

const char* path_name(HeadCrossEntropyRows rows) {
    switch (rows) {
        case HeadCrossEntropyRows::two_pass:
            return "op (two-pass rows)";
        case HeadCrossEntropyRows::three_pass:
            return "op, three-pass rows";
        default:
            return "GEMMs alone";
    }
}

double scratch_mb(const Shape& s, std::int64_t chunk) {
    return static_cast<double>(
               cuda::head_cross_entropy_scratch_bytes(chunk, s.C, s.Vp, DType::bf16, true)) /
           1e6;
}

void print_account(const Shape& s) {
    std::printf("\n%s: M %lld rows, V %lld, Vp %lld, C %lld; bf16; roofline on the H100 SXM\n",
                s.name, static_cast<long long>(s.M), static_cast<long long>(s.V),
                static_cast<long long>(s.Vp), static_cast<long long>(s.C));
    std::printf("%6s %10s %-30s %8s %10s %10s %9s %12s\n", "chunk", "scratch MB", "launch",
                "launches", "GFLOP", "MB", "FLOP/B", "roofline ms");
    for (const std::int64_t chunk : s.chunks) {
        const Account a = account(s, chunk, HeadCrossEntropyRows::two_pass);
        for (const LaunchAccount& l : a.launches)
            std::printf("%6lld %10.1f %-30s %8lld %10.1f %10.1f %9.1f %12.3f\n",
                        static_cast<long long>(chunk), scratch_mb(s, chunk), l.name,
                        static_cast<long long>(l.launches), l.flops / 1e9, l.bytes / 1e6,
                        l.flops / l.bytes, l.roofline_s * 1e3);
        const Account old = account(s, chunk, HeadCrossEntropyRows::three_pass);
        std::printf("%6lld %10.1f %-30s %8s %10s %10s %9s %12.3f   (three-pass rows: %.3f)\n",
                    static_cast<long long>(chunk), scratch_mb(s, chunk), "total", "", "", "", "",
                    a.roofline_s() * 1e3, old.roofline_s() * 1e3);
    }
}

// The op's buffers at one shape: x and w bf16 N(0, 1) draws (logits spread about sqrt(C); the
// row kernel subtracts each row's max), targets uniform over the vocabulary.
struct Buffers {
    Buffers(const Shape& s, std::int64_t max_chunk, std::mt19937& rng)
        : x(s.M * s.C, &rng),
          w(s.Vp * s.C, &rng),
          dx(s.M * s.C, nullptr),
          dw(s.Vp * s.C, nullptr),
          losses(s.M, nullptr),
          targets(s.M, nullptr),
          scratch(static_cast<std::int64_t>(cuda::head_cross_entropy_scratch_bytes(
                                                max_chunk, s.C, s.Vp, DType::bf16, true) /
                                            sizeof(float)) +
                      1,
                  nullptr),
          workspace(static_cast<std::int64_t>(cuda::kMatmulWorkspaceBytes / sizeof(float)),
                    nullptr) {
        std::uniform_int_distribution<std::int32_t> tok(0, static_cast<std::int32_t>(s.V - 1));
        std::vector<std::int32_t> t(static_cast<std::size_t>(s.M));
        for (std::int32_t& v : t)
            v = tok(rng);
        NAPKIN_CUDA_CHECK(cudaMemcpy(targets.get(), t.data(), t.size() * sizeof(std::int32_t),
                                     cudaMemcpyHostToDevice));
    }
    bench::DeviceBuffer<bf16_t> x, w, dx, dw;
    bench::DeviceBuffer<float> losses;
    bench::DeviceBuffer<std::int32_t> targets;
    bench::DeviceBuffer<float> scratch, workspace;
};

int run(const bench::BenchFlags& flags, const cudaDeviceProp& prop) {
    cudaStream_t stream = nullptr;  // the default stream
    cuda::Launch launch{stream, cuda::matmul_create_handle()};
    std::mt19937 rng(20);
    nlohmann::json rows = nlohmann::json::array();
    std::printf("\n%s; median of %d calls after %d; roofline: the account's, H100 SXM\n", prop.name,
                flags.reps, flags.warmup);
    std::printf("%-9s %6s %10s %-20s %10s %12s %8s\n", "shape", "chunk", "scratch MB", "path",
                "median ms", "roofline ms", "x roof");
    for (const Shape& s : shapes()) {
        if (flags.shape.empty() ? s.name == std::string("tiny") : flags.shape != s.name) continue;
        Buffers b(s, *std::max_element(s.chunks.begin(), s.chunks.end()), rng);
        for (const std::int64_t chunk : s.chunks) {
            for (const HeadCrossEntropyRows path :
                 {HeadCrossEntropyRows::two_pass, HeadCrossEntropyRows::three_pass,
                  HeadCrossEntropyRows::none}) {
                const HeadCrossEntropyArgs<bf16_t> args{b.losses.get(),
                                                        b.dx.get(),
                                                        b.dw.get(),
                                                        b.x.get(),
                                                        b.w.get(),
                                                        b.targets.get(),
                                                        s.M,
                                                        s.C,
                                                        s.V,
                                                        s.Vp,
                                                        chunk,
                                                        1.0f / static_cast<float>(s.M),
                                                        b.scratch.get(),
                                                        b.workspace.get()};
                const double ms =
                    bench::median_ms([&] { cuda::detail::head_cross_entropy(args, launch, path); },
                                     stream, flags.warmup, flags.reps);
                const double roof_ms = account(s, chunk, path).roofline_s() * 1e3;
                std::printf("%-9s %6lld %10.1f %-20s %10.3f %12.3f %8.2f\n", s.name,
                            static_cast<long long>(chunk), scratch_mb(s, chunk), path_name(path),
                            ms, roof_ms, ms / roof_ms);
                rows.push_back({{"shape", s.name},
                                {"chunk", chunk},
                                {"scratch_bytes", cuda::head_cross_entropy_scratch_bytes(
                                                      chunk, s.C, s.Vp, DType::bf16, true)},
                                {"path", path_name(path)},
                                {"median_ms", ms},
                                {"roofline_ms", roof_ms}});
            }
        }
    }
    cuda::matmul_destroy_handle(launch.blas);
    if (flags.json.empty()) return 0;
    return bench::write_json("head_ce_bench", flags.json,
                             {{"device", prop.name}, {"reps", flags.reps}, {"rows", rows}});
}

}  // namespace
}  // namespace napkin

int main(int argc, char** argv) {
    using namespace napkin;
    const std::string usage =
        "usage: head_ce_bench [--account] [--reps N] [--warmup N] "
        "[--shape gpt2-b8|gpt2-b64|tiny] [--json FILE]\n";
    bench::BenchFlags flags;
    flags.switches["account"] = false;
    flags.reps = 10;
    flags.warmup = 3;
    bench::parse_flags(argc, argv, "head_ce_bench", usage, {"gpt2-b8", "gpt2-b64", "tiny"}, flags);
    for (const Shape& s : shapes())
        if (s.name != std::string("tiny") && (flags.shape.empty() || flags.shape == s.name))
            print_account(s);
    if (flags.switches.at("account")) return 0;
    const auto prop = bench::first_device("head_ce_bench");
    if (!prop) return 0;
    return run(flags, *prop);
}
