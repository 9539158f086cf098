#include "profiler/run_folder.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/bounded_read.h"
#include "core/check.h"

namespace napkin::profiler {

namespace fs = std::filesystem;

namespace {

// The whole file; InputError naming it when it is missing, not a regular file (a FIFO is never
// waited on), unreadable, past kMaxReportBytes or empty.
std::string read_text_file(const fs::path& file) {
    std::error_code ec;
    if (!fs::exists(file, ec)) throw InputError(file.string() + ": no such file");
    if (fs::is_directory(file, ec))
        throw InputError(file.string() + ": is a folder, expected a JSON file");
    std::string text;
    if (std::string err = read_bounded_file(file, kMaxReportBytes, text); !err.empty())
        throw InputError(file.string() + ": " + err);
    if (text.empty()) throw InputError(file.string() + ": empty file, expected JSON");
    return text;
}

// `read()`, its InputErrors prefixed with the file's name.
template <class Read>
auto naming(const fs::path& file, Read read) {
    try {
        return read();
    } catch (const InputError& e) {
        throw InputError(file.string() + ": " + e.what());
    }
}

}  // namespace

nlohmann::json read_json_file(const fs::path& file) {
    const std::string text = read_text_file(file);
    return naming(file, [&] { return parse_json_text(text); });
}

RunReport read_run_report(const fs::path& file) {
    const std::string text = read_text_file(file);
    return naming(file, [&] { return parse_run_report(text); });
}

void check_schema(const nlohmann::json* schema, const fs::path& file, std::string_view expected) {
    const std::string_view kind = expected.substr(0, expected.find('/'));
    if (schema == nullptr || !schema->is_string()) {
        throw InputError(file.string() + ": not a " + std::string(kind) + " file (no schema \"" +
                         std::string(expected) + "\")");
    }
    const std::string s = schema->get<std::string>();
    if (s == expected) return;
    if (s.rfind(std::string(kind) + "/", 0) == 0) {
        throw InputError(file.string() + ": format " + s + " is not supported (this napkin reads " +
                         std::string(expected) + ")");
    }
    throw InputError(file.string() + ": schema \"" + s + "\" is not a " + std::string(kind) +
                     " file");
}

RankReport load_run_report(const fs::path& path) {
    std::error_code ec;
    if (!fs::exists(path, ec)) throw InputError(path.string() + ": no such folder");
    RankReport r;
    if (fs::is_directory(path, ec)) {
        r.dir = path;
        r.file = path / "report.json";
        if (!fs::exists(r.file, ec)) {
            throw InputError(r.file.string() + ": no such file (is " + path.string() +
                             " a napkin train --out folder?)");
        }
    } else {
        r.file = path;
        r.dir = path.parent_path();
    }
    r.report = read_run_report(r.file);
    const fs::path norm = fs::weakly_canonical(r.dir, ec);
    r.label = (ec ? r.dir : norm).filename().string();
    if (r.label.empty()) r.label = r.dir.string();
    if (const std::optional<CommunicationReport>& c = r.report.communication) {
        r.world = c->world;
        r.rank = c->rank;
        r.zero = c->zero;
        r.clock_origin_ns = c->clock_origin_ns;
        r.host = c->host;
    }
    return r;
}

std::string rank_label(const std::string& run_label, int rank, int world) {
    if (world <= 1) return run_label;
    return run_label + " rank " + std::to_string(rank) + "/" + std::to_string(world);
}

RunRanks load_run_ranks(const fs::path& path) {
    RankReport first = load_run_report(path);
    RunRanks run;
    run.dir = first.dir;
    run.label = first.label;
    run.world = first.world;
    run.zero = first.zero;
    const bool all = first.rank == 0 && first.world > 1;
    const fs::path first_file = first.file;
    if (first.rank > 0) {
        // RUN_DIR/rank<r> named alone: "<RUN_DIR's name> rank r/W".
        std::error_code ec;
        const fs::path parent = fs::weakly_canonical(first.dir, ec).parent_path();
        if (!ec && !parent.filename().empty()) run.label = parent.filename().string();
        first.label = rank_label(run.label, first.rank, first.world);
    }
    run.ranks.push_back(std::move(first));
    if (!all) return run;
    std::error_code ec;
    // A rank that disagrees with rank 0: one line in the readers' shape (core/json_reader.h).
    const auto disagree = [&](const RankReport& rr, const std::string& field, int expected,
                              const std::string& why, int got) {
        throw InputError(rr.file.string() + ": " + field + ": expected " +
                         std::to_string(expected) + " (" + why + "), got " + std::to_string(got));
    };
    const std::string rank0 = "rank 0's, " + first_file.string();
    for (int r = 1; r < run.world; ++r) {
        const fs::path dir = run.dir / ("rank" + std::to_string(r));
        if (!fs::is_directory(dir, ec)) {
            throw InputError(dir.string() + ": no such folder (rank " + std::to_string(r) +
                             " of the " + std::to_string(run.world) + " that " +
                             first_file.string() + " names)");
        }
        RankReport rr = load_run_report(dir);
        if (!rr.report.communication) {
            throw InputError(rr.file.string() + ": communication: expected an object (rank 0, " +
                             first_file.string() + ", says world size " +
                             std::to_string(run.world) + "), got nothing");
        }
        if (rr.world != run.world) disagree(rr, "communication.world", run.world, rank0, rr.world);
        if (rr.rank != r)
            disagree(rr, "communication.rank", r, "its folder is rank" + std::to_string(r),
                     rr.rank);
        if (rr.zero != run.zero) disagree(rr, "communication.zero", run.zero, rank0, rr.zero);
        rr.label = rank_label(run.label, r, run.world);
        run.ranks.push_back(std::move(rr));
    }
    run.ranks.front().label = rank_label(run.label, 0, run.world);
    const fs::path extra = run.dir / ("rank" + std::to_string(run.world));
    if (fs::exists(extra, ec)) {
        throw InputError(extra.string() + ": a rank folder beyond the world size " +
                         std::to_string(run.world) + " that " + first_file.string() +
                         " names (left from a larger run? remove it)");
    }
    return run;
}

fs::path run_trace_path(const fs::path& path) {
    std::error_code ec;
    if (!fs::exists(path, ec)) throw InputError(path.string() + ": no such folder");
    if (!fs::is_directory(path, ec)) return path;
    const fs::path t = path / "trace.json";
    if (!fs::exists(t, ec)) {
        throw InputError(t.string() +
                         ": no such file (profile the run: napkin train --profile all|steps:N-M)");
    }
    return t;
}

}  // namespace napkin::profiler
