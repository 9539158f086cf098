// libFuzzer entry for the readers of what a user hands napkin: any bytes, read as a napkin
// checkpoint (CheckpointReader over core/safetensors: header, metadata, tensor table, header
// checksum, then the data checksum), as a model config (JSON, then model_config_from_json), as a
// run's report.json (profiler::parse_run_report) and as a device profile
// (parse_device_profile). Every failure must be one InputError or UsageError: never a crash, a
// hang or a leak; and what a reader accepts, its writer writes back to text that the reader
// accepts again (a report or a profile napkin could write but not read back would be a bug).
// The Chrome-trace reader has its own target (tests/viewer/fuzz).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/config_json.h"
#include "core/engine/checkpoint_file.h"
#include "estimator/device_profile.h"
#include "profiler/run_report.h"

std::size_t fuzz_sink = 0;

namespace {

// The bytes as a file without touching the disk: a memfd is a regular file, named through /proc.
void read_as_checkpoint(const std::uint8_t* data, std::size_t size) {
    const int fd = memfd_create("checkpoint", MFD_CLOEXEC);
    if (fd < 0) return;
    if (write(fd, data, size) == static_cast<ssize_t>(size)) {
        for (const char* format : {napkin::kCheckpointFormat, "napkin-checkpoint-shard/1"}) {
            try {
                const napkin::CheckpointReader r("/proc/self/fd/" + std::to_string(fd), format);
                fuzz_sink += r.tensors().size() + r.info().data_bytes;
                r.verify_checksum();
            } catch (const napkin::InputError&) {
            }
        }
    }
    close(fd);
}

void read_as_config(const std::uint8_t* data, std::size_t size) {
    nlohmann::json doc;
    try {
        doc = nlohmann::json::parse(data, data + size);
    } catch (const nlohmann::json::exception&) {
        return;
    }
    try {
        fuzz_sink += static_cast<std::size_t>(napkin::model_config_from_json(doc, "fuzz").d_model);
    } catch (const napkin::UsageError&) {
    } catch (const napkin::InputError&) {
    }
}

// The report and the device profile: read, written back, read again. Only the first read may
// refuse the bytes; a refusal of what napkin itself wrote ends the run (an uncaught exception).
void read_as_report(std::string_view text) {
    napkin::profiler::RunReport report;
    try {
        report = napkin::profiler::parse_run_report(text);
    } catch (const napkin::InputError&) {
        return;
    }
    const std::string again = napkin::profiler::run_report_text(report);
    fuzz_sink += napkin::profiler::parse_run_report(again).steps.size();
}

void read_as_device_profile(std::string_view text) {
    napkin::DeviceProfile profile;
    try {
        profile = napkin::parse_device_profile(text);
    } catch (const napkin::InputError&) {
        return;
    }
    const std::string again = napkin::to_json(profile).dump(2);
    fuzz_sink += napkin::parse_device_profile(again).compute.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    read_as_checkpoint(data, size);
    read_as_config(data, size);
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    read_as_report(text);
    read_as_device_profile(text);
    return 0;
}
