#include "cli/train_report.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "cli/flag_names.h"
#include "cli/train_parallel.h"
#include "core/check.h"
#include "core/durable_file.h"
#include "profiler/run_folder.h"

namespace napkin::cli {

namespace fs = std::filesystem;

namespace {

std::string mb(double bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f MB", bytes / 1e6);
    return buf;
}

}  // namespace

double peak_rss_bytes() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_maxrss) * 1024.0;  // Linux reports KiB
}

const profiler::StepReport& StepTotals::add(const StepRecord& r, double peak_flops_per_s,
                                            bool on_gpu, bool parallel) {
    seconds += r.seconds;
    tokens += r.tokens;
    model_flops += r.model_flops;
    hardware_flops += r.hardware_flops;
    for (std::size_t c = 0; c < kMemCategoryCount; ++c)
        peaks[c] = std::max(peaks[c], r.peak_bytes[c]);
    peak_total = std::max(peak_total, r.peak_total_bytes);
    paged_to_device_bytes += static_cast<double>(r.paged_to_device_bytes);
    paged_to_host_bytes += static_cast<double>(r.paged_to_host_bytes);
    paged_seconds += r.paged_seconds;
    profiler::StepReport s;
    s.step = r.step;
    s.loss = r.loss;
    s.lr = r.lr;
    s.grad_norm = r.grad_norm;
    s.loss_scale = r.loss_scale;
    s.skipped = r.skipped;
    s.seconds = r.seconds;
    s.tokens_per_s = r.tokens / r.seconds;
    s.mfu = r.model_flops / r.seconds / peak_flops_per_s;
    s.hfu = r.hardware_flops / r.seconds / peak_flops_per_s;
    if (on_gpu) s.device_seconds = r.device_seconds;
    if (parallel) s.comm = step_traffic(r);
    steps.push_back(s);
    return steps.back();
}

profiler::RunOptions run_options_report(const TrainOptions& o, Trainer& trainer, int first_step,
                                        const std::string& checkpoint) {
    profiler::RunOptions r;
    r.steps = o.steps;
    r.micro_batch = o.plan.micro_batch;
    r.seq_len = o.plan.seq_len;
    r.grad_accum = o.grad_accum;
    r.precision = enum_name(kPrecisionNames, o.plan.precision);
    r.optimizer = enum_name(kOptimizerNames, o.plan.optimizer);
    r.checkpointing = enum_name(kCheckpointingNames, o.plan.checkpointing);
    r.attention = enum_name(kAttentionNames, o.plan.attention);
    r.finetune = enum_name(kFinetuneNames, o.plan.finetune);
    if (o.plan.finetune != Finetune::full) {
        r.lora_rank = o.plan.lora_rank;
        r.lora_alpha = o.plan.lora_alpha;
    }
    r.lr = o.optimizer.lr;
    r.seed = o.seed;
    r.first_step = first_step;
    r.checkpoint = checkpoint;
    r.data = trainer.data().describe();
    r.device = trainer.device() != nullptr ? "cuda: " + trainer.device()->name() : "cpu";
    if (o.data.empty()) r.data_entropy_nats = SyntheticCorpus::entropy_nats();
    if (o.offload_optimizer) r.offload = "optimizer";
    if (o.plan.precision == Precision::fp8_amp) r.fp8_amax_history = o.plan.fp8_amax_history;
    r.loss_chunk = o.plan.loss_chunk_rows;
    return r;
}

profiler::Measurement measurement_report(const TrainOptions& o, const StepTotals& totals,
                                         Trainer& trainer, const MachinePeak& peak) {
    profiler::Measurement m;
    // Training keeps no KV cache: its report lists the categories it always did.
    for (std::size_t c = 0; c < kMemCategoryCount; ++c) {
        if (static_cast<MemCategory>(c) != MemCategory::kv_cache) m.peak_bytes[c] = totals.peaks[c];
    }
    m.peak_total_bytes = totals.peak_total;
    m.peak_rss_bytes = peak_rss_bytes();
    m.seconds = totals.seconds;
    m.tokens_per_s = totals.tokens / totals.seconds;
    m.model_flops_per_s = totals.model_flops / totals.seconds;
    m.hardware_flops_per_s = totals.hardware_flops / totals.seconds;
    // sgemm_peak_flops_per_s is kept for the readers of earlier reports, and only where it is
    // one (a CPU run).
    m.peak_flops_per_s = peak.flops_per_s;
    m.peak_source = peak.source;
    if (peak.gpu == nullptr) m.sgemm_peak_flops_per_s = peak.flops_per_s;
    m.mfu = totals.model_flops / totals.seconds / peak.flops_per_s;
    m.hfu = totals.hardware_flops / totals.seconds / peak.flops_per_s;
    if (o.offload_optimizer) {  // the host's share of the model states
        const AccountingAllocator& h = trainer.host_allocator();
        m.host_peak_bytes = {h.peak_bytes(MemCategory::master_weights),
                             h.peak_bytes(MemCategory::gradients),
                             h.peak_bytes(MemCategory::optimizer_state)};
    }
    if (totals.device_peak) {
        m.device_memory = {totals.device_baseline->used_bytes, totals.device_peak->used_bytes,
                           totals.device_peak->total_bytes};
    }
    if (const AccountingAllocator* paged = trainer.paged_allocator()) {  // per step, averaged
        const auto n = static_cast<double>(totals.steps.size());
        m.paged_optimizer = profiler::PagedMeasurement{
            paged->peak_bytes(MemCategory::optimizer_state), totals.paged_to_device_bytes / n,
            totals.paged_to_host_bytes / n, totals.paged_seconds / n};
    }
    return m;
}

