// The inference engine's one orchestration over a kernel backend (CpuKernels<T>, CudaKernels<T>),
// as GptImpl is the training engine's: a step of M = B Tq tokens at positions [pos, pos + Tq) of
// every sequence, the blocks' ops written out on the kernels of kernels/kernel_list.h, attention
// by kernels/decode_attention.h over the cache. Buffers: core/engine/generate.h.
#pragma once

#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/engine/generate.h"
#include "core/engine/gpt_detail.h"
#include "core/engine/gpt_params.h"
#include "core/tensor.h"
#include "kernels/kernel_list.h"
#include "profiler/host_range.h"

namespace napkin {

template <class Kernels>
class GeneratorImpl final : public Generator {
    using T = typename Kernels::Elem;

public:
    GeneratorImpl(const ModelConfig& cfg, const GenerateShape& shape, AccountingAllocator& alloc,
                  std::uint64_t seed, Kernels kernels = Kernels())
        : cfg_(cfg), shape_(shape), k_(std::move(kernels)) {
        const GenerateBuffers m = generate_buffers(cfg_, shape_, dtype(), Kernels::kDevice);
        allocate_params(alloc);
        const std::int64_t M = shape_.batch * shape_.prompt_len;
        cache_ = Tensor(alloc, "kv_cache", MemCategory::kv_cache, dtype(), {m.kv_cache_numel});
        residual_ = Tensor(alloc, "residual", MemCategory::activations, dtype(), {M, cfg_.d_model});
        arena_ = Tensor(alloc, "arena", MemCategory::activations, dtype(), {m.arena_numel});
        logits_ = Tensor(alloc, "logits", MemCategory::activations, dtype(),
                         {shape_.batch, cfg_.padded_vocab_size});
        stats_ = Tensor(alloc, "norm.stats", MemCategory::temporaries, DType::f32, {2 * M});
        if (m.matmul_scratch_floats > 0) {
            scratch_ = Tensor(alloc, "matmul.scratch", MemCategory::temporaries, DType::f32,
                              {m.matmul_scratch_floats});
        }
        if (m.decode_workspace_floats > 0) {
            decode_ws_ = Tensor(alloc, "decode_attention.workspace", MemCategory::temporaries,
                                DType::f32, {m.decode_workspace_floats});
        }
        tokens_ = Tensor(alloc, "tokens", MemCategory::data, DType::f32, {M});  // int32, same size
        init_params(seed);
    }

    void prefill(const std::int32_t* prompts, std::vector<float>& logits) override {
        NAPKIN_ASSERT(pos_ == 0, "prefill: the cache already holds " << pos_ << " positions");
        step(prompts, shape_.prompt_len, "prefill", logits);
    }
    void decode(const std::int32_t* tokens, std::vector<float>& logits) override {
        NAPKIN_ASSERT(pos_ >= shape_.prompt_len && pos_ < shape_.positions() - 1,
                      "decode: position " << pos_ << " outside the generation");
        step(tokens, 1, "decode " + std::to_string(pos_ - shape_.prompt_len + 1), logits);
    }
    std::int64_t position() const override { return pos_; }

    std::vector<ParamSlot>& params() override { return params_; }
    void set_param(std::size_t i, const float* values) override {
        k_.store_floats(params_[i].weight.template data<T>(), values, params_[i].numel);
    }
    void get_param(std::size_t i, float* out) const override {
        k_.load_floats(out, params_[i].weight.template data<T>(), params_[i].numel);
    }
    void set_recorder(profiler::Recorder* recorder) override { rec_ = recorder; }
    void set_kernel_tagger(profiler::KernelTagger* tagger) override { tagger_ = tagger; }

private:
    static DType dtype() { return gpt_detail::storage_dtype<T>(); }

    // Weights only, by param_tensors' names, as the training engine allocates them.
    void allocate_params(AccountingAllocator& alloc) {
        for (const ParamTensor& pt : param_tensors(cfg_, 0)) {
            ParamSlot& s = params_.emplace_back();
            s.name = pt.name;
            s.numel = pt.numel();
            s.decay = pt.shape.size() >= 2;  // initial_values' matrices
            s.trainable = false;
            s.weight = Tensor(alloc, pt.name, MemCategory::parameters, dtype(), {s.numel});
        }
        p_wte_ = gpt_detail::find_param(params_, "wte");
        p_wpe_ = gpt_detail::find_param(params_, "wpe");
        p_lnf_w_ = gpt_detail::find_param(params_, "ln_f.weight");
        p_lnf_b_ = gpt_detail::find_param(params_, "ln_f.bias");
        p_head_ = gpt_detail::find_param(params_, "lm_head");
        for (int l = 0; l < cfg_.n_layers; ++l)
            layers_.push_back(gpt_detail::layer_params(params_, l));
    }
    // The values `napkin train` starts from with this seed (GptImpl::init_params' order).
    void init_params(std::uint64_t seed) {
        gpt_detail::initialize(params_, cfg_, seed,
                               [this](std::size_t i, const float* v) { set_param(i, v); });
    }

