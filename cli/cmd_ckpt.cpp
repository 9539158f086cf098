// napkin ckpt consolidate RUN_DIR [-o FILE]: one whole-state checkpoint from a data-parallel
// run's last complete sharded checkpoint (core/engine/zero_checkpoint.h), which a run of any
// world size and ZeRO stage resumes from (napkin train --resume FILE). docs/ZERO.md.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "core/check.h"
#include "core/engine/checkpoint.h"
#include "core/engine/zero_checkpoint.h"

namespace napkin::cli {

namespace {

struct ConsolidateFlags {
    std::string run_dir, out;
};

void run_consolidate(const ConsolidateFlags& f, const CLI::App& cmd) {
    if (cmd.count("--out") > 0 && f.out.empty()) {
        throw UsageError(
            "-o: name the output file (or leave -o out for RUN_DIR/checkpoint.safetensors)");
    }
    const std::filesystem::path run_dir(f.run_dir);
    if (!std::filesystem::is_directory(run_dir))
        throw UsageError("ckpt consolidate: '" + f.run_dir + "' is not a run folder");
    const std::optional<Manifest> m = last_complete_checkpoint(run_dir);
    if (!m) {
        throw UsageError("ckpt consolidate: no complete sharded checkpoint under '" +
                         (run_dir / kShardedCheckpointsDir).string() +
                         "' (a step folder counts once its " + kManifestFileName + " exists)");
    }
    const std::string out = f.out.empty() ? (run_dir / kCheckpointFileName).string() : f.out;
    std::vector<std::filesystem::path> inputs = {m->dir / kManifestFileName};
    for (const ManifestShard& s : m->shards)
        inputs.push_back(m->dir / s.file);
    for (const char* file : {"report.json", "trace.json", "memory.json"})
        inputs.push_back(run_dir / file);
    refuse_overwriting_input("-o", out, inputs);
    check_output_file("-o", out);
    const CheckpointInfo info = consolidate_checkpoint(*m, out);
    std::printf(
        "consolidated %s (%d rank%s, ZeRO-%d, step %d) into %s: %llu bytes of tensors; "
        "resume with napkin train --resume %s (any world size and stage; one process "
        "accumulates %d micro-batches per step)\n",
        m->dir.string().c_str(), m->world, m->world == 1 ? "" : "s", m->zero, m->step, out.c_str(),
        static_cast<unsigned long long>(info.data_bytes), out.c_str(), info.options.grad_accum);
}

}  // namespace

void add_ckpt_command(CLI::App& app) {
    CLI::App* ckpt = app.add_subcommand("ckpt", "Work with training checkpoints");
    ckpt->require_subcommand(1);
    auto f = std::make_shared<ConsolidateFlags>();
    CLI::App* cmd = ckpt->add_subcommand(
        "consolidate",
        "Write one checkpoint file from a data-parallel run's last complete sharded checkpoint, "
        "which any world size and ZeRO stage can resume from");
    cmd->add_option("RUN_DIR", f->run_dir, "The run folder (its checkpoints/step-N/manifest.json)")
        ->required();
    cmd->add_option("-o,--out", f->out, "Output file (default: RUN_DIR/checkpoint.safetensors)");
    cmd->callback([f, cmd] { run_consolidate(*f, *cmd); });
}

}  // namespace napkin::cli
