// mma.sync, ldmatrix and cp.async on the emulator (tests/cuda_emu/emu_ptx.h says what they model).
// The fragment layouts are the PTX ISA's, written out here a second time on purpose, from the
// ISA's tables rather than from kernels/cuda/mma.cuh: tests/cuda_emu/emu_ptx_test.cpp holds both
// this file and a kernel's use of the layouts to hand-computed lanes.
// Before the CUDA headers, as everywhere (it defines __shared__ for them); it includes emu_ptx.h.
#include "tests/cuda_emu/cuda_emu.h"

#include <cuda_fp16.h>

#include <array>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace napkin::emu {

namespace {

constexpr int kLanes = 32;

// ---- mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 ----

struct MmaOp : WarpCollective {
    float* c;
    const std::uint32_t* a;
    const std::uint32_t* b;
};

// Element `half` (0: low, 1: high) of a register of two 16-bit values, as a float.
template <bool kBf16>
float element(std::uint32_t reg, int half) {
    const auto bits = static_cast<std::uint16_t>(reg >> (16 * half));
    if constexpr (kBf16) {
        const std::uint32_t widened = std::uint32_t{bits} << 16;
        float f;
        std::memcpy(&f, &widened, sizeof f);
        return f;
    } else {
        return __half2float(__ushort_as_half(bits));
    }
}

// The PTX ISA's "Matrix Fragments for mma.m16n8k16 with floating point type", lane = 4 g + t:
// A element a_i (i = 0..7, two per register, the lower index in the low half) sits at row g for
// i in {0, 1, 4, 5} and g + 8 otherwise, column 2 t + (i & 1) (+ 8 for i >= 4); B element b_i
// (i = 0..3) at row 2 t + (i & 1) (+ 8 for i >= 2), column g; C element c_i at row g (+ 8 for
// i >= 2), column 2 t + (i & 1).
template <bool kBf16>
std::string run_mma(WarpCollective* const* lanes) {
    float a[16][16], b[16][8], c[16][8];
    for (int lane = 0; lane < kLanes; ++lane) {
        const auto* op = static_cast<const MmaOp*>(lanes[lane]);
        const int g = lane >> 2, t = lane % 4;
        for (int i = 0; i < 8; ++i) {
            const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
            const int col = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
            a[row][col] = element<kBf16>(op->a[i / 2], i % 2);
        }
        for (int i = 0; i < 4; ++i)
            b[2 * t + (i & 1) + (i >= 2 ? 8 : 0)][g] = element<kBf16>(op->b[i / 2], i % 2);
        for (int i = 0; i < 4; ++i)
            c[g + (i >= 2 ? 8 : 0)][2 * t + (i & 1)] = op->c[i];
    }
    for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 8; ++j)
            for (int k = 0; k < 16; ++k)
                c[i][j] += a[i][k] * b[k][j];  // bf16 and fp16 products are exact in fp32
    for (int lane = 0; lane < kLanes; ++lane) {
        const auto* op = static_cast<const MmaOp*>(lanes[lane]);
        const int g = lane >> 2, t = lane % 4;
        for (int i = 0; i < 4; ++i)
            op->c[i] = c[g + (i >= 2 ? 8 : 0)][2 * t + (i & 1)];
    }
    return {};
}

// ---- ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 ----

struct LdmatrixOp : WarpCollective {
    std::uint32_t* r;
    std::uint32_t row;  // shared address: offset into the dynamic shared memory
};

std::atomic<std::uint64_t> g_bank_conflicts{0};

// Why 16 bytes at shared address `at` cannot be read or written ("" when they can).
std::string check_shared(std::uint32_t at) {
    const std::size_t bytes = dynamic_shared_bytes();
    if (std::size_t{at} + 16 > bytes)
        return "address " + std::to_string(at) + " + 16 is past the launch's " +
               std::to_string(bytes) + " bytes of dynamic shared memory";
    if (at % 16 != 0) return "address " + std::to_string(at) + " is not 16-byte aligned";
    return {};
}

// Element (i, j) of an 8 x 8 matrix whose rows start at rows[0..8).
std::uint32_t at(const unsigned char* const* rows, int i, int j) {
    std::uint16_t v;
    std::memcpy(&v, rows[i] + 2 * j, sizeof v);
    return v;
}

