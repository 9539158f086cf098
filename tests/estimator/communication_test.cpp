// Communication per step per rank (estimator/communication.h) against counts made by hand,
// the shard layout's padding, the ring formula, the ZeRO paper's 2Ψ/3Ψ and the link table.
#include <gtest/gtest.h>

#include <cmath>

#include "core/check.h"
#include "core/comm/collective.h"
#include "core/comm/shard_layout.h"
#include "core/model_config.h"
#include "estimator/communication.h"
#include "estimator/estimate.h"
#include "estimator/links.h"
#include "estimator/napkin_formulas.h"
#include "kernels/nf4.h"

namespace napkin {
namespace {

TEST(RingTraffic, MatchesTheRingAlgorithm) {
    // 8 elements of 4 bytes over 4 ranks: chunks of 2.
    EXPECT_EQ(ring_traffic(Collective::all_reduce, 8, 4, 4).sent_bytes, 2u * 3 * 2 * 4);
    EXPECT_EQ(ring_traffic(Collective::reduce_scatter, 8, 4, 4).received_bytes, 3u * 2 * 4);
    EXPECT_EQ(ring_traffic(Collective::all_gather, 8, 2, 4).sent_bytes, 3u * 2 * 2);
    // Uneven: 10 elements over 4 ranks are chunks of ceil(10 / 4) = 3.
    EXPECT_EQ(ring_traffic(Collective::all_reduce, 10, 1, 4).sent_bytes, 2u * 3 * 3);
    // Broadcast as a chain from root 1 over 3 ranks: 1 -> 2 -> 0.
    EXPECT_EQ(ring_traffic(Collective::broadcast, 100, 1, 3, 1, 1).sent_bytes, 100u);
    EXPECT_EQ(ring_traffic(Collective::broadcast, 100, 1, 3, 1, 1).received_bytes, 0u);
    EXPECT_EQ(ring_traffic(Collective::broadcast, 100, 1, 3, 0, 1).sent_bytes, 0u);
    EXPECT_EQ(ring_traffic(Collective::broadcast, 100, 1, 3, 0, 1).received_bytes, 100u);
    EXPECT_EQ(ring_traffic(Collective::barrier, 0, 0, 8).sent_bytes, 0u);
    EXPECT_EQ(ring_traffic(Collective::all_reduce, 1000, 4, 1).sent_bytes,
              0u);  // one rank: nothing
}

TEST(ShardLayout, UnitsPadToAMultipleOfTheWorld) {
    const ModelConfig& c = preset_or_throw("tiny");
    const ShardLayout one = shard_layout(c, 1);
    EXPECT_EQ(one.numel(), count_params(c).allocated);
    EXPECT_EQ(one.padded(), one.numel());
    ASSERT_EQ(one.units.size(), static_cast<std::size_t>(c.n_layers) + 2);
    EXPECT_EQ(one.units.front().name, "embedding");
    EXPECT_EQ(one.units.back().name, "head");
    for (int w : {2, 3, 4, 7}) {
        const ShardLayout l = shard_layout(c, w);
        std::int64_t padding = 0;
        for (const ShardUnit& u : l.units) {
            EXPECT_EQ(u.padded % w, 0);
            EXPECT_EQ(u.shard * w, u.padded);
            EXPECT_LT(u.padded - u.numel, w);
            EXPECT_GE(u.padded, u.numel);
            padding += u.padded - u.numel;
        }
        EXPECT_EQ(l.padded() - l.numel(), padding);
        EXPECT_EQ(l.shard() * w, l.padded());
    }
    // Every parameter in exactly one unit, back to back.
    const std::vector<ParamTensor> params = param_tensors(c);
    for (std::size_t i = 0; i < params.size(); ++i) {
        const ShardUnit& u = one.units[static_cast<std::size_t>(one.param_unit[i])];
        EXPECT_LE(one.param_offset[i] + params[i].numel(), u.numel) << params[i].name;
    }
    // ZeRO-3 gathers: blocks twice, the tied embeddings three times, the head once.
    EXPECT_EQ(one.units[1].gathers_per_micro_batch, 2);
    EXPECT_EQ(one.units.front().gathers_per_micro_batch, c.tied_embeddings ? 3 : 2);
    EXPECT_EQ(one.units.back().gathers_per_micro_batch, 1);
    EXPECT_THROW(shard_layout(c, 0), UsageError);
}

TEST(Communication, DdpAndZeroStagesByHand) {
    // One unit of 10 elements over 4 ranks: padded to 12, shards of 3.
    const ShardLayout l = shard_layout_flat(10, 4);
    ASSERT_EQ(l.padded(), 12);
    const std::int64_t G = 3;
    const CommunicationEstimate z0 = estimate_communication(l, 0, G, DType::bf16, DType::bf16, 0);
    ASSERT_EQ(z0.lines.size(), 1u);
    EXPECT_EQ(z0.lines[0].op, Collective::all_reduce);
    EXPECT_DOUBLE_EQ(z0.sent_bytes, 2.0 * 3 * 3 * 2);  // 2 (W-1) chunk bytes, once per step
    EXPECT_DOUBLE_EQ(z0.paper_volume_elements, 20);    // 2Ψ
    EXPECT_DOUBLE_EQ(z0.padding, 2);

    const CommunicationEstimate z1 = estimate_communication(l, 1, G, DType::f32, DType::bf16, 0);
    EXPECT_DOUBLE_EQ(z1.sent_bytes, 3.0 * 3 * 4 + 3.0 * 3 * 2);  // RS fp32 + AG bf16, once

    const CommunicationEstimate z2 = estimate_communication(l, 2, G, DType::f32, DType::f32, 0);
    EXPECT_DOUBLE_EQ(z2.lines[0].calls, 3);  // a reduce-scatter per micro-batch
    EXPECT_DOUBLE_EQ(z2.sent_bytes, 3.0 * (3 * 3 * 4) + 3 * 3 * 4);
    EXPECT_DOUBLE_EQ(z2.paper_volume_elements,
                     40);  // (G + 1)Ψ: Ψ per reduce-scatter, and the gather

    const CommunicationEstimate z3 = estimate_communication(l, 3, G, DType::f32, DType::f32, 0);
    EXPECT_DOUBLE_EQ(z3.paper_volume_elements, 90);  // 3Ψ per micro-batch, G = 3 of them
    // Per micro-batch: 2 gathers + 1 reduce-scatter of the one unit.
    EXPECT_DOUBLE_EQ(z3.sent_bytes, 3.0 * 3 * (3 * 3 * 4));
    EXPECT_DOUBLE_EQ(z3.received_bytes, z3.sent_bytes);
    EXPECT_DOUBLE_EQ(z3.seconds, 0);  // no link
}

TEST(Communication, PaperVolumeIsTheLimitOfTheRingBytes) {
    // A large even model, fp32 everywhere: ring bytes = (W-1)/W x paper volume x 4, for any G
    // (the volume counts the collectives that run every micro-batch G times).
    const ShardLayout l = shard_layout_flat(1 << 20, 8);
    for (const std::int64_t G : {1, 4}) {
        for (int z = 0; z <= 3; ++z) {
            const CommunicationEstimate c =
                estimate_communication(l, z, G, DType::f32, DType::f32, 0);
            EXPECT_DOUBLE_EQ(c.sent_bytes, c.paper_volume_elements * 4 * 7 / 8)
                << "ZeRO-" << z << " G " << G;
        }
    }
    EXPECT_EQ(paper_volume_label(3, 4), "3 G psi");
    EXPECT_EQ(paper_volume_label(2, 4), "(G + 1) psi");
    EXPECT_EQ(paper_volume_label(3, 1), "3 psi");
}

TEST(Communication, NoTrafficOnOneRank) {
    const CommunicationEstimate c =
        estimate_communication(shard_layout_flat(1000, 1), 3, 4, DType::f32, DType::f32, 1e9);
    EXPECT_TRUE(c.lines.empty());
    EXPECT_DOUBLE_EQ(c.sent_bytes, 0);
    EXPECT_DOUBLE_EQ(c.seconds, 0);
}

TEST(Communication, TimeFromTheLink) {
    const LinkSpec& ndr = link_or_throw("ib-ndr");
    EXPECT_DOUBLE_EQ(ndr.bytes_per_s(), 50e9);
    EXPECT_DOUBLE_EQ(link_or_throw("nvlink4").bytes_per_s(), 450e9);  // 900 GB/s both directions
    EXPECT_NEAR(link_or_throw("pcie5").bytes_per_s(), 63.0e9, 0.1e9);
    const CommunicationEstimate c = estimate_communication(
        shard_layout_flat(1 << 20, 4), 0, 1, DType::bf16, DType::bf16, ndr.bytes_per_s());
    EXPECT_DOUBLE_EQ(c.seconds, c.sent_bytes / 50e9);
    try {
        link_or_throw("ib-qdr");
        FAIL();
    } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("link: unknown link 'ib-qdr'"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("nvlink4"), std::string::npos);
    }
    for (const LinkSpec& l : link_table()) {
        EXPECT_GT(l.gbit_per_s, 0) << l.name;
        EXPECT_FALSE(l.source.empty()) << l.name;
    }
}

TEST(Communication, EstimateUsesTheEngineLayout) {
    // A config's sharded states are the engine's padded units, to the element.
    EstimateInputs in;
    in.model = preset_or_throw("gpt2");
    in.seq_len = 1024;
    in.gpus = 8;
    in.gpu_memory_bytes = 80e9;
    in.precision = Precision::bf16_amp;
    const ShardLayout l = shard_layout(in.model, 8);
    Estimator est;
    for (int z = 0; z <= 3; ++z) {
        in.zero = z;
        const Estimate e = est.run(in);
        const double S = static_cast<double>(l.shard()), P = static_cast<double>(l.padded());
        const double n = static_cast<double>(count_params(in.model).allocated);
        EXPECT_DOUBLE_EQ(e.gpu.weights, (z == 3 ? S : z >= 1 ? P : n) * 2) << z;
        EXPECT_DOUBLE_EQ(e.gpu.grads, (z >= 2 ? S : P) * 2) << z;
        EXPECT_DOUBLE_EQ(e.gpu.master, (z >= 1 ? S : n) * 4) << z;
        EXPECT_DOUBLE_EQ(e.gpu.optimizer, (z >= 1 ? S : n) * 8) << z;
        EXPECT_EQ(e.comm.zero, z);
        EXPECT_EQ(e.comm.world, 8);
        EXPECT_GT(e.comm.sent_bytes, 0);
    }
    // adamw-8bit at ZeRO 1-3: the aligned layout, codes and one absmax per block per moment.
    in.optimizer = OptimizerKind::adamw_8bit;
    for (int z = 1; z <= 3; ++z) {
        in.zero = z;
        const Estimate e = est.run(in);
        const ShardLayout a = shard_layout(in.model, 8, 0, 2048);
        const double S = static_cast<double>(a.shard());
        EXPECT_DOUBLE_EQ(e.gpu.optimizer, 2 * (S + 4 * S / 2048)) << z;
        EXPECT_DOUBLE_EQ(e.gpu.master, S * 4) << z;
        EXPECT_DOUBLE_EQ(e.gpu.grads, (z >= 2 ? S : static_cast<double>(a.padded())) * 2) << z;
    }
    in.optimizer = OptimizerKind::adamw;
    // Fine-tuning: the units are the adapters' (the engine's layout, padding and all), the
    // frozen base whole beside them below ZeRO-3.
    in.finetune = Finetune::lora;
    in.lora_rank = 8;
    const ShardLayout la = shard_layout(in.model, 8, 8);
    in.zero = 0;
    const double frozen = Estimator{}.run(in).gpu.weights - static_cast<double>(la.numel()) * 2;
    for (int z = 0; z <= 2; ++z) {
        in.zero = z;
        const Estimate e = est.run(in);
        const double S = static_cast<double>(la.shard()), P = static_cast<double>(la.padded());
        const double m = static_cast<double>(la.numel());
        EXPECT_DOUBLE_EQ(e.gpu.weights, frozen + (z >= 1 ? P : m) * 2) << z;
        EXPECT_DOUBLE_EQ(e.gpu.grads, (z >= 2 ? S : P) * 2) << z;
        EXPECT_DOUBLE_EQ(e.gpu.master, (z >= 1 ? S : m) * 4) << z;
        EXPECT_DOUBLE_EQ(e.gpu.optimizer, (z >= 1 ? S : m) * 8) << z;
        EXPECT_DOUBLE_EQ(e.comm.psi, m);
        for (const CommLine& line : e.comm.lines) EXPECT_DOUBLE_EQ(line.calls, 12) << line.what;  // a collective per block, none for the embeddings or head
    }
    in.link_bytes_per_s = -1;
    EXPECT_THROW(est.run(in), UsageError);
}

TEST(ShardLayout, AlignedLayoutKeepsEveryBlockInOneShard) {
    // adamw-8bit at ZeRO 1-3: parameters start on block boundaries and shards are whole blocks.
    const ModelConfig c = preset_or_throw("tiny");
    const std::int64_t align = shard_alignment(OptimizerKind::adamw_8bit);
    EXPECT_EQ(align, 2048);
    EXPECT_EQ(shard_alignment(OptimizerKind::adamw), 1);
    const ShardLayout plain = shard_layout(c, 3);
    const ShardLayout l = shard_layout(c, 3, 0, align);
    EXPECT_EQ(l.numel(), plain.numel());  // the same parameters, gaps aside
    for (std::size_t i = 0; i < l.param_unit.size(); ++i) {
        EXPECT_EQ(l.param_offset[i] % align, 0) << i;
        EXPECT_EQ(l.param_numel[i], plain.param_numel[i]);
        const ShardUnit& u = l.units[static_cast<std::size_t>(l.param_unit[i])];
        EXPECT_LE(l.param_offset[i] + l.param_numel[i], u.padded);
    }
    for (const ShardUnit& u : l.units) {
        EXPECT_EQ(u.shard % align, 0) << u.name;
        EXPECT_EQ(u.padded, 3 * u.shard);
    }
    EXPECT_GT(l.padded(), plain.padded());
}

TEST(ShardLayout, AdaptersAloneFillTheUnits) {
    // LoRA/QLoRA: each block's unit holds its eight adapters; the embeddings, the head and the
    // frozen base are in no unit and never communicated.
    const ModelConfig c = preset_or_throw("tiny");
    const ShardLayout l = shard_layout(c, 3, 4);
    const std::vector<ParamTensor> params = param_tensors(c, 4);
    ASSERT_EQ(l.param_unit.size(), params.size());
    ASSERT_EQ(l.units.size(), static_cast<std::size_t>(c.n_layers) + 2);
    EXPECT_EQ(l.units.front().numel, 0);
    EXPECT_EQ(l.units.back().numel, 0);
    EXPECT_EQ(l.units.front().gathers_per_micro_batch, 0);
    std::int64_t adapters = 0;
    for (std::size_t i = 0; i < params.size(); ++i) {
        if (!params[i].adapter) {
            EXPECT_EQ(l.param_unit[i], -1) << params[i].name;
            continue;
        }
        adapters += params[i].numel();
        EXPECT_EQ(l.param_unit[i], params[i].layer + 1) << params[i].name;
    }
    for (int b = 1; b <= c.n_layers; ++b) {
        const ShardUnit& u = l.units[static_cast<std::size_t>(b)];
        EXPECT_EQ(u.params.size(), 8u);
        EXPECT_EQ(u.padded % 3, 0);
        EXPECT_LT(u.padded - u.numel, 3);
    }
    EXPECT_EQ(l.numel(), adapters);
}

TEST(Communication, Zero3GathersTheFrozenBaseOfAnAdapterRun) {
    // FSDP + QLoRA shards the frozen base too, so it is all-gathered as it is used: each unit's
    // NF4 bytes and its tensors in the working dtype, as two buffers of bf16 storage
    // (frozen_layout), each as often as a trained unit is gathered; and each rank keeps a shard.
    EstimateInputs in;
    in.model = preset_or_throw("gpt2");
    in.seq_len = 256;
    in.gpus = 4;
    in.grad_accum = 3;
    in.gpu_memory_bytes = 80e9;
    in.precision = Precision::bf16_amp;
    in.finetune = Finetune::qlora;
    in.lora_rank = 8;
    Estimator est;
    in.zero = 2;
    const Estimate z2 = est.run(in);
    for (const CommLine& l : z2.comm.lines) EXPECT_EQ(l.what.rfind("frozen", 0), std::string::npos);  // replicated
    in.zero = 3;
    const Estimate z3 = est.run(in);
    const ModelConfig& c = in.model;
    const std::vector<FrozenUnit> fl = frozen_layout(c, 4, 8, true, 2);
    const ShardLayout full = shard_layout(c, 4);
    // Block 0: its four linears' codes and states, each 16-byte aligned, in bf16 elements.
    std::uint64_t nf4 = 0;
    for (const ParamTensor& t : param_tensors(c)) {
        if (t.layer != 0 || !t.linear_weight) continue;
        for (std::uint64_t b : {nf4_code_bytes(t.numel()), nf4_state_bytes(t.numel())})
            nf4 = (nf4 + 15) / 16 * 16 + b;
    }
    EXPECT_EQ(fl[1].groups[0].bytes, nf4);
    const auto nf4_elements = static_cast<std::int64_t>((nf4 + 1) / 2);
    EXPECT_EQ(fl[1].groups[0].padded, (nf4_elements + 3) / 4 * 4);
    EXPECT_EQ(fl[1].groups[0].shard, fl[1].groups[0].padded / 4);
    EXPECT_EQ(fl[0].groups[0].padded, 0);  // the embeddings are not NF4
    const CommLine* lines[2] = {nullptr, nullptr};
    for (const CommLine& l : z3.comm.lines) {
        if (l.what == "frozen nf4") lines[0] = &l;
        if (l.what == "frozen base") lines[1] = &l;
    }
    ASSERT_NE(lines[0], nullptr);
    ASSERT_NE(lines[1], nullptr);
    for (int g = 0; g < 2; ++g) {
        double calls = 0, elements = 0, sent = 0;
        for (std::size_t u = 0; u < fl.size(); ++u) {
            const FrozenGroup& fg = fl[u].groups[g];
            if (fg.padded == 0) continue;
            const double times = 3.0 * full.units[u].gathers_per_micro_batch;
            calls += times;
            elements += times * static_cast<double>(fg.padded);
            sent += times * 3 * static_cast<double>(fg.shard) * 2;  // 3 of 4 chunks, 2 bytes each
        }
        EXPECT_EQ(lines[g]->dtype, DType::bf16);
        EXPECT_DOUBLE_EQ(lines[g]->calls, calls) << g;
        EXPECT_DOUBLE_EQ(lines[g]->elements, elements) << g;
        EXPECT_DOUBLE_EQ(lines[g]->sent_bytes, sent) << g;
    }
    EXPECT_DOUBLE_EQ(lines[0]->calls, 3.0 * 2 * c.n_layers);
    double trainable = 0;
    for (const CommLine& l : z3.comm.lines) {
        if (&l != lines[0] && &l != lines[1]) trainable += l.sent_bytes;
    }
    EXPECT_DOUBLE_EQ(z3.comm.sent_bytes, trainable + lines[0]->sent_bytes + lines[1]->sent_bytes);
    EXPECT_GT(lines[0]->sent_bytes, 10 * trainable);  // the base dominates: r = 8 adapters are tiny
    // Each rank keeps its shards of the base beside its shard of the adapters.
    const ShardLayout adapters = shard_layout(c, 4, 8);
    double frozen_shards = 0;
    for (const FrozenUnit& f : fl) frozen_shards += static_cast<double>(f.groups[0].shard + f.groups[1].shard) * 2;
    EXPECT_DOUBLE_EQ(z3.gpu.weights, static_cast<double>(adapters.shard()) * 2 + frozen_shards);
    // A model known only by its size: one flat unit of NF4 packed in bf16, gathered twice.
    EstimateInputs napkin_mode = in;
    napkin_mode.params_only = true;
    napkin_mode.params = 7e9;
    const Estimate flat = est.run(napkin_mode);
    const CommLine* flat_nf4 = nullptr;
    for (const CommLine& l : flat.comm.lines) {
        if (l.what == "frozen nf4") flat_nf4 = &l;
    }
    ASSERT_NE(flat_nf4, nullptr);
    EXPECT_EQ(flat_nf4->dtype, DType::bf16);
    EXPECT_NEAR(flat_nf4->sent_bytes, 3.0 * 2 * 0.75 * 7e9 * formulas::kNf4BitsPerParam / 8, 1e-6 * flat_nf4->sent_bytes);
    // Plain LoRA: everything in the working dtype, one line.
    in.finetune = Finetune::lora;
    const Estimate lora = est.run(in);
    int frozen_lines = 0;
    for (const CommLine& l : lora.comm.lines) frozen_lines += l.what.rfind("frozen", 0) == 0 ? 1 : 0;
    EXPECT_EQ(frozen_lines, 1);
}

}  // namespace
}  // namespace napkin
