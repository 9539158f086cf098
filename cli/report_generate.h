// napkin report on napkin generate's run folders (generate.json, schema napkin-generate/1,
// docs/INFERENCE.md): the inference report, memory by category predicted against measured,
// the prefill and decode time per token predicted against measured, tokens/s. cmd_report.cpp
// sends each folder here or to the training report by the file it holds.
// Tests: tests/cli/report_cli_test.cpp (ReportCli.Generate*).
#pragma once

#include <filesystem>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace napkin::cli {

enum class RunKind { train, generate };

// A run folder's kind: report.json (napkin train --out) or generate.json (napkin generate
// --out); a file named generate.json is a generate run, any other file a training report.
// InputError, one line, when the folder is missing or holds neither.
RunKind run_kind(const std::filesystem::path& path);

// One generate run as `napkin report --json` shows it (its `generate_runs[]`).
nlohmann::json summarize_generate_run(const std::filesystem::path& path);

// The inference report of each run, one after the other.
void print_generate_runs(const std::vector<nlohmann::json>& runs);

}  // namespace napkin::cli
