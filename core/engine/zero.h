// Data parallelism and ZeRO stages 0-3 over real collectives (core/comm/comm.h), as the ZeRO
// paper (Rajbhandari et al. 2020) and FSDP define them. Each rank runs its own micro-batches;
// gradients are summed over ranks, so N ranks with micro-batch B equal one rank accumulating
// N micro-batches of B. The units, padding and shards are core/comm/shard_layout.h's, which
// the estimator predicts from, byte for byte. docs/ZERO.md.
//
// Memory per rank (categories of the accounting allocator; n the model's elements, P the sum
// of the padded units, S = P / W the sum of one rank's shards):
//   stage  parameters  gradients  master, optimizer  communication (transient)
//   0      n           P (flat)   n                  -
//   1      P (flat)    P (flat)   S                  -
//   2      P (flat)    S          S                  a unit's full gradients, from its first
//                                                    backward write until its reduce-scatter
//   3      S           S          S                  + a unit's gathered parameters while in use
// Per step: 0 all-reduces the gradients once (in the last micro-batch, as DDP's no_sync);
// 1 reduce-scatters them once, steps its shard, all-gathers the parameters; 2 reduce-scatters
// every micro-batch (its gradients are not kept whole), steps, all-gathers; 3 all-gathers each
// unit before each region that reads it (GptHooks), frees it after, reduce-scatters each
// unit's gradients as its backward ends, and steps its shard. Clipping uses the global norm
// (each rank's sum of squares, all-reduced).
//
// Overlap (on with several ranks unless the engine is built with overlap = false; the results
// are bit for bit the same either way, only the time and the communication memory differ): a
// unit's gradient collective is started as soon as its backward ends and waited for only when
// its result is needed, so it runs beside the backward of the units before it (stage 0-1: in
// the last micro-batch, waited for in step(); stage 2-3: every micro-batch, a bucket waited for
// when the next one is started, the last at the next micro-batch's backward or in step()).
// Stage 3 prefetches: entering a region starts the all-gather of the next region's unit
// (regions come in GptHooks' order), so at most two units' gathered parameters, and two
// gradient buckets, are alive at once (three with tied embeddings, whose unit 0 is also live
// around the head). The hooks drive MPI's progress (Communicator::progress) between regions.
//
// One orchestration for every device: with an EngineDevice (CUDA, over the NCCL communicator)
// the shard work this engine does itself (copies into and out of shards, zero fills, adding a
// reduced chunk into the gradient shard, the sharded optimizer step and its sum of squares)
// goes through the device, queued on the engine's stream; without one (the CPU) it runs on the
// host exactly as it always has.
//
// Fine-tuning (LoRA/QLoRA): the units hold the adapters (shard_layout with the rank), whose
// states the stage shards as a full model's. Stages 0-2 keep the frozen base in the model's own
// tensors on every rank; stage 3 shards it too (FSDP + QLoRA): each unit's frozen tensors move
// into this rank's shards of the unit's frozen storage (frozen_layout: NF4 bytes packed in the
// working dtype), all-gathered with the unit's adapters around every region that reads them and
// freed after, the model's frozen slots pointed into the gathered storage meanwhile.
//
// Offload (stages 1-3 on a device, mixed precision; ZeRO-Offload, Ren et al. 2021): the fp32
// master and optimizer moments of this rank's shard live in host memory (a second accounting
// allocator, `host_alloc`), with an fp32 gradient shard beside them. Each step copies the
// gradient shard to the host (widened to fp32 in place), computes the norm and the update there
// with the CPU's code (sharded_step's, bit for bit), and copies the shard's new weights, rounded
// into the same host buffer, back to the device. Host memory per rank: master S * 4, moments
// S * 4 each (fp32 states), gradients S * 4; on the device the model states are the weights and
// the gradients alone.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/check.h"
#include "core/comm/comm.h"
#include "core/comm/shard_layout.h"
#include "core/engine/engine_device.h"
#include "core/engine/gpt.h"
#include "core/engine/optimizer.h"
#include "core/recipe.h"
#include "core/tensor.h"

