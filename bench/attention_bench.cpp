// napkin's CUDA flash attention (kernels/attention.h), forward and backward, bf16, at GPT-2
// 124M's shape (B 8, T 1024, NH 12, HD 64) and a Llama-like GQA one (B 2, T 4096, NH 32, KVH 8,
// HD 128): the tensor-core kernels (attention_flash_mma_*: mma.sync at HD 64 and 128,
// kernels/cuda/attention_fa2_*.cu) and, as the baseline in the same run, the SIMT kernels
// (kernels/cuda/attention.cu, fp32 FMA). Median time over CUDA-event-timed calls after warm-up,
// the napkin math beside it: model FLOPs from attention_forward_cost / attention_backward_cost
// (4 and 8 B NH HD T(T+1)/2), the bytes they move, the fraction of the H100 SXM's dense bf16
// peak; for the backward also the hardware rate, with the 6 B NH HD T(T+1)/2 FLOPs the two-pass
// backward spends recomputing S (twice) and dP (once more). Each shape's forward outputs of the two
// paths are compared first (largest difference printed; both are tested against the CPU in
// tests/kernels_cuda/attention_test.cpp). bench/attention_vs_sdpa.py reads --json to set napkin
// against PyTorch's scaled_dot_product_attention on the same GPU.
// --sweep times the mma.sync kernels' candidate tiles against the engine's instead
// (bench/attention_sweep.h): at gpt2, llama and gpt2-hd128 (GPT-2's sizes at HD 128, MHA), or the
// one --shape; tiny and tiny-hd128 are its dry runs on the emulator.
//   attention_bench [--sweep] [--reps N] [--warmup N] [--simt-reps N]
//                   [--shape gpt2|llama|gpt2-hd128|tiny|tiny-hd128] [--json FILE]
// Without a GPU it says so and exits 0. Never run as a test.
#include <cuda_runtime_api.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "bench/attention_sweep.h"
#include "bench/cuda_bench.h"
#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/durable_file.h"
#include "core/half.h"
#include "estimator/hardware.h"
#include "kernels/attention.h"

namespace {

using namespace napkin;

struct Shape {
    const char* name;
    const char* what;
    std::int64_t B, T;
    int NH, KVH;
    std::int64_t HD;
    bool by_name_only = false;  // not in the default list
    bool swept = false;         // in --sweep's default list
};

constexpr Shape kShapes[] = {
    {"gpt2", "gpt2-124m", 8, 1024, 12, 12, 64, false, true},
    {"llama", "llama-like gqa", 2, 4096, 32, 8, 128, false, true},
    {"gpt2-hd128", "gpt2 sizes hd128", 8, 1024, 12, 12, 128, true, true},
    // Dry runs of the bench, its sweep and its scripts on the CPU emulator (attention_bench_emu).
    {"tiny", "tiny", 1, 130, 4, 2, 64, true},
    {"tiny-hd128", "tiny hd128", 1, 100, 4, 2, 128, true},
};

constexpr const char* kUsage =
    "usage: attention_bench [--sweep] [--reps N] [--warmup N] [--simt-reps N]\n"
    "                       [--shape gpt2|llama|gpt2-hd128|tiny|tiny-hd128] [--json FILE]\n"
    "  --sweep: the mma.sync kernels' candidate tiles against the engine's "
    "(bench/attention_fa2_candidates.cu)\n";

// --simt-reps: the SIMT baseline's timed calls (it is slow: fewer); --sweep, a switch.
bench::BenchFlags parse(int argc, char** argv) {
    bench::BenchFlags o;
    o.counts["simt-reps"] = 5;
    o.switches["sweep"] = false;
    std::vector<std::string> names;
    for (const Shape& s : kShapes)
        names.emplace_back(s.name);
    bench::parse_flags(argc, argv, "attention_bench", kUsage, names, o);
    return o;
}

using Device = bench::DeviceBuffer<bf16_t>;
using bench::median_ms;

AttentionShape attention_shape(const Shape& s) {
    return AttentionShape{.B = s.B,
                          .T = s.T,
                          .NH = s.NH,
                          .KVH = s.KVH,
                          .HD = s.HD,
                          .impl = AttentionImpl::flash,
                          .dt = DType::bf16};
}

struct Row {
    const char* dir;
    const char* path;
    double ms, flops, hardware_flops, bytes;
};

// One shape's buffers and its four timings (mma and SIMT, forward and backward).
std::vector<Row> measure(const Shape& s, const bench::BenchFlags& o, cudaStream_t stream,
                         std::mt19937& rng, double& max_diff) {
    const std::int64_t qkv_n = s.B * s.T * (s.NH + 2ll * s.KVH) * s.HD;
    const std::int64_t out_n = s.B * s.T * s.NH * s.HD;
    Device qkv(qkv_n, &rng), dout(out_n, &rng), out(out_n, nullptr), out_simt(out_n, nullptr);
    Device dqkv(qkv_n, nullptr);
    void* lse_bytes = nullptr;
    NAPKIN_CUDA_CHECK(cudaMalloc(&lse_bytes, static_cast<std::size_t>(s.B * s.NH * s.T) * 4));
    float* lse = static_cast<float*>(lse_bytes);
    const auto B = s.B, T = s.T, HD = s.HD;
    const int NH = s.NH, KVH = s.KVH;
    auto fwd_simt = [&] {
        cuda::attention_flash_simt_forward<bf16_t>(
            {out_simt.get(), lse, qkv.get(), B, T, NH, KVH, HD}, {stream});
    };
    auto fwd_mma = [&] {
        cuda::attention_flash_mma_forward<bf16_t>({out.get(), lse, qkv.get(), B, T, NH, KVH, HD},
                                                  {stream});
    };
    // The backward accumulates into dqkv at every call; its values only grow, and the time does
    // not depend on them.
    auto bwd_simt = [&] {
        cuda::attention_flash_simt_backward<bf16_t>(
            {dqkv.get(), dout.get(), out.get(), qkv.get(), lse, B, T, NH, KVH, HD}, {stream});
    };
    auto bwd_mma = [&] {
        cuda::attention_flash_mma_backward<bf16_t>(
            {dqkv.get(), dout.get(), out.get(), qkv.get(), lse, B, T, NH, KVH, HD}, {stream});
    };
    // The two forwards agree (the tests hold both to the CPU; this is the same run's check).
    fwd_simt();
    fwd_mma();
    NAPKIN_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<bf16_t> a = out.host(), b = out_simt.host();
    max_diff = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i)
        max_diff = std::max(max_diff, std::abs(static_cast<double>(static_cast<float>(a[i])) -
                                               static_cast<float>(b[i])));

