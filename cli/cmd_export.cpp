// napkin export RUN_DIR... -o FILE.json: merges the traces of several runs into one Chrome
// trace that ui.perfetto.dev opens, each run its own process ("fp32-run: napkin"), so runs that
// differ in precision, checkpointing or attention can be compared on one timeline. A
// data-parallel run (RUN_DIR, RUN_DIR/rank<r>) gives a process per rank ("z3 rank 1/4: napkin"),
// lined up on the steady clock the ranks share when they ran on one host.
//
// Each input is read whole (one at a time) and its events streamed to FILE.json.tmp, renamed into
// place at the end: a failure leaves no FILE.json. Process ids are renumbered across runs and
// flow ids offset so that launch -> kernel arrows never join two runs.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/check.h"
#include "profiler/chrome_trace_writer.h"
#include "profiler/run_folder.h"

namespace napkin::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct ExportFlags {
    std::vector<std::string> runs;
    std::string out;
};

// The run's name in the merged trace: its folder.
std::string run_label(const fs::path& trace_file) {
    std::error_code ec;
    const fs::path dir = fs::weakly_canonical(trace_file, ec).parent_path();
    const std::string name = dir.filename().string();
    return name.empty() ? trace_file.string() : name;
}

// One trace to merge: a run's, or one rank's of a data-parallel run.
struct TraceSource {
    fs::path file;
    std::string label;
    double offset_us = 0;  // added to every ts: the rank's clock zero after the earliest rank's
    int rank = 0, world = 1;
};

// The traces one argument names. A folder whose report.json is rank 0 of W > 1 ranks (or that
// holds a rank1 folder) is a data-parallel run: every rank's report must be there and agree, and
// every rank's trace.json. Otherwise only the trace is needed: a one-process run's report is not
// read (export works without it).
std::vector<TraceSource> trace_sources(const fs::path& arg) {
    std::error_code ec;
    std::optional<profiler::RunRanks> run;
    if (fs::is_directory(arg, ec)) {
        if (fs::exists(arg / "rank1", ec)) {
            run = profiler::load_run_ranks(arg);
        } else if (fs::exists(arg / "report.json", ec)) {
            std::optional<profiler::RankReport> first;
            try {
                first = profiler::load_run_report(arg);
            } catch (const InputError&) {
                // One process: its trace alone is what export needs.
            }
            if (first && first->world > 1) run = profiler::load_run_ranks(arg);
        }
    }
    if (!run || run->world <= 1) {
        const fs::path file = profiler::run_trace_path(arg);
        return {TraceSource{file, run_label(file)}};
    }
    std::vector<TraceSource> out;
    for (const profiler::RankReport& r : run->ranks) {
        out.push_back({profiler::run_trace_path(r.dir), r.label, 0.0, r.rank, r.world});
    }
    // Line the ranks up: each trace's ts 0 is its own process's start, read on the steady clock,
    // which processes on one host share.
    const auto& ranks = run->ranks;
    const bool comparable =
        std::all_of(ranks.begin(), ranks.end(), [&](const profiler::RankReport& r) {
            return r.clock_origin_ns.has_value() && !r.host.empty() && r.host == ranks.front().host;
        });
    if (comparable && ranks.size() > 1) {
        std::int64_t base = *ranks.front().clock_origin_ns;
        for (const profiler::RankReport& r : ranks)
            base = std::min(base, *r.clock_origin_ns);
        for (std::size_t i = 0; i < out.size(); ++i) {
            out[i].offset_us = static_cast<double>(*ranks[i].clock_origin_ns - base) / 1e3;
        }
    } else if (ranks.size() > 1) {
        std::printf(
            "napkin export: %s: the ranks' clocks do not compare (other hosts, or reports without "
            "communication.clock_origin_ns); each rank's timeline starts at its own zero\n",
            run->dir.string().c_str());
    }
    return out;
}

bool is_flow(const json& e) {
    const json& ph = e["ph"];
    return ph == "s" || ph == "t" || ph == "f";
}

