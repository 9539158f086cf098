// nvcuda::wmma (CUDA's <mma.h>, the warp matrix functions) on the emulator: the m16n16k16
// fragments of __half and __nv_bfloat16 multiplicands with float or __half accumulators,
// fill_fragment, load_matrix_sync, store_matrix_sync and mma_sync, as the CUDA Programming
// Guide's "Warp Matrix Functions" describe them. The emulated kernels get it from
// tests/cuda_emu/include/mma.h, which shadows the toolkit's for the host compiler only; nvcc
// builds use the real one.
//
// What it holds a kernel to, beyond computing D = A B + C (fp32 accumulation over k in order,
// each product exact, as the tensor cores' are):
// - The mapping of matrix elements to the lanes' `x[]` is unspecified by CUDA, so here it is a
//   permutation drawn per launch and per fragment type (seeded by the launch's number): a kernel
//   that reads or writes `x[]` as if it knew which element sits where gets wrong answers. What
//   CUDA allows stays right: the same operation on every element, element-wise work between
//   fragments of one type. A fragment with more slots than elements (__half multiplicands: 16
//   per lane, 256 elements over 512 slots) holds each element twice, the copy read drawn too.
// - The _sync calls are warp collectives (napkin::emu::warp_collective): all 32 lanes of a full
//   warp must make the same call, with the same pointer, ldm and layout; the pointer must be
//   256-bit aligned and ldm a multiple of 16 bytes. Anything else fails the launch with a
//   message, where the hardware leaves it undefined.
#pragma once

// Before the CUDA headers, as everywhere (it defines __shared__ for them).
#include "tests/cuda_emu/cuda_emu.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <cstdint>
#include <string>
#include <type_traits>

namespace nvcuda::wmma {

struct row_major;
struct col_major;
struct matrix_a;
struct matrix_b;
struct accumulator;

enum layout_t { mem_row_major, mem_col_major };

template <class T>
struct helper_traits {
    using element_type = T;
    using storage_element_type = T;
    using fill_argument_type = T;
};

template <class T, int size>
struct __frag_base {
    enum { num_elements = size };
    enum { num_storage_elements = size };
    using element_type = T;
    using storage_element_type = T;
    T x[size];
};

}  // namespace nvcuda::wmma

