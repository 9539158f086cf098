// napkin train's flags, and their validation into the run's options (cli/train_flags.cpp):
// a new run's from the flags or a resumed run's from its checkpoint, the device, data
// parallelism, and the folder the run writes. Every refusal is a UsageError naming the flag.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/train_checkpoint.h"
#include "cli/train_profile.h"
#include "core/comm/comm.h"
#include "core/engine/trainer.h"
#include "core/engine/weights_import.h"

namespace napkin::cli {

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
    std::string device_profile;  // the performance model's (empty: the device's shipped one)
    bool profile_force = false;
    std::string resume;
    bool quiet = false;
    bool force = false;  // past the memory check
    bool detect_anomaly = false;
    int zero = 0;
    double comm_timeout = 600;  // seconds; 0: wait forever
    std::string overlap = "auto";
    std::string offload = "none";
    bool paged_optimizer = false;
    std::string finetune = "full";
    double dropout = -1;                 // < 0: the model config's
    std::int64_t lora_rank = 64;         // the QLoRA paper's, as napkin estimate's
    float lora_alpha = 0;                // 0: the rank (a scale of 1)
    std::string fusion = "on";           // cuBLASLt epilogue fusions (PlanInputs::gemm_epilogues)
    std::string cuda_graph = "auto";     // TrainOptions::cuda_graph: auto|on|off
    std::int64_t fp8_amax_history = 16;  // fp8-amp: delayed scaling's history; 0: current scaling
    std::int64_t loss_chunk = PlanInputs{}.loss_chunk_rows;  // rows of fp32 logits at once; 0: all
};

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
    // --cuda-graph: why the step is not captured, flags named ("" when it is): `off` asked, or
    // what auto found the capture cannot hold (report.json's run.cuda_graph_off).
    std::string cuda_graph_off;
};

// Checks the flags and decides the run: its options (a resumed run's from its checkpoint, which
// it names), the device (--device auto prints what it found), and RUN_DIR. Sets --comm-timeout on
// `comm` first: the start-up handshake is already a collective.
RunSetup validate(const TrainFlags& f, const CLI::App& cmd, Communicator& comm);

// The warning for a run that reads its --data more than once ("" when it does not): `steps`
// steps of B T G tokens on each of `world` ranks against the `data_tokens` the data holds
// (0: the synthetic corpus, which never repeats; fewer than T + 1: refused by the first batch).
// An absurd --grad-accum shows up here too: one step that reads the data many times over.
std::string data_repeat_warning(const TrainOptions& o, int world, int steps,
                                std::uint64_t data_tokens);

}  // namespace napkin::cli
