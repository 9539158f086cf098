// napkin train: trains a GPT on the CPU engine, one progress line per step, and writes
// RUN_DIR/report.json with the estimator's prediction for this exact run beside what was
// measured. Flag names follow napkin estimate where they mean the same.
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/train_checkpoint.h"
#include "cli/train_out_dir.h"
#include "cli/train_parallel.h"
#include "cli/train_prediction.h"
#include "cli/train_profile.h"
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
#include "profiler/chrome_trace_writer.h"
#include "profiler/cupti_collector.h"
#include "profiler/memory_snapshot.h"
#include "profiler/step_profile.h"

namespace napkin::cli {

namespace {

struct TrainFlags {
    std::string model = "tiny", config, data, out = "runs/latest", device = "auto";
    int steps = 200, grad_accum = 1, warmup = 10;
    std::int64_t micro_batch = 8, seq_len = 64;
    std::string precision = "fp32", optimizer = "adamw", checkpointing = "none", attention = "flash";
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
    double dropout = -1;  // < 0: the model config's
    std::int64_t lora_rank = 64;  // the QLoRA paper's, as napkin estimate's
    float lora_alpha = 0;  // 0: the rank (a scale of 1)
};

std::string mb(double bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f MB", bytes / 1e6);
    return buf;
}

double peak_rss_bytes() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_maxrss) * 1024.0;  // Linux reports KiB
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
        case Precision::bf16: return DType::bf16;
        case Precision::fp16_amp: return DType::f16;
        case Precision::fp8_amp:
            return DType::f8e4m3;
        default: return DType::f32;
    }
}

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
            throw UsageError("--dropout: must be in [0, 1) (got " + std::to_string(f.dropout) + ")");
        o.model.dropout = f.dropout;
    }
    o.plan.finetune = parse_enum(kFinetuneNames, f.finetune, "--finetune");
    if (o.plan.finetune == Finetune::full) {
        for (const char* flag : {"--lora-rank", "--lora-alpha"}) {
            if (cmd.count(flag) > 0) throw UsageError(std::string(flag) + ": needs --finetune lora or qlora");
        }
    } else {
        if (f.lora_rank <= 0) {
            throw UsageError("--lora-rank: must be a positive integer (got " + std::to_string(f.lora_rank) + ")");
        }
        if (cmd.count("--lora-alpha") > 0 && (!(f.lora_alpha > 0) || !std::isfinite(f.lora_alpha)))
            throw UsageError("--lora-alpha: must be a positive number");
        o.plan.lora_rank = f.lora_rank;
        o.plan.lora_alpha = cmd.count("--lora-alpha") > 0 ? f.lora_alpha : static_cast<float>(f.lora_rank);
    }
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

void train(const TrainFlags& f, const CLI::App& cmd, Communicator& comm, std::string& oom_hint);

void run_train(const TrainFlags& f, const CLI::App& cmd, Communicator& comm) {
    std::string oom_hint;  // set as soon as the run's options are known
    try {
        train(f, cmd, comm, oom_hint);
    } catch (const OutOfMemory& e) {
        throw OutOfMemory(e.what() + oom_hint);
    }
}

