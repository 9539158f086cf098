// trace_reader: napkin's one reader of Chrome Trace Event JSON (napkin's own traces, PyTorch's
// Kineto traces, any other tool's). Every consumer goes through it:
//   - trace_check (strict): every broken rule of docs/FORMATS.md is a problem, none is hidden;
//   - the viewer (lenient): bad events are skipped and counted, the rest is drawn;
//   - napkin export: the event stream (scan_trace) with each event's own JSON text.
//
// Two layers. scan_trace() walks the document with simdjson's On-Demand API (no DOM: a
// 1,000,000-event trace is read in well under a second, nothing deeper than an event's args is
// descended into, so deep nesting costs no recursion) and hands each element of "traceEvents"
// over as a ScannedEvent. read_trace() validates each one by the mode and builds TraceData
// (profiler/trace_data.h); then, once for both modes, it pairs "B" with "E" per track (in time
// order), nests each track's ranges into depth levels (1 ns tolerance at shared boundaries:
// partial overlaps are problems), and binds flows ("s" to the range enclosing it, "f" with
// "bp":"e" to the range enclosing it, else to the next one) in time order, whichever of the two
// the file holds first (Kineto writes some "f" before their "s").
//
// Time: "ts" and "dur" are microseconds, read exactly from their decimal text into int64 ns.
// A trace whose first timestamp lies more than 100 days from 0 is stamped in absolute time (an
// older Kineto writes Unix-epoch microseconds): it is rebased so that its earliest time is 0
// (TraceData::time_origin_ns keeps that time). An event more than 100 days from the trace's
// first timestamp, or longer than 100 days, is a problem. The strict mode also checks that the
// whole document is valid JSON (check_json_syntax); the lenient one reads only what it needs.
//
// Errors: a document that is not JSON, or not a trace (neither an object with "traceEvents" nor
// an array of events), is one line in TraceReadResult::error; in the lenient mode so is a trace
// where most events are invalid ("most" = more than half). Files: .json, or .json.gz when napkin
// was built with zlib (a gzip header is recognised by its bytes, not by the name).
// Tests: tests/profiler/trace_reader_test.cpp, tests/profiler/trace_check_test.cpp,
// tests/viewer/run_data_test.cpp; fuzzed by tests/viewer/fuzz.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "profiler/trace_data.h"

namespace napkin::profiler {

enum class TraceMode : std::uint8_t {
    strict,   // every problem reported (trace_check's rules, docs/FORMATS.md)
    lenient,  // bad events skipped and counted; most of them bad is an error
};

// What a read found, beside the TraceData.
struct TraceReadResult {
    std::string error;  // "" or why the document cannot be used, in one line
    // Strict: every broken rule, "event 12 ('h.0.attn.qkv', ph X): missing 'dur'", capped at
    // kMaxProblems (problems_omitted counts the rest). Lenient: empty (skips are in
    // TraceData::warnings).
    std::vector<std::string> problems;
    std::size_t problems_omitted = 0;
    std::map<std::string, std::size_t> phase_counts;  // "X" -> 9, as written (any string)
    std::string top_schema;  // a top-level "schema": napkin's memory.json or report.json

