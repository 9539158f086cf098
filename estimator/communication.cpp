#include "estimator/communication.h"

#include <cmath>

#include "core/check.h"

namespace napkin {

namespace {

// One line: `op` over every unit, `per_unit(u)` times per step.
template <class Times>
CommLine line(const ShardLayout& layout, std::string what, Collective op, DType dtype,
              Times per_unit) {
    CommLine l;
    l.what = std::move(what);
    l.op = op;
    l.dtype = dtype;
    const std::uint64_t b = storage_bytes(dtype, 1);
    for (const ShardUnit& u : layout.units) {
        if (u.padded == 0) continue;  // nothing trained in it: no collective
        const double times = per_unit(u);
        const RingTraffic t =
            ring_traffic(op, static_cast<std::uint64_t>(u.padded), b, layout.world);
        l.calls += times;
        l.elements += times * static_cast<double>(u.padded);
        l.sent_bytes += times * static_cast<double>(t.sent_bytes);
        l.received_bytes += times * static_cast<double>(t.received_bytes);
    }
    return l;
}

// Adds a line and its traffic to the totals (and the time, with a link).
void append(CommunicationEstimate& c, const CommLine& l) {
    c.elements += l.elements;
    c.sent_bytes += l.sent_bytes;
    c.received_bytes += l.received_bytes;
    c.lines.push_back(l);
    if (c.link_bytes_per_s > 0) c.seconds = c.sent_bytes / c.link_bytes_per_s;
}

}  // namespace

double paper_volume_factor(int zero, std::int64_t grad_accum) {
    const auto G = static_cast<double>(grad_accum);
    switch (zero) {
        case 2:
            return G + 1;  // a reduce-scatter every micro-batch, one all-gather
        case 3:
            return 3 * G;  // two all-gathers and a reduce-scatter every micro-batch
        default:
            return 2;  // one all-reduce, or one reduce-scatter and one all-gather
    }
}

std::string paper_volume_label(int zero, std::int64_t grad_accum) {
    if (grad_accum == 1) return zero == 3 ? "3 psi" : "2 psi";
    switch (zero) {
        case 2:
            return "(G + 1) psi";
        case 3:
            return "3 G psi";
        default:
            return "2 psi";
    }
}

CommunicationEstimate estimate_communication(const ShardLayout& layout, int zero,
                                             std::int64_t grad_accum, DType grads, DType weights,
                                             double link_bytes_per_s) {
    if (zero < 0 || zero > 3)
        throw UsageError("{zero}: must be 0, 1, 2 or 3 (got " + std::to_string(zero) + ")");
    if (grad_accum < 1) throw UsageError("{grad_accum}: must be a positive integer");
    if (link_bytes_per_s < 0) throw UsageError("{link_bytes_per_s}: must be positive");
    CommunicationEstimate c;
    c.world = layout.world;
    c.zero = zero;
    c.psi = static_cast<double>(layout.numel());
    c.padding = static_cast<double>(layout.padded() - layout.numel());
    c.paper_volume_elements = paper_volume_factor(zero, grad_accum) * c.psi;
    c.link_bytes_per_s = link_bytes_per_s;
    if (layout.world <= 1) return c;
    const auto G = static_cast<double>(grad_accum);
    auto once = [](const ShardUnit&) { return 1.0; };
    auto every_micro_batch = [G](const ShardUnit&) { return G; };
    switch (zero) {
        case 0:
            c.lines.push_back(line(layout, "gradients", Collective::all_reduce, grads, once));
            break;
        case 1:
            c.lines.push_back(line(layout, "gradients", Collective::reduce_scatter, grads, once));
            c.lines.push_back(line(layout, "parameters", Collective::all_gather, weights, once));
            break;
        case 2:
            c.lines.push_back(
                line(layout, "gradients", Collective::reduce_scatter, grads, every_micro_batch));
            c.lines.push_back(line(layout, "parameters", Collective::all_gather, weights, once));
            break;
        default:
            c.lines.push_back(
                line(layout, "parameters", Collective::all_gather, weights,
                     [G](const ShardUnit& u) { return G * u.gathers_per_micro_batch; }));
            c.lines.push_back(
                line(layout, "gradients", Collective::reduce_scatter, grads, every_micro_batch));
            break;
    }
    for (const CommLine& l : c.lines) {
        c.elements += l.elements;
        c.sent_bytes += l.sent_bytes;
        c.received_bytes += l.received_bytes;
    }
    if (link_bytes_per_s > 0) c.seconds = c.sent_bytes / link_bytes_per_s;
    return c;
}

void add_frozen_base_gathers(CommunicationEstimate& c, const std::vector<FrozenUnit>& frozen, DType weights,
                             std::int64_t grad_accum) {
    if (c.zero != 3 || c.world <= 1) return;
    const std::uint64_t wb = storage_bytes(weights, 1);
    const auto G = static_cast<double>(grad_accum);
    CommLine lines[2] = {{"frozen nf4", Collective::all_gather, weights},
                         {"frozen base", Collective::all_gather, weights}};
    for (std::size_t u = 0; u < frozen.size(); ++u) {
        const double times = G * frozen[u].gathers_per_micro_batch;
        for (int g = 0; g < 2; ++g) {
            const FrozenGroup& fg = frozen[u].groups[g];
            if (fg.padded == 0) continue;
            const RingTraffic t =
                ring_traffic(Collective::all_gather, static_cast<std::uint64_t>(fg.padded), wb, c.world);
            lines[g].calls += times;
            lines[g].elements += times * static_cast<double>(fg.padded);
            lines[g].sent_bytes += times * static_cast<double>(t.sent_bytes);
            lines[g].received_bytes += times * static_cast<double>(t.received_bytes);
        }
    }
    for (const CommLine& l : lines) {
        if (l.calls > 0) append(c, l);
    }
}

void add_frozen_base_gathers_flat(CommunicationEstimate& c, double numel, double bytes_per_param,
                                  bool qlora, DType weights, std::int64_t grad_accum) {
    if (c.zero != 3 || c.world <= 1 || numel <= 0) return;
    const std::uint64_t wb = storage_bytes(weights, 1);
    const auto elements = static_cast<std::uint64_t>(std::ceil(numel * bytes_per_param / static_cast<double>(wb)));
    const RingTraffic t = ring_traffic(Collective::all_gather, elements, wb, c.world);
    const double times = 2.0 * static_cast<double>(grad_accum);
    const auto w = static_cast<std::uint64_t>(c.world);
    CommLine l{qlora ? "frozen nf4" : "frozen base", Collective::all_gather, weights};
    l.calls = times;
    l.elements = times * static_cast<double>((elements + w - 1) / w * w);
    l.sent_bytes = times * static_cast<double>(t.sent_bytes);
    l.received_bytes = times * static_cast<double>(t.received_bytes);
    append(c, l);
}

void add_fp8_amax_reduce(CommunicationEstimate& c, std::int64_t history_floats) {
    if (c.world <= 1 || history_floats <= 0) return;
    const RingTraffic t = ring_traffic(Collective::all_reduce,
                                       static_cast<std::uint64_t>(history_floats), 4, c.world);
    CommLine l{"fp8 amaxes", Collective::all_reduce, DType::f32};
    l.calls = 1;
    l.elements = static_cast<double>(history_floats);
    l.sent_bytes = static_cast<double>(t.sent_bytes);
    l.received_bytes = static_cast<double>(t.received_bytes);
    append(c, l);
}

}  // namespace napkin
