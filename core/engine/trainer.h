// The training loop: data, micro-batches with gradient accumulation, the optimizer step, fp16
// dynamic loss scaling, and per-step measurements (loss, time, FLOPs, memory by category).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/check.h"
#include "core/engine/data.h"
#include "core/engine/engine_device.h"
#include "core/engine/gpt.h"
#include "core/engine/optimizer.h"
#include "core/engine/zero.h"
#include "core/model_config.h"
#include "core/op_plan.h"

namespace napkin {

struct TrainOptions {
    ModelConfig model;
    PlanInputs plan;  // B, T, recipe
    OptimizerConfig optimizer;
    int steps = 1;
    int grad_accum = 1;  // micro-batches per rank per step
    // ZeRO stage under data parallelism (core/engine/zero.h); ranks come from the communicator.
    int zero = 0;
    // Overlap gradient collectives with the backward and prefetch ZeRO-3's gathers (the same
    // results bit for bit; off: every collective where its result is first needed). napkin
    // train's --overlap auto turns it on for CUDA runs only.
    bool overlap = true;
    // --offload optimizer: the fp32 master and optimizer moments of each rank's shard, and their
    // update, in host memory (ZeRO stages 1-3 on a device, mixed precision; core/engine/zero.h).
    bool offload_optimizer = false;
    // --paged-optimizer: the optimizer state in the device's paged memory (CUDA managed memory
    // preferred on the host), in for the update and out after it (core/engine/optimizer.h).
    // CUDA only; not with ZeRO stages 1-3 or the offload.
    bool paged_optimizer = false;
    std::uint64_t seed = 1337;
    // On CUDA: the batches uploaded double-buffered on a copy stream from pinned staging
    // (EngineDevice::batch_uploads; the same results bit for bit). Off: each batch queued on the
    // engine's stream from pageable memory, one device buffer (tests compare the two).
    bool copy_stream = true;
    // On CUDA: each micro-batch's forward and backward captured into a CUDA graph (one per batch
    // slot), and the optimizer's passes into one more, at the second step and launched as one
    // each from then on; the same results bit for bit (docs/CUDA.md "CUDA graphs"). Only where
    // cuda_graph_refusal() finds nothing.
    bool cuda_graph = false;
    std::string data;  // empty: the synthetic corpus
    // Where tensors live and kernels run: cpu, or cuda (device 0, or a data-parallel rank's
    // local rank; core/engine/engine_device.h).
    DeviceKind device = DeviceKind::cpu;
    // fp16 dynamic loss scaling: start, halve on overflow (skipping the step), double after
    // this many good steps in a row.
    float loss_scale_init = 65536.0f;
    int loss_scale_window = 200;
};

// Why the step of `o` on `world` ranks cannot be captured into CUDA graphs ("" when it can),
// naming the setting by field: what the graph would freeze that changes from one micro-batch or
// step to the next (a kernel argument: dropout's seed, fp16-amp's loss scale), or what waits for
// the device or for other ranks inside a micro-batch. Profiling is no reason: the profiler maps
// each graph node to the op it was captured in.
std::string cuda_graph_refusal(const TrainOptions& o, int world);

struct StepRecord {
    int step = 0;
    float loss = 0;
    float lr = 0;
    float grad_norm = 0;
    float loss_scale = 1;
    bool skipped = false;
    double seconds = 0;         // host wall time of the step (the device's work waited for)
    double device_seconds = 0;  // on a device: the step's time on its stream (CUDA events); else 0
    double tokens = 0;
    double model_flops = 0;     // the plan's model FLOPs for this step
    double hardware_flops = 0;  // plus recomputation
    std::array<std::int64_t, kMemCategoryCount> current_bytes{};
    std::array<std::int64_t, kMemCategoryCount> peak_bytes{};
    std::int64_t peak_total_bytes = 0;
    // This step's traffic of this rank: parameter and gradient collectives (what the estimator
    // predicts), and everything including the loss and gradient-norm scalars.
    std::uint64_t comm_state_sent_bytes = 0, comm_state_received_bytes = 0;
    std::uint64_t comm_sent_bytes = 0, comm_received_bytes = 0;
    double comm_seconds = 0;  // inside this rank's collectives, waiting for the others included
    // --paged-optimizer: this step's prefetches of the state, bytes each way and their time on
    // the stream (EngineDevice::take_page_traffic); 0 otherwise.
    std::uint64_t paged_to_device_bytes = 0, paged_to_host_bytes = 0;
    double paged_seconds = 0;
};

// Thrown by Trainer::step() when its stop check answered yes between two micro-batches: the step
// is dropped (its gradients discarded, the data position put back), so the trainer is as after
// its last whole step and a checkpoint of it resumes bit for bit.
class StepAbandoned : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Thrown by Trainer::step() when the step's gradients are not finite outside fp16-amp (whose
// loss scaler skips such steps instead): the update was not made, so the weights are the last
// step's. `step()` is the failing step, 0-based; the message counts from 1, as the progress lines,
// and ends with `more` (napkin train adds where the report is). Data-parallel ranks all find it
// in the same step (the gradients, or their norm, are summed over the ranks first).
class GradientsNotFinite : public InputError {
public:
    explicit GradientsNotFinite(int step, const std::string& more = "")
        : InputError("step " + std::to_string(step + 1) +
                     ": the gradients are not finite (NaN or inf); training stopped" + more),
          step_(step) {}
    int step() const { return step_; }

private:
    int step_;
};

class Trainer {
public:
    // Builds the model, optimizer and data source; throws UsageError/InputError on bad input.
    // With a communicator of several ranks (or opts.zero > 0) the run is data-parallel: the ranks
    // check at start-up that they share options and `build_id` (check_same_run), each trains on
    // its own slice of every global batch, and the ZeRO engine reduces and shards. On CUDA the
    // rank's GPU is its local rank's and the collectives go over NCCL, bootstrapped by `comm`
    // (comm() is then the NCCL communicator).
    // `init_weights`, when given, runs on the freshly initialized model before the ZeRO engine
    // shards it (napkin train --init-from). `device`, when given, is the device to run on
    // instead of opening opts.device's (tests: a host-memory stand-in for CUDA).
    explicit Trainer(const TrainOptions& opts, Communicator* comm = nullptr,
                     const std::string& build_id = "",
                     const std::function<void(Gpt&)>& init_weights = {},
                     std::unique_ptr<EngineDevice> device = nullptr);
    StepRecord step();  // one optimizer step (G micro-batches)
    // Asked between a step's micro-batches (one process only: ranks would have to agree): yes
    // abandons the step (StepAbandoned), so a stop request never waits for G micro-batches.
    void set_stop_check(std::function<bool()> check) { stop_check_ = std::move(check); }
    int steps_done() const { return step_; }
    // CUDA graphs (TrainOptions::cuda_graph): captured so far (batch slots' and the optimizer's),
    // and the device memory their instantiation took as cudaMemGetInfo saw it (the accounting
    // allocator's counts none: graphs of kernels, copies and sets allocate nothing of napkin's).
    int cuda_graphs_captured() const { return graphs_captured_; }
    std::int64_t cuda_graph_driver_bytes() const { return graph_driver_bytes_; }

