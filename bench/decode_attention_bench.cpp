// napkin's CUDA decode attention (kernels/decode_attention.h), one decode step (Tq 1) over a bf16
// KV cache: flash-decoding (split-KV: a block per (sequence, kv-head, chunk of 128 keys), then
// the combine) against the single-pass kernel (a block per (sequence, head) over the whole
// cache), the baseline in the same run. B in {1, 8}, contexts {1k, 4k, 16k, 32k} keys, at GPT-2
// 124M's attention (NH 12, HD 64) and a Llama-like GQA one (NH 32, KVH 8, HD 128). Median
// microseconds of CUDA-event-timed calls after warm-up, and the napkin math beside it: the cache's
// bytes (2 B keys KVH HD x 2, read once; decode_attention_cost's cache term), the GB/s that
// makes, and its fraction of the GPU's memory bandwidth (estimator/hardware.h's table for this
// device; the H100 SXM's when the table lacks it). A decode step is memory-bound, so that
// fraction is the kernel's whole story. Each row's two outputs are compared first (largest
// difference printed; both are tested against the CPU in tests/kernels_cuda/).
//   decode_attention_bench [--reps N] [--warmup N] [--shape gpt2|llama|tiny] [--json FILE]
// --shape tiny (B 1, 300 keys, NH 4, KVH 2): a dry run, for decode_attention_bench_emu on the
// CUDA emulator. Without a GPU it says so and exits 0. Never run as a test.
#include <cuda_runtime_api.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "bench/cuda_bench.h"
#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/durable_file.h"
#include "core/half.h"
#include "estimator/hardware.h"
#include "kernels/decode_attention.h"

namespace {

using namespace napkin;

struct Model {
    const char* name;
    int NH, KVH;
    std::int64_t HD;
    std::vector<std::int64_t> batches, contexts;
    bool by_name_only = false;  // not in the default list
};

const Model kModels[] = {
    {"gpt2", 12, 12, 64, {1, 8}, {1024, 4096, 16384, 32768}},
    {"llama", 32, 8, 128, {1, 8}, {1024, 4096, 16384, 32768}},
    {"tiny", 4, 2, 64, {1}, {300}, true},
};

constexpr const char* kUsage =
    "usage: decode_attention_bench [--reps N] [--warmup N] [--shape gpt2|llama|tiny] "
    "[--json FILE]\n";

bench::BenchFlags parse(int argc, char** argv) {
    bench::BenchFlags o;
    o.reps = 50;
    o.warmup = 10;
    std::vector<std::string> names;
    for (const Model& m : kModels)
        names.emplace_back(m.name);
    bench::parse_flags(argc, argv, "decode_attention_bench", kUsage, names, o);
    return o;
}

template <class T>
using Device = bench::DeviceBuffer<T>;

// Median microseconds of `call` (bench::median_ms).
double median_us(const std::function<void()>& call, cudaStream_t stream, int warmup, int reps) {
    return 1e3 * bench::median_ms(call, stream, warmup, reps);
}

struct Row {
    const Model* model;
    std::int64_t B, keys;
    double split_us, single_us, cache_bytes, max_diff;
    std::int64_t blocks_split, blocks_single;
};

// One decode step at `keys` keys (pos = keys - 1, a cache of exactly that many positions).
Row measure(const Model& m, std::int64_t B, std::int64_t keys, const bench::BenchFlags& o,
            cudaStream_t stream, std::mt19937& rng) {
    const std::int64_t S = keys, HD = m.HD;
    const std::int64_t cache = B * S * m.KVH * HD;
    Device<bf16_t> qkv(B * (m.NH + 2ll * m.KVH) * HD, &rng), K(cache, &rng), V(cache, &rng);
    Device<bf16_t> out_split(B * m.NH * HD, nullptr), out_single(B * m.NH * HD, nullptr);
    const std::int64_t floats =
        decode_attention_workspace_floats(B, 1, m.NH, HD, keys, kDecodeAttentionChunk);
    Device<float> ws(floats, nullptr);
    DecodeAttentionArgs<bf16_t> a{.out = out_single.get(),
                                  .qkv = qkv.get(),
                                  .k_cache = K.get(),
                                  .v_cache = V.get(),
                                  .B = B,
                                  .Tq = 1,
                                  .S = S,
                                  .pos = keys - 1,
                                  .NH = m.NH,
                                  .KVH = m.KVH,
                                  .HD = HD};
    DecodeAttentionArgs<bf16_t> split = a;
    split.out = out_split.get();
    split.workspace = ws.get();
    split.workspace_floats = floats;
    auto run_single = [&] { cuda::decode_attention<bf16_t>(a, {stream}); };
    auto run_split = [&] { cuda::decode_attention<bf16_t>(split, {stream}); };
    run_single();
    run_split();
    NAPKIN_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<bf16_t> x = out_split.host(), y = out_single.host();
    Row r{&m, B, keys, 0, 0, 0, 0, 0, 0};
    for (std::size_t i = 0; i < x.size(); ++i)
        r.max_diff = std::max(r.max_diff, std::abs(static_cast<double>(static_cast<float>(x[i])) -
                                                   static_cast<float>(y[i])));
    r.split_us = median_us(run_split, stream, o.warmup, o.reps);
    r.single_us = median_us(run_single, stream, o.warmup, o.reps);
    r.cache_bytes = 2.0 * static_cast<double>(cache) * 2;  // K and V, bf16, read once
    r.blocks_split = B * m.KVH * decode_attention_splits(keys, kDecodeAttentionChunk);
    r.blocks_single = B * m.NH;
    return r;
}

void print_row(const Row& r, double bandwidth) {
    const double split_gbs = r.cache_bytes / (r.split_us * 1e-6) / 1e9;
    const double single_gbs = r.cache_bytes / (r.single_us * 1e-6) / 1e9;
    std::printf(
        "%-6s %2lld %6lld %3d %3d %4lld %9.1f | %6lld %9.1f %8.1f %6.1f%% | %6lld %9.1f %8.1f "
        "%6.1f%% | %7.2fx %9.2g\n",
        r.model->name, static_cast<long long>(r.B), static_cast<long long>(r.keys), r.model->NH,
        r.model->KVH, static_cast<long long>(r.model->HD), r.cache_bytes / 1e6,
        static_cast<long long>(r.blocks_split), r.split_us, split_gbs,
        100.0 * split_gbs * 1e9 / bandwidth, static_cast<long long>(r.blocks_single), r.single_us,
        single_gbs, 100.0 * single_gbs * 1e9 / bandwidth, r.single_us / r.split_us, r.max_diff);
}

nlohmann::json json_row(const Row& r) {
    return {{"shape", r.model->name},
            {"B", r.B},
            {"keys", r.keys},
            {"NH", r.model->NH},
            {"KVH", r.model->KVH},
            {"HD", r.model->HD},
            {"cache_bytes", r.cache_bytes},
            {"split_us", r.split_us},
            {"single_us", r.single_us},
            {"split_blocks", r.blocks_split},
            {"single_blocks", r.blocks_single},
            {"max_abs_diff", r.max_diff}};
}

}  // namespace

