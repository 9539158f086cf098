// napkin: memory and FLOP accounting for transformer training.
// Exit codes: 0 success, 1 unusable input file or failure at run time, 2 usage error.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/version.h"
#include "core/check.h"

int main(int argc, char** argv) {
    CLI::App app{"napkin " NAPKIN_VERSION ": memory and FLOP accounting for transformer training"};
    app.set_version_flag("--version", "napkin " NAPKIN_VERSION " (CUDA " NAPKIN_BUILD_CUDA ")");
    app.require_subcommand(1);
    app.fallthrough(false);
    napkin::cli::add_estimate_command(app);
    napkin::cli::add_train_command(app);
    napkin::cli::add_info_command(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
        std::fprintf(stderr, "napkin: error: %s (see napkin --help)\n", e.what());
        return 2;
    } catch (const napkin::UsageError& e) {
        std::fprintf(stderr, "napkin: error: %s\n", e.what());
        return 2;
    } catch (const napkin::InputError& e) {
        std::fprintf(stderr, "napkin: error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "napkin: %s\n", e.what());
        return 1;
    }
    return 0;
}
