// Choosing a device profile, and the profiles made from a device's ceilings
// (estimator/profile_catalog.h). The default efficiencies are docs/ESTIMATOR.md's ("Time").
#include "estimator/profile_catalog.h"

#include <unistd.h>

#include <fstream>
#include <functional>
#include <thread>

#include "core/check.h"

namespace napkin {

namespace {

// A well-tuned framework on a GPU, as fractions of the datasheet's dense peak: cuBLAS GEMMs by
// size (an H200's measured cuBLASLt rates, bench/results/2026-11-26-h200/gemm_bench.log: 39-71% at
// GPT-2's shapes with M = 8192, 77% at 4096^3), their backward at 85% of the forward's, the
// output layer with its loss at 55%; FlashAttention-2 at 55% forward and 45% backward (Dao 2023:
// 50-73% of an A100's peak forward, less backward), 20% for attention that materializes its
// scores; elementwise kernels at 60% of the memory bandwidth; 4 us of launch gap per op and
// 0.3 ms per step (the batch's copy, reading back the loss and the norm).
struct GemmDefault {
    std::int64_t m, n, k;
    double efficiency;
};
constexpr GemmDefault kGpuGemm[] = {
    {512, 512, 512, 0.25},   {2048, 2048, 2048, 0.60}, {8192, 768, 768, 0.40},
    {8192, 3072, 768, 0.60}, {4096, 4096, 4096, 0.75}, {16384, 16384, 16384, 0.80},
};
constexpr double kGpuBackwardOfForward = 0.85;
constexpr double kGpuHeadEfficiency = 0.55;
constexpr double kGpuFlashForward = 0.55, kGpuFlashBackward = 0.45, kGpuNaiveAttention = 0.20;
constexpr double kGpuStreamEfficiency = 0.60;
constexpr double kGpuOpSeconds = 4e-6, kGpuStepSeconds = 3e-4;
// Offload: PCIe at 80% of its rate (5.0 x16 on Hopper and later, 4.0 before), and a host Adam
// over fp32 states at 20 GB/s of update bytes (DeepSpeed's CPU Adam, Ren et al. 2021, sec. 5).
constexpr double kPcie5BytesPerS = 0.8 * 63.0e9, kPcie4BytesPerS = 0.8 * 31.5e9;
constexpr double kHostOptimizerBytesPerS = 20e9;

// napkin's CPU engine without a profile, as fractions of the sgemm rate and stream bandwidth
// measured at start: GEMMs at 80% (the sgemm is itself a large GEMM), 16-bit GEMMs at 40% (the
// operands are widened to fp32 first), attention at 20%, elementwise ops at 50%.
constexpr double kCpuGemm = 0.8, kCpuGemm16 = 0.4, kCpuAttention = 0.2, kCpuStream = 0.5;

// One point per table at efficiency x ceiling: a flat table.
void add_flat_tables(ComputeSection& s, const std::vector<std::pair<DType, double>>& gemm_rates,
                     double attention_rate, double naive_rate, double stream_rate,
                     double backward_factor, double head_factor) {
    for (const auto& [dtype, rate] : gemm_rates) {
        for (GemmPass pass : {GemmPass::forward, GemmPass::backward, GemmPass::head}) {
            const double f = pass == GemmPass::backward ? backward_factor
                             : pass == GemmPass::head   ? head_factor
                                                        : 1.0;
            s.gemm.push_back({dtype, pass, {{4096, 4096, 4096, f * rate}}});
        }
        for (Direction dir : {Direction::forward, Direction::backward}) {
            s.attention.push_back(
                {AttentionImpl::flash, dtype, true, dir, {{2048, 128, 64, attention_rate}}});
            s.attention.push_back(
                {AttentionImpl::naive, dtype, true, dir, {{2048, 128, 64, naive_rate}}});
        }
    }
    for (const auto& entry : kStreamOpNames)
        s.streaming.push_back({entry.value, DType::f32, {{1e6, stream_rate}}});
}

}  // namespace

DeviceIdentity gpu_identity(const GpuSpec& gpu) {
    DeviceIdentity d;
    d.kind = DeviceKind::cuda;
    d.name = std::string(gpu.full_name);
    d.gpu = std::string(gpu.name);
    d.memory_bytes = gpu.memory_gb * 1e9;
    return d;
}

DeviceProfile datasheet_profile(const GpuSpec& gpu) {
    DeviceProfile p;
    p.device = gpu_identity(gpu);
    p.made = {"datasheet", "(napkin's defaults)", "", "",
              "no measurement: the datasheet's peaks and bandwidth"};
    ComputeSection s;
    for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f8e4m3}) {
        const double peak = gpu.peak_tflops(t) * 1e12;
        if (peak <= 0) continue;
        p.peak_flops_per_s.emplace_back(t, peak);
        for (GemmPass pass : {GemmPass::forward, GemmPass::backward}) {
            GemmTable g{t, pass, {}};
            const double f = pass == GemmPass::backward ? kGpuBackwardOfForward : 1.0;
            for (const GemmDefault& d : kGpuGemm)
                g.points.push_back({d.m, d.n, d.k, f * d.efficiency * peak});
            s.gemm.push_back(std::move(g));
        }
        s.gemm.push_back({t, GemmPass::head, {{8192, 50304, 768, kGpuHeadEfficiency * peak}}});
        for (Direction dir : {Direction::forward, Direction::backward}) {
            const double flash = dir == Direction::forward ? kGpuFlashForward : kGpuFlashBackward;
            s.attention.push_back(
                {AttentionImpl::flash, t, true, dir, {{2048, 128, 64, flash * peak}}});
            s.attention.push_back(
                {AttentionImpl::naive, t, true, dir, {{2048, 128, 64, kGpuNaiveAttention * peak}}});
        }
    }
    const double bw = gpu.bandwidth_tbs * 1e12;
    p.memory_bytes_per_s = bw;
    for (const auto& entry : kStreamOpNames)
        s.streaming.push_back({entry.value, DType::bf16, {{1e6, kGpuStreamEfficiency * bw}}});
    s.overhead = {kGpuOpSeconds, kGpuStepSeconds};
    p.compute.push_back(std::move(s));
    const bool pcie5 = gpu.name.starts_with("h") || gpu.name.starts_with("b");
    const double pcie = pcie5 ? kPcie5BytesPerS : kPcie4BytesPerS;
    p.host_device = HostDeviceCopy{pcie, pcie, kHostOptimizerBytesPerS};
    p.gaps.push_back(
        "every rate is a default efficiency times the datasheet (docs/ESTIMATOR.md, \"Time\")");
    return p;
}

