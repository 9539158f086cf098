// napkin export RUN_DIR... -o FILE.json: merges the traces of several runs into one Chrome
// trace that ui.perfetto.dev opens, each run its own process ("fp32-run: napkin"), so runs that
// differ in precision, checkpointing or attention can be compared on one timeline. A
// data-parallel run (RUN_DIR, RUN_DIR/rank<r>) gives a process per rank ("z3 rank 1/4: napkin"),
// lined up on the steady clock the ranks share when they ran on one host.
//
// Each input is read by the trace reader's event stream (profiler/trace_reader.h), one at a time,
// and its events streamed to a durable temporary beside FILE.json (core/durable_file.h), renamed
// into place at the end: a failure leaves no FILE.json.
// Process ids are renumbered across runs and flow ids offset so that launch -> kernel arrows never
// join two runs; inputs with the same name are told apart ("run", "run (2)"). Other tools' traces
// merge too: Kineto's (torch.profiler, absolute times rebased to start at 0, as the reader does)
// and torch's legacy bare array. Every time is rewritten from its exact nanoseconds, each "dur"
// by trace_dur_us, so the merged file nests when its ts + dur are added in double.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "core/check.h"
#include "core/durable_file.h"
#include "profiler/chrome_trace_writer.h"
#include "profiler/run_folder.h"
#include "profiler/trace_reader.h"

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
    std::int64_t offset_ns = 0;  // added to every ts: the rank's clock zero after the earliest
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
        out.push_back({profiler::run_trace_path(r.dir), r.label, 0, r.rank, r.world});
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
            out[i].offset_ns = *ranks[i].clock_origin_ns - base;
        }
    } else if (ranks.size() > 1) {
        std::printf(
            "napkin export: %s: the ranks' clocks do not compare (other hosts, or reports without "
            "communication.clock_origin_ns); each rank's timeline starts at its own zero\n",
            run->dir.string().c_str());
    }
    return out;
}

