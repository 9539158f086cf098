// TMA copies and mbarriers on the emulator (tests/cuda_emu/emu_tma.h says what it models). The
// rules are the PTX ISA's ("mbarrier", "cp.async.bulk.tensor", "Tensor Access Modes") and the
// driver API's (cuTensorMapEncodeTiled), written out here, not from kernels/cuda/tma.cuh:
// tests/kernels_cuda/wgmma_test.cpp holds a copy through tma.cuh to the layout the hardware
// writes, on an sm_90 GPU, and the same copy here.
// Before the CUDA headers, as everywhere (it defines __shared__ for them); it includes emu_tma.h.
#include "tests/cuda_emu/cuda_emu.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace napkin::emu {

namespace {

// Scheduler rounds a wait may spin before the launch fails: far more than any pipeline takes
// from a copy's issue to its wait.
constexpr int kMaxWaitRounds = 200000;
constexpr int kMaxRank = 5;
constexpr std::uint64_t kMapMagic = 0x4d54'6e69'6b70'616eull;  // "napkinTM"

// The emulator's tensor map, in CUtensorMap's 128 opaque bytes.
struct MapFields {
    std::uint64_t magic;
    std::uint64_t address;
    std::array<std::uint64_t, kMaxRank> dims;
    std::array<std::uint64_t, kMaxRank> strides;  // bytes; strides[0] is the element's size
    std::array<std::uint32_t, kMaxRank> box;
    std::uint32_t rank, element_bytes, swizzle_bits;
};
static_assert(sizeof(MapFields) <= sizeof(CUtensorMap));

// A copy in flight: its box, dense (inner dimension first), for `dst` swizzled by `swizzle_bits`.
struct Copy {
    std::uint32_t dst;
    int swizzle_bits;
    std::vector<unsigned char> bytes;
};

struct Barrier {
    std::uint32_t count = 0, pending = 0;  // arrivals a phase, arrivals still to come in this one
    std::int64_t tx = 0;                   // bytes expected and not yet landed
    std::uint64_t completed = 0;           // phases completed: the current one's parity is & 1
    std::vector<Copy> copies;              // issued against this phase, not landed
};

// The running block's barriers by shared offset. Blocks run one after another, so a new (launch,
// block) means the previous block has ended: its barriers and copies in flight are dropped.
struct BlockBarriers {
    std::uint64_t launch = 0;
    uint3 block{};
    std::map<std::uint32_t, Barrier> at;
};
BlockBarriers g_barriers;

std::map<std::uint32_t, Barrier>& block_barriers() {
    const bool same = g_barriers.launch == launch_number() && g_barriers.block.x == blockIdx.x &&
                      g_barriers.block.y == blockIdx.y && g_barriers.block.z == blockIdx.z;
    if (!same) {
        g_barriers.launch = launch_number();
        g_barriers.block = blockIdx;
        g_barriers.at.clear();
    }
    return g_barriers.at;
}

std::string hex(std::uint32_t v) {
    char s[16];
    std::snprintf(s, sizeof s, "0x%x", v);
    return s;
}

// Why [at, at + bytes) is no place in the dynamic shared memory aligned to `align`, or empty.
std::string shared_range_error(std::uint32_t at, std::size_t bytes, std::uint32_t align) {
    if (at % align != 0)
        return "shared address " + hex(at) + " is not " + std::to_string(align) + "-byte aligned";
    if (std::size_t{at} + bytes > dynamic_shared_bytes())
        return "shared address " + hex(at) + " + " + std::to_string(bytes) +
               " bytes runs past the launch's " + std::to_string(dynamic_shared_bytes()) +
               " bytes of dynamic shared memory";
    return {};
}

Barrier& barrier(std::uint32_t bar, const char* what) {
    if (std::string e = shared_range_error(bar, 8, 8); !e.empty())
        throw std::runtime_error(std::string(what) + ": the mbarrier's " + e);
    auto& all = block_barriers();
    const auto it = all.find(bar);
    if (it == all.end() || it->second.count == 0)
        throw std::runtime_error(std::string(what) + ": the mbarrier at shared address " +
                                 hex(bar) + " is used before its mbarrier.init");
    return it->second;
}

std::uint32_t swizzled(std::uint32_t at, int bits) {
    const std::uint32_t mask = (1u << bits) - 1;
    return at ^ ((at >> 7 & mask) << 4);
}

// Lands the phase's copies once its arrivals are in; completes the phase when no byte is owed.
// Returns whether the phase completed.
bool try_complete(Barrier& b, std::uint32_t bar) {
    if (b.pending != 0) return false;
    auto* smem = static_cast<unsigned char*>(dynamic_shared_memory());
    for (const Copy& c : b.copies) {
        for (std::size_t o = 0; o < c.bytes.size(); o += 16)
            std::memcpy(smem + swizzled(c.dst + static_cast<std::uint32_t>(o), c.swizzle_bits),
                        c.bytes.data() + o, 16);
        async_proxy_wrote(c.dst, c.bytes.size());  // the swizzle stays inside the box's span
        b.tx -= static_cast<std::int64_t>(c.bytes.size());
    }
    b.copies.clear();
    if (b.tx < 0)
        throw std::runtime_error("the copies on the mbarrier at shared address " + hex(bar) +
                                 " bring " + std::to_string(-b.tx) +
                                 " bytes more than its expect_tx announced");
    if (b.tx > 0) return false;
    ++b.completed;
    b.pending = b.count;
    return true;
}

std::uint32_t element_bytes(CUtensorMapDataType type) {
    switch (type) {
        case CU_TENSOR_MAP_DATA_TYPE_UINT8:
            return 1;
        case CU_TENSOR_MAP_DATA_TYPE_UINT16:
        case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
        case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
            return 2;
        case CU_TENSOR_MAP_DATA_TYPE_UINT32:
        case CU_TENSOR_MAP_DATA_TYPE_INT32:
        case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
        case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
        case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
        case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ:
            return 4;
        case CU_TENSOR_MAP_DATA_TYPE_UINT64:
        case CU_TENSOR_MAP_DATA_TYPE_INT64:
        case CU_TENSOR_MAP_DATA_TYPE_FLOAT64:
            return 8;
        default:
            return 0;  // the packed sub-byte types: not emulated
    }
}

}  // namespace

