// napkin train: trains a GPT on the CPU engine, one progress line per step, and writes
// RUN_DIR/report.json with the estimator's prediction for this exact run beside what was
// measured. Flag names follow napkin estimate where they mean the same.
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/train_checkpoint.h"
#include "cli/train_out_dir.h"
#include "cli/train_parallel.h"
#include "cli/train_prediction.h"
#include "cli/train_profile.h"
#include "cli/train_profiler.h"
#include "cli/train_report.h"
#include "cli/train_signal.h"
#include "core/check.h"
#include "core/config_json.h"
#include "core/device.h"
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

struct TrainFlags {
    std::string model = "tiny", config, data, out = "runs/latest", device = "auto";
    int steps = 200, grad_accum = 1, warmup = 10;
    std::int64_t micro_batch = 8, seq_len = 64;
    std::string precision = "fp32", optimizer = "adamw", checkpointing = "none",
                attention = "flash";
    float lr = 3e-3f, weight_decay = 0.1f, grad_clip = 1.0f;
    std::uint64_t seed = 1337;
    int save_every = 0;
    int stop_after = 0;
    std::string init_from, load_strategy = "sequential";
    std::string profile = "off";
    std::string resume;
    bool quiet = false;
    int zero = 0;
    double comm_timeout = 600;  // seconds; 0: wait forever
    std::string overlap = "auto";
    std::string offload = "none";
    std::string finetune = "full";
    double dropout = -1;          // < 0: the model config's
    std::int64_t lora_rank = 64;  // the QLoRA paper's, as napkin estimate's
    float lora_alpha = 0;         // 0: the rank (a scale of 1)
};

// Writes `text` to `path` through a temporary file and a rename: never half-written.
void write_atomically(const std::filesystem::path& path, const std::string& text) {
    const std::filesystem::path tmp = path.string() + ".tmp";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f) throw InputError(tmp.string() + ": cannot write");
        f << text;
        f.flush();
        if (!f) throw InputError(tmp.string() + ": write failed");
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) throw InputError(path.string() + ": cannot rename into place (" + ec.message() + ")");
}

// --finetune lora|qlora and their adapter flags.
void finetune_from_flags(const TrainFlags& f, const CLI::App& cmd, TrainOptions& o) {
    o.plan.finetune = parse_enum(kFinetuneNames, f.finetune, "--finetune");
    if (o.plan.finetune == Finetune::full) {
        for (const char* flag : {"--lora-rank", "--lora-alpha"}) {
            if (cmd.count(flag) > 0)
                throw UsageError(std::string(flag) + ": needs --finetune lora or qlora");
        }
        return;
    }
    if (f.lora_rank <= 0) {
        throw UsageError("--lora-rank: must be a positive integer (got " +
                         std::to_string(f.lora_rank) + ")");
    }
    if (cmd.count("--lora-alpha") > 0 && (!(f.lora_alpha > 0) || !std::isfinite(f.lora_alpha)))
        throw UsageError("--lora-alpha: must be a positive number");
    o.plan.lora_rank = f.lora_rank;
    o.plan.lora_alpha =
        cmd.count("--lora-alpha") > 0 ? f.lora_alpha : static_cast<float>(f.lora_rank);
}

