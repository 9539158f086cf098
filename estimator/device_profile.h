// DeviceProfile: what one device achieves, measured, as data (one JSON file per device,
// profiles/*.json; docs/FORMATS.md "Device profiles"). The performance model
// (estimator/perf_model.h) turns each op of the op plan into a time through it:
//   - GEMM throughput (FLOP/s) at points (M, N, K), per dtype and pass (forward; backward, the
//     input and weight gradients together; backward_input, a frozen weight's; head, the fused
//     output layer and loss forward and backward), interpolated between points;
//   - attention throughput by (T, head dim, B x heads), per implementation, dtype, mask and
//     direction;
//   - achieved bandwidth of the streaming ops (norms, activations, residuals, the optimizer,
//     memsets, ...) by bytes per call;
//   - the overheads outside those: per op call and per step;
//   - host-device copy bandwidth and collective latency and bandwidth, where measured.
// Each table is meant to hold what the engine's ops achieve inside their op ranges (measured by
// running the engine itself), so that it includes what an op does besides its kernel (memsets,
// casts).
// A CPU profile holds one compute section per thread count (a rank of an MPI job runs on fewer
// threads than a lone process). Every profile names its device, build, date and the command that
// made it.
//
// One reader (parse_device_profile; InputError naming the field), one writer (to_json).
// Versions: "napkin-device-profile/N"; this napkin reads 1..kProfileSchemaVersion.
// Tests: tests/estimator/device_profile_test.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/allocator.h"
#include "core/comm/collective.h"
#include "core/dtype.h"
#include "core/enum_names.h"
#include "core/recipe.h"

namespace napkin {

inline constexpr std::string_view kProfileSchemaName = "napkin-device-profile";
inline constexpr int kProfileSchemaVersion = 1;

enum class GemmPass : std::uint8_t { forward, backward, backward_input, head };
inline constexpr std::array kGemmPassNames = {
    EnumName<GemmPass>{GemmPass::forward, "forward"},
    EnumName<GemmPass>{GemmPass::backward, "backward"},
    EnumName<GemmPass>{GemmPass::backward_input, "backward_input"},
    EnumName<GemmPass>{GemmPass::head, "head"},
};

enum class Direction : std::uint8_t { forward, backward };
inline constexpr std::array kDirectionNames = {
    EnumName<Direction>{Direction::forward, "forward"},
    EnumName<Direction>{Direction::backward, "backward"},
};

// The memory-bound op classes, each with its own bandwidth curve.
enum class StreamOp : std::uint8_t {
    embedding_forward,
    embedding_backward,
    norm_forward,
    norm_backward,
    activation_forward,
    activation_backward,
    residual_forward,
    residual_backward,  // a residual's backward: nothing, or the branch's dropout mask
    rope_forward,
    rope_backward,
    lora_forward,
    lora_backward,
    dequantize,  // QLoRA: a frozen NF4 weight widened for its GEMM (bytes: codes in, values out)
    optimizer,   // the whole step: norm, clipping, update (bytes of the update)
    zero_grads,  // the gradients' memset
    data,        // one micro-batch's tokens (bytes: 8 per token, inputs and targets)
};
inline constexpr std::array kStreamOpNames = {
    EnumName<StreamOp>{StreamOp::embedding_forward, "embedding_forward"},
    EnumName<StreamOp>{StreamOp::embedding_backward, "embedding_backward"},
    EnumName<StreamOp>{StreamOp::norm_forward, "norm_forward"},
    EnumName<StreamOp>{StreamOp::norm_backward, "norm_backward"},
    EnumName<StreamOp>{StreamOp::activation_forward, "activation_forward"},
    EnumName<StreamOp>{StreamOp::activation_backward, "activation_backward"},
    EnumName<StreamOp>{StreamOp::residual_forward, "residual_forward"},
    EnumName<StreamOp>{StreamOp::residual_backward, "residual_backward"},
    EnumName<StreamOp>{StreamOp::rope_forward, "rope_forward"},
    EnumName<StreamOp>{StreamOp::rope_backward, "rope_backward"},
    EnumName<StreamOp>{StreamOp::lora_forward, "lora_forward"},
    EnumName<StreamOp>{StreamOp::lora_backward, "lora_backward"},
    EnumName<StreamOp>{StreamOp::dequantize, "dequantize"},
    EnumName<StreamOp>{StreamOp::optimizer, "optimizer"},
    EnumName<StreamOp>{StreamOp::zero_grads, "zero_grads"},
    EnumName<StreamOp>{StreamOp::data, "data"},
};
inline constexpr std::size_t kStreamOpCount = kStreamOpNames.size();

struct GemmPoint {
    std::int64_t m = 0, n = 0, k = 0;
    double flops_per_s = 0;
};
struct GemmTable {
    DType dtype = DType::f32;  // the GEMM's input dtype (MatmulShape::in)
    GemmPass pass = GemmPass::forward;
    std::vector<GemmPoint> points;
    // FLOP/s at (m, n, k): inverse-distance weighting of log FLOP/s over the nearest points in
    // (log2 M, log2 N, log2 K); a point's own value at the point itself.
    double flops_per_s(std::int64_t m, std::int64_t n, std::int64_t k) const;
};

struct AttentionPoint {
    std::int64_t seq_len = 0, head_dim = 0, batch_heads = 0;  // T, HD, B x NH
    double flops_per_s = 0;
};
struct AttentionTable {
    AttentionImpl impl = AttentionImpl::flash;
    DType dtype = DType::f32;  // of Q, K, V
    bool causal = true;        // the FLOPs counted: the pairs the mask keeps
    Direction direction = Direction::forward;
    std::vector<AttentionPoint> points;
    double flops_per_s(std::int64_t seq_len, std::int64_t head_dim, std::int64_t batch_heads) const;
};

struct StreamPoint {
    double bytes = 0;  // per call, the op's KernelCost bytes
    double bytes_per_s = 0;
};
struct StreamTable {
    StreamOp op = StreamOp::norm_forward;
    DType dtype = DType::f32;  // the activations' dtype of the runs measured
    std::vector<StreamPoint> points;
    // Piecewise linear in (log bytes, log bytes/s) between points, flat past either end.
    double bytes_per_s(double bytes) const;
};

// What the tables leave out, added per call and per step.
struct Overheads {
    double op_seconds = 0;    // per op call: launch gaps between a GPU's kernels
    double step_seconds = 0;  // per optimizer step: the batch's copies, reading back the loss
};

// What one process achieves with `threads` threads (0: a GPU, where it does not apply).
struct ComputeSection {
    int threads = 0;
    std::vector<GemmTable> gemm;
    std::vector<AttentionTable> attention;
    std::vector<StreamTable> streaming;
    Overheads overhead;
};

// A collective among `world` ranks: seconds = calls x latency + sent bytes / bandwidth (the
// ring's bytes, core/comm/collective.h), fitted by least squares to the points measured.
struct CollectiveTable {
    Collective op = Collective::all_reduce;
    int world = 2;
    double latency_seconds = 0;
    double bytes_per_s = 0;
    std::vector<StreamPoint> points;  // (sent bytes per call, achieved sent bytes/s)
};

struct HostDeviceCopy {
    double to_device_bytes_per_s = 0, to_host_bytes_per_s = 0;
    // The host's optimizer step over offloaded states (ZeRO-Offload), bytes of the update per s.
    double host_optimizer_bytes_per_s = 0;
};

// Which device a profile describes: matched against the device a run or an estimate is for.
struct DeviceIdentity {
    DeviceKind kind = DeviceKind::cpu;
    std::string name;         // "Intel(R) Xeon(R) Processor", "NVIDIA H200"
    int logical_cpus = 0;     // CPU: the machine's; 0 on a GPU
    std::string gpu;          // GPU: the hardware table's name ("h200"); empty on a CPU
    double memory_bytes = 0;  // the device's memory (a CPU's: physical RAM), what a run fits in
};

// How the profile came to be.
struct ProfileOrigin {
    std::string source;  // "measured", "derived" (from runs), "datasheet"
    std::string command;
    std::string build;
    std::string date;
    std::string conditions;  // what else ran on the machine (load average, other jobs)
};

struct DeviceProfile {
    std::string schema =
        std::string(kProfileSchemaName) + "/" + std::to_string(kProfileSchemaVersion);
    DeviceIdentity device;
    ProfileOrigin made;
    // The MFU basis per GEMM dtype: a GPU's datasheet dense peak, a CPU's measured sgemm rate.
    std::vector<std::pair<DType, double>> peak_flops_per_s;
    double memory_bytes_per_s = 0;  // a stream copy's, or the datasheet's
    std::vector<ComputeSection> compute;
    std::optional<HostDeviceCopy> host_device;
    std::vector<CollectiveTable> collectives;
    std::vector<std::string> gaps;  // what is not measured, and what stands in for it

