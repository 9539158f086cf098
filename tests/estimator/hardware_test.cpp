#include "estimator/hardware.h"

#include <gtest/gtest.h>

#include <set>

#include "core/check.h"

namespace napkin {
namespace {

TEST(Hardware, EveryRowIsComplete) {
    std::set<std::string_view> names;
    for (const auto& g : gpu_table()) {
        SCOPED_TRACE(std::string(g.name));
        EXPECT_TRUE(names.insert(g.name).second) << "duplicate name";
        EXPECT_GT(g.memory_gb, 0);
        EXPECT_GT(g.bandwidth_tbs, 0);
        EXPECT_GT(g.tflops_fp32, 0);
        EXPECT_GT(std::max(g.tflops_bf16, g.tflops_fp16), 0);
        EXPECT_FALSE(g.source.empty());
        EXPECT_EQ(find_gpu(g.name), &g);
    }
    for (const char* required : {"h100-sxm", "h100-pcie", "h200", "a100-40gb", "a100-80gb", "b200", "l4", "t4",
                                 "rtx3090", "rtx4090", "mi300x"}) {
        EXPECT_NE(find_gpu(required), nullptr) << required;
    }
}

TEST(Hardware, KnownPeaks) {
    const GpuSpec& h100 = gpu_or_throw("h100-sxm");
    EXPECT_EQ(h100.peak_tflops(DType::bf16), 989.5);  // the lecture's H100 dense bf16
    EXPECT_EQ(h100.peak_tflops(DType::f8e4m3), 2 * h100.peak_tflops(DType::bf16));
    EXPECT_EQ(h100.memory_gb, 80);
    const GpuSpec& t4 = gpu_or_throw("t4");
    EXPECT_EQ(t4.peak_tflops(DType::bf16), 0);  // Turing: no bf16 tensor cores
    EXPECT_EQ(t4.peak_tflops(DType::f16), 65);
    EXPECT_EQ(gpu_or_throw("a100-80gb").peak_tflops(DType::bf16), 312);
    EXPECT_EQ(gpu_or_throw("a100-40gb").peak_tflops(DType::f8e4m3), 0);
}

TEST(Hardware, UnknownGpuListsNames) {
    try {
        gpu_or_throw("h1000");
        FAIL() << "expected UsageError";
    } catch (const UsageError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("gpu: unknown GPU 'h1000'"), std::string::npos);
        for (const auto& g : gpu_table()) EXPECT_NE(msg.find(g.name), std::string::npos) << g.name;
    }
}

// The GPU a run names (cudaGetDeviceProperties, or report.json's run.device, which the viewer's
// Estimate view starts from): traces/h200-gpt2's "cuda: NVIDIA H200" is the h200, not h100-sxm.
TEST(Hardware, GpuForDeviceName) {
    EXPECT_EQ(gpu_for_device_name("cuda: NVIDIA H200"), find_gpu("h200"));
    EXPECT_EQ(gpu_for_device_name("NVIDIA H100 80GB HBM3"), find_gpu("h100-sxm"));
    EXPECT_EQ(gpu_for_device_name("NVIDIA H100 PCIe"), find_gpu("h100-pcie"));
    EXPECT_EQ(gpu_for_device_name("NVIDIA A100-SXM4-40GB"), find_gpu("a100-40gb"));
    EXPECT_EQ(gpu_for_device_name("cpu"), nullptr);
}

}  // namespace
}  // namespace napkin
