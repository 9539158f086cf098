// Estimate: the estimator (estimator/estimate.h) live. Its inputs are widgets (model, recipe,
// parallelism, GPU); the memory per GPU is drawn as a stacked bar against the GPU's capacity,
// with fits / does not fit, FLOPs, step time and the estimator's notes. A loaded run's model and
// recipe can be taken as the starting point.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <imgui.h>

#include "core/check.h"
#include "core/model_config.h"
#include "estimator/hardware.h"
#include "estimator/report.h"
#include "viewer/view.h"
#include "viewer/widgets.h"

namespace napkin::viewer {

namespace {

template <class Table>
bool enum_combo(const char* label, int& index, const Table& table) {
    bool changed = false;
    ImGui::SetNextItemWidth(160);
    if (ImGui::BeginCombo(label,
                          std::string(table[static_cast<std::size_t>(index)].name).c_str())) {
        for (std::size_t i = 0; i < table.size(); ++i) {
            if (ImGui::Selectable(std::string(table[i].name).c_str(),
                                  static_cast<int>(i) == index)) {
                index = static_cast<int>(i);
                changed = true;
            }
        }
        ImGui::EndCombo();
    }
    return changed;
}

template <class Table, class E>
int index_of(const Table& table, E value) {
    for (std::size_t i = 0; i < table.size(); ++i) {
        if (table[i].value == value) return static_cast<int>(i);
    }
    return 0;
}

bool int_input(const char* label, int& v, int lo, int hi) {
    ImGui::SetNextItemWidth(160);
    const bool changed = ImGui::InputInt(label, &v);
    v = std::clamp(v, lo, hi);
    return changed;
}

// Runs with a model in their report, usable as the model source.
std::vector<int> runs_with_model(const std::vector<RunData>& runs) {
    std::vector<int> out;
    for (std::size_t r = 0; r < runs.size(); ++r) {
        if (runs[r].has_report) out.push_back(static_cast<int>(r));
    }
    return out;
}

void take_run_recipe(EstimateState& s, const RunData& run) {
    auto set_enum = [&](const std::string& v, int& index, const auto& table) {
        for (std::size_t i = 0; i < table.size(); ++i) {
            if (table[i].name == v) index = static_cast<int>(i);
        }
    };
    const profiler::RunOptions& o = run.report.run;
    set_enum(o.precision, s.precision, kPrecisionNames);
    set_enum(o.optimizer, s.optimizer, kOptimizerNames);
    set_enum(o.checkpointing, s.checkpointing, kCheckpointingNames);
    set_enum(o.attention, s.attention, kAttentionNames);
    const std::int64_t t = o.seq_len;
    const std::int64_t b = o.micro_batch;
    if (t > 0) s.seq_len = static_cast<int>(t);
    if (b > 0) s.micro_batch = static_cast<int>(b);
    s.gpus = 1;
    s.zero = 0;
    // A GPU run is estimated on its own GPU ("cuda: NVIDIA H200" -> h200), not the default.
    if (const GpuSpec* g = gpu_for_device_name(o.device)) {
        for (std::size_t i = 0; i < gpu_table().size(); ++i) {
            if (&gpu_table()[i] == g) s.gpu = static_cast<int>(i);
        }
    }
}

void compute(EstimateState& s, const std::vector<RunData>& runs) {
    s.error.clear();
    try {
        EstimateInputs in;
        const auto& presets = model_presets();
        const std::vector<int> from_runs = runs_with_model(runs);
        if (s.model < static_cast<int>(presets.size())) {
            in.model = presets[static_cast<std::size_t>(s.model)];
        } else {
            const RunData& run = runs[static_cast<std::size_t>(
                from_runs[static_cast<std::size_t>(s.model) - presets.size()])];
            in.model = run.report.model;
        }
        in.seq_len = s.seq_len;
        in.micro_batch = s.micro_batch;
        in.grad_accum = s.grad_accum;
        in.precision = kPrecisionNames[static_cast<std::size_t>(s.precision)].value;
        in.optimizer = kOptimizerNames[static_cast<std::size_t>(s.optimizer)].value;
        in.checkpointing = kCheckpointingNames[static_cast<std::size_t>(s.checkpointing)].value;
        in.attention = kAttentionNames[static_cast<std::size_t>(s.attention)].value;
        in.offload = kOffloadNames[static_cast<std::size_t>(s.offload)].value;
        in.finetune = kFinetuneNames[static_cast<std::size_t>(s.finetune)].value;
        in.gpus = s.gpus;
        in.zero = s.zero;
        in.mfu = static_cast<double>(s.mfu);
        const GpuSpec& gpu = gpu_table()[static_cast<std::size_t>(s.gpu)];
        const PrecisionDTypes pd = precision_dtypes(in.precision, in.optimizer, in.grads_fp32);
        in.peak_flops_per_s = gpu.peak_tflops(pd.gemm_compute) * 1e12;
        in.gpu_memory_bytes = gpu.memory_gb * 1e9;
        in.cpu_memory_bytes = 256e9;
        Estimator est;
        s.result = est.run(in);
        s.inputs = in;
    } catch (const std::exception& e) {
        s.error = e.what();
    }
}

void draw_breakdown(const EstimateState& s, ImVec2 size) {
    const Estimate& e = s.result;
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImVec2 p0 = ImGui::GetCursorScreenPos();
    ImGui::Dummy(size);
    struct Part {
        const char* category;
        const char* label;
        double bytes;
    };
    const Part parts[] = {{"parameters", "weights", e.gpu.weights},
                          {"master_weights", "master", e.gpu.master},
                          {"gradients", "gradients", e.gpu.grads},
                          {"optimizer_state", "optimizer", e.gpu.optimizer},
                          {"activations", "activations", e.gpu.activations},
                          {"temporaries", "temporaries", e.gpu.temporaries}};
    // The breakdown scaled to the total (its proportions always readable), and under it the
    // total against the GPU's capacity.
    const double cap = e.gpu_capacity_bytes;
    const double total = std::max(e.gpu.total(), 1.0);
    const float x0 = p0.x + 10, x1 = p0.x + size.x - 10;
    const float bar_y0 = p0.y + 26, bar_y1 = p0.y + 66;
    float x = x0;
    for (const Part& p : parts) {
        const float w = static_cast<float>(p.bytes / total) * (x1 - x0);
        dl->AddRectFilled(ImVec2(x, bar_y0), ImVec2(x + w, bar_y1),
                          memory_category_color(p.category));
        if (ImGui::IsMouseHoveringRect(ImVec2(x, bar_y0), ImVec2(x + w, bar_y1))) {
            tooltip_text(std::string(p.label) + ": " + fmt_bytes(p.bytes));
        }
        x += w;
    }
    const float cap_y0 = bar_y1 + 8, cap_y1 = bar_y1 + 22;
    if (cap > 0) {
        const double scale = std::max(total, cap);
        const float used = x0 + static_cast<float>(total / scale) * (x1 - x0);
        const float limit = x0 + static_cast<float>(cap / scale) * (x1 - x0);
        dl->AddRectFilled(ImVec2(x0, cap_y0), ImVec2(x1, cap_y1), IM_COL32(45, 45, 55, 255));
        dl->AddRectFilled(ImVec2(x0, cap_y0), ImVec2(std::max(used, x0 + 2), cap_y1),
                          total <= cap ? IM_COL32(90, 200, 120, 255) : IM_COL32(240, 80, 70, 255));
        dl->AddLine(ImVec2(limit, cap_y0 - 4), ImVec2(limit, cap_y1 + 4),
                    IM_COL32(255, 255, 255, 255), 2.0f);
        char buf[96];
        std::snprintf(buf, sizeof buf, "%.1f%% of GPU memory (%s)", 100.0 * total / cap,
                      fmt_bytes_short(cap).c_str());
        dl->AddText(ImVec2(x0 + 4, cap_y0 - 1), IM_COL32(255, 255, 255, 255), buf);
    }
    const float bar_end = cap_y1;
    const bool fits = e.fits();
    const std::string verdict = std::string(fits ? "FITS" : "DOES NOT FIT") + ": " +
                                fmt_bytes_short(e.gpu.total()) + " per GPU" +
                                (cap > 0 ? " of " + fmt_bytes_short(cap) : "");
    dl->AddText(ImVec2(x0, p0.y + 4),
                fits ? IM_COL32(90, 220, 120, 255) : IM_COL32(255, 90, 80, 255), verdict.c_str());
    // Legend with values.
    float ly = bar_end + 10;
    float lx = x0;
    for (const Part& p : parts) {
        const std::string label = std::string(p.label) + " " + fmt_bytes_short(p.bytes);
        dl->AddRectFilled(ImVec2(lx, ly + 3), ImVec2(lx + 10, ly + 13),
                          memory_category_color(p.category));
        dl->AddText(ImVec2(lx + 14, ly), IM_COL32(220, 220, 225, 255), label.c_str());
        lx += ImGui::CalcTextSize(label.c_str()).x + 34;
        if (lx > x1 - 150) {
            lx = x0;
            ly += 18;
        }
    }
}

// The first frame's inputs: GPT-2 in bf16-amp with AdamW and flash attention on an H100, or the
// first loaded run's model and recipe on one GPU.
void init_state(EstimateState& s, const std::vector<RunData>& runs,
                const std::vector<int>& from_runs) {
    const auto& presets = model_presets();
    s.initialized = true;
    for (std::size_t i = 0; i < presets.size(); ++i) {
        if (presets[i].name == "gpt2") s.model = static_cast<int>(i);
    }
    for (std::size_t i = 0; i < gpu_table().size(); ++i) {
        if (gpu_table()[i].name == "h100-sxm") s.gpu = static_cast<int>(i);
    }
    s.precision = index_of(kPrecisionNames, Precision::bf16_amp);
    s.optimizer = index_of(kOptimizerNames, OptimizerKind::adamw);
    s.attention = index_of(kAttentionNames, AttentionImpl::flash);
    s.seq_len = 1024;
    if (!from_runs.empty()) {
        s.model = static_cast<int>(presets.size());
        take_run_recipe(s, runs[static_cast<std::size_t>(from_runs.front())]);
    }
}

// The model: a preset, or a loaded run's model (which also takes its recipe).
bool model_combo(EstimateState& s, const std::vector<RunData>& runs,
                 const std::vector<int>& from_runs) {
    const auto& presets = model_presets();
    bool changed = false;
    ImGui::SetNextItemWidth(160);
    const std::string model_label =
        s.model < static_cast<int>(presets.size())
            ? presets[static_cast<std::size_t>(s.model)].name
            : "run " + runs[static_cast<std::size_t>(
                                from_runs[static_cast<std::size_t>(s.model) - presets.size()])]
                           .label;
    if (!ImGui::BeginCombo("model", model_label.c_str())) return false;
    for (std::size_t i = 0; i < presets.size(); ++i) {
        if (ImGui::Selectable(presets[i].name.c_str(), static_cast<int>(i) == s.model)) {
            s.model = static_cast<int>(i);
            changed = true;
        }
    }
    for (std::size_t i = 0; i < from_runs.size(); ++i) {
        const RunData& run = runs[static_cast<std::size_t>(from_runs[i])];
        const int index = static_cast<int>(presets.size() + i);
        if (ImGui::Selectable(("run " + run.label).c_str(), index == s.model)) {
            s.model = index;
            take_run_recipe(s, run);
            changed = true;
        }
    }
    ImGui::EndCombo();
    return changed;
}

bool gpu_combo(EstimateState& s) {
    bool changed = false;
    ImGui::SetNextItemWidth(160);
    if (!ImGui::BeginCombo("GPU",
                           std::string(gpu_table()[static_cast<std::size_t>(s.gpu)].name).c_str()))
        return false;
    for (std::size_t i = 0; i < gpu_table().size(); ++i) {
        if (ImGui::Selectable(std::string(gpu_table()[i].name).c_str(),
                              static_cast<int>(i) == s.gpu)) {
            s.gpu = static_cast<int>(i);
            changed = true;
        }
    }
    ImGui::EndCombo();
    return changed;
}

// The inputs, in a column on the left. True when any changed.
bool draw_controls(EstimateState& s, const std::vector<RunData>& runs,
                   const std::vector<int>& from_runs) {
    bool changed = false;
    ImGui::BeginChild("controls", ImVec2(330, 0), true);
    ImGui::TextDisabled("model");
    changed |= model_combo(s, runs, from_runs);
    changed |= int_input("seq len T", s.seq_len, 1, 1 << 20);
    changed |= int_input("micro-batch B", s.micro_batch, 1, 1 << 16);
    changed |= int_input("grad accum G", s.grad_accum, 1, 1 << 16);
    ImGui::Separator();
    ImGui::TextDisabled("recipe");
    changed |= enum_combo("precision", s.precision, kPrecisionNames);
    changed |= enum_combo("optimizer", s.optimizer, kOptimizerNames);
    changed |= enum_combo("checkpointing", s.checkpointing, kCheckpointingNames);
    changed |= enum_combo("attention", s.attention, kAttentionNames);
    changed |= enum_combo("fine-tuning", s.finetune, kFinetuneNames);
    ImGui::Separator();
    ImGui::TextDisabled("parallelism");
    changed |= int_input("GPUs (data parallel)", s.gpus, 1, 1 << 20);
    ImGui::SetNextItemWidth(160);
    changed |= ImGui::SliderInt("ZeRO stage", &s.zero, 0, 3);
    changed |= enum_combo("offload", s.offload, kOffloadNames);
    ImGui::Separator();
    ImGui::TextDisabled("hardware");
    changed |= gpu_combo(s);
    ImGui::SetNextItemWidth(160);
    changed |= ImGui::SliderFloat("assumed MFU", &s.mfu, 0.05f, 1.0f, "%.2f");
    ImGui::EndChild();
    return changed;
}

// The estimate's numbers: memory, FLOPs, time.
void draw_numbers(const EstimateState& s) {
    const Estimate& e = s.result;
    const ImGuiTableFlags flags =
        ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_SizingStretchProp;
    if (!ImGui::BeginTable("numbers", 2, flags)) return;
    auto row = [](const char* k, const std::string& v) {
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(k);
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(v.c_str());
    };
    char buf[96];
    row("memory per GPU", fmt_bytes_short(e.gpu.total()) + " (" + fmt_bytes(e.gpu.total()) + ")");
    row("model states (weights, master, grads, optimizer)", fmt_bytes_short(e.gpu.model_states()));
    std::snprintf(buf, sizeof buf, "%.1f B/param", e.bytes_per_param.total());
    row("bytes per trainable parameter", buf);
    row("activations (detailed op plan / closed form)",
        fmt_bytes_short(e.act_detailed_bytes) + " / " + fmt_bytes_short(e.act_closed_form_bytes));
    row("model FLOPs per token (6N + attention)", fmt_sci(e.model_flops_per_token));
    row("FLOPs per step (all GPUs)", fmt_sci(e.model_flops_per_step));
    if (e.step_seconds > 0) {
        std::snprintf(buf, sizeof buf, "%s at MFU %.0f%% (%.4g tokens/s)",
                      fmt_duration_ns(e.step_seconds * 1e9).c_str(), 100.0 * s.inputs.mfu,
                      e.tokens_per_step / e.step_seconds);
        row("step time", buf);
        std::snprintf(buf, sizeof buf, "%.3g GPU-group days (%s) for %s tokens",
                      e.run_seconds / 86400.0, fmt_duration_ns(e.run_seconds * 1e9).c_str(),
                      fmt_sci(e.tokens).c_str());
        row("training run (one GPU group)", buf);
    } else {
        row("step time", "no peak known for this GPU and precision");
    }
    ImGui::EndTable();
}

}  // namespace

void draw_estimate(EstimateState& s, const std::vector<RunData>& runs) {
    const std::vector<int> from_runs = runs_with_model(runs);
    bool changed = !s.initialized;
    if (!s.initialized) init_state(s, runs, from_runs);
    if (s.model >= static_cast<int>(model_presets().size() + from_runs.size())) s.model = 0;
    changed |= draw_controls(s, runs, from_runs);
    if (changed) compute(s, runs);

    ImGui::SameLine();
    ImGui::BeginChild("result", ImVec2(0, 0), false);
    if (!s.error.empty()) {
        error_text(s.error);
        ImGui::EndChild();
        return;
    }
    const Estimate& e = s.result;
    ImGui::Text("%s: %s parameters (%s trainable), T=%lld, %s tokens per step",
                s.inputs.model.name.c_str(), fmt_count(e.total_params).c_str(),
                fmt_count(e.trainable_params).c_str(), static_cast<long long>(e.seq_len),
                fmt_count(e.tokens_per_step).c_str());
    draw_breakdown(s, ImVec2(ImGui::GetContentRegionAvail().x, 150));
    draw_numbers(s);
    for (const std::string& note : note_texts(s.inputs, e))  // settings named by field
        ImGui::TextDisabled("note: %s", name_fields(note).c_str());
    ImGui::EndChild();
}

}  // namespace napkin::viewer
