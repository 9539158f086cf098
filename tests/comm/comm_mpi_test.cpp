// The nonblocking collectives over real MPI ranks: tests/comm/comm_ranks_main.cpp under
// `mpirun -n 2` and `-n 3` (uneven), each rank checking started-and-waited collectives against
// the blocking ones bit for bit. Skips without mpirun or the MPI backend. Labelled slow (not run
// under the sanitizers, as zero_mpi_test).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "tests/cli/mpi_util.h"

namespace {

std::string slurp(const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

void run_ranks(int n) {
    std::string why;
    if (!have_mpi(&why)) GTEST_SKIP() << why;
    const std::string stem = testing::TempDir() + "/napkin_comm_ranks_" + std::to_string(getpid());
    const std::string cmd = kMpiEnv + NAPKIN_MPIEXEC + " -n " + std::to_string(n) +
                            " --oversubscribe " + COMM_RANKS_BINARY + " >" + stem + ".out 2>" +
                            stem + ".err";
    const int status = std::system(cmd.c_str());
    const std::string out = slurp(stem + ".out"), err = slurp(stem + ".err");
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out << err;
    for (int r = 0; r < n; ++r) {
        EXPECT_NE(out.find("ok rank " + std::to_string(r) + " of " + std::to_string(n)),
                  std::string::npos)
            << out << err;
    }
}

TEST(CommMpi, StartedCollectivesEqualBlockingOnTwoRanks) {
    run_ranks(2);
}

TEST(CommMpi, StartedCollectivesEqualBlockingOnThreeRanks) {
    run_ranks(3);
}

}  // namespace