// The merged file as it is written: process ids renumbered across runs, flow ids offset.
class Merger {
public:
    explicit Merger(DurableFile& out) : out_(out) {
        out_.write("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    }

    // Streams one trace's events into the merged file through the trace reader's event stream;
    // each event is rewritten (pid, ts, flow id, process name) and written through nlohmann, as
    // napkin has always written merged events. InputError naming the file on any problem.
    void add(const TraceSource& src) {
        profiler::JsonText text;
        if (std::string err = text.open(src.file); !err.empty())
            throw InputError(src.file.string() + ": " + err);
        pids_.clear();
        max_flow_ = 0;
        error_.clear();
        profiler::ScannedDocument doc;
        const std::string file = src.file.string();
        std::string err = profiler::check_json_syntax(text.data(), text.size());
        // First pass: the format (napkin's, by its schema, or another tool's: Kineto, torch's
        // legacy array) and the earliest time, which rebases a trace in absolute time.
        std::int64_t t_min_ns = std::numeric_limits<std::int64_t>::max();
        if (err.empty()) {
            err = profiler::scan_trace(
                text.data(), text.size(),
                [&](const profiler::ScannedEvent& e) {
                    std::int64_t t = 0;
                    if (e.ph.text != "M" && profiler::trace_time_ns(e.ts, t))
                        t_min_ns = std::min(t_min_ns, t);
                },
                doc);
        }
        if (!err.empty()) throw InputError(file + ": " + err);
        if (doc.schema.is_string()) {  // napkin's own: this build's version only
            const json schema = json(doc.schema.text);
            profiler::check_schema(&schema, src.file, profiler::kTraceSchema);
        }
        shift_ns_ = src.offset_ns;
        if (t_min_ns != std::numeric_limits<std::int64_t>::max() &&
            profiler::is_absolute_time(t_min_ns))
            shift_ns_ -= t_min_ns;
        err = profiler::scan_trace(
            text.data(), text.size(), [&](const profiler::ScannedEvent& e) { event(src, e); }, doc);
        if (!err.empty()) throw InputError(file + ": " + err);
        if (!error_.empty()) throw InputError(error_);
        flow_base_ += max_flow_ + 1;
        json from = {{"label", src.label}, {"file", file}, {"events", doc.event_count}};
        if (src.world > 1) {
            from["rank"] = src.rank;
            from["world"] = src.world;
            from["ts_offset_us"] = profiler::trace_us(src.offset_ns);
        }
        if (shift_ns_ != src.offset_ns) from["rebased_from_us"] = profiler::trace_us(t_min_ns);
        merged_from_.push_back(std::move(from));
        ++runs_;
        std::printf("napkin export: %s: %zu events\n", file.c_str(), doc.event_count);
        std::fflush(stdout);
    }

    std::uint64_t events() const { return total_; }

    void finish() {
        const json other = {{"schema", profiler::kTraceSchema}, {"merged_from", merged_from_}};
        out_.write("\n],\"otherData\":" + other.dump() + "}\n");
    }

private:
    void event(const TraceSource& src, const profiler::ScannedEvent& scanned) {
        if (!error_.empty()) return;
        const std::string where = src.file.string() + ": event " + std::to_string(scanned.index);
        if (!scanned.is_object || !scanned.ph.is_string()) {
            error_ = where + " is not an event object with a string \"ph\"";
            return;
        }
        json e;
        try {
            e = json::parse(scanned.json);
        } catch (const json::exception& ex) {  // inside a value the reader skipped unread
            error_ = where + ": not valid JSON (" + ex.what() + ")";
            return;
        }
        const std::string key = e.contains("pid") ? e["pid"].dump() : "";
        auto [it, fresh] = pids_.emplace(key, next_pid_);
        if (fresh) {
            ++next_pid_;
            // Runs stay in the order given.
            write(json{{"name", "process_sort_index"},
                       {"ph", "M"},
                       {"pid", it->second},
                       {"args", {{"sort_index", it->second}}}});
        }
        e["pid"] = it->second;
        const std::string_view ph = scanned.ph.text;
        retime(scanned, ph, e);
        const bool named = scanned.name.is_string();
        if (ph == "M" && named && scanned.name.text == "process_sort_index") return;  // above
        if (ph == "M" && named && scanned.name.text == "process_name" && e.contains("args") &&
            e["args"].is_object()) {
            const json& n = e["args"].contains("name") ? e["args"]["name"] : json();
            e["args"]["name"] =
                src.label + ": " + (n.is_string() ? n.get<std::string>() : "process");
        }
        if ((ph == "s" || ph == "t" || ph == "f") && e.contains("id")) {
            if (e["id"].is_number_unsigned() || e["id"].is_number_integer()) {
                const auto id = e["id"].get<std::uint64_t>();
                max_flow_ = std::max(max_flow_, id);
                e["id"] = flow_base_ + id;
            } else {
                e["id"] = "run" + std::to_string(runs_) + ":" + e["id"].dump();
            }
        }
        write(e);
        ++total_;
    }

    // "ts" from its exact ns, shifted; an X's "dur" through the writer's rule (trace_dur_us):
    // ts + dur added in double ends exactly where the range ends, never past a successor's or
    // parent's bound, whatever rounding the input's own text had.
    void retime(const profiler::ScannedEvent& scanned, std::string_view ph, json& e) const {
        std::int64_t ts_ns = 0, dur_ns = 0;
        if (!profiler::trace_time_ns(scanned.ts, ts_ns)) return;
        ts_ns += shift_ns_;
        e["ts"] = profiler::trace_us(ts_ns);
        if (ph == "X" && profiler::trace_time_ns(scanned.dur, dur_ns) && dur_ns >= 0)
            e["dur"] = profiler::trace_dur_us(ts_ns, dur_ns);
    }

    void write(const json& e) {
        out_.write((first_ ? "" : ",\n") + e.dump());
        first_ = false;
    }

    DurableFile& out_;
    bool first_ = true;
    int next_pid_ = 1;
    std::map<std::string, int> pids_;  // the run's pid (dumped) -> merged pid
    std::uint64_t flow_base_ = 0, max_flow_ = 0, total_ = 0;
    std::int64_t shift_ns_ = 0;  // added to the trace's times: rank offset, minus absolute start
    std::size_t runs_ = 0;
    json merged_from_ = json::array();
    std::string error_;  // the first problem of the trace being read
};

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
    std::map<std::string, int> seen;  // label -> inputs with it so far
    for (TraceSource& src : sources) {
        const int n = ++seen[src.label];
        if (n > 1) src.label += " (" + std::to_string(n) + ")";
    }
    std::vector<fs::path> inputs;
    for (const TraceSource& src : sources) {
        inputs.push_back(src.file);
        inputs.push_back(src.file.parent_path() / "report.json");
    }
    for (const std::string& arg : f.runs)
        inputs.emplace_back(arg);
    refuse_overwriting_input("-o", f.out, inputs);
    check_output_file("-o", f.out);
    // What an export killed mid-write (SIGTERM, kill -9) left beside its target: gone now.
    const fs::path target(f.out);
    remove_dead_temporaries(target.has_parent_path() ? target.parent_path() : fs::path("."));
    DurableFile out{target};
    if (!out.ok()) throw InputError(out.error());
    Merger merger(out);
    for (const TraceSource& src : sources)
        merger.add(src);
    merger.finish();
    if (!out.commit()) throw InputError(out.error());
    std::printf(
        "napkin export: %s: %zu runs, %zu processes, %llu events (open in ui.perfetto.dev)\n",
        f.out.c_str(), f.runs.size(), sources.size(),
        static_cast<unsigned long long>(merger.events()));
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