    AccountingAllocator& allocator() { return alloc_; }
    // Host memory of the run's model state: the offloaded optimizer's (empty without --offload).
    AccountingAllocator& host_allocator() { return host_alloc_; }
    // The paged optimizer state's (--paged-optimizer); null otherwise.
    AccountingAllocator* paged_allocator() { return paged_alloc_.get(); }
    Optimizer& optimizer() {
        NAPKIN_ASSERT(optimizer_ != nullptr, "ZeRO stages 1-3 shard the optimizer: no whole one");
        return *optimizer_;
    }
    ZeroEngine* zero() { return zero_.get(); }  // null without data parallelism
    Communicator* comm() { return comm_; }
    // Profiling: step and optimizer ranges here, forward/backward/layer/op ranges in the model.
    void set_recorder(profiler::Recorder* recorder) {
        rec_ = recorder;
        model_->set_recorder(recorder);
        if (comm_ != nullptr) comm_->set_recorder(recorder);
    }
    // GPU profiling: the CUPTI collector that names the device's kernels (null: none).
    // A collector that was not tagging before opens an epoch: CUDA graphs captured in another
    // are captured again under it, so that it knows their nodes.
    void set_kernel_tagger(profiler::KernelTagger* tagger) {
        if (tagger != nullptr && tagger != tagger_) ++tagger_epoch_;
        tagger_ = tagger;
        model_->set_kernel_tagger(tagger);
    }
    float loss_scale() const { return loss_scale_; }
    int good_steps() const { return good_steps_; }
    // Restores the loop's own state from a checkpoint (core/engine/checkpoint.h).
    void restore_loop_state(int steps_done, float loss_scale, int good_steps) {
        step_ = steps_done;
        loss_scale_ = loss_scale;
        good_steps_ = good_steps;
    }
    Gpt& model() { return *model_; }
    EngineDevice* device() { return device_.get(); }  // null on the CPU
    TokenSource& data() { return *data_; }
    const TrainOptions& options() const { return opts_; }

private:
    double run_micro_batches(int world, int rank);
    // One micro-batch's forward and backward on the device, as a CUDA graph where the run has them
    // (TrainOptions::cuda_graph): the first step runs as is, filling the caching allocator's pools
    // (a capture cannot allocate); then each batch slot's work is captured once and launched.
    void forward_backward_graphed(const std::int32_t* in, const std::int32_t* tg, float dloss);
    // The optimizer step: with the step's scalars on the device, the schedule queued into them
    // (schedule_step), then the gated passes, as a CUDA graph of their own where the run has
    // graphs (docs/CUDA.md "CUDA graphs"); else the host's or the ZeRO engine's step.
    StepStats update();
    StepStats schedule_step();
    void tag_optimizer(profiler::KernelScope& k);  // the profiler's name and cost of the passes
    struct SlotGraph;
    // g's work captured into it (the allocator's tape, the live bytes and the profiler's epoch
    // kept) and launched; or, when g holds a graph already, its tape replayed and it launched.
    void capture_or_launch(SlotGraph& g, const std::function<void()>& work);
    void drop_if_other_epoch(SlotGraph& g);  // captured for another profiler collection
    // Micro-batch `micro`'s tokens into host memory, then (on a device) into device memory:
    // false when another rank runs it. in and tg point at the batch the model reads.
    bool load_batch(int micro, int rank, std::int32_t*& in, std::int32_t*& tg);
    void update_loss_scale(const StepStats& st);
    void open_paged_memory();  // --paged-optimizer's allocator, or UsageError naming why not
    // The step's prefetches (EngineDevice::take_page_traffic) into r, and the trace's counter.
    void take_page_traffic(StepRecord& r);

