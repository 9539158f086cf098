// wgmma on the emulator (tests/cuda_emu/emu_wgmma.h says what it models). The layouts are the PTX
// ISA's, written out here from its tables ("Register Fragments and Shared Memory Matrix Layouts"
// of the asynchronous warpgroup-level matrix instructions), not from kernels/cuda/wgmma.cuh:
// tests/kernels_cuda/wgmma_test.cpp holds a kernel built on wgmma.cuh to a CPU product here and
// on an sm_90 GPU, where the hardware is the judge of both.
// Before the CUDA headers, as everywhere (it defines __shared__ for them); it includes emu_wgmma.h.
#include "tests/cuda_emu/cuda_emu.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace napkin::emu {

namespace {

constexpr int kLanes = 32;
constexpr int kGroupLanes = 128;  // a warpgroup
constexpr int kMaxSpins = 20000;  // scheduler rounds a wait may wait for its warpgroup

float to_float(std::uint16_t bits, bool bf16) {
    if (bf16) {
        const std::uint32_t widened = std::uint32_t{bits} << 16;
        float f;
        std::memcpy(&f, &widened, sizeof f);
        return f;
    }
    return __half2float(__ushort_as_half(bits));
}

// ---- matrix descriptors ----

struct Descriptor {
    std::uint32_t start, lbo, sbo;  // bytes
    int swizzle_bits;               // 0 (none), 1 (32 B), 2 (64 B), 3 (128 B)
};

std::string decode(std::uint64_t desc, Descriptor& d) {
    d.start = static_cast<std::uint32_t>(desc & 0x3fff) << 4;
    d.lbo = static_cast<std::uint32_t>(desc >> 16 & 0x3fff) << 4;
    d.sbo = static_cast<std::uint32_t>(desc >> 32 & 0x3fff) << 4;
    if ((desc >> 49 & 7) != 0) return "a matrix base offset other than 0 (not emulated)";
    const int mode = static_cast<int>(desc >> 62 & 3);  // 0 none, 1 128 B, 2 64 B, 3 32 B
    d.swizzle_bits = mode == 0 ? 0 : 4 - mode;
    return {};
}

// The shared address of element (mn, k) (mn < 64 or n, k < 16) of a 16-bit operand, per the
// canonical layouts in units of 16-byte chunks (T = 8 elements), with W = 2^swizzle_bits chunks
// a swizzled row:
//   K-major, no swizzle:  ((8, m), (T, 2)) : ((1 T, SBO), (1, LBO))
//   K-major, swizzled:    ((8, m), (T, 2)) : ((W T, SBO), (1, T))
//   MN-major, no swizzle: ((T, 1, m), (8, k)) : ((1, T, SBO), (1 T, LBO))
//   MN-major, swizzled:   ((T, W, m), (8, k)) : ((1, T, LBO), (W T, SBO))
// then the swizzle: address bits [4, 4 + b) ^= bits [7, 7 + b).
std::uint32_t element_address(const Descriptor& d, bool mn_major, int mn, int k) {
    std::uint32_t at = d.start;
    const int w = 1 << d.swizzle_bits;
    if (!mn_major) {
        at += d.swizzle_bits == 0 ? (mn % 8) * 16 + (mn / 8) * d.sbo + (k % 8) * 2 + (k / 8) * d.lbo
                                  : (mn % 8) * 16 * w + (mn / 8) * d.sbo + k * 2;
    } else if (d.swizzle_bits == 0) {
        at += (mn % 8) * 2 + (mn / 8) * d.sbo + (k % 8) * 16 + (k / 8) * d.lbo;
    } else {
        const int row = 8 * w;  // elements along MN in one swizzled row
        at += (mn % row) * 2 + (mn / row) * d.lbo + (k % 8) * 16 * w + (k / 8) * d.sbo;
    }
    const std::uint32_t mask = (1u << d.swizzle_bits) - 1;
    return at ^ ((at >> 7 & mask) << 4);
}

// ---- the warpgroup's products ----

struct Product {
    bool bf16 = true, trans_b = false, scale_d = false, from_registers = false;
    int n = 0;
    std::uint64_t desc_a = 0, desc_b = 0;
    int arrived = 0;  // warps
    std::array<float*, kGroupLanes> d{};
    std::array<std::int64_t, kGroupLanes> chain{};  // the product whose result is this one's C
    std::vector<float> c;  // kGroupLanes x n / 2: C as the lanes held it at issue
    std::array<std::array<std::uint32_t, 4>, kGroupLanes> a{};  // A's registers, by lane
    std::vector<float> a_values, b;  // A (64 x 16) and B (16 x n), row-major
    std::vector<float> result;       // kGroupLanes x n / 2, once computed
    std::vector<std::pair<std::uint32_t, std::uint16_t>> read;  // the shared bytes it read
    bool computed = false;
};

struct WarpState {
    std::int64_t issued = 0;               // products this warp has issued
    std::vector<std::int64_t> group_ends;  // per committed group: one past its last product
    std::int64_t retired = 0;              // products written back into the lanes
    bool fenced = false;
};

struct Warpgroup {
    std::vector<Product> products;
    std::array<WarpState, 4> warps;
};

// The running block's warpgroups. Blocks run one after another, so a new (launch, block) means
// the previous block has ended.
struct BlockState {
    std::uint64_t launch = 0;
    uint3 block{};
    std::vector<Warpgroup> groups;
};
BlockState g_state;

std::size_t block_threads() {
    return std::size_t{blockDim.x} * blockDim.y * blockDim.z;
}

Warpgroup& warpgroup(int warp) {
    const bool same = g_state.launch == launch_number() && g_state.block.x == blockIdx.x &&
                      g_state.block.y == blockIdx.y && g_state.block.z == blockIdx.z;
    if (!same) {
        g_state.launch = launch_number();
        g_state.block = blockIdx;
        g_state.groups.assign((block_threads() + kGroupLanes - 1) / kGroupLanes, Warpgroup{});
    }
    return g_state.groups[static_cast<std::size_t>(warp / 4)];
}

// The calling thread's warp (linear rank / 32); throws when the block is not whole warpgroups.
int this_warp(const char* what) {
    if (block_threads() % kGroupLanes != 0)
        throw std::runtime_error(std::string(what) + ": the block's " +
                                 std::to_string(block_threads()) +
                                 " threads are not whole warpgroups (multiples of 128)");
    const std::size_t rank =
        threadIdx.x + blockDim.x * (threadIdx.y + std::size_t{blockDim.y} * threadIdx.z);
    return static_cast<int>(rank / kLanes);
}

std::string reads_shared(std::uint32_t at) {
    if (std::size_t{at} + 2 > dynamic_shared_bytes())
        return "an operand element at shared address " + std::to_string(at) +
               " lies past the launch's " + std::to_string(dynamic_shared_bytes()) +
               " bytes of dynamic shared memory";
    return {};
}

std::uint16_t shared_u16(std::uint32_t at) {
    std::uint16_t v;
    std::memcpy(&v, static_cast<const unsigned char*>(dynamic_shared_memory()) + at, sizeof v);
    return v;
}

// Reads element (mn, k) of a shared operand, remembering what it read.
std::string read_operand(Product& p, const Descriptor& d, bool mn_major, int mn, int k,
                         float& out) {
    const std::uint32_t at = element_address(d, mn_major, mn, k);
    if (std::string e = reads_shared(at); !e.empty()) return e;
    if (const std::uint32_t writer = unfenced_cp_async_writer(at); writer != 0)
        return "the shared memory at address " + std::to_string(at) +
               " was written by cp.async of "
               "the block's thread " +
               std::to_string(writer - 1) +
               ", which issued no fence.proxy.async between its wait and this read";
    const std::uint16_t bits = shared_u16(at);
    p.read.emplace_back(at, bits);
    out = to_float(bits, p.bf16);
    return {};
}

// Reads the product's shared operands (B, and A unless from registers) at its first warp's
// issue: from then on to its wait the hardware may read them, so they must not change.
std::string read_shared_operands(Product& p) {
    Descriptor da{}, db{};
    if (std::string e = decode(p.desc_b, db); !e.empty()) return "B's descriptor: " + e;
    p.b.assign(16 * static_cast<std::size_t>(p.n), 0.0f);
    for (int n = 0; n < p.n; ++n)
        for (int k = 0; k < 16; ++k)
            if (std::string e = read_operand(p, db, p.trans_b, n, k,
                                             p.b[static_cast<std::size_t>(k * p.n + n)]);
                !e.empty())
                return "B: " + e;
    if (p.from_registers) return {};
    if (std::string e = decode(p.desc_a, da); !e.empty()) return "A's descriptor: " + e;
    p.a_values.assign(64 * 16, 0.0f);
    for (int m = 0; m < 64; ++m)
        for (int k = 0; k < 16; ++k)
            if (std::string e = read_operand(p, da, false, m, k,
                                             p.a_values[static_cast<std::size_t>(16 * m + k)]);
                !e.empty())
                return "A: " + e;
    return {};
}

// D (64 x n) = A (64 x 16) B (16 x n) + C, once all four warps have issued the product. Lane
// 4 g + t of warp w holds, in accumulator 4 j + 2 h + e, D(16 w + g + 8 h, 8 j + 2 t + e); A's
// registers (from_registers) r = h + 2 q: A(16 w + g + 8 h, 2 t + 8 q .. + 1), the lower column in
// the low half.
std::string compute(Warpgroup& wg, std::int64_t index) {
    Product& p = wg.products[static_cast<std::size_t>(index)];
    if (p.from_registers) {
        p.a_values.assign(64 * 16, 0.0f);
        for (int m = 0; m < 64; ++m)
            for (int k = 0; k < 16; ++k) {
                const int lane = 32 * (m / 16) + 4 * (m % 8) + (k % 8) / 2;
                const int reg = (m % 16) / 8 + 2 * (k / 8);
                const std::uint32_t r =
                    p.a[static_cast<std::size_t>(lane)][static_cast<std::size_t>(reg)];
                p.a_values[static_cast<std::size_t>(16 * m + k)] =
                    to_float(static_cast<std::uint16_t>(r >> (16 * (k % 2))), p.bf16);
            }
    }
    const std::vector<float>& a = p.a_values;
    const std::vector<float>& b = p.b;
    const std::size_t per_lane = static_cast<std::size_t>(p.n / 2);
    p.result.assign(kGroupLanes * per_lane, 0.0f);
    for (int lane = 0; lane < kGroupLanes; ++lane) {
        const int w = lane / 32, g = lane % 32 / 4, t = lane % 4;
        const std::int64_t from = p.chain[static_cast<std::size_t>(lane)];
        const float* c = from >= 0
                             ? &wg.products[static_cast<std::size_t>(from)].result[lane * per_lane]
                             : &p.c[lane * per_lane];
        for (std::size_t i = 0; i < per_lane; ++i) {
            const int j = static_cast<int>(i / 4), h = static_cast<int>(i % 4 / 2),
                      e = static_cast<int>(i % 2);
            const int m = 16 * w + g + 8 * h, n = 8 * j + 2 * t + e;
            float sum = p.scale_d ? c[i] : 0.0f;
            for (int k = 0; k < 16; ++k)  // bf16 and fp16 products are exact in fp32
                sum += a[static_cast<std::size_t>(16 * m + k)] *
                       b[static_cast<std::size_t>(k * p.n + n)];
            p.result[lane * per_lane + i] = sum;
        }
    }
    p.computed = true;
    return {};
}

// ---- the warp collectives ----

struct MmaOp : WarpCollective {
    int warp = 0;
    bool bf16 = true, trans_b = false, scale_d = false;
    int n = 0;
    float* d = nullptr;
    const std::uint32_t* a = nullptr;
    std::uint64_t desc_a = 0, desc_b = 0;
};

std::string same_call(const MmaOp& x, const MmaOp& y) {
    if (x.bf16 != y.bf16 || x.n != y.n || x.trans_b != y.trans_b || x.scale_d != y.scale_d ||
        (x.a == nullptr) != (y.a == nullptr) || x.desc_b != y.desc_b ||
        (x.a == nullptr && x.desc_a != y.desc_a))
        return "the warpgroup's lanes issue wgmma.mma_async with different shapes, types, flags or "
               "descriptors";
    return {};
}

std::string run_mma(WarpCollective* const* lanes) {
    const auto& first = *static_cast<const MmaOp*>(lanes[0]);
    for (int l = 1; l < kLanes; ++l)
        if (std::string e = same_call(first, *static_cast<const MmaOp*>(lanes[l])); !e.empty())
            return e;
    if (first.n < 8 || first.n > 256 || first.n % 8 != 0)
        return "wgmma.mma_async with N " + std::to_string(first.n) + " (8 to 256, a multiple of 8)";
    Warpgroup& wg = warpgroup(first.warp);
    WarpState& ws = wg.warps[static_cast<std::size_t>(first.warp % 4)];
    if (!ws.fenced)
        return "wgmma.mma_async without a wgmma.fence since the warp began or last waited "
               "(wgmma.wait_group): its accumulator and A registers may have changed";
    const std::int64_t index = ws.issued++;
    if (index == static_cast<std::int64_t>(wg.products.size())) {
        Product p;
        p.bf16 = first.bf16, p.n = first.n, p.trans_b = first.trans_b, p.scale_d = first.scale_d;
        p.from_registers = first.a != nullptr, p.desc_a = first.desc_a, p.desc_b = first.desc_b;
        p.c.assign(kGroupLanes * static_cast<std::size_t>(first.n / 2), 0.0f);
        p.chain.fill(-1);
        wg.products.push_back(std::move(p));
    }
    Product& p = wg.products[static_cast<std::size_t>(index)];
    if (p.bf16 != first.bf16 || p.n != first.n || p.trans_b != first.trans_b ||
        p.scale_d != first.scale_d || p.from_registers != (first.a != nullptr) ||
        p.desc_b != first.desc_b || (!p.from_registers && p.desc_a != first.desc_a))
        return "warp " + std::to_string(first.warp) + "'s wgmma.mma_async number " +
               std::to_string(index) +
               " differs from its warpgroup's other warps' (shape, type, "
               "flags or descriptors)";
    const std::size_t per_lane = static_cast<std::size_t>(p.n / 2);
    for (int l = 0; l < kLanes; ++l) {
        const auto& op = *static_cast<const MmaOp*>(lanes[l]);
        const int lane = 32 * (first.warp % 4) + l;
        // Chained: an earlier product still in flight into the same accumulators gives its C.
        for (std::int64_t j = index - 1; j >= ws.retired; --j)
            if (wg.products[static_cast<std::size_t>(j)].d[static_cast<std::size_t>(lane)] ==
                op.d) {
                p.chain[static_cast<std::size_t>(lane)] = j;
                break;
            }
        if (p.chain[static_cast<std::size_t>(lane)] < 0)
            std::memcpy(&p.c[lane * per_lane], op.d, per_lane * sizeof(float));
        p.d[static_cast<std::size_t>(lane)] = op.d;
        if (op.a != nullptr)
            std::memcpy(p.a[static_cast<std::size_t>(lane)].data(), op.a,
                        4 * sizeof(std::uint32_t));
        for (std::size_t i = 0; i < per_lane; ++i)  // in flight: garbage until the wait
            op.d[i] = std::numeric_limits<float>::quiet_NaN();
    }
    if (p.arrived == 0)
        if (std::string e = read_shared_operands(p); !e.empty()) return e;
    if (++p.arrived == 4) return compute(wg, index);
    return {};
}

struct WarpOp : WarpCollective {
    int warp = 0;
    int pending = 0;
    int spins = 0;
    bool done = false;
};

std::string run_fence(WarpCollective* const* lanes) {
    const auto& op = *static_cast<const WarpOp*>(lanes[0]);
    warpgroup(op.warp).warps[static_cast<std::size_t>(op.warp % 4)].fenced = true;
    return {};
}

std::string run_commit(WarpCollective* const* lanes) {
    const auto& op = *static_cast<const WarpOp*>(lanes[0]);
    WarpState& ws = warpgroup(op.warp).warps[static_cast<std::size_t>(op.warp % 4)];
    ws.group_ends.push_back(ws.issued);
    return {};
}

// Retires the warp's groups but the `pending` newest once their products are complete: their
// results land in the lanes' accumulators, in issue order, and the shared memory they read must
// be as it was. Not complete yet: every lane's done stays false, and it waits again.
std::string run_wait(WarpCollective* const* lanes) {
    const auto& first = *static_cast<const WarpOp*>(lanes[0]);
    Warpgroup& wg = warpgroup(first.warp);
    WarpState& ws = wg.warps[static_cast<std::size_t>(first.warp % 4)];
    const std::int64_t groups = static_cast<std::int64_t>(ws.group_ends.size());
    const std::int64_t upto =
        groups > first.pending ? ws.group_ends[static_cast<std::size_t>(groups - first.pending - 1)]
                               : 0;
    for (std::int64_t j = ws.retired; j < upto; ++j)
        if (!wg.products[static_cast<std::size_t>(j)].computed) {
            if (first.spins >= kMaxSpins)
                return "wgmma.wait_group waits for wgmma.mma_async number " + std::to_string(j) +
                       ", which " +
                       std::to_string(4 - wg.products[static_cast<std::size_t>(j)].arrived) +
                       " warp(s) of its warpgroup never issued";
            return {};
        }
    for (std::int64_t j = ws.retired; j < upto; ++j) {
        const Product& p = wg.products[static_cast<std::size_t>(j)];
        for (const auto& [at, bits] : p.read)
            if (shared_u16(at) != bits)
                return "the shared memory that wgmma.mma_async number " + std::to_string(j) +
                       " reads (address " + std::to_string(at) +
                       ") changed before its wgmma.wait_group";
        const std::size_t per_lane = static_cast<std::size_t>(p.n / 2);
        for (int l = 0; l < kLanes; ++l) {
            const int lane = 32 * (first.warp % 4) + l;
            std::memcpy(p.d[static_cast<std::size_t>(lane)], &p.result[lane * per_lane],
                        per_lane * sizeof(float));
        }
    }
    ws.retired = std::max(ws.retired, upto);
    ws.fenced = false;
    for (int l = 0; l < kLanes; ++l)
        static_cast<WarpOp*>(lanes[l])->done = true;
    return {};
}

}  // namespace

void wgmma_mma(bool bf16, int n, float* d, const std::uint32_t* a, std::uint64_t desc_a,
               std::uint64_t desc_b, bool trans_b, bool scale_d) {
    MmaOp op;
    op.run = &run_mma;
    op.warp = this_warp("wgmma.mma_async");
    op.bf16 = bf16, op.n = n, op.d = d, op.a = a, op.desc_a = desc_a, op.desc_b = desc_b;
    op.trans_b = trans_b, op.scale_d = scale_d;
    warp_collective(op, "wgmma.mma_async");
}

void wgmma_fence() {
    WarpOp op;
    op.run = &run_fence;
    op.warp = this_warp("wgmma.fence");
    warp_collective(op, "wgmma.fence");
}

void wgmma_commit() {
    WarpOp op;
    op.run = &run_commit;
    op.warp = this_warp("wgmma.commit_group");
    warp_collective(op, "wgmma.commit_group");
}

void wgmma_wait(int pending) {
    WarpOp op;
    op.run = &run_wait;
    op.warp = this_warp("wgmma.wait_group");
    op.pending = pending;
    for (; !op.done; ++op.spins)
        warp_collective(op, "wgmma.wait_group");
}

}  // namespace napkin::emu
