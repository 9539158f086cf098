#include "profiler/run_folder.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/check.h"

namespace napkin::profiler {

namespace fs = std::filesystem;

namespace {

// nlohmann's "[json.exception.parse_error.101] parse error at line 3, column 5: syntax error
// while parsing object - unexpected end of input; expected '}'" without the bracketed id.
std::string parse_message(const std::string& what) {
    std::string m = what;
    if (!m.empty() && m.front() == '[') {
        const std::size_t close = m.find("] ");
        if (close != std::string::npos) m = m.substr(close + 2);
    }
    if (m.rfind("parse error at ", 0) == 0) m = m.substr(std::strlen("parse error at "));
    return m;
}

}  // namespace

nlohmann::json read_json_file(const fs::path& file) {
    std::error_code ec;
    if (!fs::exists(file, ec)) throw InputError(file.string() + ": no such file");
    if (fs::is_directory(file, ec))
        throw InputError(file.string() + ": is a folder, expected a JSON file");
    std::ifstream in(file, std::ios::binary);
    if (!in) throw InputError(file.string() + ": cannot open (" + std::strerror(errno) + ")");
    std::ostringstream text;
    text << in.rdbuf();
    if (text.str().empty()) throw InputError(file.string() + ": empty file, expected JSON");
    try {
        return nlohmann::json::parse(text.str());
    } catch (const nlohmann::json::parse_error& e) {
        throw InputError(file.string() + ": not valid JSON (" + parse_message(e.what()) + ")");
    }
}

void check_schema(const nlohmann::json* schema, const fs::path& file, std::string_view expected) {
    const std::string_view kind = expected.substr(0, expected.find('/'));
    if (schema == nullptr || !schema->is_string()) {
        throw InputError(file.string() + ": not a " + std::string(kind) + " file (no schema \"" +
                         std::string(expected) + "\")");
    }
    const std::string s = schema->get<std::string>();
    if (s == expected) return;
    if (s.rfind(std::string(kind) + "/", 0) == 0) {
        throw InputError(file.string() + ": format " + s + " is not supported (this napkin reads " +
                         std::string(expected) + ")");
    }
    throw InputError(file.string() + ": schema \"" + s + "\" is not a " + std::string(kind) +
                     " file");
}

const nlohmann::json& field(const nlohmann::json& doc, std::string_view path,
                            const fs::path& file) {
    const nlohmann::json* at = &doc;
    std::size_t start = 0;
    while (start <= path.size()) {
        const std::size_t dot = path.find('.', start);
        const std::string key(path.substr(
            start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
        if (!at->is_object() || !at->contains(key)) {
            throw InputError(file.string() + ": field '" + std::string(path) + "' is missing");
        }
        at = &(*at)[key];
        if (dot == std::string_view::npos) break;
        start = dot + 1;
    }
    return *at;
}

double number_field(const nlohmann::json& doc, std::string_view path, const fs::path& file) {
    const nlohmann::json& v = field(doc, path, file);
    if (!v.is_number())
        throw InputError(file.string() + ": field '" + std::string(path) + "' is not a number");
    return v.get<double>();
}

std::string string_field(const nlohmann::json& doc, std::string_view path, const fs::path& file) {
    const nlohmann::json& v = field(doc, path, file);
    if (!v.is_string())
        throw InputError(file.string() + ": field '" + std::string(path) + "' is not a string");
    return v.get<std::string>();
}

RunReport load_run_report(const fs::path& path) {
    std::error_code ec;
    if (!fs::exists(path, ec)) throw InputError(path.string() + ": no such folder");
    RunReport r;
    if (fs::is_directory(path, ec)) {
        r.dir = path;
        r.file = path / "report.json";
        if (!fs::exists(r.file, ec)) {
            throw InputError(r.file.string() + ": no such file (is " + path.string() +
                             " a napkin train --out folder?)");
        }
    } else {
        r.file = path;
        r.dir = path.parent_path();
    }
    r.report = read_json_file(r.file);
    if (!r.report.is_object()) throw InputError(r.file.string() + ": expected a JSON object");
    check_schema(r.report.contains("schema") ? &r.report["schema"] : nullptr, r.file,
                 kReportSchema);
    const fs::path norm = fs::weakly_canonical(r.dir, ec);
    r.label = (ec ? r.dir : norm).filename().string();
    if (r.label.empty()) r.label = r.dir.string();
    const auto comm = r.report.find("communication");
    if (comm != r.report.end() && !comm->is_null()) {
        auto integer = [&](const char* key, int lo) {
            const double v = number_field(r.report, std::string("communication.") + key, r.file);
            if (v != static_cast<double>(static_cast<int>(v)) || v < lo) {
                throw InputError(r.file.string() + ": field 'communication." + key +
                                 "' is not an integer >= " + std::to_string(lo));
            }
            return static_cast<int>(v);
        };
        r.world = integer("world", 1);
        r.rank = integer("rank", 0);
        r.zero = integer("zero", 0);
        if (r.rank >= r.world) {
            throw InputError(r.file.string() + ": field 'communication.rank' is " +
                             std::to_string(r.rank) + ", outside world size " +
                             std::to_string(r.world));
        }
        if (comm->contains("clock_origin_ns")) {
            const nlohmann::json& o = (*comm)["clock_origin_ns"];
            if (!o.is_number_integer()) {
                throw InputError(r.file.string() +
                                 ": field 'communication.clock_origin_ns' is not an integer");
            }
            r.clock_origin_ns = o.get<std::int64_t>();
        }
        if (comm->contains("host")) r.host = string_field(r.report, "communication.host", r.file);
    }
    return r;
}

std::string rank_label(const std::string& run_label, int rank, int world) {
    if (world <= 1) return run_label;
    return run_label + " rank " + std::to_string(rank) + "/" + std::to_string(world);
}

RunRanks load_run_ranks(const fs::path& path) {
    RunReport first = load_run_report(path);
    RunRanks run;
    run.dir = first.dir;
    run.label = first.label;
    run.world = first.world;
    run.zero = first.zero;
    const bool all = first.rank == 0 && first.world > 1;
    const fs::path first_file = first.file;
    if (first.rank > 0) {
        // RUN_DIR/rank<r> named alone: "<RUN_DIR's name> rank r/W".
        std::error_code ec;
        const fs::path parent = fs::weakly_canonical(first.dir, ec).parent_path();
        if (!ec && !parent.filename().empty()) run.label = parent.filename().string();
        first.label = rank_label(run.label, first.rank, first.world);
    }
    run.ranks.push_back(std::move(first));
    if (!all) return run;
    std::error_code ec;
    const std::string says = "rank 0 (" + first_file.string() + ") says ";
    for (int r = 1; r < run.world; ++r) {
        const fs::path dir = run.dir / ("rank" + std::to_string(r));
        if (!fs::is_directory(dir, ec)) {
            throw InputError(dir.string() + ": no such folder (rank " + std::to_string(r) +
                             " of the " + std::to_string(run.world) + " that " +
                             first_file.string() + " names)");
        }
        RunReport rr = load_run_report(dir);
        if (!rr.report.contains("communication") || rr.report["communication"].is_null()) {
            throw InputError(rr.file.string() + ": field 'communication' is missing, but " + says +
                             "world size " + std::to_string(run.world));
        }
        if (rr.world != run.world) {
            throw InputError(rr.file.string() + ": field 'communication.world' is " +
                             std::to_string(rr.world) + ", but " + says +
                             std::to_string(run.world));
        }
        if (rr.rank != r) {
            throw InputError(rr.file.string() + ": field 'communication.rank' is " +
                             std::to_string(rr.rank) + ", expected " + std::to_string(r) +
                             " (its folder is rank" + std::to_string(r) + ")");
        }
        if (rr.zero != run.zero) {
            throw InputError(rr.file.string() + ": field 'communication.zero' is " +
                             std::to_string(rr.zero) + ", but " + says + "ZeRO stage " +
                             std::to_string(run.zero));
        }
        rr.label = rank_label(run.label, r, run.world);
        run.ranks.push_back(std::move(rr));
    }
    run.ranks.front().label = rank_label(run.label, 0, run.world);
    const fs::path extra = run.dir / ("rank" + std::to_string(run.world));
    if (fs::exists(extra, ec)) {
        throw InputError(extra.string() + ": a rank folder beyond the world size " +
                         std::to_string(run.world) + " that " + first_file.string() +
                         " names (left from a larger run? remove it)");
    }
    return run;
}

fs::path run_trace_path(const fs::path& path) {
    std::error_code ec;
    if (!fs::exists(path, ec)) throw InputError(path.string() + ": no such folder");
    if (!fs::is_directory(path, ec)) return path;
    const fs::path t = path / "trace.json";
    if (!fs::exists(t, ec)) {
        throw InputError(t.string() +
                         ": no such file (profile the run: napkin train --profile all|steps:N-M)");
    }
    return t;
}

}  // namespace napkin::profiler
