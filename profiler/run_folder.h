// run_folder: reads what `napkin train` writes into a run folder, for `napkin report` and
// `napkin export`: report.json (profiler/run_report.h) and trace.json (napkin-trace/1).
// Every failure is an InputError naming the file and what was expected, one line:
//   runs/a: no such folder
//   runs/a/report.json: not valid JSON (line 40, column 1: unexpected end of input ...)
//   runs/a/report.json: schema napkin-train-report/9 is newer than this napkin reads (1-2);
//   update napkin
//   runs/a/report.json: field 'measured.seconds' is not a number
//   runs/z3/rank1/report.json: field 'communication.world' is 4, but rank 0 (runs/z3/report.json)
//   says 2
// A data-parallel run (mpirun -n W napkin train --zero S --out RUN_DIR) is W folders: rank 0
// writes RUN_DIR, rank r RUN_DIR/rank<r> (docs/ZERO.md); load_run_ranks reads them all.
// Tests: tests/profiler/run_folder_test.cpp, tests/cli/report_ranks_test.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "profiler/run_report.h"

namespace napkin::profiler {

inline constexpr std::string_view kTraceSchema = "napkin-trace/1";
inline constexpr std::string_view kMemorySchema = "napkin-memory/1";

// Parses a whole JSON file. InputError when it is missing, unreadable, malformed or truncated.
nlohmann::json read_json_file(const std::filesystem::path& file);

// Checks `schema` ("name/version") against the one this build reads. `schema` is the
// document's "schema" field (memory) or "otherData.schema" (trace); absent or of another name
// means it is not that kind of file at all.
void check_schema(const nlohmann::json* schema, const std::filesystem::path& file,
                  std::string_view expected);

// A report.json file, read and checked (its errors name it).
RunReport read_run_report(const std::filesystem::path& file);

// One rank's report and the folder it was read from.
struct RankReport {
    std::filesystem::path dir;   // the run folder
    std::filesystem::path file;  // its report.json
    std::string label;           // the folder's name, for table headers and trace processes
    RunReport report;
    // From report.communication (absent: one process, rank 0 of 1).
    int rank = 0;
    int world = 1;
    int zero = -1;  // ZeRO stage, -1 without data parallelism
    // The run clock's zero on the steady clock and the host it was read on (reports from
    // before napkin wrote them: none).
    std::optional<std::int64_t> clock_origin_ns;
    std::string host;
};

// `path` is a run folder or a report.json inside one.
RankReport load_run_report(const std::filesystem::path& path);

// Every rank of a run. `path` names a run folder or its report.json; when that is rank 0 of W > 1
// ranks, ranks 1..W-1 are read from <folder>/rank<r> and must agree with it (world size, stage,
// their own rank number), and a folder rank<W> (left from a larger run) is refused. A path to
// rank r > 0's folder gives that rank alone. InputError naming the file on any disagreement.
struct RunRanks {
    std::filesystem::path dir;  // rank 0's folder (or the one rank's)
    std::string label;          // its name, for table headers and trace processes
    int world = 1;
    int zero = -1;
    // In rank order; ranks.size() == world unless one rank was named.
    std::vector<RankReport> ranks;
};
RunRanks load_run_ranks(const std::filesystem::path& path);

// "z3 rank 1/4": a rank's name in tables and merged traces; the run's label when world is 1.
std::string rank_label(const std::string& run_label, int rank, int world);

// The trace.json of a run folder (or `path` itself when it is a file); InputError when the
// folder has none (the run was not profiled).
std::filesystem::path run_trace_path(const std::filesystem::path& path);

}  // namespace napkin::profiler
