// napkin info: the build and the devices this process can use.
#include <cstdio>

#include "cli/commands.h"
#include "cli/version.h"
#include "core/device.h"

namespace napkin::cli {

void add_info_command(CLI::App& app) {
    CLI::App* cmd =
        app.add_subcommand("info", "Show the build configuration and the devices napkin can use");
    cmd->callback([] {
        const DeviceInfo& d = probe_devices_and_backend();
        std::printf("napkin %s\n", NAPKIN_VERSION);
        std::printf("build: CUDA backend %s\n", NAPKIN_BUILD_CUDA);
        if (d.cuda_built && !d.libraries.empty()) {  // empty: the backend did not load (below)
            std::printf("cuda runtime %s, driver %s\n", d.runtime_version.c_str(),
                        d.driver_version.empty() ? "none" : d.driver_version.c_str());
            std::printf("libraries: %s\n", d.libraries.c_str());
        }
        std::printf("%s\n", device_summary(d).c_str());
    });
}

}  // namespace napkin::cli