    // Tq tokens per sequence at positions [pos_, pos_ + Tq): embedding, blocks, ln_f and the head
    // on each sequence's last position; logits read back to the host (which waits for the step).
    void step(const std::int32_t* tokens, std::int64_t Tq, const std::string& name,
              std::vector<float>& logits) {
        const std::int64_t n = shape_.batch * Tq;
        for (std::int64_t i = 0; i < n; ++i) {
            NAPKIN_ASSERT(tokens[i] >= 0 && tokens[i] < cfg_.vocab_size,
                          "token id " << tokens[i] << " outside [0, " << cfg_.vocab_size << ")");
        }
        std::optional<profiler::ScopedRange> range;
        if (rec_ != nullptr) range.emplace(rec_, name, profiler::Category::step);
        k_.copy_from_host(tokens_.raw(), tokens,
                          static_cast<std::size_t>(n) * sizeof(std::int32_t));
        embed(Tq);
        for (int l = 0; l < cfg_.n_layers; ++l) {
            std::optional<profiler::ScopedRange> layer;
            if (rec_ != nullptr)
                layer.emplace(rec_, "h." + std::to_string(l), profiler::Category::layer);
            attention_half(l, Tq);
            mlp_half(l, Tq);
        }
        head(Tq);
        pos_ += Tq;
        read_logits(logits);
    }

    void read_logits(std::vector<float>& logits) {
        const std::int64_t V = cfg_.vocab_size, Vp = cfg_.padded_vocab_size;
        std::vector<float> all(static_cast<std::size_t>(shape_.batch * Vp));
        k_.load_floats(all.data(), logits_.template data<T>(), shape_.batch * Vp);
        logits.resize(static_cast<std::size_t>(shape_.batch * V));
        for (std::int64_t b = 0; b < shape_.batch; ++b) {
            std::copy_n(all.begin() + b * Vp, V, logits.begin() + b * V);
        }
    }

    // The two ends of the arena: an op reads one and writes the other. lo(n) is [0, n); hi(n)
    // ends where the arena ends.
    T* lo() { return arena_.template data<T>(); }
    T* hi(std::int64_t n) { return arena_.template data<T>() + (arena_.numel() - n); }
    T* x() { return residual_.template data<T>(); }
    static const T* w(const ParamSlot* p) {
        return p != nullptr ? p->weight.template data<T>() : nullptr;
    }

    // An op range and its one kernel's range (the kernel's name and cost), as the training
    // engine's trace shows them.
    struct Scope {
        std::optional<profiler::ScopedRange> op;
        profiler::KernelScope kernel;
    };
    void open(Scope& s, const std::string& op, std::string_view kernel, const KernelCost& cost) {
        if (rec_ == nullptr && tagger_ == nullptr) return;
        if (rec_ != nullptr) s.op.emplace(rec_, op, profiler::Category::op, cost);
        if constexpr (Kernels::kHostTimedKernels) {
            s.kernel.host_timed(rec_, kernel, cost);
        } else {
            s.kernel.tagged(tagger_, kernel, cost);
        }
    }

    // A kv_cache_write or decode_attention call's shape at this step: Tq new positions of each
    // sequence from pos_.
    template <class Args>
    Args cache_step(Args a, std::int64_t Tq) const {
        a.B = shape_.batch;
        a.Tq = Tq;
        a.S = shape_.positions();
        a.pos = pos_;
        a.NH = cfg_.n_heads;
        a.KVH = cfg_.n_kv_heads;
        a.HD = cfg_.head_dim();
        return a;
    }

    void embed(std::int64_t Tq);
    void norm(const std::string& name, T* out, const T* inp, std::int64_t rows, const ParamSlot* w,
              const ParamSlot* b);
    void linear(const std::string& name, T* out, const T* inp, std::int64_t M, const ParamSlot* w,
                const ParamSlot* b, std::int64_t N, std::int64_t K);
    void residual_add(const std::string& name, const T* branch, std::int64_t n);
    void attention_half(int l, std::int64_t Tq);
    void mlp_half(int l, std::int64_t Tq);
    void head(std::int64_t Tq);

    ModelConfig cfg_;
    GenerateShape shape_;
    Kernels k_;
    std::vector<ParamSlot> params_;
    std::vector<gpt_detail::LayerParams> layers_;
    ParamSlot *p_wte_ = nullptr, *p_wpe_ = nullptr, *p_lnf_w_ = nullptr, *p_lnf_b_ = nullptr,
              *p_head_ = nullptr;
    Tensor cache_, residual_, arena_, logits_, stats_, scratch_, decode_ws_, tokens_;
    std::int64_t pos_ = 0;  // positions the cache holds
    profiler::Recorder* rec_ = nullptr;
    profiler::KernelTagger* tagger_ = nullptr;
};

}  // namespace napkin

#include "core/engine/generate_ops.h"  // NOLINT(build/include): the step's ops
