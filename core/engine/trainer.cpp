#include "core/engine/trainer.h"

#include <chrono>
#include <cmath>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/config_json.h"
#include "core/engine/anomaly.h"
#include "kernels/dropout.h"
#include "profiler/host_range.h"

namespace napkin {

namespace {

// Everything that must be equal on every rank of a data-parallel run, as text.
std::string run_description(const TrainOptions& o, int world, const std::string& build_id) {
    const auto& q = o.optimizer;
    nlohmann::json j = {{"model", model_config_to_json(o.model)},
                        {"micro_batch", o.plan.micro_batch},
                        {"seq_len", o.plan.seq_len},
                        {"precision", enum_name(kPrecisionNames, o.plan.precision)},
                        {"optimizer", enum_name(kOptimizerNames, o.plan.optimizer)},
                        {"checkpointing", enum_name(kCheckpointingNames, o.plan.checkpointing)},
                        {"attention", enum_name(kAttentionNames, o.plan.attention)},
                        {"finetune", enum_name(kFinetuneNames, o.plan.finetune)},
                        {"lora", {o.plan.lora_rank, o.plan.lora_alpha}},
                        {"steps", o.steps},
                        {"grad_accum", o.grad_accum},
                        {"zero", o.zero},
                        {"overlap", o.overlap},
                        {"offload", o.offload_optimizer ? "optimizer" : "none"},
                        {"paged_optimizer", o.paged_optimizer},
                        {"world", world},
                        {"seed", o.seed},
                        {"data", o.data},
                        {"device", o.device == DeviceKind::cuda ? "cuda" : "cpu"},
                        {"opt",
                         {q.lr, q.min_lr_frac, q.warmup_steps, q.total_steps, q.beta1, q.beta2,
                          q.eps, q.weight_decay, q.grad_clip}},
                        {"loss_scale", {o.loss_scale_init, o.loss_scale_window}},
                        {"build", build_id}};
    return j.dump();
}

}  // namespace

std::string cuda_graph_refusal(const TrainOptions& o, int world) {
    if (o.device != DeviceKind::cuda) return "{device} cpu: graphs are CUDA's";
    if (world > 1 || o.zero > 0 || o.offload_optimizer)
        return "{zero}: data parallelism's collectives and the ZeRO engine's host reads are not "
               "captured";
    if (o.plan.detect_anomaly) return "{detect_anomaly} reads every micro-batch's results";
    if (o.paged_optimizer)
        return "{paged_optimizer} moves the optimizer state's pages around each update";
    if (o.model.dropout > 0)
        return "{dropout}: each micro-batch's mask seed is a kernel argument a graph would freeze";
    if (o.plan.precision == Precision::fp16_amp)
        return "{precision} fp16-amp: the loss scale is a kernel argument that changes on overflow";
    return "";
}

Trainer::Trainer(const TrainOptions& opts, Communicator* comm, const std::string& build_id,
                 const std::function<void(Gpt&)>& init_weights,
                 std::unique_ptr<EngineDevice> device)
    : opts_(opts),
      // Data parallelism on GPUs: one rank per GPU, the local rank's.
      device_(device != nullptr
                  ? std::move(device)
                  : open_engine_device(opts.device, comm != nullptr ? comm->local_rank() : 0)),
      alloc_(device_ != nullptr ? device_->memory() : static_cast<RawMemory&>(host_)),
      host_alloc_(host_) {
    // The ZeRO engine's own checks, before anything is built.
    check_zero_settings(
        opts_.zero, opts_.offload_optimizer, device_ != nullptr,
        precision_dtypes(opts_.plan.precision, opts_.plan.optimizer, false).has_master);
    if (opts_.paged_optimizer) open_paged_memory();
    comm_ = comm;
    if (comm_ == nullptr && opts_.zero > 0) {
        own_comm_ = make_single_communicator();
        comm_ = own_comm_.get();
    }
    const bool parallel = comm_ != nullptr && (comm_->world_size() > 1 || opts_.zero > 0);
    // First, before anything can fail differently on different ranks: the same run everywhere?
    if (parallel) check_same_run(*comm_, run_description(opts_, comm_->world_size(), build_id));
    // On the GPU the collectives go over NCCL, bootstrapped by the launcher's communicator (MPI,
    // or the single one at world size 1), which keeps serving the handshake above.
    if (parallel && device_ != nullptr) {
        nccl_comm_ = device_->collectives(*comm_);
        if (nccl_comm_ != nullptr) comm_ = nccl_comm_.get();
    }
    if (opts_.steps <= 0)
        throw UsageError("{steps}: must be a positive integer (got " + std::to_string(opts_.steps) +
                         ")");
    if (opts_.grad_accum <= 0) {
        throw UsageError("{grad_accum}: must be a positive integer (got " +
                         std::to_string(opts_.grad_accum) + ")");
    }
    if (opts_.plan.seq_len > opts_.model.context_length) {
        throw UsageError("{seq_len}: " + std::to_string(opts_.plan.seq_len) +
                         " exceeds the model's context length " +
                         std::to_string(opts_.model.context_length));
    }
    if (opts_.data.empty())
        data_ = std::make_unique<SyntheticCorpus>(opts_.seed);
    else
        data_ = open_token_source(opts_.data);
    if (data_->vocab_size() > opts_.model.vocab_size) {
        throw InputError((opts_.data.empty() ? std::string("synthetic corpus") : opts_.data) +
                         ": token ids up to " + std::to_string(data_->vocab_size() - 1) +
                         " do not fit the model's vocabulary of " +
                         std::to_string(opts_.model.vocab_size));
    }
    if (opts_.plan.detect_anomaly && parallel) {
        throw UsageError("{detect_anomaly}: runs in one process (no {zero}, no launcher)");
    }
    model_ = device_ != nullptr ? device_->create_gpt(opts_.model, opts_.plan, alloc_, opts_.seed)
                                : Gpt::create(opts_.model, opts_.plan, alloc_, opts_.seed);
    if (init_weights) init_weights(*model_);
    const PrecisionDTypes pd = precision_dtypes(opts_.plan.precision, opts_.plan.optimizer, false);
    opts_.optimizer.kind = opts_.plan.optimizer;
    if (parallel) {
        zero_ = std::make_unique<ZeroEngine>(opts_.zero, *comm_, *model_, alloc_, opts_.optimizer,
                                             pd, device_.get(), opts_.overlap,
                                             opts_.offload_optimizer ? &host_alloc_ : nullptr);
    }
    if (zero_ == nullptr || zero_->stage() == 0) {
        optimizer_ =
            std::make_unique<Optimizer>(opts_.optimizer, *model_, alloc_, pd.optimizer_state,
                                        device_.get(), paged_alloc_.get());
        if (device_ != nullptr) device_->take_page_traffic();  // the start's, not a step's
    }
    const std::int64_t n = opts_.plan.micro_batch * opts_.plan.seq_len;
    const auto batch_bytes = static_cast<std::size_t>(n) * sizeof(std::int32_t);
    if (device_ != nullptr && opts_.copy_stream) uploads_ = device_->batch_uploads(2 * batch_bytes);
    for (std::size_t slot = 0; slot < (uploads_ != nullptr ? 2u : 1u); ++slot) {
        const std::string suffix = slot == 0 ? "" : ".1";
        inputs_[slot] =
            Tensor(alloc_, "batch.inputs" + suffix, MemCategory::data, DType::f32, {n});  // int32
        targets_[slot] =
            Tensor(alloc_, "batch.targets" + suffix, MemCategory::data, DType::f32, {n});
    }
    if (device_ != nullptr && uploads_ == nullptr)
        host_batch_.resize(static_cast<std::size_t>(2 * n));
    if (opts_.plan.precision == Precision::fp16_amp) loss_scale_ = opts_.loss_scale_init;
    const PlanTotals t = plan_totals(model_->plan());
    model_flops_per_micro_ = static_cast<double>(t.model_flops());
    hardware_flops_per_micro_ = static_cast<double>(t.model_flops() + t.recompute_flops);
    if (optimizer_ != nullptr) optimizer_cost_ = optimizer_->step_cost();
    // One process on a device, no anomaly check (which reads every micro-batch's loss): the
    // step is queued whole and its scalars read once, at its end (kernels/step_scalars.h).
    if (device_ != nullptr && zero_ == nullptr && !opts_.plan.detect_anomaly) {
        scalars_ = model_->step_scalars();
        if (scalars_ != nullptr) model_->defer_loss(true);
    }
    if (opts_.cuda_graph) {
        const std::string why = cuda_graph_refusal(opts_, parallel ? comm_->world_size() : 1);
        if (!why.empty()) throw UsageError("{cuda_graph} on: " + why);
        NAPKIN_ASSERT(device_->can_capture() && scalars_ != nullptr,
                      "CUDA graphs need a device that captures and the step's scalars on it");
    }
    kernel_name_ = std::string(enum_name(kOptimizerNames, opts_.plan.optimizer)) + "_update";
}

void Trainer::open_paged_memory() {
    if (device_ == nullptr) {
        throw UsageError(
            "{paged_optimizer}: CUDA only (the CPU engine's state is in host memory already; "
            "{device} cuda)");
    }
    if (opts_.zero > 0 || opts_.offload_optimizer) {
        throw UsageError(
            "{paged_optimizer}: not with {zero} 1-3 or {offload_optimizer} (the ZeRO engine "
            "shards the state, and offloads it to the host itself)");
    }
    RawMemory* paged = device_->paged_memory();
    if (paged == nullptr) throw UsageError("{paged_optimizer}: the device has no paged memory");
    paged_alloc_ = std::make_unique<AccountingAllocator>(*paged);
}

void Trainer::take_page_traffic(StepRecord& r) {
    const EngineDevice::PageTraffic pages = device_->take_page_traffic();
    r.paged_to_device_bytes = pages.to_device_bytes;
    r.paged_to_host_bytes = pages.to_host_bytes;
    r.paged_seconds = pages.seconds;
    if (rec_ != nullptr && paged_alloc_ != nullptr) {  // the trace's "paged optimizer" counter
        rec_->record(
            profiler::CounterEvent{"paged optimizer",
                                   rec_->now_ns(),
                                   {{"to_device_bytes", static_cast<double>(pages.to_device_bytes)},
                                    {"to_host_bytes", static_cast<double>(pages.to_host_bytes)},
                                    {"prefetch_ms", 1e3 * pages.seconds}}});
    }
}

bool Trainer::load_batch(int micro, int rank, std::int32_t*& in, std::int32_t*& tg) {
    const std::int64_t B = opts_.plan.micro_batch, T = opts_.plan.seq_len;
    // On a device the batch is read into host memory (a slot's pinned staging with a copy
    // stream), then copied to the model's.
    if (uploads_ != nullptr) {
        in = static_cast<std::int32_t*>(uploads_->host(slot_));
        tg = in + B * T;
    } else if (device_ != nullptr) {
        in = host_batch_.data();
        tg = host_batch_.data() + B * T;
    } else {
        in = static_cast<std::int32_t*>(inputs_[0].raw());
        tg = static_cast<std::int32_t*>(targets_[0].raw());
    }
    {
        std::optional<profiler::ScopedRange> data_range;
        if (rec_ != nullptr) data_range.emplace(rec_, "data", profiler::Category::op);
        data_->next_batch(in, tg, B, T);
    }
    if (micro / opts_.grad_accum != rank) return false;
    const auto bytes = static_cast<std::size_t>(B * T) * sizeof(std::int32_t);
    if (uploads_ != nullptr) {
        // On the copy stream, behind the micro-batch two back (the slot's last reader), while
        // the engine's stream may still run the previous one; the engine's stream waits.
        uploads_->upload(slot_, inputs_[slot_].raw(), 0, bytes);
        uploads_->upload(slot_, targets_[slot_].raw(), bytes, bytes);
        uploads_->hand_over(slot_);
    } else if (device_ != nullptr) {
        // Queued in stream order behind the previous micro-batch's kernels, which read the
        // same buffers; host_batch_ is free again when upload returns.
        device_->upload(inputs_[0].raw(), in, bytes);
        device_->upload(targets_[0].raw(), tg, bytes);
    }
    const std::size_t slot = uploads_ != nullptr ? static_cast<std::size_t>(slot_) : 0;
    if (device_ != nullptr) {
        in = static_cast<std::int32_t*>(inputs_[slot].raw());
        tg = static_cast<std::int32_t*>(targets_[slot].raw());
    }
    return true;
}

// The step's micro-batches (this rank's): returns the sum of their mean losses, or 0 when the
// loss is deferred (the step's scalars on the device sum it).
double Trainer::run_micro_batches(int world, int rank) {
    double loss_sum = 0.0;
    const float dloss = loss_scale_ / static_cast<float>(opts_.grad_accum * world);
    const std::uint64_t data_start = data_->position();
    for (int micro = 0; micro < opts_.grad_accum * world; ++micro) {
        if (micro > 0 && stop_check_ && world == 1 && stop_check_()) {
            data_->set_position(data_start);  // the gradients are zeroed by the next step
            throw StepAbandoned("step " + std::to_string(step_) + " abandoned after " +
                                std::to_string(micro) + " of " + std::to_string(opts_.grad_accum) +
                                " micro-batches");
        }
        std::int32_t *in = nullptr, *tg = nullptr;
        if (!load_batch(micro, rank, in, tg)) continue;
        // The slot's device buffers are free again behind this micro-batch's kernels, however
        // it ends.
        struct Release {
            BatchUploads* uploads;
            int& slot;
            ~Release() {
                if (uploads == nullptr) return;
                uploads->release(slot);
                slot ^= 1;
            }
        } release{uploads_.get(), slot_};
        if (zero_ != nullptr)
            zero_->begin_micro_batch(micro % opts_.grad_accum == opts_.grad_accum - 1);
        // Dropout's masks: one seed per step and global micro-batch (the same on any number of
        // ranks, and after a resume).
        model_->set_dropout_seed(
            dropout_hash(opts_.seed, static_cast<std::uint64_t>(step_) *
                                             static_cast<std::uint64_t>(opts_.grad_accum * world) +
                                         static_cast<std::uint64_t>(micro)));
        try {
            if (opts_.cuda_graph) {
                forward_backward_graphed(in, tg, dloss);
            } else {
                const float loss = model_->forward_backward(in, tg, dloss);
                if (scalars_ == nullptr) loss_sum += loss;
            }
        } catch (AnomalyFound& e) {  // the engine knows the op; the step is the loop's
            e.anomaly().step = step_;
            e.anomaly().micro_batch = micro;
            throw AnomalyFound(e.anomaly());  // its message names the step
        }
    }
    return loss_sum;
}

void Trainer::forward_backward_graphed(const std::int32_t* in, const std::int32_t* tg,
                                       float dloss) {
    if (!warmed_up_) {
        model_->forward_backward(in, tg, dloss);
        return;
    }
    // Each slot's device buffers have their own addresses, which its graph reads.
    SlotGraph& g = graphs_[uploads_ != nullptr ? static_cast<std::size_t>(slot_) : 0];
    if (g.graph != nullptr && g.live_bytes != alloc_.current_total_bytes()) {
        for (SlotGraph& stale : graphs_)  // the memory under them moved: capture both again
            stale = SlotGraph{};
    }
    drop_if_other_epoch(g);
    capture_or_launch(g, [&] { model_->forward_backward(in, tg, dloss); });
}

void Trainer::drop_if_other_epoch(SlotGraph& g) {
    // The profiler maps each node to the engine's call it was captured in (the plugin's CUPTI
    // callbacks, under this tagger's ids): a graph captured before it collected, or for another
    // collection, is captured again (docs/CUDA.md "CUDA graphs").
    if (g.graph != nullptr && tagger_ != nullptr && g.tagger_epoch != tagger_epoch_)
        g = SlotGraph{};
}

void Trainer::capture_or_launch(SlotGraph& g, const std::function<void()>& work) {
    if (g.graph != nullptr) {
        alloc_.replay(g.tape);  // the counts and peaks of the work the launch does
        g.graph->launch();
        return;
    }
    const std::uint64_t driver_before = device_->memory_use().used_bytes;
    g.live_bytes = alloc_.current_total_bytes();
    g.tagger_epoch = tagger_epoch_;
    alloc_.begin_tape();
    device_->begin_capture();
    try {
        work();
    } catch (...) {
        alloc_.end_tape();
        try {
            device_->end_capture();  // ends the stream's capture; the failure is the first's
        } catch (const std::exception&) {
        }
        throw;
    }
    g.graph = device_->end_capture();
    g.tape = alloc_.end_tape();
    ++graphs_captured_;
    graph_driver_bytes_ += static_cast<std::int64_t>(device_->memory_use().used_bytes) -
                           static_cast<std::int64_t>(driver_before);
    g.graph->launch();
}

StepStats Trainer::schedule_step() {
    profiler::KernelScope k;
    if (rec_ != nullptr)
        k.tagged(tagger_, "step_schedule", KernelCost{.bytes_written = sizeof(StepSchedule)});
    return optimizer_->schedule_into(step_, scalars_);
}

void Trainer::tag_optimizer(profiler::KernelScope& k) {
    if (rec_ == nullptr) return;
    // On a device the passes' kernels are the device's records, tagged with the update.
    if (device_ != nullptr)
        k.tagged(tagger_, kernel_name_, optimizer_cost_);
    else
        k.host_timed(rec_, kernel_name_, optimizer_cost_);
}

StepStats Trainer::update() {
    std::optional<profiler::ScopedRange> opt_range;
    if (rec_ != nullptr)
        opt_range.emplace(rec_, "optimizer", profiler::Category::optimizer, optimizer_cost_);
    const float grad_scale = 1.0f / loss_scale_;
    if (zero_ != nullptr || scalars_ == nullptr) {
        profiler::KernelScope k;
        tag_optimizer(k);
        return zero_ != nullptr ? zero_->step(step_, grad_scale, optimizer_.get())
                                : optimizer_->step(step_, grad_scale);
    }
    // The step's scalars on the device: the schedule, then the passes that read it.
    const StepStats st = schedule_step();
    const auto queue = [&] {
        profiler::KernelScope k;
        tag_optimizer(k);
        optimizer_->queue_gated_update(grad_scale, scalars_);
    };
    if (!opts_.cuda_graph || !warmed_up_) {
        queue();
        return st;
    }
    // A graph of its own, launched once per step after the last micro-batch: the norm, the gate
    // and the update read everything that changes (gradient scale, skip, lr, bias corrections)
    // from the scalars, so their arguments are the same at every step.
    if (update_graph_.graph != nullptr && update_graph_.live_bytes != alloc_.current_total_bytes())
        update_graph_ = SlotGraph{};
    drop_if_other_epoch(update_graph_);
    capture_or_launch(update_graph_, queue);
    return st;
}

// fp16-amp's loss scaler: halve on a skipped (overflowed) step, double after loss_scale_window
// good ones. Any other precision stops on non-finite gradients.
void Trainer::update_loss_scale(const StepStats& st) {
    if (opts_.plan.precision == Precision::fp16_amp) {
        if (st.skipped) {
            loss_scale_ = std::max(1.0f, loss_scale_ / 2);
            good_steps_ = 0;
        } else if (++good_steps_ >= opts_.loss_scale_window) {
            loss_scale_ *= 2;
            good_steps_ = 0;
        }
    } else if (st.skipped) {
        throw GradientsNotFinite(step_);
    }
}

StepRecord Trainer::step() {
    StepRecord r;
    r.step = step_;
    alloc_.reset_peaks();
    std::optional<profiler::ScopedRange> step_range;
    if (rec_ != nullptr)
        step_range.emplace(rec_, "step " + std::to_string(step_), profiler::Category::step);
    const auto t0 = std::chrono::steady_clock::now();
    if (device_ != nullptr) device_->timer_start();
    const CommCounters comm0 = comm_ != nullptr ? comm_->counters() : CommCounters{};
    const CommCounters state0 = zero_ != nullptr ? zero_->state_traffic() : CommCounters{};
    if (zero_ != nullptr)
        zero_->zero_grads();
    else
        model_->zero_grads();
    if (scalars_ != nullptr) device_->zero(&scalars_->loss_sum, sizeof scalars_->loss_sum);
    // Data parallelism: the global batch is W G micro-batches in the data's order; rank r runs
    // micro-batches r G .. r G + G - 1 (every rank reads them all, to stay in step).
    const int world = zero_ != nullptr ? comm_->world_size() : 1,
              rank = zero_ != nullptr ? comm_->rank() : 0;
    double loss_sum = run_micro_batches(world, rank);
    // fp8-amp's amax histories, agreed over ranks, into the next step's scales.
    if (zero_ != nullptr) zero_->reduce_fp8_amaxes(model_->fp8_amax_history());
    model_->end_step();
    if (zero_ != nullptr) loss_sum = zero_->sum_over_ranks(loss_sum);
    StepStats st = update();
    // Launches are asynchronous: the step ends on the device (the timer's stop waits for it).
    // With the step's scalars on the device that wait is their read, the step's one
    // synchronization: loss, norm and skip come back together, after everything is queued.
    if (scalars_ != nullptr) {
        StepScalars read;
        r.device_seconds = device_->timer_stop_read(&read, scalars_, sizeof read);
        optimizer_->finish_step(read, st);
        loss_sum = read.loss_sum;
    } else if (device_ != nullptr) {
        r.device_seconds = device_->timer_stop_seconds();
    }
    if (device_ != nullptr) take_page_traffic(r);
    update_loss_scale(st);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.loss = static_cast<float>(loss_sum / (opts_.grad_accum * world));
    if (zero_ != nullptr) {
        const CommCounters all = comm_->counters() - comm0, state = zero_->state_traffic() - state0;
        r.comm_sent_bytes = all.total_sent();
        r.comm_received_bytes = all.total_received();
        r.comm_state_sent_bytes = state.total_sent();
        r.comm_state_received_bytes = state.total_received();
        r.comm_seconds = static_cast<double>(all.total_ns()) * 1e-9;
    }
    r.lr = st.lr;
    r.grad_norm = st.grad_norm;
    r.skipped = st.skipped;
    r.loss_scale = loss_scale_;
    const std::int64_t B = opts_.plan.micro_batch, T = opts_.plan.seq_len;
    r.tokens = static_cast<double>(B * T * opts_.grad_accum);
    r.model_flops = model_flops_per_micro_ * opts_.grad_accum;
    r.hardware_flops = hardware_flops_per_micro_ * opts_.grad_accum;
    for (std::size_t c = 0; c < kMemCategoryCount; ++c) {
        r.current_bytes[c] = alloc_.current_bytes(static_cast<MemCategory>(c));
        r.peak_bytes[c] = alloc_.peak_bytes(static_cast<MemCategory>(c));
    }
    r.peak_total_bytes = alloc_.peak_total_bytes();
    if (!std::isfinite(r.loss) && !r.skipped) {
        throw InputError("step " + std::to_string(step_) +
                         ": the loss is not finite; training stopped");
    }
    ++step_;
    warmed_up_ = true;
    return r;
}

}  // namespace napkin