    TrainOptions opts_;
    HostMemory host_;
    // Null on the CPU; declared before alloc_, which uses its memory.
    std::unique_ptr<EngineDevice> device_;
    AccountingAllocator alloc_;
    AccountingAllocator host_alloc_;                    // over host_: the offloaded optimizer state
    std::unique_ptr<AccountingAllocator> paged_alloc_;  // over the device's paged memory
    std::unique_ptr<Gpt> model_;
    std::unique_ptr<Optimizer> optimizer_;    // null under ZeRO 1-3 (the engine steps shards)
    std::unique_ptr<Communicator> own_comm_;  // a world-size-1 one when none was given
    // On a GPU: the device's collectives (NCCL) over own_comm_ or the one given.
    std::unique_ptr<Communicator> nccl_comm_;
    Communicator* comm_ = nullptr;
    std::unique_ptr<ZeroEngine> zero_;  // after model_: unhooks it first
    std::unique_ptr<TokenSource> data_;
    // The batch's device (or, on the CPU, host) buffers; slot 1 only with a copy stream.
    std::array<Tensor, 2> inputs_, targets_;
    // On a device without uploads_: inputs and targets on the host before the copy.
    std::vector<std::int32_t> host_batch_;
    std::unique_ptr<BatchUploads> uploads_;  // CUDA's copy stream; after device_, which it uses
    int slot_ = 0;                           // the next uploaded micro-batch's slot
    StepScalars* scalars_ =
        nullptr;  // the model's, in device memory, when the step is queued whole
    // CUDA graphs, one per batch slot: the graph, the allocator's tape of its capture (replayed
    // at each launch) and the live bytes at its capture (a change means another layout: recapture).
    struct SlotGraph {
        std::unique_ptr<DeviceGraph> graph;
        std::vector<MemEvent> tape;
        std::int64_t live_bytes = 0;
        int tagger_epoch = 0;  // the profiler's epoch at the capture (set_kernel_tagger)
    };
    std::array<SlotGraph, 2> graphs_;
    SlotGraph update_graph_;  // the optimizer's passes (update())
    bool warmed_up_ = false;  // a step ran in this process (the graphs' warm-up)
    int graphs_captured_ = 0;
    std::int64_t graph_driver_bytes_ =
        0;  // device memory the driver took for them (cudaMemGetInfo)
    int step_ = 0;
    float loss_scale_ = 1.0f;
    int good_steps_ = 0;
    profiler::Recorder* rec_ = nullptr;
    std::function<bool()> stop_check_;
    profiler::KernelTagger* tagger_ = nullptr;
    int tagger_epoch_ = 0;
    double model_flops_per_micro_ = 0, hardware_flops_per_micro_ = 0;
    KernelCost optimizer_cost_;  // one update, for the profiler
    std::string kernel_name_;    // "adamw_update": the optimizer's kernel on the device track
};

}  // namespace napkin
