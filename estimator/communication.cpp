#include "estimator/communication.h"

#include <cmath>

#include "core/check.h"
#include "kernels/nf4.h"

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

// Adds a line and its traffic to the totals (and the time, with a link).
void append(CommunicationEstimate& c, const CommLine& l) {
    c.elements += l.elements;
    c.sent_bytes += l.sent_bytes;
    c.received_bytes += l.received_bytes;
    c.lines.push_back(l);
    if (c.link_bytes_per_s > 0) c.seconds = c.sent_bytes / c.link_bytes_per_s;
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

void add_frozen_base_gathers(CommunicationEstimate& c, const ModelConfig& cfg,
                             const ShardLayout& base, bool qlora, DType weights,
                             std::int64_t grad_accum) {
    if (c.zero != 3 || base.world <= 1) return;
    const std::vector<ParamTensor> tensors = param_tensors(cfg);
    NAPKIN_ASSERT(tensors.size() == base.param_unit.size(), "the layout is not this model's");
    const auto G = static_cast<double>(grad_accum);
    const std::uint64_t wb = storage_bytes(weights, 1);
    // Per unit: the bytes of its NF4 linears and of the rest, each gathered as its own buffer.
    CommLine nf4{"frozen base", Collective::all_gather, DType::nf4};
    CommLine rest{"frozen base", Collective::all_gather, weights};
    for (const ShardUnit& u : base.units) {
        std::uint64_t nf4_bytes = 0, rest_bytes = 0;
        std::int64_t nf4_elems = 0, rest_elems = 0;
        for (std::size_t i : u.params) {
            const ParamTensor& t = tensors[i];
            if (qlora && t.linear_weight) {
                nf4_bytes += nf4_storage_bytes(t.numel());
                nf4_elems += t.numel();
            } else {
                rest_bytes += static_cast<std::uint64_t>(t.numel()) * wb;
                rest_elems += t.numel();
            }
        }
        const double times = G * u.gathers_per_micro_batch;
        auto add = [&](CommLine& l, std::uint64_t bytes, std::int64_t elems) {
            if (bytes == 0) return;
            const RingTraffic t = ring_traffic(Collective::all_gather, bytes, 1, base.world);
            l.calls += times;
            l.elements += times * static_cast<double>(elems);
            l.sent_bytes += times * static_cast<double>(t.sent_bytes);
            l.received_bytes += times * static_cast<double>(t.received_bytes);
        };
        add(nf4, nf4_bytes, nf4_elems);
        add(rest, rest_bytes, rest_elems);
    }
    for (CommLine* l : {&nf4, &rest}) {
        if (l->calls > 0) append(c, *l);
    }
}

void add_frozen_base_gathers_flat(CommunicationEstimate& c, int world, double numel,
                                  double bytes_per_element, DType dtype, std::int64_t grad_accum) {
    if (c.zero != 3 || world <= 1 || numel <= 0) return;
    const auto bytes = static_cast<std::uint64_t>(std::ceil(numel * bytes_per_element));
    const RingTraffic t = ring_traffic(Collective::all_gather, bytes, 1, world);
    const double times = 2.0 * static_cast<double>(grad_accum);
    CommLine l{"frozen base", Collective::all_gather, dtype};
    l.calls = times;
    l.elements = times * numel;
    l.sent_bytes = times * static_cast<double>(t.sent_bytes);
    l.received_bytes = times * static_cast<double>(t.received_bytes);
    append(c, l);
}

}  // namespace napkin
