// napkin calibrate: measures the present device (the CPU, or --device cuda) and writes its
// profile (estimator/device_profile.h; docs/FORMATS.md, "Device profiles"). It trains the
// engine itself on the probes of cli/calibrate_probes.h, a warm-up step then a few timed ones
// each, times every op inside its op range (a GPU's through CUPTI: the device time of the kernels
// each op launched), and folds the medians into the profile's tables. Under an MPI launcher
// every rank runs the probes at once (as the ranks of a data-parallel run share the machine),
// rank 0 writes the section for its threads, and the collectives are measured too; --merge adds
// what was measured to an existing profile (a one-process run's and an mpirun's in one file).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/calibrate_probes.h"
#include "cli/commands.h"
#include "cli/estimate_time.h"
#include "cli/flag_checks.h"
#include "cli/timing.h"
#include "cli/train_parallel.h"
#include "core/check.h"
#include "core/comm/comm.h"
#include "core/engine/trainer.h"
#include "estimator/hardware.h"
#include "estimator/perf_model.h"
#include "estimator/profile_catalog.h"
#include "kernels/matmul.h"
#include "kernels/optimizer.h"
#include "kernels/stream.h"
#include "profiler/cupti_collector.h"
#include "profiler/step_profile.h"

namespace napkin::cli {

namespace {

struct CalibrateFlags {
    std::string out, device = "cpu", precisions, note;
    int steps = 0, warmup = 0;
    bool quick = false, merge = false;
};

std::string load_average() {
    std::ifstream in("/proc/loadavg");
    std::string one;
    in >> one;
    return one.empty() ? "unknown" : one;
}

// The GPU's device time per op where its kernels ran, else (the data op, a host loop) its host
// range's time.
double op_seconds(const profiler::ProfileRow& row, bool gpu) {
    if (gpu && row.device_seconds_per_step && *row.device_seconds_per_step > 0)
        return *row.device_seconds_per_step;
    return row.seconds_per_step;
}

// One probe: a warm-up, then `steps` timed steps, each op's calls and seconds per step.
ProbeMeasure run_probe(const Probe& p, DeviceKind device, int warmup, int steps) {
    TrainOptions o;
    o.model = probe_model(p);
    o.plan = probe_plan_inputs(p);
    o.steps = warmup + steps;
    o.device = device;
    Trainer trainer(o);
    trainer.allocator().set_record_events(false);
    profiler::Recorder rec(profiler::Recorder::kDefaultCapacity, trainer.allocator().start());
    std::unique_ptr<profiler::GpuActivitySource> source;
    std::unique_ptr<profiler::CuptiCollector> cupti;
    if (trainer.device() != nullptr && (source = trainer.device()->activity_source()) != nullptr) {
        cupti = std::make_unique<profiler::CuptiCollector>(rec, *source);
        if (!cupti->active())
            throw InputError("napkin calibrate --device cuda: CUPTI: " + cupti->error());
    }
    std::map<std::string, std::vector<OpMeasure>> ops;
    std::vector<double> step_seconds;
    for (int s = 0; s < warmup + steps; ++s) {
        const bool timed = s >= warmup;
        trainer.set_recorder(timed ? &rec : nullptr);
        trainer.set_kernel_tagger(timed ? cupti.get() : nullptr);
        const StepRecord r = trainer.step();
        if (cupti != nullptr) cupti->flush(true);
        std::vector<profiler::Event> events = rec.take();
        if (!timed) continue;
        profiler::StepProfile sp;
        sp.add(events);
        for (const profiler::ProfileRow& row : sp.report().ops)
            ops[row.name].push_back({row.calls_per_step, op_seconds(row, cupti != nullptr)});
        step_seconds.push_back(r.seconds);
    }
    ProbeMeasure m;
    for (const auto& [name, list] : ops) {
        std::vector<double> secs;
        for (const OpMeasure& x : list)
            secs.push_back(x.seconds);
        m.ops[name] = {list.front().calls, median(secs)};
    }
    m.step_seconds = median(step_seconds);
    for (const ParamSlot& slot : trainer.model().params())
        m.trainable_elements += slot.trainable ? slot.numel : 0;
    return m;
}

// The collectives among the launcher's ranks: all-reduce, reduce-scatter and all-gather of fp32
// buffers from 4 KiB to 64 MiB, the median of five calls each, fitted to latency + bytes / bw.
std::vector<CollectiveTable> measure_collectives(Communicator& comm) {
    std::vector<CollectiveTable> out;
    const int W = comm.world_size();
    std::vector<float> buf(std::size_t{16} << 20, 1.0f);
    for (Collective op :
         {Collective::all_reduce, Collective::reduce_scatter, Collective::all_gather}) {
        std::vector<std::pair<double, double>> points;
        for (std::uint64_t n = 1024; n <= (std::uint64_t{16} << 20); n *= 4) {
            const std::uint64_t shard = n / static_cast<std::uint64_t>(W);
            auto call = [&] {
                if (op == Collective::all_reduce)
                    comm.all_reduce(buf.data(), n, DType::f32);
                else if (op == Collective::reduce_scatter)
                    comm.reduce_scatter(buf.data(), shard, DType::f32);
                else
                    comm.all_gather(buf.data(), shard, DType::f32);
            };
            std::vector<double> secs;
            comm.barrier();
            call();
            for (int rep = 0; rep < 5; ++rep) {
                const auto t0 = std::chrono::steady_clock::now();
                call();
                secs.push_back(seconds_since(t0));
            }
            points.emplace_back(static_cast<double>(ring_traffic(op, n, 4, W).sent_bytes),
                                median(secs));
        }
        out.push_back(fit_collective(op, W, points));
    }
    return out;
}

// Host-device copies of 64 MiB each way, and the host's AdamW update over fp32 states (what an
// offloaded optimizer runs), for a GPU profile.
HostDeviceCopy measure_host_device(EngineDevice& dev) {
    constexpr std::size_t kBytes = std::size_t{64} << 20;
    std::vector<char> host(kBytes, 1);
    void* d = dev.memory().allocate(kBytes);
    std::vector<double> up, down;
    for (int rep = 0; rep < 5; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        dev.copy_to_device(d, host.data(), kBytes);
        up.push_back(seconds_since(t0));
        t0 = std::chrono::steady_clock::now();
        dev.copy_to_host(host.data(), d, kBytes);
        down.push_back(seconds_since(t0));
    }
    dev.memory().deallocate(d, kBytes);
    const std::int64_t n = std::int64_t{8} << 20;
    std::vector<float> w(n, 0.5f), g(n, 0.01f), m(n), v(n);
    OptimizerTensor t{w.data(), g.data(), m.data(), v.data(), nullptr, n, 0.1f};
    OptimizerHyper h;
    h.lr = 1e-4f;
    const auto t0 = std::chrono::steady_clock::now();
    cpu::optimizer_update(h, &t, 1, DType::f32);
    const double adam = seconds_since(t0);
    return {kBytes / median(up), kBytes / median(down),
            optimizer_update_bytes(static_cast<double>(n), OptimizerKind::adamw, Precision::fp32,
                                   false) /
                adam};
}

std::string today() {
    const std::time_t now = std::time(nullptr);
    char buf[16];
    std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&now));
    return buf;
}