namespace napkin::emu::wmma {

namespace nv = nvcuda::wmma;

// Elements each lane holds, as CUDA's mma.h declares them for m16n16k16 (0: not emulated).
template <class Use, class T>
constexpr int elements_per_lane() {
    if constexpr (std::is_same_v<Use, nv::accumulator>)
        return std::is_same_v<T, float> || std::is_same_v<T, __half> ? 8 : 0;
    else if constexpr (std::is_same_v<T, __half>)
        return 16;
    else if constexpr (std::is_same_v<T, __nv_bfloat16>)
        return 8;
    return 0;
}

// Which fragment type: one mapping each.
template <class Use, class T, class Layout>
constexpr int fragment_kind() {
    const int use = std::is_same_v<Use, nv::matrix_a>   ? 0
                    : std::is_same_v<Use, nv::matrix_b> ? 1
                                                        : 2;
    const int type = std::is_same_v<T, float> ? 0 : std::is_same_v<T, __half> ? 1 : 2;
    const int layout = std::is_same_v<Layout, nv::row_major>   ? 0
                       : std::is_same_v<Layout, nv::col_major> ? 1
                                                               : 2;
    return use * 9 + type * 3 + layout;
}

constexpr int kDim = 16;                // m = n = k
constexpr int kElements = kDim * kDim;  // of each 16 x 16 matrix
constexpr int kLanes = 32;

// The running launch's mapping of a fragment type with `per_lane` slots in each lane: entry
// copy * 256 + row * 16 + col is the slot (lane * per_lane + index) that holds that element's
// copy (copies: per_lane * 32 / 256). Drawn when the launch first asks (emu_wmma.cpp).
const std::uint16_t* fragment_slots(int kind, int per_lane);

// Why a load or store's arguments are invalid ("" when they are fine): the guide's rules.
std::string check_pointer(const void* p, unsigned ldm, std::size_t element_bytes);

inline float to_float(float v) {
    return v;
}
inline float to_float(__half v) {
    return __half2float(v);
}
inline float to_float(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
template <class T>
T from_float(float v) {
    if constexpr (std::is_same_v<T, __half>)
        return __float2half_rn(v);
    else if constexpr (std::is_same_v<T, __nv_bfloat16>)
        return __float2bfloat16_rn(v);
    else
        return v;
}

// A fragment's 256 elements across the warp, as floats, and back.
template <class Frag>
struct Slots {
    static constexpr int kPerLane = Frag::num_elements;
    static constexpr int kCopies = kPerLane * kLanes / kElements;
    const std::uint16_t* map = fragment_slots(Frag::kind, kPerLane);

    float get(Frag* const* lanes, int e) const {
        const int s = map[e];  // the first copy: which one that is, the permutation chose
        return to_float(lanes[s / kPerLane]->x[s % kPerLane]);
    }
    void set(Frag* const* lanes, int e, float v) const {
        const auto stored = from_float<typename Frag::element_type>(v);
        for (int c = 0; c < kCopies; ++c) {
            const int s = map[c * kElements + e];
            lanes[s / kPerLane]->x[s % kPerLane] = stored;
        }
    }
};

inline std::size_t offset(int row, int col, unsigned ldm, bool row_major) {
    return row_major ? static_cast<std::size_t>(row) * ldm + col
                     : static_cast<std::size_t>(col) * ldm + row;
}

// The ops each lane passes to warp_collective; `run` sees all 32.
template <class Frag, class T>
struct LoadOp : WarpCollective {
    Frag* frag;
    const T* p;
    unsigned ldm;
    bool row_major;
};

template <class Frag, class T>
struct StoreOp : WarpCollective {
    const Frag* frag;
    T* p;
    unsigned ldm;
    bool row_major;
};

template <class D, class A, class B, class C>
struct MmaOp : WarpCollective {
    D* d;
    const A* a;
    const B* b;
    const C* c;
};

// The lanes' ops, typed.
template <class Op>
std::array<Op*, kLanes> typed(WarpCollective* const* lanes) {
    std::array<Op*, kLanes> ops{};
    for (int l = 0; l < kLanes; ++l)
        ops[l] = static_cast<Op*>(lanes[l]);
    return ops;
}

// The same pointer, ldm and layout in every lane, valid by the guide's rules.
template <class Op>
std::string check_uniform(const std::array<Op*, kLanes>& ops, std::size_t element_bytes) {
    for (int l = 1; l < kLanes; ++l)
        if (ops[l]->p != ops[0]->p || ops[l]->ldm != ops[0]->ldm ||
            ops[l]->row_major != ops[0]->row_major)
            return "lane " + std::to_string(l) +
                   " passes another pointer, ldm or layout than lane 0; they must be the same "
                   "in all lanes";
    return check_pointer(ops[0]->p, ops[0]->ldm, element_bytes);
}

template <class Frag, class T>
std::string run_load(WarpCollective* const* lanes) {
    const auto ops = typed<LoadOp<Frag, T>>(lanes);
    if (std::string e = check_uniform(ops, sizeof(T)); !e.empty()) return e;
    std::array<Frag*, kLanes> frags{};
    for (int l = 0; l < kLanes; ++l)
        frags[l] = ops[l]->frag;
    const Slots<Frag> slots;
    const LoadOp<Frag, T>& op = *ops[0];
    for (int r = 0; r < kDim; ++r)
        for (int c = 0; c < kDim; ++c)
            slots.set(frags.data(), r * kDim + c,
                      to_float(op.p[offset(r, c, op.ldm, op.row_major)]));
    return {};
}

template <class Frag, class T>
std::string run_store(WarpCollective* const* lanes) {
    const auto ops = typed<StoreOp<Frag, T>>(lanes);
    if (std::string e = check_uniform(ops, sizeof(T)); !e.empty()) return e;
    std::array<Frag*, kLanes> frags{};
    for (int l = 0; l < kLanes; ++l)
        frags[l] = const_cast<Frag*>(ops[l]->frag);
    const Slots<Frag> slots;
    const StoreOp<Frag, T>& op = *ops[0];
    for (int r = 0; r < kDim; ++r)
        for (int c = 0; c < kDim; ++c)
            op.p[offset(r, c, op.ldm, op.row_major)] =
                from_float<T>(slots.get(frags.data(), r * kDim + c));
    return {};
}

template <class D, class A, class B, class C>
std::string run_mma(WarpCollective* const* lanes) {
    const auto ops = typed<MmaOp<D, A, B, C>>(lanes);
    std::array<A*, kLanes> a{};
    std::array<B*, kLanes> b{};
    std::array<C*, kLanes> c{};
    std::array<D*, kLanes> d{};
    for (int l = 0; l < kLanes; ++l) {
        a[l] = const_cast<A*>(ops[l]->a);
        b[l] = const_cast<B*>(ops[l]->b);
        c[l] = const_cast<C*>(ops[l]->c);
        d[l] = ops[l]->d;
    }
    const Slots<A> sa;
    const Slots<B> sb;
    const Slots<C> sc;
    const Slots<D> sd;
    std::array<float, kElements> am{}, bm{}, out{};
    for (int e = 0; e < kElements; ++e) {
        am[e] = sa.get(a.data(), e);
        bm[e] = sb.get(b.data(), e);
    }
    // Every input is read before any output is written: d may be c (C = A B + C in place).
    for (int i = 0; i < kDim; ++i)
        for (int j = 0; j < kDim; ++j) {
            float acc = sc.get(c.data(), i * kDim + j);
            for (int k = 0; k < kDim; ++k)
                acc += am[i * kDim + k] * bm[k * kDim + j];
            out[i * kDim + j] = acc;
        }
    for (int e = 0; e < kElements; ++e)
        sd.set(d.data(), e, out[e]);
    return {};
}

}  // namespace napkin::emu::wmma

namespace nvcuda::wmma {

// m16n16k16 only, of the types CUDA declares for it (static_assert otherwise).
template <class Use, int m, int n, int k, class T, class Layout = void>
class fragment : public __frag_base<T, napkin::emu::wmma::elements_per_lane<Use, T>()> {
    static_assert(m == 16 && n == 16 && k == 16,
                  "cuda-emu: WMMA is emulated for the m16n16k16 shape only");
    static_assert(napkin::emu::wmma::elements_per_lane<Use, T>() > 0,
                  "cuda-emu: WMMA is emulated for __half and __nv_bfloat16 multiplicands and "
                  "float or __half accumulators");
    static_assert(std::is_same_v<Use, accumulator> != !std::is_void_v<Layout>,
                  "a matrix_a or matrix_b fragment names its layout; an accumulator does not");

public:
    static constexpr int kind = napkin::emu::wmma::fragment_kind<Use, T, Layout>();
};

template <class T, int size>
void fill_fragment(__frag_base<T, size>& f,
                   const typename helper_traits<T>::fill_argument_type& v) {
    for (int i = 0; i < size; ++i)
        f.x[i] = v;
}

template <class Use, class T, class Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& a, const T* p, unsigned ldm) {
    static_assert(!std::is_same_v<Use, accumulator>,
                  "an accumulator's load_matrix_sync takes a layout_t");
    using Frag = fragment<Use, 16, 16, 16, T, Layout>;
    napkin::emu::wmma::LoadOp<Frag, T> op;
    op.run = &napkin::emu::wmma::run_load<Frag, T>;
    op.frag = &a;
    op.p = p;
    op.ldm = ldm;
    op.row_major = std::is_same_v<Layout, row_major>;
    napkin::emu::warp_collective(op, "wmma::load_matrix_sync");
}

template <class T>
void load_matrix_sync(fragment<accumulator, 16, 16, 16, T>& a, const T* p, unsigned ldm,
                      layout_t layout) {
    using Frag = fragment<accumulator, 16, 16, 16, T>;
    napkin::emu::wmma::LoadOp<Frag, T> op;
    op.run = &napkin::emu::wmma::run_load<Frag, T>;
    op.frag = &a;
    op.p = p;
    op.ldm = ldm;
    op.row_major = layout == mem_row_major;
    napkin::emu::warp_collective(op, "wmma::load_matrix_sync");
}

template <class T>
void store_matrix_sync(T* p, const fragment<accumulator, 16, 16, 16, T>& a, unsigned ldm,
                       layout_t layout) {
    using Frag = fragment<accumulator, 16, 16, 16, T>;
    napkin::emu::wmma::StoreOp<Frag, T> op;
    op.run = &napkin::emu::wmma::run_store<Frag, T>;
    op.frag = &a;
    op.p = p;
    op.ldm = ldm;
    op.row_major = layout == mem_row_major;
    napkin::emu::warp_collective(op, "wmma::store_matrix_sync");
}

// D = A B + C; d may be c. bf16 multiplicands accumulate into float only, as on the hardware.
template <class Td, class Tab, class La, class Lb, class Tc>
void mma_sync(fragment<accumulator, 16, 16, 16, Td>& d,
              const fragment<matrix_a, 16, 16, 16, Tab, La>& a,
              const fragment<matrix_b, 16, 16, 16, Tab, Lb>& b,
              const fragment<accumulator, 16, 16, 16, Tc>& c) {
    static_assert(!std::is_same_v<Tab, __nv_bfloat16> ||
                      (std::is_same_v<Td, float> && std::is_same_v<Tc, float>),
                  "__nv_bfloat16 multiplicands need float accumulators");
    using D = fragment<accumulator, 16, 16, 16, Td>;
    using A = fragment<matrix_a, 16, 16, 16, Tab, La>;
    using B = fragment<matrix_b, 16, 16, 16, Tab, Lb>;
    using C = fragment<accumulator, 16, 16, 16, Tc>;
    napkin::emu::wmma::MmaOp<D, A, B, C> op;
    op.run = &napkin::emu::wmma::run_mma<D, A, B, C>;
    op.d = &d;
    op.a = &a;
    op.b = &b;
    op.c = &c;
    napkin::emu::warp_collective(op, "wmma::mma_sync");
}

}  // namespace nvcuda::wmma
