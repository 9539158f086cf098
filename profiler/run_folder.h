// run_folder: reads what `napkin train` writes into a run folder, for `napkin report` and
// `napkin export`: report.json (schema napkin-train-report/1) and trace.json (napkin-trace/1).
// Every failure is an InputError naming the file and what was expected, one line:
//   runs/a: no such folder
//   runs/a/report.json: not valid JSON (line 40, column 1: unexpected end of input ...)
//   runs/a/report.json: format napkin-train-report/9 is not supported (this napkin reads
//   napkin-train-report/1)
//   runs/a/report.json: field 'measured.seconds' is not a number
// Tests: tests/profiler/run_folder_test.cpp.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace napkin::profiler {

inline constexpr std::string_view kReportSchema = "napkin-train-report/1";
inline constexpr std::string_view kTraceSchema = "napkin-trace/1";
inline constexpr std::string_view kMemorySchema = "napkin-memory/1";

// Parses a whole JSON file. InputError when it is missing, unreadable, malformed or truncated.
nlohmann::json read_json_file(const std::filesystem::path& file);

// Checks `schema` ("name/version") against the one this build reads. `schema` is the
// document's "schema" field (report, memory) or "otherData.schema" (trace); absent or of
// another name means it is not that kind of file at all.
void check_schema(const nlohmann::json* schema, const std::filesystem::path& file, std::string_view expected);

// The field at a dotted path ("measured.peak_bytes.activations"), or InputError naming it.
const nlohmann::json& field(const nlohmann::json& doc, std::string_view path, const std::filesystem::path& file);
double number_field(const nlohmann::json& doc, std::string_view path, const std::filesystem::path& file);
std::string string_field(const nlohmann::json& doc, std::string_view path, const std::filesystem::path& file);

struct RunReport {
    std::filesystem::path dir;   // the run folder
    std::filesystem::path file;  // its report.json
    std::string label;           // the folder's name, for table headers and trace processes
    nlohmann::json report;       // schema checked
};

// `path` is a run folder or a report.json inside one.
RunReport load_run_report(const std::filesystem::path& path);

// The trace.json of a run folder (or `path` itself when it is a file); InputError when the
// folder has none (the run was not profiled).
std::filesystem::path run_trace_path(const std::filesystem::path& path);

}  // namespace napkin::profiler
