// The inference engine on the CPU (GeneratorImpl<CpuKernels<T>>); on CUDA the device builds it
// (EngineDevice::create_generator, core/engine/cuda_device.cpp). The shape checks and the
// buffers' sizes, whatever the backend.
#include "core/engine/generate.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "core/check.h"
#include "core/engine/cpu_kernels.h"
#include "core/engine/engine_device.h"
#include "core/engine/generate_impl.h"
#include "core/engine/gpt_impl.h"

namespace napkin {

namespace {

void check_shape(const ModelConfig& cfg, DType storage, const GenerateShape& s) {
    PlanInputs in;
    in.precision = storage == DType::bf16 ? Precision::bf16 : Precision::fp32;
    check_engine_support(cfg, in);
    if (storage != DType::f32 && storage != DType::bf16)
        throw UsageError("{precision}: generate runs in fp32 or bf16");
    if (s.batch <= 0)
        throw UsageError("{batch}: must be a positive integer (got " + std::to_string(s.batch) +
                         ")");
    if (s.prompt_len <= 0) throw UsageError("the prompt: must hold at least one token");
    if (s.gen_len <= 0) {
        throw UsageError("{max_new_tokens}: must be a positive integer (got " +
                         std::to_string(s.gen_len) + ")");
    }
    if (s.positions() > cfg.context_length) {
        throw UsageError("{max_new_tokens}: a prompt of " + std::to_string(s.prompt_len) +
                         " tokens plus " + std::to_string(s.gen_len) + " new ones passes " +
                         cfg.name + "'s context of " + std::to_string(cfg.context_length) +
                         " positions");
    }
}

}  // namespace

std::unique_ptr<Generator> Generator::create(const ModelConfig& cfg, DType storage,
                                             const GenerateShape& shape, AccountingAllocator& alloc,
                                             std::uint64_t seed, EngineDevice* device) {
    check_shape(cfg, storage, shape);
    if (device != nullptr) return device->create_generator(cfg, storage, shape, alloc, seed);
    if (storage == DType::bf16)
        return std::make_unique<GeneratorImpl<CpuKernels<bf16_t>>>(cfg, shape, alloc, seed);
    return std::make_unique<GeneratorImpl<CpuKernels<float>>>(cfg, shape, alloc, seed);
}

void copy_weights(Gpt& from, Generator& to) {
    std::unordered_map<std::string, std::size_t> index;
    for (std::size_t i = 0; i < from.params().size(); ++i)
        index.emplace(from.params()[i].name, i);
    std::vector<float> buf;
    for (std::size_t i = 0; i < to.params().size(); ++i) {
        const ParamSlot& p = to.params()[i];
        const auto it = index.find(p.name);
        NAPKIN_ASSERT(it != index.end() && from.params()[it->second].numel == p.numel,
                      "copy_weights: no parameter '" << p.name << "' of " << p.numel
                                                     << " elements in the source");
        buf.resize(static_cast<std::size_t>(p.numel));
        from.get_param(it->second, buf.data());
        to.set_param(i, buf.data());
    }
}

}  // namespace napkin