DeviceProfile cpu_roofline_profile(const DeviceIdentity& cpu, double sgemm_flops_per_s,
                                   double stream_bytes_per_s, int threads) {
    NAPKIN_ASSERT(sgemm_flops_per_s > 0 && stream_bytes_per_s > 0,
                  "a CPU roofline needs both ceilings");
    DeviceProfile p;
    p.device = cpu;
    p.made = {"datasheet",
              "(napkin's defaults over the sgemm rate and stream copy measured at start)", "", "",
              ""};
    p.peak_flops_per_s = {{DType::f32, sgemm_flops_per_s}};
    p.memory_bytes_per_s = stream_bytes_per_s;
    ComputeSection s;
    s.threads = threads;
    add_flat_tables(s,
                    {{DType::f32, kCpuGemm * sgemm_flops_per_s},
                     {DType::bf16, kCpuGemm16 * sgemm_flops_per_s},
                     {DType::f16, kCpuGemm16 * sgemm_flops_per_s}},
                    kCpuAttention * sgemm_flops_per_s, kCpuAttention * sgemm_flops_per_s,
                    kCpuStream * stream_bytes_per_s, 1.0, 1.0);
    p.compute.push_back(std::move(s));
    p.gaps.push_back(
        "no profile for this CPU: napkin's default efficiencies over its measured ceilings");
    return p;
}

DeviceIdentity this_cpu() {
    DeviceIdentity d;
    d.kind = DeviceKind::cpu;
    d.name = "unknown CPU";
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("model name", 0) != 0) continue;
        const auto colon = line.find(':');
        if (colon != std::string::npos)
            d.name = line.substr(line.find_first_not_of(' ', colon + 1));
        break;
    }
    d.logical_cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    d.memory_bytes =
        pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
    return d;
}

std::optional<DeviceProfile> shipped_profile_for(const DeviceIdentity& device) {
    for (const ShippedProfile& s : shipped_profiles()) {
        DeviceProfile p = parse_device_profile(s.text);
        if (profile_mismatch(p, device).empty()) return p;
    }
    return std::nullopt;
}

ChosenProfile choose_profile(const std::string& file, const DeviceIdentity& device, bool force,
                             std::string_view flag,
                             const std::function<DeviceProfile()>& fallback) {
    if (file == "datasheet")
        return {fallback(), "napkin's default efficiencies (" + std::string(flag) + " datasheet)",
                true};
    if (file.empty()) {
        for (const ShippedProfile& s : shipped_profiles()) {
            DeviceProfile p = parse_device_profile(s.text);
            if (profile_mismatch(p, device).empty())
                return {std::move(p), "profile " + std::string(s.file) + " (shipped)", false};
        }
        return {fallback(), "napkin's default efficiencies (no profile for " + device.name + ")",
                true};
    }
    DeviceProfile p = read_device_profile(file);
    const std::string mismatch = profile_mismatch(p, device);
    if (!mismatch.empty() && !force) {
        throw UsageError(std::string(flag) + " " + file + ": " + mismatch +
                         " ({profile_force} uses it anyway)");
    }
    return {std::move(p),
            "profile " + file + (mismatch.empty() ? "" : " (forced: " + mismatch + ")"), false};
}

}  // namespace napkin
