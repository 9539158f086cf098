// Device memory of the emulated CUDA runtime for the emulator's own tests
// (tests/cuda_emu/emu_test.cpp, emu_epilogue_test.cpp).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

namespace napkin::emu {

// Device memory for n elements of T, freed at scope exit.
template <class T>
class Buffer {
public:
    explicit Buffer(std::size_t n) : n_(n) {
        EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T)), cudaSuccess);
    }
    explicit Buffer(const std::vector<T>& host) : Buffer(host.size()) {
        EXPECT_EQ(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
    ~Buffer() { cudaFree(p_); }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    T* get() const { return p_; }
    std::vector<T> host() const {
        std::vector<T> h(n_);
        EXPECT_EQ(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
        return h;
    }

private:
    std::size_t n_;
    T* p_ = nullptr;
};

}  // namespace napkin::emu
