// Internal to the run_data loader: simdjson (DOM) with napkin's limits, and the small readers the
// trace, memory and report parsers share. Not used by the panels.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <simdjson.h>

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

// A file mapped read-only with zero pages after it, so that simdjson can read its padding past
// the end without a copy of the file (a copy of 150 MB costs as much as the parse).
class MappedFile {
public:
    MappedFile() = default;
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    // "" or why the file cannot be read.
    std::string open(const std::filesystem::path& path);
    simdjson::padded_string_view view() const {
        return simdjson::padded_string_view(static_cast<const char*>(base_), size_, mapped_);
    }
    std::size_t size() const { return size_; }

private:
    void* base_ = nullptr;
    std::size_t size_ = 0, mapped_ = 0;
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

// A string as is, a number printed, anything else as compact JSON: pid, tid and flow ids.
std::string scalar_text(simdjson::dom::element v);
// 12 for "12", "12 (main)"; 0 when the text does not start with a number.
std::int64_t leading_integer(std::string_view s);
std::string lower(std::string_view s);

}  // namespace json

// The trace parser reads On-Demand (no DOM tape: a 1,000,000-event trace touches half the memory).
// A top-level "schema" (napkin's memory snapshot or report given as a lone file) is reported in
// `top_schema` when asked for.
// What the reader hands to the indexing pass (run_index.cpp).
struct RawFlow {      // a flow end point as read, bound to an event once events are sorted
    std::string key;  // cat + '\x1f' + id
    std::uint32_t lane = 0;
    std::int64_t t_ns = 0;
    bool start = false;
    bool enclosing = true;  // "bp":"e" (or a start): the enclosing slice, else the next one
};
struct ProcessInfo {  // from process_name / process_sort_index metadata
    std::string name;
    std::int64_t sort = 0;
    bool has_sort = false;
};
// Orders the lanes, closes unclosed "B" ranges, nests ranges into depth levels, binds flows,
// finds device lanes and sorts counters.
void index_trace(TraceData& out, const std::unordered_map<std::string, ProcessInfo>& processes,
                 std::vector<std::vector<Event>>& open, std::vector<RawFlow>& flows);

std::string parse_trace_padded(simdjson::padded_string_view text, TraceData& out,
                               std::string* top_schema);
std::string parse_memory_document(simdjson::dom::element root, MemoryData& out);

}  // namespace napkin::viewer
