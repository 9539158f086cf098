// Communication per optimizer step per rank under data parallelism and ZeRO 1/2/3: which
// collectives run, over how many elements, the bytes one rank sends and receives by the ring
// algorithm (core/comm/collective.h), and the time they take on a link. The layout (units,
// padding) is the engine's own (core/comm/shard_layout.h), so a run's measured bytes equal
// these exactly. docs/ESTIMATOR.md, "Communication", has the formulas.
//
// Per step, Ψ parameters over W ranks, G micro-batches per rank; every buffer a whole padded
// unit (P_u elements, sum P >= Ψ):
//   ZeRO-0 (DDP)  all-reduce gradients once (DDP skips the sync on all but the last micro-batch)
//   ZeRO-1        reduce-scatter gradients once, all-gather updated parameters once
//   ZeRO-2        reduce-scatter gradients every micro-batch (they are not kept whole),
//                 all-gather updated parameters once
//   ZeRO-3        all-gather each unit before every region that reads it, reduce-scatter its
//                 gradients, every micro-batch; no all-gather after the step
// The ZeRO paper's volume (Rajbhandari et al. 2020, section 7) counts Ψ per reduce-scatter or
// all-gather and G = 1: 2Ψ for DDP, ZeRO-1 and ZeRO-2, 3Ψ for ZeRO-3. napkin shows it beside
// the exact ring bytes, which are (W - 1) / W of it per collective (plus padding, G, dtypes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/comm/collective.h"
#include "core/comm/shard_layout.h"
#include "core/dtype.h"
#include "core/model_config.h"

namespace napkin {

struct CommLine {
    std::string what;  // "gradients", "parameters"
    Collective op = Collective::all_reduce;
    DType dtype = DType::f32;
    double calls = 0;     // per step
    double elements = 0;  // per step, summed over the calls' whole (padded) buffers
    double sent_bytes = 0;
    double received_bytes = 0;
};

struct CommunicationEstimate {
    int world = 1;
    int zero = 0;
    double psi = 0;                    // Ψ: parameter elements, unpadded
    double padding = 0;                // sum (P_u - n_u): zeros added so units split evenly
    double paper_volume_elements = 0;  // 2Ψ, (G + 1)Ψ (ZeRO-2) or 3GΨ (ZeRO-3), the paper's count
    std::vector<CommLine> lines;       // empty with one rank
    double elements = 0;               // sum of the lines' elements
    double sent_bytes = 0;             // per rank per step, exact
    double received_bytes = 0;
    double link_bytes_per_s = 0;  // 0: no link given, no time
    std::string link;             // the link's name when the estimator chose it (3D placement)
    double seconds = 0;  // sent_bytes / link: the ring's bandwidth term, no latency, no overlap
};

// The ZeRO paper's volume per step in units of Psi (section 7, counted per micro-batch where the
// stage communicates per micro-batch): 2 for DDP and ZeRO-1, G + 1 for ZeRO-2 (a reduce-scatter
// per micro-batch), 3 G for ZeRO-3; and its label, "2 psi", "(G + 1) psi", "3 G psi".
double paper_volume_factor(int zero, std::int64_t grad_accum);
std::string paper_volume_label(int zero, std::int64_t grad_accum);

// Throws UsageError for a stage outside 0..3, grad_accum < 1 or a negative bandwidth.
CommunicationEstimate estimate_communication(const ShardLayout& layout, int zero,
                                             std::int64_t grad_accum, DType grads, DType weights,
                                             double link_bytes_per_s);

// Fine-tuning with adapters under ZeRO-3 (FSDP + QLoRA, Answer.AI 2024): the frozen base is
// sharded like the trainable adapters, in flat storage of the working dtype `weights` per unit
// (`frozen`, frozen_layout of core/comm/shard_layout.h over c.world ranks: QLoRA's NF4 codes and
// states in one group, the tensors in the working dtype in another), and each group is
// all-gathered as often as a trained model's unit is (a block twice per micro-batch). Adds a
// line per group, "frozen nf4" and "frozen base", in the working dtype's elements, to `c` and
// its totals (seconds included); nothing below ZeRO-3 or at one rank (the base is then
// replicated and never sent). Ψ and the paper's volume stay the trainable parameters'.
void add_frozen_base_gathers(CommunicationEstimate& c, const std::vector<FrozenUnit>& frozen, DType weights,
                             std::int64_t grad_accum);
// The same for a model known only by its size (napkin estimate --params): one flat unit of
// `numel` frozen parameters of `bytes_per_param` (QLoRA's NF4: 4.127 bits) packed in storage of
// the working dtype `weights`, gathered twice per micro-batch ("frozen nf4" or "frozen base").
void add_frozen_base_gathers_flat(CommunicationEstimate& c, double numel, double bytes_per_param,
                                  bool qlora, DType weights, std::int64_t grad_accum);

// fp8-amp's delayed scaling under data parallelism (core/engine/gpt_fp8.h): at each step's end,
// before the histories roll, every rank's amaxes are reduced to their maximum so that all ranks
// scale alike. One all-reduce (maximum) of the whole amax histories, `history_floats` fp32
// (slots x H: entry 0 the step's, the older entries already equal on every rank), a line "fp8
// amaxes" added to `c` and its totals; nothing at one rank or without histories.
void add_fp8_amax_reduce(CommunicationEstimate& c, std::int64_t history_floats);

}  // namespace napkin
