// napkin train: trains a GPT on the CPU or CUDA engine, one progress line per step, and writes
// RUN_DIR/report.json with the estimator's prediction for this exact run beside what was
// measured. Flag names follow napkin estimate where they mean the same.
//
// train() is four steps: validate the flags into the run's options (cli/train_flags.cpp),
// set up the trainer, the profiler and the prediction, run the step loop, and write the report
// (profiler/run_report.h) with the closing lines (cli/train_report.h).
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/train_checkpoint.h"
#include "cli/train_flags.h"
#include "cli/train_out_dir.h"
#include "cli/train_parallel.h"
#include "cli/train_prediction.h"
#include "cli/train_profile.h"
#include "cli/train_profiler.h"
#include "cli/train_report.h"
#include "cli/train_signal.h"
#include "core/check.h"
#include "core/comm/comm.h"
#include "core/durable_file.h"
#include "core/engine/anomaly.h"
#include "core/engine/checkpoint.h"
#include "core/engine/engine_device.h"
#include "core/engine/trainer.h"
#include "core/engine/weights_import.h"
#include "estimator/estimate.h"
#include "estimator/hardware.h"
#include "kernels/matmul.h"
#include "kernels/stream.h"
#include "profiler/run_report.h"

namespace napkin::cli {

namespace {

// ---- Set up: the trainer, the steps it trains, the machine's peak, the prediction ---------

// --init-from: the weights go into the model before the ZeRO engine shards it; `report` gets
// what the import cost.
std::function<void(Gpt&)> init_weights(const TrainFlags& f, const RunSetup& run,
                                       std::optional<profiler::InitReport>& report) {
    if (f.init_from.empty()) return {};
    if (!f.resume.empty()) {
        throw UsageError("--init-from: a resumed run restores its weights from the checkpoint");
    }
    return [&report, &f, strategy = run.load_strategy](Gpt& model) {
        const ImportReport ir = import_weights(f.init_from, model, strategy);
        report = profiler::InitReport{f.init_from,
                                      ir.format,
                                      f.load_strategy,
                                      ir.tensors,
                                      ir.bytes_read,
                                      ir.seconds,
                                      ir.peak_rss_increase_bytes,
                                      ir.peak_rss_reset};
    };
}

// The steps this process trains, [first, last): from the checkpoint's (0 for a new run) to
// --stop-after; a signal may end the run earlier.
struct StepRange {
    int first = 0, last = 0;
};

// After the trainer is built: the import's and the resume's lines, and the steps to train
// (none, first == last, when a finished run's report was all that was missing).
// The profiled window is clamped to the run; a window that misses every step of this process
// would write no trace at all: refused.
StepRange start_steps(const TrainFlags& f, RunSetup& run, Trainer& trainer, Communicator& comm,
                      const std::optional<profiler::InitReport>& init) {
    if (init) {
        std::printf("init: %s (%s, %lld tensors, %.1f MB in %.2f s, %s, peak RSS +%.1f MB%s)\n",
                    init->path.c_str(), init->format.c_str(), static_cast<long long>(init->tensors),
                    static_cast<double>(init->bytes_read) / 1e6, init->seconds,
                    init->strategy.c_str(),
                    static_cast<double>(init->peak_rss_increase_bytes) / 1e6,
                    init->peak_rss_reset ? "" : ", upper bound");
    }
    const int steps = run.options.steps;
    if (!f.resume.empty()) {
        load_resume_source(run.resume, trainer);
        const ResumeSource& r = run.resume;
        const std::string from = r.manifest ? r.manifest->dir.string() : r.file.string();
        std::printf("resumed %s at step %d of %d\n", from.c_str(), trainer.steps_done(), steps);
    }
    const StepRange range{trainer.steps_done(),
                          f.stop_after > 0 ? std::min(steps, f.stop_after) : steps};
    if (range.first >= steps) {
        // Killed between the final checkpoint and its report: the report waits beside it. Under
        // MPI the kill may fall between the ranks' renames, so one rank's report waits while
        // another's is out: the ranks decide together, and the run is whole again if any wrote.
        const std::filesystem::path report = run.out_dir / "report.json";
        const bool wrote = publish_pending_report(report);
        double any_wrote = wrote ? 1.0 : 0.0;
        if (run.parallel) comm.all_reduce(&any_wrote, 1, "the finished run's reports");
        if (any_wrote > 0) {
            std::printf("the run already finished its %d steps; %s its report %s\n", steps,
                        wrote ? "wrote" : "had already written", report.c_str());
            return {steps, steps};
        }
        throw UsageError("--resume: the run already finished its " + std::to_string(steps) +
                         " steps");
    }
    if (range.last <= range.first) {
        throw UsageError("--stop-after " + std::to_string(f.stop_after) +
                         ": the run is already at step " + std::to_string(range.first));
    }
    ProfileSteps& p = run.profile;
    if (p.any() && (p.first > range.last || p.last <= range.first)) {
        throw UsageError("--profile " + f.profile + ": this run trains steps " +
                         std::to_string(range.first + 1) + "-" + std::to_string(range.last));
    }
    p.last = std::min(p.last, steps);
    return range;
}

// The dtype a recipe's GEMMs run in, for the datasheet peak MFU is quoted against.
DType gemm_dtype(Precision p) {
    switch (p) {
        case Precision::bf16_amp:
        case Precision::bf16:
            return DType::bf16;
        case Precision::fp16_amp:
            return DType::f16;
        case Precision::fp8_amp:
            return DType::f8e4m3;
        default:
            return DType::f32;
    }
}

// MFU's denominator and the roofline: a GPU's datasheet, or this CPU's sgemm (and its stream
// copy when the run is profiled, the only user of the bandwidth).
MachinePeak machine_peak(const TrainOptions& o, Trainer& trainer, bool profiled) {
    MachinePeak peak;
    if (trainer.device() != nullptr) {
        peak.gpu = gpu_for_device_name(trainer.device()->name());
        if (peak.gpu == nullptr) {
            std::printf("  %s: not in the hardware table; MFU is against this CPU's sgemm peak\n",
                        trainer.device()->name().c_str());
        }
    }
    if (peak.gpu != nullptr) {
        peak.flops_per_s = peak.gpu->peak_tflops(gemm_dtype(o.plan.precision)) * 1e12;
        peak.bytes_per_s = peak.gpu->bandwidth_tbs * 1e12;
        peak.source = std::string(peak.gpu->name) + " datasheet, " +
                      std::string(dtype_name(gemm_dtype(o.plan.precision))) + " dense";
    } else {
        peak.flops_per_s = cpu::sgemm_peak_flops();
        peak.bytes_per_s = profiled ? cpu::stream_copy_bandwidth() : 0.0;
        peak.source = "this CPU's sgemm, measured at start";
    }
    return peak;
}

// NAPKIN_ATTENTION_CANDIDATES on a CUDA run with flash attention: the candidates the backend
// puts in place of its bf16 flash attention (it refuses a bad list, or a build without them, at
// the first call), for the header and report.json, so that such a run is never taken for the
// engine's own kernels.
std::optional<std::string> attention_candidates(const TrainOptions& o) {
    const char* list = std::getenv("NAPKIN_ATTENTION_CANDIDATES");
    if (o.device != DeviceKind::cuda || o.plan.attention != AttentionImpl::flash || list == nullptr)
        return std::nullopt;
    return std::string(list);
}

// The run's opening lines: the model and recipe, the machine's peak, the adapters, the ranks.
void print_header(const TrainOptions& o, Trainer& trainer, const MachinePeak& peak,
                  const Estimate& pred, bool parallel, const std::string& cuda_graph_off) {
    std::printf("napkin train: %s (%s params), %s, %s, B=%lld T=%lld G=%d, %d steps on %s\n",
                o.model.name.c_str(), std::to_string(count_params(o.model).total).c_str(),
                std::string(enum_name(kPrecisionNames, o.plan.precision)).c_str(),
                std::string(enum_name(kOptimizerNames, o.plan.optimizer)).c_str(),
                static_cast<long long>(o.plan.micro_batch), static_cast<long long>(o.plan.seq_len),
                o.grad_accum, o.steps, trainer.data().describe().c_str());
    if (peak.gpu != nullptr) {
        std::printf("  cuda: %s, datasheet peak %.1f TFLOP/s (%s); MFU below is against it\n",
                    trainer.device()->name().c_str(), peak.flops_per_s / 1e12,
                    std::string(peak.gpu->name).c_str());
    } else {
        std::printf("  cpu: measured sgemm peak %.1f GFLOP/s; MFU below is against it\n",
                    peak.flops_per_s / 1e9);
    }
    if (o.device == DeviceKind::cuda) {
        if (o.cuda_graph) {
            std::printf(
                "  cuda graphs: on, each micro-batch and the optimizer captured at step 2 "
                "(one graph per batch slot, one for the optimizer)\n");
        } else {
            std::printf("  cuda graphs: off (%s)\n", cuda_graph_off.c_str());
        }
        if (const auto list = attention_candidates(o))
            std::printf(
                "  attention: sweep candidates in place of the engine's bf16 flash attention "
                "(NAPKIN_ATTENTION_CANDIDATES=%s)\n",
                list->c_str());
    }
    if (o.plan.finetune != Finetune::full) {
        std::int64_t trainable = 0, frozen = 0;
        for (const ParamSlot& p : trainer.model().params())
            (p.trainable ? trainable : frozen) += p.numel;
        std::printf(
            "  %s: rank %lld, alpha %g (scale %g); %lld adapter params trained, %lld frozen%s\n",
            std::string(enum_name(kFinetuneNames, o.plan.finetune)).c_str(),
            static_cast<long long>(o.plan.lora_rank), static_cast<double>(o.plan.lora_alpha),
            static_cast<double>(o.plan.lora_alpha) / static_cast<double>(o.plan.lora_rank),
            static_cast<long long>(trainable), static_cast<long long>(frozen),
            o.plan.finetune == Finetune::qlora ? " (block linears in NF4)" : "");
    }
    if (parallel) print_parallel_summary(trainer, pred);
}

// A run that does not continue this folder's own checkpoint moves an earlier run's aside, with
// its report, trace and memory snapshot, before its first step (docs/CHECKPOINTS.md, "A new run
// in an old folder"): killed before its first save, it leaves nothing that --resume would take
// for its own. The other ranks wait, so that none saves into the folder before rank 0 has moved
// it.
void claim_run_dir(const TrainFlags& f, const RunSetup& run, Communicator& comm) {
    if (comm.rank() == 0 && (f.resume.empty() || !continues_folder(run.resume, run.run_dir))) {
        const std::string note = set_aside_earlier_run(run.run_dir);
        if (!note.empty()) {
            std::printf("%s\n", note.c_str());
            std::fflush(stdout);
        }
    }
    if (run.parallel) comm.barrier();
}

// A step that would run for hours even at the machine's peak (an absurd --grad-accum: 10^9
// micro-batches is days on any machine) is warned about on one line, once the stop handler is in
// place: the run goes on, and Ctrl-C stops it within a micro-batch.
void warn_long_steps(const TrainOptions& o, const Estimate& pred, const MachinePeak& peak) {
    constexpr double kLongStepSeconds = 3600;
    const double seconds = pred.hardware_flops_per_token * pred.tokens_per_step / peak.flops_per_s;
    if (!(seconds > kLongStepSeconds)) return;
    std::fprintf(stderr,
                 "napkin: warning: --grad-accum %d: one step is %.3g tokens, at least %.3g hours "
                 "at this machine's peak; Ctrl-C stops it between micro-batches\n",
                 o.grad_accum, pred.tokens_per_step, seconds / 3600);
    std::fflush(stderr);
}

// ---- The step loop -------------------------------------------------------------------------

// What the loop reads and updates besides the trainer.
struct StepLoop {
    const TrainFlags& flags;
    const RunSetup& run;
    Trainer& trainer;
    TrainProfiler& profiler;
    const MachinePeak& peak;
    StepRange steps;         // last is lowered when a signal stops the run
    std::string checkpoint;  // the last one written
    std::optional<StopOnSignal>
        stop;                        // Ctrl-C: stop after the step, writing what --stop-after would
    std::optional<Anomaly> anomaly;  // --detect-anomaly stopped the run in step steps.last
    bool diverged = false;           // the gradients of step steps.last were not finite
    bool stopped_by_the_engine() const { return anomaly || diverged; }
};

// The progress line of one step: memory by category in MB, current/peak where they differ
// within a step.
void print_step(int s, const StepRecord& r, int steps, double peak, double current_total_bytes) {
    auto cur = [&](MemCategory c) {
        return static_cast<double>(r.current_bytes[static_cast<std::size_t>(c)]) / 1e6;
    };
    auto pk = [&](MemCategory c) {
        return static_cast<double>(r.peak_bytes[static_cast<std::size_t>(c)]) / 1e6;
    };
    const double flops_per_s = r.model_flops / r.seconds;
    std::printf(
        "step %4d/%d | loss %.4f | lr %.2e | %7.0f tok/s | %6.2f GFLOP/s MFU %4.1f%% | MB params "
        "%.1f "
        "master %.1f grads %.1f opt %.1f act %.1f/%.1f tmp %.1f/%.1f total %.1f/%.1f | %.0f ms%s\n",
        s + 1, steps, static_cast<double>(r.loss), static_cast<double>(r.lr), r.tokens / r.seconds,
        flops_per_s / 1e9, 100 * flops_per_s / peak, cur(MemCategory::parameters),
        cur(MemCategory::master_weights), cur(MemCategory::gradients),
        cur(MemCategory::optimizer_state), cur(MemCategory::activations),
        pk(MemCategory::activations), cur(MemCategory::temporaries), pk(MemCategory::temporaries),
        current_total_bytes / 1e6, static_cast<double>(r.peak_total_bytes) / 1e6, r.seconds * 1e3,
        r.skipped ? " (skipped: fp16 overflow)" : "");
    std::fflush(stdout);
}

StepTotals run_steps(StepLoop& loop, Communicator& comm) {
    Trainer& trainer = loop.trainer;
    const bool on_gpu = trainer.device() != nullptr;
    StepTotals totals;
    if (on_gpu) totals.device_baseline = totals.device_peak = trainer.device()->memory_use();
    for (int s = loop.steps.first; s < loop.steps.last; ++s) {
        if (loop.stop && loop.stop->requested()) {
            loop.steps.last = s;
            break;
        }
        inject_test_fault(comm.rank(), s);
        loop.profiler.before_step(s);
        StepRecord r;
        try {
            r = trainer.step();
        } catch (const StepAbandoned&) {  // stopped between micro-batches: as before the step
            loop.steps.last = s;
            break;
        } catch (const AnomalyFound& e) {  // the trace keeps the step up to the op, marked
            loop.profiler.write_step(s);
            loop.anomaly = e.anomaly();
            loop.steps.last = s;
            break;
        } catch (const GradientsNotFinite&) {  // the step made no update; the trace keeps it
            loop.profiler.write_step(s);
            loop.diverged = true;
            loop.steps.last = s;
            break;
        }
        loop.profiler.after_step(s, loop.steps.last);
        if (!loop.flags.quiet) {
            print_step(s, r, loop.run.options.steps, loop.peak.flops_per_s,
                       static_cast<double>(trainer.allocator().current_total_bytes()));
        }
        totals.add(r, loop.peak.flops_per_s, on_gpu, loop.run.parallel);
        if (on_gpu) {
            const EngineDevice::MemoryUse m = trainer.device()->memory_use();
            totals.device_peak->used_bytes = std::max(totals.device_peak->used_bytes, m.used_bytes);
            loop.profiler.record_device_memory(s, m);
        }
        loop.profiler.write_step(s);
        const int save_every = loop.flags.save_every;
        if (save_every > 0 && (s + 1) % save_every == 0 && s + 1 < loop.steps.last) {
            loop.checkpoint = save_run_checkpoint(loop.run.run_dir, trainer, loop.run.parallel);
        }
    }
    if (loop.steps.last == loop.run.options.steps) inject_test_fault(comm.rank(), loop.steps.last);
    // Interrupted before its first step: nothing to report or resume.
    if (totals.steps.empty() && !loop.stopped_by_the_engine()) {
        throw Interrupted("interrupted before the first step; nothing written",
                          loop.stop ? loop.stop->signal() : SIGINT);
    }
    return totals;
}

// ---- Report --------------------------------------------------------------------------------

// An anomaly in the first step: no rates (0, not 0/0), the peaks of the step that stopped.
void no_step_measured(profiler::Measurement& m, Trainer& trainer) {
    m.seconds = m.tokens_per_s = m.model_flops_per_s = m.mfu = 0;
    m.hardware_flops_per_s = m.hfu = 0.0;
    for (std::size_t c = 0; c < kMemCategoryCount; ++c)
        m.peak_bytes[c] = trainer.allocator().peak_bytes(static_cast<MemCategory>(c));
    m.peak_total_bytes = trainer.allocator().peak_total_bytes();
}

// report.json's every section, for the run as it ends.
profiler::RunReport build_report(StepLoop& loop, const StepTotals& totals, const EstimateInputs& ei,
                                 const Estimate& pred,
                                 const std::optional<profiler::InitReport>& init,
                                 const std::optional<ChosenProfile>& given_profile,
                                 const std::filesystem::path& file) {
    Trainer& trainer = loop.trainer;
    profiler::RunReport report;
    report.model = loop.run.options.model;
    report.run = run_options_report(loop.run.options, trainer, loop.steps.first, loop.checkpoint);
    if (loop.run.options.device == DeviceKind::cuda) {
        report.run.cuda_graph = loop.run.options.cuda_graph;
        if (!loop.run.options.cuda_graph) report.run.cuda_graph_off = loop.run.cuda_graph_off;
        report.run.attention_candidates = attention_candidates(loop.run.options);
    }
    report.init = init;
    report.predicted = prediction_report(loop.run.options, ei, pred);
    report.measured = measurement_report(loop.run.options, totals, trainer, loop.peak);
    // After the measurement: without a profile, a CPU's stream bandwidth is measured for the
    // prediction (128 MiB), which must not count in the run's peak RSS.
    report.predicted.time =
        predict_run_time(loop.run.options, ei, given_profile, trainer, loop.peak);
    report.steps = run_history(file, totals.steps);  // a resumed run keeps its earlier steps
    report.profile = loop.profiler.report();  // per-op and per-kernel time against the roofline
    if (loop.run.parallel) report.communication = communication_report(trainer, pred, totals.steps);
    report.anomaly = loop.anomaly;
    if (loop.diverged) report.diverged = profiler::DivergedReport{loop.steps.last};
    if (totals.steps.empty()) no_step_measured(report.measured, trainer);
    return report;
}

// Runs `write`, keeping the first exception in `failed` instead of letting it end the run.
template <class F>
void keep_first_failure(std::exception_ptr& failed, F&& write) {
    try {
        write();
    } catch (...) {
        if (!failed) failed = std::current_exception();
    }
}

// The kept failure, once the final checkpoint `saved` is written: its one line, then what the
// run kept all the same.
[[noreturn]] void throw_kept_failure(const std::exception_ptr& failed, const std::string& saved,
                                     bool reported) {
    std::string what = "an unknown exception";
    try {
        std::rethrow_exception(failed);
    } catch (const std::exception& e) {
        what = e.what();
    } catch (...) {
    }
    const std::string kept =
        reported ? "the run's report and checkpoint are" : "the run's checkpoint is";
    throw InputError(what + "; " + kept + " written all the same (" + saved + ")" +
                     (reported ? "" : ", its report.json is not"));
}

// Writes the trace and memory snapshot, report.json and the final checkpoint; prints the closing
// lines. Interrupted, when a signal stopped the run, once everything is written; AnomalyFound,
// when --detect-anomaly did, and GradientsNotFinite's InputError, when a step's gradients were
// not finite, after the report (and no checkpoint). The steps' work outlives what
// fails in writing about it: an exception from the trace or the report (a full disk, a string
// JSON cannot hold) is kept while the rest is written, the final checkpoint included, then thrown
// with what was written all the same. Only a failed checkpoint loses the steps since the last.
void finish_run(StepLoop& loop, const StepTotals& totals, const EstimateInputs& ei,
                const Estimate& pred, const std::optional<profiler::InitReport>& init,
                const std::optional<ChosenProfile>& given_profile) {
    Trainer& trainer = loop.trainer;
    const bool parallel = loop.run.parallel;
    std::exception_ptr failed;  // the first exception of the trace's or the report's writing
    keep_first_failure(failed, [&] {
        loop.profiler.stop_collecting();
        inject_end_fault("trace");
        loop.profiler.close();
    });
    // After an anomaly or non-finite gradients the state is the one that produced them: no
    // checkpoint of it (an earlier --save-every one stays).
    if (!loop.stopped_by_the_engine())
        loop.checkpoint = run_checkpoint_path(loop.run.run_dir, trainer.steps_done(), parallel);
    const std::filesystem::path file = loop.run.out_dir / "report.json";
    if (loop.stopped_by_the_engine()) {
        if (failed) std::rethrow_exception(failed);
        write_file_durably(file, profiler::run_report_text(build_report(
                                     loop, totals, ei, pred, init, given_profile, file)));
        if (loop.anomaly) throw AnomalyFound(*loop.anomaly);  // cli/main.cpp: its line, exit 3
        // Every rank stops in this step; none exits before all have written their reports (the
        // launcher ends the others when the first exits with an error).
        if (parallel) trainer.comm()->barrier();
        const int before = loop.steps.last;  // a resumed run's report keeps its earlier steps
        throw GradientsNotFinite(before, "; " + file.string() + " keeps the " +
                                             std::to_string(before) +
                                             (before == 1 ? " step" : " steps") +
                                             " before it (--detect-anomaly, in one process, "
                                             "names the op that made the first NaN or inf)");
    }
    // Two phases around the final checkpoint (cli/train_report.h): a kill between them leaves
    // the report for --resume to publish.
    std::optional<profiler::RunReport> report;
    const std::filesystem::path pending = pending_report_path(file);
    bool reported = false;
    keep_first_failure(failed, [&] {
        report = build_report(loop, totals, ei, pred, init, given_profile, file);
        inject_end_fault("report");
        write_file_durably(pending, profiler::run_report_text(*report));
        reported = true;
    });
    std::string saved;
    try {
        saved = save_run_checkpoint(loop.run.run_dir, trainer, parallel);
    } catch (...) {  // a full disk: no report of a checkpoint that is not there
        std::error_code ec;
        std::filesystem::remove(pending, ec);
        if (failed) std::rethrow_exception(failed);
        throw;
    }
    NAPKIN_ASSERT(saved == loop.checkpoint, "the report names the checkpoint written");
    if (reported) publish_pending_report(file);
    if (failed) throw_kept_failure(failed, saved, reported);

    print_run_summary(*report, totals, pred, loop.steps.last, file);
    loop.profiler.print_summary();
    if (trainer.cuda_graphs_captured() > 0) {  // what scripts/gpu_session.sh graph reads
        std::printf(
            "  cuda graphs: %d captured; device memory the driver took for them: %.1f MB "
            "(cudaMemGetInfo before each capture and after its instantiation)\n",
            trainer.cuda_graphs_captured(),
            static_cast<double>(trainer.cuda_graph_driver_bytes()) / 1e6);
    }
    // A stop asked for once the last step was trained stops nothing: the run is whole (exit 0),
    // and --resume would only say that it finished.
    if (loop.stop && loop.stop->requested() && loop.steps.last < loop.run.options.steps) {
        std::fflush(stdout);
        throw Interrupted("interrupted after step " + std::to_string(loop.steps.last) + " of " +
                              std::to_string(loop.run.options.steps) +
                              "; continue with: napkin train --resume " + loop.run.run_dir.string(),
                          loop.stop->signal());
    }
}

void train(const TrainFlags& f, const CLI::App& cmd, Communicator& comm, std::string& oom_hint) {
    RunSetup run = validate(f, cmd, comm);
    oom_hint = out_of_memory_hint(run.options, comm.world_size());
    run.out_dir = rank_out_dir(run.run_dir, comm);
    if (!f.force) check_host_memory(run.options, comm.world_size(), launch_env().local_size);
    const OutDir out_dir_guard(run.out_dir);  // removed again if the run fails before writing to it

    std::optional<profiler::InitReport> init;
    Trainer trainer(run.options, &comm, run.parallel ? build_id() : std::string(),
                    init_weights(f, run, init));
    if (!f.force) check_device_memory(run.options, comm.world_size(), trainer);
    const StepRange steps = start_steps(f, run, trainer, comm, init);
    if (steps.first == steps.last) return;  // a finished run's report was all that was missing
    TrainProfiler profiler(trainer, run.profile, run.out_dir);
    const MachinePeak peak = machine_peak(run.options, trainer, profiler.on());
    profiler.set_roofline({peak.flops_per_s, peak.bytes_per_s});
    // The estimator's prediction for exactly this run (one "GPU": this process). A profile
    // given for the performance model's step time is read and checked now, before any step.
    const EstimateInputs ei = prediction_inputs(run.options, comm.world_size(),
                                                trainer.device() != nullptr, peak.flops_per_s);
    const Estimate pred = Estimator{}.run(ei);
    const std::optional<ChosenProfile> given_profile =
        f.device_profile.empty() ? std::nullopt
                                 : time_profile(f.device_profile, f.profile_force, trainer, peak);
    print_header(run.options, trainer, peak, pred, run.parallel, run.cuda_graph_off);
    claim_run_dir(f, run, comm);

    StepLoop loop{f,
                  run,
                  trainer,
                  profiler,
                  peak,
                  steps,
                  run.parallel ? std::string("none") : (run.run_dir / kCheckpointFileName).string(),
                  {},
                  {},
                  false};
    if (!run.parallel) {
        loop.stop.emplace();
        trainer.set_stop_check([&stop = *loop.stop] { return stop.requested(); });
    }
    warn_long_steps(run.options, pred, peak);
    const std::string repeats = data_repeat_warning(
        run.options, comm.world_size(), steps.last - steps.first, trainer.data().tokens());
    if (!repeats.empty() && comm.rank() == 0) std::fprintf(stderr, "%s\n", repeats.c_str());
    const StepTotals totals = run_steps(loop, comm);
    finish_run(loop, totals, ei, pred, init, given_profile);
}

void run_train(const TrainFlags& f, const CLI::App& cmd, Communicator& comm) {
    std::string oom_hint;  // set as soon as the run's options are known
    try {
        train(f, cmd, comm, oom_hint);
    } catch (const OutOfMemory& e) {
        throw OutOfMemory(e.what() + oom_hint);
    }
}

// The model, the data and the recipe: what a resumed run takes from its checkpoint instead.
void add_recipe_options(CLI::App& cmd, TrainFlags& f) {
    cmd.add_option("--model", f.model, "Preset (napkin estimate --list-models)")
        ->capture_default_str();
    cmd.add_option("--config", f.config,
                   "Model config JSON (napkin format or Hugging Face gpt2/llama)");
    cmd.add_option("--data", f.data,
                   "Training data: llm.c .bin tokens, or any file as bytes (default: synthetic)");
    cmd.add_option("--steps", f.steps, "Optimizer steps")->capture_default_str();
    cmd.add_option("--micro-batch", f.micro_batch, "Micro-batch B")->capture_default_str();
    cmd.add_option("--seq-len", f.seq_len, "Sequence length T")->capture_default_str();
    cmd.add_option("--grad-accum", f.grad_accum, "Gradient accumulation steps G")
        ->capture_default_str();
    cmd.add_option("--precision", f.precision, "fp32|fp16-amp|bf16-amp|bf16|fp8-amp")
        ->capture_default_str();
    cmd.add_option("--optimizer", f.optimizer, "sgd|momentum|adagrad|rmsprop|adam|adamw|adamw-8bit")
        ->capture_default_str();
    cmd.add_option("--checkpointing", f.checkpointing, "none|full|selective")
        ->capture_default_str();
    cmd.add_option("--attention", f.attention, "naive|flash")->capture_default_str();
    cmd.add_option("--loss-chunk", f.loss_chunk,
                   "Rows of fp32 logits the LM head and loss hold at once (0: all B x T): more "
                   "rows, fewer and larger GEMMs for more temporary memory (napkin estimate "
                   "--loss-chunk predicts both)")
        ->capture_default_str();
    cmd.add_option("--finetune", f.finetune,
                   "full|lora|qlora: train every parameter, or freeze the model and train LoRA "
                   "adapters on every block linear (qlora: the frozen linears in NF4); usually "
                   "with --init-from")
        ->capture_default_str();
    cmd.add_option("--lora-rank", f.lora_rank, "Adapter rank r (--finetune lora|qlora)")
        ->capture_default_str();
    cmd.add_option("--lora-alpha", f.lora_alpha,
                   "Adapter scale alpha: the adapters' output is scaled by alpha / r (default: r, "
                   "a scale of 1)");
    cmd.add_option("--fp8-amax-history", f.fp8_amax_history,
                   "fp8-amp's scaling: each cast's scale from the largest |x| of the same tensor "
                   "in the last N steps (delayed scaling, one pass per cast; the first step "
                   "scales from the tensor itself); 0: from the tensor itself every time "
                   "(current scaling, one more pass). Under --zero or a launcher the ranks' "
                   "amaxes are reduced to their maximum each step (one small all-reduce)")
        ->capture_default_str();
    cmd.add_option("--dropout", f.dropout,
                   "Dropout probability on the embeddings, attention probabilities and residual "
                   "branches (GPT-2's; default: the model config's, 0 for the presets)");
    cmd.add_option("--lr", f.lr, "Peak learning rate (warmup, then cosine to 10%)")
        ->capture_default_str();
    cmd.add_option("--warmup", f.warmup, "Warmup steps")->capture_default_str();
    cmd.add_option("--weight-decay", f.weight_decay, "Weight decay on matrices")
        ->capture_default_str();
    cmd.add_option("--grad-clip", f.grad_clip, "Clip the global gradient norm (0: off)")
        ->capture_default_str();
    cmd.add_option("--seed", f.seed, "Seed for initialization and the synthetic corpus")
        ->capture_default_str()
        ->check(non_negative_integer());
}

// Where the run writes, what it starts from, how far it goes, and how its ranks work.
void add_run_options(CLI::App& cmd, TrainFlags& f) {
    cmd.add_option("--out", f.out, "Run folder for report.json")->capture_default_str();
    cmd.add_option("--device", f.device, "cpu|cuda|auto")->capture_default_str();
    cmd.add_option("--save-every", f.save_every,
                   "Also checkpoint every N steps (RUN_DIR/checkpoint.safetensors, or with data "
                   "parallelism RUN_DIR/checkpoints/step-N/, is always written at the end)")
        ->capture_default_str();
    cmd.add_option("--init-from", f.init_from,
                   "Start from pretrained weights: an llm.c checkpoint (gpt2_124M.bin), a Hugging "
                   "Face GPT-2 model.safetensors, or an earlier napkin run's "
                   "RUN_DIR/checkpoint.safetensors; the model shape comes from the file unless "
                   "--model is given");
    cmd.add_option("--load-strategy", f.load_strategy,
                   "How --init-from reads the file: read-all|sequential|mmap (its peak RSS is "
                   "reported)")
        ->capture_default_str();
    cmd.add_option("--profile", f.profile,
                   "off|all|steps:N-M: write RUN_DIR/trace.json (Perfetto / chrome://tracing) of "
                   "those steps, and memory.json")
        ->capture_default_str();
    cmd.add_option(
        "--device-profile", f.device_profile,
        "Device profile for report.json's predicted step time (a JSON file, docs/FORMATS.md; "
        "default: the one shipped for this device, else its measured ceilings)");
    cmd.add_flag("--profile-force", f.profile_force,
                 "Use a --device-profile measured on another device anyway");
    cmd.add_option("--stop-after", f.stop_after,
                   "Stop after step N of the run and checkpoint it (resume later with --resume)");
    cmd.add_option("--resume", f.resume,
                   "Continue the run in RUN_DIR from its checkpoint, with its own options "
                   "(bitwise identical); or from a checkpoint file (napkin ckpt consolidate's, any "
                   "world size and stage)");
    cmd.add_flag("--quiet", f.quiet, "No per-step lines");
    cmd.add_flag("--force", f.force,
                 "Train even when the predicted memory and its margin exceed the memory "
                 "available (the check a CPU run makes before it allocates)");
    cmd.add_flag("--detect-anomaly", f.detect_anomaly,
                 "Check every op's outputs and gradients for NaN/inf as the step runs; at the "
                 "first one stop with a line naming the step, op, tensor and shape (exit 3), "
                 "and keep report.json's \"anomaly\". Costs one read of each tensor written "
                 "(bench/anomaly_bench: a few % of a CPU step); under fp16-amp the backward is "
                 "left to the loss scaler");
    cmd.add_option("--zero", f.zero,
                   "Data parallelism (docs/ZERO.md): ZeRO stage 0 (DDP) | 1 | 2 | 3 (FSDP); ranks "
                   "come from the launcher: mpirun -n N napkin train --zero S ... (N ranks x "
                   "--grad-accum G = one rank x G N)")
        ->capture_default_str();
    cmd.add_option("--overlap", f.overlap,
                   "auto|on|off: start each unit's gradient collective as its backward ends and "
                   "prefetch ZeRO-3's parameter gathers, overlapping communication with "
                   "computation (the same results bit for bit); auto: on with GPUs (NCCL), off "
                   "with CPU ranks (MPI)")
        ->capture_default_str();
    cmd.add_option("--fusion", f.fusion,
                   "on|off: on the GPU with 16-bit storage, run the MLP's GELU in its GEMMs' "
                   "cuBLASLt epilogues (forward GELU_AUX, backward DGELU with the fc's bias "
                   "gradient) and the linears' bias gradients in their weight-gradient GEMMs "
                   "(BGRADB); off: the separate kernels, for comparing traces (docs/ENGINE.md)")
        ->capture_default_str();
    cmd.add_option("--cuda-graph", f.cuda_graph,
                   "auto|on|off: capture each micro-batch's forward and backward into a CUDA "
                   "graph (one per batch slot), and the optimizer's passes into one more, at the "
                   "second step and launch them as one each from then on (the same results bit "
                   "for bit: the update reads its learning rate and bias corrections from device "
                   "memory); "
                   "auto: on where the capture holds (--device cuda, one process, no "
                   "--detect-anomaly, --paged-optimizer, --dropout or fp16-amp); on: refuses the "
                   "others; --profile attributes each graph-launched kernel to its op "
                   "(docs/CUDA.md)")
        ->capture_default_str();
    cmd.add_option("--offload", f.offload,
                   "none|optimizer: keep the fp32 master copy and optimizer state of each rank's "
                   "shard in host memory and step it there (ZeRO-Offload; --device cuda, --zero "
                   "1-3, a mixed-precision recipe)")
        ->capture_default_str();
    cmd.add_flag("--paged-optimizer", f.paged_optimizer,
                 "Keep the optimizer state in CUDA managed memory preferred on the host, "
                 "prefetched to the GPU for the update and back after it (QLoRA's paged "
                 "optimizer; --device cuda, no --zero 1-3 or --offload)");
    cmd.add_option("--comm-timeout", f.comm_timeout,
                   "Seconds one collective may wait for the other ranks before the job ends with "
                   "an error naming it (a rank stuck or gone); 0: wait forever. Only under a "
                   "launcher")
        ->capture_default_str();
}

}  // namespace

void add_train_command(CLI::App& app) {
    auto f = std::make_shared<TrainFlags>();
    CLI::App* cmd =
        app.add_subcommand("train",
                           "Train a GPT on the CPU or a CUDA GPU (--device) with measured "
                           "memory and FLOPs (RUN_DIR/report.json)");
    cmd->footer("With no arguments: the tiny preset on the built-in synthetic corpus, 200 steps.");
    add_recipe_options(*cmd, *f);
    add_run_options(*cmd, *f);
    cmd->callback(
        [f, cmd] { run_with_ranks([&](Communicator& comm) { run_train(*f, *cmd, comm); }); });
}

}  // namespace napkin::cli
