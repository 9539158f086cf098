#include "cli/train_signal.h"

#include <unistd.h>

#include <csignal>

#include "core/durable_file.h"

namespace napkin::cli {

namespace {

volatile std::sig_atomic_t g_signal = 0;

void on_signal(int sig) {
    if (g_signal != 0) {  // the second: no more waiting for the step, nor for a save under way
        remove_live_temporaries();
        std::signal(sig, SIG_DFL);
        std::raise(sig);
        return;
    }
    g_signal = sig;
    constexpr char kMsg[] =
        "\nnapkin: stopping at the next micro-batch to write the report and a "
        "checkpoint of the last whole step (again to quit now)\n";
    [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
}

struct sigaction g_old_int, g_old_term;

}  // namespace

StopOnSignal::StopOnSignal() {
    g_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // a checkpoint being written must not see EINTR
    sigaction(SIGINT, &sa, &g_old_int);
    sigaction(SIGTERM, &sa, &g_old_term);
}

StopOnSignal::~StopOnSignal() {
    sigaction(SIGINT, &g_old_int, nullptr);
    sigaction(SIGTERM, &g_old_term, nullptr);
}

bool StopOnSignal::requested() const { return g_signal != 0; }
int StopOnSignal::signal() const { return static_cast<int>(g_signal); }

}  // namespace napkin::cli
