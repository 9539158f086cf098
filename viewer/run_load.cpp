// Opening a run: the folder's three files or one file, the trace read by napkin's trace reader and
// the memory snapshot by simdjson, with napkin's limits, the report by its one reader; a file that
// fails becomes one line in RunData::errors.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <system_error>

#include "core/check.h"
#include "viewer/run_data.h"
#include "viewer/run_json.h"

namespace napkin::viewer {

namespace json {

std::string Document::parse_buffer(const char* data, std::size_t size) {
    if (size == 0) return "empty file";
    if (auto err = parser_.allocate(size, kMaxJsonDepth)) return simdjson::error_message(err);
    if (auto err = parser_.parse(data, size, false).get(root_)) return simdjson::error_message(err);
    return "";
}

std::string Document::parse_padded() {
    return parse_buffer(text_.data(), text_.size());
}

std::string Document::parse_padded_view(simdjson::padded_string_view text) {
    return parse_buffer(text.data(), text.size());
}

std::string Document::parse(std::string_view text) {
    text_ = simdjson::padded_string(text);
    return parse_padded();
}

std::string scalar_text(simdjson::dom::element v) {
    std::string_view s;
    if (!v.get_string().get(s)) return std::string(s);
    std::int64_t i = 0;
    if (v.type() == simdjson::dom::element_type::INT64 && !v.get_int64().get(i))
        return std::to_string(i);
    std::uint64_t u = 0;
    if (v.type() == simdjson::dom::element_type::UINT64 && !v.get_uint64().get(u))
        return std::to_string(u);
    double d = 0;
    if (v.type() == simdjson::dom::element_type::DOUBLE && !v.get_double().get(d)) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.17g", d);
        return buf;
    }
    std::string out = simdjson::minify(v);
    if (out.size() > 64) out.resize(64);
    return out;
}

}  // namespace json

std::string parse_memory(std::string_view text, MemoryData& out) {
    json::Document doc;
    if (std::string err = doc.parse(text); !err.empty()) return err;
    return parse_memory_document(doc.root(), out);
}

std::string parse_report(std::string_view text, ReportData& out) {
    try {
        out = profiler::parse_run_report(text);
        return "";
    } catch (const InputError& e) {
        out = ReportData{};
        return e.what();
    }
}

namespace {

enum class FileKind : std::uint8_t { trace, memory, report };

void load_file(RunData& run, const std::filesystem::path& path, const std::string& shown,
               FileKind kind, bool detect) {
    json::MappedFile file;
    if (std::string e = file.open(path); !e.empty()) {
        run.errors.push_back(shown + ": " + e);
        return;
    }
    const simdjson::padded_string_view text = file.view();
    std::string err;
    if (kind == FileKind::trace) {
        std::string schema;
        err = parse_trace_padded(text, run.trace, detect ? &schema : nullptr);
        run.has_trace = err.empty();
        // A lone file says what it is in "schema": napkin's memory snapshot or report.
        if (schema.rfind("napkin-memory/", 0) == 0) kind = FileKind::memory;
        if (schema.rfind("napkin-train-report/", 0) == 0) kind = FileKind::report;
        if (kind != FileKind::trace) {
            run.has_trace = false;
            run.trace = TraceData{};
        }
    }
    if (kind == FileKind::memory) {
        json::Document doc;
        err = doc.parse_padded_view(text);
        if (err.empty()) {
            err = parse_memory_document(doc.root(), run.memory);
            run.has_memory = err.empty() && !run.memory.empty();
            if (err.empty() && run.memory.skipped_rows > 0) {
                run.warnings.push_back(shown + ": " + std::to_string(run.memory.skipped_rows) +
                                       " malformed timeline rows skipped");
            }
        }
    } else if (kind == FileKind::report) {
        err = parse_report(std::string_view(text.data(), text.size()), run.report);
        run.has_report = err.empty();
    }
    if (!err.empty()) {
        run.errors.push_back(shown + ": " + err);
    } else if (run.has_trace) {
        for (const std::string& w : run.trace.warnings)
            run.warnings.push_back(shown + ": " + w);
    }
}

}  // namespace

RunData load_run(const std::filesystem::path& path) {
    RunData run;
    run.source = path;
    std::error_code ec;
    std::filesystem::path clean = path.lexically_normal();
    if (clean.has_filename() == false) clean = clean.parent_path();
    run.label = clean.filename().string();
    if (run.label.empty() || run.label == ".")
        run.label = std::filesystem::absolute(path, ec).filename().string();
    if (std::filesystem::is_directory(path, ec)) {
        bool any = false;
        const std::pair<const char*, FileKind> files[] = {{"trace.json", FileKind::trace},
                                                          {"memory.json", FileKind::memory},
                                                          {"report.json", FileKind::report}};
        for (const auto& [name, kind] : files) {
            const std::filesystem::path p = path / name;
            if (!std::filesystem::exists(p, ec)) continue;
            any = true;
            load_file(run, p, (std::filesystem::path(run.label) / name).string(), kind, false);
        }
        if (!any)
            run.errors.push_back(path.string() +
                                 ": no trace.json, memory.json or report.json in this folder");
    } else if (std::filesystem::exists(path, ec)) {
        load_file(run, path, path.filename().string(), FileKind::trace, true);
    } else {
        run.errors.push_back(path.string() + ": no such file or folder");
    }
    if (!run.has_memory && run.has_trace)
        run.has_memory = memory_from_counters(run.trace, run.memory);
    return run;
}

profiler::Roofline RunData::roofline() const {
    if (!has_report || !report.profile) return {};
    return {report.profile->roofline.peak_flops_per_s, report.profile->roofline.peak_bytes_per_s};
}

double RunData::peak_flops_per_s() const {
    if (!has_report) return 0;
    const profiler::Measurement& m = report.measured;
    for (const std::optional<double>& v : {m.peak_flops_per_s, m.sgemm_peak_flops_per_s}) {
        if (v && std::isfinite(*v) && *v > 0) return *v;
    }
    return 0;
}

}  // namespace napkin::viewer
