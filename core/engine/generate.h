// The inference engine: a GPT run forward only, with a KV cache, for `napkin generate`
// (docs/INFERENCE.md, "Measured: napkin generate"). No training state: no gradients, no master
// weights, no optimizer, nothing kept for a backward; the weights in the working dtype.
//
// Everything is allocated once, at construction, before the prefill, through the accounting
// allocator with the categories estimator/inference.h's engine_memory() predicts to the byte:
//   parameters    every tensor of param_tensors(cfg), as the training engine holds it
//   kv_cache      "kv_cache", (L, 2, B, S, KVH, HD), S = Tp + G positions per sequence
//   activations   "residual" (B Tp, C), "arena" (B Tp, W) with W the widest op's in + out,
//                 "logits" (B, Vp): the head's output on each sequence's last position
//   temporaries   "norm.stats" (2 B Tp fp32), "matmul.scratch" (the GEMM scratch of the backend),
//                 on CUDA with flash-decoding "decode_attention.workspace" (the decode steps'
//                 split-KV partials, B NH ceil(S / chunk) (HD + 2) fp32)
//   data          "tokens" (B Tp int32), the step's token ids on the device
// A step of M tokens (prefill M = B Tp, a decode step M = B) walks each block with the residual
// stream in "residual" and every op's input and output at the two ends of the arena (an op reads
// one end and writes the other; W >= in + out for every op, so they never overlap).
// GenerateShape and generate_buffers, the sizes both the engine and the estimator use, are in
// core/buffer_plan.h. Tests: tests/engine/generate_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/allocator.h"
#include "core/buffer_plan.h"
#include "core/dtype.h"
#include "core/engine/gpt.h"
#include "core/model_config.h"

namespace napkin {

namespace profiler {
class Recorder;
class KernelTagger;
}  // namespace profiler

class EngineDevice;

class Generator {
public:
    // On the CPU (device null) or on `device`; storage f32 or bf16. The parameters start as
    // `napkin train` initializes them from `seed`. Throws UsageError for a shape the model cannot
    // run (no batch, Tp + G past the context length, a config the engine does not run).
    static std::unique_ptr<Generator> create(const ModelConfig& cfg, DType storage,
                                             const GenerateShape& shape, AccountingAllocator& alloc,
                                             std::uint64_t seed, EngineDevice* device = nullptr);
    virtual ~Generator() = default;

    // The prefill: prompts (B, Tp) host token ids, each < V; the keys and values of positions
    // [0, Tp) go into the cache. logits: (B, V) fp32, each sequence's last position.
    virtual void prefill(const std::int32_t* prompts, std::vector<float>& logits) = 0;
    // One decode step: tokens (B) host ids at the next position (Tp, Tp + 1, ...); at most
    // G - 1 of them after the prefill. logits as prefill's.
    virtual void decode(const std::int32_t* tokens, std::vector<float>& logits) = 0;
    virtual std::int64_t position() const = 0;  // of the next token fed

    // The weights, by param_tensors(cfg)'s names and order (frozen slots: weight only).
    virtual std::vector<ParamSlot>& params() = 0;
    virtual void set_param(std::size_t i, const float* values) = 0;  // fp32 in, rounded
    virtual void get_param(std::size_t i, float* out) const = 0;
    // Profiling as the training engine's (Gpt::set_recorder, set_kernel_tagger).
    virtual void set_recorder(profiler::Recorder* recorder) = 0;
    virtual void set_kernel_tagger(profiler::KernelTagger* tagger) = 0;
};

// Copies every parameter of `from` (a training engine's model, e.g. one import_weights filled)
// into `to`, by name; the two must be the same config.
void copy_weights(Gpt& from, Generator& to);

}  // namespace napkin
