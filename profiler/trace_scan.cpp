// The event stream of a Chrome trace: simdjson On-Demand over the document, each element of
// "traceEvents" handed over as a ScannedEvent (profiler/trace_reader.h).
#include <simdjson.h>

#include <string>
#include <string_view>

#include "profiler/trace_reader.h"

namespace napkin::profiler {

namespace {

namespace ondemand = simdjson::ondemand;
using simdjson::error_code;
using simdjson::SUCCESS;

static_assert(kTracePadding >= simdjson::SIMDJSON_PADDING);

constexpr std::size_t kMaxArgs = 256;
constexpr std::size_t kMaxDepth = 64;  // the parser's bound; events are read 4 levels deep

JsonKind kind_of(ondemand::json_type t) {
    switch (t) {
        case ondemand::json_type::array:
            return JsonKind::array;
        case ondemand::json_type::object:
            return JsonKind::object;
        case ondemand::json_type::number:
            return JsonKind::number;
        case ondemand::json_type::string:
            return JsonKind::string;
        case ondemand::json_type::boolean:
            return JsonKind::boolean;
        case ondemand::json_type::null:
            return JsonKind::null;
    }
    return JsonKind::null;
}

// A number or literal as written, without what follows it up to the next token: a number ends
// with a digit, true and false with 'e', null with 'l'.
std::string_view trimmed_token(std::string_view s) {
    while (!s.empty() &&
           (static_cast<unsigned char>(s.back() - '0') > 9 && s.back() != 'e' && s.back() != 'l')) {
        s.remove_suffix(1);
    }
    return s;
}

// Reads a value into a field: strings unescaped, numbers kept as written (and parsed unless
// `as_text`: an event's own fields are used as text, times parsed from it), literals checked,
// containers skipped unread. Any error is the document's. The kind is told by the first byte,
// strings and numbers first: this runs for every field of every event.
error_code read_field(ondemand::value& v, ScannedField& f, bool as_text = false) {
    const std::string_view token = v.raw_json_token();
    const char c = token.empty() ? '\0' : token[0];
    if (c == '"') {
        f.kind = JsonKind::string;
        return v.get_string().get(f.text);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        f.kind = JsonKind::number;
        f.text = trimmed_token(token);
        return as_text ? SUCCESS : v.get_double().get(f.number);
    }
    ondemand::json_type t;
    if (auto err = v.type().get(t)) return err;
    f.kind = kind_of(t);
    switch (t) {
        case ondemand::json_type::object:
            f.text = "{...}";
            return SUCCESS;
        case ondemand::json_type::array:
            f.text = "[...]";
            return SUCCESS;
        case ondemand::json_type::boolean: {
            f.text = trimmed_token(token);
            bool b = false;
            return v.get_bool().get(b);
        }
        case ondemand::json_type::null: {
            f.text = "null";
            bool null = false;
            if (auto err = v.is_null().get(null)) return err;
            return null ? SUCCESS : simdjson::N_ATOM_ERROR;
        }
        default:  // strings and numbers are read above
            return simdjson::INCORRECT_TYPE;
    }
}

error_code read_args(ondemand::value& v, ScannedEvent& e) {
    e.args_present = true;
    ondemand::json_type t;
    if (auto err = v.type().get(t)) return err;
    e.args_object = t == ondemand::json_type::object;
    if (!e.args_object) return SUCCESS;  // skipped unread
    ondemand::object obj;
    if (auto err = v.get_object().get(obj)) return err;
    for (auto field_result : obj) {
        if (auto err = field_result.error()) return err;
        ondemand::field& field = field_result.value_unsafe();
        ScannedArg a;
        if (auto err = field.unescaped_key().get(a.key)) return err;
        ondemand::value value = field.value();
        if (auto err = read_field(value, a.value)) return err;
        if (e.args.size() < kMaxArgs) e.args.push_back(a);
    }
    return SUCCESS;
}

// The field of an event that `key` names, or nullptr for those nobody reads (skipped unread).
// This runs for every field of every event: by length, then against constants.
ScannedField* slot_of(ScannedEvent& e, std::string_view key) {
    if (key.size() == 2) {
        if (key == "ph") return &e.ph;
        if (key == "ts") return &e.ts;
        if (key == "id") return &e.id;
        return key == "bp" ? &e.bp : nullptr;
    }
    if (key.size() == 3) {
        if (key == "cat") return &e.cat;
        if (key == "dur") return &e.dur;
        if (key == "pid") return &e.pid;
        return key == "tid" ? &e.tid : nullptr;
    }
    if (key == "name") return &e.name;
    if (key == "s") return &e.scope;
    return key == "bind_id" ? &e.id : nullptr;  // flow events v2 name their id so
}

error_code scan_event(ondemand::value ev, ScannedEvent& e) {
    e.is_object = false;
    e.json = {};
    e.name = e.ph = e.cat = e.pid = e.tid = e.id = e.bp = e.scope = e.ts = e.dur = ScannedField{};
    e.args_present = e.args_object = false;
    e.args.clear();
    ondemand::json_type type;
    if (auto err = ev.type().get(type)) return err;
    if (type != ondemand::json_type::object) return SUCCESS;  // skipped unread
    e.is_object = true;
    const char* start = ev.raw_json_token().data();
    ondemand::object obj;
    if (auto err = ev.get_object().get(obj)) return err;
    for (auto field_result : obj) {
        if (auto err = field_result.error()) return err;
        ondemand::field& field = field_result.value_unsafe();
        std::string_view key;
        if (auto err = field.unescaped_key().get(key)) return err;
        ondemand::value v = field.value();
        if (key == "args") {
            if (auto err = read_args(v, e)) return err;
        } else if (ScannedField* slot = slot_of(e, key)) {
            if (auto err = read_field(v, *slot, true)) return err;
        }
        // Other fields are skipped unread.
    }
    // The event's own text: up to the '}' before the iterator's next token.
    const char* next = nullptr;
    if (!ev.current_location().get(next) && next > start) {
        const char* end = next;
        while (end > start && end[-1] != '}')
            --end;
        e.json = std::string_view(start, static_cast<std::size_t>(end - start));
    }
    return SUCCESS;
}

class Scanner {
public:
    Scanner(const std::function<void(const ScannedEvent&)>& on_event, ScannedDocument& doc)
        : on_event_(on_event), doc_(doc) {}

