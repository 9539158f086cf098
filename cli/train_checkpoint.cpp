#include "cli/train_checkpoint.h"

#include <unistd.h>

#include <charconv>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/engine/checkpoint.h"

namespace napkin::cli {

namespace fs = std::filesystem;

namespace {

std::string ranks_text(int world) {
    return std::to_string(world) + (world == 1 ? " rank" : " ranks");
}

}  // namespace

ResumeSource find_resume_source(const std::string& path, bool parallel, Communicator& comm,
                                int zero) {
    ResumeSource s;
    const fs::path p(path);
    if (fs::is_regular_file(p)) {
        s.file = p;
        s.run_dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
    } else if (fs::is_directory(p)) {
        s.run_dir = p;
        const fs::path whole = p / kCheckpointFileName;
        std::optional<Manifest> m = last_complete_checkpoint(p);
        if (parallel && m) {
            s.manifest = std::move(m);
        } else if (fs::exists(whole)) {
            s.file = whole;
        } else if (m) {
            throw UsageError("--resume: '" + p.string() + "' holds the sharded checkpoints of a " +
                             ranks_text(m->world) + " ZeRO-" + std::to_string(m->zero) +
                             " run; resume it under mpirun -n " + std::to_string(m->world) +
                             " with --zero " + std::to_string(m->zero) +
                             ", or run `napkin ckpt consolidate " + p.string() + "` first");
        } else {
            throw UsageError("--resume: no checkpoint at '" + whole.string() + "'" +
                             (parallel ? " nor a complete one under '" +
                                             (p / kShardedCheckpointsDir).string() + "'"
                                       : std::string()));
        }
    } else {
        throw UsageError("--resume: no checkpoint at '" + p.string() +
                         "' (expected a run folder or a checkpoint file)");
    }

    if (s.manifest) {
        try {
            check_resumable(*s.manifest, comm.world_size(), zero);
        } catch (const UsageError& e) {
            throw RunMismatchError(e.marked());  // every rank read the same manifest: a clean exit
        }
        s.options = read_shard_info(*s.manifest, comm.rank()).options;
        return s;
    }
    s.options = read_checkpoint_info(s.file.string()).options;
    // A whole-state checkpoint describes one process; W ranks split its micro-batches.
    const int world = comm.world_size();
    if (s.options.grad_accum % world != 0) {
        throw RunMismatchError("--resume: " + s.file.string() + " accumulates " +
                               std::to_string(s.options.grad_accum) +
                               " micro-batches per step, which " + ranks_text(world) +
                               " cannot split evenly");
    }
    s.options.grad_accum /= world;
    return s;
}

void load_resume_source(const ResumeSource& source, Trainer& trainer) {
    if (source.manifest)
        load_sharded_checkpoint(*source.manifest, trainer);
    else
        load_checkpoint(source.file.string(), trainer);
}

std::string save_run_checkpoint(const fs::path& run_dir, Trainer& trainer, bool parallel) {
    if (parallel) return save_sharded_checkpoint(run_dir, trainer).string();
    const fs::path path = run_dir / kCheckpointFileName;
    save_checkpoint(path.string(), trainer);
    return path.string();
}

std::string run_checkpoint_path(const fs::path& run_dir, int steps_done, bool parallel) {
    return parallel ? sharded_checkpoint_dir(run_dir, steps_done).string()
                    : (run_dir / kCheckpointFileName).string();
}

std::string set_aside_earlier_run(const fs::path& run_dir) {
    // The earlier run's checkpoints first, then the files it wrote beside them, rank folders too.
    std::vector<fs::path> paths = {run_dir / kCheckpointFileName, run_dir / kShardedCheckpointsDir};
    std::vector<fs::path> dirs = {run_dir};
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(run_dir, ec)) {
        const std::string name = e.path().filename().string();
        if (e.is_directory(ec) && name.size() > 4 && name.rfind("rank", 0) == 0 &&
            name.find_first_not_of("0123456789", 4) == std::string::npos) {
            dirs.push_back(e.path());
        }
    }
    for (const fs::path& d : dirs) {
        for (const char* file : {"report.json", "report.json.pending", "trace.json", "memory.json"})
            paths.push_back(d / file);
    }
    std::string moved;
    bool checkpoint = false;
    for (const fs::path& p : paths) {
        if (!fs::exists(fs::symlink_status(p, ec))) continue;
        fs::path aside = p;
        aside += ".previous";
        fs::remove_all(aside, ec);
        if (ec) throw InputError(aside.string() + ": cannot remove (" + ec.message() + ")");
        fs::rename(p, aside, ec);
        if (ec) {
            throw InputError(p.string() + ": cannot move an earlier run's file aside to " +
                             aside.string() + " (" + ec.message() + ")");
        }
        checkpoint |= p.parent_path() == run_dir && (p.filename() == kCheckpointFileName ||
                                                     p.filename() == kShardedCheckpointsDir);
        const fs::path rel = p.lexically_relative(run_dir);
        moved += (moved.empty() ? "" : ", ") + rel.string() + " to " + rel.string() + ".previous";
    }
    if (moved.empty()) return moved;
    return "note: " + run_dir.string() + " held an earlier run's " +
           (checkpoint ? "checkpoint" : "files") + ": moved " + moved +
           " (this run starts afresh there)";
}

bool continues_folder(const ResumeSource& source, const fs::path& run_dir) {
    std::error_code ec;
    return !source.run_dir.empty() && fs::equivalent(source.run_dir, run_dir, ec);
}

namespace {

// "R:S" from the environment variable, or nothing.
bool fault_at(const char* var, int rank, int steps_done) {
    const char* v = std::getenv(var);
    if (v == nullptr || *v == '\0') return false;
    const char* end = v + std::strlen(v);
    int r = -1, s = -1;
    const auto a = std::from_chars(v, end, r);
    const bool ok = a.ec == std::errc{} && a.ptr != end && *a.ptr == ':' &&
                    std::from_chars(a.ptr + 1, end, s).ptr == end && r >= 0 && s >= 0;
    if (!ok) throw UsageError(std::string(var) + ": expected RANK:STEP (got '" + v + "')");
    return r == rank && s == steps_done;
}

}  // namespace

void inject_test_fault(int rank, int steps_done) {
    if (fault_at("NAPKIN_TEST_KILL_RANK_AT_STEP", rank, steps_done)) std::raise(SIGKILL);
    if (fault_at("NAPKIN_TEST_TERM_RANK_AT_STEP", rank, steps_done)) std::raise(SIGTERM);
    if (fault_at("NAPKIN_TEST_HANG_RANK_AT_STEP", rank, steps_done)) {
        for (;;)
            ::pause();
    }
}

void inject_end_fault(const char* where) {
    const char* v = std::getenv("NAPKIN_TEST_THROW_AT_END");
    if (v == nullptr || std::strcmp(v, where) != 0) return;
    // Throws json::type_error 316, "invalid UTF-8 byte at index 1: 0xFF".
    std::ignore = nlohmann::json(std::string("\xe9\xff")).dump();
}

}  // namespace napkin::cli