    const AttentionShape shape = attention_shape(s);
    const KernelCost fc = attention_forward_cost(shape), bc = attention_backward_cost(shape);
    const double fwd = static_cast<double>(fc.flops), bwd = static_cast<double>(bc.flops);
    const double bwd_hw =
        bwd + 3.0 * static_cast<double>(attention_backward_recompute_flops(shape));
    const double fwd_bytes = static_cast<double>(fc.bytes_read + fc.bytes_written);
    const double bwd_bytes = static_cast<double>(bc.bytes_read + bc.bytes_written);
    std::vector<Row> rows = {
        {"fwd", "mma", median_ms(fwd_mma, stream, o.warmup, o.reps), fwd, fwd, fwd_bytes},
        {"bwd", "mma", median_ms(bwd_mma, stream, o.warmup, o.reps), bwd, bwd_hw, bwd_bytes},
        {"fwd", "simt", median_ms(fwd_simt, stream, 1, o.counts.at("simt-reps")), fwd, fwd,
         fwd_bytes},
        {"bwd", "simt", median_ms(bwd_simt, stream, 1, o.counts.at("simt-reps")), bwd, bwd_hw,
         bwd_bytes}};
    NAPKIN_CUDA_CHECK(cudaFree(lse));
    return rows;
}

void print_rows(const Shape& s, const std::vector<Row>& rows, double max_diff, double peak) {
    for (const Row& r : rows) {
        const double tflops = r.flops / (r.ms * 1e-3) / 1e12;
        const double hw = r.hardware_flops / (r.ms * 1e-3) / 1e12;
        double baseline = 0.0;  // the SIMT row of the same direction
        for (const Row& other : rows)
            if (std::strcmp(other.dir, r.dir) == 0 && std::strcmp(other.path, "simt") == 0)
                baseline = other.ms;
        char speedup[32] = "";
        if (std::strcmp(r.path, "mma") == 0)
            std::snprintf(speedup, sizeof speedup, "%.1fx", baseline / r.ms);
        std::printf(
            "%-15s %2lld %5lld %3d %3d %4lld  %-3s %-4s %9.3f %8.1f %6.1f%% %8.1f %8.1f %8s\n",
            s.what, static_cast<long long>(s.B), static_cast<long long>(s.T), s.NH, s.KVH,
            static_cast<long long>(s.HD), r.dir, r.path, r.ms, tflops, 100.0 * tflops / peak, hw,
            r.bytes / (r.ms * 1e-3) / 1e9, speedup);
    }
    std::printf(
        "%-15s GFLOP fwd %.1f, bwd %.1f (+%.1f recomputed); MB moved fwd %.1f, bwd %.1f; "
        "largest |mma - simt| of out %.3g\n\n",
        s.what, rows[0].flops / 1e9, rows[1].flops / 1e9,
        (rows[1].hardware_flops - rows[1].flops) / 1e9, rows[0].bytes / 1e6, rows[1].bytes / 1e6,
        max_diff);
}