void print_run_summary(const profiler::RunReport& report, const StepTotals& totals,
                       const Estimate& predicted, int last_step,
                       const std::filesystem::path& report_file) {
    const profiler::RunOptions& run = report.run;
    const double peak = report.measured.mfu_peak_flops_per_s();
    std::printf(
        "done: steps %d-%d of %d in %.1f s, %.0f tok/s, %.2f GFLOP/s (MFU %.1f%%), loss %.4f -> "
        "%.4f",
        run.first_step + 1, last_step, run.steps, totals.seconds, totals.tokens / totals.seconds,
        totals.model_flops / totals.seconds / 1e9, 100 * totals.model_flops / totals.seconds / peak,
        totals.steps.front().loss, totals.steps.back().loss);
    // ln V: the loss of a uniform prediction over the model's vocabulary, where training starts.
    if (run.data_entropy_nats) {
        std::printf(" (ln V = %.4f, corpus entropy %.4f)",
                    std::log(static_cast<double>(report.model.vocab_size)), *run.data_entropy_nats);
    }
    const auto peak_mb = [&](MemCategory c) {
        return mb(static_cast<double>(totals.peaks[static_cast<std::size_t>(c)]));
    };
    std::printf(
        "\n  memory peaks: parameters %s, gradients %s, optimizer %s, activations %s (predicted "
        "%s), total %s, RSS %s\n",
        peak_mb(MemCategory::parameters).c_str(), peak_mb(MemCategory::gradients).c_str(),
        peak_mb(MemCategory::optimizer_state).c_str(), peak_mb(MemCategory::activations).c_str(),
        mb(predicted.gpu.activations).c_str(), mb(static_cast<double>(totals.peak_total)).c_str(),
        mb(report.measured.peak_rss_bytes).c_str());
    if (const auto& h = report.measured.host_peak_bytes) {
        std::printf(
            "  host memory (offloaded): master %s, gradients %s, optimizer %s (predicted %s)\n",
            mb(static_cast<double>(h->master_weights)).c_str(),
            mb(static_cast<double>(h->gradients)).c_str(),
            mb(static_cast<double>(h->optimizer_state)).c_str(), mb(predicted.cpu.total()).c_str());
    }
    if (const auto& g = report.measured.paged_optimizer) {
        const double predicted_state = predicted.paged ? predicted.paged->state_bytes : 0.0;
        std::printf(
            "  paged optimizer state: %s (predicted %s); page traffic per step %s in, %s out, "
            "%.3f ms\n",
            mb(static_cast<double>(g->state_bytes)).c_str(), mb(predicted_state).c_str(),
            mb(g->to_device_bytes_per_step).c_str(), mb(g->to_host_bytes_per_step).c_str(),
            1e3 * g->traffic_seconds_per_step);
    }
    std::printf("  report: %s, checkpoint: %s\n", report_file.string().c_str(),
                run.checkpoint.c_str());
}

std::vector<profiler::StepReport> run_history(const std::filesystem::path& report_file,
                                              const std::vector<profiler::StepReport>& steps) {
    std::error_code ec;
    if (steps.empty() || !std::filesystem::exists(report_file, ec)) return steps;
    std::vector<profiler::StepReport> history;
    try {
        for (const profiler::StepReport& s : profiler::read_run_report(report_file).steps) {
            if (s.step < steps.front().step) history.push_back(s);
        }
    } catch (const InputError& e) {
        std::fprintf(stderr, "napkin: warning: the earlier steps are left out of the report (%s)\n",
                     message_with_flags(e).c_str());
        return steps;
    }
    history.insert(history.end(), steps.begin(), steps.end());
    return history;
}

fs::path pending_report_path(const fs::path& report_file) {
    fs::path p = report_file;
    p += ".pending";
    return p;
}

bool publish_pending_report(const fs::path& report_file) {
    const fs::path pending = pending_report_path(report_file);
    std::error_code ec;
    if (!fs::is_regular_file(fs::symlink_status(pending, ec))) return false;
    rename_durably(pending, report_file);
    return true;
}

}  // namespace napkin::cli
