// What the CUDA kernel benches share (attention_bench, decode_attention_bench): device buffers
// filled with N(0, 1) draws, a median of CUDA-event-timed calls, and the flags every one of them
// takes (--reps, --warmup, --shape, --json; a bench's own integer flags beside them). Header only:
// each bench is one program, built for the GPU and for the emulator (bench/CMakeLists.txt).
#pragma once

#include <cuda_runtime_api.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/durable_file.h"
#include "core/half.h"

namespace napkin::bench {

// Device memory of n elements of T, zeros, or bf16 draws from N(0, 1) when a generator is given.
template <class T>
class DeviceBuffer {
public:
    DeviceBuffer(std::int64_t n, std::mt19937* rng) : n_(static_cast<std::size_t>(n)) {
        NAPKIN_CUDA_CHECK(cudaMalloc(&p_, n_ * sizeof(T)));
        NAPKIN_CUDA_CHECK(cudaMemset(p_, 0, n_ * sizeof(T)));
        if constexpr (std::is_same_v<T, bf16_t>) {
            if (rng == nullptr) return;
            std::normal_distribution<float> d(0.0f, 1.0f);
            std::vector<bf16_t> host(n_);
            for (bf16_t& v : host)
                v = bf16_t(d(*rng));
            NAPKIN_CUDA_CHECK(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
        }
    }
    ~DeviceBuffer() { cudaFree(p_); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
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

// Median milliseconds of `call` on `stream` over `reps` timed calls after `warmup` untimed ones.
inline double median_ms(const std::function<void()>& call, cudaStream_t stream, int warmup,
                        int reps) {
    cudaEvent_t start = nullptr, stop = nullptr;
    NAPKIN_CUDA_CHECK(cudaEventCreate(&start));
    NAPKIN_CUDA_CHECK(cudaEventCreate(&stop));
    for (int i = 0; i < warmup; ++i)
        call();
    std::vector<double> ms;
    for (int i = 0; i < reps; ++i) {
        NAPKIN_CUDA_CHECK(cudaEventRecord(start, stream));
        call();
        NAPKIN_CUDA_CHECK(cudaEventRecord(stop, stream));
        NAPKIN_CUDA_CHECK(cudaEventSynchronize(stop));
        float t = 0.0f;
        NAPKIN_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
        ms.push_back(t);
    }
    NAPKIN_CUDA_CHECK(cudaEventDestroy(start));
    NAPKIN_CUDA_CHECK(cudaEventDestroy(stop));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

struct BenchFlags {
    int reps = 20, warmup = 5;
    std::map<std::string, int> counts;     // the bench's own "--name" -> value (at least 1)
    std::map<std::string, bool> switches;  // the bench's own valueless "--name" -> given
    std::string shape, json;
};

// Parses `--flag value` pairs and the bench's own switches (`flags.switches`, no value) into
// `flags` (whose fields hold the defaults). A flag it does not
// know, a flag without its value, a count that is not a positive whole number or a --shape not
// in `shapes` exits 2 with the usage: a typo must not silently run the whole default list
// (minutes on the emulator). -h/--help prints the usage and exits 0.
inline void parse_flags(int argc, char** argv, const char* bench, const std::string& usage,
                        const std::vector<std::string>& shapes, BenchFlags& flags) {
    const auto fail = [&](const std::string& what) {
        std::fprintf(stderr, "%s: %s\n%s", bench, what.c_str(), usage.c_str());
        std::exit(2);
    };
    const auto count = [&](const std::string& flag, const std::string& value, int least) {
        char* end = nullptr;
        const long v = std::strtol(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || v < least || v > 1000000)
            fail(flag + ": expected a whole number from " + std::to_string(least) + ", got '" +
                 value + "'");
        return static_cast<int>(v);
    };
    for (int i = 1; i < argc; i += 2) {
        const std::string flag = argv[i];
        if (flag == "-h" || flag == "--help") {
            std::fputs(usage.c_str(), stdout);
            std::exit(0);
        }
        if (flag.rfind("--", 0) == 0 && flags.switches.count(flag.substr(2)) != 0) {
            flags.switches[flag.substr(2)] = true;
            --i;  // no value follows
            continue;
        }
        const bool known = flag == "--reps" || flag == "--warmup" || flag == "--shape" ||
                           flag == "--json" ||
                           (flag.rfind("--", 0) == 0 && flags.counts.count(flag.substr(2)) != 0);
        if (!known) fail("unknown flag " + flag);
        if (i + 1 >= argc) fail(flag + " needs a value");
        const std::string value = argv[i + 1];
        if (flag == "--reps")
            flags.reps = count(flag, value, 1);
        else if (flag == "--warmup")
            flags.warmup = count(flag, value, 0);
        else if (flag == "--shape")
            flags.shape = value;
        else if (flag == "--json")
            flags.json = value;
        else if (flag.rfind("--", 0) == 0 && flags.counts.count(flag.substr(2)) != 0)
            flags.counts[flag.substr(2)] = count(flag, value, 1);
        else
            fail("unknown flag " + flag);
    }
    if (!flags.shape.empty() &&
        std::find(shapes.begin(), shapes.end(), flags.shape) == shapes.end()) {
        std::string names;
        for (const std::string& s : shapes)
            names += (names.empty() ? "" : ", ") + s;
        fail("--shape: expected one of " + names + ", got " + flags.shape);
    }
}

// Device 0's properties, or none after one line saying there is no device (the bench then
// exits 0: there is nothing to measure, which is not an error).
inline std::optional<cudaDeviceProp> first_device(const char* bench) {
    int devices = 0;
    const cudaError_t err = cudaGetDeviceCount(&devices);
    if (err != cudaSuccess || devices == 0) {
        std::printf("%s: no CUDA device (%s); nothing to measure\n", bench,
                    err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
        return std::nullopt;
    }
    cudaDeviceProp prop{};
    NAPKIN_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    return prop;
}

// --json's document written whole or not at all; the exit status (1 with one line on failure).
inline int write_json(const char* bench, const std::string& path, const nlohmann::json& doc) {
    try {
        write_file_durably(path, doc.dump(2) + "\n");
    } catch (const InputError& e) {
        std::fprintf(stderr, "%s: %s\n", bench, e.what());
        return 1;
    }
    return 0;
}

}  // namespace napkin::bench