namespace napkin {

// The start-up handshake's failure, thrown on every rank at once.
class RunMismatchError : public UsageError {
public:
    using UsageError::UsageError;
};

// The stage and --offload optimizer's needs, checked once for the trainer and the ZeRO engine:
// UsageError naming the field unless 0 <= stage <= 3 and, with the optimizer offloaded, a CUDA
// device, a stage of 1 or more and an fp32 master copy (has_master) for the host to step.
void check_zero_settings(int stage, bool offload_optimizer, bool on_device, bool has_master);

// Start-up handshake: rank 0 broadcasts a hash of `description` (the run's options and the
// napkin build); every rank compares it with its own. Throws RunMismatchError on every rank
// when any rank differs, naming how many. Counted in the communicator like any collective.
void check_same_run(Communicator& comm, const std::string& description);

class ZeroEngine final : public GptHooks {
public:
    // Moves the model's parameters, gradients and master copies into the stage's flat and
    // sharded buffers (the model's own tensors become views or are freed). Throws UsageError
    // for a stage outside 0..3. `device`: where the model lives (null: the host); on a device
    // `comm` must take device buffers (NCCL).
    // `host_alloc` (non-null: offload) takes the optimizer's state into host memory: it needs
    // a device, stage 1-3 and a master copy (UsageError naming --offload otherwise).
    ZeroEngine(int stage, Communicator& comm, Gpt& model, AccountingAllocator& alloc,
               const OptimizerConfig& opt, const PrecisionDTypes& dtypes,
               EngineDevice* device = nullptr, bool overlap = true,
               AccountingAllocator* host_alloc = nullptr);
    ~ZeroEngine() override;

    int stage() const { return stage_; }
    const ShardLayout& layout() const { return layout_; }
    Communicator& comm() { return comm_; }

    bool overlap() const { return overlap_; }  // false at world size 1: nothing to overlap
    bool offload() const { return host_alloc_ != nullptr; }
    // Stage 3 of a fine-tuning run: this rank's shard of unit u's frozen storage, group g
    // (frozen_layout's; empty where the group is); the layout itself (empty otherwise).
    const std::vector<FrozenUnit>& frozen_layout() const { return frozen_; }
    Tensor& frozen_shard(std::size_t u, int g) { return units_.at(u).frozen[g]; }

    void zero_grads();
    // Before each of this rank's micro-batches: whether it is the step's last (stages 0-1 start
    // their gradient collectives during its backward; without the call they run in step()).
    void begin_micro_batch(bool last) { last_micro_ = last; }
    // After the step's micro-batches: reduces the gradients and updates the parameters. Stage
    // 0 all-reduces and then runs `optimizer` (the ordinary, unsharded one); stages 1-3 step
    // their own shards and ignore it.
    StepStats step(int step_index, float grad_scale, Optimizer* optimizer);
    // Sum of a scalar over ranks (the step's loss).
    double sum_over_ranks(double value);
    // fp8-amp's delayed scaling, after the step's micro-batches and before the roll
    // (Gpt::end_step): each amax of `history` (slots, H; null or empty: none) becomes its maximum
    // over ranks, so every rank rolls the same histories into the same scales. One all-reduce
    // of the whole histories: entry 0 is the step's, the older entries are equal on every rank
    // already (each was reduced so), and one contiguous buffer needs no packing. Counted in
    // state_traffic() (the estimator's "fp8 amaxes" line).
    void reduce_fp8_amaxes(Tensor* history);

    // Bytes of parameter and gradient collectives since the engine started (the handshake and
    // scalar all-reduces are not in it): what the estimator's communication predicts.
    const CommCounters& state_traffic() const { return state_traffic_; }
    int update_count() const { return t_; }
    void set_update_count(int t) { t_ = t; }  // a checkpoint's (core/engine/zero_checkpoint.h)
    const PrecisionDTypes& dtypes() const { return dt_; }

    // A unit's model state as this rank keeps it between steps, for checkpoints: weights (stage
    // 1-2: the whole padded unit P_u; stage 3: the shard S_u; stage 0: none, the model's own
    // tensors hold them), and at stages 1-3 the shards of the fp32 master copy and the optimizer
    // moments (empty where the recipe keeps none).
    enum class State { weights, master, first_moment, second_moment };
    Tensor& unit_state(std::size_t unit, State s);
    // adamw-8bit at stages 1-3: the block absmax of the shard's first or second moment (S_u /
    // kOptimizer8bitBlock floats; the layout aligns every parameter and shard to the blocks).
    Tensor& unit_absmax(std::size_t unit, State moment);
    // Whether unit_state(u, s) is in host memory while the model is on a device (offload).
    bool in_host_memory(State s) const { return offload() && s != State::weights; }

