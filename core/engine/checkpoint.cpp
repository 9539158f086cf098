#include "core/engine/checkpoint.h"

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/config_json.h"
#include "core/engine/checkpoint_file.h"
#include "core/engine/checkpoint_state.h"
#include "kernels/nf4.h"
#include "kernels/optimizer.h"
#include "kernels/quantize.h"

namespace napkin {

namespace {

using json = nlohmann::json;

std::int64_t numel_of(const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (const std::int64_t d : shape)
        n *= d;
    return n;
}

// One tensor of a whole-state checkpoint and the part of it this process holds.
struct Entry {
    std::string name;
    std::vector<std::int64_t> shape;
    StateKind kind;
    HeldState held;
};

// fp8-amp's delayed scaling (core/engine/gpt_fp8.h): "fp8.amax_history" (slots, H) and
// "fp8.scales" (slots, 8), F32, in the model's memory (the same on every rank under ZeRO: the
// ranks reduce their amaxes); none with current scaling.
void add_fp8_state(Trainer& t, std::vector<Entry>& out) {
    Gpt& model = t.model();
    const std::int64_t slots = fp8_slots(model.plan()).total();
    for (const auto& [name, tensor, width] :
         {std::tuple{"fp8.amax_history", model.fp8_amax_history(),
                     t.options().plan.fp8_amax_history},
          std::tuple{"fp8.scales", model.fp8_scales(), kFp8ScaleFloats}}) {
        if (tensor == nullptr || tensor->empty()) continue;
        NAPKIN_ASSERT(tensor->numel() == slots * width,
                      "checkpoint: " << name << " holds " << tensor->numel());
        out.push_back({name,
                       {slots, width},
                       StateKind::weights,
                       {true, DType::f32, static_cast<char*>(tensor->raw()), 0, slots * width}});
    }
}

// Every tensor a checkpoint of `t` holds, per parameter (Gpt::params() order): its weights,
// master, first and second moments where the recipe keeps them (a frozen parameter: its
// weights only). A QLoRA NF4 weight is its bytes: "<name>.nf4" (the codes) and
// "<name>.nf4_state", both I8 (kernels/nf4.h).
std::vector<Entry> entries_of(Trainer& t) {
    std::vector<ParamSlot>& params = t.model().params();
    const PlanInputs& plan = t.options().plan;
    const std::vector<ParamTensor> shapes =
        param_tensors(t.options().model, plan.finetune != Finetune::full ? plan.lora_rank : 0);
    NAPKIN_ASSERT(shapes.size() == params.size(), "checkpoint: " << params.size() << " parameters, "
                                                                 << shapes.size()
                                                                 << " in param_tensors()");
    std::vector<Entry> out;
    for (std::size_t i = 0; i < params.size(); ++i) {
        NAPKIN_ASSERT(shapes[i].name == params[i].name && shapes[i].numel() == params[i].numel,
                      "checkpoint: parameter " << i << " is " << params[i].name
                                               << ", param_tensors() says " << shapes[i].name);
        if (const HeldState w = held_frozen(t, i, false); w.present) {
            // ZeRO-3 fine-tuning: the rank's part of the frozen tensor, in its frozen shards.
            if (w.dtype == DType::i8) {
                out.push_back({params[i].name + ".nf4", {static_cast<std::int64_t>(nf4_code_bytes(params[i].numel))},
                               StateKind::weights, w});
                out.push_back({params[i].name + ".nf4_state",
                               {static_cast<std::int64_t>(nf4_state_bytes(params[i].numel))}, StateKind::weights,
                               held_frozen(t, i, true)});
            } else {
                out.push_back({params[i].name, shapes[i].shape, StateKind::weights, w});
            }
            continue;
        }
        if (params[i].weight.dtype() == DType::nf4) {  // frozen: no other state
            auto bytes = [](Tensor& x) -> Entry {
                const auto n = static_cast<std::int64_t>(x.bytes());
                return {"", {n}, StateKind::weights, {true, DType::i8, static_cast<char*>(x.raw()), 0, n}};
            };
            out.push_back(bytes(params[i].weight));
            out.back().name = params[i].name + ".nf4";
            out.push_back(bytes(params[i].quant));
            out.back().name = params[i].name + ".nf4_state";
            continue;
        }
        for (const StateKind kind : kStateKinds) {
            const HeldState h = held_state(t, i, kind);
            if (h.present) out.push_back({params[i].name + state_suffix(kind), shapes[i].shape, kind, h});
        }
        // adamw-8bit: each moment's block absmax beside its codes (whole, or a rank's blocks).
        for (const StateKind kind : {StateKind::first_moment, StateKind::second_moment}) {
            const HeldState h = held_absmax(t, i, kind);
            if (h.present) {
                out.push_back({params[i].name + state_suffix(kind) + ".absmax",
                               {optimizer_8bit_blocks(params[i].numel)}, kind, h});
            }
        }
    }
    add_fp8_state(t, out);
    return out;
}

// "n_layers 2 (checkpoint) vs 3 (trainer), d_model ...", or empty when the shapes agree.
// The name is a label, not a shape: a config renamed still fits.
std::string model_differences(const ModelConfig& saved, const ModelConfig& trainer) {
    const json a = model_config_to_json(saved), b = model_config_to_json(trainer);
    std::string out;
    for (const auto& [key, value] : a.items()) {
        if (key == "name" || key == "format" || (b.contains(key) && b[key] == value)) continue;
        if (!out.empty()) out += ", ";
        out += key + " " + value.dump() + " (checkpoint) vs " +
               (b.contains(key) ? b[key].dump() : "none") + " (trainer)";
    }
    return out;
}

void check_compatible(const TrainOptions& saved, const TrainOptions& trainer,
                      const std::string& path) {
    const std::string diff = model_differences(saved.model, trainer.model);
    if (!diff.empty()) checkpoint_error(path, "model differs from the trainer's: " + diff);
    auto same = [&](const char* what, const std::string& a, const std::string& b) {
        if (a != b)
            checkpoint_error(path, std::string(what) + " differs: " + a + " (checkpoint) vs " + b +
                                       " (trainer)");
    };
    same("precision", std::string(enum_name(kPrecisionNames, saved.plan.precision)),
         std::string(enum_name(kPrecisionNames, trainer.plan.precision)));
    same("optimizer", std::string(enum_name(kOptimizerNames, saved.plan.optimizer)),
         std::string(enum_name(kOptimizerNames, trainer.plan.optimizer)));
    same("finetune", std::string(enum_name(kFinetuneNames, saved.plan.finetune)),
         std::string(enum_name(kFinetuneNames, trainer.plan.finetune)));
    if (saved.plan.precision == Precision::fp8_amp) {
        same("fp8 amax history length", std::to_string(saved.plan.fp8_amax_history),
             std::to_string(trainer.plan.fp8_amax_history));
    }
    if (saved.plan.finetune != Finetune::full) {
        same("lora rank", std::to_string(saved.plan.lora_rank), std::to_string(trainer.plan.lora_rank));
        same("lora alpha", std::to_string(saved.plan.lora_alpha), std::to_string(trainer.plan.lora_alpha));
    }
}

void check_tensors(const CheckpointReader& r, const std::vector<Entry>& entries,
                   const std::string& path) {
    for (const Entry& e : entries) {
        const CheckpointFileTensor* ft = r.find(e.name);
        if (ft == nullptr) checkpoint_error(path, "tensor '" + e.name + "' missing");
        if (ft->dtype != e.held.dtype) {
            checkpoint_error(path, "tensor '" + e.name + "': dtype " +
                                       safetensors_dtype_name(ft->dtype) + ", the trainer's is " +
                                       safetensors_dtype_name(e.held.dtype));
        }
        if (ft->shape != e.shape) {
            checkpoint_error(path, "tensor '" + e.name + "': shape " + dims_text(ft->shape) +
                                       ", the trainer's is " + dims_text(e.shape));
        }
    }
    if (r.tensors().size() != entries.size()) {
        std::set<std::string> expected;
        for (const Entry& e : entries)
            expected.insert(e.name);
        for (const auto& kv : r.tensors()) {
            if (expected.count(kv.first) == 0) {
                checkpoint_error(path,
                                 "unexpected tensor '" + kv.first +
                                     "' (no parameter, master copy, moment or fp8 scaling state of "
                                     "this trainer)");
            }
        }
    }
}

}  // namespace

void save_checkpoint(const std::string& path, Trainer& t) {
    const std::vector<Entry> entries = entries_of(t);
    std::vector<CheckpointTensor> tensors;
    // On a device, each tensor's bytes copied to the host (a moved vector keeps its buffer).
    std::vector<std::vector<char>> staged(entries.size());
    for (std::size_t k = 0; k < entries.size(); ++k) {
        const Entry& e = entries[k];
        NAPKIN_ASSERT(e.held.first == 0 && e.held.count == numel_of(e.shape),
                      "save_checkpoint: this process holds only part of "
                          << e.name << " (sharded runs write zero_checkpoint.h's shards)");
        const auto bytes = static_cast<std::size_t>(
            storage_bytes(e.held.dtype, static_cast<std::uint64_t>(e.held.count)));
        tensors.push_back(
            {e.name, e.held.dtype, e.shape, state_on_host(t, e.kind, e.held.data, bytes, staged[k])});
    }
    write_checkpoint_file(path, kCheckpointFormat, checkpoint_info_of(t), {}, std::move(tensors));
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
    return CheckpointReader(path, kCheckpointFormat).info();
}

void load_checkpoint(const std::string& path, Trainer& t) {
    const CheckpointReader r(path, kCheckpointFormat);
    check_compatible(r.info().options, t.options(), path);
    check_same_data(r.info(), t, path);
    const std::vector<Entry> entries = entries_of(t);
    check_tensors(r, entries, path);
    r.verify_checksum();

    // Every check has passed: from here on the trainer's state is replaced, each tensor by the
    // file's bytes of the elements this process holds (all of them, or a rank's shard).
    std::vector<char> buf;
    for (const Entry& e : entries) {
        if (e.held.count == 0) continue;
        const DType dt = e.held.dtype;
        buf.resize(
            static_cast<std::size_t>(storage_bytes(dt, static_cast<std::uint64_t>(e.held.count))));
        r.read(*r.find(e.name), storage_bytes(dt, static_cast<std::uint64_t>(e.held.first)),
               buf.data(), buf.size());
        state_from_host(t, e.kind, e.held.data, buf.data(), buf.size());
    }
    restore_checkpoint_state(t, r.info());
}

}  // namespace napkin
