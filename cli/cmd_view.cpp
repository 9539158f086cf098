// napkin view: starts the desktop viewer, napkin-view, installed next to this binary. The viewer
// is its own executable so that `napkin` never links GLFW or OpenGL (it starts in milliseconds
// on machines without a display). Every argument after `view` is handed to napkin-view as is.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/check.h"

namespace napkin::cli {

namespace {

std::filesystem::path viewer_path() {
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    return (ec ? std::filesystem::path(".") : self.parent_path()) / "napkin-view";
}

[[noreturn]] void exec_viewer(const std::vector<std::string>& args) {
    const std::filesystem::path exe = viewer_path();
    if (access(exe.c_str(), X_OK) != 0) {
        throw InputError(
            "view: the viewer was not built (no " + exe.string() +
            "); install its packages with scripts/install_deps.sh --viewer and configure with "
            "-DNAPKIN_VIEWER=ON");
    }
    std::vector<char*> argv;
    std::string name = "napkin-view";
    argv.push_back(name.data());
    std::vector<std::string> copy = args;
    for (std::string& a : copy)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(exe.c_str(), argv.data());
    throw InputError("view: cannot start " + exe.string() + ": " + std::strerror(errno));
}

}  // namespace

void add_view_command(CLI::App& app) {
    CLI::App* cmd = app.add_subcommand("view",
                                       "Open run folders and Chrome traces in the desktop viewer "
                                       "(napkin-view; napkin view --help for its flags)");
    // napkin-view parses its own flags (and prints its own --help).
    cmd->set_help_flag();
    cmd->allow_extras();
    cmd->prefix_command();
    cmd->callback([cmd] { exec_viewer(cmd->remaining()); });
}

}  // namespace napkin::cli
