// napkin estimate's time flags: which device profile the performance model predicts with
// (--device-profile, --profile-force), how the collectives overlap (--overlap), a CPU rank's
// threads (--threads) and the precisions --solve fastest searches (--solve-precisions). --mfu,
// when given, is the explicit override: the time at that MFU, no profile.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/recipe.h"
#include "estimator/estimate.h"
#include "estimator/hardware.h"
#include "estimator/profile_catalog.h"
#include "estimator/report.h"

namespace napkin::cli {

struct TimeFlags {
    std::string device_profile;  // a file, "datasheet", or empty (the shipped one, else datasheet)
    bool profile_force = false;
    std::string overlap = "auto";
    int threads = 0;
    std::string solve_precisions;  // "bf16-amp,fp8-amp"
};

void add_time_flags(CLI::App* cmd, TimeFlags& f);

// Unless --mfu is given: in.mfu = 0 (predicted) over the profile chosen for `gpu` (kept in
// `holder`, which must outlive the estimate), with the overlap and threads. A CPU profile given
// without --gpu describes the device itself: its memory and its measured GEMM rate (the MFU
// basis) replace the GPU table's.
void set_time_model(const TimeFlags& f, const CLI::App& cmd, const GpuSpec& gpu, EstimateInputs& in,
                    ReportContext& ctx, std::optional<ChosenProfile>& holder);

// --solve-precisions: the recipes --solve fastest searches (empty: the estimate's own).
std::vector<Precision> solve_precisions(const TimeFlags& f);

}  // namespace napkin::cli