TrainOptions options_from_flags(const TrainFlags& f, const CLI::App& cmd) {
    TrainOptions o;
    if (cmd.count("--config") > 0) {
        if (cmd.count("--model") > 0) throw UsageError("give one model: --model or --config");
        o.model = load_model_config(f.config);
    } else if (!f.init_from.empty() && cmd.count("--model") == 0) {
        o.model = config_from_weights(f.init_from);  // the shape the weights have
    } else {
        o.model = preset_or_throw(f.model);
    }
    if (f.micro_batch <= 0) throw UsageError("--micro-batch: must be a positive integer");
    if (f.seq_len <= 0) throw UsageError("--seq-len: must be a positive integer");
    // Numbers the optimizer would turn into NaN weights, or quietly read as "off", are refused.
    if (!(f.lr > 0) || !std::isfinite(f.lr)) throw UsageError("--lr: must be a positive number");
    if (f.warmup < 0) throw UsageError("--warmup: must be 0 or a positive number of steps");
    if (!(f.weight_decay >= 0) || !std::isfinite(f.weight_decay)) {
        throw UsageError("--weight-decay: must be 0 (off) or a positive number");
    }
    if (!(f.grad_clip >= 0) || !std::isfinite(f.grad_clip)) {
        throw UsageError("--grad-clip: must be 0 (off) or a positive norm");
    }
    o.plan.micro_batch = f.micro_batch;
    o.plan.seq_len = f.seq_len;
    o.plan.precision = parse_enum(kPrecisionNames, f.precision, "--precision");
    o.plan.optimizer = parse_enum(kOptimizerNames, f.optimizer, "--optimizer");
    o.plan.checkpointing = parse_enum(kCheckpointingNames, f.checkpointing, "--checkpointing");
    o.plan.attention = parse_enum(kAttentionNames, f.attention, "--attention");
    if (cmd.count("--dropout") > 0) {
        if (!(f.dropout >= 0.0 && f.dropout < 1.0))
            throw UsageError("--dropout: must be in [0, 1) (got " + std::to_string(f.dropout) +
                             ")");
        o.model.dropout = f.dropout;
    }
    finetune_from_flags(f, cmd, o);
    o.steps = f.steps;
    o.grad_accum = f.grad_accum;
    o.seed = f.seed;
    o.data = f.data;
    o.optimizer.lr = f.lr;
    o.optimizer.warmup_steps = std::min(f.warmup, f.steps);
    o.optimizer.total_steps = f.steps;
    o.optimizer.weight_decay = f.weight_decay;
    o.optimizer.grad_clip = f.grad_clip;
    return o;
}

// ---- Validate: the flags, and the run they describe ---------------------------------------

// What validation decided: the run's options, where it continues from and where it writes.
// Data parallelism (docs/ZERO.md): rank r > 0 writes its own report under RUN_DIR/rank<r>, and
// checkpoints are sharded (RUN_DIR/checkpoints/).
struct RunSetup {
    TrainOptions options;
    ResumeSource resume;  // empty for a new run
    bool parallel = false;
    LoadStrategy load_strategy = LoadStrategy::sequential;
    ProfileSteps profile;
    std::filesystem::path run_dir, out_dir;
};

// The flags that stand on their own. --comm-timeout is checked and set first: the start-up
// handshake is already a collective.
void check_flags(const TrainFlags& f, const CLI::App& cmd, Communicator& comm) {
    if (!(f.comm_timeout >= 0) || !std::isfinite(f.comm_timeout)) {
        throw UsageError("--comm-timeout: must be 0 (wait forever) or a number of seconds > 0");
    }
    comm.set_timeout_s(f.comm_timeout);
    if (f.device != "cpu" && f.device != "auto" && f.device != "cuda") {
        throw UsageError("--device: unknown value '" + f.device + "' (expected cpu|cuda|auto)");
    }
    if (f.save_every < 0) throw UsageError("--save-every: must be 0 (only at the end) or positive");
    // An empty path (a script's unset variable) would read as the flag left out: --resume "" would
    // start a new run over the folder's checkpoint, --data "" train on the synthetic corpus.
    for (const auto& [flag, value] :
         {std::pair<const char*, const std::string&>{"--resume", f.resume},
          {"--data", f.data},
          {"--init-from", f.init_from}}) {
        if (cmd.count(flag) > 0 && value.empty())
            throw UsageError(std::string(flag) + ": the path is empty");
    }
    if (cmd.count("--stop-after") > 0 && f.stop_after <= 0) {
        throw UsageError("--stop-after: must be a positive step number (got " +
                         std::to_string(f.stop_after) + ")");
    }
}

