// Which device profile a prediction uses: one napkin ships (estimator/profiles/*.json, compiled
// into the binary), one given as a file, or, for a device without one, a profile made from its
// ceilings at napkin's stated default efficiencies (a GPU's datasheet, a CPU's sgemm rate and
// stream bandwidth measured at start). docs/ESTIMATOR.md, "Time", lists the defaults.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "estimator/device_profile.h"
#include "estimator/hardware.h"

namespace napkin {

struct ShippedProfile {
    std::string_view file;  // "h200.json"
    std::string_view text;
};
const std::vector<ShippedProfile>& shipped_profiles();

// The shipped profile measured on `device` (a GPU by its table name, a CPU by its name and
// logical CPUs), if any.
std::optional<DeviceProfile> shipped_profile_for(const DeviceIdentity& device);

// A GPU of the hardware table: its dense peaks and bandwidth at the default efficiencies of a
// well-tuned framework (cuBLAS GEMMs, FlashAttention-2, fused elementwise kernels).
DeviceProfile datasheet_profile(const GpuSpec& gpu);

// A CPU without a profile: the sgemm rate and the stream bandwidth measured at start, at the
// default efficiencies for napkin's CPU engine; `threads` its OpenMP threads.
DeviceProfile cpu_roofline_profile(const DeviceIdentity& cpu, double sgemm_flops_per_s,
                                   double stream_bytes_per_s, int threads);

// This machine's CPU: /proc/cpuinfo's model name, its logical CPUs and physical memory.
DeviceIdentity this_cpu();

// A GPU of the hardware table as a device identity.
DeviceIdentity gpu_identity(const GpuSpec& gpu);

// The profile a prediction for `device` uses, and in words where it came from.
struct ChosenProfile {
    DeviceProfile profile;
    std::string origin;     // "profile h200.json (shipped)", "datasheet roofline (no profile)"
    bool fallback = false;  // no measured profile: the default efficiencies
};

// `file`: a profile's path, "datasheet" (the fallback even where napkin ships a profile), or
// empty (the shipped one for `device`, else the fallback `fallback()`). A file measured on
// another device is refused with one UsageError line naming `flag`, unless `force`.
ChosenProfile choose_profile(const std::string& file, const DeviceIdentity& device, bool force,
                             std::string_view flag, const std::function<DeviceProfile()>& fallback);

}  // namespace napkin