    static constexpr std::size_t kMaxProblems = 100;
    bool ok() const { return error.empty(); }
};

// A trace document in memory: `data` must be followed by kTracePadding readable bytes (JsonText
// provides them).
inline constexpr std::size_t kTracePadding = 64;  // simdjson's SIMDJSON_PADDING

TraceReadResult read_trace(const char* data, std::size_t size, TraceMode mode, TraceData& out);
// A document in memory, plain or gzip-compressed.
TraceReadResult read_trace_text(std::string_view text, TraceMode mode, TraceData& out);
// A file: mapped (or decompressed), then read_trace. A file that cannot be opened is the error.
TraceReadResult read_trace_file(const std::filesystem::path& path, TraceMode mode, TraceData& out);

// ---- the event stream ----

enum class JsonKind : std::uint8_t { absent, null, boolean, number, string, array, object };

// One field of an event as written: strings unescaped, numbers and literals as their JSON text,
// containers as "{...}" / "[...]" (skipped unread). Views into the document or the parser: valid
// during the callback.
struct ScannedField {
    JsonKind kind = JsonKind::absent;
    std::string_view text;
    double number = 0;  // kind number, in args only (an event's own fields are used as text)
    bool present() const { return kind != JsonKind::absent; }
    bool is_string() const { return kind == JsonKind::string; }
    bool is_scalar_id() const { return kind == JsonKind::string || kind == JsonKind::number; }
};

struct ScannedArg {
    std::string_view key;
    ScannedField value;
};

// One element of traceEvents. Non-objects have is_object false and nothing else.
struct ScannedEvent {
    std::size_t index = 0;
    bool is_object = false;
    std::string_view json;  // the event's own text, "{...}"
    ScannedField name, ph, cat, pid, tid, id, bp, scope /* "s" */, ts, dur;
    bool args_present = false, args_object = false;
    std::vector<ScannedArg> args;  // the first 256 entries of an "args" object
};

// A member of the document around the events, copied (it outlives the parse).
struct DocumentField {
    JsonKind kind = JsonKind::absent;
    std::string text;
    bool present() const { return kind != JsonKind::absent; }
    bool is_string() const { return kind == JsonKind::string; }
};

struct ScannedDocument {
    bool has_events = false;  // a "traceEvents" array, or the document is an array
    bool is_array = false;    // the bare-array form
    DocumentField display_time_unit, other_data, schema /* otherData.schema */, top_schema;
    std::size_t event_count = 0;
};

// Walks the document, calling `on_event` for each element of traceEvents in order. Returns ""
// or the document's error in one line ("not valid JSON (...)", "not a Chrome trace: ...").
// Values nobody reads (an arg's nested arrays, unknown fields) are skipped, not validated: a
// consumer that must refuse any invalid JSON checks the whole document first (check_json_syntax;
// the strict mode does).
std::string scan_trace(const char* data, std::size_t size,
                       const std::function<void(const ScannedEvent&)>& on_event,
                       ScannedDocument& doc);

// A "ts" or "dur" as read_trace reads it: microseconds from the decimal text to int64 ns, exact
// (Kineto's 19-digit epoch times keep their nanoseconds). False when not a number within range.
bool trace_time_ns(const ScannedField& f, std::int64_t& ns);
// Whether a trace whose earliest time is t_ns is stamped in absolute time (more than 100 days
// from 0), which read_trace rebases to start at 0.
bool is_absolute_time(std::int64_t t_ns);

// "" when the whole document is valid JSON, else "not valid JSON (...)": a full parse (simdjson's
// DOM), about as fast as the scan and as large in memory as the document, a few times over.
std::string check_json_syntax(const char* data, std::size_t size);

// Whether this build reads .json.gz (zlib was found when it was configured).
bool gzip_supported();

// The text of a JSON file in memory, followed by kTracePadding zero bytes: a private mapping
// (no copy of the file) or, for gzip, the decompressed bytes. Refuses what is not a regular file
// (a FIFO is never waited on).
class JsonText {
public:
    JsonText() = default;
    ~JsonText();
    JsonText(const JsonText&) = delete;
    JsonText& operator=(const JsonText&) = delete;
    // "" or why the file cannot be read ("cannot open the file (No such file or directory)").
    std::string open(const std::filesystem::path& path);
    // A document already in memory: copied with the padding, or inflated. "" or why not.
    std::string assign(std::string_view bytes);
    const char* data() const { return data_; }
    std::size_t size() const { return size_; }

private:
    std::string inflate(const char* compressed, std::size_t bytes);
    void* map_ = nullptr;
    std::size_t mapped_ = 0;
    std::string inflated_;
    const char* data_ = nullptr;
    std::size_t size_ = 0;
};

}  // namespace napkin::profiler
