// KernelCost: what one call of a kernel does, declared by the kernel itself. The op plan (and
// through it the estimator), the engine's achieved FLOP/s and MFU, the trace's per-kernel
// args, the viewer's kernel table and the benchmarks all read these, so there is one
// definition of each op's FLOPs and bytes (docs/ESTIMATOR.md derives each in prose).
//
// Conventions: a multiply-add is 2 FLOPs; elementwise FLOP counts are per element as each
// header states; bytes are the compulsory traffic (each input read once, each output written
// once), so bytes / time is a lower bound on achieved bandwidth.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace napkin {

struct KernelCost {
    std::uint64_t flops = 0;
    std::uint64_t bytes_read = 0;
    std::uint64_t bytes_written = 0;
    std::uint64_t workspace_bytes = 0;  // scratch the call needs while it runs

    std::uint64_t bytes() const { return bytes_read + bytes_written; }
    KernelCost& operator+=(const KernelCost& o) {
        flops += o.flops;
        bytes_read += o.bytes_read;
        bytes_written += o.bytes_written;
        workspace_bytes = workspace_bytes > o.workspace_bytes ? workspace_bytes : o.workspace_bytes;
        return *this;
    }
};

inline std::uint64_t nbytes(DType t, std::int64_t numel) {
    return storage_bytes(t, static_cast<std::uint64_t>(numel));
}

}  // namespace napkin