void run_export(const ExportFlags& f) {
    if (f.out.empty())
        throw UsageError("-o: name the merged trace file (napkin export RUN_DIR... -o FILE.json)");
    // Every report is checked before the first trace is read: a bad rank fails fast, before the
    // output is opened.
    std::vector<TraceSource> sources;
    for (const std::string& arg : f.runs) {
        for (TraceSource& t : trace_sources(arg))
            sources.push_back(std::move(t));
    }
    profiler::AtomicFile out{fs::path(f.out)};
    if (!out.ok()) throw InputError(out.error());
    out.write("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    bool first = true;
    int next_pid = 1;
    std::uint64_t flow_base = 0;
    json merged_from = json::array();
    std::uint64_t total = 0;
    for (std::size_t run = 0; run < sources.size(); ++run) {
        const TraceSource& src = sources[run];
        const fs::path& file = src.file;
        json trace = profiler::read_json_file(file);
        if (!trace.is_object() || !trace.contains("traceEvents") ||
            !trace["traceEvents"].is_array()) {
            throw InputError(
                file.string() +
                ": not a Chrome trace (expected an object with a \"traceEvents\" array)");
        }
        const json* schema = nullptr;
        if (trace.contains("otherData") && trace["otherData"].is_object() &&
            trace["otherData"].contains("schema")) {
            schema = &trace["otherData"]["schema"];
        }
        profiler::check_schema(schema, file, profiler::kTraceSchema);
        const std::string& label = src.label;
        std::map<std::string, int> pids;  // the run's pid (dumped) -> merged pid
        std::uint64_t max_flow = 0;
        json& events = trace["traceEvents"];
        for (std::size_t i = 0; i < events.size(); ++i) {
            json& e = events[i];
            const std::string where = file.string() + ": event " + std::to_string(i);
            if (!e.is_object() || !e.contains("ph") || !e["ph"].is_string()) {
                throw InputError(where + " is not an event object with a string \"ph\"");
            }
            const std::string key = e.contains("pid") ? e["pid"].dump() : "";
            auto [it, fresh] = pids.emplace(key, next_pid);
            if (fresh) {
                ++next_pid;
                // Runs stay in the order given.
                out.write((first ? "" : ",\n") + json{{"name", "process_sort_index"},
                                                      {"ph", "M"},
                                                      {"pid", it->second},
                                                      {"args", {{"sort_index", it->second}}}}
                                                     .dump());
                first = false;
            }
            e["pid"] = it->second;
            if (src.offset_us != 0 && e.contains("ts") && e["ts"].is_number()) {
                e["ts"] = e["ts"].get<double>() + src.offset_us;
            }
            if (e["ph"] == "M" && e.value("name", "") == "process_name" && e.contains("args") &&
                e["args"].is_object()) {
                const std::string name = e["args"].contains("name") && e["args"]["name"].is_string()
                                             ? e["args"]["name"].get<std::string>()
                                             : "process";
                e["args"]["name"] = label + ": " + name;
            }
            if (e["ph"] == "M" && e.value("name", "") == "process_sort_index")
                continue;  // replaced above
            if (is_flow(e) && e.contains("id")) {
                if (e["id"].is_number_unsigned() || e["id"].is_number_integer()) {
                    const auto id = e["id"].get<std::uint64_t>();
                    max_flow = std::max(max_flow, id);
                    e["id"] = flow_base + id;
                } else {
                    e["id"] = "run" + std::to_string(run) + ":" + e["id"].dump();
                }
            }
            out.write(",\n" + e.dump());
            ++total;
        }
        flow_base += max_flow + 1;
        json from = {{"label", label}, {"file", file.string()}, {"events", events.size()}};
        if (src.world > 1) {
            from["rank"] = src.rank;
            from["world"] = src.world;
            from["ts_offset_us"] = src.offset_us;
        }
        merged_from.push_back(std::move(from));
        std::printf("napkin export: %s: %zu events\n", file.string().c_str(), events.size());
        std::fflush(stdout);
    }
    const json other = {{"schema", profiler::kTraceSchema}, {"merged_from", merged_from}};
    out.write("\n],\"otherData\":" + other.dump() + "}\n");
    const profiler::WriteResult r = out.commit();
    if (!r) throw InputError(r.error);
    std::printf(
        "napkin export: %s: %zu runs, %zu processes, %llu events (open in ui.perfetto.dev)\n",
        f.out.c_str(), f.runs.size(), sources.size(), static_cast<unsigned long long>(total));
}

}  // namespace

void add_export_command(CLI::App& app) {
    auto f = std::make_shared<ExportFlags>();
    CLI::App* cmd = app.add_subcommand(
        "export",
        "Merge the traces of several runs into one Perfetto-ready trace, each run its own process");
    cmd->add_option("runs", f->runs,
                    "Profiled run folders (napkin train --profile ...) or trace.json files")
        ->required();
    cmd->add_option("-o,--out", f->out, "The merged trace file to write")->required();
    cmd->footer(
        "A data-parallel run (mpirun -n W napkin train --zero S --profile ... --out RUN_DIR) gives "
        "a process "
        "per rank.\nErrors (exit 1): a missing folder, rank folder or trace, ranks that disagree "
        "on the world "
        "size or stage, malformed or truncated JSON, a trace from another format version. Nothing "
        "is written "
        "then.");
    cmd->callback([f] { run_export(*f); });
}

}  // namespace napkin::cli
