// libFuzzer entry for the readers of what a user hands napkin train: any bytes, read as a napkin
// checkpoint (CheckpointReader over core/safetensors: header, metadata, tensor table, header
// checksum, then the data checksum) and as a model config (JSON, then model_config_from_json).
// Every failure must be one InputError or UsageError: never a crash, a hang or a leak.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/config_json.h"
#include "core/engine/checkpoint_file.h"

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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    read_as_checkpoint(data, size);
    read_as_config(data, size);
    return 0;
}