// Counts a conflict when the 8 rows' distinct addresses share a 16-byte group of banks (bank =
// byte address / 4 mod 32; a 16-byte aligned row covers the 4 banks of group address / 16 mod 8).
void count_conflicts(const unsigned char* const* rows) {
    const auto* base = static_cast<const unsigned char*>(dynamic_shared_memory());
    for (int i = 0; i < 8; ++i)
        for (int j = 0; j < i; ++j)
            if (rows[i] != rows[j] && (rows[i] - base) / 16 % 8 == (rows[j] - base) / 16 % 8) {
                ++g_bank_conflicts;
                return;
            }
}

// Lanes 8 m .. 8 m + 7 address the rows of matrix m; lane 4 g + t receives, in r[m], elements
// (g, 2t) and (g, 2t + 1) of it, or with .trans (2t, g) and (2t + 1, g), the first in the low half.
template <bool kTrans>
std::string run_ldmatrix(WarpCollective* const* lanes) {
    const auto* base = static_cast<const unsigned char*>(dynamic_shared_memory());
    std::array<const unsigned char*, kLanes> rows{};
    for (int lane = 0; lane < kLanes; ++lane) {
        const std::uint32_t at = static_cast<const LdmatrixOp*>(lanes[lane])->row;
        if (std::string e = check_shared(at); !e.empty())
            return "lane " + std::to_string(lane) + "'s row: " + e;
        rows[lane] = base + at;
    }
    for (int m = 0; m < 4; ++m)
        count_conflicts(&rows[8 * m]);
    for (int lane = 0; lane < kLanes; ++lane) {
        const int g = lane >> 2, t = lane % 4;
        auto* op = static_cast<const LdmatrixOp*>(lanes[lane]);
        for (int m = 0; m < 4; ++m) {
            const unsigned char* const* matrix = &rows[8 * m];
            op->r[m] = kTrans ? at(matrix, 2 * t, g) | at(matrix, 2 * t + 1, g) << 16
                              : at(matrix, g, 2 * t) | at(matrix, g, 2 * t + 1) << 16;
        }
    }
    return {};
}

// ---- cp.async ----

struct PendingCopy {
    unsigned char* dst;
    std::array<unsigned char, 16> bytes;
    std::int64_t group;  // -1 until committed
};

struct ThreadCopies {
    std::vector<PendingCopy> pending;
    std::int64_t committed = 0;         // groups committed so far
    std::vector<std::uint32_t> landed;  // 16-byte chunks landed since its last fence.proxy.async
};

// The running block's threads' copies, by linear thread index, and per 16-byte chunk of the
// dynamic shared memory the thread (rank + 1) whose cp.async landed there and has not yet
// issued fence.proxy.async (0: none). Blocks run one after another, so a new (launch, block)
// means the previous block has ended: its copies are dropped.
struct BlockCopies {
    std::uint64_t launch = 0;
    uint3 block{};
    std::vector<ThreadCopies> threads;
    std::vector<std::uint32_t> unfenced;
};
BlockCopies g_copies;

std::size_t this_rank() {
    return threadIdx.x + blockDim.x * (threadIdx.y + std::size_t{blockDim.y} * threadIdx.z);
}

BlockCopies& block_copies() {
    const bool same = g_copies.launch == launch_number() && g_copies.block.x == blockIdx.x &&
                      g_copies.block.y == blockIdx.y && g_copies.block.z == blockIdx.z;
    const std::size_t threads = std::size_t{blockDim.x} * blockDim.y * blockDim.z;
    if (!same) {
        g_copies.launch = launch_number();
        g_copies.block = blockIdx;
        g_copies.threads.assign(threads, ThreadCopies{});
        g_copies.unfenced.assign((dynamic_shared_bytes() + 15) / 16, 0);
    }
    return g_copies;
}

ThreadCopies& this_thread_copies() {
    return block_copies().threads[this_rank()];
}

}  // namespace

