// Pretrained weights into the engine, from three formats (docs/WEIGHTS.md):
//  - llm.c's checkpoint (train_gpt2.c write_model, gpt2_124M.bin): 256 int32 header
//    [magic 20240326, version 3 (fp32) | 5 (bf16), maxT, V, L, NH, C, Vp], then every parameter
//    back to back, grouped by kind across layers: wte (Vp, C), wpe (maxT, C), ln1w (L, C),
//    ln1b (L, C), qkvw (L, 3C, C), qkvb (L, 3C), attprojw (L, C, C), attprojb (L, C), ln2w, ln2b,
//    fcw (L, 4C, C), fcb (L, 4C), fcprojw (L, C, 4C), fcprojb (L, C), lnfw (C), lnfb (C).
//    Matrices are (out, in), as napkin's.
//  - Hugging Face GPT-2 model.safetensors (openai-community/gpt2): "[transformer.]wte.weight"
//    (V, C), "wpe.weight" (ctx, C), "h.<l>.{ln_1,ln_2}.{weight,bias}", Conv1D weights stored
//    (in, out) and transposed here into napkin's (out, in): "h.<l>.attn.c_attn.weight" (C, 3C),
//    "h.<l>.attn.c_proj.weight" (C, C), "h.<l>.mlp.c_fc.weight" (C, 4C), "h.<l>.mlp.c_proj.weight"
//    (4C, C); their biases as is; "ln_f.{weight,bias}". The causal-mask buffers "h.<l>.attn.bias"
//    and ".masked_bias" are ignored, and "lm_head.weight" too when it equals wte (tied).
//  - napkin's own checkpoint (napkin train's checkpoint.safetensors, docs/CHECKPOINTS.md, its
//    metadata "format" napkin-checkpoint/1): the weights by napkin's names, of any architecture
//    the engine runs; masters and moments are ignored. A fine-tuning run's checkpoint is refused
//    (its adapters are not merged into the base).
// The token embedding's rows beyond what the file holds (up to the model's Vp) are zeroed. LoRA
// adapters are never in a file: they keep their initialization (B = 0).
// The byte sources and copies behind the formats: core/engine/weights_source.h.
// Tests: tests/engine/weights_import_test.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/engine/gpt.h"
#include "core/enum_names.h"
#include "core/model_config.h"

namespace napkin {

// How the file's bytes reach the parameters; each adds a different peak of host memory on top
// of the model (docs/WEIGHTS.md):
//   read_all    one buffer with the whole file, then copied (peak extra ~ file size)
//   sequential  pread tensor by tensor into one reusable buffer (peak extra ~ largest tensor)
//   mmap        map the file read-only (MADV_SEQUENTIAL) and copy from the mapping; the RSS
//               grows by the pages touched, clean page cache the kernel can drop, not heap
// Beside these, an fp32 staging buffer as large as the largest parameter that needs a dtype
// conversion, a transpose or zeroed padding rows (sequential reads fp32 tensors straight into
// it). An fp32 llm.c file whose Vp is the model's needs none under read_all and mmap.
enum class LoadStrategy : std::uint8_t { read_all, sequential, mmap };
inline constexpr std::array kLoadStrategyNames = {
    EnumName<LoadStrategy>{LoadStrategy::read_all, "read-all"},
    EnumName<LoadStrategy>{LoadStrategy::sequential, "sequential"},
    EnumName<LoadStrategy>{LoadStrategy::mmap, "mmap"}};

struct ImportReport {
    std::string format;           // "llm.c" | "safetensors"
    std::int64_t tensors = 0;     // model parameters written
    std::int64_t bytes_read = 0;  // bytes of tensor data taken from the file (any strategy)
    double seconds = 0;           // the whole import: open, header, copies, close
    // VmHWM after minus VmRSS before, with VmHWM reset through /proc/self/clear_refs just
    // before the import; -1 when /proc/self/status is unreadable.
    std::int64_t peak_rss_increase_bytes = -1;
    // False when clear_refs could not be written: the peak is then the process's lifetime
    // VmHWM, an upper bound that an earlier, larger peak may hide.
    bool peak_rss_reset = false;
};

// A GPT-2-shaped config (layernorm, learned positions, gelu, biases, tied embeddings,
// F = 4C, KVH = NH) read from the file. llm.c: its header (maxT, V, L, NH, C, Vp).
// safetensors: L from the highest "h.<l>." index, (V, C) from wte, ctx from wpe's rows,
// Vp = pad_vocab(V), NH from the "__metadata__" key "n_head" (or "num_attention_heads") if
// present, else C / 64 (GPT-2's head size at every size). The name is the matching preset's
// ("gpt2", "gpt2-medium", ...) or "custom". A napkin checkpoint: the config it was trained
// with, as saved. InputError naming PATH when the file is no format napkin reads or its header is
// bad.
ModelConfig config_from_weights(const std::string& path);

// Writes every parameter of `model` from PATH (the format is recognized by its content: llm.c's
// magic, else a safetensors header, napkin's when its metadata says so). InputError naming
// PATH: unreadable, no format napkin reads, bad
// magic or version, truncated ("truncated: expected N bytes, found M"), a model that is not
// GPT-2-shaped or does not match the file (naming the field: n_layers, d_model, n_heads,
// context_length, vocab_size), a tensor missing or of the wrong shape (naming it and the
// expected shape), a dtype other than F32/F16/BF16, a separate lm_head.weight that differs
// from wte, a napkin checkpoint of another model shape (naming the fields) or of a fine-tuning
// run. Every check runs before the first parameter is written; only a read failing midway
// (an I/O error) can leave the model partly written.
ImportReport import_weights(const std::string& path, Gpt& model, LoadStrategy strategy);

}  // namespace napkin
