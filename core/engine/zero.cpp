#include "core/engine/zero.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/check.h"
#include "core/engine/checkpoint.h"
#include "core/half.h"
#include "kernels/accumulate.h"
#include "kernels/optimizer.h"

namespace napkin {

void check_same_run(Communicator& comm, const std::string& description) {
    const std::uint64_t mine = fnv1a64(description.data(), description.size());
    std::uint64_t root = mine;
    comm.broadcast(&root, sizeof root, 0, "run hash");
    double differ = root != mine ? 1.0 : 0.0;
    comm.all_reduce(&differ, 1, "run check");
    if (differ == 0) return;
    char hashes[96];
    std::snprintf(hashes, sizeof hashes, " (run hash %016llx, rank 0's %016llx)",
                  static_cast<unsigned long long>(mine), static_cast<unsigned long long>(root));
    const std::string who = root != mine ? "this rank was"
                                         : std::to_string(std::lround(differ)) + " of " +
                                               std::to_string(comm.world_size()) + " ranks were";
    throw RunMismatchError("rank " + std::to_string(comm.rank()) + " of " +
                           std::to_string(comm.world_size()) + ": " + who +
                           " started with other options or another napkin build than rank 0" +
                           hashes + "; start every rank with the same command and binary");
}

namespace {

// fp32 values of n elements of `dtype` at p: p itself when fp32, else widened into buf.
float* widened(void* p, DType dtype, std::int64_t n, std::vector<float>& buf) {
    if (dtype == DType::f32) return static_cast<float*>(p);
    buf.resize(static_cast<std::size_t>(n));
    for (std::int64_t k = 0; k < n; ++k) {
        buf[static_cast<std::size_t>(k)] = dtype == DType::bf16
                                               ? to_float(static_cast<bf16_t*>(p)[k])
                                               : to_float(static_cast<f16_t*>(p)[k]);
    }
    return buf.data();
}

void round_to(void* p, DType dtype, const float* src, std::int64_t n) {
    if (dtype == DType::f32) {
        if (p != src) std::memcpy(p, src, static_cast<std::size_t>(n) * sizeof(float));
    } else if (dtype == DType::bf16) {
        for (std::int64_t k = 0; k < n; ++k)
            static_cast<bf16_t*>(p)[k] = bf16_t(src[k]);
    } else {
        for (std::int64_t k = 0; k < n; ++k)
            static_cast<f16_t*>(p)[k] = f16_t(src[k]);
    }
}

char* at(Tensor& t, std::int64_t element, DType dtype) {
    return static_cast<char*>(t.raw()) + storage_bytes(dtype, static_cast<std::uint64_t>(element));
}

// n elements of `dtype` at the start of p become n fp32 values over the same bytes (p holds
// 4 n). From the last element down, each write lands on elements already read; every access
// goes through memcpy, so the compiler sees the two types share the bytes.
void widen_in_place(void* p, DType dtype, std::int64_t n) {
    if (dtype == DType::f32) return;
    auto* b = static_cast<char*>(p);
    for (std::int64_t k = n; k-- > 0;) {
        float f = 0;
        if (dtype == DType::bf16) {
            bf16_t h;
            std::memcpy(&h, b + 2 * k, sizeof h);
            f = to_float(h);
        } else {
            f16_t h;
            std::memcpy(&h, b + 2 * k, sizeof h);
            f = to_float(h);
        }
        std::memcpy(b + 4 * k, &f, sizeof f);
    }
}

}  // namespace

void ZeroEngine::copy_bytes(void* dst, const void* src, std::size_t bytes, bool to_host) {
    if (dev_ == nullptr)
        std::memcpy(dst, src, bytes);
    else if (to_host)
        dev_->copy_to_host(dst, src, bytes);
    else
        dev_->copy_on_device(dst, src, bytes);
}

// Copies the part of [offset, offset + n) (in unit elements) that falls in [lo, hi) from a
// parameter's values to a shard starting at element lo.
void ZeroEngine::copy_range(void* shard, const void* param, std::int64_t offset, std::int64_t n,
                            std::int64_t lo, std::int64_t hi, std::size_t esize, bool to_host) {
    const std::int64_t a = std::max(offset, lo), b = std::min(offset + n, hi);
    if (a >= b) return;
    copy_bytes(static_cast<char*>(shard) + static_cast<std::size_t>(a - lo) * esize,
               static_cast<const char*>(param) + static_cast<std::size_t>(a - offset) * esize,
               static_cast<std::size_t>(b - a) * esize, to_host);
}

void ZeroEngine::zero_fill(Tensor& t, bool host) {
    if (t.empty()) return;
    if (dev_ != nullptr && !host)
        dev_->zero(t.raw(), t.bytes());
    else
        std::memset(t.raw(), 0, t.bytes());
}

void check_zero_settings(int stage, bool offload_optimizer, bool on_device, bool has_master) {
    if (stage < 0 || stage > 3)
        throw UsageError("{zero}: must be 0, 1, 2 or 3 (got " + std::to_string(stage) + ")");
    if (!offload_optimizer) return;
    if (!on_device) {
        throw UsageError(
            "{offload_optimizer}: needs {device} cuda (on the CPU the optimizer's "
            "state is in host memory already)");
    }
    if (stage < 1) {
        throw UsageError(
            "{offload_optimizer}: needs {zero} 1, 2 or 3 (the host steps this "
            "rank's shard of the optimizer)");
    }
    if (!has_master) {
        throw UsageError(
            "{offload_optimizer}: needs a mixed-precision recipe ({precision} "
            "bf16-amp or fp16-amp): the host steps the fp32 master copy");
    }
}

// Stages 1-3: a unit's optimizer side for this rank's shard [lo, hi) of its elements: the fp32
// master (taken over from the parameters), the moments, 8-bit scales, and, offloaded, the host
// copy of the gradients.
void ZeroEngine::allocate_optimizer_shard(Unit& x, const ShardUnit& su, const std::string& name,
                                          std::int64_t lo, std::int64_t hi) {
    auto& params = model_.params();
    const int states = optimizer_state_count(opt_.kind);
    // Offload: the optimizer's side in host memory, from the host's allocator.
    const bool host = offload();
    AccountingAllocator& sa = host ? *host_alloc_ : alloc_;
    if (dt_.has_master) {
        x.master =
            Tensor(sa, name + ".master.shard", MemCategory::master_weights, DType::f32, {su.shard});
        zero_fill(x.master, host);
        for (std::size_t i : su.params) {
            copy_range(x.master.raw(), params[i].master.raw(), layout_.param_offset[i],
                       params[i].numel, lo, hi, sizeof(float), host);
            params[i].master = Tensor();
        }
    }
    if (states >= 1) {
        x.m = Tensor(sa, name + ".opt.m.shard", MemCategory::optimizer_state, dt_.optimizer_state,
                     {su.shard});
        zero_fill(x.m, host);
    }
    if (states >= 2) {
        x.v = Tensor(sa, name + ".opt.v.shard", MemCategory::optimizer_state, dt_.optimizer_state,
                     {su.shard});
        zero_fill(x.v, host);
    }
    if (dt_.optimizer_state == DType::i8) {
        const std::int64_t blocks = su.shard / static_cast<std::int64_t>(kOptimizer8bitBlock);
        x.m_absmax = Tensor(sa, name + ".opt.m.absmax.shard", MemCategory::optimizer_state,
                            DType::f32, {blocks});
        x.v_absmax = Tensor(sa, name + ".opt.v.absmax.shard", MemCategory::optimizer_state,
                            DType::f32, {blocks});
        zero_fill(x.m_absmax, host);
        zero_fill(x.v_absmax, host);
    }
    if (host) {
        x.host_grads =
            Tensor(sa, name + ".grad.host", MemCategory::gradients, DType::f32, {su.shard});
        zero_fill(x.host_grads, true);
    }
}

ZeroEngine::ZeroEngine(int stage, Communicator& comm, Gpt& model, AccountingAllocator& alloc,
                       const OptimizerConfig& opt, const PrecisionDTypes& dtypes,
                       EngineDevice* device, bool overlap, AccountingAllocator* host_alloc)
    : stage_(stage),
      comm_(comm),
      model_(model),
      alloc_(alloc),
      opt_(opt),
      dt_(dtypes),
      dev_(device),
      host_alloc_(host_alloc),
      overlap_(overlap && comm.world_size() > 1) {
    check_zero_settings(stage, host_alloc_ != nullptr, dev_ != nullptr, dt_.has_master);
    NAPKIN_ASSERT(model.plan().config != nullptr, "the model has no config");
    const ModelConfig& cfg = *model.plan().config;
    // Fine-tuning: the adapters are the units' state; the frozen base stays in the model's own
    // tensors on every rank below stage 3 and is sharded at 3 (core/comm/shard_layout.h).
    const PlanInputs& in = model.plan().in;
    // adamw-8bit's state blocks whole in one shard (stages 1-3; stage 0 keeps whole states).
    layout_ = shard_layout(cfg, comm.world_size(), in.finetune != Finetune::full ? in.lora_rank : 0,
                           stage_ >= 1 ? shard_alignment(opt.kind) : 1);
    auto& params = model.params();
    NAPKIN_ASSERT(layout_.param_unit.size() == params.size(),
                  "the shard layout does not match the model's parameters");
    const std::int64_t r = comm.rank();
    const std::size_t we = storage_bytes(dt_.weights, 1);
    if (in.finetune != Finetune::full && stage_ == 3)
        frozen_ = napkin::frozen_layout(cfg, comm.world_size(), in.lora_rank,
                                        in.finetune == Finetune::qlora, we);
    units_.resize(layout_.units.size());
    for (std::size_t u = 0; u < units_.size(); ++u) {
        const ShardUnit& su = layout_.units[u];
        Unit& x = units_[u];
        if (su.numel == 0) continue;  // nothing trained in it (the embeddings and head of a LoRA run)
        const std::string name = "zero." + su.name;
        const std::int64_t lo = r * su.shard, hi = lo + su.shard;
        x.backward_regions = u == 0 && cfg.tied_embeddings ? 2 : 1;
        if (stage_ >= 1 && stage_ <= 2) {
            x.weights = Tensor(alloc, name, MemCategory::parameters, dt_.weights, {su.padded});
            zero_fill(x.weights);
            for (std::size_t i : su.params) {
                copy_bytes(at(x.weights, layout_.param_offset[i], dt_.weights),
                           params[i].weight.raw(), static_cast<std::size_t>(params[i].numel) * we);
            }
            point_params(u, x.weights.raw());
        } else if (stage_ == 3) {
            x.weights =
                Tensor(alloc, name + ".shard", MemCategory::parameters, dt_.weights, {su.shard});
            zero_fill(x.weights);
            for (std::size_t i : su.params) {
                copy_range(x.weights.raw(), params[i].weight.raw(), layout_.param_offset[i],
                           params[i].numel, lo, hi, we);
            }
            clear_params(u);
        }
        if (stage_ <= 1) {
            x.grads = Tensor(alloc, name + ".grad", MemCategory::gradients, dt_.grads, {su.padded});
            zero_fill(x.grads);
            point_grads(u, x.grads.raw());
        } else {
            x.grads =
                Tensor(alloc, name + ".grad.shard", MemCategory::gradients, dt_.grads, {su.shard});
            zero_fill(x.grads);
            clear_grads(u);
        }
        if (stage_ >= 1) allocate_optimizer_shard(x, su, name, lo, hi);
    }
    // Stage 3, fine-tuning: the frozen base into this rank's shards of each unit's storage
    // (element ranges [r S, (r + 1) S) of the working dtype, copied as bytes).
    for (std::size_t u = 0; u < frozen_.size(); ++u) {
        Unit& x = units_[u];
        for (int g = 0; g < 2; ++g) {
            const FrozenGroup& fg = frozen_[u].groups[g];
            if (fg.padded == 0) continue;
            x.frozen[g] = Tensor(alloc, "zero." + layout_.units[u].name + (g == 0 ? ".frozen_nf4" : ".frozen") + ".shard",
                                 MemCategory::parameters, dt_.weights, {fg.shard});
            zero_fill(x.frozen[g]);
            const auto lo = static_cast<std::int64_t>(static_cast<std::size_t>(r * fg.shard) * we);
            const auto hi = lo + static_cast<std::int64_t>(static_cast<std::size_t>(fg.shard) * we);
            for (const FrozenBlob& b : frozen_[u].blobs) {
                if (b.group != g) continue;
                ParamSlot& p = params[b.param];
                copy_range(x.frozen[g].raw(), (b.nf4_state ? p.quant : p.weight).raw(),
                           static_cast<std::int64_t>(b.offset), static_cast<std::int64_t>(b.bytes), lo, hi, 1);
            }
        }
        clear_frozen(u);
    }
    if (stage_ >= 2 || overlap_) model_.set_hooks(this);
}

ZeroEngine::~ZeroEngine() {
    model_.set_hooks(nullptr);
}

void ZeroEngine::point_params(std::size_t u, void* base) {
    auto& params = model_.params();
    for (std::size_t i : layout_.units[u].params) {
        params[i].weight = Tensor::view(
            params[i].name, dt_.weights,
            static_cast<char*>(base) +
                storage_bytes(dt_.weights, static_cast<std::uint64_t>(layout_.param_offset[i])),
            params[i].numel);
    }
}

void ZeroEngine::point_grads(std::size_t u, void* base) {
    auto& params = model_.params();
    for (std::size_t i : layout_.units[u].params) {
        params[i].grad = Tensor::view(
            params[i].name + ".grad", dt_.grads,
            static_cast<char*>(base) +
                storage_bytes(dt_.grads, static_cast<std::uint64_t>(layout_.param_offset[i])),
            params[i].numel);
    }
}

void ZeroEngine::clear_params(std::size_t u) {
    for (std::size_t i : layout_.units[u].params)
        model_.params()[i].weight = Tensor();
}

void ZeroEngine::point_frozen(std::size_t u) {
    if (u >= frozen_.size()) return;
    auto& params = model_.params();
    Unit& x = units_[u];
    for (const FrozenBlob& b : frozen_[u].blobs) {
        ParamSlot& p = params[b.param];
        char* at_blob = static_cast<char*>(x.frozen_gathered[b.group].raw()) + b.offset;
        if (b.nf4_state)
            p.quant = Tensor::view(p.name + ".nf4_state", DType::i8, at_blob, static_cast<std::int64_t>(b.bytes));
        else
            p.weight = Tensor::view(p.name, b.group == 0 ? DType::nf4 : dt_.weights, at_blob, p.numel);
    }
}

void ZeroEngine::clear_frozen(std::size_t u) {
    if (u >= frozen_.size()) return;
    for (const FrozenBlob& b : frozen_[u].blobs) {
        ParamSlot& p = model_.params()[b.param];
        (b.nf4_state ? p.quant : p.weight) = Tensor();
    }
}

bool ZeroEngine::reads_params(std::size_t u) const {
    if (layout_.units[u].numel > 0) return true;
    return u < frozen_.size() && (frozen_[u].groups[0].padded > 0 || frozen_[u].groups[1].padded > 0);
}

bool ZeroEngine::gathered(std::size_t u) const {
    const Unit& x = units_[u];
    return !x.gathered.empty() || !x.frozen_gathered[0].empty() || !x.frozen_gathered[1].empty();
}

void ZeroEngine::clear_grads(std::size_t u) {
    for (std::size_t i : layout_.units[u].params)
        model_.params()[i].grad = Tensor();
}

template <class F>
void ZeroEngine::collective(F&& call) {
    // On a device the communicator (NCCL) runs on its own stream and returns when the
    // collective is done; the engine's kernels and copies are queued on the engine's stream.
    // Waiting for the engine's stream first is the simplest correct order: every write to the
    // buffer (backward, a copy into a shard, a zero fill) is done before NCCL reads it, and
    // anything queued after the blocking call sees its result. Handing NCCL the engine's stream
    // would overlap more but ties the communicator to one engine. A started collective
    // (--overlap) then runs on NCCL's stream while the engine's kernels go on; wait() blocks the
    // host until it is done, before anything reads or frees its buffer.
    if (dev_ != nullptr) dev_->synchronize();
    const CommCounters before = comm_.counters();
    call();
    const CommCounters d = comm_.counters() - before;
    for (std::size_t i = 0; i < kCollectiveCount; ++i) {
        state_traffic_.calls[i] += d.calls[i];
        state_traffic_.sent_bytes[i] += d.sent_bytes[i];
        state_traffic_.received_bytes[i] += d.received_bytes[i];
    }
}

Tensor& ZeroEngine::unit_state(std::size_t unit, State s) {
    Unit& x = units_.at(unit);
    switch (s) {
        case State::weights:
            return x.weights;
        case State::master:
            return x.master;
        case State::first_moment:
            return x.m;
        case State::second_moment:
            return x.v;
    }
    return x.weights;
}

Tensor& ZeroEngine::unit_absmax(std::size_t unit, State moment) {
    Unit& x = units_.at(unit);
    return moment == State::second_moment ? x.v_absmax : x.m_absmax;
}

void ZeroEngine::zero_grads() {
    for (Unit& x : units_)
        zero_fill(x.grads);
}

void ZeroEngine::reduce_fp8_amaxes(Tensor* history) {
    if (history == nullptr || history->empty()) return;
    collective([&] {
        comm_.all_reduce_max(history->data<float>(), static_cast<std::uint64_t>(history->numel()),
                             "fp8 amaxes");
    });
}

double ZeroEngine::sum_over_ranks(double value) {
    comm_.all_reduce(&value, 1, "loss");
    return value;
}

namespace {

// The unit of the region after (unit, backward) in GptHooks' order (core/engine/gpt.h), -1
// after the last; L the number of blocks. (A tied head's nested (0, backward) is not followed by
// (-1): it prefetches nothing, which is all this is used for.)
int next_unit(int unit, bool backward, int L) {
    if (!backward) return unit < L ? unit + 1 : L + 1;
    return unit - 1;
}

}  // namespace

void ZeroEngine::enter(int unit, bool backward) {
    const auto u = static_cast<std::size_t>(unit);
    Unit& x = units_[u];
    const ShardUnit& su = layout_.units[u];
    if (comm_.in_flight() > 0) comm_.progress();
    if (!reads_params(u)) return;
    if (stage_ == 3 && x.users++ == 0) {
        gather(u, true);
        if (su.numel > 0) point_params(u, x.gathered.raw());
        point_frozen(u);
        const int n = overlap_ ? next_unit(unit, backward, static_cast<int>(units_.size()) - 2) : -1;
        if (n >= 0) {
            const auto un = static_cast<std::size_t>(n);
            if (units_[un].users == 0 && !gathered(un)) gather(un, false);
        }
    }
    if (!backward || su.numel == 0) return;
    if (x.backward_left == 0) x.backward_left = x.backward_regions;
    if (stage_ < 2) return;
    // The previous micro-batch's bucket of this unit still being reduced (a tied embedding's,
    // met again at the head): finish it before this micro-batch's gradients start.
    if (x.reduce != 0) finish_bucket(u);
    if (x.bucket.empty()) {
        x.bucket = Tensor(alloc_, "zero." + su.name + ".grad.bucket", MemCategory::communication,
                          dt_.grads, {su.padded});
        zero_fill(x.bucket);
        point_grads(u, x.bucket.raw());
    }
}

void ZeroEngine::leave(int unit, bool backward) {
    const auto u = static_cast<std::size_t>(unit);
    Unit& x = units_[u];
    if (!reads_params(u)) {
        if (comm_.in_flight() > 0) comm_.progress();
        return;
    }
    if (stage_ == 3 && --x.users == 0) {
        clear_params(u);
        x.gathered.release();
        clear_frozen(u);
        for (Tensor& t : x.frozen_gathered) t.release();
    }
    if (backward && layout_.units[u].numel > 0 && --x.backward_left == 0) backward_done(u);
    if (comm_.in_flight() > 0) comm_.progress();
}

void ZeroEngine::gather(std::size_t u, bool wait) {
    Unit& x = units_[u];
    const ShardUnit& su = layout_.units[u];
    // One buffer: its all-gather started (or run, `wait`) the first time, waited for after.
    auto one = [&](Tensor& whole, const Tensor& shard, std::int64_t padded, std::int64_t n,
                   Communicator::Ticket& ticket, const std::string& name) {
        if (whole.empty()) {
            whole = Tensor(alloc_, "zero." + name + ".gathered", MemCategory::communication, dt_.weights,
                           {padded});
            copy_bytes(at(whole, comm_.rank() * n, dt_.weights), shard.raw(), shard.bytes());
            const auto count = static_cast<std::uint64_t>(n);
            collective([&] {
                if (wait) comm_.all_gather(whole.raw(), count, dt_.weights, name);
                else ticket = comm_.start_all_gather(whole.raw(), count, dt_.weights, name);
            });
        } else if (wait && ticket != 0) {
            comm_.wait(ticket);
            ticket = 0;
        }
    };
    if (su.numel > 0) one(x.gathered, x.weights, su.padded, su.shard, x.gather, su.name);
    if (u >= frozen_.size()) return;
    for (int g = 0; g < 2; ++g) {
        const FrozenGroup& fg = frozen_[u].groups[g];
        if (fg.padded > 0)
            one(x.frozen_gathered[g], x.frozen[g], fg.padded, fg.shard, x.frozen_gather[g],
                su.name + (g == 0 ? ".frozen_nf4" : ".frozen"));
    }
}

void ZeroEngine::backward_done(std::size_t u) {
    Unit& x = units_[u];
    const ShardUnit& su = layout_.units[u];
    const std::string what = "gradients " + su.name;
    if (stage_ >= 2) {
        clear_grads(u);  // the bucket is the collective's now
        if (!overlap_) {
            collective([&] {
                comm_.reduce_scatter(x.bucket.raw(), static_cast<std::uint64_t>(su.shard),
                                     dt_.grads, what);
            });
            accumulate_bucket(u);
            return;
        }
        collective([&] {
            x.reduce = comm_.start_reduce_scatter(x.bucket.raw(),
                                                  static_cast<std::uint64_t>(su.shard), dt_.grads,
                                                  what);
        });
        if (bucket_in_flight_ >= 0) finish_bucket(static_cast<std::size_t>(bucket_in_flight_));
        bucket_in_flight_ = static_cast<int>(u);
        return;
    }
    if (!overlap_ || !last_micro_) return;  // reduced in step()
    collective([&] {
        x.reduce = stage_ == 0 ? comm_.start_all_reduce(x.grads.raw(),
                                                        static_cast<std::uint64_t>(su.padded),
                                                        dt_.grads, what)
                               : comm_.start_reduce_scatter(x.grads.raw(),
                                                            static_cast<std::uint64_t>(su.shard),
                                                            dt_.grads, what);
    });
}

void ZeroEngine::finish_bucket(std::size_t u) {
    Unit& x = units_[u];
    comm_.wait(x.reduce);
    x.reduce = 0;
    if (bucket_in_flight_ == static_cast<int>(u)) bucket_in_flight_ = -1;
    accumulate_bucket(u);
}

void ZeroEngine::accumulate_bucket(std::size_t u) {
    Unit& x = units_[u];
    const ShardUnit& su = layout_.units[u];
    // Accumulate this micro-batch's reduced chunk into the shard (fp32 sum, rounded once).
    void* chunk = at(x.bucket, comm_.rank() * su.shard, dt_.grads);
    if (dev_ != nullptr) {
        dev_->accumulate(x.grads.raw(), chunk, su.shard, dt_.grads);
    } else if (dt_.grads == DType::f32) {
        cpu::accumulate<float>({x.grads.data<float>(), static_cast<const float*>(chunk), su.shard});
    } else if (dt_.grads == DType::bf16) {
        cpu::accumulate<bf16_t>(
            {x.grads.data<bf16_t>(), static_cast<const bf16_t*>(chunk), su.shard});
    } else {
        cpu::accumulate<f16_t>({x.grads.data<f16_t>(), static_cast<const f16_t*>(chunk), su.shard});
    }
    x.bucket.release();
}

StepStats ZeroEngine::step(int step_index, float grad_scale, Optimizer* optimizer) {
    last_micro_ = false;
    if (stage_ >= 2 && bucket_in_flight_ >= 0)
        finish_bucket(static_cast<std::size_t>(bucket_in_flight_));
    if (stage_ <= 1) {
        // Each unit's gradient collective: waited for when it was started in the backward,
        // else run now.
        for (std::size_t u = 0; u < units_.size(); ++u) {
            Unit& x = units_[u];
            const ShardUnit& su = layout_.units[u];
            if (su.numel == 0) continue;
            if (x.reduce != 0) {
                comm_.wait(x.reduce);
                x.reduce = 0;
                continue;
            }
            collective([&] {
                if (stage_ == 0) {
                    comm_.all_reduce(x.grads.raw(), static_cast<std::uint64_t>(su.padded),
                                     dt_.grads, "gradients " + su.name);
                } else {
                    comm_.reduce_scatter(x.grads.raw(), static_cast<std::uint64_t>(su.shard),
                                         dt_.grads, "gradients " + su.name);
                }
            });
        }
    }
    if (stage_ == 0) {
        NAPKIN_ASSERT(optimizer != nullptr, "ZeRO-0 steps with the ordinary optimizer");
        return optimizer->step(step_index, grad_scale);
    }
    const StepStats st = sharded_step(step_index, grad_scale);
    if (stage_ <= 2 && !st.skipped) {
        for (std::size_t u = 0; u < units_.size(); ++u) {
            const ShardUnit& su = layout_.units[u];
            if (su.numel == 0) continue;
            collective([&] {
                comm_.all_gather(units_[u].weights.raw(), static_cast<std::uint64_t>(su.shard),
                                 dt_.weights, "parameters " + su.name);
            });
        }
    }
    return st;
}

std::optional<OptimizerHyper> ZeroEngine::begin_sharded_update(double sumsq, int step_index,
                                                               float grad_scale, StepStats& st) {
    comm_.all_reduce(&sumsq, 1, "gradient norm");  // a host scalar: the communicator's to route
    return begin_update(opt_, step_index, sumsq, grad_scale, t_, st);
}

void ZeroEngine::offload_gradients() {
    const std::int64_t r = comm_.rank();
    for (std::size_t u = 0; u < units_.size(); ++u) {
        Unit& x = units_[u];
        const std::int64_t n = layout_.units[u].shard;
        if (n == 0) continue;
        const void* chunk = stage_ == 1 ? at(x.grads, r * n, dt_.grads) : x.grads.raw();
        dev_->copy_to_host(x.host_grads.raw(), chunk,
                           storage_bytes(dt_.grads, static_cast<std::uint64_t>(n)));
        widen_in_place(x.host_grads.raw(), dt_.grads, n);
    }
}

void ZeroEngine::upload_weights(std::size_t u) {
    // The unit's gradients are spent: its host buffer carries the new weights (padding too,
    // which the master keeps at zero) to the device.
    Unit& x = units_[u];
    const std::int64_t n = layout_.units[u].shard;
    char* chunk = stage_ == 3 ? static_cast<char*>(x.weights.raw())
                              : at(x.weights, comm_.rank() * n, dt_.weights);
    round_to(x.host_grads.raw(), dt_.weights, x.master.data<float>(), n);
    dev_->copy_to_device(chunk, x.host_grads.raw(),
                         storage_bytes(dt_.weights, static_cast<std::uint64_t>(n)));
}

StepStats ZeroEngine::sharded_step(int step_index, float grad_scale) {
    if (dev_ != nullptr && !offload()) return sharded_step_on_device(step_index, grad_scale);
    StepStats st;
    const std::int64_t r = comm_.rank();
    auto& params = model_.params();
    // Offloaded: the norm and the update read the host's fp32 copy of the gradient shards.
    if (offload()) offload_gradients();
    const DType gd = offload() ? DType::f32 : dt_.grads;
    // This rank's gradient chunk of unit u: inside the whole buffer (stage 1) or the shard.
    auto grad_chunk = [&](std::size_t u) -> void* {
        Unit& x = units_[u];
        if (offload()) return x.host_grads.raw();
        return stage_ == 1 ? at(x.grads, r * layout_.units[u].shard, dt_.grads) : x.grads.raw();
    };
    auto weight_chunk = [&](std::size_t u) -> char* {
        Unit& x = units_[u];
        return stage_ == 3 ? static_cast<char*>(x.weights.raw())
                           : at(x.weights, r * layout_.units[u].shard, dt_.weights);
    };

    // Global norm: each rank's sum of squares over its shards (padding is zero), summed.
    double sumsq = 0.0;
    for (std::size_t u = 0; u < units_.size(); ++u) {
        const std::int64_t n = layout_.units[u].shard;
        if (n == 0) continue;
        const float* g = widened(grad_chunk(u), gd, n, grad_buf_);
        double acc = 0.0;
        for (std::int64_t k = 0; k < n; ++k)
            acc += static_cast<double>(g[k]) * g[k];
        sumsq += acc;
    }
    const std::optional<OptimizerHyper> h = begin_sharded_update(sumsq, step_index, grad_scale, st);
    if (!h) return st;
    for (std::size_t u = 0; u < units_.size(); ++u) {
        const ShardUnit& su = layout_.units[u];
        Unit& x = units_[u];
        if (su.numel == 0) continue;
        const std::int64_t lo = r * su.shard, hi = lo + su.shard;
        for (std::size_t i : su.params) {
            const std::int64_t a = std::max(layout_.param_offset[i], lo);
            const std::int64_t b = std::min(layout_.param_offset[i] + params[i].numel, hi);
            if (a >= b) continue;
            const std::int64_t off = a - lo, n = b - a;
            HostPiece piece;
            piece.g = widened(static_cast<char*>(grad_chunk(u)) +
                                  storage_bytes(gd, static_cast<std::uint64_t>(off)),
                              gd, n, grad_buf_);
            char* wc =
                weight_chunk(u) + storage_bytes(dt_.weights, static_cast<std::uint64_t>(off));
            piece.w = dt_.has_master ? x.master.data<float>() + off
                                     : widened(wc, dt_.weights, n, weight_buf_);
            piece.m = x.m.empty() ? nullptr : at(x.m, off, dt_.optimizer_state);
            piece.v = x.v.empty() ? nullptr : at(x.v, off, dt_.optimizer_state);
            if (dt_.optimizer_state == DType::i8) {
                // 8-bit moments: the piece starts on a block boundary (the layout's alignment),
                // so its blocks are the single process's.
                const std::int64_t block = off / static_cast<std::int64_t>(kOptimizer8bitBlock);
                piece.m_absmax = x.m_absmax.data<float>() + block;
                piece.v_absmax = x.v_absmax.data<float>() + block;
            }
            piece.n = n;
            piece.weight_decay = params[i].decay ? opt_.weight_decay : 0.0f;
            host_update(*h, piece, dt_.optimizer_state);
            if (!offload()) round_to(wc, dt_.weights, piece.w, n);
        }
        if (offload()) upload_weights(u);
    }
    return st;
}

// The sharded step on the model's device: the same norm, clip and update as sharded_step, as one
// multi-tensor pass per phase over views into the shards (kernels/optimizer.h). The sum of
// squares is the kernel's fixed-order fp64 sum, not the host's, so the norm agrees with the
// CPU's to rounding, not bit for bit.
StepStats ZeroEngine::sharded_step_on_device(int step_index, float grad_scale) {
    StepStats st;
    const std::int64_t r = comm_.rank();
    const auto& params = model_.params();
    // The values updated: the master shard, the fp32 weights, or (pure bf16) the bf16 weights
    // themselves, read widened and rounded back by the kernel.
    const bool f32_weights = dt_.weights == DType::f32;
    std::vector<OptimizerTensor> ts;
    for (std::size_t u = 0; u < units_.size(); ++u) {
        const ShardUnit& su = layout_.units[u];
        Unit& x = units_[u];
        if (su.numel == 0) continue;
        const std::int64_t lo = r * su.shard, hi = lo + su.shard;
        char* grads = stage_ == 1 ? at(x.grads, lo, dt_.grads) : static_cast<char*>(x.grads.raw());
        char* weights =
            stage_ == 3 ? static_cast<char*>(x.weights.raw()) : at(x.weights, lo, dt_.weights);
        for (std::size_t i : su.params) {
            const std::int64_t a = std::max(layout_.param_offset[i], lo);
            const std::int64_t b = std::min(layout_.param_offset[i] + params[i].numel, hi);
            if (a >= b) continue;
            const std::int64_t off = a - lo;
            const auto soff = static_cast<std::uint64_t>(off);
            OptimizerTensor t;
            char* w = weights + storage_bytes(dt_.weights, soff);
            t.master = dt_.has_master ? x.master.data<float>() + off
                       : f32_weights  ? reinterpret_cast<float*>(w)
                                      : nullptr;
            t.weight = dt_.has_master || !f32_weights ? w : nullptr;
            t.grad = grads + storage_bytes(dt_.grads, soff);
            t.m = x.m.empty() ? nullptr : at(x.m, off, dt_.optimizer_state);
            t.v = x.v.empty() ? nullptr : at(x.v, off, dt_.optimizer_state);
            if (!x.m_absmax.empty()) {  // on a block boundary: the layout's alignment
                t.m_absmax = x.m_absmax.data<float>() + off / static_cast<std::int64_t>(kOptimizer8bitBlock);
                t.v_absmax = x.v_absmax.data<float>() + off / static_cast<std::int64_t>(kOptimizer8bitBlock);
            }
            t.n = b - a;
            t.weight_decay = params[i].decay ? opt_.weight_decay : 0.0f;
            t.grad_dtype = dt_.grads;
            t.weight_dtype = dt_.weights;
            ts.push_back(t);
        }
    }
    // Padding is zero and outside every parameter, so the parameters' ranges hold the norm.
    const double sumsq = dev_->grad_sum_squares(ts.data(), static_cast<int>(ts.size()), alloc_);
    const std::optional<OptimizerHyper> h = begin_sharded_update(sumsq, step_index, grad_scale, st);
    if (!h) return st;
    dev_->optimizer_update(*h, ts.data(), static_cast<int>(ts.size()), dt_.optimizer_state);
    return st;
}

}  // namespace napkin
