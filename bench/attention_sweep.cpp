// attention_bench --sweep (bench/attention_sweep.h). Per candidate the napkin math beside its
// time: model FLOPs (attention_forward_cost / attention_backward_cost); the bytes its streamed
// tiles bring from L2 into shared memory (tile_bytes); and per pass the block's threads, rows
// and shared memory and the shared-memory bytes a warp reads per m16n8k16 product, the number
// the candidates were chosen by (an SM reads 128 bytes of shared memory a clock).
#include "bench/attention_sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/attention_fa2_candidates.h"
#include "bench/cuda_bench.h"
#include "core/cuda/cuda_check.h"
#include "kernels/attention.h"

namespace napkin::bench {

namespace {

struct Buffers {
    std::int64_t qkv_n;
    DeviceBuffer<bf16_t> qkv, dout, out, dqkv;
    float* lse = nullptr;

    Buffers(const SweepShape& s, std::mt19937& rng)
        : qkv_n(s.B * s.T * (s.NH + 2ll * s.KVH) * s.HD),
          qkv(qkv_n, &rng),
          dout(s.B * s.T * s.NH * s.HD, &rng),
          out(s.B * s.T * s.NH * s.HD, nullptr),
          dqkv(qkv_n, nullptr) {
        void* bytes = nullptr;
        NAPKIN_CUDA_CHECK(cudaMalloc(&bytes, static_cast<std::size_t>(s.B * s.NH * s.T) * 4));
        lse = static_cast<float*>(bytes);
    }
    ~Buffers() { cudaFree(lse); }
    Buffers(const Buffers&) = delete;
    Buffers& operator=(const Buffers&) = delete;
};

struct SweepRow {
    const Fa2Candidate* c;
    double ms, max_diff;
    double pass_ms[2] = {NAN, NAN};  // a backward's passes alone
    bool wrong = false;              // its output is not the engine's (kWrongAbove): never picked
};

// A candidate whose output differs from the engine's by more than this fraction of the engine's
// largest magnitude computes something else (or NaN): its time is printed but it is never the
// fastest. Both accumulate in fp32 and round to bf16, so a correct one differs by a few bf16
// ulps (2^-8 relative each) at most.
constexpr double kWrongAbove = 0.02;

double max_abs(const std::vector<bf16_t>& a) {
    double m = 0.0;
    for (const bf16_t v : a)
        m = std::max(m, std::abs(static_cast<double>(static_cast<float>(v))));
    return m;
}

// NAPKIN_SWEEP_INJECT=NAME:throw,NAME:wrong (tests only): the named candidate throws before its
// first call, or its output is perturbed before the check, so that the emulated sweep shows both
// safety nets at work where every candidate is right.
std::string injected(const char* candidate) {
    const char* v = std::getenv("NAPKIN_SWEEP_INJECT");
    if (v == nullptr) return {};
    const std::string list = std::string(",") + v + ",", name = std::string(",") + candidate + ":";
    const std::size_t at = list.find(name);
    if (at == std::string::npos) return {};
    const std::size_t from = at + name.size();
    return list.substr(from, list.find(',', from) - from);
}

// After a candidate threw: empty when the device still works (the error was the launcher's
// check or a launch refused, which cudaGetLastError clears), else the sticky error that a fault
// inside a kernel leaves on the context for every later call.
std::string device_lost() {
    cudaGetLastError();
    const cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) return {};
    cudaGetLastError();
    const cudaError_t again = cudaDeviceSynchronize();
    return again == cudaSuccess ? std::string() : cudaGetErrorString(again);
}

// The bytes of the tiles a call streams into shared memory (causal): a block of R queries reads
// the K and V rows (2 HD 16-bit elements each) of keys 0 .. min(T, i0 + R) (forward, pass 2); a
// pass-1 block of R keys reads the Q, dout and out rows (3 HD) of queries j0 .. T of each of the
// group's heads, or with row statistics Q and dout and 8 bytes of them (the statistics' kernel
// reads dout and out once more). About B NH T^2 HD (2 or 3) / R: what more rows a block save.
// The rows loaded once per block (Q, dout; K, V in pass 1) are left out.
double tile_bytes(const Fa2Candidate& c, const SweepShape& s) {
    const double heads = static_cast<double>(s.B * s.NH), row = static_cast<double>(s.HD) * 2.0;
    double bytes = 0.0;
    for (int pass = 0; pass < c.passes; ++pass) {
        const std::int64_t R = c.rows[pass];
        const bool key_pass = c.backward && pass == 0;
        double rows = 0.0;  // per head
        for (std::int64_t t0 = 0; t0 < s.T; t0 += R)
            rows += static_cast<double>(key_pass ? s.T - t0 : std::min(s.T, t0 + R));
        if (key_pass && c.row_stats)
            bytes +=
                rows * heads * (2.0 * row + 8.0) + static_cast<double>(s.T) * heads * 2.0 * row;
        else
            bytes += rows * heads * (key_pass ? 3.0 : 2.0) * row;
    }
    return bytes;
}

double max_abs_diff(const std::vector<bf16_t>& a, const std::vector<bf16_t>& b) {
    double m = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double d = std::abs(static_cast<double>(static_cast<float>(a[i])) -
                                  static_cast<double>(static_cast<float>(b[i])));
        m = std::isnan(d) ? INFINITY : std::max(m, d);
    }
    return m;
}