void mbarrier_init(std::uint32_t bar, std::uint32_t count) {
    if (std::string e = shared_range_error(bar, 8, 8); !e.empty())
        throw std::runtime_error("mbarrier.init: the mbarrier's " + e);
    if (count == 0 || count >= (1u << 20))
        throw std::runtime_error("mbarrier.init: an arrival count of " + std::to_string(count) +
                                 " (1 to 2^20 - 1)");
    Barrier& b = block_barriers()[bar];
    if (!b.copies.empty())
        throw std::runtime_error("mbarrier.init: the mbarrier at shared address " + hex(bar) +
                                 " still has copies in flight");
    b = Barrier{};
    b.count = b.pending = count;
}

void mbarrier_arrive(std::uint32_t bar, std::uint32_t tx_bytes) {
    const char* what = tx_bytes > 0 ? "mbarrier.arrive.expect_tx" : "mbarrier.arrive";
    Barrier& b = barrier(bar, what);
    if (b.pending == 0)
        throw std::runtime_error(std::string(what) + ": the mbarrier at shared address " +
                                 hex(bar) + " has all its " + std::to_string(b.count) +
                                 " arrivals of this phase already (its bytes are not all in)");
    b.tx += tx_bytes;
    --b.pending;
    if (b.copies.empty()) try_complete(b, bar);
}

void mbarrier_wait(std::uint32_t bar, std::uint32_t parity) {
    for (int round = 0;; ++round) {
        Barrier& b = barrier(bar, "mbarrier.try_wait.parity");
        if ((b.completed & 1u) != (parity & 1u)) return;  // the phase of that parity is over
        if (try_complete(b, bar)) return;
        if (round == kMaxWaitRounds)
            throw std::runtime_error(
                "mbarrier.try_wait.parity: the phase of parity " + std::to_string(parity & 1u) +
                " of the mbarrier at shared address " + hex(bar) + " never completes (" +
                std::to_string(b.pending) + " of " + std::to_string(b.count) +
                " arrivals missing; " + std::to_string(b.tx) + " bytes announced and not landed, " +
                std::to_string(b.copies.size()) + " copies waiting for the arrivals)");
        yield("mbarrier.try_wait.parity");
    }
}

