// The link table. Sources: docs/HARDWARE.md, "Links" (one row per value).
#include "estimator/links.h"

#include <string>

#include "core/check.h"

namespace napkin {

const std::vector<LinkSpec>& link_table() {
    // NVLink: NVIDIA quotes total bandwidth, both directions summed; one direction is half.
    // PCIe x16: lanes x transfer rate x encoding efficiency (128b/130b from 3.0 on), one
    // direction. InfiniBand: the 4x port's data rate, one direction; one HCA per GPU as in DGX.
    //  name, full name, Gb/s per direction, source
    static const std::vector<LinkSpec> table = {
        {"nvlink3", "NVLink 3 (A100 SXM4, 12 links, 300 GB/s per direction)", 2400,
         "NVIDIA A100 datasheet: NVLink 600 GB/s"},
        {"nvlink4", "NVLink 4 (H100/H200 SXM, 18 links, 450 GB/s per direction)", 3600,
         "NVIDIA H100 datasheet: NVLink 900 GB/s"},
        {"nvlink5", "NVLink 5 (B200, 18 links, 900 GB/s per direction)", 7200,
         "NVIDIA Blackwell datasheet: NVLink 1.8 TB/s"},
        {"pcie3", "PCIe 3.0 x16 (8 GT/s per lane, 15.75 GB/s)", 8 * 16 * 128.0 / 130.0,
         "PCI-SIG PCI Express Base Specification 3.0"},
        {"pcie4", "PCIe 4.0 x16 (16 GT/s per lane, 31.5 GB/s)", 16 * 16 * 128.0 / 130.0,
         "PCI-SIG PCI Express Base Specification 4.0"},
        {"pcie5", "PCIe 5.0 x16 (32 GT/s per lane, 63 GB/s)", 32 * 16 * 128.0 / 130.0,
         "PCI-SIG PCI Express Base Specification 5.0"},
        {"ib-edr", "InfiniBand EDR 4x (100 Gb/s)", 100, "InfiniBand Trade Association roadmap"},
        {"ib-hdr", "InfiniBand HDR 4x (200 Gb/s)", 200, "InfiniBand Trade Association roadmap"},
        {"ib-ndr", "InfiniBand NDR 4x (400 Gb/s)", 400, "InfiniBand Trade Association roadmap"},
        {"ib-xdr", "InfiniBand XDR 4x (800 Gb/s)", 800, "InfiniBand Trade Association roadmap"},
    };
    return table;
}

const LinkSpec* find_link(std::string_view name) {
    for (const auto& l : link_table()) {
        if (l.name == name) return &l;
    }
    return nullptr;
}

const LinkSpec& link_or_throw(std::string_view name) {
    if (const LinkSpec* l = find_link(name)) return *l;
    std::string names;
    for (const auto& l : link_table()) {
        if (!names.empty()) names += '|';
        names += l.name;
    }
    throw UsageError("{link}: unknown link '" + std::string(name) + "' (expected " + names + ")");
}

}  // namespace napkin
