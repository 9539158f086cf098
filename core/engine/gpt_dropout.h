// Dropout's part of the GPT engine's orchestration (core/engine/gpt_impl.h), where GPT-2 puts
// it (embd_pdrop, attn_pdrop and resid_pdrop, one probability here: ModelConfig::dropout):
//   - the embedding output, in place, its mask kept by the embedding op (embedding.mask);
//   - the attention probabilities (naive attention keeps P, the mask and Pd; flash keeps nothing
//     more and draws the bits again in its backward: kernels/attention.h);
//   - each residual branch (attention and MLP), in place on the branch output once its last
//     writer is done (the projection, or its LoRA adapter after it), its mask kept by the
//     projection op (attn.proj.mask, mlp.proj.mask); the backward puts dres through the
//     mask into the branch buffer, which the projection's backward then reads as its dout.
// Masks come from kernels/dropout.h's counter-based hash, seeded per site from the micro-batch's
// seed (Gpt::set_dropout_seed): a recomputed block draws the very same masks.
#pragma once

#include <cstdint>

#include "core/engine/gpt_detail.h"
#include "core/tensor.h"
#include "kernels/attention.h"
#include "kernels/dropout.h"

namespace napkin::gpt_detail {

template <class Kernels>
class Dropout {
    using T = typename Kernels::Elem;

public:
    void configure(double p) { p_ = static_cast<float>(p); }
    bool on() const { return p_ > 0.0f; }
    void set_seed(std::uint64_t seed) { seed_ = seed; }

    // x (n) in place through a fresh mask (the kept tensor `mask`, n bytes) for the site.
    // Range: as in gpt_fp8.h, opens the op's next kernel range.
    template <class Range>
    void forward(Kernels& k, Range&& range, T* x, Tensor& mask, std::int64_t n, int layer,
                 DropoutSite site) {
        range("dropout_forward", dropout_forward_cost({n, storage_dtype<T>()}));
        k.dropout_forward({.out = x,
                           .mask = mask.template data<std::uint8_t>(),
                           .inp = x,
                           .n = n,
                           .p = p_,
                           .seed = dropout_site_seed(seed_, layer, site)});
    }

    // dx (n) = dout (n) through the kept mask; dx may be dout.
    template <class Range>
    void backward(Kernels& k, Range&& range, T* dx, const T* dout, const Tensor& mask,
                  std::int64_t n) {
        range("dropout_backward", dropout_backward_cost({n, storage_dtype<T>()}));
        k.dropout_backward({.dinp = dx,
                            .dout = dout,
                            .mask = mask.template data<std::uint8_t>(),
                            .n = n,
                            .p = p_});
    }

    // Naive attention's dropout for layer l, over the kept attn.p.mask and attn.p.dropped.
    AttentionDropout<T> attention(KeptTensors& kt, int layer) const {
        return {p_, dropout_site_seed(seed_, layer, DropoutSite::attention),
                kt.get(KeptId::attn_p_mask).template data<std::uint8_t>(),
                kt.get(KeptId::attn_p_dropped).template data<T>()};
    }
    // Flash attention's: the same bits, drawn in the kernel, nothing kept.
    AttentionDropout<T> flash_attention(int layer) const {
        return {p_, dropout_site_seed(seed_, layer, DropoutSite::attention), nullptr, nullptr};
    }

private:
    float p_ = 0.0f;
    std::uint64_t seed_ = 0;
};

}  // namespace napkin::gpt_detail