void tma_load(std::uint32_t dst, const CUtensorMap* map, const int* coords, int rank,
              std::uint32_t bar) {
    const char* what = "cp.async.bulk.tensor";
    MapFields m;
    std::memcpy(&m, map, sizeof m);
    if (m.magic != kMapMagic)
        throw std::runtime_error(std::string(what) +
                                 ": the tensor map was not made by cuTensorMapEncodeTiled");
    if (static_cast<std::uint32_t>(rank) != m.rank)
        throw std::runtime_error(std::string(what) + ": a " + std::to_string(rank) +
                                 "d copy through a tensor map of rank " + std::to_string(m.rank));
    std::size_t elements = 1;
    for (std::uint32_t d = 0; d < m.rank; ++d)
        elements *= m.box[d];
    const std::size_t bytes = elements * m.element_bytes;
    const std::uint32_t align = m.swizzle_bits == 0 ? 128u : 128u << m.swizzle_bits;
    if (std::string e = shared_range_error(dst, bytes, align); !e.empty())
        throw std::runtime_error(std::string(what) + ": the destination's " + e);
    Barrier& b = barrier(bar, what);

    Copy copy{dst, static_cast<int>(m.swizzle_bits), std::vector<unsigned char>(bytes, 0)};
    const auto* base = reinterpret_cast<const unsigned char*>(m.address);
    std::array<std::uint32_t, kMaxRank> i{};  // the box's index, inner dimension first
    const std::size_t row = std::size_t{m.box[0]} * m.element_bytes;
    for (std::size_t o = 0; o < bytes; o += row) {
        bool inside = true;
        std::uint64_t offset = 0;
        for (std::uint32_t d = 1; d < m.rank; ++d) {
            const std::int64_t c = std::int64_t{coords[d]} + i[d];
            inside = inside && c >= 0 && static_cast<std::uint64_t>(c) < m.dims[d];
            offset += static_cast<std::uint64_t>(c) * m.strides[d];
        }
        // The row's elements inside the tensor, [lo, hi) of the box's; the others stay zero.
        const std::int64_t first = coords[0];
        const std::int64_t lo = std::max<std::int64_t>(0, -first);
        const std::int64_t hi =
            std::min<std::int64_t>(m.box[0], static_cast<std::int64_t>(m.dims[0]) - first);
        if (inside && lo < hi) {
            const unsigned char* src =
                base + offset + static_cast<std::uint64_t>(first + lo) * m.element_bytes;
            const std::size_t n = static_cast<std::size_t>(hi - lo) * m.element_bytes;
            if (!is_device_memory(src, n))
                throw std::runtime_error(std::string(what) +
                                         ": the tensor map's elements at the box's coordinates "
                                         "are not device memory");
            std::memcpy(copy.bytes.data() + o + static_cast<std::size_t>(lo) * m.element_bytes, src,
                        n);
        }
        for (std::uint32_t d = 1; d < m.rank && ++i[d] == m.box[d]; ++d)
            i[d] = 0;
    }
    auto* smem = static_cast<unsigned char*>(dynamic_shared_memory());
    for (std::size_t o = 0; o < bytes; o += 16)  // in flight: garbage until the wait lands it
        std::memset(smem + swizzled(dst + static_cast<std::uint32_t>(o), copy.swizzle_bits), 0xff,
                    16);
    b.copies.push_back(std::move(copy));
}

CUresult tensor_map_encode_tiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank,
                                 void* address, const cuuint64_t* dims, const cuuint64_t* strides,
                                 const cuuint32_t* box, const cuuint32_t* element_strides,
                                 CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill oob) {
    if (map == nullptr || rank < 1 || rank > kMaxRank || address == nullptr || dims == nullptr ||
        box == nullptr || element_strides == nullptr || (rank > 1 && strides == nullptr))
        return CUDA_ERROR_INVALID_VALUE;
    const std::uint32_t element = element_bytes(type);
    if (element == 0 || interleave != CU_TENSOR_MAP_INTERLEAVE_NONE ||
        swizzle > CU_TENSOR_MAP_SWIZZLE_128B || oob != CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (reinterpret_cast<std::uintptr_t>(address) % 16 != 0) return CUDA_ERROR_INVALID_VALUE;
    MapFields m{};
    m.magic = kMapMagic;
    m.address = reinterpret_cast<std::uintptr_t>(address);
    m.rank = rank;
    m.element_bytes = element;
    m.swizzle_bits = static_cast<std::uint32_t>(swizzle);  // 32 B: 1, 64 B: 2, 128 B: 3
    m.strides[0] = element;
    for (cuuint32_t d = 0; d < rank; ++d) {
        if (dims[d] == 0 || dims[d] > (std::uint64_t{1} << 32) || box[d] == 0 || box[d] > 256 ||
            element_strides[d] == 0 || element_strides[d] > 8)
            return CUDA_ERROR_INVALID_VALUE;
        if (element_strides[d] != 1) return CUDA_ERROR_NOT_SUPPORTED;
        if (d > 0 && (strides[d - 1] % 16 != 0 || strides[d - 1] >= (std::uint64_t{1} << 40)))
            return CUDA_ERROR_INVALID_VALUE;
        m.dims[d] = dims[d];
        m.box[d] = box[d];
        if (d > 0) m.strides[d] = strides[d - 1];
    }
    const std::uint64_t inner = std::uint64_t{box[0]} * element;
    if (inner % 16 != 0 || (m.swizzle_bits > 0 && inner > (16u << m.swizzle_bits)))
        return CUDA_ERROR_INVALID_VALUE;
    std::memset(map, 0, sizeof *map);
    std::memcpy(map, &m, sizeof m);
    return CUDA_SUCCESS;
}

}  // namespace napkin::emu
