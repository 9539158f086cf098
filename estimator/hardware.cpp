// The hardware table. Sources: docs/HARDWARE.md (one row per value).
#include "estimator/hardware.h"

#include "core/check.h"

namespace napkin {

double GpuSpec::peak_tflops(DType t) const {
    switch (t) {
        case DType::f32:
            return tflops_fp32;
        case DType::f16:
            return tflops_fp16;
        case DType::bf16:
            return tflops_bf16;
        case DType::f8e4m3:
        case DType::f8e5m2:
            return tflops_fp8;
        case DType::i8:
            return tflops_int8;
        case DType::nf4:
            return tflops_bf16;  // NF4 weights are dequantized to bf16 for the GEMM
    }
    return 0;
}

const std::vector<GpuSpec>& gpu_table() {
    // Dense peaks: NVIDIA datasheets print sparse figures (marked *), halved here; whitepaper
    // tables print "dense/sparse" and the dense one is taken. GeForce rows use the FP32-accumulate
    // figures (half the FP16-accumulate ones), which is what training runs. docs/HARDWARE.md has
    // every value, its document and the uncertain ones.
    //  name, full name, fp32, tf32, bf16, fp16, fp8, int8, GB, TB/s, source, node link, network
    static const std::vector<GpuSpec> table = {
        {"h100-sxm", "NVIDIA H100 SXM5 80GB", 67, 494.5, 989.5, 989.5, 1979, 1979, 80, 3.35,
         "NVIDIA H100 Tensor Core GPU datasheet", "nvlink4", "ib-ndr"},
        {"h100-pcie", "NVIDIA H100 PCIe 80GB", 51, 378, 756.5, 756.5, 1513, 1513, 80, 2.0,
         "NVIDIA H100 Tensor Core GPU datasheet (2022 SXM/PCIe edition)", "pcie5", "ib-ndr"},
        {"h200", "NVIDIA H200 SXM 141GB", 67, 494.5, 989.5, 989.5, 1979, 1979, 141, 4.8,
         "NVIDIA H200 Tensor Core GPU datasheet", "nvlink4", "ib-ndr"},
        {"a100-40gb", "NVIDIA A100 SXM4 40GB", 19.5, 156, 312, 312, 0, 624, 40, 1.555,
         "NVIDIA A100 Tensor Core GPU Architecture whitepaper, Table 4", "nvlink3", "ib-hdr"},
        {"a100-80gb", "NVIDIA A100 SXM4 80GB", 19.5, 156, 312, 312, 0, 624, 80, 2.039,
         "NVIDIA A100 Tensor Core GPU datasheet", "nvlink3", "ib-hdr"},
        // HGX B200 per GPU as NVIDIA's Blackwell datasheet prints it: 180 GB, 7.7 TB/s.
        {"b200", "NVIDIA B200 180GB (HGX B200)", 75, 1100, 2250, 2250, 4500, 4500, 180, 7.7,
         "NVIDIA Blackwell datasheet, HGX B200 per GPU", "nvlink5", "ib-ndr"},
        {"l4", "NVIDIA L4 24GB", 30.3, 60, 121, 121, 242.5, 242.5, 24, 0.3,
         "NVIDIA L4 Tensor Core GPU datasheet", "pcie4", ""},
        // Turing: fp16 tensor cores only; no sparsity, so the datasheet figures are dense.
        {"t4", "NVIDIA T4 16GB", 8.1, 0, 0, 65, 0, 130, 16, 0.32,
         "NVIDIA T4 Tensor Core GPU datasheet", "pcie3", ""},
        {"rtx3090", "NVIDIA GeForce RTX 3090 24GB", 35.6, 35.6, 71, 71, 0, 284, 24, 0.936,
         "NVIDIA Ampere GA102 GPU Architecture whitepaper v2, Appendix A", "pcie4", ""},
        {"rtx4090", "NVIDIA GeForce RTX 4090 24GB", 82.6, 82.6, 165.2, 165.2, 330.3, 660.6, 24,
         1.008, "NVIDIA Ada GPU Architecture whitepaper (v2.02 or later), Appendix A", "pcie4", ""},
        {"mi300x", "AMD Instinct MI300X 192GB", 163.4, 653.7, 1307.4, 1307.4, 2614.9, 2614.9, 192,
         5.3, "AMD Instinct MI300X data sheet", "", ""},
    };
    return table;
}

const GpuSpec* find_gpu(std::string_view name) {
    for (const auto& g : gpu_table()) {
        if (g.name == name) return &g;
    }
    return nullptr;
}

const GpuSpec* gpu_for_device_name(std::string_view device) {
    auto has = [&](const char* s) { return device.find(s) != std::string_view::npos; };
    if (has("H100")) return find_gpu(has("PCIe") ? "h100-pcie" : "h100-sxm");
    if (has("H200")) return find_gpu("h200");
    if (has("A100")) return find_gpu(has("40GB") ? "a100-40gb" : "a100-80gb");
    if (has("B200")) return find_gpu("b200");
    return nullptr;
}

const GpuSpec& gpu_or_throw(std::string_view name) {
    if (const GpuSpec* g = find_gpu(name)) return *g;
    std::string names;
    for (const auto& g : gpu_table()) {
        if (!names.empty()) names += '|';
        names += g.name;
    }
    throw UsageError("{gpu}: unknown GPU '" + std::string(name) + "' (expected " + names + ")");
}

}  // namespace napkin