    double peak_for(DType gemm_dtype) const;  // 0 when the profile has none
    // The section for `threads` (0: the largest), else the nearest thread count; null if none.
    const ComputeSection* section(int threads) const;
    const CollectiveTable* collective(Collective op, int world) const;
};

// Reads a profile's JSON text. InputError naming the field ("field 'compute[0].gemm[1].points'
// ...") on a malformed document or a schema this napkin does not read.
DeviceProfile parse_device_profile(std::string_view text);
// The file: InputError "FILE: ..." when it cannot be read or parsed.
DeviceProfile read_device_profile(const std::string& path);
nlohmann::json to_json(const DeviceProfile& p);
// The file's text: two-space indented, a final newline; written to a temporary name and renamed.
void write_device_profile(const DeviceProfile& p, const std::string& path);

// Whether `p` was measured on the device `present`: same kind and name (and, on a CPU, the same
// number of logical CPUs). Empty when it was; else a sentence saying which device it is for.
std::string profile_mismatch(const DeviceProfile& p, const DeviceIdentity& present);

// napkin calibrate --merge: what `now` measured added to `old` (the same device). A compute
// section for new threads is added; one for the same threads keeps its tables and takes now's
// table for each (dtype, pass), (impl, dtype, causal, direction) or (op, dtype) measured (a GPU
// profile calibrated in bf16 gains fp32's tables), and keeps its overheads (a merge adds recipes;
// it does not remeasure the launch gaps). A collective replaces the one for the same (op, world).
DeviceProfile merge_profiles(DeviceProfile old, const DeviceProfile& now);

// Least squares of y = a + b x through (x, y) points with a, b >= 0 (a clamped at 0 first, then
// b refitted through it).
struct LineFit {
    double intercept = 0, slope = 0;
};
LineFit fit_line(const std::vector<std::pair<double, double>>& xy);

// Fits seconds = latency + bytes / bandwidth through (bytes, seconds) points by least squares
// (latency >= 0); the table's points keep the achieved rates.
CollectiveTable fit_collective(Collective op, int world,
                               const std::vector<std::pair<double, double>>& bytes_seconds);

}  // namespace napkin
