#include "cli/train_flags.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/flag_checks.h"
#include "cli/flag_names.h"
#include "cli/train_parallel.h"
#include "core/check.h"
#include "core/config_json.h"
#include "core/device.h"

namespace napkin::cli {

namespace {

// Paths go into JSON (report.json, the checkpoint header), which holds UTF-8 only: a path of other
// bytes would train every step and then fail to write the report. Refused before the run.
void require_utf8_paths(const TrainFlags& f) {
    for (const auto& [flag, path] : {std::pair{"--data", &f.data},
                                     {"--out", &f.out},
                                     {"--init-from", &f.init_from},
                                     {"--resume", &f.resume},
                                     {"--config", &f.config}}) {
        try {
            (void)nlohmann::json(*path).dump();
        } catch (const nlohmann::json::type_error&) {
            throw UsageError(std::string(flag) +
                             ": the path is not valid UTF-8, which napkin's JSON files (report, "
                             "checkpoint header) cannot hold; rename it");
        }
    }
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
    if (!(f.lr > 0) || !std::isfinite(f.lr)) {  // a float: 1e300 reads as inf
        const std::string given =
            cmd.count("--lr") > 0 ? cmd.get_option("--lr")->results().back() : std::string();
        throw UsageError("--lr: must be a positive number at most 3.4e38, the largest float (got " +
                         given + ")");
    }
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
    if (f.loss_chunk < 0) {
        throw UsageError(
            "--loss-chunk: must be 0 (all B x T rows at once) or a positive number "
            "of rows (got " +
            std::to_string(f.loss_chunk) + ")");
    }
    o.plan.loss_chunk_rows = f.loss_chunk;
    if (cmd.count("--dropout") > 0) {
        if (!(f.dropout >= 0.0 && f.dropout < 1.0))
            throw UsageError("--dropout: must be in [0, 1) (got " + std::to_string(f.dropout) +
                             ")");
        o.model.dropout = f.dropout;
    }
    finetune_from_flags(f, cmd, o);
    check_fp8_amax_history(f.fp8_amax_history, cmd.count("--fp8-amax-history") > 0,
                           o.plan.precision);
    o.plan.fp8_amax_history = f.fp8_amax_history;
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

// The flags that stand on their own. --comm-timeout is checked and set first: the start-up
// handshake is already a collective.
// Every flag by name with its value as text, for the ranks to compare.
std::vector<std::pair<std::string, std::string>> flag_values(const TrainFlags& f) {
    auto text = [](auto v) {  // numbers as the shortest text that reads back to them
        char buf[32];
        return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
    };
    return {{"--out", f.out},
            {"--save-every", text(f.save_every)},
            {"--stop-after", text(f.stop_after)},
            {"--resume", f.resume},
            {"--init-from", f.init_from},
            {"--load-strategy", f.load_strategy},
            {"--profile", f.profile},
            {"--force", f.force ? "yes" : "no"},
            {"--detect-anomaly", f.detect_anomaly ? "yes" : "no"},
            {"--device-profile", f.device_profile},
            {"--profile-force", f.profile_force ? "yes" : "no"},
            {"--model", f.model},
            {"--config", f.config},
            {"--data", f.data},
            {"--device", f.device},
            {"--steps", text(f.steps)},
            {"--grad-accum", text(f.grad_accum)},
            {"--micro-batch", text(f.micro_batch)},
            {"--seq-len", text(f.seq_len)},
            {"--precision", f.precision},
            {"--optimizer", f.optimizer},
            {"--checkpointing", f.checkpointing},
            {"--attention", f.attention},
            {"--loss-chunk", text(f.loss_chunk)},
            {"--finetune", f.finetune},
            {"--lora-rank", text(f.lora_rank)},
            {"--lora-alpha", text(f.lora_alpha)},
            {"--dropout", text(f.dropout)},
            {"--lr", text(f.lr)},
            {"--warmup", text(f.warmup)},
            {"--weight-decay", text(f.weight_decay)},
            {"--grad-clip", text(f.grad_clip)},
            {"--seed", text(f.seed)},
            {"--zero", text(f.zero)},
            {"--overlap", f.overlap},
            {"--offload", f.offload},
            {"--fusion", f.fusion},
            {"--fp8-amax-history", text(f.fp8_amax_history)}};
}

void check_flags(const TrainFlags& f, const CLI::App& cmd, Communicator& comm) {
    if (!(f.comm_timeout >= 0) || !std::isfinite(f.comm_timeout)) {
        throw UsageError("--comm-timeout: must be 0 (wait forever) or a number of seconds > 0");
    }
    comm.set_timeout_s(f.comm_timeout);
    comm.set_field_namer(flag_for_field);
    check_same_flags(flag_values(f), comm);  // before any flag leads a rank its own way
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
    for (const char* flag : {"--model",        "--config",    "--data",
                             "--micro-batch",  "--seq-len",   "--grad-accum",
                             "--precision",    "--optimizer", "--checkpointing",
                             "--attention",    "--lr",        "--warmup",
                             "--weight-decay", "--grad-clip", "--seed",
                             "--steps",        "--finetune",  "--lora-rank",
                             "--lora-alpha",   "--dropout",   "--fp8-amax-history",
                             "--loss-chunk"}) {
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

// --zero, --overlap, --offload and --paged-optimizer: like the device, a resumed run may change
// all but the first.
void parallel_from_flags(const TrainFlags& f, TrainOptions& o) {
    o.zero = f.zero;
    if (f.overlap != "auto" && f.overlap != "on" && f.overlap != "off") {
        throw UsageError("--overlap: unknown value '" + f.overlap + "' (expected auto|on|off)");
    }
    // auto: on GPUs, where NCCL's stream runs a collective beside the kernels; off on CPU ranks,
    // whose MPI copies need the rank's own core (docs/ZERO.md, "Overlap and prefetch").
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
    o.paged_optimizer = f.paged_optimizer;  // a memory placement: the same numbers either way
}

// --cuda-graph auto|on|off (docs/CUDA.md "CUDA graphs"), once the device and the ranks are
// known: on refuses a run the capture cannot hold, naming why; auto captures where
// it can and keeps why not.
void cuda_graph_from_flags(const TrainFlags& f, RunSetup& run, int world) {
    if (f.cuda_graph != "auto" && f.cuda_graph != "on" && f.cuda_graph != "off") {
        throw UsageError("--cuda-graph: unknown value '" + f.cuda_graph +
                         "' (expected auto|on|off)");
    }
    const std::string why = f.cuda_graph == "off"
                                ? std::string("--cuda-graph off")
                                : with_flags(cuda_graph_refusal(run.options, world));
    if (f.cuda_graph == "on" && !why.empty()) throw UsageError("--cuda-graph on: " + why);
    run.options.cuda_graph = why.empty();
    run.cuda_graph_off = why;
}

}  // namespace

RunSetup validate(const TrainFlags& f, const CLI::App& cmd, Communicator& comm) {
    check_flags(f, cmd, comm);
    require_utf8_paths(f);
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
    run.options.plan.detect_anomaly = f.detect_anomaly;
    // Like --detect-anomaly, a switch of how the step runs, which a resumed run may change.
    if (f.fusion != "on" && f.fusion != "off")
        throw UsageError("--fusion: unknown value '" + f.fusion + "' (expected on|off)");
    run.options.plan.gemm_epilogues = f.fusion == "on" && run.options.device == DeviceKind::cuda;
    parallel_from_flags(f, run.options);
    cuda_graph_from_flags(f, run, comm.world_size());
    run.run_dir = !f.resume.empty() && cmd.count("--out") == 0 ? run.resume.run_dir
                                                               : std::filesystem::path(f.out);
    return run;
}

std::string data_repeat_warning(const TrainOptions& o, int world, int steps,
                                std::uint64_t data_tokens) {
    // Each micro-batch reads B sequences of T tokens (the targets' last one is the next's first).
    const double per_step = static_cast<double>(o.plan.micro_batch) *
                            static_cast<double>(o.plan.seq_len) * o.grad_accum * world;
    const double read = per_step * steps;
    // Fewer tokens than one sequence: the first batch refuses the data, on its own line.
    const auto sequence = static_cast<std::uint64_t>(o.plan.seq_len) + 1;
    if (data_tokens < sequence || !(read > static_cast<double>(data_tokens))) return "";
    char line[512];
    std::snprintf(line, sizeof line,
                  "napkin: warning: --data %s holds %llu tokens; %d steps of %.3g tokens (B %lld x "
                  "T %lld x G %d x %d ranks) read %.3g, the data %.3g times over",
                  o.data.c_str(), static_cast<unsigned long long>(data_tokens), steps, per_step,
                  static_cast<long long>(o.plan.micro_batch),
                  static_cast<long long>(o.plan.seq_len), o.grad_accum, world, read,
                  read / static_cast<double>(data_tokens));
    return line;
}

}  // namespace napkin::cli
