// 3D parallelism as Megatron-LM lays it out: tensor parallelism over T GPUs (Shoeybi et al.
// 2019), sequence parallelism beside it (Korthikanti et al. 2022), P pipeline stages with the
// 1F1B or the interleaved schedule of V chunks per GPU (Narayanan et al. 2021), and data
// parallelism (with ZeRO) over the DP = gpus / (T P) replicas. docs/ESTIMATOR.md, "3D
// parallelism", derives every formula here.
//
// Ranks are ordered as Megatron-LM orders them: TP innermost, then DP, then PP. So a TP group is
// T consecutive GPUs, a DP group spans T DP consecutive GPUs, and pipeline neighbours are T DP
// GPUs apart: which groups stay inside a node (NVLink) and which cross nodes (the network)
// follows from T, DP and the GPUs per node.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/model_config.h"

namespace napkin {

struct ParallelLayout {
    int tp = 1;   // T: tensor-parallel ranks (the heads and the MLP's hidden units split T ways)
    int pp = 1;   // P: pipeline stages
    int vpp = 1;  // V: interleaved chunks per GPU (1: the 1F1B schedule)
    int dp = 1;   // data-parallel replicas, gpus / (T P)
    bool sp = false;                 // sequence parallelism (needs T > 1)
    std::int64_t micro_batches = 1;  // M: per step per pipeline (the gradient accumulation G)
    int layers = 0;                  // L
    bool model_parallel() const { return tp * pp > 1; }
};

// Validates and builds the layout: T P must divide `gpus`; T must divide the heads, the kv-heads
// and d_ff; V > 1 needs P > 1 and V P dividing L; P at most L; SP needs T > 1. Throws
// UsageError naming the flag.
ParallelLayout parallel_layout(int gpus, int tp, int pp, int vpp, bool sp,
                               std::int64_t micro_batches, const ModelConfig& cfg);

// Layers on pipeline stage `stage` (0..P-1): L / P each, the first L mod P stages one more
// (Megatron-LM needs P | L, or the first and last stage sizes given; napkin keeps the heavier
// split on the first stages, which hold the most micro-batches).
int stage_layers(const ParallelLayout& p, int stage);

// Micro-batches whose activations a stage holds at its peak, in units of the stage's layers
// (Narayanan et al. 2021, sec. 2.2; Korthikanti et al. 2022, sec. 4.2.3):
//   1F1B (V = 1):   min(P - stage, M)
//   interleaved:    min(M V, 2 (P - stage - 1) + (V - 1) P + 1) chunks of L / (P V) layers,
//                   divided by V: the first stage's is P (1 + (P - 1) / (P V)) when M >= P.
double in_flight_micro_batches(const ParallelLayout& p, int stage);

// The pipeline bubble over the ideal (bubble-free) compute time: (P - 1) / (V M)
// (Narayanan et al. 2021, sec. 2.2.1 and 2.2.2).
double bubble_fraction(const ParallelLayout& p);

// The vocabulary Megatron-LM pads to under T-way tensor parallelism: a multiple of 128 T.
std::int64_t tp_padded_vocab(const ModelConfig& cfg, int tp);

// One tensor-parallel rank's share of the model as a config of its own: NH / T heads, KVH / T
// kv-heads (the head dim kept, so explicit), d_ff / T, a vocabulary shard of tp_padded_vocab / T
// rows; d_model, the norms and the row-parallel biases whole. Its parameter counts, op plan and
// buffer plan are the rank's: the sharded GEMMs and attention are 1 / T of the model's, while
// the norms, residuals and dropout masks stay whole (sequence parallelism splits those by T).
ModelConfig tp_rank_config(const ModelConfig& cfg, int tp);

// Links by placement: a group inside one node runs over the node's link (NVLink), one that spans
// nodes over the network. A link of 0 bytes/s is unknown (no time for that group).
struct LinkChoice {
    std::string name;  // "nvlink4", "ib-ndr", "--link-gbps 400"
    double bytes_per_s = 0;
};
struct GroupLinks {
    LinkChoice tensor, data, pipeline;
};
GroupLinks group_links(const ParallelLayout& p, int gpus_per_node, const LinkChoice& node,
                       const LinkChoice& network);

// One line of a group's traffic per step per rank, by the ring algorithm for collectives
// (core/comm/collective.h) and one message per send.
struct GroupLine {
    std::string what;  // "block outputs", "pipeline activations"
    std::string op;    // "all_reduce", "reduce_scatter", "all_gather", "send"
    DType dtype = DType::bf16;
    double calls = 0;     // per step
    double elements = 0;  // per step, summed over the calls
    double sent_bytes = 0;
    double received_bytes = 0;
};

struct GroupTraffic {
    std::string group;  // "tensor", "pipeline"
    int ranks = 1;
    LinkChoice link;
    std::vector<GroupLine> lines;
    double sent_bytes = 0;
    double received_bytes = 0;
    double seconds = 0;  // sent / link bandwidth; 0 without a link
};

// What the tensor and pipeline groups of one rank of `stage` exchange per step (docs/ESTIMATOR.md,
// "3D parallelism"). Per micro-batch of B T tokens, C = d_model, in the activations' dtype:
//   tensor, per layer:  no SP: 2 all-reduces forward (attention and MLP outputs) and 2 backward
//                       (their inputs' gradients), of B T C each;
//                       SP: 2 all-gathers and 2 reduce-scatters forward, 2 reduce-scatters and
//                       4 all-gathers backward (the saved sequence shard gathered again for the
//                       weight gradients), of B T C each;
//                       full recomputation replays the forward's collectives;
//   tensor, embedding:  the vocab-parallel lookup's all-reduce (SP: reduce-scatter), first stage;
//   tensor, head:       its input's all-reduce backward (SP: all-gather forward, reduce-scatter
//                       and all-gather backward), and the vocab-parallel cross entropy's three
//                       all-reduces of B T fp32 (max, target logit, sum of exponentials);
//   pipeline:           B T C (SP: / T) per send; a stage sends its chunks' outputs forward and
//                       their input gradients backward (the first stage's first chunk and the
//                       last stage's last chunk have no neighbour on that side); a tied
//                       embedding's gradient is all-reduced between the first and last stage.
struct ModelParallelTraffic {
    GroupTraffic tensor;
    GroupTraffic pipeline;
};
struct TrafficInputs {
    std::int64_t tokens = 0;  // B T of one micro-batch
    std::int64_t d_model = 0;
    std::int64_t vocab_shard_rows = 0;  // tp_padded_vocab / T: the tied embedding's rows per rank
    DType activations = DType::bf16;
    DType grads = DType::bf16;
    bool full_recompute = false;
    bool tied_embeddings = true;
};
ModelParallelTraffic model_parallel_traffic(const ParallelLayout& p, int stage,
                                            const TrafficInputs& t, const GroupLinks& links);

}  // namespace napkin
