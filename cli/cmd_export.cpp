// napkin export RUN_DIR... -o FILE.json: merges the traces of several runs into one Chrome
// trace that ui.perfetto.dev opens, each run its own process ("fp32-run: napkin"), so runs that
// differ in precision, checkpointing or attention can be compared on one timeline.
//
// Each input is read whole (one at a time) and its events streamed to FILE.json.tmp, renamed into
// place at the end: a failure leaves no FILE.json. Process ids are renumbered across runs and
// flow ids offset so that launch -> kernel arrows never join two runs.
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
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

bool is_flow(const json& e) {
    const json& ph = e["ph"];
    return ph == "s" || ph == "t" || ph == "f";
}

void run_export(const ExportFlags& f) {
    if (f.out.empty()) throw UsageError("-o: name the merged trace file (napkin export RUN_DIR... -o FILE.json)");
    profiler::AtomicFile out{fs::path(f.out)};
    if (!out.ok()) throw InputError(out.error());
    out.write("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    bool first = true;
    int next_pid = 1;
    std::uint64_t flow_base = 0;
    json merged_from = json::array();
    std::uint64_t total = 0;
    for (std::size_t run = 0; run < f.runs.size(); ++run) {
        const fs::path file = profiler::run_trace_path(f.runs[run]);
        json trace = profiler::read_json_file(file);
        if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array()) {
            throw InputError(file.string() + ": not a Chrome trace (expected an object with a \"traceEvents\" array)");
        }
        const json* schema = nullptr;
        if (trace.contains("otherData") && trace["otherData"].is_object() && trace["otherData"].contains("schema")) {
            schema = &trace["otherData"]["schema"];
        }
        profiler::check_schema(schema, file, profiler::kTraceSchema);
        const std::string label = run_label(file);
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
                out.write((first ? "" : ",\n") + json{{"name", "process_sort_index"}, {"ph", "M"}, {"pid", it->second},
                                                      {"args", {{"sort_index", it->second}}}}
                                                     .dump());
                first = false;
            }
            e["pid"] = it->second;
            if (e["ph"] == "M" && e.value("name", "") == "process_name" && e.contains("args") && e["args"].is_object()) {
                const std::string name = e["args"].contains("name") && e["args"]["name"].is_string()
                                             ? e["args"]["name"].get<std::string>()
                                             : "process";
                e["args"]["name"] = label + ": " + name;
            }
            if (e["ph"] == "M" && e.value("name", "") == "process_sort_index") continue;  // replaced above
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
        merged_from.push_back({{"label", label}, {"file", file.string()}, {"events", events.size()}});
        std::printf("napkin export: %s: %zu events\n", file.string().c_str(), events.size());
        std::fflush(stdout);
    }
    const json other = {{"schema", profiler::kTraceSchema}, {"merged_from", merged_from}};
    out.write("\n],\"otherData\":" + other.dump() + "}\n");
    const profiler::WriteResult r = out.commit();
    if (!r) throw InputError(r.error);
    std::printf("napkin export: %s: %zu runs, %llu events (open in ui.perfetto.dev)\n", f.out.c_str(), f.runs.size(),
                static_cast<unsigned long long>(total));
}

}  // namespace

void add_export_command(CLI::App& app) {
    auto f = std::make_shared<ExportFlags>();
    CLI::App* cmd = app.add_subcommand(
        "export", "Merge the traces of several runs into one Perfetto-ready trace, each run its own process");
    cmd->add_option("runs", f->runs, "Profiled run folders (napkin train --profile ...) or trace.json files")->required();
    cmd->add_option("-o,--out", f->out, "The merged trace file to write")->required();
    cmd->footer("Errors (exit 1): a missing folder or trace, malformed or truncated JSON, a trace from another "
                "format version. Nothing is written then.");
    cmd->callback([f] { run_export(*f); });
}

}  // namespace napkin::cli