// A resumed run takes every option from its checkpoint, so it continues bit for bit.
TrainOptions resumed_options(const TrainFlags& f, const CLI::App& cmd, Communicator& comm,
                             RunSetup& run) {
    for (const char* flag :
         {"--model",      "--config",    "--data",         "--micro-batch",   "--seq-len",
          "--grad-accum", "--precision", "--optimizer",    "--checkpointing", "--attention",
          "--lr",         "--warmup",    "--weight-decay", "--grad-clip",     "--seed",
          "--steps",      "--finetune",  "--lora-rank",    "--lora-alpha",    "--dropout"}) {
        if (cmd.count(flag) > 0) {
            throw UsageError(std::string("--resume continues a run with its own options; drop ") +
                             flag);
        }
    }
    run.resume = find_resume_source(f.resume, run.parallel, comm, f.zero);
    return run.resume.options;
}

// --device auto: the GPU when the CUDA engine can run here, else the CPU; one line on what was
// found. Checkpoints are the same file on either device, so a run saved on one resumes on the
// other. Data parallelism runs on either, on CUDA one rank per GPU over NCCL (docs/ZERO.md):
// auto takes the GPUs only when this node has one for each of its ranks, so every rank of the
// node decides alike.
DeviceKind pick_device(const TrainFlags& f, Communicator& comm) {
    if (f.device == "auto") {
        const DeviceInfo& d = probe_devices();
        std::string reason;
        const bool gpu = cuda_engine_api(&reason) != nullptr;
        const int node_ranks = launch_env().local_size;
        std::string cpu_only;
        if (node_ranks > d.cuda_devices) {
            cpu_only = std::to_string(node_ranks) + " ranks on this node and " +
                       std::to_string(d.cuda_devices) + " GPU" + (d.cuda_devices == 1 ? "" : "s");
        }
        std::printf("%s%s\n", device_summary(d).c_str(),
                    !gpu                ? ""
                    : !cpu_only.empty() ? ("; " + cpu_only + ": using the CPU").c_str()
                                        : "; training on the GPU");
        return gpu && cpu_only.empty() ? DeviceKind::cuda : DeviceKind::cpu;
    }
    if (f.device == "cuda" && comm.local_rank() > 0) {
        const int gpus = probe_devices().cuda_devices;
        if (gpus > 0 && comm.local_rank() >= gpus) {
            throw UsageError("--device cuda: local rank " + std::to_string(comm.local_rank()) +
                             " has no GPU (" + std::to_string(gpus) +
                             " visible); start at most one rank per GPU on each node");
        }
    }
    return f.device == "cuda" ? DeviceKind::cuda : DeviceKind::cpu;
}

// --zero, --overlap and --offload: like the device, a resumed run may change the last two.
void parallel_from_flags(const TrainFlags& f, TrainOptions& o) {
    o.zero = f.zero;
    if (f.overlap != "auto" && f.overlap != "on" && f.overlap != "off") {
        throw UsageError("--overlap: unknown value '" + f.overlap + "' (expected auto|on|off)");
    }
    // auto: on GPUs, where NCCL's stream runs a collective beside the kernels; off on CPU ranks,
    // whose MPI copies need the rank's own core (docs/ZERO.md measures both on the CPU).
    o.overlap = f.overlap == "on" || (f.overlap == "auto" && o.device == DeviceKind::cuda);
    if (f.offload == "optimizer+params") {
        throw UsageError(
            "--offload optimizer+params: napkin train offloads the optimizer only "
            "(none|optimizer); "
            "napkin estimate models the parameters too");
    }
    if (f.offload != "none" && f.offload != "optimizer") {
        throw UsageError("--offload: unknown value '" + f.offload + "' (expected none|optimizer)");
    }
    o.offload_optimizer = f.offload == "optimizer";
}

