// Each subcommand registers itself on the app and runs from its callback. Errors propagate as
// napkin::UsageError (exit 2) or InputError (exit 1) to main.
#pragma once

#include <CLI/CLI.hpp>

namespace napkin::cli {

void add_estimate_command(CLI::App& app);
void add_info_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_ckpt_command(CLI::App& app);
void add_view_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_calibrate_command(CLI::App& app);

}  // namespace napkin::cli
