// The 3D-parallel parts of the report (estimator/parallel.h): the layout and its stages, the
// tensor- and pipeline-parallel traffic per step, and the pipeline bubble, as text, JSON and
// --explain. docs/ESTIMATOR.md, "3D parallelism", derives the same numbers in prose.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/dtype.h"
#include "estimator/report.h"

namespace napkin {

namespace {

constexpr double kGB = 1e9;

std::string printf_string(const char* fmt, double a) {
    return fmt_number(fmt, a);
}

std::string schedule(const ParallelLayout& p) {
    if (p.pp == 1) return "no pipeline";
    return p.vpp > 1 ? "interleaved, V=" + std::to_string(p.vpp) : "1F1B";
}

// "first", "last" or "stage k" of P.
std::string stage_name(const ParallelLayout& p, int stage) {
    if (p.pp == 1) return "the only stage";
    if (stage == 0) return "stage 1 (first: embedding)";
    if (stage == p.pp - 1) return "stage " + std::to_string(p.pp) + " (last: head and loss)";
    return "stage " + std::to_string(stage + 1);
}

void text_group(std::ostream& os, const GroupTraffic& g, const Estimate& e) {
    if (g.lines.empty()) return;
    char line[256];
    os << "  " << g.group << " group (" << g.ranks << " GPUs";
    if (g.link.bytes_per_s > 0) {
        os << ", " << g.link.name << " " << printf_string("%.1f", g.link.bytes_per_s / kGB)
           << " GB/s per direction";
    }
    os << ")\n";
    for (const GroupLine& l : g.lines) {
        std::snprintf(line, sizeof line,
                      "    %-21s %-14s %-5s %9.0f calls %18s elements %10.4f GB sent\n",
                      l.what.c_str(), l.op.c_str(), std::string(dtype_name(l.dtype)).c_str(),
                      l.calls, fmt_count(l.elements).c_str(), l.sent_bytes / kGB);
        os << line;
    }
    os << "    sent " << printf_string("%.4f", g.sent_bytes / kGB) << " GB";
    if (g.seconds > 0) {
        os << ": " << fmt_duration(g.seconds);
        const double compute =
            e.parallel.compute_seconds > 0 ? e.parallel.compute_seconds : e.step_seconds;
        if (compute > 0)
            os << " (" << printf_string("%.0f", 100 * g.seconds / compute)
               << "% of the compute step)";
    } else {
        os << " (no link known: no time)";
    }
    os << "\n";
}

nlohmann::json group_json(const GroupTraffic& g) {
    using nlohmann::json;
    json lines = json::array();
    for (const GroupLine& l : g.lines) {
        lines.push_back(traffic_line_json(l.what, l.op, l.dtype, l.calls, l.elements, l.sent_bytes,
                                          l.received_bytes));
    }
    const bool timed = g.link.bytes_per_s > 0;
    return {{"group", g.group},
            {"ranks", g.ranks},
            {"link", timed ? json(g.link.name) : json(nullptr)},
            {"link_bytes_per_s", timed ? json(g.link.bytes_per_s) : json(nullptr)},
            {"collectives", lines},
            {"sent_bytes", g.sent_bytes},
            {"received_bytes", g.received_bytes},
            {"seconds", timed ? json(g.seconds) : json(nullptr)}};
}

}  // namespace

std::string format_parallel(const EstimateInputs& in, const Estimate& e) {
    if (in.tp * in.pp == 1) return "";
    const Estimate::Parallel& par = e.parallel;
    const ParallelLayout& p = par.layout;
    std::ostringstream os;
    os << "\n3D parallelism (Megatron-LM): TP=" << p.tp << " x PP=" << p.pp << " (" << schedule(p)
       << ")" << (p.sp ? ", sequence parallel" : "") << ", DP=" << p.dp
       << " replicas; M=" << p.micro_batches << " micro-batches per step\n";
    for (std::size_t i = 0; i < par.stages.size(); ++i) {
        const Estimate::StageSummary& st = par.stages[i];
        os << "  " << stage_name(p, st.stage) << ": " << st.layers << " layers, "
           << printf_string("%g", st.in_flight)
           << (st.in_flight == 1 ? " micro-batch" : " micro-batches") << " in flight, "
           << fmt_count(st.params) << " parameters: " << fmt_bytes(st.gpu.total())
           << (static_cast<int>(i) == par.shown ? "  <- the memory rows above" : "") << "\n";
    }
    if (p.pp > 1) {
        os << "  pipeline bubble (P - 1) / (V M) = " << p.pp - 1 << " / (" << p.vpp << " x "
           << p.micro_batches << ") = " << printf_string("%.1f", 100 * par.bubble_fraction)
           << "% of the compute step";
        if (par.bubble_seconds > 0) os << ": " << fmt_duration(par.bubble_seconds);
        os << "\n";
    }
    if (!par.traffic.tensor.lines.empty() || !par.traffic.pipeline.lines.empty()) {
        os << "model-parallel communication per step per GPU of that stage\n";
        text_group(os, par.traffic.tensor, e);
        text_group(os, par.traffic.pipeline, e);
    }
    return os.str();
}

nlohmann::json parallel_json(const EstimateInputs& in, const Estimate& e) {
    using nlohmann::json;
    if (in.tp * in.pp == 1) return nullptr;
    const Estimate::Parallel& par = e.parallel;
    const ParallelLayout& p = par.layout;
    json stages = json::array();
    for (const Estimate::StageSummary& st : par.stages) {
        stages.push_back({{"stage", st.stage},
                          {"layers", st.layers},
                          {"in_flight_micro_batches", st.in_flight},
                          {"params", st.params},
                          {"memory", memory_bytes_json(st.gpu)}});
    }
    json groups = json::array();
    for (const GroupTraffic* g : {&par.traffic.tensor, &par.traffic.pipeline}) {
        if (!g->lines.empty()) groups.push_back(group_json(*g));
    }
    return {{"tp", p.tp},
            {"pp", p.pp},
            {"vpp", p.vpp},
            {"dp", p.dp},
            {"sequence_parallel", p.sp},
            {"micro_batches", p.micro_batches},
            {"schedule", p.pp == 1   ? "none"
                         : p.vpp > 1 ? "interleaved"
                                     : "1f1b"},
            {"stages", stages},
            {"shown_stage", par.stages[static_cast<std::size_t>(par.shown)].stage},
            {"bubble_fraction", par.bubble_fraction},
            {"groups", groups}};
}

std::string explain_parallel(const EstimateInputs& in, const Estimate& e) {
    if (in.tp * in.pp == 1) return "";
    const Estimate::Parallel& par = e.parallel;
    const ParallelLayout& p = par.layout;
    const Estimate::StageSummary& st = par.stages[static_cast<std::size_t>(par.shown)];
    std::ostringstream os;
    os << "\n8. 3D parallelism (Megatron-LM: Shoeybi et al. 2019, Narayanan et al. 2021, "
          "Korthikanti et "
          "al. 2022)\n"
       << "   GPUs = T x P x DP = " << p.tp << " x " << p.pp << " x " << p.dp << " = " << in.gpus
       << (in.zero > 0 ? "; ZeRO-" + std::to_string(in.zero) + " shards the states over the DP = " +
                             std::to_string(p.dp) + " replicas\n"
                       : "; each of the DP = " + std::to_string(p.dp) +
                             " replicas holds its states whole (ZeRO-0)\n")
       << "   a tensor-parallel rank holds NH / T heads and d_ff / T hidden units of every layer, "
          "a vocabulary\n"
       << "     shard (the vocabulary padded to a multiple of 128 T), the norms and row-parallel "
          "biases whole\n"
       << "   " << stage_name(p, st.stage) << ": " << st.layers << " of L = " << p.layers
       << " layers (" << (p.layers % p.pp == 0 ? "L / P" : "ceil(L / P): P does not divide L")
       << "): " << fmt_count(st.params) << " parameters per GPU\n"
       << "   activations per layer per GPU (Korthikanti et al. 2022, Table 2; p = 2, h = d_model, "
          "a heads):\n"
       << "     "
       << (p.sp ? "with sequence parallelism  s*b*h*34/t + 5*a*s^2*b/t"
                : "tensor parallel            s*b*h*(10 + 24/t) + 5*a*s^2*b/t")
       << "  (selective: no score term; full: s*b*h*2" << (p.sp ? "/t" : "") << ")\n"
       << "     = " << printf_string("%.4f", e.act_closed_form_layer_bytes / kGB)
       << " GB per layer (the generalized form, "
       << "section 4)\n"
       << "   micro-batches in flight on the stage: " << printf_string("%g", st.in_flight)
       << (p.vpp == 1 ? "  (1F1B: min(P - stage, M))\n"
                      : "  (interleaved: min(M V, 2 (P - stage - 1) + (V - 1) P + 1) chunks / V)\n")
       << "     activations = in flight x (layers x per layer [+ embedding output]) [+ output "
          "layer] = "
       << printf_string("%.3f", e.act_closed_form_bytes / kGB) << " GB (closed form), "
       << printf_string("%.3f", e.act_detailed_bytes / kGB) << " GB (op plan of one rank)\n";
    if (p.pp > 1) {
        os << "   pipeline bubble = (P - 1) / (V M) = " << p.pp - 1 << " / (" << p.vpp << " * "
           << p.micro_batches << ") = " << printf_string("%.4f", par.bubble_fraction)
           << " of the ideal step (Narayanan et al. 2021, sec. 2.2), idle time added to the step\n";
    }
    os << "   tensor group, per layer per micro-batch, of B T C elements: "
       << (p.sp ? "all-gather + reduce-scatter before and after attention and MLP, the same\n"
                  "     backward, and the sequence shard gathered again for the weight gradients "
                  "(6 AG + 4 RS)"
                : "an all-reduce after attention and after the MLP,\n     and two in the backward "
                  "(4 AR)")
       << (in.checkpointing == Checkpointing::full ? "; full recomputation replays the forward's"
                                                   : "")
       << "\n   pipeline group: one send of B T C" << (p.sp ? " / T" : "")
       << " elements per micro-batch and chunk, forward and backward\n"
       << "   links: ranks are ordered TP, then DP, then PP: a TP group is T consecutive GPUs, a "
          "DP group spans\n"
       << "     T DP, pipeline neighbours are T DP apart; a group inside a node uses its NVLink, "
          "else the network\n";
    return os.str();
}

}  // namespace napkin
