// Internal to the run_data loader: simdjson (DOM) with napkin's limits and the small readers the
// memory and report parsers share; the trace goes through profiler/trace_reader.h. Not used by
// the panels.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <simdjson.h>

#include "profiler/trace_reader.h"
#include "viewer/run_data.h"

namespace napkin::viewer {

namespace json {

// One parse: a parser with a bounded depth and the padded copy of the text it reads.
class Document {
public:
    // "" on success, else simdjson's message ("The JSON document was too deep ...").
    std::string parse(std::string_view text);
    // Parses text that is followed by at least SIMDJSON_PADDING readable bytes (not copied).
    std::string parse_padded_view(simdjson::padded_string_view text);
    simdjson::dom::element root() const { return root_; }

private:
    std::string parse_padded();
    std::string parse_buffer(const char* data, std::size_t size);
    simdjson::dom::parser parser_;
    simdjson::padded_string text_;
    simdjson::dom::element root_;
};

// A file's text for simdjson: the trace reader's JsonText (mapped with zero padding after it, no
// copy; or decompressed from gzip).
class MappedFile {
public:
    // "" or why the file cannot be read.
    std::string open(const std::filesystem::path& path) { return text_.open(path); }
    simdjson::padded_string_view view() const {
        return simdjson::padded_string_view(text_.data(), text_.size(),
                                            text_.size() + profiler::kTracePadding);
    }
    std::size_t size() const { return text_.size(); }

private:
    profiler::JsonText text_;
};

// A number of any JSON number type as a double; false for anything else.
inline bool number(simdjson::dom::element e, double& out) {
    switch (e.type()) {
        case simdjson::dom::element_type::DOUBLE:
            return !e.get_double().get(out);
        case simdjson::dom::element_type::INT64: {
            std::int64_t i = 0;
            if (e.get_int64().get(i)) return false;
            out = static_cast<double>(i);
            return true;
        }
        case simdjson::dom::element_type::UINT64: {
            std::uint64_t u = 0;
            if (e.get_uint64().get(u)) return false;
            out = static_cast<double>(u);
            return true;
        }
        default:
            return false;
    }
}
inline bool number(simdjson::simdjson_result<simdjson::dom::element> v, double& out) {
    simdjson::dom::element e;
    if (v.get(e)) return false;
    return number(e, out);
}

// A string as is, a number printed, anything else as compact JSON.
std::string scalar_text(simdjson::dom::element v);

}  // namespace json

// The trace reader (profiler/trace_reader.h), lenient, on a padded document. A top-level
// "schema" (napkin's memory snapshot or report given as a lone file) is reported in `top_schema`
// when asked for, also when the document is no trace.
std::string parse_trace_padded(simdjson::padded_string_view text, TraceData& out,
                               std::string* top_schema);
std::string parse_memory_document(simdjson::dom::element root, MemoryData& out);

}  // namespace napkin::viewer
