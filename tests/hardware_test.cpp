// The accelerator table (estimator/hardware.h): every row complete, names unique, lookups and the
// unknown-name error, and spot values from the datasheets in docs/HARDWARE.md.
#include "estimator/hardware.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <string_view>

#include "core/check.h"

namespace napkin {
namespace {

constexpr const char* kRequiredNames[] = {"h100-sxm",  "h100-pcie", "h200",  "a100-40gb",
                                          "a100-80gb", "b200",      "l4",    "t4",
                                          "rtx3090",   "rtx4090",   "mi300x"};

TEST(HardwareTable, EveryRowIsComplete) {
    ASSERT_FALSE(gpu_table().empty());
    for (const GpuSpec& g : gpu_table()) {
        SCOPED_TRACE(std::string(g.name));
        EXPECT_FALSE(g.name.empty());
        EXPECT_FALSE(g.full_name.empty());
        EXPECT_FALSE(g.source.empty());
        EXPECT_GT(g.memory_gb, 0);
        EXPECT_GT(g.bandwidth_tbs, 0);
        EXPECT_GT(g.tflops_fp32, 0);
        EXPECT_GT(std::max(g.tflops_bf16, g.tflops_fp16), 0);
        for (double v :
             {g.tflops_tf32, g.tflops_bf16, g.tflops_fp16, g.tflops_fp8, g.tflops_int8}) {
            EXPECT_GE(v, 0);
        }
        // Tensor-core 16-bit paths are never slower than the non-tensor fp32 units.
        EXPECT_GE(std::max(g.tflops_bf16, g.tflops_fp16), g.tflops_fp32);
    }
}

TEST(HardwareTable, NamesAreUniqueAndFindable) {
    std::set<std::string_view> names;
    for (const GpuSpec& g : gpu_table()) {
        EXPECT_TRUE(names.insert(g.name).second) << "duplicate name " << g.name;
        EXPECT_EQ(find_gpu(g.name), &g) << g.name;
        EXPECT_EQ(&gpu_or_throw(g.name), &g) << g.name;
    }
    for (const char* required : kRequiredNames) {
        EXPECT_NE(find_gpu(required), nullptr) << required;
    }
    EXPECT_EQ(names.size(), std::size(kRequiredNames));
}

TEST(HardwareTable, LookupIsExact) {
    EXPECT_EQ(find_gpu("h1000"), nullptr);
    EXPECT_EQ(find_gpu(""), nullptr);
    EXPECT_EQ(find_gpu("H100-SXM"), nullptr);  // names are case-sensitive flag values
    EXPECT_EQ(find_gpu("h100"), nullptr);      // no prefix matching
}

TEST(HardwareTable, UnknownGpuThrowsUsageErrorListingEveryName) {
    try {
        gpu_or_throw("h1000");
        FAIL() << "expected UsageError";
    } catch (const UsageError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("--gpu: unknown GPU 'h1000'"), std::string::npos) << msg;
        for (const GpuSpec& g : gpu_table()) {
            EXPECT_NE(msg.find(std::string(g.name)), std::string::npos) << g.name << " in " << msg;
        }
        EXPECT_EQ(msg.find('\n'), std::string::npos) << "one-line message";
    }
}

TEST(HardwarePeaks, H100SxmMatchesDatasheet) {
    const GpuSpec& h = gpu_or_throw("h100-sxm");
    // Datasheet: BF16 1,979* and FP8 3,958* TFLOPS with sparsity; dense is half.
    EXPECT_EQ(h.peak_tflops(DType::bf16), 989.5);
    EXPECT_EQ(h.peak_tflops(DType::f16), 989.5);
    EXPECT_EQ(h.peak_tflops(DType::f8e4m3), 1979);
    EXPECT_EQ(h.peak_tflops(DType::f8e5m2), 1979);
    EXPECT_EQ(h.peak_tflops(DType::f32), 67);
    EXPECT_EQ(h.memory_gb, 80);
    EXPECT_EQ(h.bandwidth_tbs, 3.35);
}

TEST(HardwarePeaks, HopperFp8IsTwiceBf16) {
    for (const char* name : {"h100-sxm", "h100-pcie", "h200"}) {
        const GpuSpec& g = gpu_or_throw(name);
        EXPECT_EQ(g.peak_tflops(DType::f8e4m3), 2 * g.peak_tflops(DType::bf16)) << name;
        // tf32 is not exactly bf16/2: the datasheet rounds (989* tf32 vs 1,979* bf16).
        EXPECT_NEAR(g.tflops_tf32 * 2, g.tflops_bf16, 1) << name;
    }
}

TEST(HardwarePeaks, H100PcieIsHalfTheSparseFigures) {
    const GpuSpec& h = gpu_or_throw("h100-pcie");
    EXPECT_EQ(h.tflops_bf16, 1513 / 2.0);  // datasheet 1,513* sparse
    EXPECT_EQ(h.tflops_fp8, 3026 / 2.0);   // datasheet 3,026* sparse
    EXPECT_EQ(h.tflops_tf32, 756 / 2.0);   // datasheet 756* sparse
}

TEST(HardwarePeaks, MissingTensorDtypesAreZero) {
    const GpuSpec& t4 = gpu_or_throw("t4");
    EXPECT_EQ(t4.peak_tflops(DType::bf16), 0);  // Turing: no bf16 tensor cores
    EXPECT_EQ(t4.peak_tflops(DType::f16), 65);
    EXPECT_EQ(t4.tflops_tf32, 0);
    EXPECT_EQ(t4.peak_tflops(DType::f8e4m3), 0);
    for (const char* name : {"a100-40gb", "a100-80gb", "rtx3090"}) {  // Ampere: no fp8
        EXPECT_EQ(gpu_or_throw(name).peak_tflops(DType::f8e4m3), 0) << name;
        EXPECT_GT(gpu_or_throw(name).peak_tflops(DType::bf16), 0) << name;
    }
}

TEST(HardwarePeaks, GeForceUsesFp32AccumulateFigures) {
    // Whitepapers: RTX 3090 FP16 tensor 142 (FP16 acc) / 71 (FP32 acc); RTX 4090 330.3 / 165.2.
    EXPECT_EQ(gpu_or_throw("rtx3090").tflops_bf16, 71);
    EXPECT_EQ(gpu_or_throw("rtx3090").tflops_fp16, 71);
    EXPECT_EQ(gpu_or_throw("rtx4090").tflops_bf16, 165.2);
    EXPECT_EQ(gpu_or_throw("rtx4090").tflops_fp16, 165.2);
    EXPECT_EQ(gpu_or_throw("rtx4090").tflops_fp8, 330.3);  // FP8 with FP32 accumulate
}

TEST(HardwarePeaks, PeakTflopsMapsEveryDtype) {
    const GpuSpec& g = gpu_or_throw("l4");
    EXPECT_EQ(g.peak_tflops(DType::f32), g.tflops_fp32);
    EXPECT_EQ(g.peak_tflops(DType::f16), g.tflops_fp16);
    EXPECT_EQ(g.peak_tflops(DType::bf16), g.tflops_bf16);
    EXPECT_EQ(g.peak_tflops(DType::f8e4m3), g.tflops_fp8);
    EXPECT_EQ(g.peak_tflops(DType::f8e5m2), g.tflops_fp8);
    EXPECT_EQ(g.peak_tflops(DType::i8), g.tflops_int8);
    EXPECT_EQ(g.peak_tflops(DType::nf4), g.tflops_bf16);  // dequantized to bf16 for the GEMM
    EXPECT_EQ(g.tflops_fp8, 242.5);                       // datasheet 485* sparse
}

}  // namespace
}  // namespace napkin