nlohmann::json json_rows(const Shape& s, const std::vector<Row>& rows) {
    nlohmann::json out = nlohmann::json::array();
    for (const Row& r : rows)
        out.push_back({{"shape", s.name},
                       {"B", s.B},
                       {"T", s.T},
                       {"NH", s.NH},
                       {"KVH", s.KVH},
                       {"HD", s.HD},
                       {"dir", r.dir},
                       {"path", r.path},
                       {"ms", r.ms},
                       {"flops", r.flops},
                       {"hardware_flops", r.hardware_flops},
                       {"tflops", r.flops / (r.ms * 1e-3) / 1e12}});
    return out;
}

// --sweep: the candidate tiles at each shape of the sweep's list (or --shape's); the best
// backward passes of each shape into `best`.
// `lost`: the device's sticky error when a candidate faulted (the rows so far are returned).
nlohmann::json sweep(const bench::BenchFlags& o, cudaStream_t stream, std::mt19937& rng,
                     nlohmann::json& best, std::string& lost) {
    std::printf("median of %d after %d warm-up calls\n", o.reps, o.warmup);
    bench::print_sweep_header();
    nlohmann::json rows = nlohmann::json::array();
    best = nlohmann::json::array();
    for (const Shape& s : kShapes) {
        if (o.shape.empty() ? !s.swept : o.shape != s.name) continue;
        const bench::SweepShape shape{s.name, s.what, s.B, s.T, s.NH, s.KVH, s.HD};
        nlohmann::json passes;
        for (auto& row : bench::sweep_shape(shape, o.warmup, o.reps, stream, rng, &passes, &lost))
            rows.push_back(row);
        if (!passes.is_null()) best.push_back(passes);
        if (!lost.empty()) break;
    }
    return rows;
}

// The default table: mma and SIMT, forward and backward, at each shape.
nlohmann::json table(const bench::BenchFlags& o, cudaStream_t stream, std::mt19937& rng,
                     double peak) {
    std::printf(
        "causal flash attention, bf16; median of %d after %d warm-up calls (SIMT: %d after "
        "1); TFLOP/s of model FLOPs (attention_forward_cost / attention_backward_cost), "
        "hw: with the backward's recomputation; GB/s of the bytes the cost counts\n\n",
        o.reps, o.warmup, o.counts.at("simt-reps"));
    std::printf("%-15s %2s %5s %3s %3s %4s  %-3s %-4s %9s %8s %7s %8s %8s %8s\n", "shape", "B", "T",
                "NH", "KVH", "HD", "dir", "path", "median ms", "TFLOP/s", "% peak", "hw TF/s",
                "GB/s", "vs simt");
    nlohmann::json rows = nlohmann::json::array();
    for (const Shape& s : kShapes) {
        if (o.shape.empty() ? s.by_name_only : o.shape != s.name) continue;
        double max_diff = 0.0;
        const std::vector<Row> r = measure(s, o, stream, rng, max_diff);
        print_rows(s, r, max_diff, peak);
        for (const auto& j : json_rows(s, r))
            rows.push_back(j);
    }
    return rows;
}

}  // namespace

int main(int argc, char** argv) {
    const bench::BenchFlags o = parse(argc, argv);
    const bool sweep_tiles = o.switches.at("sweep");
    const std::optional<cudaDeviceProp> device = bench::first_device("attention_bench");
    if (!device) return 0;
    const cudaDeviceProp& prop = *device;
    const GpuSpec* h100 = find_gpu("h100-sxm");
    std::printf(
        "attention_bench on %s (sm_%d%d); %% of peak is of the %s dense bf16 peak "
        "(%.1f TFLOP/s)\n",
        prop.name, prop.major, prop.minor, std::string(h100->full_name).c_str(), h100->tflops_bf16);
    cudaStream_t stream = nullptr;
    NAPKIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamDefault));
    std::mt19937 rng(1234);
    nlohmann::json best_passes;
    std::string lost;
    const nlohmann::json rows = sweep_tiles ? sweep(o, stream, rng, best_passes, lost)
                                            : table(o, stream, rng, h100->tflops_bf16);
    if (lost.empty()) NAPKIN_CUDA_CHECK(cudaStreamDestroy(stream));
    if (!o.json.empty()) {
        nlohmann::json doc = {{"device", prop.name},
                              {"sm", prop.major * 10 + prop.minor},
                              {"reps", o.reps},
                              {"warmup", o.warmup},
                              {sweep_tiles ? "sweep" : "rows", rows}};
        if (sweep_tiles) doc["best_backward_passes"] = best_passes;
        if (!lost.empty()) doc["device_lost"] = lost;
        if (const int rc = bench::write_json("attention_bench", o.json, doc); rc != 0) return rc;
    }
    if (!lost.empty()) {
        std::fprintf(stderr, "attention_bench: the sweep stopped: the device is lost (%s)\n",
                     lost.c_str());
        return 1;
    }
    return 0;
}