std::vector<Precision> precisions_of(const CalibrateFlags& f, DeviceKind device) {
    TimeFlags t;
    t.solve_precisions = !f.precisions.empty()        ? f.precisions
                         : device == DeviceKind::cuda ? "fp32,bf16-amp,fp8-amp"
                                                      : "fp32,bf16-amp";
    return solve_precisions(t);
}

// What the device is, and its MFU basis: a GPU's datasheet peaks, a CPU's measured sgemm rate.
DeviceProfile identify(DeviceKind device, Trainer* gpu_trainer) {
    DeviceProfile p;
    if (device == DeviceKind::cpu) {
        p.device = this_cpu();
        p.peak_flops_per_s = {{DType::f32, cpu::sgemm_peak_flops()}};
        p.memory_bytes_per_s = cpu::stream_copy_bandwidth();
        return p;
    }
    const std::string name = gpu_trainer->device()->name();
    const GpuSpec* spec = gpu_for_device_name(name);
    if (spec == nullptr)
        throw UsageError("napkin calibrate --device cuda: '" + name +
                         "' is not in the hardware table");
    p = datasheet_profile(*spec);  // its peaks and bandwidth; the tables are replaced below
    p.device.name = name;
    p.compute.clear();
    p.gaps.clear();
    p.host_device = measure_host_device(*gpu_trainer->device());
    return p;
}

std::string command_line(const CalibrateFlags& f, int world) {
    std::string c =
        world > 1 ? "mpirun -n " + std::to_string(world) + " napkin calibrate" : "napkin calibrate";
    c += " --device " + f.device;
    if (!f.precisions.empty()) c += " --precisions " + f.precisions;
    if (f.quick) c += " --quick";
    if (f.merge) c += " --merge";
    return c + " -o " + std::filesystem::path(f.out).filename().string();
}

