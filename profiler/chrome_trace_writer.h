// ChromeTraceWriter: streams profiler events into `trace.json` in the Chrome Trace Event format
// (JSON object form), which ui.perfetto.dev and chrome://tracing open:
//
//   {"displayTimeUnit":"ns","traceEvents":[ {event}, {event}, ... ],"otherData":{...}}
//
// Each event is one nlohmann object dumped on its own line as it arrives; only the array
// punctuation is written by hand. Conventions (docs/FORMATS.md): "ts"/"dur" are microseconds
// since the run start as doubles keeping the nanoseconds ("ts":12.345); "pid" is the run,
// "tid" the track id; ranges are complete events ("ph":"X") whose args carry flops, bytes and,
// when the duration is positive, achieved GFLOP/s, GB/s and arithmetic intensity.
//
// Files appear whole or not at all: the writer streams into a DurableFile (core/durable_file.h: a
// temporary of a unique name beside `path`, fsynced and renamed onto `path` in close()). A writer
// destroyed without close() (an exception unwinding a failed run) removes the temporary and
// leaves `path` as it was.
//
// Errors never throw once constructed: a failed open or write is kept in error() and turns the
// remaining writes into no-ops; close() reports it. Not thread-safe: one thread writes (drain
// the Recorder with take() and hand the events over).
// Tests: tests/profiler/chrome_trace_writer_test.cpp (written traces are parsed back).
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/durable_file.h"
#include "profiler/event.h"

namespace napkin::profiler {

struct ChromeTraceOptions {
    int pid = 1;  // the run; several runs can share a viewer
    std::string process_name = "napkin";
    int process_sort_index = 0;
    nlohmann::json other_data = nlohmann::json::object();  // run metadata, kept in "otherData"
};

class ChromeTraceWriter {
public:
    // Opens the temporary file and writes the header and the process metadata.
    explicit ChromeTraceWriter(std::filesystem::path path, ChromeTraceOptions options = {});
    ChromeTraceWriter(const ChromeTraceWriter&) = delete;
    ChromeTraceWriter& operator=(const ChromeTraceWriter&) = delete;

    bool ok() const { return file_.ok(); }
    const std::string& error() const { return file_.error(); }
    std::uint64_t events_written() const { return events_written_; }
    std::uint64_t events_failed() const { return events_failed_; }
    std::uint64_t bytes_written() const { return file_.bytes_written(); }
    const std::filesystem::path& tmp_path() const { return file_.tmp_path(); }

    // Names a track ("thread_name" and "thread_sort_index" metadata). Metadata may come
    // anywhere in the file: writing recorder.tracks() just before close() picks up tracks
    // added or renamed during the run (the CUDA backend naming the device).
    void write_track(const Track& track);
    void write_tracks(const std::vector<Track>& tracks);

    void write(const Event& event);
    void write(const std::vector<Event>& events);
    void write_range(const RangeEvent& e);
    void write_counter(const CounterEvent& e);
    void write_instant(const InstantEvent& e);
    void write_flow(const FlowEvent& e);

    // Adds (or replaces) a key of "otherData", written at close(): the run's config, the
    // recorder's dropped-event count ("dropped_events").
    void set_other_data(const std::string& key, nlohmann::json value);

    void flush() { file_.flush(); }
    // Closes the array and the object, and renames the file into place.
    WriteResult close();

private:
    void write_object(const nlohmann::ordered_json& event);

    DurableFile file_;
    ChromeTraceOptions options_;
    std::uint64_t events_written_ = 0;
    std::uint64_t events_failed_ = 0;  // lost to an exception while serializing (out of memory)
    bool closed_ = false;
    WriteResult close_result_;
};

// Microseconds since the run start, the trace's unit: 12345 ns -> 12.345.
inline double trace_us(std::int64_t ns) {
    return static_cast<double>(ns) / 1000.0;
}

// A range's "dur" in microseconds, chosen so that a reader adding doubles finds it where it is:
// trace_us(start_ns) + dur never passes trace_us(start_ns + dur_ns), and lands exactly on it
// whenever start_ns >= dur_ns (below it by an ulp only where a rounding tie allows no better). The
// plain quotient dur_ns / 1000 alone does not: 4952392.531 + 98.37 = 4952490.901000001 >
// 4952490.901, a kernel ending after its successor starts (or a child after its parent ends) by one
// ulp. So the quotient is kept where it adds up exactly, and otherwise end - ts is written
// (98.3699999...), which differs from it by ulps, far below a nanosecond: it reads back as dur_ns.
double trace_dur_us(std::int64_t start_ns, std::int64_t dur_ns);

// The args of a range as the trace shows them: flops, bytes, the derived rates, then the
// free-form args. Shared with anything else that writes ranges (the report, the viewer's tests).
nlohmann::ordered_json range_args(const RangeEvent& e);

}  // namespace napkin::profiler
