// The collectives napkin's data-parallel engine uses, and the bytes each rank sends and
// receives in one, by the ring algorithm (NCCL's ring, OpenMPI's ring/Rabenseifner for large
// buffers). The counters of core/comm/comm.h and the estimator (estimator/communication.h) both
// use ring_traffic(), so "measured bytes" and "predicted bytes" are one formula applied twice.
// Pure arithmetic; docs/ZERO.md derives it.
//
// A buffer of n elements over W ranks is cut into W chunks of c = ceil(n / W) elements:
//   all-reduce      = reduce-scatter + all-gather: sends and receives 2 (W - 1) c elements
//   reduce-scatter  sends and receives (W - 1) c (each step passes one partial sum along)
//   all-gather      sends and receives (W - 1) c
//   broadcast       a pipelined chain from the root: every rank but the root receives n, every
//                   rank but the last in the chain (root - 1 mod W) sends n
//   barrier         no payload
#pragma once

#include <array>
#include <cstdint>

#include "core/enum_names.h"

namespace napkin {

enum class Collective : std::uint8_t { all_reduce, reduce_scatter, all_gather, broadcast, barrier };
inline constexpr std::size_t kCollectiveCount = 5;
inline constexpr std::array kCollectiveNames = {
    EnumName<Collective>{Collective::all_reduce, "all_reduce"},
    EnumName<Collective>{Collective::reduce_scatter, "reduce_scatter"},
    EnumName<Collective>{Collective::all_gather, "all_gather"},
    EnumName<Collective>{Collective::broadcast, "broadcast"},
    EnumName<Collective>{Collective::barrier, "barrier"},
};

struct RingTraffic {
    std::uint64_t sent_bytes = 0;
    std::uint64_t received_bytes = 0;
};

// One rank's traffic for one collective over a buffer of `elements` elements (the whole
// buffer: W chunks for reduce-scatter and all-gather) of `element_bytes` bytes each.
constexpr RingTraffic ring_traffic(Collective op, std::uint64_t elements,
                                   std::uint64_t element_bytes, int world, int rank = 0,
                                   int root = 0) {
    const auto w = static_cast<std::uint64_t>(world);
    if (world <= 1) return {};
    const std::uint64_t chunk_bytes = (elements + w - 1) / w * element_bytes;
    switch (op) {
        case Collective::all_reduce:
            return {2 * (w - 1) * chunk_bytes, 2 * (w - 1) * chunk_bytes};
        case Collective::reduce_scatter:
        case Collective::all_gather:
            return {(w - 1) * chunk_bytes, (w - 1) * chunk_bytes};
        case Collective::broadcast: {
            const int last = (root + world - 1) % world;
            return {rank == last ? 0 : elements * element_bytes,
                    rank == root ? 0 : elements * element_bytes};
        }
        case Collective::barrier:
            return {};
    }
    return {};
}

}  // namespace napkin
