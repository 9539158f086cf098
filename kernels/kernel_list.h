// The one list of the kernels that the training and inference engines call through a backend. Each line names
// an op's call, cpu::<name> and cuda::<name> (declared in kernels/<op>.h beside its cost), and
// its argument struct. The preprocessor writes the rest from it:
//   - the CUDA plugin's table of cuda:: pointers per storage type, and its fill-in
//     (core/cuda/cuda_engine_api.{h,cpp});
//   - the engine's two backends' wrappers, k.<name>(args) (core/engine/cpu_kernels.h calls
//     cpu::<name>(args), core/engine/cuda_kernels.h the table's cuda::<name>(args, launch)).
// Adding a kernel is a line here; docs/ENGINE.md, "Adding a kernel", has the whole recipe.
//
//   NAPKIN_KERNELS(X)          X(name, Args): Args<T> for T = float, bf16_t, f16_t, the
//                              storage type; generated everywhere.
//   NAPKIN_KERNELS_BY_HAND(X)  the same form; in the plugin's table, but each backend writes its
//                              own wrapper, for the reason given on the line.
//   NAPKIN_FP8_KERNELS(X)      X(member, name, Args): fp8-amp's kernels over bf16 storage only
//                              (one table; the backends' wrappers are overloads of name).
#pragma once

#include "kernels/accumulate.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/decode_attention.h"
#include "kernels/dropout.h"
#include "kernels/embedding.h"
#include "kernels/launch.h"
#include "kernels/lora.h"
#include "kernels/matmul.h"
#include "kernels/nf4.h"
#include "kernels/nonfinite.h"
#include "kernels/norm.h"
#include "kernels/quantize.h"
#include "kernels/residual.h"
#include "kernels/rope.h"

// clang-format off
#define NAPKIN_KERNELS(X)                                                                    \
    X(embedding_forward, EmbeddingForwardArgs)                                               \
    X(embedding_backward, EmbeddingBackwardArgs)                                             \
    X(layernorm_forward, LayernormForwardArgs)                                               \
    X(layernorm_backward, LayernormBackwardArgs)                                             \
    X(rmsnorm_forward, RmsnormForwardArgs)                                                   \
    X(rmsnorm_backward, RmsnormBackwardArgs)                                                 \
    X(residual_layernorm_forward, ResidualLayernormForwardArgs)                              \
    X(matmul_forward, MatmulForwardArgs)                                                     \
    X(matmul_backward, MatmulBackwardArgs)                                                   \
    X(rope_forward, RopeArgs)                                                                \
    X(rope_backward, RopeArgs)                                                               \
    X(attention_naive_forward, AttentionNaiveForwardArgs)                                    \
    X(attention_naive_backward, AttentionNaiveBackwardArgs)                                  \
    X(attention_flash_forward, AttentionFlashForwardArgs)                                    \
    X(attention_flash_backward, AttentionFlashBackwardArgs)                                  \
    X(gelu_forward, GeluForwardArgs)                                                         \
    X(gelu_backward, GeluBackwardArgs)                                                       \
    X(swiglu_forward, SwigluForwardArgs)                                                     \
    X(swiglu_backward, SwigluBackwardArgs)                                                   \
    X(residual_forward, ResidualForwardArgs)                                                 \
    X(residual_backward, ResidualBackwardArgs)                                               \
    X(accumulate, AccumulateArgs)                                                            \
    X(lora_forward, LoraForwardArgs)                                                         \
    X(lora_backward, LoraBackwardArgs)                                                       \
    X(nf4_dequantize, Nf4DequantizeArgs)                                                     \
    X(dropout_forward, DropoutForwardArgs)                                                   \
    X(dropout_backward, DropoutBackwardArgs)                                                 \
    X(nonfinite_check, NonfiniteCheckArgs)                                                   \
    X(kv_cache_write, KvCacheWriteArgs)                                                      \
    X(decode_attention, DecodeAttentionArgs)                                                 \
    X(matmul_gelu_forward, MatmulGeluForwardArgs)                                            \
    X(matmul_gelu_backward, MatmulGeluBackwardArgs)                                          \
    X(nonfinite_check_many, NonfiniteCheckManyArgs)

// head_cross_entropy: the CPU returns the mean loss from its own reduction; CUDA leaves the
// per-row losses on the device, and its wrapper reads them back and takes the mean.
#define NAPKIN_KERNELS_BY_HAND(X)                                                            \
    X(head_cross_entropy, HeadCrossEntropyArgs)

#define NAPKIN_FP8_KERNELS(X)                                                                \
    X(quantize_e4m3, quantize, Fp8QuantizeArgs<f8e4m3_t>)                                    \
    X(quantize_e5m2, quantize, Fp8QuantizeArgs<f8e5m2_t>)                                    \
    X(quantize_transpose_e4m3, quantize_transpose, Fp8QuantizeTransposeArgs<f8e4m3_t>)       \
    X(quantize_transpose_e5m2, quantize_transpose, Fp8QuantizeTransposeArgs<f8e5m2_t>)       \
    X(dequantize_e4m3, dequantize, Fp8DequantizeArgs<f8e4m3_t>)                              \
    X(amax_history_roll, amax_history_roll, AmaxHistoryRollArgs)                             \
    X(matmul_fp8_forward, matmul_fp8_forward, MatmulFp8ForwardArgs)                          \
    X(matmul_fp8_backward, matmul_fp8_backward, MatmulFp8BackwardArgs)
// clang-format on