void mma_m16n8k16(bool bf16, float (&c)[4], const std::uint32_t (&a)[4],
                  const std::uint32_t (&b)[2]) {
    MmaOp op;
    op.run = bf16 ? &run_mma<true> : &run_mma<false>;
    op.c = c;
    op.a = a;
    op.b = b;
    warp_collective(op, bf16 ? "mma.sync.m16n8k16 (bf16)" : "mma.sync.m16n8k16 (f16)");
}

std::uint32_t shared_address(const void* p) {
    const auto* base = static_cast<const unsigned char*>(dynamic_shared_memory());
    const auto* q = static_cast<const unsigned char*>(p);
    if (base == nullptr || q < base || q > base + dynamic_shared_bytes())
        throw std::runtime_error(
            "a shared address of a pointer outside the launch's dynamic shared memory (static "
            "__shared__ arrays have none here)");
    return static_cast<std::uint32_t>(q - base);
}

void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t row, bool trans) {
    LdmatrixOp op;
    op.run = trans ? &run_ldmatrix<true> : &run_ldmatrix<false>;
    op.r = r;
    op.row = row;
    warp_collective(op, trans ? "ldmatrix.x4.trans" : "ldmatrix.x4");
}

std::uint64_t ldmatrix_bank_conflicts() {
    return g_bank_conflicts.load();
}

void cp_async_16(std::uint32_t dst, const void* src, int src_bytes) {
    if (std::string e = check_shared(dst); !e.empty())
        throw std::runtime_error("cp.async: the destination " + e);
    auto* d = static_cast<unsigned char*>(dynamic_shared_memory()) + dst;
    if (src_bytes < 0 || src_bytes > 16)
        throw std::runtime_error("cp.async: src_size " + std::to_string(src_bytes) +
                                 " is outside 0..16");
    PendingCopy copy{d, {}, -1};
    if (src_bytes > 0) {
        if (reinterpret_cast<std::uintptr_t>(src) % 16 != 0 ||
            !is_device_memory(src, static_cast<std::size_t>(src_bytes)))
            throw std::runtime_error(
                "cp.async: the source is not device memory at a 16-byte aligned address");
        std::memcpy(copy.bytes.data(), src, static_cast<std::size_t>(src_bytes));
    }
    std::memset(d, 0xff, 16);  // in flight: garbage until the wait
    this_thread_copies().pending.push_back(copy);
}

void cp_async_commit() {
    ThreadCopies& t = this_thread_copies();
    for (PendingCopy& c : t.pending)
        if (c.group < 0) c.group = t.committed;
    ++t.committed;
}

void cp_async_wait(int pending) {
    BlockCopies& block = block_copies();
    const std::size_t rank = this_rank();
    ThreadCopies& t = block.threads[rank];
    const std::int64_t done_below = t.committed - pending;  // groups [0, done_below) complete
    const auto* smem = static_cast<const unsigned char*>(dynamic_shared_memory());
    std::vector<PendingCopy> still;
    for (const PendingCopy& c : t.pending) {
        if (c.group >= 0 && c.group < done_below) {
            std::memcpy(c.dst, c.bytes.data(), c.bytes.size());
            const auto chunk = static_cast<std::uint32_t>((c.dst - smem) / 16);
            block.unfenced[chunk] = static_cast<std::uint32_t>(rank + 1);
            t.landed.push_back(chunk);
        } else {
            still.push_back(c);
        }
    }
    t.pending.swap(still);
}

void fence_proxy_async() {
    BlockCopies& block = block_copies();
    const auto self = static_cast<std::uint32_t>(this_rank() + 1);
    ThreadCopies& t = block.threads[self - 1];
    for (const std::uint32_t chunk : t.landed)
        if (block.unfenced[chunk] == self) block.unfenced[chunk] = 0;
    t.landed.clear();
}

std::uint32_t unfenced_cp_async_writer(std::uint32_t at) {
    const BlockCopies& block = block_copies();
    const std::size_t chunk = at / 16;
    return chunk < block.unfenced.size() ? block.unfenced[chunk] : 0;
}

void async_proxy_wrote(std::uint32_t at, std::size_t bytes) {
    BlockCopies& block = block_copies();
    for (std::size_t c = at / 16; c < (at + bytes + 15) / 16 && c < block.unfenced.size(); ++c)
        block.unfenced[c] = 0;
}

}  // namespace napkin::emu