void train(const TrainFlags& f, const CLI::App& cmd, Communicator& comm, std::string& oom_hint) {
    // Checked first: the start-up handshake is already a collective.
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
    const LoadStrategy strategy =
        parse_enum(kLoadStrategyNames, f.load_strategy, "--load-strategy");
    if (cmd.count("--load-strategy") > 0 && f.init_from.empty()) {
        throw UsageError("--load-strategy: applies to --init-from only");
    }
    ProfileSteps profile_steps = parse_profile(f.profile);

    // A resumed run takes every option from its checkpoint, so it continues bit for bit.
    // Data parallelism (docs/ZERO.md): rank r > 0 writes its own report under RUN_DIR/rank<r>,
    // and checkpoints are sharded (RUN_DIR/checkpoints/).
    const bool parallel = comm.world_size() > 1 || f.zero > 0;
    TrainOptions o;
    ResumeSource resume;
    if (!f.resume.empty()) {
        for (const char* flag : {"--model", "--config", "--data", "--micro-batch", "--seq-len", "--grad-accum",
                                 "--precision", "--optimizer", "--checkpointing", "--attention", "--lr", "--warmup",
                                 "--weight-decay", "--grad-clip", "--seed", "--steps", "--finetune",
                                 "--lora-rank", "--lora-alpha", "--dropout"}) {
            if (cmd.count(flag) > 0) {
                throw UsageError(std::string("--resume continues a run with its own options; drop ") + flag);
            }
        }
        resume = find_resume_source(f.resume, parallel, comm, f.zero);
        o = resume.options;
    } else {
        o = options_from_flags(f, cmd);
    }
    // --device auto: the GPU when the CUDA engine can run here, else the CPU; one line on what
    // was found. Checkpoints are the same file on
    // either device, so a run saved on one resumes on the other. Data parallelism runs on either,
    // on CUDA one rank per GPU over NCCL (docs/ZERO.md): auto takes the GPUs only when this node
    // has one for each of its ranks, so every rank of the node decides alike.
    o.device = f.device == "cuda" ? DeviceKind::cuda : DeviceKind::cpu;
    if (f.device == "auto") {
        const DeviceInfo& d = probe_devices();
        std::string reason;
        const bool gpu = cuda_engine_api(&reason) != nullptr;
        const int node_ranks = launch_env().local_size;
        std::string cpu_only;
        if (node_ranks > d.cuda_devices) {
            cpu_only = std::to_string(node_ranks) + " ranks on this node and " + std::to_string(d.cuda_devices) +
                       " GPU" + (d.cuda_devices == 1 ? "" : "s");
        }
        if (gpu && cpu_only.empty()) o.device = DeviceKind::cuda;
        std::printf("%s%s\n", device_summary(d).c_str(),
                    !gpu                ? ""
                    : !cpu_only.empty() ? ("; " + cpu_only + ": using the CPU").c_str()
                                        : "; training on the GPU");
    } else if (o.device == DeviceKind::cuda && comm.local_rank() > 0) {
        const int gpus = probe_devices().cuda_devices;
        if (gpus > 0 && comm.local_rank() >= gpus) {
            throw UsageError("--device cuda: local rank " + std::to_string(comm.local_rank()) + " has no GPU (" +
                             std::to_string(gpus) + " visible); start at most one rank per GPU on each node");
        }
    }
    o.zero = f.zero;
    if (f.overlap != "auto" && f.overlap != "on" && f.overlap != "off") {
        throw UsageError("--overlap: unknown value '" + f.overlap + "' (expected auto|on|off)");
    }
    // auto: on GPUs, where NCCL's stream runs a collective beside the kernels; off on CPU ranks,
    // whose MPI copies need the rank's own core (docs/ZERO.md measures both on the CPU).
    o.overlap = f.overlap == "on" || (f.overlap == "auto" && o.device == DeviceKind::cuda);
    if (f.offload == "optimizer+params") {
        throw UsageError("--offload optimizer+params: napkin train offloads the optimizer only (none|optimizer); "
                         "napkin estimate models the parameters too");
    }
    if (f.offload != "none" && f.offload != "optimizer") {
        throw UsageError("--offload: unknown value '" + f.offload + "' (expected none|optimizer)");
    }
    o.offload_optimizer = f.offload == "optimizer";  // like --overlap, a resumed run may change it
    oom_hint = out_of_memory_hint(o, comm.world_size());
    const std::filesystem::path run_dir =
        !f.resume.empty() && cmd.count("--out") == 0 ? resume.run_dir : std::filesystem::path(f.out);
    const std::filesystem::path out_dir = rank_out_dir(run_dir, comm);
    check_host_memory(o, comm.world_size(), launch_env().local_size);
    const OutDir out_dir_guard(out_dir);  // removed again if the run fails before writing to it

    // --init-from: the weights go into the model before the ZeRO engine shards it.
    ImportReport ir;
    std::function<void(Gpt&)> init_weights;
    if (!f.init_from.empty()) {
        if (!f.resume.empty()) {
            throw UsageError("--init-from: a resumed run restores its weights from the checkpoint");
        }
        init_weights = [&ir, &f, strategy](Gpt& model) { ir = import_weights(f.init_from, model, strategy); };
    }
    Trainer trainer(o, &comm, parallel ? build_id() : std::string(), init_weights);
    nlohmann::json init = nullptr;
    if (!f.init_from.empty()) {
        std::printf("init: %s (%s, %lld tensors, %.1f MB in %.2f s, %s, peak RSS +%.1f MB%s)\n", f.init_from.c_str(),
                    ir.format.c_str(), static_cast<long long>(ir.tensors), static_cast<double>(ir.bytes_read) / 1e6,
                    ir.seconds, f.load_strategy.c_str(), static_cast<double>(ir.peak_rss_increase_bytes) / 1e6,
                    ir.peak_rss_reset ? "" : ", upper bound");
        init = {{"path", f.init_from},       {"format", ir.format},
                {"strategy", f.load_strategy}, {"tensors", ir.tensors},
                {"bytes_read", ir.bytes_read}, {"seconds", ir.seconds},
                {"peak_rss_increase_bytes", ir.peak_rss_increase_bytes}, {"peak_rss_reset", ir.peak_rss_reset}};
    }
    if (!f.resume.empty()) {
        load_resume_source(resume, trainer);
        const std::string from = resume.manifest ? resume.manifest->dir.string() : resume.file.string();
        std::printf("resumed %s at step %d of %d\n", from.c_str(), trainer.steps_done(), o.steps);
    }
    // The steps this process trains: from the checkpoint's (0 for a new run) to --stop-after.
    const int first_step = trainer.steps_done();
    if (first_step >= o.steps) {
        throw UsageError("--resume: the run already finished its " + std::to_string(o.steps) +
                         " steps");
    }
    int last_step = f.stop_after > 0 ? std::min(o.steps, f.stop_after) : o.steps;
    if (last_step <= first_step) {
        throw UsageError("--stop-after " + std::to_string(f.stop_after) +
                         ": the run is already at step " + std::to_string(first_step));
    }
    // Profiling: a trace of step/forward/backward/layer/op ranges with each op's analytic cost,
    // memory counters, and a memory snapshot (docs/FORMATS.md), of the steps --profile names
    // (counted as the progress lines count them). A range that misses every step of this run
    // would write no trace at all: refused.
    if (profile_steps.any() &&
        (profile_steps.first > last_step || profile_steps.last <= first_step)) {
        throw UsageError("--profile " + f.profile + ": this run trains steps " +
                         std::to_string(first_step + 1) + "-" + std::to_string(last_step));
    }
    profile_steps.last = std::min(profile_steps.last, o.steps);
    const int profile_first = profile_steps.first, profile_last = profile_steps.last;
    std::unique_ptr<profiler::Recorder> recorder;
    std::unique_ptr<profiler::ChromeTraceWriter> trace;
    // The allocator's events feed memory.json and the trace's memory counters only: recorded
    // from the start (so the snapshot's peak is the run's) to the end of the profiled window,
    // and not at all without one (at some thousand events a step they would grow without end).
    for (AccountingAllocator* a : {&trainer.allocator(), &trainer.host_allocator()}) {
        if (profile_steps.any() && a == &trainer.allocator()) continue;  // the host's feed nothing
        a->set_record_events(false);
        a->clear_events();
    }
    if (profile_steps.any()) {
        recorder = std::make_unique<profiler::Recorder>(profiler::Recorder::kDefaultCapacity, trainer.allocator().start());
        trace = std::make_unique<profiler::ChromeTraceWriter>(out_dir / "trace.json");
        if (!trace->ok()) throw InputError(trace->error());
    }
    const std::string precision(enum_name(kPrecisionNames, o.plan.precision));
    const std::string optimizer(enum_name(kOptimizerNames, o.plan.optimizer));
    const bool on_gpu = trainer.device() != nullptr;
    std::string checkpoint_out = parallel ? std::string("none") : (run_dir / kCheckpointFileName).string();
    // MFU's denominator and the roofline of the per-op predictions: on the CPU this process's
    // sgemm rate and stream bandwidth, on a GPU its datasheet peak and bandwidth.
    const GpuSpec* gpu_spec = on_gpu ? gpu_spec_for(trainer.device()->name()) : nullptr;
    if (on_gpu && gpu_spec == nullptr) {
        std::printf("  %s: not in the hardware table; MFU is against this CPU's sgemm peak\n",
                    trainer.device()->name().c_str());
    }
    const double peak = gpu_spec != nullptr ? gpu_spec->peak_tflops(gemm_dtype(o.plan.precision)) * 1e12
                                            : cpu::sgemm_peak_flops();
    const double bandwidth = gpu_spec != nullptr ? gpu_spec->bandwidth_tbs * 1e12
                             : recorder != nullptr ? cpu::stream_copy_bandwidth() : 0.0;
    profiler::StepProfile profile(profiler::Roofline{peak, bandwidth});

    // The estimator's prediction for exactly this run (one "GPU": this process).
    const EstimateInputs ei = prediction_inputs(o, comm.world_size(), on_gpu, peak);
    const Estimate pred = Estimator{}.run(ei);

    std::printf("napkin train: %s (%s params), %s, %s, B=%lld T=%lld G=%d, %d steps on %s\n", o.model.name.c_str(),
                std::to_string(count_params(o.model).total).c_str(), precision.c_str(), optimizer.c_str(),
                static_cast<long long>(o.plan.micro_batch), static_cast<long long>(o.plan.seq_len), o.grad_accum,
                o.steps, trainer.data().describe().c_str());
    if (gpu_spec != nullptr) {
        std::printf("  cuda: %s, datasheet peak %.1f TFLOP/s (%s); MFU below is against it\n",
                    trainer.device()->name().c_str(), peak / 1e12, std::string(gpu_spec->name).c_str());
    } else {
        std::printf("  cpu: measured sgemm peak %.1f GFLOP/s; MFU below is against it\n", peak / 1e9);
    }
    if (o.plan.finetune != Finetune::full) {
        std::int64_t trainable = 0, frozen = 0;
        for (const ParamSlot& p : trainer.model().params()) (p.trainable ? trainable : frozen) += p.numel;
        std::printf("  %s: rank %lld, alpha %g (scale %g); %lld adapter params trained, %lld frozen%s\n",
                    std::string(enum_name(kFinetuneNames, o.plan.finetune)).c_str(),
                    static_cast<long long>(o.plan.lora_rank), static_cast<double>(o.plan.lora_alpha),
                    static_cast<double>(o.plan.lora_alpha) / static_cast<double>(o.plan.lora_rank),
                    static_cast<long long>(trainable), static_cast<long long>(frozen),
                    o.plan.finetune == Finetune::qlora ? " (block linears in NF4)" : "");
    }
    if (parallel) print_parallel_summary(trainer, pred);

    nlohmann::json steps = nlohmann::json::array();
    std::array<std::int64_t, kMemCategoryCount> peaks{};
    std::int64_t peak_total = 0;
    double total_seconds = 0, total_tokens = 0, total_flops = 0, total_hardware_flops = 0;
    // A run that does not continue this folder's own checkpoint moves an earlier run's aside,
    // with its report, trace and memory snapshot, before its first step (docs/CHECKPOINTS.md, "A
    // new run in an old folder"): killed before its first save, it leaves nothing that --resume
    // would take for its own. The other ranks wait, so that none saves into the folder before rank
    // 0 has moved it.
    if (comm.rank() == 0 && (f.resume.empty() || !continues_folder(resume, run_dir))) {
        const std::string note = set_aside_earlier_run(run_dir);
        if (!note.empty()) {
            std::printf("%s\n", note.c_str());
            std::fflush(stdout);
        }
    }
    if (parallel) comm.barrier();
    // On a GPU, the driver's view of the device beside the allocator's: sampled after each step
    // (the peak of it, and a "device memory" counter in the trace; docs/FORMATS.md).
    EngineDevice::MemoryUse device_baseline, device_peak;
    if (on_gpu) device_baseline = device_peak = trainer.device()->memory_use();
    // On a GPU the trace's kernels are the device's own records (CUPTI, through the plugin:
    // profiler/cupti_collector.h), collected over the profiled steps only and flushed after
    // each of them, once the step has synchronized: never inside a timed step.
    std::unique_ptr<profiler::GpuActivitySource> gpu_source;
    std::unique_ptr<profiler::CuptiCollector> gpu_activity;
    nlohmann::json gpu_summary;  // null on the CPU
    // Ctrl-C: the run stops after the step in progress and writes what --stop-after would.
    std::optional<StopOnSignal> stop;
    if (!parallel) stop.emplace();
    for (int s = first_step; s < last_step; ++s) {
        if (stop && stop->requested()) {
            last_step = s;
            break;
        }
        inject_test_fault(comm.rank(), s);
        const bool profiled = recorder != nullptr && s + 1 >= profile_first && s + 1 <= profile_last;
        if (recorder != nullptr) trainer.set_recorder(profiled ? recorder.get() : nullptr);
        if (on_gpu && profiled && gpu_source == nullptr) {
            gpu_source = trainer.device()->activity_source();
            if (gpu_source != nullptr) {
                gpu_activity = std::make_unique<profiler::CuptiCollector>(*recorder, *gpu_source);
                if (!gpu_activity->active()) {
                    std::fprintf(stderr, "napkin: profiler: no GPU activity in the trace (%s); host ranges only\n",
                                 gpu_activity->error().c_str());
                    gpu_summary = {{"error", gpu_activity->error()}};
                    gpu_activity.reset();
                }
            }
        }
        trainer.set_kernel_tagger(profiled ? gpu_activity.get() : nullptr);
        const StepRecord r = trainer.step();
        if (s + 1 == profile_last) trainer.allocator().set_record_events(false);
        if (gpu_activity != nullptr && profiled) {
            if (s + 1 == profile_last || s + 1 == last_step) {
                trainer.set_kernel_tagger(nullptr);
                gpu_activity->finish();
                gpu_summary = gpu_activity->summary();
                gpu_activity.reset();  // disables collection: the steps after run without it
            } else {
                gpu_activity->flush(true);
            }
        }
        total_seconds += r.seconds;
        total_tokens += r.tokens;
        total_flops += r.model_flops;
        for (std::size_t c = 0; c < kMemCategoryCount; ++c) peaks[c] = std::max(peaks[c], r.peak_bytes[c]);
        peak_total = std::max(peak_total, r.peak_total_bytes);
        const double flops_per_s = r.model_flops / r.seconds;
        if (!f.quiet) {
            // Memory by category in MB: current/peak where they differ within a step.
            auto cur = [&](MemCategory c) { return static_cast<double>(r.current_bytes[static_cast<std::size_t>(c)]) / 1e6; };
            auto pk = [&](MemCategory c) { return static_cast<double>(r.peak_bytes[static_cast<std::size_t>(c)]) / 1e6; };
            std::printf("step %4d/%d | loss %.4f | lr %.2e | %7.0f tok/s | %6.2f GFLOP/s MFU %4.1f%% | MB params %.1f "
                        "master %.1f grads %.1f opt %.1f act %.1f/%.1f tmp %.1f/%.1f total %.1f/%.1f | %.0f ms%s\n",
                        s + 1, o.steps, static_cast<double>(r.loss), static_cast<double>(r.lr), r.tokens / r.seconds,
                        flops_per_s / 1e9, 100 * flops_per_s / peak, cur(MemCategory::parameters),
                        cur(MemCategory::master_weights), cur(MemCategory::gradients), cur(MemCategory::optimizer_state),
                        cur(MemCategory::activations), pk(MemCategory::activations), cur(MemCategory::temporaries),
                        pk(MemCategory::temporaries), static_cast<double>(trainer.allocator().current_total_bytes()) / 1e6,
                        static_cast<double>(r.peak_total_bytes) / 1e6, r.seconds * 1e3,
                        r.skipped ? " (skipped: fp16 overflow)" : "");
            std::fflush(stdout);
        }
        steps.push_back({{"step", r.step},
                         {"loss", r.loss},
                         {"lr", r.lr},
                         {"grad_norm", r.grad_norm},
                         {"loss_scale", r.loss_scale},
                         {"skipped", r.skipped},
                         {"seconds", r.seconds},
                         {"tokens_per_s", r.tokens / r.seconds},
                         {"mfu", r.model_flops / r.seconds / peak},
                         {"hfu", r.hardware_flops / r.seconds / peak}});
        if (on_gpu) steps.back()["device_seconds"] = r.device_seconds;
        if (parallel) add_step_communication(steps.back(), r);
        total_hardware_flops += r.hardware_flops;
        if (on_gpu) {
            const EngineDevice::MemoryUse m = trainer.device()->memory_use();
            device_peak.used_bytes = std::max(device_peak.used_bytes, m.used_bytes);
            if (trace != nullptr && s + 1 >= profile_first && s + 1 <= profile_last) {
                recorder->record(profiler::CounterEvent{"device memory", recorder->now_ns(),
                                                        {{"used", static_cast<double>(m.used_bytes)},
                                                         {"total", static_cast<double>(m.total_bytes)}}});
            }
        }
        if (trace != nullptr) {
            std::vector<profiler::Event> events = recorder->take();
            profile.add(events);
            const std::uint64_t before = trace->bytes_written();
            trace->write(events);
            // The second profiled step is a steady one (the first also writes the metadata).
            if (s + 1 == profile_first + 1) {
                const std::string w =
                    large_trace_warning(trace->bytes_written(), trace->bytes_written() - before,
                                        profile_last - (s + 1));
                if (!w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
            }
        }
        if (f.save_every > 0 && (s + 1) % f.save_every == 0 && s + 1 < last_step) {
            checkpoint_out = save_run_checkpoint(run_dir, trainer, parallel);
        }
    }
    if (steps.empty()) {  // interrupted before its first step: nothing to report or resume
        throw Interrupted("interrupted before the first step; nothing written",
                          stop ? stop->signal() : SIGINT);
    }
    if (gpu_activity != nullptr) {  // interrupted inside the profiled window
        trainer.set_kernel_tagger(nullptr);
        gpu_activity->finish();
        gpu_summary = gpu_activity->summary();
        gpu_activity.reset();
    }
    checkpoint_out = save_run_checkpoint(run_dir, trainer, parallel);
    if (trace != nullptr) {
        trainer.set_recorder(nullptr);
        for (const profiler::CounterEvent& c : profiler::memory_counter_events(trainer.allocator().events())) {
            trace->write_counter(c);
        }
        trace->write_tracks(recorder->tracks());
        trace->set_other_data("dropped_events", recorder->dropped());
        if (!gpu_summary.is_null()) trace->set_other_data("gpu_activity", gpu_summary);
        const profiler::WriteResult tr = trace->close();
        if (!tr) throw InputError(tr.error);
        const profiler::WriteResult mr = profiler::write_memory_snapshot(trainer.allocator(), out_dir / "memory.json");
        if (!mr) throw InputError(mr.error);
    }

    const bool adapters = o.plan.finetune != Finetune::full;
    const double frozen_bytes_per_param = o.plan.finetune == Finetune::qlora
                                              ? formulas::kNf4BitsPerParam / 8.0
                                              : pred.bytes_per_param.weights;
    nlohmann::json measured_peaks, predicted;
    for (std::size_t c = 0; c < kMemCategoryCount; ++c) {
        measured_peaks[std::string(enum_name(kMemCategoryNames, static_cast<MemCategory>(c)))] = peaks[c];
    }
    predicted = {{"parameters", pred.gpu.weights},         {"master_weights", pred.gpu.master},
                 {"gradients", pred.gpu.grads},            {"optimizer_state", pred.gpu.optimizer},
                 {"activations", pred.gpu.activations},
                 // ZeRO-3's gathered units are the engine's `communication` category (measured
                 // only, beside the buckets), not its temporaries: the estimator's two units
                 // leave this prediction for it.
                 {"temporaries", pred.gpu.temporaries - pred.temporaries.param_gather},
                 {"model_flops_per_step", pred.model_flops_per_step},
                 {"hardware_flops_per_step", pred.hardware_flops_per_step},
                 // The lectures' closed forms beside the detailed numbers above: 6N + attention
                 // FLOPs per token, bytes per parameter times N, Korthikanti's activations. With
                 // adapters: 4N + 6m FLOPs, and the frozen N at its weight bytes (NF4's 4.127
                 // bits under QLoRA) plus bytes per parameter times the m adapters.
                 {"closed_form",
                  {{"model_flops_per_step",
                    (adapters ? pred.flops_adapters_per_token : pred.flops_6n_per_token) *
                            pred.tokens_per_step +
                        pred.flops_attention_per_token * pred.tokens_per_step},
                   {"model_state_bytes",  // ZeRO paper, figure 1: sharded over the ranks by stage
                    (adapters ? pred.frozen_params * frozen_bytes_per_param : 0.0) +
                        formulas::zero_model_state_bytes(pred.bytes_per_param, pred.trainable_params,
                                                         ei.zero, ei.gpus)},
                   {"bytes_per_param", pred.bytes_per_param.total()},
                   {"activations", pred.act_closed_form_bytes}}}};
    nlohmann::json report = {
        {"schema", "napkin-train-report/1"},
        {"model", model_config_to_json(o.model)},
        {"run",
         {{"steps", o.steps},
          {"micro_batch", o.plan.micro_batch},
          {"seq_len", o.plan.seq_len},
          {"grad_accum", o.grad_accum},
          {"precision", precision},
          {"optimizer", optimizer},
          {"checkpointing", enum_name(kCheckpointingNames, o.plan.checkpointing)},
          {"attention", enum_name(kAttentionNames, o.plan.attention)},
          {"finetune", enum_name(kFinetuneNames, o.plan.finetune)},
          {"lora_rank", o.plan.finetune == Finetune::full ? nlohmann::json(nullptr) : nlohmann::json(o.plan.lora_rank)},
          {"lora_alpha", o.plan.finetune == Finetune::full ? nlohmann::json(nullptr) : nlohmann::json(o.plan.lora_alpha)},
          {"lr", o.optimizer.lr},
          {"seed", o.seed},
          {"first_step", first_step},
          {"checkpoint", checkpoint_out},
          {"data", trainer.data().describe()},
          {"device", on_gpu ? "cuda: " + trainer.device()->name() : std::string("cpu")}}},
        {"init", init},
        {"predicted", predicted},
        {"measured",
         {{"peak_bytes", measured_peaks},
          {"peak_total_bytes", peak_total},
          {"peak_rss_bytes", peak_rss_bytes()},
          {"seconds", total_seconds},
          {"tokens_per_s", total_tokens / total_seconds},
          {"model_flops_per_s", total_flops / total_seconds},
          {"hardware_flops_per_s", total_hardware_flops / total_seconds},
          // MFU's denominator and where it comes from; sgemm_peak_flops_per_s is kept for the
          // readers of earlier reports, and only where it is one (a CPU run).
          {"peak_flops_per_s", peak},
          {"peak_source", gpu_spec != nullptr
                              ? std::string(gpu_spec->name) + " datasheet, " +
                                    std::string(dtype_name(gemm_dtype(o.plan.precision))) + " dense"
                              : std::string("this CPU's sgemm, measured at start")},
          {"mfu", total_flops / total_seconds / peak},
          {"hfu", total_hardware_flops / total_seconds / peak}}},
        {"steps", steps},
    };
    if (o.data.empty()) report["run"]["data_entropy_nats"] = SyntheticCorpus::entropy_nats();
    if (gpu_spec == nullptr) report["measured"]["sgemm_peak_flops_per_s"] = peak;
    if (o.offload_optimizer) {  // the host's share of the model states, predicted and measured
        const AccountingAllocator& h = trainer.host_allocator();
        report["predicted"]["host_memory"] = {{"master_weights", pred.cpu.master},
                                              {"gradients", pred.cpu.grads},
                                              {"optimizer_state", pred.cpu.optimizer}};
        report["measured"]["host_peak_bytes"] = {{"master_weights", h.peak_bytes(MemCategory::master_weights)},
                                                 {"gradients", h.peak_bytes(MemCategory::gradients)},
                                                 {"optimizer_state", h.peak_bytes(MemCategory::optimizer_state)}};
        report["run"]["offload"] = "optimizer";
    }
    if (on_gpu) {  // cudaMemGetInfo: before the first step (context, libraries, model) and at peak
        report["measured"]["device_memory"] = {{"baseline_used_bytes", device_baseline.used_bytes},
                                               {"peak_used_bytes", device_peak.used_bytes},
                                               {"total_bytes", device_peak.total_bytes}};
    }
    // Per-op and per-kernel time against the roofline, from the profiled steps (null when off).
    report["profile"] = recorder != nullptr ? profile.to_json() : nlohmann::json();
    if (!gpu_summary.is_null()) report["profile"]["gpu_activity"] = gpu_summary;
    if (parallel) report["communication"] = communication_report(trainer, pred, steps);
    write_atomically(out_dir / "report.json", report.dump(2) + "\n");

    const double first = steps.front()["loss"].get<double>(), last = steps.back()["loss"].get<double>();
    std::printf("done: steps %d-%d of %d in %.1f s, %.0f tok/s, %.2f GFLOP/s (MFU %.1f%%), loss %.4f -> %.4f",
                first_step + 1, last_step, o.steps,
                total_seconds, total_tokens / total_seconds, total_flops / total_seconds / 1e9,
                100 * total_flops / total_seconds / peak, first, last);
    // ln V: the loss of a uniform prediction over the model's vocabulary, where training starts.
    if (o.data.empty()) {
        std::printf(" (ln V = %.4f, corpus entropy %.4f)",
                    std::log(static_cast<double>(o.model.vocab_size)),
                    SyntheticCorpus::entropy_nats());
    }
    std::printf("\n  memory peaks: parameters %s, gradients %s, optimizer %s, activations %s (predicted %s), total %s, RSS %s\n",
                mb(static_cast<double>(peaks[0])).c_str(), mb(static_cast<double>(peaks[2])).c_str(),
                mb(static_cast<double>(peaks[3])).c_str(), mb(static_cast<double>(peaks[4])).c_str(),
                mb(pred.gpu.activations).c_str(), mb(static_cast<double>(peak_total)).c_str(),
                mb(peak_rss_bytes()).c_str());
    if (o.offload_optimizer) {
        const AccountingAllocator& h = trainer.host_allocator();
        std::printf("  host memory (offloaded): master %s, gradients %s, optimizer %s (predicted %s)\n",
                    mb(static_cast<double>(h.peak_bytes(MemCategory::master_weights))).c_str(),
                    mb(static_cast<double>(h.peak_bytes(MemCategory::gradients))).c_str(),
                    mb(static_cast<double>(h.peak_bytes(MemCategory::optimizer_state))).c_str(),
                    mb(pred.cpu.total()).c_str());
    }
    std::printf("  report: %s, checkpoint: %s\n", (out_dir / "report.json").string().c_str(),
                checkpoint_out.c_str());
    if (recorder != nullptr && !profile.steps().empty()) {
        double lowest = 1.0;
        for (const profiler::StepTiming& st : profile.steps()) lowest = std::min(lowest, st.coverage());
        std::printf("  profile: %zu steps in %s (Perfetto: ui.perfetto.dev), op ranges cover >= %.1f%% of each; "
                    "per-op table: napkin report %s\n",
                    profile.steps().size(), (out_dir / "trace.json").string().c_str(), 100 * lowest,
                    out_dir.string().c_str());
    }
    if (gpu_summary.contains("kernels")) {
        const auto n = [&](const char* key) { return gpu_summary[key].get<unsigned long long>(); };
        std::printf("  gpu activity: %llu kernels (%llu records with the engine's cost), %llu records dropped, "
                    "%llu buffers refused, %llu CUPTI failures, %llu kernels without a launch\n",
                    n("kernels"), n("tagged"), n("dropped_records"), n("buffers_refused"), n("cupti_failures"),
                    n("unmatched_flows"));
    }
    if (stop && stop->requested()) {
        std::fflush(stdout);
        throw Interrupted("interrupted after step " + std::to_string(last_step) + " of " + std::to_string(o.steps) +
                              "; continue with: napkin train --resume " + run_dir.string(),
                          stop->signal());
    }
}

}  // namespace

