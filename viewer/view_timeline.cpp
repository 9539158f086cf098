// Timeline: one lane per (process, thread/stream) of every run, ranges nested by depth, time on
// a shared axis from each run's start. Boxes narrower than kMinBoxPx are merged into one grey
// box by skipping ahead with a binary search (the events of one depth level are start-sorted
// and do not overlap), so a frame costs O(pixels x levels), not O(events). A run's counters
// follow its lanes as step charts (timeline_counters.cpp).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>

#include <imgui.h>

#include "viewer/timeline_counters.h"
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

struct Hit {
    int run = -1;
    std::uint32_t event = kNone;
    std::int64_t merged = 0;  // > 0: a merged box of this many events
    double merged_t0 = 0, merged_t1 = 0;
};

using Mapping = TimeAxis;

float lane_height(const Lane& l) {
    return static_cast<float>(std::max<std::size_t>(1, l.levels.size())) * kRowPx + kLaneGapPx;
}

void update_matches(TimelineState& s, const std::vector<RunData>& runs) {
    if (s.find_applied == s.find && s.matches.size() == runs.size()) return;
    s.find_applied = s.find;
    std::string needle;
    for (const char* c = s.find; *c != 0; ++c)
        needle += static_cast<char>(std::tolower(static_cast<unsigned char>(*c)));
    s.matches.assign(runs.size(), {});
    if (needle.empty()) return;
    for (std::size_t r = 0; r < runs.size(); ++r) {
        const StringTable& st = runs[r].trace.strings;
        s.matches[r].assign(st.size(), 0);
        for (std::uint32_t i = 0; i < st.size(); ++i) {
            std::string n = st[i];
            for (char& c : n)
                c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            s.matches[r][i] = n.find(needle) != std::string::npos ? 1 : 0;
        }
    }
}

bool matches(const TimelineState& s, int run, const Event& e) {
    return !s.find_applied.empty() && static_cast<std::size_t>(run) < s.matches.size() &&
           e.name < s.matches[run].size() && s.matches[run][e.name] != 0;
}

// The next match after the last one (in time, across runs); zooms the view onto it.
void find_next(TimelineState& s, const std::vector<RunData>& runs) {
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
        find_next(s, runs);
        return;
    }
    s.find_run = best_run;
    s.find_event = best;
    s.selected_run = best_run;
    s.selected_event = best;
    const Event& e = runs[best_run].trace.events[best];
    const double half = std::max(2.0 * static_cast<double>(e.dur_ns), 1000.0);
    s.t0_ns = static_cast<double>(e.start_ns) - half;
    s.t1_ns = static_cast<double>(e.end_ns()) + half;
}

std::string event_details(const RunData& run, const Event& e) {
    const TraceData& t = run.trace;
    const Lane& lane = t.lanes[e.lane];
    std::string s = t.name_of(e) + "\n";
    char buf[256];
    std::snprintf(buf, sizeof buf, "category %s, lane %s / %s\nstart %s, duration %s\n",
                  t.cat_of(e).empty() ? "-" : t.cat_of(e).c_str(), lane.process_name.c_str(),
                  lane.name.c_str(), fmt_duration_ns(static_cast<double>(e.start_ns)).c_str(),
                  fmt_duration_ns(static_cast<double>(e.dur_ns)).c_str());
    s += buf;
    if (e.args != kNone) {
        const EventArgs& a = t.args[e.args];
        if (std::isfinite(a.flops)) s += "FLOPs " + fmt_flops(a.flops) + "\n";
        if (std::isfinite(a.bytes)) s += "bytes " + fmt_bytes_short(a.bytes) + "\n";
        double flop_per_s =
            std::isfinite(a.achieved_gflop_per_s) ? a.achieved_gflop_per_s * 1e9 : NAN;
        if (!std::isfinite(flop_per_s) && std::isfinite(a.flops) && e.dur_ns > 0) {
            flop_per_s = a.flops / (static_cast<double>(e.dur_ns) * 1e-9);
        }
        if (std::isfinite(flop_per_s)) {
            std::snprintf(buf, sizeof buf, "achieved %.4g TFLOP/s", flop_per_s / 1e12);
            s += buf;
            if (run.peak_flops_per_s() > 0) {
                std::snprintf(buf, sizeof buf, " (%.1f%% of peak)",
                              100.0 * flop_per_s / run.peak_flops_per_s());
                s += buf;
            }
            s += "\n";
        }
        if (std::isfinite(a.achieved_gb_per_s)) {
            std::snprintf(buf, sizeof buf, "achieved %.4g GB/s\n", a.achieved_gb_per_s);
            s += buf;
        }
        if (!a.other.empty()) s += a.other + "\n";
    }
    if (e.flow_peer != kNone) {
        const Event& p = t.events[e.flow_peer];
        s += std::string(t.lanes[e.lane].device ? "launched by " : "flow to ") + t.name_of(p) +
             " on " + t.lanes[p.lane].name + "\n";
    }
    return s;
}