// One call of candidate c (its direction) on the shape's buffers; `pass` 0 or 1: that pass of a
// backward alone.
void call(const Fa2Candidate& c, const SweepShape& s, Buffers& b, cudaStream_t stream,
          int pass = -1) {
    const AttentionDims dims{s.B, s.T, s.NH, s.KVH, s.HD};
    const AttentionFlashBackwardArgs<bf16_t> bwd{
        b.dqkv.get(), b.dout.get(), b.out.get(), b.qkv.get(), b.lse, dims, nullptr};
    if (c.backward)
        (pass < 0 ? c.bwd : c.bwd_pass[pass])(bwd, {stream});
    else
        c.fwd({b.out.get(), b.lse, b.qkv.get(), dims, nullptr}, {stream});
}

// The candidate's output from fresh: out (forward), or dqkv from zeros (backward, from the
// engine's forward's out and lse).
std::vector<bf16_t> output(const Fa2Candidate& c, const SweepShape& s, Buffers& b,
                           cudaStream_t stream) {
    if (c.backward) {
        cuda::attention_flash_mma_forward<bf16_t>(
            {b.out.get(), b.lse, b.qkv.get(), {s.B, s.T, s.NH, s.KVH, s.HD}, nullptr}, {stream});
        NAPKIN_CUDA_CHECK(cudaMemsetAsync(
            b.dqkv.get(), 0, static_cast<std::size_t>(b.qkv_n) * sizeof(bf16_t), stream));
    }
    call(c, s, b, stream);
    NAPKIN_CUDA_CHECK(cudaStreamSynchronize(stream));
    return c.backward ? b.dqkv.host() : b.out.host();
}

void print_row(const SweepShape& s, const SweepRow& r, double flops, double default_ms, bool best) {
    const Fa2Candidate& c = *r.c;
    char passes[128];
    if (c.passes == 1)
        std::snprintf(passes, sizeof passes, "%d/%d %5.1fK %3.0f", c.threads[0], c.rows[0],
                      static_cast<double>(c.smem_bytes[0]) / 1024.0, c.smem_read_per_mma[0]);
    else
        std::snprintf(passes, sizeof passes,
                      "%7.3f ms %d/%d %5.1fK %3.0f | %7.3f ms %d/%d %5.1fK %3.0f", r.pass_ms[0],
                      c.threads[0], c.rows[0], static_cast<double>(c.smem_bytes[0]) / 1024.0,
                      c.smem_read_per_mma[0], r.pass_ms[1], c.threads[1], c.rows[1],
                      static_cast<double>(c.smem_bytes[1]) / 1024.0, c.smem_read_per_mma[1]);
    const double tiles = tile_bytes(c, s);
    std::printf("%-11s %-3s %-19s %9.3f %8.1f %6.3f %9.2g %1s %8.2f %6.2f  %s%s\n", s.name,
                c.backward ? "bwd" : "fwd", c.name, r.ms, flops / (r.ms * 1e-3) / 1e12,
                r.ms / default_ms, r.max_diff, best ? "*" : "", tiles / 1e9,
                tiles / (r.ms * 1e-3) / 1e12, passes,
                r.wrong ? "  WRONG: not the engine's output, never picked" : "");
}

}  // namespace

