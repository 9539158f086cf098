#include "estimator/communication.h"

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

}  // namespace

CommunicationEstimate estimate_communication(const ShardLayout& layout, int zero,
                                             std::int64_t grad_accum, DType grads, DType weights,
                                             double link_bytes_per_s) {
    if (zero < 0 || zero > 3)
        throw UsageError("--zero: must be 0, 1, 2 or 3 (got " + std::to_string(zero) + ")");
    if (grad_accum < 1) throw UsageError("--grad-accum: must be a positive integer");
    if (link_bytes_per_s < 0) throw UsageError("--link-gbps: must be positive");
    CommunicationEstimate c;
    c.world = layout.world;
    c.zero = zero;
    c.psi = static_cast<double>(layout.numel());
    c.padding = static_cast<double>(layout.padded() - layout.numel());
    c.paper_volume_elements = (zero == 3 ? 3.0 : 2.0) * c.psi;
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

}  // namespace napkin
