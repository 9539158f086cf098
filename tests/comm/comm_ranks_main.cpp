// Run by every rank of `mpirun -n N comm_ranks` (tests/comm/comm_mpi_test.cpp launches it): the
// nonblocking collectives of core/comm/comm.h against the blocking ones on the same inputs.
// Several are started at once (fp32 all-reduce, bf16 reduce-scatter, fp32 all-gather), driven
// with progress() between pieces of "work", and waited for in reverse order; each result must
// equal the blocking call's bit for bit, and both must equal the sums every rank computes on
// its own from all ranks' inputs (small integers, so any order of addition is exact in fp32 and
// bf16). The bytes counted must be the blocking calls'.
// Prints "ok rank R of N" and exits 0, or prints what differed and exits 1.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/comm/comm.h"
#include "core/half.h"

namespace {

int g_failures = 0;

void expect(bool ok, const char* what, int rank) {
    if (ok) return;
    std::printf("rank %d: FAILED: %s\n", rank, what);
    ++g_failures;
}

// Integers in [-8, 8]: sums over a few ranks are exact in fp32 and bf16.
template <class T>
std::vector<T> random_values(std::size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> u(-8, 8);
    std::vector<T> v(n);
    for (auto& x : v)
        x = T(static_cast<float>(u(rng)));
    return v;
}

unsigned seed_of(int rank) {
    return 1234u + 17u * static_cast<unsigned>(rank);
}

template <class T>
std::vector<float> sum_over_ranks(std::size_t n, int world, unsigned offset) {
    std::vector<float> sum(n, 0.0f);
    for (int q = 0; q < world; ++q) {
        const auto v = random_values<T>(n, seed_of(q) + offset);
        for (std::size_t i = 0; i < n; ++i)
            sum[i] += napkin::to_float(v[i]);
    }
    return sum;
}

}  // namespace

int main() {
    using napkin::DType;
    auto comm = napkin::make_communicator();
    const int r = comm->rank(), w = comm->world_size();
    const auto W = static_cast<std::size_t>(w);
    // Sizes that do not divide evenly into anything in particular, and a fresh seed per rank.
    const std::size_t n_ar = 1000 + 37, shard_rs = 333, shard_ag = 129;
    const unsigned seed = seed_of(r);

    auto ar_blocking = random_values<float>(n_ar, seed);
    auto rs_blocking = random_values<napkin::bf16_t>(shard_rs * W, seed + 1);
    auto ag_blocking = random_values<float>(shard_ag * W, seed + 2);
    auto ar = ar_blocking;
    auto rs = rs_blocking;
    auto ag = ag_blocking;

    comm->all_reduce(ar_blocking.data(), n_ar, DType::f32, "blocking");
    comm->reduce_scatter(rs_blocking.data(), shard_rs, DType::bf16, "blocking");
    comm->all_gather(ag_blocking.data(), shard_ag, DType::f32, "blocking");
    const napkin::CommCounters blocking = comm->counters();

    const auto t_ar = comm->start_all_reduce(ar.data(), n_ar, DType::f32, "started");
    const auto t_rs = comm->start_reduce_scatter(rs.data(), shard_rs, DType::bf16, "started");
    const auto t_ag = comm->start_all_gather(ag.data(), shard_ag, DType::f32, "started");
    expect(comm->in_flight() == 3, "three collectives in flight after three starts", r);
    volatile double work = 0;
    for (int i = 0; i < 20; ++i) {
        for (int k = 0; k < 10000; ++k)
            work = work + k * 1e-9;
        comm->progress();
    }
    comm->wait(t_ag);
    comm->wait(t_rs);
    comm->wait(t_ar);
    expect(comm->in_flight() == 0, "nothing in flight after the waits", r);

    expect(std::memcmp(ar.data(), ar_blocking.data(), n_ar * sizeof(float)) == 0,
           "started all-reduce equals the blocking one", r);
    expect(std::memcmp(rs.data() + static_cast<std::size_t>(r) * shard_rs,
                       rs_blocking.data() + static_cast<std::size_t>(r) * shard_rs,
                       shard_rs * sizeof(napkin::bf16_t)) == 0,
           "started reduce-scatter's chunk equals the blocking one", r);
    expect(std::memcmp(ag.data(), ag_blocking.data(), shard_ag * W * sizeof(float)) == 0,
           "started all-gather equals the blocking one", r);

    // Against the sums computed here.
    const auto ar_sum = sum_over_ranks<float>(n_ar, w, 0);
    const auto rs_sum = sum_over_ranks<napkin::bf16_t>(shard_rs * W, w, 1);
    bool ar_ok = true, rs_ok = true, ag_ok = true;
    for (std::size_t i = 0; i < n_ar; ++i)
        ar_ok = ar_ok && ar[i] == ar_sum[i];
    for (std::size_t i = 0; i < shard_rs; ++i) {
        const std::size_t k = static_cast<std::size_t>(r) * shard_rs + i;
        rs_ok = rs_ok && napkin::to_float(rs[k]) == rs_sum[k];
    }
    for (int q = 0; q < w; ++q) {
        const auto mine = random_values<float>(shard_ag * W, seed_of(q) + 2);
        for (std::size_t i = 0; i < shard_ag; ++i) {
            const std::size_t k = static_cast<std::size_t>(q) * shard_ag + i;
            ag_ok = ag_ok && ag[k] == mine[k];
        }
    }
    expect(ar_ok, "all-reduce equals the sum over ranks", r);
    expect(rs_ok, "reduce-scatter's chunk equals the sum over ranks of that chunk", r);
    expect(ag_ok, "all-gather holds every rank's own chunk", r);

    const napkin::CommCounters both = comm->counters();
    const napkin::CommCounters started = both - blocking;
    for (std::size_t i = 0; i < napkin::kCollectiveCount; ++i) {
        expect(started.sent_bytes[i] == blocking.sent_bytes[i], "sent bytes as the blocking calls", r);
        expect(started.received_bytes[i] == blocking.received_bytes[i],
               "received bytes as the blocking calls", r);
        expect(started.calls[i] == blocking.calls[i], "calls counted as the blocking calls", r);
    }
    expect(blocking.total_sent() > 0 || w == 1, "bytes counted at all", r);

    // all_reduce_max (fp8-amp's amaxes): every rank ends with the elementwise maximum of all
    // ranks' values, which each rank computes from their seeds; counted as an fp32 all-reduce.
    const std::size_t n_max = 517;
    auto amax = random_values<float>(n_max, seed + 3);
    std::vector<float> want = amax;
    for (int q = 0; q < w; ++q) {
        const auto other = random_values<float>(n_max, seed_of(q) + 3);
        for (std::size_t i = 0; i < n_max; ++i)
            want[i] = std::max(want[i], other[i]);
    }
    const napkin::CommCounters before_max = comm->counters();
    comm->all_reduce_max(amax.data(), n_max, "amaxes");
    expect(std::memcmp(amax.data(), want.data(), n_max * sizeof(float)) == 0,
           "all_reduce_max is the elementwise maximum over ranks", r);
    const napkin::CommCounters max_bytes = comm->counters() - before_max;
    const auto ar_index = static_cast<std::size_t>(napkin::Collective::all_reduce);
    expect(max_bytes.sent_bytes[ar_index] ==
               napkin::ring_traffic(napkin::Collective::all_reduce, n_max, 4, w).sent_bytes,
           "all_reduce_max counts an fp32 all-reduce's ring bytes", r);

    if (g_failures == 0) std::printf("ok rank %d of %d\n", r, w);
    return g_failures == 0 ? 0 : 1;
}
