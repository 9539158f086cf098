// ZeRO on the CUDA engine at world size 1 (label gpu): the one ZeroEngine (core/engine/zero.h)
// with the CUDA device and the NCCL communicator against the same engine on the CPU with the
// single communicator. Stage 0 drives the engine directly (the trainer makes a run data-parallel
// only with several ranks or --zero > 0); stages 1-3 go through the trainer, as `napkin train
// --device cuda --zero S` does. Losses and gradient norms follow the CPU's within the recipe's
// rounding; the bytes of every model-state category and of the communication buffers are the
// CPU's exactly (the same tensors, names and categories). Skips without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/comm.h"
#include "core/comm/comm_nccl.h"
#include "core/engine/data.h"
#include "core/engine/engine_device.h"
#include "core/engine/optimizer.h"
#include "core/engine/trainer.h"
#include "core/engine/zero.h"
#include "core/tensor.h"
#include "tests/engine_cuda/cuda_engine_test_util.h"

namespace napkin {
namespace {

constexpr int kSteps = 6;
constexpr std::array<MemCategory, 5> kStateCategories = {
    MemCategory::parameters, MemCategory::master_weights, MemCategory::gradients,
    MemCategory::optimizer_state, MemCategory::communication};

TrainOptions tiny_zero(Precision precision, int zero, DeviceKind device, Finetune finetune = Finetune::full,
                       OptimizerKind optimizer = OptimizerKind::adamw) {
    TrainOptions o;
    o.plan.finetune = finetune;
    o.plan.lora_rank = finetune == Finetune::full ? 0 : 4;
    o.plan.optimizer = optimizer;
    o.model = preset_or_throw("tiny");
    o.plan.micro_batch = 2;
    o.plan.seq_len = 32;
    o.plan.precision = precision;
    o.device = device;
    o.steps = kSteps;
    o.grad_accum = 2;
    o.zero = zero;
    o.optimizer.lr = 3e-3f;
    o.optimizer.warmup_steps = 2;
    o.optimizer.total_steps = kSteps;
    o.optimizer.grad_clip = 0.5f;  // the global norm clips: the sharded norm must be right
    o.optimizer.kind = o.plan.optimizer;
    return o;
}

struct Curve {
    std::vector<float> loss, grad_norm;
    std::array<std::int64_t, kMemCategoryCount> peak_bytes{};
    std::string backend;
};

// The loss rtol per recipe: fp32 differs by summation order only, bf16-amp by its rounding.
double loss_rtol(Precision p) {
    return p == Precision::fp32 ? 2e-3 : 3e-2;
}

void expect_follows(const Curve& gpu, const Curve& cpu, Precision p) {
    ASSERT_EQ(gpu.loss.size(), cpu.loss.size());
    for (std::size_t s = 0; s < cpu.loss.size(); ++s) {
        EXPECT_NEAR(gpu.loss[s], cpu.loss[s], loss_rtol(p) * cpu.loss[s]) << "loss, step " << s;
        EXPECT_NEAR(gpu.grad_norm[s], cpu.grad_norm[s], 5 * loss_rtol(p) * cpu.grad_norm[s])
            << "grad norm, step " << s;
    }
    for (MemCategory m : kStateCategories) {
        const auto c = static_cast<std::size_t>(m);
        EXPECT_EQ(gpu.peak_bytes[c], cpu.peak_bytes[c]) << enum_name(kMemCategoryNames, m);
    }
    EXPECT_EQ(gpu.backend.rfind("nccl (", 0), 0u) << gpu.backend;
}

// Stage 0 at world size 1, the engine driven as the trainer drives it: zero the gradients, one
// micro-batch per step, all-reduce and the ordinary optimizer.
Curve stage0(Precision precision, DeviceKind kind) {
    const TrainOptions o = tiny_zero(precision, 0, kind);
    std::unique_ptr<EngineDevice> device = open_engine_device(kind);
    HostMemory host;
    AccountingAllocator alloc(device != nullptr ? device->memory() : static_cast<RawMemory&>(host));
    std::unique_ptr<Communicator> boot = make_single_communicator();
    std::unique_ptr<Communicator> nccl;
    Communicator* comm = boot.get();
    if (device != nullptr) {
        nccl = make_nccl_communicator(*boot);
        comm = nccl.get();
    }
    Curve out;
    out.backend = comm->backend();
    {
        std::unique_ptr<Gpt> model = device != nullptr
                                         ? device->create_gpt(o.model, o.plan, alloc, o.seed)
                                         : Gpt::create(o.model, o.plan, alloc, o.seed);
        const PrecisionDTypes pd = precision_dtypes(precision, o.plan.optimizer, false);
        ZeroEngine zero(0, *comm, *model, alloc, o.optimizer, pd, device.get());
        Optimizer optimizer(o.optimizer, *model, alloc, pd.optimizer_state, device.get());
        const std::int64_t n = o.plan.micro_batch * o.plan.seq_len;
        Tensor batch(alloc, "batch", MemCategory::data, DType::f32, {2 * n});  // int32, same size
        std::vector<std::int32_t> tokens(static_cast<std::size_t>(2 * n));
        SyntheticCorpus data(o.seed);
        for (int s = 0; s < kSteps; ++s) {
            alloc.reset_peaks();
            zero.zero_grads();
            data.next_batch(tokens.data(), tokens.data() + n, o.plan.micro_batch, o.plan.seq_len);
            const std::int32_t* in = tokens.data();
            if (device != nullptr) {
                device->copy_to_device(batch.raw(), tokens.data(),
                                       tokens.size() * sizeof(std::int32_t));
                in = static_cast<const std::int32_t*>(batch.raw());
            }
            const double loss = zero.sum_over_ranks(model->forward_backward(in, in + n, 1.0f));
            const StepStats st = zero.step(s, 1.0f, &optimizer);
            if (device != nullptr) device->synchronize();
            out.loss.push_back(static_cast<float>(loss));
            out.grad_norm.push_back(st.grad_norm);
            for (std::size_t c = 0; c < kMemCategoryCount; ++c)
                out.peak_bytes[c] =
                    std::max(out.peak_bytes[c], alloc.peak_bytes(static_cast<MemCategory>(c)));
        }
    }
    EXPECT_EQ(alloc.live_blocks(), 0);
    return out;
}

// Stages 1-3 through the trainer, which makes the NCCL communicator over its own single one.
Curve trained(Precision precision, int zero, DeviceKind kind, Finetune finetune = Finetune::full,
              OptimizerKind optimizer = OptimizerKind::adamw) {
    Trainer t(tiny_zero(precision, zero, kind, finetune, optimizer));
    EXPECT_NE(t.zero(), nullptr);
    Curve out;
    out.backend = t.comm()->backend();
    for (int s = 0; s < kSteps; ++s) {
        const StepRecord r = t.step();
        out.loss.push_back(r.loss);
        out.grad_norm.push_back(r.grad_norm);
        for (std::size_t c = 0; c < kMemCategoryCount; ++c)
            out.peak_bytes[c] = std::max(out.peak_bytes[c], r.peak_bytes[c]);
    }
    // Stage 3's gathered units and stage 2-3's gradient buckets are all freed again.
    EXPECT_EQ(t.allocator().current_bytes(MemCategory::communication), 0);
    return out;
}

class ZeroCudaVsCpu : public testing::TestWithParam<std::tuple<int, Precision>> {};

TEST_P(ZeroCudaVsCpu, WorldOneOverNcclFollowsTheCpu) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    const auto [zero, precision] = GetParam();
    Curve cpu, gpu;
    if (zero == 0) {
        cpu = stage0(precision, DeviceKind::cpu);
        gpu = stage0(precision, DeviceKind::cuda);
    } else {
        cpu = trained(precision, zero, DeviceKind::cpu);
        gpu = trained(precision, zero, DeviceKind::cuda);
    }
    expect_follows(gpu, cpu, precision);
    EXPECT_LT(gpu.loss.back(), gpu.loss.front()) << "the CUDA run did not learn";
}

// FSDP + QLoRA (the NF4 base in bf16 storage, gathered per block: the dequantize kernel reads
// views into the gathered buffer) and adamw-8bit's block-aligned shards (the update kernel's
// absmax pointers into them), each through the CUDA kernels against the CPU.
TEST(ZeroCuda, QloraAndEightBitShardsFollowTheCpu) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    for (const auto& [finetune, optimizer, zero] :
         {std::tuple{Finetune::qlora, OptimizerKind::adamw, 3}, std::tuple{Finetune::full, OptimizerKind::adamw_8bit, 2}}) {
        SCOPED_TRACE(std::string(enum_name(kFinetuneNames, finetune)) + " " +
                     std::string(enum_name(kOptimizerNames, optimizer)) + " ZeRO-" + std::to_string(zero));
        const Curve cpu = trained(Precision::bf16_amp, zero, DeviceKind::cpu, finetune, optimizer);
        const Curve gpu = trained(Precision::bf16_amp, zero, DeviceKind::cuda, finetune, optimizer);
        expect_follows(gpu, cpu, Precision::bf16_amp);
    }
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroCudaVsCpu,
                         testing::Combine(testing::Values(0, 1, 2, 3),
                                          testing::Values(Precision::fp32, Precision::bf16_amp,
                                                          Precision::bf16)),
                         [](const testing::TestParamInfo<std::tuple<int, Precision>>& i) {
                             std::string n(enum_name(kPrecisionNames, std::get<1>(i.param)));
                             n.erase(std::remove(n.begin(), n.end(), '-'), n.end());
                             return "zero" + std::to_string(std::get<0>(i.param)) + "_" + n;
                         });

}  // namespace
}  // namespace napkin
