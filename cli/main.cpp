// napkin: memory and FLOP accounting for transformer training.
// Exit codes: 0 success, 1 unusable input file or failure at run time, 2 usage error.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/flag_names.h"
#include "cli/train_signal.h"
#include "cli/version.h"
#include "core/check.h"
#include "core/engine/anomaly.h"

namespace {

// libgomp's threads spin while they wait for work by default; when anything else holds a core
// (OpenBLAS's inner loops, another process on a shared 2-core machine) a spinning team can be
// several times slower than one thread. Training and generation ask for passive waiting. libgomp
// reads the variable when it loads, before main, so the process re-executes itself once to
// apply it.
void use_passive_openmp_waits(int argc, char** argv) {
    if (argc < 2 || (std::strcmp(argv[1], "train") != 0 && std::strcmp(argv[1], "generate") != 0) ||
        std::getenv("OMP_WAIT_POLICY") != nullptr)
        return;
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);
    // execv only returns on failure: go on with the default policy.
}

// CLI11 answers "napkin bogus", "napkin ckpt bogus" and a bare "napkin" with "A subcommand is
// required": name the word and the commands instead. Stops at the first option, or at a command
// without subcommands, whose arguments are CLI11's to judge.
void check_command_words(const CLI::App& app, int argc, char** argv) {
    const CLI::App* at = &app;
    for (int i = 1;; ++i) {
        if (i < argc && argv[i][0] == '-') return;
        const std::vector<const CLI::App*> subs =
            at->get_subcommands([](const CLI::App*) { return true; });
        if (subs.empty()) return;
        const CLI::App* next = nullptr;
        std::string names;
        for (const CLI::App* s : subs) {
            if (i < argc && s->get_name() == argv[i]) next = s;
            names += (names.empty() ? "" : "|") + s->get_name();
        }
        const std::string see =
            at == &app ? "napkin --help" : "napkin " + at->get_name() + " --help";
        if (i == argc) {
            throw napkin::UsageError("a command is required (expected " + names + "; see " + see +
                                     ")");
        }
        if (next == nullptr) {
            throw napkin::UsageError("unknown command '" + std::string(argv[i]) + "' (expected " +
                                     names + "; see " + see + ")");
        }
        at = next;
    }
}

}  // namespace

int main(int argc, char** argv) {
    use_passive_openmp_waits(argc, argv);
    CLI::App app{"napkin " NAPKIN_VERSION ": memory and FLOP accounting for transformer training"};
    app.set_version_flag("--version", "napkin " NAPKIN_VERSION " (CUDA " NAPKIN_BUILD_CUDA ")");
    app.require_subcommand(1);
    app.fallthrough(false);
    napkin::cli::add_estimate_command(app);
    napkin::cli::add_train_command(app);
    napkin::cli::add_generate_command(app);
    napkin::cli::add_ckpt_command(app);
    napkin::cli::add_report_command(app);
    napkin::cli::add_export_command(app);
    napkin::cli::add_calibrate_command(app);
    napkin::cli::add_info_command(app);
    napkin::cli::add_view_command(app);
    try {
        check_command_words(app, argc, argv);
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
        std::fprintf(stderr, "napkin: error: %s (see napkin --help)\n", e.what());
        return 2;
    } catch (const napkin::UsageError& e) {
        std::fprintf(stderr, "napkin: error: %s\n", napkin::cli::message_with_flags(e).c_str());
        return 2;
    } catch (const napkin::InputError& e) {
        std::fprintf(stderr, "napkin: error: %s\n", napkin::cli::message_with_flags(e).c_str());
        return 1;
    } catch (const napkin::AnomalyFound& e) {  // --detect-anomaly: report.json written
        std::fprintf(stderr, "napkin train: %s\n", e.what());
        return 3;
    } catch (const napkin::cli::Interrupted& e) {  // everything written; 130 for Ctrl-C
        std::fprintf(stderr, "napkin: %s\n", e.what());
        return e.exit_code();
    } catch (const napkin::OutOfMemory& e) {
        std::fprintf(stderr, "napkin: error: %s\n", e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        std::fprintf(
            stderr,
            "napkin: error: out of memory: an allocation failed (napkin estimate predicts a "
            "run's memory)\n");
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "napkin: %s\n", e.what());
        return 1;
    }
    return 0;
}