    error_code events(ondemand::array events) {
        doc_.has_events = true;
        for (auto element : events) {
            ondemand::value v;
            if (auto err = element.get(v)) return err;
            event_.index = doc_.event_count++;
            if (auto err = scan_event(v, event_)) return err;
            on_event_(event_);
        }
        return SUCCESS;
    }

    // The members of a trace object: "traceEvents", "otherData" (for its schema),
    // "displayTimeUnit" and a top-level "schema"; anything else is skipped unread.
    error_code root(ondemand::object& root) {
        for (auto field_result : root) {
            if (auto err = field_result.error()) return err;
            ondemand::field& field = field_result.value_unsafe();
            std::string_view key;
            if (auto err = field.unescaped_key().get(key)) return err;
            ondemand::value v = field.value();
            ondemand::json_type t;
            if (auto err = v.type().get(t)) return err;
            if (key == "traceEvents" && t == ondemand::json_type::array) {
                ondemand::array events;
                if (auto err = v.get_array().get(events)) return err;
                if (auto err = this->events(events)) return err;
            } else if (key == "otherData") {
                doc_.other_data.kind = kind_of(t);
                if (t == ondemand::json_type::object) {
                    if (auto err = other_data(v)) return err;
                }
            } else if (key == "displayTimeUnit") {
                if (auto err = copy_field(v, doc_.display_time_unit)) return err;
            } else if (key == "schema") {
                if (auto err = copy_field(v, doc_.top_schema)) return err;
            }
        }
        return SUCCESS;
    }

private:
    error_code other_data(ondemand::value& v) {
        ondemand::value schema;
        const auto err = v.find_field_unordered("schema").get(schema);
        if (err == simdjson::NO_SUCH_FIELD) return SUCCESS;
        if (err) return err;
        return copy_field(schema, doc_.schema);
    }

    static error_code copy_field(ondemand::value& v, DocumentField& out) {
        ScannedField f;
        if (auto err = read_field(v, f)) return err;
        out.kind = f.kind;
        out.text = std::string(f.text);
        return SUCCESS;
    }

    const std::function<void(const ScannedEvent&)>& on_event_;
    ScannedDocument& doc_;
    ScannedEvent event_;
};

std::string json_error(error_code err) {
    return std::string("not valid JSON (") + simdjson::error_message(err) + ")";
}

}  // namespace

std::string check_json_syntax(const char* data, std::size_t size) {
    if (size == 0) return "empty file";
    simdjson::dom::parser parser;
    simdjson::dom::element root;
    if (auto err = parser.parse(data, size, false).get(root)) return json_error(err);
    return "";
}

std::string scan_trace(const char* data, std::size_t size,
                       const std::function<void(const ScannedEvent&)>& on_event,
                       ScannedDocument& doc) {
    doc = ScannedDocument{};
    if (size == 0) return "empty file";
    ondemand::parser parser;
    if (auto err = parser.allocate(size, kMaxDepth)) return json_error(err);
    ondemand::document d;
    const simdjson::padded_string_view text(data, size, size + kTracePadding);
    if (auto err = parser.iterate(text).get(d)) return json_error(err);
    ondemand::json_type type;
    if (auto err = d.type().get(type)) return json_error(err);
    Scanner scanner(on_event, doc);
    error_code err = SUCCESS;
    if (type == ondemand::json_type::array) {
        doc.is_array = true;
        ondemand::array events;
        err = d.get_array().get(events);
        if (!err) err = scanner.events(events);
    } else if (type == ondemand::json_type::object) {
        ondemand::object root;
        // An object that failed to open is never iterated (simdjson assumes a valid iterator).
        err = d.get_object().get(root);
        if (!err) err = scanner.root(root);
    } else {  // invalid JSON, or a JSON scalar
        std::string why = check_json_syntax(data, size);
        return !why.empty() ? why
                            : "not a Chrome trace: expected an object with 'traceEvents' or an "
                              "array of events";
    }
    // The whole document must be valid JSON, also past the events.
    const char* rest = nullptr;
    if (!err && !d.current_location().get(rest)) err = simdjson::TRAILING_CONTENT;
    if (err) return json_error(err);
    if (!doc.has_events) return "not a Chrome trace: missing 'traceEvents' array";
    return "";
}

}  // namespace napkin::profiler
