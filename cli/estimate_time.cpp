#include "cli/estimate_time.h"

#include <sstream>

#include "core/check.h"

namespace napkin::cli {

void add_time_flags(CLI::App* cmd, TimeFlags& f) {
    const auto* g = "Time";
    cmd->add_option(
           "--device-profile", f.device_profile,
           "Device profile for the predicted time: a JSON file (docs/FORMATS.md), or "
           "'datasheet' for "
           "napkin's default efficiencies (default: the profile shipped for --gpu, else datasheet)")
        ->group(g);
    cmd->add_flag("--profile-force", f.profile_force,
                  "Use a --device-profile measured on another device anyway")
        ->group(g);
    cmd->add_option("--overlap", f.overlap,
                    "auto|on|off: data-parallel collectives overlapped with the passes (auto: on "
                    "for a GPU, off for "
                    "a CPU profile, as napkin train does)")
        ->group(g)
        ->capture_default_str();
    cmd->add_option("--threads", f.threads,
                    "A CPU profile's threads per rank (default: its largest section)")
        ->group(g);
    cmd->add_option(
           "--solve-precisions", f.solve_precisions,
           "--solve fastest: also search these recipes (comma-separated, e.g. bf16-amp,fp8-amp)")
        ->group(g);
}

void set_time_model(const TimeFlags& f, const CLI::App& cmd, const GpuSpec& gpu, EstimateInputs& in,
                    ReportContext& ctx, std::optional<ChosenProfile>& holder) {
    const bool mfu_given = cmd.count("--mfu") > 0;
    if (mfu_given && cmd.count("--device-profile") > 0)
        throw UsageError("--mfu and --device-profile: pick one");
    if (cmd.count("--threads") > 0 && f.threads <= 0) {
        throw UsageError("--threads: must be a positive integer (got " + std::to_string(f.threads) +
                         ")");
    }
    if (f.overlap != "auto" && f.overlap != "on" && f.overlap != "off") {
        throw UsageError("--overlap: unknown value '" + f.overlap + "' (expected auto|on|off)");
    }
    if (mfu_given) return;
    // A CPU profile without --gpu is the device the estimate is for.
    DeviceIdentity device = gpu_identity(gpu);
    if (!f.device_profile.empty() && f.device_profile != "datasheet" && cmd.count("--gpu") == 0) {
        const DeviceProfile given = read_device_profile(f.device_profile);
        if (given.device.kind == DeviceKind::cpu) device = given.device;
    }
    holder = choose_profile(f.device_profile, device, f.profile_force, "--device-profile",
                            [&] { return datasheet_profile(gpu); });
    const DeviceProfile& p = holder->profile;
    in.mfu = 0;
    in.profile = &p;
    in.threads = f.threads;
    const bool cpu = p.device.kind == DeviceKind::cpu;
    in.overlap = f.overlap == "on" || (f.overlap == "auto" && !cpu) ? Overlap::on : Overlap::off;
    ctx.profile = holder->origin;
    if (cpu && device.kind == DeviceKind::cpu) {
        ctx.gpu = p.device.name + " (CPU)";
        ctx.gpu_full_name = p.device.name;
        if (cmd.count("--gpu-mem-gb") == 0) in.gpu_memory_bytes = p.device.memory_bytes;
        if (cmd.count("--peak-tflops") == 0) {
            const DType gemm =
                precision_dtypes(in.precision, in.optimizer, in.grads_fp32).gemm_compute;
            in.peak_flops_per_s = p.peak_for(gemm) > 0 ? p.peak_for(gemm) : p.peak_for(DType::f32);
        }
    }
}

std::vector<Precision> solve_precisions(const TimeFlags& f) {
    std::vector<Precision> out;
    std::stringstream ss(f.solve_precisions);
    for (std::string item; std::getline(ss, item, ',');) {
        if (!item.empty()) out.push_back(parse_enum(kPrecisionNames, item, "--solve-precisions"));
    }
    return out;
}

}  // namespace napkin::cli