RunSetup validate(const TrainFlags& f, const CLI::App& cmd, Communicator& comm) {
    check_flags(f, cmd, comm);
    RunSetup run;
    run.load_strategy = parse_enum(kLoadStrategyNames, f.load_strategy, "--load-strategy");
    if (cmd.count("--load-strategy") > 0 && f.init_from.empty()) {
        throw UsageError("--load-strategy: applies to --init-from only");
    }
    run.profile = parse_profile(f.profile);
    run.parallel = comm.world_size() > 1 || f.zero > 0;
    run.options =
        f.resume.empty() ? options_from_flags(f, cmd) : resumed_options(f, cmd, comm, run);
    run.options.device = pick_device(f, comm);
    parallel_from_flags(f, run.options);
    run.run_dir = !f.resume.empty() && cmd.count("--out") == 0 ? run.resume.run_dir
                                                               : std::filesystem::path(f.out);
    return run;
}

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

// After the trainer is built: the import's and the resume's lines, and the steps to train.
// The profiled window is clamped to the run; a window that misses every step of this process
// would write no trace at all: refused.
StepRange start_steps(const TrainFlags& f, RunSetup& run, Trainer& trainer,
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

// The hardware table's entry (estimator/hardware.h) for the GPU cudaGetDeviceProperties names
// ("NVIDIA H100 80GB HBM3"), or null when it is not there.
const GpuSpec* gpu_spec_for(const std::string& name) {
    auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
    if (has("H100")) return find_gpu(has("PCIe") ? "h100-pcie" : "h100-sxm");
    if (has("H200")) return find_gpu("h200");
    if (has("A100")) return find_gpu(has("40GB") ? "a100-40gb" : "a100-80gb");
    if (has("B200")) return find_gpu("b200");
    return nullptr;
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
        peak.gpu = gpu_spec_for(trainer.device()->name());
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

// The run's opening lines: the model and recipe, the machine's peak, the adapters, the ranks.
void print_header(const TrainOptions& o, Trainer& trainer, const MachinePeak& peak,
                  const Estimate& pred, bool parallel) {
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
        stop;  // Ctrl-C: stop after the step, writing what --stop-after would
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
        const StepRecord r = trainer.step();
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
    if (totals.steps.empty()) {  // interrupted before its first step: nothing to report or resume
        throw Interrupted("interrupted before the first step; nothing written",
                          loop.stop ? loop.stop->signal() : SIGINT);
    }
    return totals;
}

// ---- Report --------------------------------------------------------------------------------

// Writes the final checkpoint, the trace and memory snapshot, and report.json; prints the
// closing lines. Interrupted, when a signal stopped the run, once everything is written.
void finish_run(StepLoop& loop, const StepTotals& totals, const EstimateInputs& ei,
                const Estimate& pred, const std::optional<profiler::InitReport>& init) {
    Trainer& trainer = loop.trainer;
    loop.profiler.stop_collecting();
    loop.checkpoint = save_run_checkpoint(loop.run.run_dir, trainer, loop.run.parallel);
    loop.profiler.close();

    profiler::RunReport report;
    report.model = loop.run.options.model;
    report.run = run_options_report(loop.run.options, trainer, loop.steps.first, loop.checkpoint);
    report.init = init;
    report.predicted = prediction_report(loop.run.options, ei, pred);
    report.measured = measurement_report(loop.run.options, totals, trainer, loop.peak);
    report.steps = totals.steps;
    report.profile = loop.profiler.report();  // per-op and per-kernel time against the roofline
    if (loop.run.parallel) report.communication = communication_report(trainer, pred, totals.steps);
    const std::filesystem::path file = loop.run.out_dir / "report.json";
    write_atomically(file, profiler::run_report_text(report));

    print_run_summary(report, totals, pred, loop.steps.last, file);
    loop.profiler.print_summary();
    if (loop.stop && loop.stop->requested()) {
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
    check_host_memory(run.options, comm.world_size(), launch_env().local_size);
    const OutDir out_dir_guard(run.out_dir);  // removed again if the run fails before writing to it

    std::optional<profiler::InitReport> init;
    Trainer trainer(run.options, &comm, run.parallel ? build_id() : std::string(),
                    init_weights(f, run, init));
    const StepRange steps = start_steps(f, run, trainer, init);
    TrainProfiler profiler(trainer, run.profile, run.out_dir);
    const MachinePeak peak = machine_peak(run.options, trainer, profiler.on());
    profiler.set_roofline({peak.flops_per_s, peak.bytes_per_s});
    // The estimator's prediction for exactly this run (one "GPU": this process).
    const EstimateInputs ei = prediction_inputs(run.options, comm.world_size(),
                                                trainer.device() != nullptr, peak.flops_per_s);
    const Estimate pred = Estimator{}.run(ei);
    print_header(run.options, trainer, peak, pred, run.parallel);
    claim_run_dir(f, run, comm);

    StepLoop loop{f,
                  run,
                  trainer,
                  profiler,
                  peak,
                  steps,
                  run.parallel ? std::string("none") : (run.run_dir / kCheckpointFileName).string(),
                  {}};
    if (!run.parallel) loop.stop.emplace();
    const StepTotals totals = run_steps(loop, comm);
    finish_run(loop, totals, ei, pred, init);
}

void run_train(const TrainFlags& f, const CLI::App& cmd, Communicator& comm) {
    std::string oom_hint;  // set as soon as the run's options are known
    try {
        train(f, cmd, comm, oom_hint);
    } catch (const OutOfMemory& e) {
        throw OutOfMemory(e.what() + oom_hint);
    }
}

}  // namespace

void add_train_command(CLI::App& app) {
    auto f = std::make_shared<TrainFlags>();
    CLI::App* cmd =
        app.add_subcommand("train",
                           "Train a GPT on the CPU or a CUDA GPU (--device) with measured "
                           "memory and FLOPs (RUN_DIR/report.json)");
    cmd->footer("With no arguments: the tiny preset on the built-in synthetic corpus, 200 steps.");
    cmd->add_option("--model", f->model, "Preset (napkin estimate --list-models)")
        ->capture_default_str();
    cmd->add_option("--config", f->config,
                    "Model config JSON (napkin format or Hugging Face gpt2/llama)");
    cmd->add_option("--data", f->data,
                    "Training data: llm.c .bin tokens, or any file as bytes (default: synthetic)");
    cmd->add_option("--steps", f->steps, "Optimizer steps")->capture_default_str();
    cmd->add_option("--micro-batch", f->micro_batch, "Micro-batch B")->capture_default_str();
    cmd->add_option("--seq-len", f->seq_len, "Sequence length T")->capture_default_str();
    cmd->add_option("--grad-accum", f->grad_accum, "Gradient accumulation steps G")
        ->capture_default_str();
    cmd->add_option("--precision", f->precision, "fp32|fp16-amp|bf16-amp|bf16|fp8-amp")
        ->capture_default_str();
    cmd->add_option("--optimizer", f->optimizer,
                    "sgd|momentum|adagrad|rmsprop|adam|adamw|adamw-8bit")
        ->capture_default_str();
    cmd->add_option("--checkpointing", f->checkpointing, "none|full|selective")
        ->capture_default_str();
    cmd->add_option("--attention", f->attention, "naive|flash")->capture_default_str();
    cmd->add_option(
           "--finetune", f->finetune,
           "full|lora|qlora: train every parameter, or freeze the model and train LoRA adapters "
           "on every block linear (qlora: the frozen linears in NF4); usually with --init-from")
        ->capture_default_str();
    cmd->add_option("--lora-rank", f->lora_rank, "Adapter rank r (--finetune lora|qlora)")
        ->capture_default_str();
    cmd->add_option("--lora-alpha", f->lora_alpha,
                    "Adapter scale alpha: the adapters' output is scaled by alpha / r (default: r, "
                    "a scale of 1)");
    cmd->add_option(
        "--dropout", f->dropout,
        "Dropout probability on the embeddings, attention probabilities and residual branches "
        "(GPT-2's; default: the model config's, 0 for the presets)");
    cmd->add_option("--lr", f->lr, "Peak learning rate (warmup, then cosine to 10%)")
        ->capture_default_str();
    cmd->add_option("--warmup", f->warmup, "Warmup steps")->capture_default_str();
    cmd->add_option("--weight-decay", f->weight_decay, "Weight decay on matrices")
        ->capture_default_str();
    cmd->add_option("--grad-clip", f->grad_clip, "Clip the global gradient norm (0: off)")
        ->capture_default_str();
    cmd->add_option("--seed", f->seed, "Seed for initialization and the synthetic corpus")
        ->capture_default_str()
        ->check(non_negative_integer());
    cmd->add_option("--out", f->out, "Run folder for report.json")->capture_default_str();
    cmd->add_option("--device", f->device, "cpu|cuda|auto")->capture_default_str();
    cmd->add_option("--save-every", f->save_every,
                    "Also checkpoint every N steps (RUN_DIR/checkpoint.safetensors, or with data "
                    "parallelism "
                    "RUN_DIR/checkpoints/step-N/, is always written at the end)")
        ->capture_default_str();
    cmd->add_option(
        "--init-from", f->init_from,
        "Start from pretrained weights: an llm.c checkpoint (gpt2_124M.bin), a Hugging Face GPT-2 "
        "model.safetensors, or an earlier napkin run's RUN_DIR/checkpoint.safetensors; the model "
        "shape comes from the file unless --model is given");
    cmd->add_option(
           "--load-strategy", f->load_strategy,
           "How --init-from reads the file: read-all|sequential|mmap (its peak RSS is reported)")
        ->capture_default_str();
    cmd->add_option("--profile", f->profile,
                    "off|all|steps:N-M: write RUN_DIR/trace.json (Perfetto / chrome://tracing) of "
                    "those steps, "
                    "and memory.json")
        ->capture_default_str();
    cmd->add_option("--stop-after", f->stop_after,
                    "Stop after step N of the run and checkpoint it (resume later with --resume)");
    cmd->add_option(
        "--resume", f->resume,
        "Continue the run in RUN_DIR from its checkpoint, with its own options (bitwise "
        "identical); "
        "or from a checkpoint file (napkin ckpt consolidate's, any world size and stage)");
    cmd->add_flag("--quiet", f->quiet, "No per-step lines");
    cmd->add_option("--zero", f->zero,
                    "Data parallelism (docs/ZERO.md): ZeRO stage 0 (DDP) | 1 | 2 | 3 (FSDP); ranks "
                    "come from the "
                    "launcher: mpirun -n N napkin train --zero S ... (N ranks x --grad-accum G = "
                    "one rank x G N)")
        ->capture_default_str();
    cmd->add_option("--overlap", f->overlap,
                    "auto|on|off: start each unit's gradient collective as its backward ends and "
                    "prefetch ZeRO-3's "
                    "parameter gathers, overlapping communication with computation (the same "
                    "results bit for "
                    "bit); auto: on with GPUs (NCCL), off with CPU ranks (MPI)")
        ->capture_default_str();
    cmd->add_option("--offload", f->offload,
                    "none|optimizer: keep the fp32 master copy and optimizer state of each rank's "
                    "shard in host "
                    "memory and step it there (ZeRO-Offload; --device cuda, --zero 1-3, a "
                    "mixed-precision recipe)")
        ->capture_default_str();
    cmd->add_option(
           "--comm-timeout", f->comm_timeout,
           "Seconds one collective may wait for the other ranks before the job ends with an error "
           "naming it (a rank stuck or gone); 0: wait forever. Only under a launcher")
        ->capture_default_str();
    cmd->callback(
        [f, cmd] { run_with_ranks([&](Communicator& comm) { run_train(*f, *cmd, comm); }); });
}

}  // namespace napkin::cli
