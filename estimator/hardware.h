// Accelerator specs: dense peak throughput per dtype, memory and bandwidth. Every value and its
// source is listed in docs/HARDWARE.md. "Dense" means without 2:4 structured sparsity (NVIDIA's
// datasheets print sparse figures, twice as high, next to the dense ones).
// Units: TFLOP/s = 1e12 FLOP/s; memory in GB = 1e9 bytes as the vendors print it; TB/s = 1e12
// bytes/s.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace napkin {

struct GpuSpec {
    std::string_view name;       // flag value: "h100-sxm"
    std::string_view full_name;  // "NVIDIA H100 SXM5 80GB"
    // Dense peak TFLOP/s; 0 when the dtype has no tensor-core path on this part.
    double tflops_fp32 = 0;  // non-tensor-core (CUDA-core / vector) FP32
    double tflops_tf32 = 0;
    double tflops_bf16 = 0;
    double tflops_fp16 = 0;
    double tflops_fp8 = 0;
    double tflops_int8 = 0;  // TOPS
    double memory_gb = 0;     // capacity as marketed, GB = 1e9 bytes
    double bandwidth_tbs = 0;  // memory bandwidth, TB/s
    std::string_view source;   // short citation; docs/HARDWARE.md has the full one
    // The links of the usual server around it (docs/HARDWARE.md, "Links"): between the GPUs of a
    // node, and from each GPU to the network (one NIC per GPU); "" when none is typical.
    std::string_view node_link;
    std::string_view network_link;

    // Peak for GEMMs computed in `t` (fp32 GEMMs use TF32 tensor cores when the part has them
    // and the recipe allows, but napkin's fp32 recipe counts the fp32 peak).
    double peak_tflops(DType t) const;
};

const std::vector<GpuSpec>& gpu_table();
const GpuSpec* find_gpu(std::string_view name);
// The entry for a device as cudaGetDeviceProperties names it ("NVIDIA H100 80GB HBM3", or a
// report's "cuda: NVIDIA H200"), or null when it is not in the table.
const GpuSpec* gpu_for_device_name(std::string_view device);
// Throws UsageError("--gpu: unknown GPU 'x' (expected h100-sxm|h100-pcie|...)").
const GpuSpec& gpu_or_throw(std::string_view name);

}  // namespace napkin