void print_sweep_header() {
    std::printf(
        "candidate tiles of the mma.sync flash attention, and kernels on wgmma (*-wgmma*, sm_90 "
        "only; bench/attention_fa2_candidates.cu), "
        "causal, bf16, no dropout; vs default: time / the engine's time (the first row of each "
        "direction); diff: largest |candidate - engine| of out (fwd) or dqkv (bwd); * the "
        "fastest; tile GB: the streamed tiles' bytes from L2 into shared memory, and TB/s; per "
        "pass: threads/rows a block, shared memory a block, shared-memory bytes read per "
        "m16n8k16 product (bwd: pass 1 | pass 2, each with its median ms alone: pass 1 writes "
        "dK and dV, pass 2 dQ; the fastest of each combine into the 'best passes' line; "
        "*-rs, *-kpp, b*-wgmma-tma: D and lse from a kernel of their own, timed with pass 1); "
        "WRONG: diff above 2%% of the engine's largest |value|, never picked; a candidate that "
        "throws is reported and skipped\n\n");
    std::printf("%-11s %-3s %-19s %9s %8s %6s %9s %1s %8s %6s  %s\n", "shape", "dir", "candidate",
                "median ms", "TFLOP/s", "vs def", "diff", "", "tile GB", "TB/s", "per pass");
}

// The fastest pass 1 and pass 2 among the backward rows, combined, against the engine's passes
// (the first row's): printed and returned; null without passes timed.
nlohmann::json best_passes(const SweepShape& s, const std::vector<SweepRow>& timed) {
    const SweepRow* best[2] = {nullptr, nullptr};
    for (const SweepRow& r : timed)
        for (int p = 0; p < 2; ++p)
            if (!r.wrong && !std::isnan(r.pass_ms[p]) &&
                (best[p] == nullptr || r.pass_ms[p] < best[p]->pass_ms[p]))
                best[p] = &r;
    const SweepRow& engine = timed.front();
    if (best[0] == nullptr || best[1] == nullptr || std::isnan(engine.pass_ms[0])) return nullptr;
    const double sum = best[0]->pass_ms[0] + best[1]->pass_ms[1];
    const double engine_sum = engine.pass_ms[0] + engine.pass_ms[1];
    std::printf(
        "%-11s bwd best passes: pass 1 of %s (%.3f ms) + pass 2 of %s (%.3f ms) = %.3f ms, "
        "%.3f of the engine's passes (%.3f ms)\n",
        s.name, best[0]->c->name, best[0]->pass_ms[0], best[1]->c->name, best[1]->pass_ms[1], sum,
        sum / engine_sum, engine_sum);
    return {{"shape", s.name},
            {"pass1", best[0]->c->name},
            {"pass1_ms", best[0]->pass_ms[0]},
            {"pass2", best[1]->c->name},
            {"pass2_ms", best[1]->pass_ms[1]},
            {"ms", sum},
            {"engine_ms", engine_sum},
            {"vs_engine", sum / engine_sum}};
}

