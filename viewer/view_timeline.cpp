// Timeline: one lane per (process, thread/stream) of every run, ranges nested by depth, on the
// time window it shares with the memory charts (TimeView), labelled from the runs' start. Boxes
// narrower than kMinBoxPx are merged into one grey box by skipping ahead with a binary search
// (the events of one depth level are start-sorted and do not overlap), so a frame costs
// O(pixels x levels), not O(events). A run's counters follow its lanes as step charts
// (timeline_counters.cpp). Lane labels cut to the gutter show their whole name on hover.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>

#include <imgui.h>

#include "viewer/timeline_counters.h"
#include "viewer/timeline_range.h"
#include "viewer/view.h"
#include "viewer/widgets.h"

namespace napkin::viewer {

namespace {

constexpr float kGutterPx = 190.0f;  // lane labels
constexpr float kRowPx = kTimelineRowPx;
constexpr float kLaneGapPx = 6.0f;
constexpr float kRunHeaderPx = 20.0f;
constexpr float kRulerPx = 22.0f;
constexpr float kMinBoxPx = 2.0f;  // narrower boxes are merged

// What is under the pointer in the lanes.
struct Hit {
    int run = -1;
    std::uint32_t event = kNone;
    std::int64_t merged = 0;  // > 0: a merged box of this many events
    double merged_t0 = 0, merged_t1 = 0;
    std::string label_tip;  // over a lane's label or a counter lane: its text
};

// One frame of the lanes: where they are drawn and where the pointer is.
struct LanesFrame {
    ImDrawList* dl = nullptr;
    TimeAxis m;
    ImVec2 win_pos, win_size;
    ImVec2 mouse;  // (-1, -1) when the lanes are not hovered
    bool hovered = false;
    double origin_ns = 0;  // times in tooltips count from it
    bool visible(float y0, float y1) const {
        return y1 >= win_pos.y && y0 <= win_pos.y + win_size.y;
    }
};

using EventIt = std::vector<Event>::const_iterator;

bool start_before(const Event& e, double t) {
    return static_cast<double>(e.start_ns) < t;
}

float lane_height(const Lane& l) {
    return static_cast<float>(std::max<std::size_t>(1, l.levels.size())) * kRowPx + kLaneGapPx;
}

std::string lower(std::string s) {
    for (char& c : s)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

void update_matches(TimelineState& s, const std::vector<RunData>& runs) {
    if (s.find_applied == s.find && s.matches.size() == runs.size()) return;
    s.find_applied = s.find;
    const std::string needle = lower(s.find);
    s.matches.assign(runs.size(), {});
    if (needle.empty()) return;
    for (std::size_t r = 0; r < runs.size(); ++r) {
        const StringTable& st = runs[r].trace.strings;
        s.matches[r].assign(st.size(), 0);
        for (std::uint32_t i = 0; i < st.size(); ++i)
            s.matches[r][i] = lower(st[i]).find(needle) != std::string::npos ? 1 : 0;
    }
}

bool matches(const TimelineState& s, int run, const Event& e) {
    return !s.find_applied.empty() && static_cast<std::size_t>(run) < s.matches.size() &&
           e.name < s.matches[run].size() && s.matches[run][e.name] != 0;
}

// The event with its neighbourhood: twice its duration on each side (at least 1 us).
void show_event(TimeWindow& w, const Event& e) {
    const double half = std::max(2.0 * static_cast<double>(e.dur_ns), 1000.0);
    w = {static_cast<double>(e.start_ns) - half, static_cast<double>(e.end_ns()) + half};
}

// The next match after the last one (in time, across runs); zooms the view onto it.
void find_next(TimelineState& s, TimeWindow& w, const std::vector<RunData>& runs) {
    double after = -1e300;
    if (s.find_run >= 0 && s.find_event != kNone)
        after = static_cast<double>(runs[s.find_run].trace.events[s.find_event].start_ns);
    int best_run = -1;
    std::uint32_t best = kNone;
    double best_t = 1e300;
    for (std::size_t r = 0; r < runs.size(); ++r) {
        const auto& ev = runs[r].trace.events;
        for (std::uint32_t i = 0; i < ev.size(); ++i) {
            const double t = static_cast<double>(ev[i].start_ns);
            const bool later =
                t > after ||
                (t == after && (static_cast<int>(r) > s.find_run ||
                                (static_cast<int>(r) == s.find_run && i > s.find_event)));
            if (later && t < best_t && matches(s, static_cast<int>(r), ev[i])) {
                best_t = t;
                best_run = static_cast<int>(r);
                best = i;
            }
        }
    }
    if (best == kNone) {  // wrap around
        if (s.find_event == kNone) return;
        s.find_event = kNone;
        s.find_run = -1;
        find_next(s, w, runs);
        return;
    }
    s.find_run = s.selected_run = best_run;
    s.find_event = s.selected_event = best;
    show_event(w, runs[best_run].trace.events[best]);
}

// The ruler above the lanes: ticks from the runs' start; in the gutter, what the labels count
// from (the base when the zoom needs one: "3.7990 s +").
void draw_ruler(ImDrawList* dl, const TimeAxis& m, ImVec2 pos, double origin_ns) {
    dl->AddRectFilled(ImVec2(m.x0, pos.y), ImVec2(m.x1, pos.y + kRulerPx),
                      IM_COL32(35, 35, 40, 255));
    const TimeTicks ticks =
        draw_time_ticks(dl, m, origin_ns, pos.y + kRulerPx - 6, pos.y + kRulerPx, pos.y + 2,
                        IM_COL32(190, 190, 200, 255));
    const std::string from = ticks.base.empty() ? "time from start" : ticks.base + " +";
    const float w = ImGui::CalcTextSize(from.c_str()).x;
    dl->AddText(ImVec2(m.x0 - w - 6, pos.y + 2),
                ticks.base.empty() ? IM_COL32(120, 120, 130, 255) : IM_COL32(230, 230, 160, 255),
                from.c_str());
}

// Instants closer than a few pixels collapse into the one drawn; returns the next to look at.
EventIt draw_instant(LanesFrame& f, const RunData& run, int run_index, EventIt it, EventIt end,
                     float y, float y1, bool mouse_row, Hit& hit) {
    const Event& e = *it;
    const float xa = f.m.x(static_cast<double>(e.start_ns));
    const float c = 0.5f * (y + y1);
    f.dl->AddTriangleFilled(ImVec2(xa, y + 2), ImVec2(xa - 4, c + 4), ImVec2(xa + 4, c + 4),
                            event_color(run.trace.cat_of(e), run.trace.name_of(e)));
    if (mouse_row && std::fabs(f.mouse.x - xa) < 4) {
        hit.run = run_index;
        hit.event = static_cast<std::uint32_t>(it - run.trace.events.begin());
    }
    return std::lower_bound(it + 1, end, f.m.t(xa + 4.0f), start_before);
}

// From `it`, a box narrower than kMinBoxPx, the run of tiny boxes that follows, merged pixel by
// pixel into one grey box; returns the next event to look at.
EventIt draw_merged(LanesFrame& f, int run_index, EventIt it, EventIt end, float y, float y1,
                    bool mouse_row, Hit& hit) {
    const TimeAxis& m = f.m;
    const Event& e = *it;
    const float xa = m.x(static_cast<double>(e.start_ns));
    float mx1 = std::max(m.x(static_cast<double>(e.end_ns())), xa + 1.0f);
    std::int64_t n = 1;
    double t_last = static_cast<double>(e.end_ns());
    ++it;
    while (it != end) {
        auto next = std::lower_bound(it, end, m.t(mx1 + kMinBoxPx), start_before);
        if (next == it) break;  // a gap of at least kMinBoxPx: the merged box ends
        const Event& last = *(next - 1);
        if (m.x(static_cast<double>(last.end_ns())) - m.x(static_cast<double>(last.start_ns)) >=
            kMinBoxPx) {
            // A box wide enough to draw on its own ends the merge before it.
            n += (next - 1) - it;
            if (next - 1 != it) t_last = static_cast<double>((next - 2)->end_ns());
            it = next - 1;
            break;
        }
        n += next - it;
        t_last = static_cast<double>(last.end_ns());
        mx1 = std::max(mx1, m.x(t_last));
        it = next;
    }
    f.dl->AddRectFilled(ImVec2(xa, y), ImVec2(std::max(mx1, xa + 1.0f), y1),
                        IM_COL32(120, 125, 140, 200));
    if (mouse_row && f.mouse.x >= xa && f.mouse.x <= mx1 + 1.0f) {
        hit.run = run_index;
        hit.event = kNone;
        hit.merged = n;
        hit.merged_t0 = static_cast<double>(e.start_ns);
        hit.merged_t1 = t_last;
    }
    return it;
}

// One range wide enough to draw: its box, its outline when selected or matched, its name.
void draw_box(LanesFrame& f, const TimelineState& s, const RunData& run, int run_index,
              std::uint32_t index, float y, float y1, bool mouse_row, Hit& hit) {
    const Event& e = run.trace.events[index];
    const float xa = f.m.x(static_cast<double>(e.start_ns));
    const float xb = f.m.x(static_cast<double>(e.end_ns()));
    const float cxa = std::max(xa, f.m.x0 - 2.0f), cxb = std::min(xb, f.m.x1 + 2.0f);
    f.dl->AddRectFilled(ImVec2(cxa, y), ImVec2(cxb, y1),
                        event_color(run.trace.cat_of(e), run.trace.name_of(e)));
    if (s.selected_run == run_index && s.selected_event == index) {
        f.dl->AddRect(ImVec2(cxa, y), ImVec2(cxb, y1), IM_COL32(255, 255, 255, 255), 0, 0, 2.0f);
    } else if (matches(s, run_index, e)) {
        f.dl->AddRect(ImVec2(cxa, y), ImVec2(cxb, y1), IM_COL32(255, 230, 0, 255), 0, 0, 2.0f);
    }
    if (cxb - cxa > 24.0f) {
        const std::string& name = run.trace.name_of(e);
        const float font_size = ImGui::GetFontSize();
        const ImVec4 clip(cxa + 2, y, cxb - 2, y1);
        f.dl->AddText(
            ImGui::GetFont(), font_size, ImVec2(cxa + 3, y + 0.5f * (kRowPx - font_size) - 1),
            IM_COL32(15, 15, 20, 255), name.c_str(), name.c_str() + name.size(), 0.0f, &clip);
    }
    if (mouse_row && f.mouse.x >= cxa && f.mouse.x < cxb) {
        hit.run = run_index;
        hit.event = index;
        hit.merged = 0;
    }
}

// One depth level of one lane, culled to the window.
void draw_level(LanesFrame& f, TimelineState& s, int run_index, const RunData& run,
                std::pair<std::uint32_t, std::uint32_t> level, float y, Hit& hit) {
    const auto& ev = run.trace.events;
    const EventIt begin = ev.begin() + level.first;
    const EventIt end = ev.begin() + level.second;
    EventIt it = std::lower_bound(begin, end, f.m.t0, start_before);
    if (it != begin) --it;  // the one before may reach into the window
    const float y1 = y + kRowPx - 1.0f;
    const bool mouse_row = f.mouse.y >= y && f.mouse.y < y1;
    while (it != end && static_cast<double>(it->start_ns) <= f.m.t1) {
        if (it->instant) {
            it = draw_instant(f, run, run_index, it, end, y, y1, mouse_row, hit);
            ++s.drawn_boxes;
        } else if (f.m.x(static_cast<double>(it->end_ns())) -
                       f.m.x(static_cast<double>(it->start_ns)) <
                   kMinBoxPx) {
            it = draw_merged(f, run_index, it, end, y, y1, mouse_row, hit);
            ++s.merged_boxes;
        } else {
            draw_box(f, s, run, run_index, static_cast<std::uint32_t>(it - ev.begin()), y, y1,
                     mouse_row, hit);
            ++s.drawn_boxes;
            ++it;
        }
    }
}

// A lane's label in the gutter, cut to fit; over it, its whole name and what it holds.
void draw_lane_label(LanesFrame& f, const Lane& lane, float y, float h, Hit& hit) {
    const std::string label = lane.process_name + " / " + lane.name;
    const ImVec2 pos(f.win_pos.x + 4, y + 2);
    text_fitted(f.dl, pos, kGutterPx - 8,
                lane.device ? IM_COL32(170, 230, 170, 255) : IM_COL32(210, 210, 220, 255), label);
    if (f.mouse.x >= f.win_pos.x && f.mouse.x < f.win_pos.x + kGutterPx && f.mouse.y >= y &&
        f.mouse.y < y + h) {
        hit.label_tip = label + "\npid " + lane.pid + ", tid " + lane.tid + ": " +
                        (lane.device ? "device lane, " : "host lane, ") +
                        std::to_string(lane.events) + " events on " +
                        std::to_string(lane.levels.size()) + " levels";
    }
}

// One run: its header, its lanes, its counter lanes. Returns the y below them.
float draw_run(LanesFrame& f, TimelineState& s, int r, const RunData& run, float y, Hit& hit) {
    f.dl->AddRectFilled(ImVec2(f.win_pos.x, y),
                        ImVec2(f.win_pos.x + f.win_size.x, y + kRunHeaderPx),
                        IM_COL32(45, 50, 65, 255));
    f.dl->AddText(ImVec2(f.win_pos.x + 4, y + 3), IM_COL32(200, 220, 255, 255), run.label.c_str());
    y += kRunHeaderPx;
    std::vector<float>& lane_y = s.lane_y[static_cast<std::size_t>(r)];
    lane_y.assign(run.trace.lanes.size(), -1.0f);
    for (std::uint32_t li = 0; li < run.trace.lanes.size(); ++li) {
        const Lane& lane = run.trace.lanes[li];
        if (lane.events == 0) continue;
        const float h = lane_height(lane);
        lane_y[li] = y;
        if (f.visible(y, y + h)) {
            // Device lanes tinted; host lanes on the window's own background (fill rate).
            if (lane.device)
                f.dl->AddRectFilled(ImVec2(f.win_pos.x, y), ImVec2(f.m.x1, y + h - 2),
                                    IM_COL32(30, 40, 32, 255));
            f.dl->AddLine(ImVec2(f.win_pos.x, y + h - 1), ImVec2(f.m.x1, y + h - 1),
                          IM_COL32(50, 50, 60, 255));
            draw_lane_label(f, lane, y, h, hit);
            f.dl->PushClipRect(ImVec2(f.m.x0, y), ImVec2(f.m.x1, y + h), true);
            for (std::size_t d = 0; d < lane.levels.size(); ++d) {
                const float ly = y + static_cast<float>(d) * kRowPx;
                if (f.visible(ly, ly + kRowPx)) draw_level(f, s, r, run, lane.levels[d], ly, hit);
            }
            f.dl->PopClipRect();
        }
        y += h;
    }
    const float counters_h = counter_lanes_height(run.trace);
    if (counters_h > 0) {
        const CounterLanesFrame cf{f.dl,          f.m,         f.win_pos.x,
                                   kGutterPx - 4, f.win_pos.y, f.win_pos.y + f.win_size.y,
                                   f.mouse,       f.origin_ns};
        std::string tip = draw_counter_lanes(cf, s, run, y);
        if (!tip.empty()) hit.label_tip = std::move(tip);
        y += counters_h;
    }
    return y;
}

// The flow of the hovered (else the selected) event: launch -> kernel, its peer outlined.
void draw_flows(LanesFrame& f, const TimelineState& s, const std::vector<RunData>& runs,
                const Hit& hit) {
    auto anchor = [&](int r, std::uint32_t e) {
        const Event& ev = runs[r].trace.events[e];
        const float ly = s.lane_y[r][ev.lane] + (static_cast<float>(ev.depth) + 0.5f) * kRowPx;
        return ImVec2(std::clamp(f.m.x(static_cast<double>(ev.start_ns)), f.m.x0, f.m.x1), ly);
    };
    for (auto [r, e] :
         {std::pair{hit.run, hit.event}, std::pair{s.selected_run, s.selected_event}}) {
        if (r < 0 || e == kNone || static_cast<std::size_t>(r) >= runs.size()) continue;
        const Event& ev = runs[r].trace.events[e];
        if (ev.flow_peer == kNone) continue;
        const Event& peer = runs[r].trace.events[ev.flow_peer];
        const bool from_host = !runs[r].trace.lanes[ev.lane].device;
        const ImVec2 a = anchor(r, from_host ? e : ev.flow_peer);
        const ImVec2 b = anchor(r, from_host ? ev.flow_peer : e);
        const ImU32 col = IM_COL32(255, 200, 60, 255);
        f.dl->AddBezierCubic(a, ImVec2(a.x, (a.y + b.y) * 0.5f), ImVec2(b.x, (a.y + b.y) * 0.5f), b,
                             col, 2.0f);
        f.dl->AddCircleFilled(b, 4.0f, col);
        // Outlined within the time axis, not over the lane labels.
        const float px0 = std::max(f.m.x(static_cast<double>(peer.start_ns)), f.m.x0 - 2),
                    px1 = std::min(f.m.x(static_cast<double>(peer.end_ns())), f.m.x1 + 2);
        const float py = s.lane_y[r][peer.lane] + static_cast<float>(peer.depth) * kRowPx;
        f.dl->AddRect(ImVec2(px0, py), ImVec2(std::max(px1, px0 + 2), py + kRowPx - 1), col, 0, 0,
                      2.0f);
        break;
    }
}

// Find box, Next match, Fit, the window shown.
void draw_toolbar(TimelineState& s, TimeView& time, const std::vector<RunData>& runs) {
    ImGui::SetNextItemWidth(220);
    const bool enter = ImGui::InputTextWithHint("##find", "find by name", s.find, sizeof s.find,
                                                ImGuiInputTextFlags_EnterReturnsTrue);
    s.find_x = 0.5f * (ImGui::GetItemRectMin().x + ImGui::GetItemRectMax().x);
    s.find_y = 0.5f * (ImGui::GetItemRectMin().y + ImGui::GetItemRectMax().y);
    update_matches(s, runs);
    ImGui::SameLine();
    if ((ImGui::Button("Next match") || enter) && s.find[0] != 0) find_next(s, time.window, runs);
    ImGui::SameLine();
    if (ImGui::Button("Fit")) time.window = time.profiled;
    ImGui::SameLine();
    if (ImGui::Button("Whole run")) time.window = time.whole;
    ImGui::SameLine();
    ImGui::TextDisabled("%s | wheel zoom, drag pan, right-drag a range, F fit, ? keys",
                        window_text(time).c_str());
}

// The device time of the work event `e` of run `r` launched (0 when none): device_time_by_op of
// every run, computed once, on the first call.
std::int64_t device_ns_of(TimelineState& s, const std::vector<RunData>& runs, int r,
                          std::uint32_t e) {
    if (!s.device_ns_ready) {
        s.device_ns.clear();
        for (const RunData& run : runs)
            s.device_ns.push_back(device_time_by_op(run.trace));
        s.device_ns_ready = true;
    }
    const auto& d = s.device_ns[static_cast<std::size_t>(r)];
    return e < d.size() ? d[e] : 0;
}

// The text under the pointer: a counter's value or a lane's name, else the range's args, else
// the merged box's count.
void set_hover(TimelineState& s, const std::vector<RunData>& runs, const Hit& hit, bool hovered,
               double origin_ns) {
    s.hovered_run = hovered ? hit.run : -1;
    s.hovered_event = hovered && hit.run >= 0 ? hit.event : kNone;
    s.hover_text.clear();
    if (!hovered) return;
    if (!hit.label_tip.empty()) {
        s.hover_text = hit.label_tip;
    } else if (hit.run >= 0 && hit.event != kNone) {
        s.hover_text =
            event_details(runs[hit.run], runs[hit.run].trace.events[hit.event], origin_ns,
                          s.axis.ns_per_px(), device_ns_of(s, runs, hit.run, hit.event));
    } else if (hit.run >= 0 && hit.merged > 0) {
        s.hover_text = std::to_string(hit.merged) + " events merged (" +
                       fmt_duration_ns(hit.merged_t1 - hit.merged_t0) + "): zoom in to see them";
    }
    if (!s.hover_text.empty()) tooltip_text(s.hover_text);
}

// The status line: the selected event stays described here.
void draw_status_line(TimelineState& s, const std::vector<RunData>& runs, double origin_ns) {
    if (s.selected_run >= 0 && s.selected_event != kNone &&
        static_cast<std::size_t>(s.selected_run) < runs.size() &&
        s.selected_event < runs[s.selected_run].trace.events.size()) {
        std::string d = event_details(
            runs[s.selected_run], runs[s.selected_run].trace.events[s.selected_event], origin_ns,
            s.axis.ns_per_px(), device_ns_of(s, runs, s.selected_run, s.selected_event));
        std::replace(d.begin(), d.end(), '\n', ' ');
        ImGui::TextUnformatted(d.c_str());
    } else {
        ImGui::TextDisabled("%lld boxes drawn, %lld merged; click a range for its args",
                            static_cast<long long>(s.drawn_boxes),
                            static_cast<long long>(s.merged_boxes));
    }
}

bool any_trace(const std::vector<RunData>& runs) {
    return std::any_of(runs.begin(), runs.end(),
                       [](const RunData& r) { return r.has_trace && !r.trace.empty(); });
}

}  // namespace

bool select_event(TimelineState& s, TimeView& time, const std::vector<RunData>& runs,
                  const std::string& name, bool zoom) {
    int best_run = -1;
    std::uint32_t best = kNone;
    char best_match = 0;  // 2: the name itself, 1: part of it
    const std::string needle = lower(name);
    for (std::size_t r = 0; r < runs.size(); ++r) {
        const TraceData& t = runs[r].trace;
        std::vector<char> match(t.strings.size(), 0);  // by name id, once per name
        for (std::uint32_t i = 0; i < t.strings.size(); ++i) {
            match[i] = t.strings[i] == name                                    ? 2
                       : lower(t.strings[i]).find(needle) != std::string::npos ? 1
                                                                               : 0;
        }
        for (std::uint32_t i = 0; i < t.events.size(); ++i) {
            const char m = match[t.events[i].name];
            if (m == 0 || m < best_match) continue;
            if (m > best_match ||
                t.events[i].start_ns < runs[best_run].trace.events[best].start_ns) {
                best_run = static_cast<int>(r);
                best = i;
                best_match = m;
            }
        }
    }
    if (best == kNone) return false;
    s.selected_run = best_run;
    s.selected_event = best;
    if (zoom) show_event(time.window, runs[best_run].trace.events[best]);
    return true;
}

void draw_timeline(TimelineState& s, TimeView& time, const std::vector<RunData>& runs) {
    if (!any_trace(runs)) {
        empty_state(
            "No trace events. Open a run folder with a trace.json (napkin train --profile all "
            "--out DIR) or any Chrome trace file.");
        return;
    }
    if (time.window.empty()) time.window = time.profiled;
    draw_toolbar(s, time, runs);

    const ImVec2 ruler_pos = ImGui::GetCursorScreenPos();
    const float width = ImGui::GetContentRegionAvail().x;
    TimeAxis m{time.window.t0_ns, time.window.t1_ns, ruler_pos.x + kGutterPx,
               ruler_pos.x + std::max(width - 14.0f, kGutterPx + 50.0f)};
    s.axis = m;
    draw_ruler(ImGui::GetWindowDrawList(), m, ruler_pos, time.origin_ns);
    ImGui::Dummy(ImVec2(width, kRulerPx));

    const float status_h =
        static_cast<float>(1 + range_summary_lines(s, runs)) * ImGui::GetFrameHeightWithSpacing();
    ImGui::BeginChild("lanes", ImVec2(0, -status_h), false, ImGuiWindowFlags_NoScrollWithMouse);
    LanesFrame f;
    f.dl = ImGui::GetWindowDrawList();
    f.m = m;
    f.win_pos = ImGui::GetWindowPos();
    f.win_size = ImGui::GetWindowSize();
    f.hovered = ImGui::IsWindowHovered();
    f.mouse = f.hovered ? ImGui::GetIO().MousePos : ImVec2(-1, -1);
    f.origin_ns = time.origin_ns;
    const float top = ImGui::GetCursorScreenPos().y;
    s.drawn_boxes = s.merged_boxes = s.counter_rects = 0;
    s.lane_y.resize(runs.size());
    Hit hit;
    float y = top;
    f.dl->PushClipRect(f.win_pos, ImVec2(f.win_pos.x + f.win_size.x, f.win_pos.y + f.win_size.y),
                       true);
    for (std::size_t r = 0; r < runs.size(); ++r) {
        if (runs[r].has_trace && !runs[r].trace.empty())
            y = draw_run(f, s, static_cast<int>(r), runs[r], y, hit);
    }
    draw_flows(f, s, runs, hit);
    draw_range(f.dl, s, m, f.win_pos.y, f.win_pos.y + f.win_size.y);
    f.dl->PopClipRect();
    ImGui::Dummy(ImVec2(1, std::max(y - top, 1.0f)));

    // Input, after drawing: shift+wheel scrolls the lanes, the rest moves the shared window.
    const ImGuiIO& io = ImGui::GetIO();
    if (f.hovered && io.KeyShift && io.MouseWheel != 0.0f)
        ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseWheel * 3.0f * kRowPx);
    if (navigate_time(time, s.dragging, m, f.hovered, !io.KeyShift)) {
        s.selected_run = hit.run;
        s.selected_event = hit.event;
    }
    range_input(s, m, f.hovered);
    set_hover(s, runs, hit, f.hovered, time.origin_ns);
    ImGui::EndChild();
    draw_status_line(s, runs, time.origin_ns);
    draw_range_summaries(s, runs);
}

}  // namespace napkin::viewer
