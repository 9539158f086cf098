// Helpers shared by the engine's test suites (CPU and CUDA): a small model that exercises every
// architecture switch, and the one-line error a call must throw.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <exception>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/model_config.h"

namespace napkin::test {

// Two layers, d_model 16, 4 heads, a vocabulary padded from 37 to 40: small enough for
// finite differences, odd enough to catch padding and GQA mistakes. Tied embeddings with
// learned positions (GPT-2), untied with RoPE (Llama), so both paths are covered.
inline ModelConfig small_config(NormKind norm, PositionKind pos, MlpKind mlp, int kv_heads, bool bias) {
    ModelConfig c;
    c.name = "test";
    c.vocab_size = 37;
    c.padded_vocab_size = 40;
    c.context_length = 16;
    c.n_layers = 2;
    c.d_model = 16;
    c.n_heads = 4;
    c.n_kv_heads = kv_heads;
    c.d_ff = 24;
    c.norm = norm;
    c.positions = pos;
    c.mlp = mlp;
    c.bias = bias;
    c.tied_embeddings = pos == PositionKind::learned;
    return c;
}

// n random input and target tokens in [0, vocab), from `seed`.
struct Batch {
    std::vector<std::int32_t> inputs, targets;
};
inline Batch random_batch(std::int64_t n, std::int64_t vocab, unsigned seed) {
    std::mt19937 rng(seed);
    Batch b;
    for (std::int64_t i = 0; i < n; ++i) {
        b.inputs.push_back(static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab)));
        b.targets.push_back(static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab)));
    }
    return b;
}

// The message of the E that `fn` throws (a test failure when it throws nothing or something
// else). Every message is one line.
template <class E, class F>
std::string error_of(F&& fn) {
    try {
        fn();
    } catch (const E& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
        return msg;
    } catch (const std::exception& e) {
        ADD_FAILURE() << "another exception: " << e.what();
        return {};
    }
    ADD_FAILURE() << "nothing thrown";
    return {};
}

// A fresh, empty folder per test and process: TempDir()/<prefix><suite>.<test>.<pid>. The same
// test can run twice at once: CTest runs the CUDA engine's tests on the GPU and again on the
// emulator (emu.*), and two checkouts' test runs share TempDir.
inline std::filesystem::path scratch_dir(const std::string& prefix) {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "." + info->name() + "." +
                       std::to_string(static_cast<long long>(getpid()));
    for (char& c : name) {
        if (c == '/') c = '_';
    }
    const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / (prefix + name);
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

inline void expect_contains(const std::string& msg, const std::string& part) {
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
}

}  // namespace napkin::test