void calibrate(const CalibrateFlags& f, Communicator& comm) {
    const DeviceKind device = parse_enum(kDeviceKindNames, f.device, "--device");
    for (const auto& [v, flag] : {std::pair{f.steps, "--steps"}, {f.warmup, "--warmup"}}) {
        if (v < 0) {
            throw UsageError(std::string(flag) + ": must be a positive integer (got " +
                             std::to_string(v) + ")");
        }
    }
    const bool cuda = device == DeviceKind::cuda;
    const int warmup = f.warmup > 0 ? f.warmup
                       : cuda       ? 2
                                    : 1,
              steps = f.steps > 0 ? f.steps
                      : cuda      ? 5
                                  : 3;
    const bool speaks = comm.rank() == 0;
    check_output_file("-o", f.out);  // before minutes of probes, not at the write
    // The profile --merge adds to, read (and refused if it is not one) before minutes of probes;
    // by every rank, so that all of them stop together.
    std::optional<DeviceProfile> merged_into;
    if (f.merge && std::filesystem::exists(f.out)) merged_into = read_device_profile(f.out);
    const std::string load_start = load_average();
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<Probe> probes = calibration_probes(device, precisions_of(f, device), f.quick);
    DeviceProfile p;
    SectionBuilder section;
    for (std::size_t i = 0; i < probes.size(); ++i) {
        comm.barrier();
        const auto t = std::chrono::steady_clock::now();
        const ProbeMeasure m = run_probe(probes[i], device, warmup, steps);
        section.add(build_op_plan(probe_model(probes[i]), probe_plan_inputs(probes[i])), m);
        if (speaks)
            std::printf("[%2zu/%zu] %-44s step %9.2f ms  (%.1f s, %.0f s in all)\n", i + 1,
                        probes.size(), probes[i].label().c_str(), m.step_seconds * 1e3,
                        seconds_since(t), seconds_since(t0));
        std::fflush(stdout);
    }
    std::unique_ptr<Trainer> gpu;  // a small model, for the device's identity and copies
    if (cuda) {
        TrainOptions o;
        o.model = probe_model(probes.front());
        o.plan = probe_plan_inputs(probes.front());
        o.device = device;
        gpu = std::make_unique<Trainer>(o);
    }
    p = identify(device, gpu.get());
    p.compute.push_back(section.build(cuda ? 0 : omp_get_max_threads()));
    if (comm.world_size() > 1) p.collectives = measure_collectives(comm);
    p.made = {"measured", command_line(f, comm.world_size()), build_id(), today(),
              "load average " + load_start + " at the start, " + load_average() + " at the end" +
                  (f.note.empty() ? "" : "; " + f.note)};
    if (!speaks) return;
    if (merged_into) {
        if (const std::string why = profile_mismatch(*merged_into, p.device); !why.empty())
            throw UsageError("--merge: " + f.out + ": " + why);
        p = merge_profiles(*merged_into, p);
    }
    write_device_profile(p, f.out);
    std::printf("wrote %s: %s, %zu probes in %.0f s (%s)\n", f.out.c_str(), p.device.name.c_str(),
                probes.size(), seconds_since(t0), p.made.conditions.c_str());
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
    auto f = std::make_shared<CalibrateFlags>();
    CLI::App* cmd = app.add_subcommand("calibrate",
                                       "Measure this device (the CPU, or --device cuda) and write "
                                       "its profile for the predicted time");
    cmd->add_option("-o,--out", f->out, "The profile to write (JSON; docs/FORMATS.md)")->required();
    cmd->add_option("--device", f->device, "cpu|cuda")->capture_default_str();
    cmd->add_option("--precisions", f->precisions,
                    "Recipes to measure, comma-separated (default: fp32,bf16-amp on a CPU, "
                    "fp32,bf16-amp,fp8-amp on a GPU: fp32 runs use their own tables)");
    cmd->add_option("--steps", f->steps, "Timed steps per probe (default 3 on a CPU, 5 on a GPU)");
    cmd->add_option("--warmup", f->warmup, "Untimed steps first (default 1 on a CPU, 2 on a GPU)");
    cmd->add_flag("--quick", f->quick, "A few small probes per recipe (seconds; for tests)");
    cmd->add_flag("--merge", f->merge, "Add what this run measures to the profile already at -o");
    cmd->add_option("--note", f->note, "What else ran on the machine, recorded in the profile");
    cmd->footer(
        "Examples:\n"
        "  napkin calibrate -o cpu.json\n"
        "  OMP_NUM_THREADS=1 mpirun -n 2 -x OMP_NUM_THREADS napkin calibrate --merge -o cpu.json\n"
        "  napkin calibrate --device cuda -o h100.json");
    cmd->callback([f] { run_with_ranks([&](Communicator& comm) { calibrate(*f, comm); }); });
}

}  // namespace napkin::cli