void add_train_command(CLI::App& app) {
    auto f = std::make_shared<TrainFlags>();
    CLI::App* cmd = app.add_subcommand("train",
                                       "Train a GPT on the CPU or a CUDA GPU (--device) with measured "
                                       "memory and FLOPs (RUN_DIR/report.json)");
    cmd->footer("With no arguments: the tiny preset on the built-in synthetic corpus, 200 steps.");
    cmd->add_option("--model", f->model, "Preset (napkin estimate --list-models)")->capture_default_str();
    cmd->add_option("--config", f->config, "Model config JSON (napkin format or Hugging Face gpt2/llama)");
    cmd->add_option("--data", f->data, "Training data: llm.c .bin tokens, or any file as bytes (default: synthetic)");
    cmd->add_option("--steps", f->steps, "Optimizer steps")->capture_default_str();
    cmd->add_option("--micro-batch", f->micro_batch, "Micro-batch B")->capture_default_str();
    cmd->add_option("--seq-len", f->seq_len, "Sequence length T")->capture_default_str();
    cmd->add_option("--grad-accum", f->grad_accum, "Gradient accumulation steps G")->capture_default_str();
    cmd->add_option("--precision", f->precision, "fp32|fp16-amp|bf16-amp|bf16|fp8-amp")
        ->capture_default_str();
    cmd->add_option("--optimizer", f->optimizer, "sgd|momentum|adagrad|rmsprop|adam|adamw|adamw-8bit")->capture_default_str();
    cmd->add_option("--checkpointing", f->checkpointing, "none|full|selective")->capture_default_str();
    cmd->add_option("--attention", f->attention, "naive|flash")->capture_default_str();
    cmd->add_option("--finetune", f->finetune,
                    "full|lora|qlora: train every parameter, or freeze the model and train LoRA adapters "
                    "on every block linear (qlora: the frozen linears in NF4); usually with --init-from")
        ->capture_default_str();
    cmd->add_option("--lora-rank", f->lora_rank, "Adapter rank r (--finetune lora|qlora)")->capture_default_str();
    cmd->add_option("--lora-alpha", f->lora_alpha,
                    "Adapter scale alpha: the adapters' output is scaled by alpha / r (default: r, a scale of 1)");
    cmd->add_option("--dropout", f->dropout,
                    "Dropout probability on the embeddings, attention probabilities and residual branches "
                    "(GPT-2's; default: the model config's, 0 for the presets)");
    cmd->add_option("--lr", f->lr, "Peak learning rate (warmup, then cosine to 10%)")->capture_default_str();
    cmd->add_option("--warmup", f->warmup, "Warmup steps")->capture_default_str();
    cmd->add_option("--weight-decay", f->weight_decay, "Weight decay on matrices")->capture_default_str();
    cmd->add_option("--grad-clip", f->grad_clip, "Clip the global gradient norm (0: off)")->capture_default_str();
    cmd->add_option("--seed", f->seed, "Seed for initialization and the synthetic corpus")
        ->capture_default_str()
        ->check(non_negative_integer());
    cmd->add_option("--out", f->out, "Run folder for report.json")->capture_default_str();
    cmd->add_option("--device", f->device, "cpu|cuda|auto")->capture_default_str();
    cmd->add_option("--save-every", f->save_every,
                    "Also checkpoint every N steps (RUN_DIR/checkpoint.safetensors, or with data parallelism "
                    "RUN_DIR/checkpoints/step-N/, is always written at the end)")
        ->capture_default_str();
    cmd->add_option("--init-from", f->init_from,
                    "Start from pretrained weights: an llm.c checkpoint (gpt2_124M.bin), a Hugging Face GPT-2 "
                    "model.safetensors, or an earlier napkin run's RUN_DIR/checkpoint.safetensors; the model "
                    "shape comes from the file unless --model is given");
    cmd->add_option("--load-strategy", f->load_strategy,
                    "How --init-from reads the file: read-all|sequential|mmap (its peak RSS is reported)")
        ->capture_default_str();
    cmd->add_option("--profile", f->profile,
                    "off|all|steps:N-M: write RUN_DIR/trace.json (Perfetto / chrome://tracing) of those steps, "
                    "and memory.json")
        ->capture_default_str();
    cmd->add_option("--stop-after", f->stop_after,
                    "Stop after step N of the run and checkpoint it (resume later with --resume)");
    cmd->add_option("--resume", f->resume,
                    "Continue the run in RUN_DIR from its checkpoint, with its own options (bitwise identical); "
                    "or from a checkpoint file (napkin ckpt consolidate's, any world size and stage)");
    cmd->add_flag("--quiet", f->quiet, "No per-step lines");
    cmd->add_option("--zero", f->zero,
                    "Data parallelism (docs/ZERO.md): ZeRO stage 0 (DDP) | 1 | 2 | 3 (FSDP); ranks come from the "
                    "launcher: mpirun -n N napkin train --zero S ... (N ranks x --grad-accum G = one rank x G N)")
        ->capture_default_str();
    cmd->add_option("--overlap", f->overlap,
                    "auto|on|off: start each unit's gradient collective as its backward ends and prefetch ZeRO-3's "
                    "parameter gathers, overlapping communication with computation (the same results bit for "
                    "bit); auto: on with GPUs (NCCL), off with CPU ranks (MPI)")
        ->capture_default_str();
    cmd->add_option("--offload", f->offload,
                    "none|optimizer: keep the fp32 master copy and optimizer state of each rank's shard in host "
                    "memory and step it there (ZeRO-Offload; --device cuda, --zero 1-3, a mixed-precision recipe)")
        ->capture_default_str();
    cmd->add_option("--comm-timeout", f->comm_timeout,
                    "Seconds one collective may wait for the other ranks before the job ends with an error "
                    "naming it (a rank stuck or gone); 0: wait forever. Only under a launcher")
        ->capture_default_str();
    cmd->callback([f, cmd] { run_with_ranks([&](Communicator& comm) { run_train(*f, *cmd, comm); }); });
}

}  // namespace napkin::cli
