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

struct Options {
    int reps = 50, warmup = 10;
    std::string shape, json;
};

constexpr const char* kUsage =
    "usage: decode_attention_bench [--reps N] [--warmup N] [--shape gpt2|llama|tiny] "
    "[--json FILE]\n";

[[noreturn]] void usage_error(const std::string& what) {
    std::fprintf(stderr, "decode_attention_bench: %s\n%s", what.c_str(), kUsage);
    std::exit(2);
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; i += 2) {
        const std::string flag = argv[i];
        if (flag == "-h" || flag == "--help") {
            std::fputs(kUsage, stdout);
            std::exit(0);
        }
        if (i + 1 >= argc) usage_error(flag + " needs a value");
        const std::string value = argv[i + 1];
        if (flag == "--reps")
            o.reps = std::max(1, std::atoi(value.c_str()));
        else if (flag == "--warmup")
            o.warmup = std::max(0, std::atoi(value.c_str()));
        else if (flag == "--shape")
            o.shape = value;
        else if (flag == "--json")
            o.json = value;
        else
            usage_error("unknown flag " + flag);
    }
    const bool known =
        o.shape.empty() || std::any_of(std::begin(kModels), std::end(kModels),
                                       [&](const Model& m) { return o.shape == m.name; });
    if (!known) usage_error("--shape: expected gpt2, llama or tiny, got " + o.shape);
    return o;
}

// Device memory of n elements of T; bf16 drawn from N(0, 1) when a generator is given.
template <class T>
class Device {
public:
    Device(std::int64_t n, std::mt19937* rng) : n_(static_cast<std::size_t>(n)) {
        NAPKIN_CUDA_CHECK(cudaMalloc(&p_, n_ * sizeof(T)));
        NAPKIN_CUDA_CHECK(cudaMemset(p_, 0, n_ * sizeof(T)));
        if constexpr (std::is_same_v<T, bf16_t>) {
            if (rng == nullptr) return;
            std::normal_distribution<float> d(0.0f, 1.0f);
            std::vector<bf16_t> host(n_);
            for (bf16_t& v : host)
                v = bf16_t(d(*rng));
            NAPKIN_CUDA_CHECK(cudaMemcpy(p_, host.data(), n_ * 2, cudaMemcpyHostToDevice));
        }
    }
    ~Device() { cudaFree(p_); }
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;
    T* get() const { return static_cast<T*>(p_); }
    std::vector<T> host() const {
        std::vector<T> h(n_);
        NAPKIN_CUDA_CHECK(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
        return h;
    }

private:
    std::size_t n_;
    void* p_ = nullptr;
};

// Median microseconds of `call` on `stream` over `reps` timed calls after `warmup`.
double median_us(const std::function<void()>& call, cudaStream_t stream, int warmup, int reps) {
    cudaEvent_t start = nullptr, stop = nullptr;
    NAPKIN_CUDA_CHECK(cudaEventCreate(&start));
    NAPKIN_CUDA_CHECK(cudaEventCreate(&stop));
    for (int i = 0; i < warmup; ++i)
        call();
    std::vector<double> us;
    for (int i = 0; i < reps; ++i) {
        NAPKIN_CUDA_CHECK(cudaEventRecord(start, stream));
        call();
        NAPKIN_CUDA_CHECK(cudaEventRecord(stop, stream));
        NAPKIN_CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0.0f;
        NAPKIN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        us.push_back(1e3 * ms);
    }
    NAPKIN_CUDA_CHECK(cudaEventDestroy(start));
    NAPKIN_CUDA_CHECK(cudaEventDestroy(stop));
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
}

struct Row {
    const Model* model;
    std::int64_t B, keys;
    double split_us, single_us, cache_bytes, max_diff;
    std::int64_t blocks_split, blocks_single;
};

// One decode step at `keys` keys (pos = keys - 1, a cache of exactly that many positions).
Row measure(const Model& m, std::int64_t B, std::int64_t keys, const Options& o,
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
    const Options o = parse(argc, argv);
    int devices = 0;
    const cudaError_t err = cudaGetDeviceCount(&devices);
    if (err != cudaSuccess || devices == 0) {
        std::printf("decode_attention_bench: no CUDA device (%s); nothing to measure\n",
                    err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
        return 0;
    }
    cudaDeviceProp prop{};
    NAPKIN_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
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
        try {
            write_file_durably(o.json, doc.dump(2) + "\n");
        } catch (const InputError& e) {
            std::fprintf(stderr, "decode_attention_bench: %s\n", e.what());
            return 1;
        }
    }
    return 0;
}
