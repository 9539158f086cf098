// The two activation views: Korthikanti et al.'s closed form and the op plan's per-tensor sum
// agree within a few percent; the op plan's extra is the norms' fp32 statistics (and, with
// full checkpointing, the peak adds one block rebuilt during the backward).
#include <gtest/gtest.h>

#include "estimator/estimate.h"

namespace napkin {
namespace {

Estimate run(const char* preset, std::int64_t B, std::int64_t T, Checkpointing ck, AttentionImpl att,
             double dropout = 0.0) {
    EstimateInputs in;
    in.model = preset_or_throw(preset);
    in.model.dropout = dropout;
    in.seq_len = T;
    in.micro_batch = B;
    in.checkpointing = ck;
    in.attention = att;
    in.peak_flops_per_s = 1e15;
    in.gpu_memory_bytes = 80e9;
    return Estimator{}.run(in);
}

void expect_agree(const Estimate& e, double tolerance) {
    EXPECT_GT(e.act_detailed_kept_bytes, 0);
    EXPECT_NEAR(e.act_detailed_kept_bytes / e.act_closed_form_bytes, 1.0, tolerance)
        << "detailed " << e.act_detailed_kept_bytes << " closed form " << e.act_closed_form_bytes;
}

TEST(Activations, Gpt2ClosedFormMatchesKorthikantiExactly) {
    // Per layer, s = 1024, b = 4, h = 768, a = 12, 2-byte activations, dropout on:
    // 34 sbh + 5 as^2 b.
    const Estimate e = run("gpt2", 4, 1024, Checkpointing::none, AttentionImpl::naive, 0.1);
    const double s = 1024, b = 4, h = 768, a = 12;
    EXPECT_DOUBLE_EQ(e.act_closed_form_layer_bytes, s * b * h * 34 + 5 * a * s * s * b);
    const Estimate sel = run("gpt2", 4, 1024, Checkpointing::selective, AttentionImpl::naive, 0.1);
    EXPECT_DOUBLE_EQ(sel.act_closed_form_layer_bytes, s * b * h * 34);
    const Estimate full = run("gpt2", 4, 1024, Checkpointing::full, AttentionImpl::naive, 0.1);
    EXPECT_DOUBLE_EQ(full.act_closed_form_layer_bytes, s * b * h * 2);
}

TEST(Activations, Gpt2ViewsAgree) {
    for (double dropout : {0.0, 0.1}) {
        for (auto att : {AttentionImpl::naive, AttentionImpl::flash}) {
            for (auto ck : {Checkpointing::none, Checkpointing::selective, Checkpointing::full}) {
                SCOPED_TRACE(testing::Message() << "dropout " << dropout << " attention " << static_cast<int>(att)
                                                << " ckpt " << static_cast<int>(ck));
                expect_agree(run("gpt2", 8, 1024, ck, att, dropout), 0.02);
            }
        }
    }
}

TEST(Activations, GeneralizedFormAgreesForLlama) {
    for (const char* name : {"llama2-7b", "llama3-8b"}) {
        for (auto ck : {Checkpointing::none, Checkpointing::full}) {
            SCOPED_TRACE(name);
            expect_agree(run(name, 1, 4096, ck, AttentionImpl::flash), 0.02);
        }
    }
}

TEST(Activations, FullCheckpointPeakAddsOneBlock) {
    const Estimate none = run("gpt2", 4, 1024, Checkpointing::none, AttentionImpl::flash);
    const Estimate full = run("gpt2", 4, 1024, Checkpointing::full, AttentionImpl::flash);
    // The last block's rebuilt tensors (all but its output) replace the epilogue's, which the
    // head's backward has consumed: ln_f's output and statistics and the head's input gradient.
    const double N = 4 * 1024, C = 768;
    const double epilogue = 2 * N * C + 8 * N + 2 * N * C;
    EXPECT_NEAR(full.act_detailed_bytes - full.act_detailed_kept_bytes,
                none.act_detailed_layer_bytes - 2.0 * N * C - epilogue, 1.0);
    EXPECT_LT(full.act_detailed_bytes, none.act_detailed_bytes);
}

}  // namespace
}  // namespace napkin