nlohmann::json sweep_shape(const SweepShape& s, int warmup, int reps, cudaStream_t stream,
                           std::mt19937& rng, nlohmann::json* best_backward_passes,
                           std::string* lost) {
    Buffers b(s, rng);
    const AttentionShape shape{.B = s.B,
                               .T = s.T,
                               .NH = s.NH,
                               .KVH = s.KVH,
                               .HD = s.HD,
                               .impl = AttentionImpl::flash,
                               .dt = DType::bf16};
    nlohmann::json rows = nlohmann::json::array();
    std::string fastest_forward;
    for (const bool backward : {false, true}) {
        const double flops = static_cast<double>(backward ? attention_backward_cost(shape).flops
                                                          : attention_forward_cost(shape).flops);
        std::vector<SweepRow> timed;
        std::vector<bf16_t> reference;
        double reference_max = 0.0;
        for (const Fa2Candidate& c : fa2_candidates()) {
            if (c.HD != s.HD || c.backward != backward) continue;
            if (c.sm90a && !fa2_sm90a_unavailable().empty()) {
                std::printf("  %s skipped: %s\n", c.name, fa2_sm90a_unavailable().c_str());
                continue;
            }
            try {
                const std::string inject = injected(c.name);
                if (inject == "throw") throw std::runtime_error("injected (NAPKIN_SWEEP_INJECT)");
                std::vector<bf16_t> got = output(c, s, b, stream);
                if (inject == "wrong" && !got.empty())
                    got[0] = bf16_t(static_cast<float>(got[0]) + 1.0f);
                if (c.is_default) {
                    reference = got;
                    reference_max = max_abs(got);
                }
                const double diff = reference.empty() ? NAN : max_abs_diff(got, reference);
                const double ms = median_ms([&] { call(c, s, b, stream); }, stream, warmup, reps);
                SweepRow row{&c, ms, diff};
                row.wrong = !c.is_default && !(diff <= kWrongAbove * reference_max);
                for (int p = 0; p < 2; ++p)
                    if (c.backward && c.bwd_pass[p] != nullptr)
                        row.pass_ms[p] =
                            median_ms([&] { call(c, s, b, stream, p); }, stream, warmup, reps);
                timed.push_back(row);
            } catch (const std::exception& e) {
                // One candidate's failure costs its row, not the session's sweep.
                std::printf("%-11s %-3s %-19s failed: %s\n", s.name, backward ? "bwd" : "fwd",
                            c.name, e.what());
                rows.push_back({{"shape", s.name},
                                {"dir", backward ? "bwd" : "fwd"},
                                {"candidate", c.name},
                                {"error", e.what()}});
                *lost = device_lost();
                if (!lost->empty()) {
                    std::printf("%-11s the device is unusable after %s (%s): the sweep stops\n",
                                s.name, c.name, lost->c_str());
                    return rows;
                }
            }
        }
        if (timed.empty()) continue;
        const double default_ms = timed.front().ms;  // each direction's default comes first
        const auto best = std::min_element(timed.begin(), timed.end(), [](auto& x, auto& y) {
            return !x.wrong && (y.wrong || x.ms < y.ms);
        });
        for (const SweepRow& r : timed) {
            print_row(s, r, flops, default_ms, &r == &*best);
            nlohmann::json pass_ms = nullptr;
            if (backward && !std::isnan(r.pass_ms[0])) pass_ms = {r.pass_ms[0], r.pass_ms[1]};
            rows.push_back({{"shape", s.name},
                            {"B", s.B},
                            {"T", s.T},
                            {"NH", s.NH},
                            {"KVH", s.KVH},
                            {"HD", s.HD},
                            {"dir", backward ? "bwd" : "fwd"},
                            {"candidate", r.c->name},
                            {"tiles", r.c->tiles},
                            {"default", r.c->is_default},
                            {"ms", r.ms},
                            {"tflops", flops / (r.ms * 1e-3) / 1e12},
                            {"vs_default", r.ms / default_ms},
                            {"max_diff", r.max_diff},
                            {"tile_bytes", tile_bytes(*r.c, s)},
                            {"pass_ms", pass_ms},
                            {"wrong", r.wrong},
                            {"best", &r == &*best}});
        }
        if (!backward) fastest_forward = best->c->name;
        if (!backward || best_backward_passes == nullptr) continue;
        nlohmann::json passes = best_passes(s, timed);
        // The engine on the fastest (docs/CUDA.md "The engine on candidates").
        if (!passes.is_null() && !fastest_forward.empty()) {
            const std::string p1 = passes["pass1"], p2 = passes["pass2"];
            const std::string list =
                fastest_forward + "," + (p1 == p2 ? p1 : p1 + "@1," + p2 + "@2");
            std::printf("%-11s the engine on the fastest: NAPKIN_ATTENTION_CANDIDATES=%s\n", s.name,
                        list.c_str());
            passes["attention_candidates"] = list;
        }
        *best_backward_passes = passes;
    }
    std::printf("\n");
    return rows;
}

}  // namespace napkin::bench