    void enter(int unit, bool backward) override;
    void leave(int unit, bool backward) override;

private:
    struct Unit {
        Tensor weights;   // stage 1-2: the whole padded unit; stage 3: this rank's shard
        Tensor gathered;  // stage 3: the whole unit while a region uses it (communication)
        Tensor grads;     // stage 0-1: the whole padded unit; stage 2-3: this rank's shard
        Tensor bucket;    // stage 2-3: the unit's gradients during backward (communication)
        Tensor master;    // stages 1-3, mixed precision: fp32 shard
        Tensor m, v;      // stages 1-3: optimizer moments of the shard
        Tensor m_absmax, v_absmax;  // adamw-8bit: their block absmax (S / kOptimizer8bitBlock)
        Tensor host_grads;  // offload: the gradient shard in fp32 on the host, then its weights
        Tensor frozen[2];           // stage 3, fine-tuning: shards of the frozen storage
        Tensor frozen_gathered[2];  // the whole groups while a region uses them (communication)
        Communicator::Ticket frozen_gather[2] = {0, 0};
        int users = 0;    // regions using the gathered parameters now
        int backward_regions = 0;  // per micro-batch: backward regions that write its gradients
        int backward_left = 0;
        Communicator::Ticket gather = 0;  // stage 3: the all-gather into `gathered` in flight
        Communicator::Ticket reduce = 0;  // the gradient collective in flight (grads or bucket)
    };
    template <class F>
    void collective(F&& call);  // runs a parameter/gradient collective, counting its traffic
    void point_params(std::size_t u, void* base);  // slots' weights as views into base
    void point_grads(std::size_t u, void* base);
    void clear_params(std::size_t u);
    void point_frozen(std::size_t u);  // stage 3 fine-tuning: frozen slots into the gathered storage
    void clear_frozen(std::size_t u);
    void allocate_optimizer_shard(Unit& x, const ShardUnit& su, const std::string& name,
                                  std::int64_t lo, std::int64_t hi);
    bool reads_params(std::size_t u) const;  // whether regions of u read anything this engine holds
    bool gathered(std::size_t u) const;      // stage 3: a gather of u started or done
    void clear_grads(std::size_t u);
    void backward_done(std::size_t u);  // the unit's gradients of this micro-batch are complete
    void gather(std::size_t u, bool wait);  // stage 3: gathered + all-gather (started or done)
    void finish_bucket(std::size_t u);      // stage 2-3: waits for the bucket's reduction, then
    void accumulate_bucket(std::size_t u);  // adds its chunk into the shard, frees the bucket
    // The step's norm over every rank's shards (sumsq all-reduced) and its hyperparameters
    // (begin_update, core/engine/optimizer.h); nullopt when the norm is not finite.
    std::optional<OptimizerHyper> begin_sharded_update(double sumsq, int step_index,
                                                       float grad_scale, StepStats& st);
    StepStats sharded_step(int step_index, float grad_scale);
    StepStats sharded_step_on_device(int step_index, float grad_scale);
    void offload_gradients();            // each unit's gradient shard -> host_grads, fp32
    void upload_weights(std::size_t u);  // the unit's master shard -> its device weights
    // The shard work on the model's device (dev_) or the host.
    // to_host: dst is host memory (the offloaded state), src the device's.
    void copy_bytes(void* dst, const void* src, std::size_t bytes, bool to_host = false);
    void copy_range(void* shard, const void* param, std::int64_t offset, std::int64_t n,
                    std::int64_t lo, std::int64_t hi, std::size_t esize, bool to_host = false);
    void zero_fill(Tensor& t, bool host = false);  // host: t is in host memory

    int stage_;
    Communicator& comm_;
    Gpt& model_;
    AccountingAllocator& alloc_;
    OptimizerConfig opt_;
    PrecisionDTypes dt_;
    EngineDevice* dev_;  // null: host memory
    AccountingAllocator* host_alloc_;  // offload: the optimizer's state; else null
    ShardLayout layout_;
    std::vector<FrozenUnit> frozen_;  // stage 3 with adapters; else empty
    std::vector<Unit> units_;
    CommCounters state_traffic_;
    std::vector<float> grad_buf_, weight_buf_;
    int t_ = 0;  // Adam's update count (stages 1-3)
    bool overlap_ = true;
    bool last_micro_ = false;
    int bucket_in_flight_ = -1;  // stage 2-3: the unit whose bucket is being reduced
};

}  // namespace napkin
