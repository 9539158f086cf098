#include "cli/flag_names.h"

#include <algorithm>
#include <array>
#include <utility>

#include "core/check.h"

namespace napkin::cli {

namespace {

// Sorted by field. The field is the library's name for the setting (TrainOptions, PlanInputs,
// EstimateInputs, InferenceInputs); where it carries a unit the flag's does not, both are here.
constexpr std::array<std::pair<std::string_view, std::string_view>, 57> kFlags{{
    {"adapters", "--adapters"},
    {"attention_flops", "--attention-flops"},
    {"batch", "--batch"},
    {"comm_timeout", "--comm-timeout"},
    {"config", "--config"},
    {"cpu_memory_bytes", "--cpu-mem-gb"},
    {"cuda_graph", "--cuda-graph"},
    {"d_model", "--d-model"},
    {"detect_anomaly", "--detect-anomaly"},
    {"device", "--device"},
    {"dropout", "--dropout"},
    {"finetune", "--finetune"},
    {"fp32_optimizer_state", "--fp32-optimizer-state"},
    {"fp8_amax_history", "--fp8-amax-history"},
    {"gen_len", "--gen-len"},
    {"gpu", "--gpu"},
    {"gpu_memory_bytes", "--gpu-mem-gb"},
    {"gpus", "--gpus"},
    {"grad_accum", "--grad-accum"},
    {"grads_fp32", "--grads-fp32"},
    {"heads", "--heads"},
    {"ignore_activations", "--ignore-activations"},
    {"inference", "--inference"},
    {"layers", "--layers"},
    {"link", "--link"},
    {"link_bytes_per_s", "--link-gbps"},
    {"list_links", "--list-links"},
    {"lora_rank", "--lora-rank"},
    {"loss_chunk_rows", "--loss-chunk"},
    {"max_new_tokens", "--max-new-tokens"},
    {"measured_tokens_per_s", "--measured-tokens-per-s"},
    {"mfu", "--mfu"},
    {"micro_batch", "--micro-batch"},
    {"model", "--model"},
    {"net_link", "--net-link"},
    {"node_link", "--node-link"},
    {"offload", "--offload"},
    {"offload_optimizer", "--offload optimizer"},
    {"optimizer", "--optimizer"},
    {"overlap", "--overlap"},
    {"paged_optimizer", "--paged-optimizer"},
    {"params", "--params"},
    {"peak_flops_per_s", "--peak-tflops"},
    {"pp", "--pp"},
    {"precision", "--precision"},
    {"profile", "--profile"},
    {"profile_force", "--profile-force"},
    {"prompt_len", "--prompt-len"},
    {"resume", "--resume"},
    {"seq_len", "--seq-len"},
    {"sequence_parallel", "--sp"},
    {"solve", "--solve"},
    {"steps", "--steps"},
    {"tokens", "--tokens"},
    {"tp", "--tp"},
    {"vpp", "--vpp"},
    {"zero", "--zero"},
}};
static_assert(std::is_sorted(kFlags.begin(), kFlags.end()),
              "kFlags: keep the rows sorted by field");

}  // namespace

std::string flag_for_field(std::string_view field) {
    const auto it =
        std::lower_bound(kFlags.begin(), kFlags.end(), field,
                         [](const auto& row, std::string_view f) { return row.first < f; });
    if (it != kFlags.end() && it->first == field) return std::string(it->second);
    std::string marked(1, '{');  // built by appends: GCC 12 warns (-Wrestrict) on "{" + s + "}"
    marked.append(field);
    marked += '}';
    return marked;
}

std::string with_flags(std::string_view marked) {
    return name_fields(marked, flag_for_field);
}

std::string message_with_flags(const std::exception& e) {
    const auto* user = dynamic_cast<const UserError*>(&e);
    return user != nullptr ? with_flags(user->marked()) : std::string(e.what());
}

}  // namespace napkin::cli