void draw_ruler(ImDrawList* dl, const Mapping& m, ImVec2 pos, float height) {
    const double span = m.t1 - m.t0;
    const double target = span * 110.0 / std::max(1.0f, m.x1 - m.x0);
    double step = std::pow(10.0, std::floor(std::log10(std::max(target, 1e-3))));
    for (double mult : {1.0, 2.0, 5.0, 10.0}) {
        if (step * mult >= target) {
            step *= mult;
            break;
        }
    }
    dl->AddRectFilled(ImVec2(m.x0, pos.y), ImVec2(m.x1, pos.y + height), IM_COL32(35, 35, 40, 255));
    const double first = std::ceil(m.t0 / step) * step;
    for (double t = first; t <= m.t1; t += step) {
        const float x = m.x(t);
        dl->AddLine(ImVec2(x, pos.y + height - 6), ImVec2(x, pos.y + height),
                    IM_COL32(160, 160, 170, 255));
        const std::string label = fmt_duration_ns(t);
        dl->AddText(ImVec2(x + 3, pos.y + 2), IM_COL32(190, 190, 200, 255), label.c_str());
    }
}

// One depth level of one lane. Returns the y of the box centre of `want` (for flows) if drawn.
void draw_level(ImDrawList* dl, const Mapping& m, const TimelineState& s, int run_index,
                const RunData& run, std::pair<std::uint32_t, std::uint32_t> level, float y,
                const ImVec2& mouse, Hit& hit, std::int64_t& drawn, std::int64_t& merged) {
    const auto& ev = run.trace.events;
    const auto begin = ev.begin() + level.first;
    const auto end = ev.begin() + level.second;
    auto start_before = [](const Event& e, double t) {
        return static_cast<double>(e.start_ns) < t;
    };
    auto it = std::lower_bound(begin, end, m.t0, start_before);
    if (it != begin) --it;  // the one before may reach into the window
    const float y1 = y + kRowPx - 1.0f;
    const bool mouse_row = mouse.y >= y && mouse.y < y1;
    const ImFont* font = ImGui::GetFont();
    const float font_size = ImGui::GetFontSize();
    while (it != end && static_cast<double>(it->start_ns) <= m.t1) {
        const Event& e = *it;
        float xa = m.x(static_cast<double>(e.start_ns));
        float xb = m.x(static_cast<double>(e.end_ns()));
        if (e.instant) {
            xb = xa + 1.0f;
            const float c = 0.5f * (y + y1);
            dl->AddTriangleFilled(ImVec2(xa, y + 2), ImVec2(xa - 4, c + 4), ImVec2(xa + 4, c + 4),
                                  event_color(run.trace.cat_of(e), run.trace.name_of(e)));
            if (mouse_row && std::fabs(mouse.x - xa) < 4) {
                hit.run = run_index;
                hit.event = static_cast<std::uint32_t>(it - ev.begin());
            }
            // Instants closer than a few pixels collapse into the one drawn.
            it = std::lower_bound(it + 1, end, m.t(xa + 4.0f), start_before);
            ++drawn;
            continue;
        }
        if (xb - xa < kMinBoxPx) {
            // Merge the run of tiny boxes that follows, pixel by pixel.
            float mx1 = std::max(xb, xa + 1.0f);
            std::int64_t n = 1;
            double t_last = static_cast<double>(e.end_ns());
            ++it;
            while (it != end) {
                auto next = std::lower_bound(it, end, m.t(mx1 + kMinBoxPx), start_before);
                if (next == it) break;  // a gap of at least kMinBoxPx: the merged box ends
                const Event& last = *(next - 1);
                if (m.x(static_cast<double>(last.end_ns())) -
                        m.x(static_cast<double>(last.start_ns)) >=
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
            dl->AddRectFilled(ImVec2(xa, y), ImVec2(std::max(mx1, xa + 1.0f), y1),
                              IM_COL32(120, 125, 140, 200));
            ++merged;
            if (mouse_row && mouse.x >= xa && mouse.x <= mx1 + 1.0f) {
                hit.run = run_index;
                hit.event = kNone;
                hit.merged = n;
                hit.merged_t0 = static_cast<double>(e.start_ns);
                hit.merged_t1 = t_last;
            }
            continue;
        }
        const std::uint32_t index = static_cast<std::uint32_t>(it - ev.begin());
        const float cxa = std::max(xa, m.x0 - 2.0f), cxb = std::min(xb, m.x1 + 2.0f);
        const ImU32 col = event_color(run.trace.cat_of(e), run.trace.name_of(e));
        dl->AddRectFilled(ImVec2(cxa, y), ImVec2(cxb, y1), col);
        const bool selected = s.selected_run == run_index && s.selected_event == index;
        if (selected) {
            dl->AddRect(ImVec2(cxa, y), ImVec2(cxb, y1), IM_COL32(255, 255, 255, 255), 0, 0, 2.0f);
        } else if (matches(s, run_index, e)) {
            dl->AddRect(ImVec2(cxa, y), ImVec2(cxb, y1), IM_COL32(255, 230, 0, 255), 0, 0, 2.0f);
        }
        if (cxb - cxa > 24.0f) {
            const std::string& name = run.trace.name_of(e);
            const ImVec4 clip(cxa + 2, y, cxb - 2, y1);
            dl->AddText(font, font_size, ImVec2(cxa + 3, y + 0.5f * (kRowPx - font_size) - 1),
                        IM_COL32(15, 15, 20, 255), name.c_str(), name.c_str() + name.size(), 0.0f,
                        &clip);
        }
        if (mouse_row && mouse.x >= cxa && mouse.x < cxb) {
            hit.run = run_index;
            hit.event = index;
            hit.merged = 0;
        }
        ++drawn;
        ++it;
    }
}

}  // namespace

void draw_timeline(TimelineState& s, const std::vector<RunData>& runs) {
    bool any = false;
    double t_min = 0, t_max = 0;
    for (const RunData& r : runs) {
        if (!r.has_trace || r.trace.empty()) continue;
        t_min = any ? std::min(t_min, static_cast<double>(r.trace.t_min_ns))
                    : static_cast<double>(r.trace.t_min_ns);
        t_max = any ? std::max(t_max, static_cast<double>(r.trace.t_max_ns))
                    : static_cast<double>(r.trace.t_max_ns);
        any = true;
    }
    if (!any) {
        empty_state(
            "No trace events. Open a run folder with a trace.json (napkin train --profile all "
            "--out DIR) "
            "or any Chrome trace file.");
        return;
    }
    if (t_max <= t_min) t_max = t_min + 1000;
    const double pad = (t_max - t_min) * 0.01;
    if (!(s.t1_ns > s.t0_ns)) {
        s.t0_ns = t_min - pad;
        s.t1_ns = t_max + pad;
    }

    // Toolbar: find, fit, the visible span, the keys.
    ImGui::SetNextItemWidth(220);
    const bool enter = ImGui::InputTextWithHint("##find", "find by name", s.find, sizeof s.find,
                                                ImGuiInputTextFlags_EnterReturnsTrue);
    s.find_x = 0.5f * (ImGui::GetItemRectMin().x + ImGui::GetItemRectMax().x);
    s.find_y = 0.5f * (ImGui::GetItemRectMin().y + ImGui::GetItemRectMax().y);
    update_matches(s, runs);
    ImGui::SameLine();
    if ((ImGui::Button("Next match") || enter) && s.find[0] != 0) find_next(s, runs);
    ImGui::SameLine();
    if (ImGui::Button("Fit")) {
        s.t0_ns = t_min - pad;
        s.t1_ns = t_max + pad;
    }
    ImGui::SameLine();
    ImGui::TextDisabled(
        "window %s | wheel or W/S zoom, drag or A/D pan, F fit, shift+wheel scroll lanes",
        fmt_duration_ns(s.t1_ns - s.t0_ns).c_str());

    const ImVec2 ruler_pos = ImGui::GetCursorScreenPos();
    const float width = ImGui::GetContentRegionAvail().x;
    Mapping m{s.t0_ns, s.t1_ns, ruler_pos.x + kGutterPx, ruler_pos.x + width - 14.0f};
    if (m.x1 - m.x0 < 50.0f) m.x1 = m.x0 + 50.0f;
    s.axis = m;
    draw_ruler(ImGui::GetWindowDrawList(), m, ruler_pos, kRulerPx);
    ImGui::Dummy(ImVec2(width, kRulerPx));

    ImGui::BeginChild("lanes", ImVec2(0, -ImGui::GetFrameHeightWithSpacing()), false,
                      ImGuiWindowFlags_NoScrollWithMouse);
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImVec2 origin = ImGui::GetCursorScreenPos();
    const ImVec2 win_pos = ImGui::GetWindowPos();
    const ImVec2 win_size = ImGui::GetWindowSize();
    const ImVec2 mouse = ImGui::GetIO().MousePos;
    const bool hovered = ImGui::IsWindowHovered();
    Hit hit;
    s.drawn_boxes = 0;
    s.merged_boxes = 0;
    s.counter_rects = 0;
    std::string counter_tip;
    std::vector<std::vector<float>>& lane_y = s.lane_y;
    lane_y.resize(runs.size());
    float y = origin.y;
    dl->PushClipRect(win_pos, ImVec2(win_pos.x + win_size.x, win_pos.y + win_size.y), true);
    for (std::size_t r = 0; r < runs.size(); ++r) {
        const RunData& run = runs[r];
        if (!run.has_trace || run.trace.empty()) continue;
        dl->AddRectFilled(ImVec2(win_pos.x, y), ImVec2(win_pos.x + win_size.x, y + kRunHeaderPx),
                          IM_COL32(45, 50, 65, 255));
        dl->AddText(ImVec2(win_pos.x + 4, y + 3), IM_COL32(200, 220, 255, 255), run.label.c_str());
        y += kRunHeaderPx;
        lane_y[r].assign(run.trace.lanes.size(), -1.0f);
        for (std::uint32_t li = 0; li < run.trace.lanes.size(); ++li) {
            const Lane& lane = run.trace.lanes[li];
            if (lane.events == 0) continue;
            const float h = lane_height(lane);
            lane_y[r][li] = y;
            if (y + h >= win_pos.y && y <= win_pos.y + win_size.y) {
                // Device lanes tinted; host lanes on the window's own background (fill rate).
                if (lane.device)
                    dl->AddRectFilled(ImVec2(win_pos.x, y), ImVec2(m.x1, y + h - 2),
                                      IM_COL32(30, 40, 32, 255));
                dl->AddLine(ImVec2(win_pos.x, y + h - 1), ImVec2(m.x1, y + h - 1),
                            IM_COL32(50, 50, 60, 255));
                const std::string label = lane.process_name + " / " + lane.name;
                const ImVec4 clip(win_pos.x, y, win_pos.x + kGutterPx - 4, y + h);
                dl->AddText(
                    ImGui::GetFont(), ImGui::GetFontSize(), ImVec2(win_pos.x + 4, y + 2),
                    lane.device ? IM_COL32(170, 230, 170, 255) : IM_COL32(210, 210, 220, 255),
                    label.c_str(), label.c_str() + label.size(), 0.0f, &clip);
                dl->PushClipRect(ImVec2(m.x0, y), ImVec2(m.x1, y + h), true);
                for (std::size_t d = 0; d < lane.levels.size(); ++d) {
                    const float ly = y + static_cast<float>(d) * kRowPx;
                    if (ly + kRowPx < win_pos.y || ly > win_pos.y + win_size.y) continue;
                    draw_level(dl, m, s, static_cast<int>(r), run, lane.levels[d], ly,
                               hovered ? mouse : ImVec2(-1, -1), hit, s.drawn_boxes,
                               s.merged_boxes);
                }
                dl->PopClipRect();
            }
            y += h;
        }
        const float counters_h = counter_lanes_height(run.trace);
        if (counters_h > 0) {
            std::string tip =
                draw_counter_lanes(dl, s, run, m, win_pos.x, kGutterPx - 4, y, win_pos.y,
                                   win_pos.y + win_size.y, hovered ? mouse : ImVec2(-1, -1));
            if (!tip.empty()) counter_tip = std::move(tip);
            y += counters_h;
        }
    }
    const float content_h = y - origin.y;
    // Flows of the hovered (else the selected) event: launch -> kernel.
    auto anchor = [&](int r, std::uint32_t e) {
        const Event& ev = runs[r].trace.events[e];
        const float ly = lane_y[r][ev.lane] + static_cast<float>(ev.depth) * kRowPx + 0.5f * kRowPx;
        return ImVec2(std::clamp(m.x(static_cast<double>(ev.start_ns)), m.x0, m.x1), ly);
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
        dl->AddBezierCubic(a, ImVec2(a.x, (a.y + b.y) * 0.5f), ImVec2(b.x, (a.y + b.y) * 0.5f), b,
                           IM_COL32(255, 200, 60, 255), 2.0f);
        dl->AddCircleFilled(b, 4.0f, IM_COL32(255, 200, 60, 255));
        const float px0 = m.x(static_cast<double>(peer.start_ns)),
                    px1 = m.x(static_cast<double>(peer.end_ns()));
        const float py = lane_y[r][peer.lane] + static_cast<float>(peer.depth) * kRowPx;
        dl->AddRect(ImVec2(px0, py), ImVec2(std::max(px1, px0 + 2), py + kRowPx - 1),
                    IM_COL32(255, 200, 60, 255), 0, 0, 2.0f);
        break;
    }
    dl->PopClipRect();
    ImGui::Dummy(ImVec2(1, std::max(content_h, 1.0f)));

    // Input: wheel zooms around the mouse, drag pans, keys zoom and pan.
    ImGuiIO& io = ImGui::GetIO();
    const double span = s.t1_ns - s.t0_ns;
    if (hovered && io.MouseWheel != 0.0f) {
        if (io.KeyShift) {
            ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseWheel * 3.0f * kRowPx);
        } else {
            const double tm = mouse.x >= m.x0 ? m.t(mouse.x) : 0.5 * (s.t0_ns + s.t1_ns);
            const double f = std::pow(0.8, static_cast<double>(io.MouseWheel));
            s.t0_ns = tm - (tm - s.t0_ns) * f;
            s.t1_ns = tm + (s.t1_ns - tm) * f;
        }
    }
    if (hovered && ImGui::IsMouseClicked(ImGuiMouseButton_Left)) s.dragging = true;
    if (!ImGui::IsMouseDown(ImGuiMouseButton_Left)) s.dragging = false;
    if (s.dragging && io.MouseDelta.x != 0.0f) {
        const double dt =
            static_cast<double>(io.MouseDelta.x) / static_cast<double>(m.x1 - m.x0) * span;
        s.t0_ns -= dt;
        s.t1_ns -= dt;
    }
    if (hovered && ImGui::IsMouseReleased(ImGuiMouseButton_Left) &&
        std::fabs(ImGui::GetMouseDragDelta(ImGuiMouseButton_Left, 0.0f).x) < 3.0f) {
        s.selected_run = hit.run;
        s.selected_event = hit.event;
    }
    if (!io.WantTextInput) {  // the timeline is the only view using these keys
        const double step = 0.02 * span;
        const double mid = 0.5 * (s.t0_ns + s.t1_ns);
        if (ImGui::IsKeyDown('W')) {
            s.t0_ns = mid - 0.45 * span;
            s.t1_ns = mid + 0.45 * span;
        }
        if (ImGui::IsKeyDown('S')) {
            s.t0_ns = mid - 0.55 * span;
            s.t1_ns = mid + 0.55 * span;
        }
        if (ImGui::IsKeyDown('A')) {
            s.t0_ns -= step;
            s.t1_ns -= step;
        }
        if (ImGui::IsKeyDown('D')) {
            s.t0_ns += step;
            s.t1_ns += step;
        }
        if (ImGui::IsKeyPressed('F', false)) {
            s.t0_ns = t_min - pad;
            s.t1_ns = t_max + pad;
        }
    }
    // Keep the window sane: at least 10 ns, at most 100x the trace.
    const double full = (t_max - t_min) + 2 * pad;
    if (s.t1_ns - s.t0_ns < 10.0) s.t1_ns = s.t0_ns + 10.0;
    if (s.t1_ns - s.t0_ns > 100.0 * full) {
        s.t0_ns = t_min - pad;
        s.t1_ns = t_max + pad;
    }
    s.hovered_run = hovered ? hit.run : -1;
    s.hovered_event = hovered && hit.run >= 0 ? hit.event : kNone;
    s.hover_text.clear();
    if (hovered && !counter_tip.empty()) {
        s.hover_text = std::move(counter_tip);
    } else if (hovered && hit.run >= 0) {
        if (hit.event != kNone) {
            s.hover_text = event_details(runs[hit.run], runs[hit.run].trace.events[hit.event]);
        } else if (hit.merged > 0) {
            s.hover_text = std::to_string(hit.merged) + " events merged (" +
                           fmt_duration_ns(hit.merged_t1 - hit.merged_t0) +
                           "): zoom in to see them";
        }
    }
    if (!s.hover_text.empty()) tooltip_text(s.hover_text);
    ImGui::EndChild();

    // Status line: the selected event stays described here.
    if (s.selected_run >= 0 && s.selected_event != kNone &&
        static_cast<std::size_t>(s.selected_run) < runs.size() &&
        s.selected_event < runs[s.selected_run].trace.events.size()) {
        std::string d = event_details(runs[s.selected_run],
                                      runs[s.selected_run].trace.events[s.selected_event]);
        std::replace(d.begin(), d.end(), '\n', ' ');
        ImGui::TextUnformatted(d.c_str());
    } else {
        ImGui::TextDisabled("%lld boxes drawn, %lld merged; click a range for its args",
                            static_cast<long long>(s.drawn_boxes),
                            static_cast<long long>(s.merged_boxes));
    }
}

}  // namespace napkin::viewer
