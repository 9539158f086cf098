// The communication interface in one process (world size 1): the nonblocking collectives
// complete at the start, wait() accepts tickets in any order, bytes stay zero (nothing leaves
// the process), and the profiler gets a start and a wait range per collective. Real ranks:
// tests/comm/comm_mpi_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/comm/comm.h"
#include "profiler/event.h"

namespace {

TEST(Comm, StartedCollectivesCompleteInOneProcess) {
    auto comm = napkin::make_single_communicator();
    std::vector<float> a = {1, 2, 3}, b = {4, 5, 6};
    const auto ta = comm->start_all_reduce(a.data(), a.size(), napkin::DType::f32, "a");
    const auto tb = comm->start_all_gather(b.data(), b.size(), napkin::DType::f32, "b");
    EXPECT_NE(ta, tb);
    EXPECT_EQ(comm->in_flight(), 2u);
    comm->progress();
    comm->wait(tb);
    comm->wait(ta);
    EXPECT_EQ(comm->in_flight(), 0u);
    EXPECT_EQ(a, (std::vector<float>{1, 2, 3}));
    EXPECT_EQ(b, (std::vector<float>{4, 5, 6}));
    EXPECT_EQ(comm->counters().total_sent(), 0u);
    EXPECT_EQ(comm->counters().calls[0], 1u);  // all_reduce
    EXPECT_EQ(comm->counters().calls[2], 1u);  // all_gather
}

TEST(Comm, StartAndWaitAreProfilerRanges) {
    auto comm = napkin::make_single_communicator();
    napkin::profiler::Recorder rec;
    comm->set_recorder(&rec);
    std::vector<float> g(8, 1.0f);
    comm->wait(comm->start_reduce_scatter(g.data(), g.size(), napkin::DType::f32, "gradients h.0"));
    std::vector<std::string> names;
    for (const auto& e : rec.take()) {
        if (const auto* r = std::get_if<napkin::profiler::RangeEvent>(&e)) names.push_back(r->name);
    }
    EXPECT_EQ(names, (std::vector<std::string>{"start reduce_scatter gradients h.0",
                                               "wait reduce_scatter gradients h.0"}));
}

TEST(Comm, WaitingForAnUnknownTicketIsAnInternalError) {
    auto comm = napkin::make_single_communicator();
    EXPECT_THROW(comm->wait(42), napkin::InternalError);
}

}  // namespace