int main(int argc, char** argv) {
    const bench::BenchFlags o = parse(argc, argv);
    const std::optional<cudaDeviceProp> device = bench::first_device("decode_attention_bench");
    if (!device) return 0;
    const cudaDeviceProp& prop = *device;
    const GpuSpec* gpu = gpu_for_device_name(prop.name);
    if (gpu == nullptr) gpu = find_gpu("h100-sxm");
    const double bandwidth = gpu->bandwidth_tbs * 1e12;
    std::printf(
        "decode_attention_bench on %s (sm_%d%d, %d SMs); %% of bandwidth is of the %s's %.2f "
        "TB/s\n",
        prop.name, prop.major, prop.minor, prop.multiProcessorCount,
        std::string(gpu->full_name).c_str(), gpu->bandwidth_tbs);
    std::printf(
        "one decode step (Tq 1), bf16 cache; median of %d after %d warm-up calls; MB: the "
        "cache's keys and values read once; split: chunks of %lld keys\n\n",
        o.reps, o.warmup, static_cast<long long>(kDecodeAttentionChunk));
    std::printf("%-6s %2s %6s %3s %3s %4s %9s | %-33s | %-33s |\n", "", "", "", "", "", "", "",
                "split (flash-decoding)", "single pass");
    std::printf("%-6s %2s %6s %3s %3s %4s %9s | %6s %9s %8s %7s | %6s %9s %8s %7s | %8s %9s\n",
                "shape", "B", "keys", "NH", "KVH", "HD", "cache MB", "blocks", "us", "GB/s", "% bw",
                "blocks", "us", "GB/s", "% bw", "speedup", "max diff");
    cudaStream_t stream = nullptr;
    NAPKIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamDefault));
    std::mt19937 rng(1234);
    nlohmann::json rows = nlohmann::json::array();
    for (const Model& m : kModels) {
        if (o.shape.empty() ? m.by_name_only : o.shape != m.name) continue;
        for (std::int64_t B : m.batches) {
            for (std::int64_t keys : m.contexts) {
                const Row r = measure(m, B, keys, o, stream, rng);
                print_row(r, bandwidth);
                rows.push_back(json_row(r));
            }
        }
        std::printf("\n");
    }
    NAPKIN_CUDA_CHECK(cudaStreamDestroy(stream));
    if (!o.json.empty()) {
        const nlohmann::json doc = {{"device", prop.name},
                                    {"sm", prop.major * 10 + prop.minor},
                                    {"bandwidth_bytes_per_s", bandwidth},
                                    {"chunk", kDecodeAttentionChunk},
                                    {"reps", o.reps},
                                    {"warmup", o.warmup},
                                    {"rows", rows}};
        return bench::write_json("decode_attention_bench", o.json, doc);
    }
    return 0;
}
