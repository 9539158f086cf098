// For tests that launch `mpirun ... napkin train`: whether they can run here, and the
// environment every launch needs. The test target defines NAPKIN_HAVE_MPI and NAPKIN_MPIEXEC
// when CMake found the MPI backend and mpirun (tests/CMakeLists.txt).
#pragma once

#include <filesystem>
#include <string>

#ifndef NAPKIN_MPIEXEC
#define NAPKIN_MPIEXEC ""
#endif

// Root may run Open MPI only when told; one OpenMP thread per rank on a small machine.
inline const std::string kMpiEnv =
    "OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
    "OMPI_MCA_mpi_yield_when_idle=1 ";

// False, with the reason in *why, when this build or machine cannot launch ranks.
inline bool have_mpi(std::string* why) {
#if !defined(NAPKIN_HAVE_MPI)
    *why = "napkin was built without the MPI backend (install libopenmpi-dev openmpi-bin, reconfigure)";
    return false;
#else
    if (std::string(NAPKIN_MPIEXEC).empty() || !std::filesystem::exists(NAPKIN_MPIEXEC)) {
        *why = "no mpirun found (install openmpi-bin)";
        return false;
    }
    return true;
#endif
}
